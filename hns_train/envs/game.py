"""`HideAndSeekGame`: W hide-and-seek worlds of one config, stepped in lockstep.

This is the core every interface stands on (the PettingZoo env is the batch of one, actors use
many). The rules are stated in `rules.py` and run here as compiled loops; this module owns the
MuJoCo edges: building worlds (`layout.py`, `world.py`), reading state, casting rays, applying
grabs (weld equalities) and locks (joint ranges), and stepping physics.

One env step (spec §3-4):
1. Seekers' actions become the no-op during preparation (t < prep_steps); absent agents' too.
2. Locks, then grabs, are decided from the visibility of the previous step and the current
   distances (neither rule looks at the other's result, so the order does not matter); their
   MuJoCo edits are applied. Grabs are decided afresh every step (rules.py).
3. Controls are set (bin k -> linspace(-0.9, 0.9, 11)[k], times gear 100, along world x/y and
   yaw) and `substeps` physics steps run; positions, rays and observations describe the new
   state.
4. Rays: every agent casts the lidar fan and one ray towards every entity centre (agents, box
   centres, ramp bounding-box centres), over static geoms too, with the floor's geom group
   excluded (the `flg_static` trap in the spec).
5. Rewards, statistics, observations; the episode is truncated (never terminated) at `horizon`.

Physics runs in `mujoco.batch.Batch`: one C call steps every world (on `threads` threads, the
results bit-identical at any thread count). Rays: with one thread the compiled loop of `rays.py`
casts every world's rays (MuJoCo's own per-geom intersections, only on the geoms a ray can
reach, only the rays someone reads); with more, one C call of the batch casts them on its
threads; both give `mj_ray`'s results. Each world
keeps its own MjModel (`set_models`), because locks edit `jnt_range` and grabs edit `eq_data`;
the batch reads those edits in place. Per-world state lives in the batch's state rows (no
MjData per world: `batch.bind("qvel")[w]` is world w's qvel, which the lock/grab code edits), and
`data` is world 0 as a live MjData for rendering and single-world tools. Body poses are
computed from qpos (`_read_state`): every movable body hangs off the world by slide x/y/z +
hinge z with an identity frame, so its position is body_pos + qpos[xyz] (bit-identical to
`mj_kinematics`) and its orientation the yaw quaternion; this spares a `mj_kinematics` or
`mj_fwdPosition` per world for the rules (the ray casts run `mj_kinematics` for the geoms'
poses, as `Batch.ray` does).

Per-step cost at one world is Python calls, not arithmetic, so the step makes few of them: the
work around the physics and the rays runs as compiled loops (`kernels.py`, numba: action
checks and controls with the lock and grab pre-check, poses, ray aims, lidar and sight, rewards
and running statistics, observations), with trigonometry in numpy; with one thread everything
after the trigonometry is one call (`kernels.after_physics`). The kernels read and write the
game's buffers through a few bundles (`kernels.Poses`, `Rules`, `Views`, `rays.Scene`,
`rays.Sight`), built once and again at each reset for the per-episode tables they hold.
Entity state is a view of the batch rows (agents then objects, bodies 1..E), per-episode tables
(who is present, team masks, gather indices for other agents) are built at reset, observations
are written into fixed buffers (constant parts at reset, lock flags when a lock changes), and
work that cannot change anything is skipped (no eligible object: no lock or grab decision; no
seeker off the floor: no surf test).
`tests/envs/test_fast_path.py` checks the results against the reference functions of
warp/rules.py / stats.py (on CPU tensors) and against rays cast from numpy-built
directions.

Seeding: world w draws its layouts from its own generator, seeded from `seed` (or from the seed
given to `reset` for that world); physics is deterministic, so equal seeds give equal episodes.

Physics failures are counted, never silent: when MuJoCo finds a NaN, Inf or huge value in a
world's qpos, qvel or qacc it warns and resets that world's state to the model's defaults
(every entity at its qpos0, every weld off, so grabs the game holds would hold nothing). After
every step the game reads the batch's warning counters (`mujoco.batch.Batch.warning`, cleared
by each world's reset) and puts back such a world's state from before the step (poses,
velocities, welds: what the episode's locks and grabs agree with, as the Warp game does); the
episode goes on from there. A state that was already bad before the step (written from
outside) is not put back: MuJoCo's reset stands. `physics_warnings` (W,) holds each world's
count in its current episode and `physics_warnings_total` the count over the game's life, and
each new one is logged with its world, kind, DOF and body. Actors and tools log them;
tests/envs/test_stability.py requires 0.
"""

from __future__ import annotations

import logging
from numbers import Integral

import mujoco
import mujoco.batch
import numpy as np

from hns_train.envs import contract as C
from hns_train.envs import kernels as K
from hns_train.envs import observations as O
from hns_train.envs import rays, rules
from hns_train.envs.config import GameConfig
from hns_train.envs.layout import sample_layout
from hns_train.envs.stats import STAT_KEYS, EpisodeStats
from hns_train.envs.stats import SURF_MIN_HEIGHT as SURF_LIFT
from hns_train.envs.tasks import make_task
from hns_train.envs.world import (
    FREE_RANGE,
    RAY_GROUPS,
    ModelCache,
    initial_qpos,
    lidar_directions,
    object_half_extents,
    set_locked_highlight,
)
from hns_train.typed_config import Bounds

