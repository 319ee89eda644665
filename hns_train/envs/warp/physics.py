"""`WarpWorlds`: N hide-and-seek worlds of one config as one MuJoCo Warp model and data.

One compiled model serves every world: wall, agent, box and ramp slots are fixed by the config
(world.py), and everything a layout changes lives in model fields with a per-world leading
dimension (`PER_WORLD_FIELDS`: geom sizes and positions, body offsets, inertias, gravity
compensation, joint ranges for locks, weld data for grabs). A reset copies those fields from the
MjModel that `world.ModelCache` compiles for the world's layout (the model `VectorGame` would
step), so a new layout costs a host compile and a copy, never a Warp recompile.

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
import logging

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
PARK_Z_WARP = -PARK_Z  # absent entities wait above the arena (module docstring)
log = logging.getLogger(__name__)


def require_warp():
    """Import `warp` and `mujoco_warp`, or say how to install them."""
    try:
        import warp

        warp.config.quiet = True  # before mujoco_warp initialises Warp: no per-kernel lines
        import mujoco_warp
    except ImportError as err:  # pragma: no cover - depends on the install
        raise ImportError(
            "the Warp backend needs the optional 'warp' extra: pip install -e '.[warp]' "
            f"(mujoco-warp==4.0.0 with warp-lang); import failed: {err}"
        ) from err
    return warp, mujoco_warp


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
        nconmax: int | None = None,
        njmax: int | None = None,
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
        template = build_spec(cfg, full_layout(cfg)).compile()
        self.template = template
        self.index = index_world(cfg, template)
        self.nq, self.nv = template.nq, template.nv
        self.layouts: list[Layout | None] = [None] * W
        with wp.ScopedDevice(self.device):
            self.m = mjw.put_model(template, batch_sizes={f: W for f in PER_WORLD_FIELDS})
            # constraint rows: contacts (4 pyramid rows each), 6 per active weld, 2 per frozen
            # joint; sized so a crowded randomwalls world fits
            self.d = mjw.make_data(
                template,
                nworld=W,
                nconmax=nconmax or max(64, 8 * (template.nbody - 1)),
                njmax=njmax or max(256, 16 * template.nv),
            )
        view = wp.to_torch
        self.torch_device = view(self.d.qpos).device
        self.qpos = view(self.d.qpos)
        self.qvel = view(self.d.qvel)
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
        self._reset_mask = wp.zeros(W, dtype=bool, device=self.device)
        self._reset_mask_t = view(self._reset_mask)
        from mujoco_warp._src.types import vec6

        self.geomgroup = vec6(*[int(g) for g in RAY_GROUPS])
        self._rays: dict[int, tuple] = {}
        self._graphs: dict[int, object] | None = {}  # CUDA graphs of `step` by nstep

    def tensor(self, x, dtype=torch.float32) -> torch.Tensor:
        return torch.as_tensor(x, dtype=dtype, device=self.torch_device)

    # ------------------------------------------------------------------ layouts
    def set_layouts(self, worlds, layouts: list[Layout]) -> list:
        """Give `worlds` new layouts and the fresh state of an episode's start (qvel, warm
        start, controls and welds cleared, entities at the layout's poses). Returns the C
        models compiled for them (world.ModelCache), whose layout fields were copied."""
        worlds = [int(w) for w in worlds]
        models = [self.cache.model_for(layout) for layout in layouts]
        qpos = np.stack([warp_qpos(self.cfg, lay, self.index, self.nq) for lay in layouts]).astype(
            np.float32
        )
        rows = torch.as_tensor(worlds, device=self.torch_device)
        for name in PER_WORLD_FIELDS:
            values = np.stack([np.asarray(getattr(m, name), dtype=np.float32) for m in models])
            if name == "geom_pos":  # unused wall slots wait above the arena too
                values[..., 2] = np.where(values[..., 2] == PARK_Z, PARK_Z_WARP, values[..., 2])
            dst = self.field[name]
            dst[rows] = torch.as_tensor(values.reshape(len(worlds), *dst.shape[1:])).to(dst)
        pos = self.field["geom_pos"][rows]
        self.geom_xpos[rows[:, None], self._static_geoms] = pos[:, self._static_geoms]
        self._reset_mask_t.zero_()
        self._reset_mask_t[rows] = True
        with self._stream():
            self.mjw.reset_data(self.m, self.d, reset=self._reset_mask)
        self.qpos[rows] = torch.as_tensor(qpos).to(self.qpos)
        for w, layout in zip(worlds, layouts, strict=True):
            self.layouts[w] = layout
        return models

    # ------------------------------------------------------------------ physics
    def step(self, nstep: int) -> None:
        """`nstep` physics steps of every world (controls from `ctrl`).

        On CUDA the `nstep` steps are captured once into a CUDA graph and replayed (one launch
        instead of hundreds of kernel launches per env step; the graph reads the same model and
        data buffers, so lock, grab, layout and control writes reach it). If the capture fails
        the steps run uncaptured, with a warning. Not yet run on a GPU (docs/benchmarks.md)."""
        with self._stream():
            if self.device.is_cuda and self._graphs is not None:
                graph = self._graphs.get(nstep)
                if graph is None:
                    graph = self._capture(nstep)
                if graph is not None:
                    self.wp.capture_launch(graph)
                    return
            for _ in range(nstep):
                self.mjw.step(self.m, self.d)

    def _capture(self, nstep: int):
        wp = self.wp
        try:
            with wp.ScopedCapture(device=self.device) as capture:
                for _ in range(nstep):
                    self.mjw.step(self.m, self.d)
        except Exception as err:  # any capture failure: run uncaptured
            log.warning("CUDA graph capture of the physics failed (%s); stepping uncaptured", err)
            self._graphs = None
            return None
        self._graphs[nstep] = capture.graph
        return capture.graph

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
