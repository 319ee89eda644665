"""`WarpWorlds`: N hide-and-seek worlds of one config as one MuJoCo Warp model and data.

One compiled model serves every world: wall, agent, box and ramp slots are fixed by the config
(world.py), and everything a layout changes lives in model fields with a per-world leading
dimension (`PER_WORLD_FIELDS`: geom sizes and positions, body offsets, inertias, gravity
compensation, joint ranges for locks, weld data for grabs). Those fields come from the MjModel
that `world.ModelCache` compiles for a layout (the model `VectorGame` would step;
`layout_arrays`), so a new layout costs a host compile, never a Warp recompile; the game keeps
them in a device bank (`bank.py`) and `reset_where` writes them into the worlds that reset, by
masked tensor writes with no host read.

What differs from the C worlds, and why:
- MuJoCo Warp fixes the collision pairs (`geom_contype` / `geom_conaffinity`) and ray groups
  (`geom_group`) when the model is put on the device; they are not per-world fields. The
  template is therefore the world with every slot present, and an absent entity is kept out of
  play by position alone: it waits at `PARK_Z_WARP` (above the arena, each slot 1 m from the
  next, gravity compensated) instead of world.py's `PARK_Z` below the floor, because the floor
  is a plane and everything below it would be in contact with it. Rays stay in the arena's
  plane and never reach the parked row; observations zero absent rows as before.
- Warp computes in float32 (C: float64), so trajectories agree closely for a few steps and then
  drift apart chaotically (tests/envs/test_warp_game.py measures how long they hold).
- MuJoCo Warp does not check the state it computes, where the C engine resets a world whose
  qpos, qvel or qacc went bad; `bad_state` and `restore_where` let the game do it
  (warp/game.py's docstring).

Every array the game reads or writes is a zero-copy `torch` view of the Warp array (`wp.to_torch`),
on the Warp device (`"cpu"` here; `"cuda:0"` on a GPU), so the rules and observations in
`warp/game.py` run as tensor code on the same memory the physics kernels use.

Costs on Warp's CPU device (docs/benchmarks.md): the first `WarpWorlds` of a machine compiles
Warp's kernels, 1.5-2.5 minutes on 2 cores for quadrant; they are cached under Warp's kernel
cache directory, so later processes load them in a few seconds. Other world counts and new
layouts reuse them; a config with other model sizes adds a few kernels specialised to them
(randomwalls about 40 s, chase about 20 s).
"""

from __future__ import annotations

import contextlib
import functools
import logging
from dataclasses import dataclass
from typing import Annotated

import mujoco
import numpy as np
import torch

from hns_train.envs.config import GameConfig
from hns_train.envs.layout import CUBE, Layout, n_wall_slots
from hns_train.envs.world import (
    PARK_Z,
    RAY_GROUPS,
    ModelCache,
    WorldIndex,
    build_spec,
    index_world,
    initial_qpos,
)
from hns_train.typed_config import Bounds, check_ranges

# MjModel fields a layout (or a lock / grab) changes, given a per-world leading dimension
PER_WORLD_FIELDS = (
    "body_pos",
    "body_mass",
    "body_subtreemass",
    "body_inertia",
    "body_invweight0",
    "body_gravcomp",
    "dof_invweight0",
    "geom_size",
    "geom_pos",
    "geom_aabb",
    "geom_rbound",
    "jnt_range",
    "eq_data",
)
# Data arrays a step reads that an episode starts with at zero (as mujoco_warp.reset_data)
RESET_ZERO = ("qvel", "qacc_warmstart", "qacc", "ctrl", "qfrc_applied", "xfrc_applied", "act")
RESET_ZERO += ("act_dot", "time")
# Buffer sizes and the solver cap, from bench/warp_capacity.py (docs/benchmarks.md, MuJoCo
# Warp): random play grabbing and locking often needed at most 20 (quadrant) / 53
# (randomwalls) contacts and 86 / 236 constraint rows in a world, and 16 Newton iterations
# (mean 3.5); the defaults leave about 2x or more on each
MIN_NCONMAX, CONTACTS_PER_BODY = 64, 8  # quadrant 64, randomwalls 120 per world (pooled)
MIN_NJMAX, ROWS_PER_DOF = 128, 8  # quadrant 224, randomwalls 480 rows per world
SOLVER_ITERATIONS = 30  # MuJoCo's default is 100; converged states stop far earlier
PARK_Z_WARP = -PARK_Z  # absent entities wait above the arena (module docstring)
log = logging.getLogger(__name__)