STATE = mujoco.mjtState.mjSTATE_INTEGRATION  # the rows of mujoco.batch.Batch.state
# MuJoCo's warnings that come with a reset of the world's state: bad qpos, qvel, qacc (adjacent
# in mjtWarning, so one slice of the batch's (W, mjNWARNING, 2) warning array)
BAD_STATE = slice(int(mujoco.mjtWarning.mjWARN_BADQPOS), int(mujoco.mjtWarning.mjWARN_BADQACC) + 1)
BAD_STATE_NAMES = tuple(
    mujoco.mjtWarning(k).name.removeprefix("mjWARN_BAD")
    for k in range(BAD_STATE.start, BAD_STATE.stop)
)  # QPOS, QVEL, QACC
log = logging.getLogger(__name__)
_INT64 = np.dtype(np.int64)  # the native one: `actions.dtype is _INT64`


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
        seqs = np.random.SeedSequence(seed).spawn(W)  # one generator per world (module docstring)
        self.rngs = [np.random.default_rng(s) for s in seqs]
        self.models: list[mujoco.MjModel | None] = [None] * W
        self.layouts: list = [None] * W
        self.batch: mujoco.batch.Batch | None = None
        self._live: mujoco.MjData | None = None  # world 0 as an MjData, once `data` was used

        self.is_hider = np.arange(A) < cfg.max_hiders
        self.team = np.where(self.is_hider, rules.HIDERS, rules.SEEKERS)
        self._seeker_slot = ~self.is_hider
        # the objects that may be locked this step, (W, Ob) per world: the config's, or what the
        # task allows (sequential lock's order rule)
        self.lockable = self._default_lockable = np.tile(
            np.array(
                [cfg.boxes_lockable] * cfg.max_boxes + [cfg.ramps_lockable] * cfg.n_ramps,
                dtype=bool,
            ),
            (W, 1),
        )
        self.ctrl_levels = C.control_levels(cfg.action_bins, cfg.max_ctrl)
        self.action_nvec = np.array(C.action_nvec(cfg.action_bins))
        self.noop = np.array(C.noop_action(cfg.action_bins))
        self._action_shape = (W, A, C.N_ACTION_DIMS)
        self._prep_steps = cfg.prep_steps
        # box surfing needs a seeker lifted off the floor (stats.box_surfing's height test)
        self._lift_z = cfg.agent_radius + SURF_LIFT
        self._hiders_seen = np.zeros(W, dtype=bool)
        self.lidar_dirs = lidar_directions(cfg.n_lidar)

        self.t = np.zeros(W, dtype=np.int64)
        self._all_worlds = np.arange(W)
        self.agent_present = np.zeros((W, A), dtype=bool)
        self.object_present = np.zeros((W, Ob), dtype=bool)
        self.half = np.zeros((W, Ob, 3))
        self.box_size = np.zeros((W, cfg.max_boxes, 3))
        self.others = np.full((W, A, A - 1), -1, dtype=np.int64)
        self.locked = np.zeros((W, Ob), dtype=bool)
        self.lock_team = np.full((W, Ob), rules.NO_TEAM, dtype=np.int64)
        self.lock_agent = np.full((W, Ob), -1, dtype=np.int64)
        self.grabbed = np.full((W, A), -1, dtype=np.int64)
        self.physics_warnings = np.zeros(W, dtype=np.int64)  # this episode (module docstring)
        self.physics_warnings_total = 0  # over the game's life
        self._bad_seen = np.zeros((W, len(BAD_STATE_NAMES)), dtype=np.int64)  # counters read
        # State read from MuJoCo after each step, per entity (agents, then boxes and ramps).
        # Bodies 1..E are the entities (world.py builds them in that order), so entity poses are
        # a slice of the per-body poses `_xpos` / `_xquat`; agent_* / object_* are views.
        E = A + Ob
        self._xpos = np.zeros((W, 1 + E, 3))
        self._xquat = np.zeros((W, 1 + E, 4))
        self._xquat[:, :, 0] = 1.0
        self._ent_pos = self._xpos[:, 1:]
        # each entity's yaw and half yaw, and their cos / sin: one numpy call each for all
        self._angles = np.zeros((2, W, E))
        self._cos2, self._sin2 = np.zeros((2, W, E)), np.zeros((2, W, E))
        self._ent_yaw = self._angles[0]
        self._ent_vel = np.zeros((W, E, 4))
        self._ent_cos, self._ent_sin = self._cos2[0], self._sin2[0]
        self._front = np.zeros((W, A, 1, 2))  # agents' facing directions (rules.py's vision cone)
        self._cos_half_angle = np.cos(cfg.vision_half_angle)
        self.entity_centre = np.zeros((W, E, 3))  # main geom centres: what vision rays aim at
        self.agent_pos, self.object_pos = self._ent_pos[:, :A], self._ent_pos[:, A:]
        self.agent_yaw, self.object_yaw = self._ent_yaw[:, :A], self._ent_yaw[:, A:]
        self.agent_vel, self.object_vel = self._ent_vel[:, :A], self._ent_vel[:, A:]
        self.lidar = np.full((W, A, cfg.n_lidar), cfg.lidar_range)
        self._sq_reach = np.full((W, A, Ob), np.inf)  # squared distances agent -> object centre
        self._reach_sq = np.zeros((W, 1, Ob))  # below which an object may be within grab range
        # who sees which entity; a trailing False lets observations gather "nobody" by index
        self._sees_flat = np.zeros(W * A * E + 1, dtype=bool)
        self._sees = self._sees_flat[:-1].reshape(W, A, E)
        self.sees_agent, self.sees_object = self._sees[:, :, :A], self._sees[:, :, A:]
        self.stats = EpisodeStats(W, cfg.max_boxes, Ob)
        self.obs = {
            k: np.zeros((W, A, *s), dtype=C.OBS_DTYPE) for k, s in C.observation_shapes(cfg).items()
        }
        # observation_self rows with a trailing zero row: agent_qpos_qvel gathers from it
        self._self_rows = np.zeros((W * A + 1, C.SELF_DIM), dtype=C.OBS_DTYPE)
        self.obs[C.SELF_KEY] = self._self_rows[:-1].reshape(W, A, C.SELF_DIM)
        self._cone = np.zeros((W, A, E), dtype=bool)  # entity inside each agent's vision cone
        self._ent_tables(np.arange(W))
        self.task = make_task(cfg, self)  # None for hide-and-seek (tasks.py)

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

    def reset(self, worlds=None, seeds=None) -> dict[str, np.ndarray]:
        """New worlds for `worlds` (default: all); returns observations of every world."""
        worlds = np.arange(self.n_worlds) if worlds is None else np.asarray(worlds, dtype=int)
        if self.batch is None and len(np.unique(worlds)) != self.n_worlds:
            raise ValueError("the first reset() must cover every world (worlds=None)")
        if seeds is not None:
            if len(seeds) != len(worlds):
                raise ValueError(f"got {len(seeds)} seeds for {len(worlds)} worlds")
            for i, s in enumerate(seeds):  # before any world is reseeded
                problem = isinstance(s, Integral) and Bounds(0).problem(f"seeds[{i}]", int(s))
                if problem:
                    raise ValueError(f"reset: {problem} (or None, or a numpy SeedSequence)")
            for w, s in zip(worlds, seeds, strict=True):
                if s is not None:
                    self.rngs[w] = np.random.default_rng(s)
        cfg = self.cfg
        for w in worlds:
            layout = sample_layout(cfg, self.rngs[w])
            self.models[w], self.layouts[w] = self.cache.model_for(layout), layout
            self.agent_present[w] = layout.agent_present
            self.object_present[w] = layout.object_present
            self.half[w] = object_half_extents(cfg, layout)
            self.box_size[w] = 2 * self.half[w, : cfg.max_boxes]
        self._reset_physics(worlds)
        self.t[worlds] = 0
        self.locked[worlds] = False
        self.lock_team[worlds] = rules.NO_TEAM
        self.lock_agent[worlds] = -1
        self.grabbed[worlds] = -1
        self.physics_warnings[worlds] = 0  # the batch's reset cleared their counters
        self._bad_seen[worlds] = 0
        self._ent_tables(worlds)
        self._pack_tables()
        self._read_state(worlds)
        self._cast_rays(worlds)
        starting = np.zeros(self.n_worlds, dtype=bool)
        starting[worlds] = True
        self.stats.reset(starting, self.object_pos[:, :, :2])
        self._observe(worlds)
        if self.task is not None:
            self.task.reset(worlds)
            for key, rows in self.task.observations(worlds).items():
                self.obs[key][worlds] = rows
        return self.obs

    def step(self, actions: np.ndarray):
        """Advance every world one env step.

        actions: (W, A, 5) integers in [0, nvec). Returns (obs, rewards (W, A), truncated (W,),
        infos: list of W dicts, holding the episode statistics where the episode ended).
        """
        if self.batch is None:
            raise RuntimeError("call reset() before step()")
        if self._live is not None:  # first: the live MjData's state holds controls
            self._pull_live()
        if self.task is not None:
            actions = self.check_actions(actions).copy()
            self.task.act(actions)
            self.lockable = self.task.lockable(self._default_lockable)
            pins = self.task.pins()
            if pins is not None:
                self._pin(pins)
        actions, work = self._prepare_actions(actions)
        cfg = self.cfg

        # Locks and grabs need an eligible object: seen on the previous step (sees_object holds
        # only present pairs) and within reach. Without one, locks stay as they are and every
        # grab ends (choose_grabs binds only eligible objects); nothing held: nothing to do.
        # The box of an object lies within |half| of its body origin, which lies |geom offset|
        # from the centre the rays measured: farther than that plus the grab range, the box
        # is out of reach (`_reach_sq`), and the exact distance is not needed (`work`:
        # kernels.grab_work).
        if work == 1:
            locked, lock_team = np.empty_like(self.locked), np.empty_like(self.lock_team)
            lock_agent, grabbed = np.empty_like(self.lock_agent), np.empty_like(self.grabbed)
            changed = K.decide_locks_and_grabs(
                self.agent_pos,
                self.object_pos,
                self.object_yaw_cos,
                self.object_yaw_sin,
                self.half,
                self.sees_object,
                cfg.grab_range,
                actions,
                self.team,
                self.lockable,
                rules.NO_TEAM,
                self.locked,
                self.lock_team,
                self.lock_agent,
                self.grabbed,
                locked,
                lock_team,
                lock_agent,
                grabbed,
            )
            if changed & 1:
                self._apply_locks(locked)
            self.locked, self.lock_team, self.lock_agent = locked, lock_team, lock_agent
            if changed & 1:
                self._write_lock_flags()
            if changed & 2:
                self._apply_grabs(grabbed)
        elif work:  # nothing within reach, something held: every grab ends
            self._apply_grabs(np.full_like(self.grabbed, -1))

        np.copyto(self._state_before, self._state)
        self.batch.step(nstep=cfg.substeps)
        if (self._bad_counts != self._bad_seen).any():
            self._put_back_bad_worlds()
        reward = np.empty((self.n_worlds, self.n_agents), dtype=np.float32)
        truncated = np.empty(self.n_worlds, dtype=bool)
        if self._ray_fns is not None:
            if self._live is not None:
                self._push_live()
            flags = self._sense_and_score(reward, truncated)
        else:
            self._push_live()
            self._read_state()
            self._cast_rays(self._all_worlds)
            flags = self._compiled(
                K.rewards_and_stats, self._rules, self._sees, self._ent_pos, reward, truncated
            )
            self._observe()
        stats = self.stats
        if flags & K.LIFTED:  # a seeker off the floor: box surfing is possible
            in_prep = self.t - 1 < self._prep_steps
            stats.add_surfing(in_prep, self._seeker_present, self, cfg.agent_radius)
        if flags & K.PREP_END:
            stats.mark_prep_end(
                self.t, self._prep_steps, self.object_pos[..., :2], self.object_present, self.locked
            )
        if self.task is not None:
            self.task.after_step(reward)
        infos: list[dict] = [{} for _ in range(self.n_worlds)]
        if flags & K.TRUNCATED:
            done = np.flatnonzero(truncated)
            finished = stats.finish(
                truncated, self.object_pos[..., :2], self.object_present, self.locked
            )
            for w in done:
                infos[w] = dict(zip(STAT_KEYS, finished[w].tolist(), strict=True))
            if self.task is not None:
                self.task.finish(done, infos)
        return self.obs, reward, truncated, infos

    def _sense_and_score(self, reward, truncated) -> int:
        """One thread: what follows the physics up to the observations in one compiled call
        (kernels.after_physics), after the trigonometry of the poses."""
        if self._live is not None:
            self._pull_live()
        self._trigonometry()
        return self._compiled(
            K.after_physics,
            self._all_worlds,
            self._poses,
            self._scene,
            self._sight,
            self._rules,
            self._views,
            reward,
            truncated,
        )

    def _compiled(self, kernel, *args):
        """`kernel(*args)` through its compiled entry for the types of `args`, resolved at its
        first call with the current buffers (`_pack_tables`). Every call passes the game's own
        buffers, whose types are fixed when they are made; numba's dispatcher would take
        microseconds per call to type the bundles again."""
        entry = self._entries.get(kernel)
        if entry is None:
            entry = self._entries[kernel] = _entry_point(kernel, args)
        return entry(*args)

    def _pack_tables(self) -> None:
        """The compiled step's buffers that hold this episode's tables (`_ent_tables`); the
        kernels' entries are resolved anew where their types changed."""
        cfg, obs = self.cfg, self.obs
        agents, boxes, ramps = C.ENTITY_KEYS
        hiders, seekers = self._team_masks
        stats = self.stats
        self._sight = rays.Sight(
            L=cfg.n_lidar,
            cos_half_angle=self._cos_half_angle,
            lidar_range=cfg.lidar_range,
            agent_present=self.agent_present,
            pair_ok=self._pair_ok,
            ray_vec=self._ray_vec,
            ray_pnt=self._ray_pnt,
            sq_reach=self._sq_reach,
            cone=self._cone,
            dist=self._ray_dist,
            geomid=self._ray_geom,
            hit_body=self._hit_body,
            target_body=self._ent_body,
            lidar=self.lidar,
            sees_flat=self._sees_flat,
        )
        self._rules = K.Rules(
            t=self.t,
            prep_steps=self._prep_steps,
            horizon=cfg.horizon,
            lift_z=self._lift_z,
            seeker_present=self._seeker_present,
            seeker_sees_hider=self._seeker_sees_hider,
            sign_hidden=self._team_sign_hidden,
            sign_seen=self._team_sign_seen,
            oob_low=cfg.oob_low,
            oob_high=cfg.oob_high,
            oob_penalty=cfg.oob_penalty,
            penalise_objects=cfg.penalise_objects_oob and self.n_objects > 0,
            object_present=self.object_present,
            agent_present=self.agent_present,
            hider_mask=hiders[0],
            hider_count=hiders[1],
            seeker_mask=seekers[0],
            seeker_count=seekers[1],
            returns=stats.returns,
            play_steps=stats.play_steps,
            hidden_steps=stats.hidden_steps,
            hiders_seen=self._hiders_seen,
        )
        self._views = K.Views(
            is_hider=self.is_hider,
            self_rows=self._self_rows,
            other_rows=self._other_rows,
            other_sees=self._other_sees,
            box_live=self._box_live,
            ramp_live=self._ramp_live,
            obs_self=obs[C.SELF_KEY],
            obs_others=obs[agents.key],
            mask_aa=obs[agents.visible_mask],
            box_obs=obs[boxes.key],
            mask_ab=obs[boxes.visible_mask],
            ramp_obs=obs[ramps.key],
            mask_ar=obs[ramps.visible_mask],
            obs_lidar=obs[C.LIDAR_KEY],
        )
        kinds = _kinds((self._poses, self._scene, self._sight, self._rules, self._views))
        if kinds != self._buffer_kinds:  # the first episode, or tables of other types
            self._buffer_kinds, self._entries = kinds, {}

    def _prepare_actions(self, actions) -> tuple[np.ndarray, int]:
        """Checked (W, A, 5) int64 actions with the no-op where agents are idle (seekers during
        preparation, absent agents), and their controls written to the batch; with
        kernels.grab_work's answer (whether lock and grab decisions are needed)."""
        actions = np.asarray(actions)
        if actions.dtype is not _INT64 or actions.shape != self._action_shape:
            actions = self.check_actions(actions)
        actions = actions.copy()  # the no-ops are written in place; the caller's array stays
        work = K.prepare_actions(
            actions,
            self.action_nvec,
            self.noop,
            self.t,
            self._prep_steps,
            self._seeker_slot,
            self._absent,
            self.ctrl_levels,
            self._ctrl,
            self._ctrl_adr,
            self.sees_object,
            self._sq_reach,
            self._reach_sq,
            self.grabbed,
        )
        if work < 0:
            self.check_actions(actions)  # raises, naming the action out of range
        return actions, work

    def check_actions(self, actions) -> np.ndarray:
        """(W, A, 5) int64 actions, or a ValueError naming the bad entry (contract.py)."""
        return C.check_actions(actions, self.n_worlds, self.n_agents, self.action_nvec)

    # ------------------------------------------------------------------ MuJoCo edges
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
            scene = self._scene
            if scene is not None:  # what rays.cast reads of each world's model
                scene.model_ptr[w] = m._address
                scene.geom_type[w] = m.geom_type
                scene.geom_size[w] = m.geom_size
                scene.ray_ok[w] = rays.ray_geoms(m, self._ray_groups)
        g = self._geom_pos[ids]
        reach = (
            self.cfg.grab_range
            + np.linalg.norm(g[:, self.n_agents :], axis=-1)
            + np.linalg.norm(self.half[ids], axis=-1)
        )
        self._reach_sq[ids, 0] = (reach * (1 + 1e-9) + 1e-9) ** 2
        self._geom_xy_a[ids] = g[..., [0, 0]]
        self._geom_xy_b[ids] = np.stack([-g[..., 1], g[..., 1]], axis=-1)
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
        W, A, idx = self.n_worlds, self.n_agents, self.index
        model = self.models[0]
        for m in self.models:  # every world must give MjData the same layout (see world._hide)
            if m.nbuffer != model.nbuffer:
                raise RuntimeError("worlds of one config compiled to different MjData layouts")
        self.batch = mujoco.batch.Batch(model, W, self.threads)
        self._qpos = self.batch.bind("qpos")
        self._qvel = self.batch.bind("qvel")
        self._ctrl = self.batch.bind("ctrl")
        self._eq_active = self.batch.bind("eq_active")
        # live (W, 3) view of the bad-state warning counters (mjWarningStat.number)
        self._bad_counts = self.batch.warning[:, BAD_STATE, 1]
        self._state = self.batch.state  # (W, nstate) rows that qpos, qvel, eq_active view
        self._state_before = np.empty_like(self._state)  # the rows before a step's physics
        self._state0 = self._state[0]
        self._ctrl_adr = idx.agent_ctrl.ravel()
        # entities: agents then objects (boxes, ramps), their state a view of the batch rows
        idx.check_entity_rows(model.nbody)
        self._ent_body, self._ent_geom = idx.entity_body, idx.entity_geom
        E = len(self._ent_body)
        self._ent_q = self._qpos[:, : 4 * E].reshape(W, E, 4)
        self._ent_qd = self._qvel[:, : 4 * E].reshape(W, E, 4)
        if not np.shares_memory(self._ent_q, self._qpos):
            raise RuntimeError("entity qpos must be a view of the batch state")
        self._body_pos = np.zeros((W, E, 3))
        self._geom_pos = np.zeros((W, E, 3))
        self._geom_xy_a = np.zeros((W, E, 2))  # (g_x, g_x) and (-g_y, g_y): see kernels.kinematics
        self._geom_xy_b = np.zeros((W, E, 2))
        # rays per agent: the lidar fan, then one towards each entity centre
        L = self.cfg.n_lidar
        self._nray = L + E
        self._ray_exclude = np.ascontiguousarray(
            np.broadcast_to(np.repeat(idx.agent_body, self._nray), (W, A * self._nray)),
            dtype=np.int32,
        )
        self._ray_groups = np.ascontiguousarray(RAY_GROUPS, dtype=np.uint8)
        self._ray_vec = np.zeros((W, A, self._nray, 3))
        self._ray_vec[:, :, :L] = self.lidar_dirs
        self._ray_vec_rows = self._ray_vec.reshape(W, -1, 3)
        self._ray_pnt = np.zeros((W, A, self._nray, 3))
        self._ray_pnt_rows = self._ray_pnt.reshape(W, -1, 3)
        self._ray_dist = np.zeros((W, A * self._nray))
        self._ray_geom = np.zeros((W, A * self._nray), dtype=np.int32)
        # mujoco.batch's C ray call with preallocated outputs; Batch.ray validates and allocates
        # on every call (tens of microseconds at one world). Same call, same results.
        self._ray_c = self.batch._b.ray
        # one thread: the compiled ray loop of rays.py (same results, a fraction of the time);
        # more threads: the batch's C call, which runs the worlds' rays on its threads
        self._ray_fns = rays.FUNCTIONS if self.threads == 1 else None
        self._poses = K.Poses(
            q=self._ent_q,
            qd=self._ent_qd,
            body_pos=self._body_pos,
            geom_xy_a=self._geom_xy_a,
            geom_xy_b=self._geom_xy_b,
            geom_z=self._geom_pos[..., 2],
            angles=self._angles,
            cos2=self._cos2,
            sin2=self._sin2,
            xquat=self._xquat[:, 1:],
            pos=self._ent_pos,
            vel=self._ent_vel,
            front=self._front,
            centre=self.entity_centre,
        )
        self._scene = None
        if self._ray_fns is not None:
            G = model.ngeom
            data = mujoco.MjData(model)  # scratch kinematics, any world's model
            self._scene = rays.Scene(
                functions=self._ray_fns,
                model_ptr=np.zeros(W, dtype=np.int64),
                data_ptr=data._address,
                data_qpos=data.qpos,
                geom_xpos=data.geom_xpos,
                geom_xmat=data.geom_xmat,
                qpos=self._qpos,
                geom_type=np.zeros((W, G), dtype=np.int32),
                geom_size=np.zeros((W, G, 3)),
                ray_ok=np.zeros((W, G), dtype=bool),
                geom_body=model.geom_bodyid.astype(np.int64),
                agent_body=idx.agent_body.astype(np.int64),
            )
            self._scratch = data  # the MjData the scene's pointers point into
        # body of each geom, and -1 for a miss (geom id -1 reads the appended last entry)
        self._hit_body = np.append(idx.geom_body, -1)
        self._buffer_kinds: tuple = ()  # the buffers' types that `_entries` were resolved for
        self._entries: dict = {}  # kernel -> its compiled entry (`_compiled`)

    def _put_back_bad_worlds(self) -> None:
        """Count and log the bad-state warnings MuJoCo raised in this step's physics, and give
        those worlds their state from before the step back where it was sound (module
        docstring)."""
        counts = self._bad_counts.astype(np.int64)
        new = counts != self._bad_seen
        bad = np.flatnonzero(new.any(axis=1))
        sound = bad[(np.abs(self._state_before[bad]) <= mujoco.mjMAXVAL).all(axis=1)]  # NaN: no
        if len(sound):
            self._state[sound] = self._state_before[sound]
            self.batch.forward(sound)
        for w, k in np.argwhere(new):
            # lastinfo: the index of the bad qpos / qvel / qacc element; every joint here is a
            # slide or a hinge, so qpos and DOF indices agree
            m, dof = self.models[w], int(self.batch.warning[w, BAD_STATE.start + k, 0])
            body = m.body(int(m.dof_bodyid[dof])).name if 0 <= dof < m.nv else "?"
            log.warning(
                "MuJoCo found a NaN, Inf or huge value in %s of world %d at DOF %d (body %s) in "
                "env step %d and %s (%d this episode)",
                BAD_STATE_NAMES[k],
                w,
                dof,
                body,
                int(self.t[w]),
                "put back the world's state from before the step"
                if w in sound
                else "reset the world's state to the model's defaults",
                int(counts[w].sum()),
            )
        self.physics_warnings_total += int((counts - self._bad_seen).sum())
        self._bad_seen[...] = counts
        self.physics_warnings[...] = counts.sum(axis=1)

    def _ent_tables(self, worlds: np.ndarray) -> None:
        """Per-episode tables from who is present (every world: cheap), and the constant parts
        of the new episodes' observations (`worlds`)."""
        A, Ob = self.n_agents, self.n_objects
        ap, op = self.agent_present, self.object_present
        E = A + Ob
        self.others[worlds] = O.others_table(ap[worlds])
        self._absent = ~ap
        self._seeker_present = ap & ~self.is_hider
        hider_present = ap & self.is_hider
        self._seeker_sees_hider = self._seeker_present[:, :, None] & hider_present[:, None, :]
        not_self = np.ones((A, E), dtype=bool)
        not_self[np.arange(A), np.arange(A)] = False
        ent_present = np.concatenate([ap, op], axis=1)
        self._pair_ok = ap[:, :, None] & ent_present[:, None, :] & not_self
        sign = np.where(self.is_hider, 1.0, -1.0)[None, :]
        self._team_sign_hidden, self._team_sign_seen = sign, -sign
        self._team_masks = [
            (m, np.maximum(m.sum(1), 1)) for m in (ap & self.is_hider, ap & ~self.is_hider)
        ]
        # observation gathers: other agents' rows and "i sees its k-th other" by flat index
        self._other_rows, self._other_sees = O.other_gathers(self.others, E)
        present = op[:, None, :] & ap[:, :, None]
        nb = self.cfg.max_boxes
        self._box_live = present[:, :, :nb, None]
        self._ramp_live = present[:, :, nb:, None]
        # constant observation parts of the new episodes
        obs = self.obs
        for key in obs:
            obs[key][worlds] = 0.0
        agents, boxes, ramps = C.ENTITY_KEYS
        obs[agents.exists_mask][worlds] = self.others[worlds] >= 0
        obs[boxes.exists_mask][worlds] = present[worlds, :, :nb]
        obs[ramps.exists_mask][worlds] = present[worlds, :, nb:]
        size_cols = C.box_columns(self.cfg).size
        if size_cols is not None:
            size = np.broadcast_to(self.box_size[worlds][:, None], (len(worlds), A, nb, 3))
            obs[C.BOXES_KEY][worlds, :, :, size_cols] = np.where(
                present[worlds, :, :nb, None], size, 0
            )

    def _write_lock_flags(self) -> None:
        """Lock flags in box_obs / ramp_obs (only when a lock changed: they are state)."""
        cfg, nb = self.cfg, self.cfg.max_boxes
        flags = O.lock_flags(self.lock_agent, self.lock_team, self.locked, self.team)
        box_lock, ramp_lock = C.box_columns(cfg).lock, C.ramp_columns(cfg).lock
        if box_lock is not None:
            box = self.obs[C.BOXES_KEY][..., box_lock]
            np.copyto(box, flags[:, :, :nb], where=self._box_live)
        if ramp_lock is not None:
            ramp = self.obs[C.RAMPS_KEY][..., ramp_lock]
            np.copyto(ramp, flags[:, :, nb:], where=self._ramp_live)

    def _trigonometry(self) -> None:
        """Each entity's yaw and half yaw, and their cos / sin (numpy's: one call each for all):
        the yaw quaternion (cos, 0, 0, sin of half the yaw) and its rotation (mju_quat2Mat:
        cos = c^2 - s^2, sin = 2cs) that kernels.kinematics builds the poses from."""
        self._compiled(K.yaw_angles, self._poses)
        np.cos(self._angles, out=self._cos2)
        np.sin(self._angles, out=self._sin2)

    def _read_state(self, worlds=None) -> None:
        """Entity state from the batch rows: poses of agents and objects from qpos (see the
        module docstring), for every world (unchanged worlds read the same numbers again;
        reading all is cheaper than gathering some)."""
        self._pull_live()
        self._trigonometry()
        self._compiled(K.kinematics, self._poses)

    def _cast_rays(self, worlds) -> None:
        """Lidar and line of sight for the given worlds: one call for all of them (rays.cast with
        one thread; with more, the batch's C ray call, which casts every world's rays: a world
        whose state did not change gets the same sight again)."""
        if self._ray_fns is None:
            worlds = self._all_worlds
        elif worlds is not self._all_worlds:
            worlds = np.unique(np.asarray(worlds, dtype=np.int64))  # the entries' argument type
        self._compiled(K.aim_rays, worlds, self._poses, self._sight)
        if self._ray_fns is not None:
            self._compiled(rays.cast, worlds, self._scene, self._sight)
        else:
            nfail = self._ray_c(
                None,
                self._ray_pnt_rows,
                self._ray_vec_rows,
                self._ray_groups,
                True,
                self._ray_exclude,
                self._ray_dist,
                self._ray_geom,
                None,
            )
            if nfail:
                raise RuntimeError(f"mujoco.batch ray failed in {nfail} worlds")
        self._compiled(K.read_rays, worlds, self._ray_dist, self._ray_geom, self._sight)

    def _pin(self, pins) -> None:
        """A task's entities at their x, y and yaw for the end of the step, at rest (tasks.Pins);
        z stays the physics'."""
        ents, poses = pins
        for col, k in ((0, 0), (1, 1), (3, 2)):
            self._ent_q[:, ents, col] = poses[:, :, k]
        self._ent_qd[:, ents] = 0.0

    @property
    def entity_qpos(self) -> np.ndarray:
        """(W, E, 4) joints x, y, z, yaw of each entity (agents, then objects): a view of the
        batch's state rows."""
        return self._ent_q

    def first_hits(self, pnt: np.ndarray, vec: np.ndarray) -> np.ndarray:
        """(W, R) the geom each of the (W, R, 3) rays from `pnt` along unit `vec` hits first
        (-1: none), in the current state: MuJoCo's rays (`Batch.ray`), static geoms included,
        the floor's group excluded as for the game's own rays, no body excluded."""
        _, geom = self.batch.ray(pnt, vec, self._ray_groups, True, -1)
        return geom

    def geom_id(self, name: str) -> int:
        """The id of geom `name` (every world's model is built in the same order)."""
        return self.models[0].geom(name).id

    def _apply_locks(self, locked: np.ndarray) -> None:
        idx = self.index
        for w, o in np.argwhere(locked != self.locked):
            m = self.models[w]
            jnt = idx.object_jnt[o]
            if locked[w, o]:
                q = self._qpos[w, idx.object_qpos[o]]
                m.jnt_range[jnt] = np.stack([q, q], axis=-1)
                self._qvel[w, idx.object_qvel[o]] = 0.0
            else:
                m.jnt_range[jnt] = (-FREE_RANGE, FREE_RANGE)
            set_locked_highlight(m, idx.object_geom[o], bool(locked[w, o]))

    def _apply_grabs(self, grabbed: np.ndarray) -> None:
        idx = self.index
        for w, a in np.argwhere(grabbed != self.grabbed):
            m, eq_active = self.models[w], self._eq_active[w]
            old, new = self.grabbed[w, a], grabbed[w, a]
            if old >= 0:
                eq_active[idx.weld[a, old]] = 0
            if new >= 0:
                eq = idx.weld[a, new]
                poses = (self._xpos[w], self._xquat[w])
                m.eq_data[eq] = weld_data(*poses, idx.agent_body[a], idx.object_body[new])
                eq_active[eq] = 1
        self.grabbed = grabbed

    def _observe(self, worlds=None) -> None:
        """Observations of every world from the current state (see contract.py for the layout;
        `warp/rules.observe` is the reference these writes must equal). Constant parts
        (presence masks, box sizes) are written at reset, lock flags when locks change; rows of
        absent entities stay zero."""
        self._compiled(K.observe, self._rules, self._poses, self._sight, self._views)

    @property
    def object_yaw_cos(self) -> np.ndarray:
        return self._ent_cos[:, self.n_agents :]

    @property
    def object_yaw_sin(self) -> np.ndarray:
        return self._ent_sin[:, self.n_agents :]


