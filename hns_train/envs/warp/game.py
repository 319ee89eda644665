"""`WarpGame`: N hide-and-seek worlds on MuJoCo Warp with `VectorGame`'s contract.

Same observation dictionary (keys, shapes, float32), action layout (MultiDiscrete
[11, 11, 11, 2, 2] per agent slot: x, y, yaw force bins, grab, lock), rewards, statistics and
auto-reset as `VectorGame` (vector.py). `step` returns a `VectorStep` whose arrays are all torch
tensors on the Warp device (zero-copy views of Warp arrays where the physics owns them), the
episode statistics included ((W,) float64, NaN where a world did not finish this step).

Seeding: world w's FIRST layout comes from a generator seeded with `world_seeds[w]`, spawned
from the seed exactly as `VectorGame` does, so the first episode of every world has the same
layout in both. Later episodes take layouts from the device layout bank (bank.py): the same
seed and device type replay exactly, but they are not `VectorGame`'s later layouts.

Worlds end their episodes independently: the step counter `t` is a (W,) device tensor, and a
world reaching the horizon is reset inside the same step by masked tensor writes from the bank
(`_reset_where`), with no host work. With `stagger=True` world w starts at a random step of its
first episode (seeded), so with thousands of worlds the ends spread over the horizon instead of
landing on one step; those first episodes are partial (their statistics cover the steps played,
and a world started after the preparation phase has no `_prep` snapshot).

Per env step everything runs as tensor code over all worlds at once, no per-world Python:
seekers idle in preparation, locks then grabs from the previous step's visibility (rules.py's
rules, in `warp/rules.py`: grabs decided afresh every step, locked objects grabbable, a lock
leaving grabs as they are), the lock / grab edits written into the per-world joint ranges, weld
data and `eq_active`, controls, `substeps` Warp physics steps (a CUDA graph on a GPU,
physics.py), entity poses from qpos, one batched `mujoco_warp.rays` call (lidar fan and a ray
towards every entity centre per agent), rewards, statistics (`stats.py`), observations,
then the masked reset of the worlds that ended (their rays and observations computed again: a
second ray call per step, whether or not a world ended, since knowing would need a host read).

No host synchronisation inside a step given a tensor of actions: nothing is read back
(tests/envs/test_warp_syncs.py counts it). What the host would otherwise check per step is
accumulated on the device and read by `read_warnings()`, which a worker calls at heartbeat time:
- where the actions are decides when they are checked (`step(actions, check=None)`): host
  arrays (numpy, lists: a user calling `step` directly) are validated at once, a ValueError
  naming the first bad entry, which costs no device read; a torch tensor (a pod's or an
  actor's policy output) is checked lazily: entries out of range (or fractional) are clamped
  and counted on the device, and `read_warnings` raises the ValueError. check=True / False
  forces either;
- physics failures are counted, never silent: MuJoCo Warp drops contacts or constraint rows
  when a world has more than its buffers hold (`nconmax` / `njmax`, `PhysicsConfig`) and raises
  a per-world overflow bit; after every env step the game adds those bits (`CAPACITY_OVERFLOWS`)
  to `physics_warnings` (W,) for the current episode and to a running total, and clears them;
  `read_warnings` logs the worlds that overflowed since its last call;
- bad physics states are put back, as the C game puts them back: MuJoCo Warp 4.0.0's Newton
  solver factorises in float32 without a floor on the pivots, and on a stiff contact (a ramp
  pressed against a wall) one world's qacc, qpos and qvel can turn NaN within one substep
  (mujoco_warp issue #1415). After the substeps, the worlds whose qpos, qvel or qacc hold a NaN,
  an Inf or a value beyond `mujoco.mjMAXVAL` (the C engine's rule) get their state from before
  the step back (`WarpWorlds.restore_where`, the solver's warm start cleared) and their
  episodes go on, with no truncation flag. That step's rewards and observations come from the
  state put back, so no non-finite value leaves the step. Each one counts in
  `physics_warnings` and the running total, and `read_warnings` logs the worlds.
Rendering stays with the C game.
"""

from __future__ import annotations

import logging

import numpy as np
import torch

