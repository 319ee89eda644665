"""`HideAndSeekGame`: W hide-and-seek worlds of one config, stepped in lockstep.

This is the core every interface stands on (the PettingZoo env is the batch of one, actors use
many). The rules live in `rules.py` as array operations over worlds; this module owns the
MuJoCo edges: building worlds (`layout.py`, `world.py`), reading state, casting rays, applying
grabs (weld equalities) and locks (joint ranges), and stepping physics.

One env step (spec §3-4):
1. Seekers' actions become the no-op during preparation (t < prep_steps); absent agents' too.
2. Locks, then grabs, are decided from the visibility of the previous step and the current
   distances; their MuJoCo edits are applied.
3. Controls are set (bin k -> linspace(-0.9, 0.9, 11)[k], times gear 100, along world x/y and
   yaw) and `substeps` physics steps run; positions, rays and observations describe the new
   state.
4. Rays: every agent casts the lidar fan and one ray towards every entity centre (agents, box
   centres, ramp bounding-box centres), over static geoms too, with the floor's geom group
   excluded (the `flg_static` trap in the spec).
5. Rewards, statistics, observations; the episode is truncated (never terminated) at `horizon`.

Physics runs in `mujoco.batch.Batch`: one C call steps every world (on `threads` threads, the
results bit-identical at any thread count) and one C call casts every world's rays. Each world
keeps its own MjModel (`set_models`), because locks edit `jnt_range` and grabs edit `eq_data`;
the batch reads those edits in place. Per-world state lives in the batch's state rows (no
MjData per world); `datas[w]` is a `WorldState` of views into them for the lock/grab code, and
`world_data(w)` materialises a real MjData for rendering. Body poses are computed from qpos
(`_kinematics`): every movable body hangs off the world by slide x/y/z + hinge z with an
identity frame, so its position is body_pos + qpos[xyz] (bit-identical to `mj_kinematics`) and
its orientation the yaw quaternion; this spares a `mj_kinematics` or `mj_fwdPosition` per world.

Seeding: world w draws its layouts from its own generator, seeded from `seed` (or from the seed
given to `reset` for that world); physics is deterministic, so equal seeds give equal episodes.
"""

from __future__ import annotations

from dataclasses import dataclass

import mujoco
import mujoco.batch
import numpy as np

from hns_train.envs import observations as O
from hns_train.envs import rules
from hns_train.envs.config import GameConfig
from hns_train.envs.layout import ABSENT, sample_layout
from hns_train.envs.stats import EpisodeStats
from hns_train.envs.world import (
    FREE_RANGE,
    RAY_GROUPS,
    ModelCache,
    initial_qpos,
    object_half_extents,
    set_locked_highlight,
)

STATE = mujoco.mjtState.mjSTATE_INTEGRATION  # the rows of mujoco.batch.Batch.state


@dataclass
class WorldState:
    """One world's slice of the batch, with MjData's field names: views, so writes to qpos, qvel
    and eq_active are the world's state at its next step; xpos/xquat are read-only poses."""

    qpos: np.ndarray
    qvel: np.ndarray
    eq_active: np.ndarray  # mjtNum in the batch's rows (MjData's is uint8)
    xpos: np.ndarray
    xquat: np.ndarray