def _kinds(args: tuple) -> tuple:
    """What numba's type of each argument depends on (dtype, dimensions, layout, flags; the
    fields of a tuple; the Python type of the others), read in a few microseconds where numba's
    typeof takes milliseconds for the step's 80 arrays."""
    return tuple(
        (a.dtype, a.ndim, a.flags.c_contiguous, a.flags.f_contiguous, a.flags.writeable,
         a.flags.aligned)
        if isinstance(a, np.ndarray)
        else (type(a), _kinds(a)) if isinstance(a, tuple)
        else type(a)
        for a in args
    )  # fmt: skip


def _entry_point(kernel, args: tuple):
    """The compiled entry of numba `kernel` for the types of `args` (loaded or compiled now), or
    the kernel itself where numba exposes none: calls with arguments of those same types skip
    the dispatcher's type resolution (tens of ns an array, more for an array in a bundle)."""
    sig = tuple(kernel.typeof_pyval(a) for a in args)
    if sig not in kernel.overloads:
        kernel.compile(sig)
    return getattr(kernel.overloads.get(sig), "entry_point", None) or kernel


def weld_data(xpos: np.ndarray, xquat: np.ndarray, body1: int, body2: int) -> np.ndarray:
    """Weld `eq_data` row holding body2's current pose relative to body1 (spec: freeze at grab),
    from the bodies' positions `xpos` and orientations `xquat` (MjData's names)."""
    q1_inv = np.empty(4)
    mujoco.mju_negQuat(q1_inv, xquat[body1])
    rel_pos = np.empty(3)
    mujoco.mju_rotVecQuat(rel_pos, xpos[body2] - xpos[body1], q1_inv)
    rel_quat = np.empty(4)
    mujoco.mju_mulQuat(rel_quat, q1_inv, xquat[body2])
    # anchor (3) at body2's origin, relative pose (7), torque scale 1, flag 0: keep our pose
    return np.concatenate([np.zeros(3), rel_pos, rel_quat, [1.0, 0.0]])