def require_warp():
    """Import `warp` and `mujoco_warp`, or say how to install them."""
    try:
        import warp

        # before mujoco_warp initialises Warp: no "Module ... load" line per kernel module on
        # the user's terminal (warp-lang 1.19 logs them at INFO; `quiet` was the older switch)
        warp.config.log_level = max(warp.config.log_level, warp.LOG_WARNING)
        import mujoco_warp
    except ImportError as err:  # pragma: no cover - depends on the install
        raise ImportError(
            "the Warp backend needs the optional 'warp' extra: pip install -e '.[warp]' "
            f"(mujoco-warp==4.0.0 with warp-lang); import failed: {err}"
        ) from err
    return warp, mujoco_warp


def capture_plan(is_cuda: bool, mempool: bool) -> tuple[bool, str]:
    """Whether the physics steps can be captured as a CUDA graph, and if not why: a capture
    needs a CUDA device, and an array allocated while capturing needs Warp's stream-ordered
    memory pool (on by default where the device supports it)."""
    if not is_cuda:
        return False, "not a CUDA device (kernels run in call order, nothing to capture)"
    if not mempool:
        return False, "the device's CUDA memory pool is off (wp.set_mempool_enabled)"
    return True, "capture on a stream of our own, replay on torch's current stream"


@functools.cache
def warn_once(message: str) -> None:
    """`log.warning(message)` the first time this process sees `message`."""
    log.warning(message)


def full_layout(cfg: GameConfig) -> Layout:
    """A layout with every slot present (cube boxes, walls in place): compiles to the template
    whose collision pairs and ray groups every world shares."""
    slots = n_wall_slots(cfg)
    g = cfg.grid_cells
    return Layout(
        wall_pos=np.tile([1.0, 1.0, 1.0], (slots, 1)),
        wall_half=np.full((slots, 3), 0.05),
        wall_present=np.ones(slots, dtype=bool),
        n_hiders=cfg.max_hiders,
        n_seekers=cfg.max_seekers,
        agent_present=np.ones(cfg.max_agents, dtype=bool),
        agent_xy=np.zeros((cfg.max_agents, 2)),
        agent_yaw=np.zeros(cfg.max_agents),
        box_kind=np.full(cfg.max_boxes, CUBE, dtype=np.int32),
        box_xy=np.zeros((cfg.max_boxes, 2)),
        ramp_xy=np.zeros((cfg.n_ramps, 2)),
        ramp_yaw=np.zeros(cfg.n_ramps),
        occupancy=np.zeros((g, g), dtype=bool),
    )


def warp_qpos(cfg: GameConfig, layout: Layout, index: WorldIndex, nq: int) -> np.ndarray:
    """`world.initial_qpos`, with absent entities parked above the arena (module docstring)."""
    qpos = initial_qpos(cfg, layout, index, nq)
    z = np.concatenate([index.agent_qpos[:, 2], index.object_qpos[:, 2]])
    qpos[z] = np.where(qpos[z] == PARK_Z, PARK_Z_WARP, qpos[z])
    return qpos


CountOrNone = Annotated[int | None, Bounds(1)]


