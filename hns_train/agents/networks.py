"""The paper's entity-attention + LSTM network (spec §6), used for both policy and value.

One `EntityNetwork` maps a sequence of (already normalised) observations to outputs:

    lidar (R,) --circular conv 9x3, ReLU, flatten--> (9R,)
    self vector s = observation_self ‖ lidar features                        (10 + 9R = 280)
    self token     = ReLU(dense_128(s))
    entity token i = ReLU(dense_128,type(row_i ‖ s))      one dense layer per entity type
    one residual block: x + W_o · MHA(LayerNorm(x)), 4 heads x 32, over [self, entities]
    features = [self token out ‖ masked mean of entity tokens out]            (256)
    ReLU(dense_256) -> LSTM 256 -> LayerNorm -> linear head (init std 0.01)

Attention keys are masked by the visibility masks (policy) or the existence masks (value). The
self token is always a valid key, so a query never sees an all-masked row and no NaN can arise;
with no entity in the mask the pooled half is zero ("nothing seen"). Masked entities reach the
output through no path: their keys get zero weight and their own tokens are left out of the
pool. The LSTM state is zeroed before every step flagged as an episode start.

The policy head has 3 x 11 + 2 + 2 = 37 logits, the value head 1 output. With the default sizes
each network has ≈0.81 M parameters (the LSTM holds 0.53 M), ≈1.6 M for policy + value.

How it is computed: the same function in few, large operations, since on a CPU the cost of the
small ones (and on a GPU their launches) is most of the time.
- The lidar convolution is one product with its circulant matrix (R, 9R), built from the
  convolution's 9x3 weights: no padded copy, output already in the flattened order.
- The self vector's share of every token (the self token's layer and each entity type's self
  columns) is one product; each type's rows add their own columns' product to their tokens.
- Tokens are laid out tokens-first, (L, N, d): q, k and v are one product each, and attention
  head h of row i is then the matrix at i·heads + h of (L, N·heads, 32), a batch the score and
  value products read where it lies. Scores are laid out keys outermost, (L, N·heads, L), so
  the softmax runs over the outermost axis (several times faster on a CPU than over an inner
  one), and the key mask is added in the pass that lays them out. The score scale is in q's
  weights, k's bias (which the softmax removes) is left out and v's joins the output's: fewer
  passes over the tokens.
- The block is read at two places only, the self token and the entity tokens' masked mean, and
  past the softmax it is linear in each query's row: the mean is taken over the attention
  weights and the block's inputs, so the value and out products run on two rows per agent, not
  on every token (the out product is a quarter of the block's projections).
- The LSTM's input-to-hidden product for all T steps is one product before the recurrence;
  only the hidden-to-hidden product stays in the step loop, and the loop has a backward of its
  own (`LSTMRecurrence`): one product and a few elementwise operations a step, every factor
  that does not depend on the recurrence taken for all steps at once, and the hidden-to-hidden
  weights' gradient one product over all steps. Its gates are `nn.LSTMCell`'s
  equations on its own parameters, the cell gate's tanh taken as 2σ(2x) - 1 so that one
  sigmoid gives all four (the cell gate's rows of the weights doubled: exact); the cell's
  tanh is taken so too (within 1.8e-7; `LSTMRecurrence.tanh` says why).
  Acting, one step without a gradient, runs the input and hidden products as one over
  [features ‖ h].
- What the forward derives from the weights (the circulant, the self columns side by side,
  q's scaled weights, the output's bias, the LSTM's summed biases) is kept between calls that
  record no gradient (acting), until a weight changes (`kept`).
The parameters are the layers' own (`nn.Linear`, `nn.Conv1d`, `nn.LSTMCell`, `nn.LayerNorm`),
so their names and shapes are the network's description above.
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Iterable, Mapping
from typing import TypeVar

import torch
import torch.nn.functional as F
from torch import nn
from torch.autograd.function import once_differentiable
from torch.optim.optimizer import register_optimizer_step_post_hook

from hns_train.agents.config import NetworkConfig
from hns_train.agents.observations import ObsLayout
from hns_train.envs.contract import LIDAR_KEY, SELF_KEY

LSTMState = tuple[torch.Tensor, torch.Tensor]  # (h, c), each (N, lstm_dim)
Derived = TypeVar("Derived")


class KeepsDerived(nn.Module):
    """A module that keeps weights derived from its parameters (`kept`) and drops them when
    `.to`, `.half` and the like convert its parameters (`nn.Module._apply`, which keeps the
    parameter objects and their version counters)."""

    def _apply(self, *args, **kwargs):
        self.__dict__.pop("_kept", None)
        return super()._apply(*args, **kwargs)


def kept(
    owner: KeepsDerived,
    name: str,
    build: Callable[[], Derived],
    sources: Iterable[torch.Tensor],
) -> Derived:
    """What `build` derives from the parameters `sources` (a circulant, a concatenation, a
    scaled copy): rebuilt on every call that autograd records, since its graph leads to the
    parameters; without one (acting), kept on `owner` until a source changes. A change is a
    write in place (the version counter moves: an optimiser step, a loaded state, PopArt's
    rescaling), another tensor (`load_state_dict(assign=True)`) or a conversion (`.to`).
    A fused optimiser step writes without moving the counter; `_count_fused_steps` moves it.
    Writes that bypass the counter (`.data =`, `.data.copy_`, a torch.distributed collective)
    go unseen: the one such write to the weights, `DataParallel.broadcast_state`, runs before
    the first act."""
    if torch.is_grad_enabled():
        return build()
    sources = tuple(sources)
    versions = [t._version for t in sources]
    cache = owner.__dict__.setdefault("_kept", _Kept())
    hit = cache.get(name)
    if hit is not None and hit[1] == versions and all(map(operator.is_, hit[0], sources)):
        return hit[2]
    value = build()
    cache[name] = (sources, versions, value)  # holding the sources keeps their identity unique
    return value


class _Kept(dict):
    """`kept`'s store on a module. A copy of the module starts without one: what it holds are
    the original's parameters and views of them."""

    def __deepcopy__(self, memo: dict) -> _Kept:
        return _Kept()

    def __reduce__(self) -> tuple:
        return _Kept, ()