class HideAndSeekGame:
    def __init__(
        self, cfg: GameConfig, n_worlds: int = 1, seed: int | None = None, threads: int = 1
    ):
        if n_worlds < 1:
            raise ValueError(f"n_worlds must be >= 1, got {n_worlds}")
        if threads < 1:
            raise ValueError(f"threads must be >= 1, got {threads}")
        self.cfg = cfg
        self.n_worlds = W = n_worlds
        self.n_agents = A = cfg.max_agents
        self.n_objects = Ob = cfg.max_boxes + cfg.n_ramps
        self.threads = threads
        self.cache = ModelCache(cfg)
        self._seed_rngs(seed)
        self.models: list[mujoco.MjModel | None] = [None] * W
        self.datas: list[WorldState] = []
        self.layouts: list = [None] * W
        self.batch: mujoco.batch.Batch | None = None
        self._live: mujoco.MjData | None = None  # world 0 as an MjData, once `data` was used

        self.is_hider = np.arange(A) < cfg.max_hiders
        self.team = np.where(self.is_hider, rules.HIDERS, rules.SEEKERS)
        self.lockable = np.array(
            [cfg.boxes_lockable] * cfg.max_boxes + [cfg.ramps_lockable] * cfg.n_ramps, dtype=bool
        )
        self.ctrl_levels = np.linspace(-cfg.max_ctrl, cfg.max_ctrl, cfg.action_bins)
        self.action_nvec = np.array([cfg.action_bins] * 3 + [2, 2])
        self.noop = np.array([cfg.action_bins // 2] * 3 + [0, 0])
        angles = 2 * np.pi * np.arange(cfg.n_lidar) / cfg.n_lidar
        self.lidar_dirs = np.stack([np.cos(angles), np.sin(angles), np.zeros_like(angles)], -1)

        self.t = np.zeros(W, dtype=np.int64)
        self.agent_present = np.zeros((W, A), dtype=bool)
        self.object_present = np.zeros((W, Ob), dtype=bool)
        self.half = np.zeros((W, Ob, 3))
        self.box_size = np.zeros((W, cfg.max_boxes, 3))
        self.others = np.full((W, A, A - 1), -1, dtype=np.int64)
        self.locked = np.zeros((W, Ob), dtype=bool)
        self.lock_team = np.full((W, Ob), rules.NO_TEAM, dtype=np.int64)
        self.lock_agent = np.full((W, Ob), -1, dtype=np.int64)
        self.grabbed = np.full((W, A), -1, dtype=np.int64)
        # state read from MuJoCo after each step
        self.agent_pos = np.zeros((W, A, 3))
        self.agent_yaw = np.zeros((W, A))
        self.agent_vel = np.zeros((W, A, 4))
        self.object_pos = np.zeros((W, Ob, 3))
        self.object_yaw = np.zeros((W, Ob))
        self.object_vel = np.zeros((W, Ob, 4))
        self.lidar = np.full((W, A, cfg.n_lidar), cfg.lidar_range)
        self.sees_agent = np.zeros((W, A, A), dtype=bool)
        self.sees_object = np.zeros((W, A, Ob), dtype=bool)
        self.stats = EpisodeStats(W, cfg.max_boxes, Ob)
        self.obs = {
            k: np.zeros((W, A, *s), dtype=np.float32) for k, s in O.observation_shapes(cfg).items()
        }

    # ------------------------------------------------------------------ public API
    @property
    def index(self):
        return self.cache.index

    @property
    def model(self) -> mujoco.MjModel:
        """World 0's model (for tools and the single-world interfaces)."""
        return self.models[0]

    @property
    def data(self) -> mujoco.MjData:
        """World 0 as a live MjData (single-world tools, scripted scenes, rendering).

        Kept in sync with the batch once asked for: after every step and reset it holds world
        0's state with kinematics computed, and what is written to its state (qpos, qvel, ...)
        between steps is world 0's state from the next step (or `_read_state`) on.
        """
        if self._live is None:
            if self.batch is None:
                raise RuntimeError("call reset() before reading world data")
            self._live = mujoco.MjData(self.models[0])
            self._push_live()
        return self._live

    def world_data(self, w: int) -> mujoco.MjData:
        """World w's current state as a new MjData with kinematics computed (for rendering and
        tools; a snapshot: later steps do not change it)."""
        if self.batch is None:
            raise RuntimeError("call reset() before reading world data")
        data = self.batch.get_data(int(w))
        mujoco.mj_kinematics(self.models[w], data)
        return data

    def reset(self, worlds=None, seeds=None) -> dict[str, np.ndarray]:
        """New worlds for `worlds` (default: all); returns observations of every world."""
        worlds = np.arange(self.n_worlds) if worlds is None else np.asarray(worlds, dtype=int)
        if self.batch is None and len(np.unique(worlds)) != self.n_worlds:
            raise ValueError("the first reset() must cover every world (worlds=None)")
        if seeds is not None:
            if len(seeds) != len(worlds):
                raise ValueError(f"got {len(seeds)} seeds for {len(worlds)} worlds")
            for w, s in zip(worlds, seeds, strict=True):
                if s is not None:
                    self.rngs[w] = np.random.default_rng(s)
        cfg = self.cfg
        for w in worlds:
            layout = sample_layout(cfg, self.rngs[w])
            self.models[w], self.layouts[w] = self.cache.model_for(layout), layout
            self.agent_present[w] = layout.agent_present
            self.object_present[w] = np.concatenate(
                [layout.box_kind != ABSENT, np.ones(cfg.n_ramps, dtype=bool)]
            )
            self.half[w] = object_half_extents(cfg, layout)
            self.box_size[w] = 2 * self.half[w, : cfg.max_boxes]
        self._reset_physics(worlds)
        self.others[worlds] = O.others_table(self.agent_present[worlds])
        self.t[worlds] = 0
        self.locked[worlds] = False
        self.lock_team[worlds] = rules.NO_TEAM
        self.lock_agent[worlds] = -1
        self.grabbed[worlds] = -1
        self._read_state(worlds)
        self._cast_rays(worlds)
        self.stats.reset(worlds, self.object_pos[:, :, :2])
        self._observe(worlds)
        return self.obs

    def step(self, actions: np.ndarray):
        """Advance every world one env step.

        actions: (W, A, 5) integers in [0, nvec). Returns (obs, rewards (W, A), truncated (W,),
        infos: list of W dicts, holding the episode statistics where the episode ended).
        """
        if self.batch is None:
            raise RuntimeError("call reset() before step()")
        actions = self.check_actions(actions)
        self._pull_live()
        cfg = self.cfg
        in_prep = self.t < cfg.prep_steps
        seeker_idle = in_prep[:, None] & ~self.is_hider[None, :]
        actions = np.where((seeker_idle | ~self.agent_present)[..., None], self.noop, actions)

        dist = rules.obb_distance(self.agent_pos, self.object_pos, self.object_yaw, self.half)
        eligible = rules.eligibility(
            self.sees_object, dist, cfg.grab_range, self.agent_present, self.object_present
        )
        locked, lock_team, lock_agent = rules.update_locks(
            self.locked,
            self.lock_team,
            self.lock_agent,
            eligible,
            actions[..., 4],
            self.team,
            self.lockable,
        )
        self._apply_locks(locked)
        self.locked, self.lock_team, self.lock_agent = locked, lock_team, lock_agent
        grabbed = rules.choose_grabs(self.grabbed, actions[..., 3], eligible, dist, self.locked)
        self._apply_grabs(grabbed)

        ctrl = self.ctrl_levels[actions[..., :3]]  # (W, A, 3)
        self._ctrl[:, self._ctrl_adr] = ctrl.reshape(self.n_worlds, -1)
        self.batch.step(nstep=cfg.substeps)
        self._push_live()

        worlds = np.arange(self.n_worlds)
        self._read_state(worlds)
        self._cast_rays(worlds)
        reward, hiders_seen = rules.rewards(
            self.sees_agent,
            self.is_hider,
            self.agent_present,
            self.agent_pos[..., :2],
            self.object_pos[..., :2],
            self.object_present,
            in_prep,
            cfg.oob_low,
            cfg.oob_high,
            cfg.oob_penalty,
            cfg.penalise_objects_oob,
        )
        self.t += 1
        self.stats.step(
            self.t,
            cfg.prep_steps,
            in_prep,
            reward,
            self.is_hider,
            self.agent_present,
            hiders_seen,
            self.object_pos[..., :2],
            self.object_present,
            self.locked,
            agent_pos=self.agent_pos,
            object_pos=self.object_pos,
            object_yaw=self.object_yaw,
            object_vel=self.object_vel,
            half=self.half,
            grabbed=self.grabbed,
            agent_radius=cfg.agent_radius,
        )
        truncated = self.t >= cfg.horizon
        infos: list[dict] = [{} for _ in range(self.n_worlds)]
        done = np.flatnonzero(truncated)
        if done.size:
            finished = self.stats.finish(
                done, self.object_pos[..., :2], self.object_present, self.locked
            )
            for w, s in zip(done, finished, strict=True):
                infos[w] = s
        self._observe(worlds)
        return self.obs, reward, truncated, infos

    def check_actions(self, actions) -> np.ndarray:
        actions = np.asarray(actions)
        want = (self.n_worlds, self.n_agents, len(self.action_nvec))
        if actions.shape != want:
            raise ValueError(
                f"actions have shape {actions.shape}; expected {want} (worlds, agents, 5)"
            )
        integral = np.issubdtype(actions.dtype, np.integer) or (
            np.issubdtype(actions.dtype, np.floating) and np.all(actions == np.round(actions))
        )
        if not integral:
            raise ValueError(f"actions must be integers, got dtype {actions.dtype}")
        bad = (actions < 0) | (actions >= self.action_nvec)
        if bad.any():
            w, a, k = np.argwhere(bad)[0]
            raise ValueError(
                f"action {int(actions[w, a, k])} for world {w}, agent slot {a}, dimension {k} is "
                f"outside [0, {self.action_nvec[k] - 1}] "
                f"(MultiDiscrete {self.action_nvec.tolist()})"
            )
        return actions.astype(np.int64)

    # ------------------------------------------------------------------ MuJoCo edges
    def _seed_rngs(self, seed):
        seqs = np.random.SeedSequence(seed).spawn(self.n_worlds)
        self.rngs = [np.random.default_rng(s) for s in seqs]

    def _reset_physics(self, worlds: np.ndarray) -> None:
        """Fresh physics state for `worlds` (their models are already in self.models)."""
        if self.batch is None:
            self._make_batch()
        self.batch.set_models(self.models)
        ids = np.unique(worlds)
        # mj_resetData per world (qvel, warm start, controls, eq_active from the model), then
        # the layout's poses: the same state a new MjData holds, without allocating one
        self.batch.reset(ids, stage=mujoco.mjtStage.mjSTAGE_NONE)
        idx = self.index
        nq = self.models[ids[0]].nq
        for w in ids:
            m = self.models[w]
            self._qpos[w] = initial_qpos(self.cfg, self.layouts[w], idx, nq)
            self._body_pos[w] = m.body_pos[self._ent_body]
            self._geom_pos[w] = m.geom_pos[self._ent_geom]
        if ids[0] == 0:
            self._push_live()

    def _pull_live(self) -> None:
        """World 0's state from the live MjData into the batch (writes made to `data`)."""
        if self._live is not None:
            mujoco.mj_getState(self.models[0], self._live, self._state0, STATE)

    def _push_live(self) -> None:
        if self._live is not None:
            mujoco.mj_setState(self.models[0], self._live, self._state0, STATE)
            mujoco.mj_kinematics(self.models[0], self._live)

    def _make_batch(self) -> None:
        W, idx = self.n_worlds, self.index
        model = self.models[0]
        for m in self.models:  # every world must give MjData the same layout (see world._hide)
            if m.nbuffer != model.nbuffer:
                raise RuntimeError("worlds of one config compiled to different MjData layouts")
        self.batch = mujoco.batch.Batch(model, W, self.threads)
        self._qpos = self.batch.bind("qpos")
        self._qvel = self.batch.bind("qvel")
        self._ctrl = self.batch.bind("ctrl")
        self._eq_active = self.batch.bind("eq_active")
        self._state0 = self.batch.state[0]
        self._ctrl_adr = idx.agent_ctrl.ravel()
        # entities: agents then objects (boxes, ramps); their bodies, main geoms and joints
        self._ent_body = np.concatenate([idx.agent_body, idx.object_body]).astype(np.int64)
        self._ent_geom = np.concatenate([idx.agent_geom, idx.object_geom]).astype(np.int64)
        ent_qpos = np.concatenate([idx.agent_qpos, idx.object_qpos]).reshape(-1, 4)
        self._ent_qpos_xyz = ent_qpos[:, :3]
        self._ent_qpos_yaw = ent_qpos[:, 3]
        E = len(self._ent_body)
        self._body_pos = np.zeros((W, E, 3))
        self._geom_pos = np.zeros((W, E, 3))
        self.entity_centre = np.zeros((W, E, 3))  # main geom centres: what vision rays aim at
        self._xpos = np.zeros((W, model.nbody, 3))
        self._xquat = np.zeros((W, model.nbody, 4))
        self._xquat[:, :, 0] = 1.0
        self.datas = [
            WorldState(
                self._qpos[w], self._qvel[w], self._eq_active[w], self._xpos[w], self._xquat[w]
            )
            for w in range(W)
        ]
        # rays per agent: the lidar fan, then one towards each entity centre
        self._nray = self.cfg.n_lidar + E
        self._ray_exclude = np.repeat(idx.agent_body, self._nray).astype(np.int32)
        self._ray_target_body = self._ent_body
        self._self_target = (np.arange(self.n_agents), np.arange(self.n_agents))
        self._not_self = np.ones((self.n_agents, E), dtype=bool)
        self._not_self[self._self_target] = False

    def _kinematics(self, worlds) -> None:
        """Poses of agents and objects from qpos (see the module docstring)."""
        q = self._qpos[worlds]
        pos = self._body_pos[worlds] + q[:, self._ent_qpos_xyz]
        half_yaw = 0.5 * q[:, self._ent_qpos_yaw]
        c, s = np.cos(half_yaw), np.sin(half_yaw)
        cos_yaw, sin_yaw = c * c - s * s, 2.0 * c * s  # mju_quat2Mat of (c, 0, 0, s)
        g = self._geom_pos[worlds]
        centre = pos.copy()
        centre[..., 0] += cos_yaw * g[..., 0] - sin_yaw * g[..., 1]
        centre[..., 1] += sin_yaw * g[..., 0] + cos_yaw * g[..., 1]
        centre[..., 2] += g[..., 2]
        self.entity_centre[worlds] = centre
        bodies = self._ent_body
        self._xpos[worlds[:, None], bodies] = pos
        self._xquat[worlds[:, None], bodies, 0] = c
        self._xquat[worlds[:, None], bodies, 3] = s

    def _read_state(self, worlds) -> None:
        worlds = np.asarray(worlds)
        idx = self.index
        self._pull_live()
        self._kinematics(worlds)
        q, v = self._qpos[worlds], self._qvel[worlds]
        self.agent_pos[worlds] = self._xpos[worlds[:, None], idx.agent_body]
        self.agent_yaw[worlds] = q[:, idx.agent_qpos[:, 3]]
        self.agent_vel[worlds] = v[:, idx.agent_qvel]
        self.object_pos[worlds] = self._xpos[worlds[:, None], idx.object_body]
        self.object_yaw[worlds] = q[:, idx.object_qpos[:, 3]]
        self.object_vel[worlds] = v[:, idx.object_qvel]

    def _cast_rays(self, worlds) -> None:
        """Lidar and line of sight for the given worlds: one batched ray call for all of them."""
        cfg, idx = self.cfg, self.index
        worlds = np.unique(worlds)  # the batch takes sorted ids; results are stored by world
        A, L = self.n_agents, cfg.n_lidar
        n = len(worlds)
        targets = self.entity_centre[worlds]  # (n, E, 3)
        origin = self.agent_pos[worlds]  # (n, A, 3)
        to = targets[:, None, :, :] - origin[:, :, None, :]  # (n, A, E, 3)
        to /= np.maximum(np.sqrt((to * to).sum(-1, keepdims=True)), 1e-9)
        # an agent's ray towards itself has no direction (mj_ray rejects it): cast it upwards and
        # count it as unseen below
        to[:, self._self_target[0], self._self_target[1]] = (0.0, 0.0, 1.0)
        vec = np.empty((n, A, self._nray, 3))
        vec[:, :, :L] = self.lidar_dirs
        vec[:, :, L:] = to
        pnt = np.broadcast_to(origin[:, :, None, :], vec.shape).reshape(n, -1, 3)
        dist, geomid = self.batch.ray(
            pnt,
            vec.reshape(n, -1, 3),
            RAY_GROUPS,
            True,
            self._ray_exclude,
            ids=None if n == self.n_worlds else worlds,
        )
        dist = dist.reshape(n, A, self._nray)
        geomid = geomid.reshape(n, A, self._nray)
        present = self.agent_present[worlds]
        lidar = np.where(geomid[..., :L] >= 0, dist[..., :L], cfg.lidar_range)
        self.lidar[worlds] = np.minimum(lidar, cfg.lidar_range) * present[..., None]
        hit = geomid[..., L:]
        hit_body = np.where(hit >= 0, idx.geom_body[np.maximum(hit, 0)], -1)
        line_of_sight = (hit_body == self._ray_target_body) & self._not_self
        cone = rules.in_vision_cone(
            self.agent_pos[worlds], self.agent_yaw[worlds], targets, cfg.vision_half_angle
        )
        sees = line_of_sight & cone & present[..., None]
        self.sees_agent[worlds] = sees[:, :, :A] & present[:, None, :]
        self.sees_object[worlds] = sees[:, :, A:] & self.object_present[worlds][:, None, :]

    def data_geom_centres(self, w: int) -> np.ndarray:
        """(A+Ob, 3) centre of each entity's main geom: the point vision rays aim at."""
        return self.entity_centre[w]

    def _apply_locks(self, locked: np.ndarray) -> None:
        idx = self.index
        for w, o in np.argwhere(locked != self.locked):
            m, d = self.models[w], self.datas[w]
            jnt = idx.object_jnt[o]
            if locked[w, o]:
                q = d.qpos[idx.object_qpos[o]]
                m.jnt_range[jnt] = np.stack([q, q], axis=-1)
                d.qvel[idx.object_qvel[o]] = 0.0
            else:
                m.jnt_range[jnt] = (-FREE_RANGE, FREE_RANGE)
            set_locked_highlight(m, idx.object_geom[o], bool(locked[w, o]))

    def _apply_grabs(self, grabbed: np.ndarray) -> None:
        idx = self.index
        for w, a in np.argwhere(grabbed != self.grabbed):
            m, d = self.models[w], self.datas[w]
            old, new = self.grabbed[w, a], grabbed[w, a]
            if old >= 0:
                d.eq_active[idx.weld[a, old]] = 0
            if new >= 0:
                eq = idx.weld[a, new]
                m.eq_data[eq] = weld_data(d, idx.agent_body[a], idx.object_body[new])
                d.eq_active[eq] = 1
        self.grabbed = grabbed

    def _observe(self, worlds) -> None:
        cfg, nb = self.cfg, self.cfg.max_boxes
        prep = (
            np.minimum(1.0, self.t[worlds] / cfg.prep_steps)
            if cfg.prep_steps
            else np.ones(len(worlds))
        )
        agent_vec = O.agent_vectors(
            self.agent_pos[worlds],
            self.agent_yaw[worlds],
            self.agent_vel[worlds],
            self.is_hider.astype(float),
            prep,
        )
        rows = O.object_rows(
            self.object_pos[worlds], self.object_yaw[worlds], self.object_vel[worlds]
        )
        box_rows = rows[:, :nb]
        if cfg.box_size_obs:
            box_rows = np.concatenate([box_rows, self.box_size[worlds]], axis=-1)
        flags = O.lock_flags(
            self.lock_agent[worlds], self.lock_team[worlds], self.locked[worlds], self.team
        )
        obs = O.assemble(
            cfg,
            agent_vec,
            self.agent_present[worlds],
            self.others[worlds],
            self.sees_agent[worlds],
            box_rows,
            rows[:, nb:],
            flags,
            self.sees_object[worlds],
            self.object_present[worlds],
            self.lidar[worlds],
        )
        for key, value in obs.items():
            self.obs[key][worlds] = value


def weld_data(d: mujoco.MjData, body1: int, body2: int) -> np.ndarray:
    """Weld `eq_data` row holding body2's current pose relative to body1 (spec: freeze at grab)."""
    q1_inv = np.empty(4)
    mujoco.mju_negQuat(q1_inv, d.xquat[body1])
    rel_pos = np.empty(3)
    mujoco.mju_rotVecQuat(rel_pos, d.xpos[body2] - d.xpos[body1], q1_inv)
    rel_quat = np.empty(4)
    mujoco.mju_mulQuat(rel_quat, q1_inv, d.xquat[body2])
    # anchor (3) at body2's origin, relative pose (7), torque scale 1, flag 0: keep our pose
    return np.concatenate([np.zeros(3), rel_pos, rel_quat, [1.0, 0.0]])