@dataclass(frozen=True)
class PhysicsConfig:
    """MuJoCo Warp buffer sizes and solver settings (docs/benchmarks.md, MuJoCo Warp: the
    measurements they were chosen from). None: the default below / the model's own."""

    # contacts per world, pooled over worlds (MuJoCo Warp's `nconmax`); default
    # CONTACTS_PER_BODY per body, at least MIN_NCONMAX
    nconmax: CountOrNone = None
    # constraint rows per world, a hard per-world cap (`njmax`); default ROWS_PER_DOF per DOF,
    # at least MIN_NJMAX. Rows: 4 per pyramidal contact, 6 per active weld, 2 per frozen joint
    njmax: CountOrNone = None
    iterations: CountOrNone = SOLVER_ITERATIONS  # Newton iterations cap (None: the model's)
    ls_iterations: CountOrNone = None  # line-search iterations (MuJoCo's default 50)

    def __post_init__(self):
        check_ranges(self, "PhysicsConfig.")

    def sizes(self, template) -> tuple[int, int]:
        """(nconmax, njmax) for the all-slots template model."""
        nconmax = self.nconmax or max(MIN_NCONMAX, CONTACTS_PER_BODY * (template.nbody - 1))
        njmax = self.njmax or max(MIN_NJMAX, ROWS_PER_DOF * template.nv)
        return nconmax, njmax