def _count_fused_steps(optimizer: torch.optim.Optimizer, args: object, kwargs: object) -> None:
    """After every optimiser's step, in any code: the parameters a fused kernel wrote (torch's
    fused Adam, which PPO uses) get the version count an in-place write gives, for `kept`."""
    for group in optimizer.param_groups:
        if group.get("fused"):
            torch.autograd.graph.increment_version(list(group["params"]))


register_optimizer_step_post_hook(_count_fused_steps)


class CircularLidarConv(KeepsDerived):
    """1-D convolution around the ring of lidar rays, ReLU: (N, R) -> (N, filters * R), in
    `flatten` order (filter-major)."""

    def __init__(self, filters: int, kernel: int, rays: int) -> None:
        super().__init__()
        self.conv = nn.Conv1d(1, filters, kernel, padding=kernel // 2, padding_mode="circular")
        self.rays = rays
        # taps[r_in, k, r] = 1 where input ray r_in is tap k of output ray r (the ring wraps):
        # weight (F, K) @ taps = the circulant matrix (r_in, F, R) of the whole convolution
        out_ray = torch.arange(rays)
        tap = torch.arange(kernel)
        in_ray = (out_ray[None, :] + tap[:, None] - kernel // 2) % rays
        taps = torch.zeros(rays, kernel, rays)
        taps[in_ray, tap[:, None], out_ray[None, :]] = 1.0
        self.register_buffer("taps", taps, persistent=False)

    def matrix(self) -> tuple[torch.Tensor, torch.Tensor]:
        """The circulant matrix (R, F·R) and its bias (F·R,)."""
        circulant = torch.matmul(self.conv.weight[:, 0], self.taps).flatten(1)
        return circulant, self.conv.bias.repeat_interleave(self.rays)

    def forward(self, lidar: torch.Tensor) -> torch.Tensor:
        circulant, bias = kept(self, "matrix", self.matrix, self.conv.parameters())
        return F.relu(torch.addmm(bias, lidar, circulant))


class EntityEmbedding(nn.Module):
    """ReLU(dense(row ‖ self)) for every row of one entity type.

    The weight is one dense layer over the concatenation; `EntityNetwork.encode` applies its
    two column blocks separately: the same function without repeating the 280-wide self
    vector per row.
    """

    def __init__(self, row_dim: int, self_dim: int, out_dim: int) -> None:
        super().__init__()
        self.row_dim = row_dim
        self.dense = nn.Linear(row_dim + self_dim, out_dim)

    def row_weight(self) -> torch.Tensor:
        return self.dense.weight[:, : self.row_dim]

    def self_weight(self) -> torch.Tensor:
        return self.dense.weight[:, self.row_dim :]


class ResidualSelfAttention(KeepsDerived):
    """x + W_o · MHA(LayerNorm(x)) with key masking, read out at the self token and as a
    weighted mean over the entity tokens: (L, N, D) tokens first -> two (N, D)."""

    def __init__(self, dim: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.scale = (dim // heads) ** -0.5
        self.norm = nn.LayerNorm(dim)
        self.qkv = nn.Linear(dim, 3 * dim)
        self.out = nn.Linear(dim, dim)

    def projections(self) -> tuple[torch.Tensor, ...]:
        """q's weight and bias scaled, k's and v's weights, the output's bias with v's in it.

        The score scale is folded into q's weights (not a product's alpha, whose gradient is
        two more passes over the scores' inputs). k's bias adds q·b_k to every key of a query,
        which the softmax removes: k has none. v's bias reaches the output unchanged (each
        query's weights sum to 1), so it joins the output's bias."""
        (w_q, w_k, w_v), (b_q, _, b_v) = self.qkv.weight.chunk(3), self.qkv.bias.chunk(3)
        out_bias = torch.addmv(self.out.bias, self.out.weight, b_v)
        return w_q * self.scale, b_q * self.scale, w_k, w_v, out_bias

    def forward(
        self, x: torch.Tensor, key_bias: torch.Tensor, pool: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """`key_bias` (L, N·heads, 1): 0 for a key that may be attended to, -inf for a masked
        one. `pool` (N, L - 1): the entity tokens' weights in the mean (0 for a masked one).
        Returns the self token's output and the pooled entity tokens' outputs."""
        length, n, dim = x.shape
        y = self.norm(x)
        sources = (*self.qkv.parameters(), *self.out.parameters())
        w_q, b_q, w_k, w_v, out_bias = kept(self, "projections", self.projections, sources)
        # Tokens first, one product each for q, k and v: head h of row i is then the matrix
        # at i·heads + h of (L, N·heads, head_dim), a batch the products read in place.
        q, k, v = (
            F.linear(y, w, b).view(length, n * self.heads, -1).transpose(0, 1)
            for w, b in ((w_q, b_q), (w_k, None), (w_v, None))
        )
        # (keys, N·heads, queries): the softmax over keys runs over the outermost axis, about
        # 6x faster on a CPU than over a middle one and 20x than over a last axis of ~10. The
        # key mask's add lays the scores out so: an elementwise result takes its first
        # operand's layout, and the bias's is (keys, N·heads) (the scores first would give
        # the product's, which the softmax would copy). Written out rather than
        # F.scaled_dot_product_attention: for ~10 tokens the fused CPU kernel is about 3x slower.
        weights = (key_bias + torch.bmm(k, q.transpose(1, 2)).transpose(0, 1)).softmax(0)
        # Past the softmax the block is linear in each query's row, and only the self token and
        # the entity tokens' mean are read: the mean is taken over the attention weights and
        # the inputs, and the value and out products run on two rows per agent, not L.
        # (split and unbind, not indexing: their gradients are put together in one copy, where
        # an index's is a zeroed tensor of the whole size per index)
        self_weights, entity_weights = weights.split([1, length - 1], -1)
        pooled_weights = entity_weights.view(length, n, self.heads, length - 1) * pool[:, None]
        readout = torch.cat(
            [self_weights, pooled_weights.sum(-1).view(length, n * self.heads, 1)], -1
        )  # (keys, N·heads, 2)
        attended = torch.bmm(readout.permute(1, 2, 0), v)  # (N·heads, 2, head_dim)
        self_att, pooled_att = F.linear(
            attended.transpose(0, 1).reshape(2, n, dim), self.out.weight
        ).unbind(0)
        x_self, x_entities = x.split([1, length - 1])
        # the mean's weights sum to 1, or to 0 (no entity: the pooled half is zero)
        pooled_x = (pool.t().unsqueeze(-1) * x_entities).sum(0)
        self_out = x_self.squeeze(0) + self_att + out_bias
        pooled = pooled_x + pooled_att + pool.sum(1, keepdim=True) * out_bias
        return self_out, pooled


class LSTMRecurrence(torch.autograd.Function):
    """The LSTM's step loop, hidden-to-hidden only, with a backward of its own.

    For each step t, with h and c zeroed where `keep[t]` is False (an episode's first step):
        z = inputs[t] + h W_hh^T;  i, f, g, o = σ(z);  c = f c + i (2 g - 1);  h = o tanh(c)
    (g is the cell gate as 2σ(2x) - 1 = tanh(x): its rows of W_hh and `inputs` come doubled).

    Autograd would record ~10 operations a step and replay them with ~20; the backward here
    computes every factor that does not depend on the recurrence for all T steps at once, so
    that each step is one product and six elementwise operations, and W_hh's gradient is one
    product over all steps rather than T small ones summed one by one. It keeps the gates
    after the sigmoid and the cells, as autograd would.
    """

    @staticmethod
    def run(
        inputs: torch.Tensor,
        w_hh: torch.Tensor,
        h: torch.Tensor,
        c: torch.Tensor,
        keep: torch.Tensor,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """inputs (T, N, 4H): the input-to-hidden product with both biases, for every step;
        w_hh (4H, H); h, c (N, H), the state before step 0; keep (T, N, 1), False (0) at an
        episode's first step. Returns h at every step (T, N, H) and the last c (N, H). Without
        a gradient to compute (acting) the loop runs alone and keeps nothing."""
        args = (inputs, w_hh, h, c, keep.to(h.dtype))
        if torch.is_grad_enabled() and any(t.requires_grad for t in args[:4]):
            return LSTMRecurrence.apply(*args)
        hidden, c, _, _ = LSTMRecurrence.steps(*args, save=False)
        return hidden, c

    @staticmethod
    def cell(
        z: torch.Tensor,
        c: torch.Tensor,
        c_out: torch.Tensor | None = None,
        h_out: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """One step from its gates' pre-activations z (N, 4H), the cell gate's doubled, and the
        cell before it: the sigmoid in place in z, then the new c and h."""
        i, f, g, o = z.sigmoid_().chunk(4, 1)
        c = torch.addcmul(f * c - i, i, g, value=2.0, out=c_out)
        return c, torch.mul(o, LSTMRecurrence.tanh(c), out=h_out)

    @staticmethod
    def tanh(x: torch.Tensor, out: torch.Tensor | None = None) -> torch.Tensor:
        """tanh(x) as 2σ(2x) - 1, within 1.8e-7 of it. torch's tanh on a CPU is MKL's vector
        tanh, whose generic code (what MKL runs on an AMD EPYC) took 2.5 ns a float32 on one
        core against 0.43 for torch's own sigmoid: four passes of the latter cost a third of
        one of the former. (On an Intel core MKL takes a path of its own, not timed here.)"""
        return torch.mul(x, 2.0, out=out).sigmoid_().mul_(2.0).sub_(1.0)

    @staticmethod
    def steps(inputs, w_hh, h, c, keep, save):
        """The loop; with `save` also the gates after the sigmoid (T, N, 4H) and the cells
        (T, N, H), which backward needs."""
        steps, n, four = inputs.shape
        # under autocast (a trainer's bf16 on a GPU) the products run in the inputs' dtype
        # and the state stays in its own, as autocast would do with the loop written out
        dtype = inputs.dtype
        w_t = w_hh.to(dtype).t()
        gates = inputs.new_empty(steps, n, four) if save else None
        cells = h.new_empty(steps, n, four // 4) if save else None
        hidden = h.new_empty(steps, n, four // 4)
        no_outs = (None,) * steps
        per_step = zip(
            inputs.unbind(0),
            keep.unbind(0),
            gates.unbind(0) if save else no_outs,
            cells.unbind(0) if save else no_outs,
            hidden.unbind(0),
            strict=True,
        )
        with torch.autocast(inputs.device.type, enabled=False):
            for x_t, keep_t, z_out, c_out, h_out in per_step:
                h, c = h * keep_t, c * keep_t
                z = torch.addmm(x_t, h.to(dtype), w_t, out=z_out)
                c, h = LSTMRecurrence.cell(z, c, c_out, h_out)
        return hidden, c, gates, cells

    @staticmethod
    def forward(ctx, inputs, w_hh, h, c, keep):
        ctx.set_materialize_grads(False)
        hidden, c_last, gates, cells = LSTMRecurrence.steps(inputs, w_hh, h, c, keep, save=True)
        ctx.save_for_backward(gates, cells, hidden, h, c, keep, w_hh)
        return hidden, c_last.clone()  # not a view of what backward keeps

    @staticmethod
    @once_differentiable
    def backward(ctx, grad_hidden, grad_c):
        gates, cells, hidden, h0, c0, keep, w_hh = ctx.saved_tensors
        steps, n, four = gates.shape
        size = four // 4
        dtype = gates.dtype
        w = w_hh.to(dtype)
        i, f, g, o = gates.view(steps, n, 4, size).unbind(2)
        # dz_t = to_z_t ⊙ (dc_t, dc_t, dc_t, dh_t) for the gates (i, f, g, o): with σ' = σ(1 - σ)
        # from the kept gates, to_z = σ' ⊙ ((2g - 1), c_prev, 2i, tanh c), written in place,
        # one pass over the gates for each factor
        to_z = cells.new_empty(steps, n, 4, size)
        factor = to_z.unbind(2)
        torch.mul(g, 2.0, out=factor[0]).sub_(1.0)
        torch.mul(cells[:-1], keep[1:], out=factor[1][1:])
        torch.mul(c0, keep[0], out=factor[1][0])
        torch.mul(i, 2.0, out=factor[2])
        tanh_c = LSTMRecurrence.tanh(cells, out=factor[3])
        through_h = torch.ops.aten.tanh_backward(o, tanh_c)  # dc_t/dh_t = o (1 - tanh²c)
        torch.ops.aten.sigmoid_backward.grad_input(to_z, gates.view_as(to_z), grad_input=to_z)
        carry = f * keep  # dc_{t-1}/dc_t
        grad_z = torch.empty_like(to_z)
        grad_z_flat = grad_z.view(steps, n, four)
        if grad_hidden is None:  # only the last c was used
            grad_hidden = hidden.new_zeros(()).expand_as(hidden)
        per_step = zip(
            grad_hidden.unbind(0),
            through_h.unbind(0),
            to_z[:, :, :3].unbind(0),
            to_z[:, :, 3].unbind(0),
            grad_z[:, :, :3].unbind(0),
            grad_z[:, :, 3].unbind(0),
            grad_z_flat.unbind(0),
            keep.unbind(0),
            carry.unbind(0),
            strict=True,
        )
        want_h0, want_c0 = ctx.needs_input_grad[2:4]
        dh, dc = None, grad_c
        for t, (grad_h, dc_dh, to_ifg, to_o, out_ifg, out_o, grad_z_t, keep_t, carry_t) in zip(
            reversed(range(steps)), reversed(list(per_step)), strict=True
        ):
            dh_t = grad_h if dh is None else grad_h + dh
            dc = torch.mul(dh_t, dc_dh) if dc is None else torch.addcmul(dc, dh_t, dc_dh)
            torch.mul(to_ifg, dc.unsqueeze(1), out=out_ifg)
            torch.mul(to_o, dh_t, out=out_o)
            if t == 0 and not (want_h0 or want_c0):
                break  # the state before the sequence (a rollout's) takes no gradient
            dh = torch.mm(grad_z_t.to(dtype), w).mul_(keep_t)
            dc = dc * carry_t
        grad_w = None
        if ctx.needs_input_grad[1]:
            h_prev = factor[0]  # spent: its buffer now takes the masked h before each step
            torch.mul(hidden[:-1], keep[1:], out=h_prev[1:])
            torch.mul(h0, keep[0], out=h_prev[0])
            grad_w = torch.mm(
                grad_z_flat.flatten(0, 1).t().to(dtype), h_prev.flatten(0, 1).to(dtype)
            )
        return grad_z_flat, grad_w, dh if want_h0 else None, dc if want_c0 else None, None


class EntityNetwork(KeepsDerived):
    """Entity attention + LSTM trunk with one linear head.

    `mask` names the entity kinds' mask its attention keys use: "visible_mask" (policy:
    `mask_*_obs`) or "exists_mask" (value: `mask_*_obs_spoof`).
    """

    def __init__(self, layout: ObsLayout, config: NetworkConfig, n_outputs: int, mask: str) -> None:
        super().__init__()
        self.layout = layout
        self.mask_keys = [getattr(s.kind, mask) for s in layout.entities]
        d = config.embed_dim
        self.lidar = (
            CircularLidarConv(config.lidar_filters, config.lidar_kernel, layout.lidar_rays)
            if layout.lidar_rays
            else None
        )
        self_dim = layout.self_dim + config.lidar_filters * layout.lidar_rays
        self.self_embed = nn.Linear(self_dim, d)
        self.entity_embed = nn.ModuleList(
            EntityEmbedding(s.dim, self_dim, d) for s in layout.entities
        )
        self.attention = ResidualSelfAttention(d, config.attention_heads)
        self.dense = nn.Linear(2 * d, config.dense_dim)
        self.lstm = nn.LSTMCell(config.dense_dim, config.lstm_dim)
        self.lstm_norm = nn.LayerNorm(config.lstm_dim)
        self.head = nn.Linear(config.lstm_dim, n_outputs)
        nn.init.normal_(self.head.weight, std=config.head_init_std)
        nn.init.zeros_(self.head.bias)
        double = torch.ones(4 * config.lstm_dim, 1)
        double[2 * config.lstm_dim : 3 * config.lstm_dim] = 2.0
        self.register_buffer("cell_gate_double", double, persistent=False)

    def self_projection(self) -> tuple[torch.Tensor, torch.Tensor]:
        """The self token's layer and every entity type's self columns as one (self_dim,
        (1 + types)·d) weight and its bias. Built input-major: a product with the weights'
        stored layout transposed runs at about half speed for a 280-wide input."""
        embeds = list(self.entity_embed)
        weight = torch.cat([self.self_embed.weight.t()] + [e.self_weight().t() for e in embeds], 1)
        return weight, torch.cat([self.self_embed.bias] + [e.dense.bias for e in embeds])

    def encode(self, obs: Mapping[str, torch.Tensor]) -> torch.Tensor:
        """Per-step features before the LSTM: (N, ...) observations -> (N, dense_dim)."""
        self_vec = obs[SELF_KEY]
        n, d = self_vec.shape[0], self.self_embed.out_features
        if self.lidar is not None:
            self_vec = torch.cat([self_vec, self.lidar(obs[LIDAR_KEY])], dim=-1)
        embeds = list(self.entity_embed)
        sources = (*self.self_embed.parameters(), *self.entity_embed.parameters())
        w_self, bias = kept(self, "self_projection", self.self_projection, sources)
        # unbind and split, not indexing: their gradients are put together in one copy
        self_part, *type_parts = torch.addmm(bias, self_vec, w_self).view(n, -1, d).unbind(1)
        blocks = [self_part.unsqueeze(0)] + [
            F.linear(obs[slot.kind.key].transpose(0, 1), embed.row_weight()) + part
            for embed, slot, part in zip(embeds, self.layout.entities, type_parts, strict=True)
        ]
        tokens = F.relu(torch.cat(blocks))  # (L, N, d): the self token, then every entity row
        length = tokens.shape[0]

        ones = self_vec.new_ones(n, 1)
        valid = torch.cat([ones] + [obs[k] for k in self.mask_keys], dim=1) > 0.5  # (N, L)
        heads = self.attention.heads
        key_bias = torch.where(valid.t(), 0.0, float("-inf"))  # (L, N)
        key_bias = key_bias.unsqueeze(-1).expand(length, n, heads).reshape(length, n * heads, 1)
        entity_mask = valid[:, 1:]
        # a masked token's weight is 0 and its output finite (the self key is always valid):
        # it contributes exactly nothing
        pool = entity_mask / entity_mask.sum(1, keepdim=True).clamp(min=1)
        self_out, pooled = self.attention(tokens, key_bias, pool)
        return F.relu(self.dense(torch.cat([self_out, pooled], dim=-1)))

    def lstm_weights(self) -> tuple[torch.Tensor, ...]:
        """W_ih, W_hh and the two biases' sum, with the cell gate's rows doubled."""
        lstm, double = self.lstm, self.cell_gate_double
        bias = (lstm.bias_ih + lstm.bias_hh) * double.squeeze(1)
        return lstm.weight_ih * double, lstm.weight_hh * double, bias

    def one_step_weights(self) -> tuple[torch.Tensor, torch.Tensor]:
        """[W_ih W_hh] side by side, transposed, (in + H, 4H), and the bias: one product over
        [input ‖ h] for a step without a gradient."""
        w_ih, w_hh, bias = self.lstm_weights()
        return torch.cat([w_ih, w_hh], 1).t(), bias

    def forward(
        self,
        obs: Mapping[str, torch.Tensor],
        state: LSTMState,
        episode_start: torch.Tensor,
    ) -> tuple[torch.Tensor, LSTMState]:
        """obs (T, N, ...), state (h, c) before step 0, episode_start (T, N) bool
        -> head outputs (T, N, n_outputs) and the state after step T-1."""
        steps, n = episode_start.shape
        features = self.encode({k: obs[k].flatten(0, 1) for k in self.layout.shapes})
        lstm = self.lstm
        keep = (~episode_start).unsqueeze(-1)
        # tanh(x) = 2 σ(2x) - 1: with the cell gate's rows of the weights doubled (exact), one
        # sigmoid gives all four gates (nn.LSTMCell's order: input, forget, cell, output)
        if steps == 1 and not torch.is_grad_enabled():
            # acting: one product of K = in + H, not two of K = H and a bias copy (for 256 rows
            # the products alone 1.35x faster on a CPU and the act 1.03x; one launch less)
            weight, bias = kept(self, "lstm_one_step", self.one_step_weights, lstm.parameters())
            keep_0 = keep[0].to(state[0].dtype)
            h, c = state[0] * keep_0, state[1] * keep_0
            z = torch.addmm(bias, torch.cat([features, h.to(features.dtype)], 1), weight)
            c, h = LSTMRecurrence.cell(z, c)
            hidden = h.unsqueeze(0)
        else:
            w_ih, w_hh, bias = kept(self, "lstm_weights", self.lstm_weights, lstm.parameters())
            # input-to-hidden for every step at once; the loop keeps hidden-to-hidden only
            inputs = torch.addmm(bias, features, w_ih.t()).view(steps, n, -1)
            hidden, c = LSTMRecurrence.run(inputs, w_hh, *state, keep)
        return self.head(self.lstm_norm(hidden)), (hidden[-1], c)