from hns_train.envs import contract as C
from hns_train.envs import observations as O
from hns_train.envs import rules as R
from hns_train.envs.config import GameConfig, game_config
from hns_train.envs.layout import sample_layout
from hns_train.envs.stats import STAT_KEYS, EpisodeStats
from hns_train.envs.tasks import HIDE_AND_SEEK
from hns_train.envs.vector import VectorStep
from hns_train.envs.warp import rules as TR
from hns_train.envs.warp.bank import BankConfig, LayoutBank
from hns_train.envs.warp.physics import PhysicsConfig, WarpWorlds
from hns_train.envs.world import FREE_RANGE, lidar_directions

# mujoco_warp.OverflowType bits that mean lost contacts or constraints (buffers too small):
# NEFC, NJMAX_NNZ, BROADPHASE, NARROWPHASE, CCD
CAPACITY_OVERFLOWS = {1 << 0: "nefc", 1 << 1: "njmax_nnz", 1 << 2: "broadphase"}
CAPACITY_OVERFLOWS |= {1 << 3: "narrowphase", 1 << 4: "ccd"}
log = logging.getLogger(__name__)


class WarpGame:
    """`n_worlds` worlds of one config on a Warp device, stepped together, reset automatically.

    cfg: a `GameConfig` or a preset name; device: a Warp device ("cpu", "cuda:0"; None: Warp's
    default). Observations are (W, A, ...) float32 tensors on that device. stagger: worlds
    start at random steps of their first episode (resets spread over steps); bank: the layout
    bank's sizes (bank.py); physics: buffer sizes and solver settings (physics.py).
    """

    def __init__(
        self,
        cfg: GameConfig | str,
        n_worlds: int,
        seed: int | None = None,
        device: str | None = None,
        stagger: bool = False,
        bank: BankConfig | None = None,
        physics: PhysicsConfig | None = None,
    ):
        cfg = game_config(cfg)
        if cfg.task != HIDE_AND_SEEK:
            raise ValueError(
                f"game task {cfg.task!r}: the Warp game plays hide-and-seek only (a task's hooks "
                "are host code); tasks run on the C game: VectorGame, the pipeline, or pods with "
                "pod.physics 'c' or 'auto' (docs/extending.md)"
            )
        self.cfg = cfg
        self.stat_keys = STAT_KEYS  # no task: the game's own statistics
        self.n_worlds = W = n_worlds
        self.worlds = WarpWorlds(cfg, n_worlds, device=device, physics=physics)
        self.dev = dev = self.worlds.torch_device
        idx = self.index = self.worlds.index
        self.n_agents = A = cfg.max_agents
        self.n_objects = Ob = cfg.max_boxes + cfg.n_ramps
        E = A + Ob
        self.action_nvec = np.array(C.action_nvec(cfg.action_bins))
        self._nvec = torch.as_tensor(self.action_nvec, device=dev)
        self._noop = torch.as_tensor(C.noop_action(cfg.action_bins), device=dev)
        self._seed = seed
        self.stagger = stagger
        self.bank_config = bank or BankConfig()
        self.bank: LayoutBank | None = None
        self.world_seeds: tuple[np.random.SeedSequence, ...] = ()
        self.rngs: list[np.random.Generator] = []
        self._started = False

        # entities: agents then objects; entity e is body 1 + e with qpos / qvel 4e..4e+3
        idx.check_entity_rows(self.worlds.template.nbody)
        self._E = E

        def t(x, dtype=torch.float32):
            return torch.as_tensor(np.asarray(x), dtype=dtype, device=dev)

        long = torch.int64
        self._ent_body = t(idx.entity_body, long)
        self._ent_geom = t(idx.entity_geom, long)
        self._object_jnt = t(idx.object_jnt.reshape(-1), long)
        self._object_q = t(idx.object_qpos.reshape(-1), long)
        self._object_dof = t(idx.object_qvel.reshape(-1), long)
        self._weld = t(idx.weld.reshape(-1), long)
        self._ctrl_adr = t(idx.agent_ctrl.reshape(-1), long)
        self._hit_body = t(np.append(idx.geom_body, -1), long)
        self._ngeom = len(idx.geom_body)
        self.is_hider = t(np.arange(A) < cfg.max_hiders, torch.bool)
        self.team = torch.where(self.is_hider, R.HIDERS, R.SEEKERS).to(long)
        self.lockable = t(
            [cfg.boxes_lockable] * cfg.max_boxes + [cfg.ramps_lockable] * cfg.n_ramps, torch.bool
        )
        self.ctrl_levels = t(C.control_levels(cfg.action_bins, cfg.max_ctrl))
        L = cfg.n_lidar
        self._lidar_dirs = t(lidar_directions(L))
        self._nray = L + E
        self._ray_exclude = t(np.repeat(idx.agent_body, self._nray), torch.int32)
        self._not_self = torch.ones(A, E, dtype=torch.bool, device=dev)
        self._not_self[torch.arange(A), torch.arange(A)] = False
        self._cos_half = float(np.cos(cfg.vision_half_angle))
        # constants of the step, on the device once (a host list made into a CUDA tensor is a
        # blocking copy: a stream sync)
        self._up = t([0.0, 0.0, 1.0])
        self._free_range = t([-FREE_RANGE, FREE_RANGE])

        # per-world state (device) and per-episode tables
        z = torch.zeros
        self.t = z(W, dtype=long, device=dev)
        self.slot = torch.arange(W, device=dev)  # bank slot of each world's current layout
        self.agent_present = z(W, A, dtype=torch.bool, device=dev)
        self.object_present = z(W, Ob, dtype=torch.bool, device=dev)
        self.half = z(W, Ob, 3, device=dev)
        self.locked = z(W, Ob, dtype=torch.bool, device=dev)
        self.lock_team = torch.full((W, Ob), R.NO_TEAM, dtype=long, device=dev)
        self.lock_agent = torch.full((W, Ob), -1, dtype=long, device=dev)
        self.grabbed = torch.full((W, A), -1, dtype=long, device=dev)
        self.sees = z(W, A, E, dtype=torch.bool, device=dev)
        self.lidar = z(W, A, L, device=dev)
        self._others = torch.full((W, A, A - 1), -1, dtype=long, device=dev)
        self.stats = EpisodeStats(W, cfg.max_boxes, Ob, like=self.t)
        self.obs: dict[str, torch.Tensor] = {}
        self._capacity_mask = sum(CAPACITY_OVERFLOWS)
        # flags accumulated on the device, read by `read_warnings` (module docstring)
        self.physics_warnings = z(W, dtype=long, device=dev)  # this episode
        self._overflow_total = z((), dtype=long, device=dev)
        self._overflow_bits = z(W, dtype=torch.int32, device=dev)  # since the last read
        self._overflow_reported = 0
        self._bad_state_total = z((), dtype=long, device=dev)
        self._bad_state_worlds = z(W, dtype=torch.bool, device=dev)  # since the last read
        self._bad_state_reported = 0
        self._bad_count = z((), dtype=long, device=dev)
        self._bad_first = z(4, dtype=long, device=dev)  # world, agent slot, dimension, value

    # ------------------------------------------------------------------ public API
    def reset(self, seed: int | None = None) -> dict[str, torch.Tensor]:
        """New episodes in every world; first observations (W, A, ...).

        Seeding as `VectorGame.reset`: world w's first layout comes from its own generator
        (`world_seeds[w]`); a new seed (or the first call) spawns new ones, otherwise the
        generators continue. The layout bank is rebuilt (W host compiles). With `stagger`,
        world w then starts at a random step of its first episode (bank.py, module
        docstring)."""
        if seed is not None or not self._started:
            self._root = np.random.SeedSequence(self._seed if seed is None else seed)
            self.world_seeds = tuple(self._root.spawn(self.n_worlds))
            self.rngs = [np.random.default_rng(s) for s in self.world_seeds]
        self._started = True
        W = self.n_worlds
        first = [sample_layout(self.cfg, self.rngs[w]) for w in range(W)]
        bank_seed, stagger_seed = self._root.spawn(2)
        if self.bank is not None:
            self.bank.close()
        self.bank = LayoutBank(self.cfg, self.worlds, first, bank_seed, self.bank_config)
        start = 0
        if self.stagger:
            offsets = np.random.default_rng(stagger_seed).integers(0, self.cfg.horizon, W)
            start = torch.as_tensor(offsets, device=self.dev)
        everyone = torch.ones(W, dtype=torch.bool, device=self.dev)
        self._reset_where(everyone, torch.arange(W, device=self.dev), start)
        return self.obs

    def step(self, actions, check: bool | None = None) -> VectorStep:
        """Advance every world one env step; worlds whose episode ends are reset in place.

        actions: (W, A, 5) integers (array or tensor). check: True validates them on the host
        and raises on a bad one (a host sync for a device tensor); False makes no host sync in
        the whole step: an action out of range is clamped and counted, and `read_warnings`
        raises for it later; None (default): True for host arrays, False for tensors. Returns
        a `VectorStep` of tensors on the game's device (fresh tensors each step)."""
        if not self._started:
            raise RuntimeError("call reset() before step()")
        cfg = self.cfg
        a = self.check_actions(actions, check)
        in_prep = self.t < cfg.prep_steps
        idle = (in_prep[:, None] & ~self.is_hider[None, :]) | ~self.agent_present
        a = torch.where(idle[..., None], self._noop, a)

        dist = TR.obb_distance(self.agent_pos, self.object_pos, self.object_yaw, self.half)
        eligible = self.sees[:, :, self.n_agents :] & (dist <= cfg.grab_range)
        locked, lock_team, lock_agent = TR.update_locks(
            self.locked,
            self.lock_team,
            self.lock_agent,
            eligible,
            a[..., 4],
            self.team,
            self.lockable,
        )
        if self.n_objects:
            self._apply_locks(locked)
            self.locked, self.lock_team, self.lock_agent = locked, lock_team, lock_agent
            self._apply_grabs(TR.choose_grabs(a[..., 3], eligible, dist))

        ww = self.worlds
        ww.ctrl[:, self._ctrl_adr] = self.ctrl_levels[a[..., :3]].reshape(self.n_worlds, -1)
        before = ww.qpos.clone(), ww.qvel.clone()
        ww.step(cfg.substeps)
        self._note_overflow()
        self._note_bad_state(*before)
        self._read_state()
        self._cast_rays()
        reward, hiders_seen = TR.rewards(
            cfg,
            self.sees[:, :, : self.n_agents],
            self._seeker_sees_hider,
            self.is_hider,
            self.agent_present,
            self.ent_pos[..., :2],
            self.object_present,
            in_prep,
        )
        self.t = self.t + 1
        self.stats.add_surfing(in_prep, self._seeker_present, self, cfg.agent_radius)
        self.stats.add_step(in_prep, reward, self._team_masks, hiders_seen)
        self.stats.mark_prep_end(
            self.t, cfg.prep_steps, self.object_pos[..., :2], self.object_present, self.locked
        )
        self._observe()
        truncated = self.t >= cfg.horizon
        final_obs, final_present = self.obs, self.agent_present
        stats = self.stats.finish(
            truncated, self.object_pos[..., :2], self.object_present, self.locked
        )
        self._reset_where(truncated, self.bank.draw())
        self.bank.tick()
        return VectorStep(
            obs=self.obs,
            rewards=reward,
            truncated=truncated,
            agent_present=self.agent_present,
            final_obs=final_obs,
            final_agent_present=final_present,
            episode_stats={k: stats[:, i] for i, k in enumerate(STAT_KEYS)},
        )

    def check_actions(self, actions, check: bool | None = None) -> torch.Tensor:
        """(W, A, 5) int64 actions on the device. Shape and dtype kind are checked always (no
        host read); the values with check=True (a ValueError naming the first bad entry), else
        clamped into range and counted on the device for `read_warnings`. check=None: True for
        host arrays, False for tensors."""
        is_tensor = isinstance(actions, torch.Tensor)
        want = (self.n_worlds, self.n_agents, len(self.action_nvec))
        if check or (check is None and not is_tensor):  # on the host, as the C game checks
            host = actions.cpu().numpy() if is_tensor else actions
            host = C.check_actions(host, *want[:2], self.action_nvec)
            return torch.tensor(host, device=self.dev)  # a copy: `host` may be a read-only view
        a = torch.as_tensor(actions, device=self.dev)
        if tuple(a.shape) != want:
            raise ValueError(
                f"actions have shape {tuple(a.shape)}; expected {want} (worlds, agents, 5)"
            )
        if a.dtype == torch.bool or a.dtype.is_complex:
            raise ValueError(f"actions must be integers, got dtype {a.dtype}")
        fractional = a != a.round() if a.dtype.is_floating_point else None
        a = a.to(torch.int64)
        bad = (a < 0) | (a >= self._nvec)
        if fractional is not None:
            bad = bad | fractional
        first = bad.reshape(-1).to(torch.uint8).argmax()
        A, K = want[1:]
        where = torch.stack([first // (A * K), first // K % A, first % K, a.reshape(-1)[first]])
        new = (self._bad_count == 0) & bad.any()
        self._bad_first = torch.where(new, where, self._bad_first)
        self._bad_count = self._bad_count + bad.sum()
        return torch.minimum(a.clamp_min(0), self._nvec - 1)

    def read_warnings(self) -> int:
        """What the device accumulated since the last call, read once (a host sync: call it at
        heartbeat time, not per step). Logs the worlds whose physics overflowed or went bad;
        raises a ValueError for actions out of range that an unchecked step clamped. Returns the
        physics warnings since the game was made (`physics_warnings_total`)."""
        flags = torch.cat(
            [
                self._bad_count[None],
                self._bad_first,
                self._overflow_total[None],
                self._bad_state_total[None],
            ]
        )
        bad, w, ag, k, value, total, bad_states = flags.cpu().tolist()
        if bad_states > self._bad_state_reported:
            worlds = np.flatnonzero(self._bad_state_worlds.cpu().numpy())
            log.warning(
                "MuJoCo Warp's physics gave a NaN, Inf or huge qpos, qvel or qacc in worlds %s "
                "(%d since the game was made): each got its state from before that step back and "
                "its episode went on",
                worlds[:10].tolist(),
                bad_states,
            )
            self._bad_state_worlds.zero_()
            self._bad_state_reported = bad_states
        if total > self._overflow_reported:
            bits = self._overflow_bits.cpu().numpy()
            worlds = np.flatnonzero(bits)
            for w_ in worlds[:10]:
                kinds = [name for bit, name in CAPACITY_OVERFLOWS.items() if bits[w_] & bit]
                log.warning(
                    "MuJoCo Warp overflowed %s in world %d: contacts or constraints were "
                    "dropped (raise nconmax / njmax of WarpWorlds)",
                    "/".join(kinds),
                    w_,
                )
            if len(worlds) > 10:
                log.warning("... and %d more worlds overflowed", len(worlds) - 10)
            self._overflow_bits.zero_()
            self._overflow_reported = total
        if bad:
            self._bad_count.zero_()
            raise ValueError(
                f"{bad} action entries were out of range since the last check; the first: "
                + C.bad_action_message(value, w, ag, k, self.action_nvec)
            )
        return total + bad_states

    @property
    def physics_warnings_total(self) -> int:
        """Contact / constraint overflows and bad physics states since the game was made (a
        host read)."""
        return int(self._overflow_total + self._bad_state_total)

    def close(self) -> None:
        """Stop the layout bank's thread."""
        if self.bank is not None:
            self.bank.close()

    # ------------------------------------------------------------------ internals
    def _reset_where(self, mask: torch.Tensor, slots: torch.Tensor, start=0) -> None:
        """New episodes in the worlds where `mask` (W,) bool, with the bank layouts of `slots`
        (W,), at step `start` (0 or a (W,) tensor); then poses, rays and observations of every
        world. Masked tensor writes only: no host read."""
        src = self.bank.gather(slots)
        self.worlds.reset_where(mask, src)
        m1, m2 = mask[:, None], mask[:, None, None]
        self.slot = torch.where(mask, slots, self.slot)
        self.agent_present = torch.where(m1, src["agent_present"], self.agent_present)
        self.object_present = torch.where(m1, src["object_present"], self.object_present)
        self.half = torch.where(m2, src["half"], self.half)
        self._others = torch.where(m2, src["others"], self._others)
        self.t = torch.where(mask, start, self.t)
        self.locked = torch.where(m1, False, self.locked)
        self.lock_team = torch.where(m1, R.NO_TEAM, self.lock_team)
        self.lock_agent = torch.where(m1, -1, self.lock_agent)
        self.grabbed = torch.where(m1, -1, self.grabbed)
        self.physics_warnings = torch.where(mask, 0, self.physics_warnings)
        self._tables()
        self._read_state()
        self._cast_rays()
        self.stats.reset(mask, self.object_pos[..., :2])
        self._observe()

    def _note_overflow(self) -> None:
        """Count the worlds whose contacts or constraints overflowed their buffers this step
        (on the device; `read_warnings` logs them)."""
        ov = self.worlds.overflow
        bits = ov & self._capacity_mask
        hit = bits != 0
        self.physics_warnings = self.physics_warnings + hit
        self._overflow_total = self._overflow_total + hit.sum()
        self._overflow_bits = self._overflow_bits | bits
        ov.zero_()

    def _note_bad_state(self, qpos: torch.Tensor, qvel: torch.Tensor) -> None:
        """Worlds whose physics went bad in this step (`WarpWorlds.bad_state`) get `qpos` /
        `qvel`, their state from before the step, back, and are counted (on the device;
        `read_warnings` logs them); their episodes go on."""
        bad = self.worlds.bad_state()
        self.worlds.restore_where(bad, qpos, qvel)
        self.physics_warnings = self.physics_warnings + bad
        self._bad_state_total = self._bad_state_total + bad.sum()
        self._bad_state_worlds = self._bad_state_worlds | bad

    def _tables(self) -> None:
        """Per-episode masks and gather indices, from who is present (every world: cheap)."""
        ap, op = self.agent_present, self.object_present
        ent_present = torch.cat([ap, op], dim=1)
        self._pair_ok = ap[:, :, None] & ent_present[:, None, :] & self._not_self
        hider = ap & self.is_hider
        self._seeker_present = ap & ~self.is_hider
        self._seeker_sees_hider = self._seeker_present[:, :, None] & hider[:, None, :]
        self._other_rows, self._other_sees = O.other_gathers(self._others, self._E)
        self._team_masks = [
            (m.to(torch.float32), m.sum(dim=1).clamp_min(1).to(torch.float32))
            for m in (hider, self._seeker_present)
        ]
        geom_pos = self.worlds.field["geom_pos"]
        self._geom_off = geom_pos[:, self._ent_geom]  # (W, E, 3) main geom in its body frame
        self._body_pos = self.worlds.field["body_pos"][:, self._ent_body]

    def _read_state(self) -> None:
        """Entity poses and velocities from qpos / qvel (every movable body hangs off the world
        by slide x/y/z + hinge z, so its position is body_pos + q and its yaw q[3])."""
        W, A, E = self.n_worlds, self.n_agents, self._E
        q = self.worlds.qpos[:, : 4 * E].reshape(W, E, 4)
        self.ent_pos = self._body_pos + q[..., :3]
        self.ent_yaw = q[..., 3]
        self.ent_vel = self.worlds.qvel[:, : 4 * E].reshape(W, E, 4).clone()
        self.ent_cos, self.ent_sin = torch.cos(self.ent_yaw), torch.sin(self.ent_yaw)
        self.object_yaw_cos, self.object_yaw_sin = self.ent_cos[:, A:], self.ent_sin[:, A:]
        g = self._geom_off
        c, s = self.ent_cos, self.ent_sin
        self.entity_centre = self.ent_pos + torch.stack(
            [c * g[..., 0] - s * g[..., 1], s * g[..., 0] + c * g[..., 1], g[..., 2]], -1
        )
        self.agent_pos, self.object_pos = self.ent_pos[:, :A], self.ent_pos[:, A:]
        self.agent_yaw, self.object_yaw = self.ent_yaw[:, :A], self.ent_yaw[:, A:]
        self.agent_vel, self.object_vel = self.ent_vel[:, :A], self.ent_vel[:, A:]

    def _cast_rays(self) -> None:
        """Lidar and line of sight of every agent, one batched Warp ray call."""
        cfg, W, A, L = self.cfg, self.n_worlds, self.n_agents, self.cfg.n_lidar
        origin = self.agent_pos
        to = self.entity_centre[:, None, :, :] - origin[:, :, None, :]  # (W, A, E, 3)
        front = torch.stack([self.ent_sin[:, :A], -self.ent_cos[:, :A]], -1)[:, :, None, :]
        cone = TR.cone_from_front(to, front, self._cos_half)
        norm = torch.linalg.vector_norm(to, dim=-1, keepdim=True)
        to = to / norm.clamp_min(1e-9)
        ar = torch.arange(A, device=self.dev)
        to[:, ar, ar] = self._up  # own ray: upwards
        vec = torch.cat([self._lidar_dirs.expand(W, A, L, 3), to], dim=2).reshape(W, -1, 3)
        pnt = origin[:, :, None, :].expand(W, A, self._nray, 3).reshape(W, -1, 3)
        self.worlds.kinematics()
        dist, geomid = self.worlds.rays(pnt, vec, self._ray_exclude)
        dist = dist.reshape(W, A, self._nray)
        geomid = geomid.reshape(W, A, self._nray).to(torch.int64)
        lidar = torch.where(geomid[..., :L] >= 0, dist[..., :L], cfg.lidar_range)
        self.lidar = lidar.clamp(max=cfg.lidar_range) * self.agent_present[..., None]
        hit = torch.where(geomid[..., L:] >= 0, geomid[..., L:], self._ngeom)
        line_of_sight = self._hit_body[hit] == self._ent_body
        self.sees = line_of_sight & cone & self._pair_ok

    def _apply_locks(self, locked: torch.Tensor) -> None:
        """Freeze newly locked objects' joints at their current q (range [q, q], velocity 0),
        free newly unlocked ones (range +-FREE_RANGE)."""
        W, Ob = locked.shape
        newly = (locked & ~self.locked)[..., None]
        freed = (~locked & self.locked)[..., None]
        ww = self.worlds
        rng = ww.field["jnt_range"]
        q = ww.qpos[:, self._object_q].reshape(W, Ob, 4)
        cur = rng[:, self._object_jnt].reshape(W, Ob, 4, 2)
        free = self._free_range
        new = torch.where(
            newly[..., None],
            q[..., None].expand(W, Ob, 4, 2),
            torch.where(freed[..., None], free, cur),
        )
        rng[:, self._object_jnt] = new.reshape(W, Ob * 4, 2)
        qd = ww.qvel[:, self._object_dof].reshape(W, Ob, 4)
        ww.qvel[:, self._object_dof] = torch.where(newly, 0.0, qd).reshape(W, Ob * 4)

    def _apply_grabs(self, grabbed: torch.Tensor) -> None:
        """Welds follow `grabbed`; a new grab first freezes the current relative pose."""
        W, A, Ob = self.n_worlds, self.n_agents, self.n_objects
        objs = torch.arange(Ob, device=self.dev)
        holds = grabbed[..., None] == objs  # (W, A, O)
        newly = holds & ~(self.grabbed[..., None] == objs)
        ww = self.worlds
        ww.eq_active[:, self._weld] = holds.reshape(W, -1)
        # ent_pos are body origins (body_pos + slide q), what a weld relates
        data = TR.weld_data(self.agent_pos, self.agent_yaw, self.object_pos, self.object_yaw)
        eqd = ww.field["eq_data"]
        cur = eqd[:, self._weld].reshape(W, A, Ob, -1)
        eqd[:, self._weld] = torch.where(newly[..., None], data, cur).reshape(W, A * Ob, -1)
        self.grabbed = grabbed

    def _observe(self) -> None:
        """The observation dictionary (warp/rules.observe)."""
        self.obs = TR.observe(self.cfg, self, self._other_rows, self._other_sees)
