"""Which network an `ActorCritic` is made of (`agent.network.kind`), what a network must offer,
and loading weights into one with an error that names the parameters that do not fit.

Kinds: `entity` (the paper's entity attention + LSTM, `networks.EntityNetwork`, the default),
`mlp` (a small feed-forward network, `mlp.MLPNetwork`), or the import path
`package.module:Class` of a network of the user's own code (docs/extending.md). `ActorCritic`
builds two of the kind, the policy network (`n_outputs` = the action logits, 37 by default; its
attention or input sees what the agent sees: `mask="visible_mask"`) and the value network
(`n_outputs` = 1; `mask="exists_mask"`: the omniscient critic), through `build_network`,
which checks each against the interface below and names what is missing.

The interface (`Network`), all that the actor-critic and PPO use of a network:
- `Class(layout, config, n_outputs, mask)`: `layout` the observation's `ObsLayout`, `config`
  the run's `NetworkConfig` (its sizes are the network's settings; a network reads the ones it
  needs), `n_outputs` and `mask` as above (`mask` names the attribute of each entity kind's
  `EntityKeys` whose key holds the 0/1 mask the network may use).
- `forward(obs, state, episode_start) -> (outputs, state_after)`: `obs` a dict of normalised
  float32 tensors (T, N, ...) with `layout.shapes`' keys, `state` the pair (h, c), each
  (N, config.lstm_dim) float32, before step 0; `episode_start` (T, N) bool; `outputs`
  (T, N, n_outputs); `state_after` the pair after step T-1, same shapes. That state is what the
  rest of the system keeps for every agent (chunks, policy requests, pods: (B, 4, lstm_dim),
  rows policy h, c, value h, c): a network with memory zeroes it before each step flagged as an
  episode start (acting step by step and training on the sequence must agree); one without
  memory returns it unchanged.
- `head`: an `nn.Linear` producing the `n_outputs` (the last layer). PPO's PopArt value
  normalisation rescales the value network's `head.weight` and `head.bias` whenever the
  return statistics move, so the value must be that layer's output, not something after it.
The two networks' parameters are saved under `policy_net.` and `value_net.` in checkpoints.

A checkpoint records its network (`meta["network"]`: `NetworkConfig` as a dict, `kind`
included; and in the run config it holds); `network_config(meta)` reads it back, as `entity`
for checkpoints from before the record. `load_weights(model, state, source)` loads a state dict
and, where it does not fit, raises ValueError naming the kinds and the first parameters whose
shapes differ, are missing or are not expected.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict
from typing import Any, Protocol

import torch
from torch import nn

from hns_train.agents.config import NETWORK_KINDS, NetworkConfig
from hns_train.agents.networks import LSTMState
from hns_train.agents.observations import ObsLayout
from hns_train.typed_config import from_dict, import_class

SHOWN = 3  # parameters named per kind of mismatch in an error


class Network(Protocol):
    """What `ActorCritic` and PPO use of a policy or value network (see the module docstring)."""

    head: nn.Linear

    def forward(
        self, obs: Mapping[str, torch.Tensor], state: LSTMState, episode_start: torch.Tensor
    ) -> tuple[torch.Tensor, LSTMState]: ...


def network_class(kind: str) -> type[nn.Module]:
    """The class of a network kind (a shipped name or an import path)."""
    return import_class(NETWORK_KINDS.get(kind, kind), nn.Module, "agent.network.kind")


def build_network(layout: ObsLayout, config: NetworkConfig, n_outputs: int, mask: str) -> Network:
    """A network of `config.kind`, checked against the interface (ValueError naming what is
    missing or of the wrong shape)."""
    cls = network_class(config.kind)
    try:
        net = cls(layout, config, n_outputs, mask)
    except Exception as err:
        raise ValueError(
            f"agent.network.kind={config.kind!r}: {cls.__name__}(layout, config, n_outputs, "
            f"mask) failed: {type(err).__name__}: {err}"
        ) from None
    # the shipped kinds' forward is checked by the tests; a step costs a new model ~0.1 s
    check_network(
        net, layout, config, n_outputs, f"agent.network.kind={config.kind!r}",
        forward=config.kind not in NETWORK_KINDS,
    )  # fmt: skip
    return net


def check_network(
    net: Any,
    layout: ObsLayout,
    config: NetworkConfig,
    n_outputs: int,
    what: str,
    forward: bool = True,
) -> None:
    """ValueError unless `net` offers the interface: an nn.Module with an `nn.Linear` `head`
    of `n_outputs`, whose forward of one step on zero observations gives (1, 1, n_outputs)
    outputs and a state of the shape it was given (that step is taken where `forward`)."""
    name = type(net).__name__
    if not isinstance(net, nn.Module):
        raise ValueError(f"{what}: {name} is not a torch.nn.Module")
    head = getattr(net, "head", None)
    if not isinstance(head, nn.Linear):
        raise ValueError(
            f"{what}: {name} has no `head` nn.Linear (its last layer, whose weight and bias "
            f"PopArt rescales on the value side); found {type(head).__name__}"
        )
    if head.out_features != n_outputs:
        raise ValueError(
            f"{what}: {name}.head has {head.out_features} outputs; this network needs {n_outputs}"
        )
    if not forward:
        return
    obs = {k: torch.zeros((1, 1, *shape)) for k, shape in layout.shapes.items()}
    state = (torch.zeros(1, config.lstm_dim), torch.zeros(1, config.lstm_dim))
    try:
        with torch.no_grad():
            result = net(obs, state, torch.ones((1, 1), dtype=torch.bool))
    except Exception as err:
        raise ValueError(
            f"{what}: {name}.forward(obs, state, episode_start) failed on one step of zeros "
            f"(obs (T=1, N=1, ...), state (h, c) each (1, {config.lstm_dim})): "
            f"{type(err).__name__}: {err}"
        ) from None
    shapes = _shapes(result)
    expected = ((1, 1, n_outputs), ((1, config.lstm_dim), (1, config.lstm_dim)))
    if shapes != expected:
        raise ValueError(
            f"{what}: {name}.forward must return (outputs (T, N, {n_outputs}), (h, c) each "
            f"(N, lstm_dim={config.lstm_dim})); one step of one agent gave {shapes}"
        )


def _shapes(value: Any) -> Any:
    if isinstance(value, torch.Tensor):
        return tuple(value.shape)
    if isinstance(value, (tuple, list)):
        return tuple(_shapes(v) for v in value)
    return type(value).__name__


def network_record(config: NetworkConfig) -> dict[str, Any]:
    """What a checkpoint records of its network: the kind and every setting."""
    return asdict(config)


def network_config(meta: Mapping[str, Any], fallback: NetworkConfig | None = None) -> NetworkConfig:
    """The network a checkpoint's metadata names: its record, else its run config's
    `agent.network`, else `fallback` (default: the default, `entity`). Settings this code does
    not know are an error naming them."""
    record = meta.get("network")
    if record is None:
        record = ((meta.get("config") or {}).get("agent") or {}).get("network")
    if record is None:
        return fallback or NetworkConfig()
    return from_dict(NetworkConfig, record, prefix="agent.network.")


def load_weights(
    model: nn.Module, state: Mapping[str, Any], source: str, saved: NetworkConfig | None = None
) -> None:
    """`model.load_state_dict(state)`, or ValueError in one line naming why it does not fit:
    the networks' kinds (`saved`: the network the weights come from, where known), and the
    first parameters whose shapes differ, that the state lacks, or that the model does not
    have."""
    problem = weights_problem(model, state, saved)
    if problem:
        raise ValueError(f"{source}: the weights do not fit the network: {problem}")
    model.load_state_dict(state)


def weights_problem(
    model: nn.Module, state: Mapping[str, Any], saved: NetworkConfig | None = None
) -> str | None:
    """Why `state` does not load into `model` (see `load_weights`), or None."""
    own = model.state_dict()
    differ = [
        f"{k} saved {tuple(state[k].shape)}, here {tuple(v.shape)}"
        for k, v in own.items()
        if k in state and tuple(getattr(state[k], "shape", ())) != tuple(v.shape)
    ]
    missing = [k for k in own if k not in state]
    unexpected = [k for k in state if k not in own]
    if not (differ or missing or unexpected):
        return None
    parts = []
    for label, names in (
        ("shapes differ", differ),
        ("missing", missing),
        ("not in this network", unexpected),
    ):
        if names:
            more = f" and {len(names) - SHOWN} more" if len(names) > SHOWN else ""
            parts.append(f"{label}: {', '.join(names[:SHOWN])}{more}")
    config = getattr(model, "config", None)
    if saved is not None and isinstance(config, NetworkConfig) and saved.kind != config.kind:
        parts.insert(0, f"the weights are of kind {saved.kind!r}, this network of {config.kind!r}")
    return "; ".join(parts)