class WarpWorlds:
    """`n_worlds` worlds of `cfg` on a Warp device, each with its own layout.

    Tensors (torch views of Warp arrays, shapes W x ...): qpos, qvel, ctrl, eq_active (bool),
    and `field[name]` for the per-world model fields (e.g. `field["jnt_range"]` (W, njnt, 2)).
    """

    def __init__(
        self,
        cfg: GameConfig,
        n_worlds: int,
        device: str | None = None,
        physics: PhysicsConfig | None = None,
    ):
        if n_worlds < 1:
            raise ValueError(f"n_worlds must be >= 1, got {n_worlds}")
        wp, mjw = require_warp()
        self.wp, self.mjw = wp, mjw
        wp.init()
        self.device = wp.get_device(device)
        self.cfg = cfg
        self.n_worlds = W = n_worlds
        self.cache = ModelCache(cfg)
        self.physics = ph = physics or PhysicsConfig()
        template = build_spec(cfg, full_layout(cfg)).compile()
        if ph.iterations is not None:
            template.opt.iterations = ph.iterations
        if ph.ls_iterations is not None:
            template.opt.ls_iterations = ph.ls_iterations
        self.template = template
        self.index = index_world(cfg, template)
        self.nq, self.nv = template.nq, template.nv
        with wp.ScopedDevice(self.device):
            self.m = mjw.put_model(template, batch_sizes={f: W for f in PER_WORLD_FIELDS})
            self.nconmax, self.njmax = ph.sizes(template)
            self.d = mjw.make_data(template, nworld=W, nconmax=self.nconmax, njmax=self.njmax)
        view = wp.to_torch
        self.torch_device = view(self.d.qpos).device
        self.qpos = view(self.d.qpos)
        self.qvel = view(self.d.qvel)
        self.qacc = view(self.d.qacc)
        self.ctrl = view(self.d.ctrl)
        self.eq_active = view(self.d.eq_active)
        self.overflow = view(self.d.overflow)  # (W,) sticky bitmask of mujoco_warp.OverflowType
        self.field = {f: view(getattr(self.m, f)) for f in PER_WORLD_FIELDS}
        self.geom_xpos = view(self.d.geom_xpos)
        # geoms of the world body (floor, walls): Warp computes their poses once, in make_data,
        # so a new layout writes them (identity orientation: geom_xpos = geom_pos)
        static = template.body_weldid[template.geom_bodyid] == 0
        if not np.allclose(template.geom_quat[static], [1, 0, 0, 0]):
            raise RuntimeError("world.py's static geoms are no longer axis-aligned")
        self._static_geoms = torch.as_tensor(np.flatnonzero(static), device=self.torch_device)
        # the Data a step reads besides qpos, cleared by `reset_where` (RESET_ZERO)
        self._cleared = [view(getattr(self.d, name)) for name in RESET_ZERO]
        self._eq_active0 = torch.as_tensor(template.eq_active0.astype(bool)).to(self.eq_active)
        from mujoco_warp._src.types import vec6

        self.geomgroup = vec6(*[int(g) for g in RAY_GROUPS])
        self._rays: dict[int, tuple] = {}
        # CUDA graphs of `step` by nstep (None: capture given up), steps run once uncaptured
        self._graphs: dict[int, object] | None = {} if self.device.is_cuda else None
        self._warm: set[int] = set()
        self._capture_stream = None

    def tensor(self, x, dtype=torch.float32) -> torch.Tensor:
        return torch.as_tensor(x, dtype=dtype, device=self.torch_device)

    # ------------------------------------------------------------------ layouts
    def layout_arrays(
        self, layouts: list[Layout], cache: ModelCache | None = None
    ) -> dict[str, np.ndarray]:
        """Host arrays (n, ...) float32 of what `layouts` write into a world: every
        `PER_WORLD_FIELDS` entry, copied from the C model `world.ModelCache` compiles for the
        layout (the model `VectorGame` would step), and "qpos", the episode's first pose.
        cache: the `ModelCache` to compile with (one per thread; default this object's)."""
        cache = cache or self.cache
        models = [cache.model_for(layout) for layout in layouts]
        qpos = [warp_qpos(self.cfg, lay, self.index, self.nq) for lay in layouts]
        out = {"qpos": np.stack(qpos).astype(np.float32)}
        for name in PER_WORLD_FIELDS:
            values = np.stack([np.asarray(getattr(m, name), dtype=np.float32) for m in models])
            if name == "geom_pos":  # unused wall slots wait above the arena too
                values[..., 2] = np.where(values[..., 2] == PARK_Z, PARK_Z_WARP, values[..., 2])
            out[name] = values.reshape(len(layouts), *self.field[name].shape[1:])
        return out

    def reset_where(self, mask: torch.Tensor, src: dict[str, torch.Tensor]) -> None:
        """The fresh state of an episode's start in the worlds where `mask` (W,) bool: their
        layout fields and first qpos from `src` (name -> (W, ...) tensors, rows where `mask`
        are read; `layout_arrays`'s keys), the rest of the state a step reads cleared as
        `mujoco_warp.reset_data` clears it (`RESET_ZERO`, welds back to `eq_active0`). Masked
        writes over every world: no host read, so it can run on every step whether or not a
        world finished. (Not `reset_data` itself: it defines its kernels anew on every call,
        80-100 ms of host time per call on the CPU device, measured; tests/envs/
        test_warp_scale.py checks that `reset_data` after this changes none of that state.)"""
        for name in PER_WORLD_FIELDS:
            dst = self.field[name]
            m = mask.reshape(-1, *([1] * (dst.dim() - 1)))
            dst.copy_(torch.where(m, src[name], dst))
        st = self._static_geoms
        xpos = self.geom_xpos[:, st]
        self.geom_xpos[:, st] = torch.where(mask[:, None, None], src["geom_pos"][:, st], xpos)
        self._clear_where(mask)
        self.eq_active.copy_(torch.where(mask[:, None], self._eq_active0, self.eq_active))
        self.qpos.copy_(torch.where(mask[:, None], src["qpos"], self.qpos))

    def bad_state(self) -> torch.Tensor:
        """(W,) bool: the worlds whose qpos, qvel or qacc hold a NaN, an Inf or a value beyond
        `mujoco.mjMAXVAL`, the rule by which the C engine resets a world's state (its bad
        qpos / qvel / qacc warnings). No host read."""
        ok = [(x.abs() <= mujoco.mjMAXVAL).all(dim=1) for x in (self.qpos, self.qvel, self.qacc)]
        return ~(ok[0] & ok[1] & ok[2])

    def restore_where(self, mask: torch.Tensor, qpos: torch.Tensor, qvel: torch.Tensor) -> None:
        """Put `qpos` / `qvel` (W, nq) / (W, nv) back in the worlds where `mask` (W,) bool and
        clear the rest of their state as `reset_where` does (`RESET_ZERO`: the solver's warm
        start among it); layout fields and welds stay. Masked writes: no host read."""
        self._clear_where(mask)
        self.qpos.copy_(torch.where(mask[:, None], qpos, self.qpos))
        self.qvel.copy_(torch.where(mask[:, None], qvel, self.qvel))

    def _clear_where(self, mask: torch.Tensor) -> None:
        """Zero the `RESET_ZERO` arrays of the worlds where `mask` (W,) bool."""
        for x in self._cleared:
            m = mask.reshape(-1, *([1] * (x.dim() - 1)))
            x.copy_(torch.where(m, torch.zeros((), dtype=x.dtype, device=x.device), x))

    # ------------------------------------------------------------------ physics
    def step(self, nstep: int) -> None:
        """`nstep` physics steps of every world (controls from `ctrl`).

        On CUDA the `nstep` steps are captured into a CUDA graph and replayed on torch's
        current stream (one launch instead of hundreds of kernel launches per env step; the
        graph reads the same model and data buffers, so lock, grab, layout and control writes
        reach it). The first call runs uncaptured (it loads Warp's modules), the second
        captures on a stream of our own (CUDA refuses to capture on the legacy default stream
        torch uses unless told otherwise) and every later call replays. Where `capture_plan`
        says no, or the capture fails, the steps run uncaptured, logged once per process."""
        with self._stream():
            graph = self._graphs.get(nstep) if self._graphs is not None else None
            if graph is None and self._graphs is not None and nstep in self._warm:
                graph = self._capture(nstep)
            if graph is not None:
                self.wp.capture_launch(graph, stream=self.wp.get_stream(self.device))
                return
            for _ in range(nstep):
                self.mjw.step(self.m, self.d)
            self._warm.add(nstep)

    def _capture(self, nstep: int):
        wp = self.wp
        ok, why = capture_plan(self.device.is_cuda, wp.is_mempool_enabled(self.device))
        if not ok:
            warn_once(f"the physics steps run uncaptured: {why}")
            self._graphs = None
            return None
        if self._capture_stream is None:
            self._capture_stream = wp.Stream(self.device)
        stream = self._capture_stream
        stream.wait_stream(wp.get_stream(self.device))  # the state the graph starts from
        try:
            with wp.ScopedStream(stream), wp.ScopedCapture(device=self.device, stream=stream) as c:
                for _ in range(nstep):
                    self.mjw.step(self.m, self.d)
        except Exception as err:  # any capture failure: run uncaptured
            warn_once(f"CUDA graph capture of the physics failed ({err}); stepping uncaptured")
            self._graphs = None
            return None
        self._graphs[nstep] = c.graph
        return c.graph

    def kinematics(self) -> None:
        """Geom poses from qpos (rays read them), as mj_kinematics."""
        with self._stream():
            self.mjw.kinematics(self.m, self.d)

    def synchronize(self) -> None:
        """Wait for the device's queued work (for timing)."""
        self.wp.synchronize_device(self.device)
        if self.torch_device.type == "cuda":
            torch.cuda.synchronize(self.torch_device)

    def _stream(self):
        # On CUDA, Warp launches go on torch's current stream, so the tensor code before and
        # after them sees their results in order (not measured on a GPU yet). The CPU device
        # runs everything in call order.
        if self.torch_device.type != "cuda":
            return contextlib.nullcontext()
        return self.wp.ScopedStream(self.wp.stream_from_torch(torch.cuda.current_stream()))

    def rays(self, pnt: torch.Tensor, vec: torch.Tensor, bodyexclude: torch.Tensor):
        """Cast rays in every world from the current geom poses (call `kinematics` first).

        pnt, vec (W, R, 3) float32; bodyexclude (R,) int body each ray ignores (-1: none).
        Returns dist (W, R) (-1 on a miss) and geomid (W, R) (-1 on a miss), as torch views
        of buffers reused by the next call with the same R.
        """
        wp = self.wp
        W, R = pnt.shape[:2]
        if R not in self._rays:
            with wp.ScopedDevice(self.device):
                bufs = (
                    wp.zeros((W, R), dtype=wp.vec3),
                    wp.zeros((W, R), dtype=wp.vec3),
                    wp.zeros(R, dtype=int),
                    wp.zeros((W, R), dtype=float),
                    wp.zeros((W, R), dtype=int),
                    wp.zeros((W, R), dtype=wp.vec3),
                )
            self._rays[R] = (bufs, [wp.to_torch(b) for b in bufs])
        bufs, views = self._rays[R]
        views[0].copy_(pnt)
        views[1].copy_(vec)
        views[2].copy_(bodyexclude)
        with self._stream():
            self.mjw.rays(self.m, self.d, bufs[0], bufs[1], self.geomgroup, True, *bufs[2:])
        return views[3], views[4]
