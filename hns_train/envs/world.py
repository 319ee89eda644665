"""Build a hide-and-seek world in MuJoCo with `mujoco.MjSpec` (no XML) and index its parts.

Every world of one preset has the same MuJoCo sizes: a fixed number of slots for wall
segments, agents (hiders first, then seekers), boxes and ramps. Entities absent this episode
are parked far below the arena with collisions off and gravity compensated, so they never
move, collide, or show up in rays or renders. Fixed sizes let worlds share one `WorldIndex`
and let `mujoco.batch.Batch` step them together.

Bodies (spec §2): agents are spheres (r 0.15, mass 1, friction 0.01) with two massless arm
spheres (r 0.05) marking the front (local -y); slide x/y (damping 10), slide z (1), hinge z
(10), motors with gear 100 on x, y and yaw. The arms are solid like the agent's sphere (they
collide, with the agent's friction, and rays hit them), as in the original: they reach 0.20 m
from the agent's centre at 60 degrees either side of its front, beyond the sphere's 0.15 m, so
an agent that pushes a box or meets a wall off its front line touches it with an arm first and
the off-centre contact turns both (docs/fidelity.md). Boxes (0.5 m cubes or 1.65 x 0.15 x 0.5 m)
and ramps (0.5 m right triangular prisms, tall face at local -y) have slide x/y/z + hinge z, all
four damped (0.01 boxes, 0.1 ramps, as in the original). Walls are static boxes.

Every movable body sits at the origin of the xy-plane in the model and is positioned through
its slide joints, so qpos x/y is the body's centre and a new episode only writes qpos.
Object joints are compiled as limited with a huge range: locking narrows the range to [q, q]
at run time (spec §3), unlocking restores it.

Geom groups: 0 solid (seen by rays: walls, agents and their arms, boxes, ramps, the shelter
task's cylinder), 1 the floor (rays skip it, so `mj_multiRay` can include static geoms without
hitting the floor), 2 marks (the blueprint task's construction sites: thin squares on the floor
that neither collide (contype = conaffinity = 0 always, so the collision tree keeps its size)
nor stop rays, drawn only), 3 parked entities, unused wall slots and absent sites (never drawn,
never hit). The cylinder (`cfg.cylinder`) is a static geom of the world like the walls: it
blocks bodies and occludes lidar and vision; the layout sets its radius and place.

`new_spec` builds the elements once per config and `apply_layout` writes what a layout changes,
so `ModelCache` reuses one spec for every episode (a compile, no rebuild, per reset).

One weld equality per (agent, object) pair, inactive; grabbing writes the relative pose into
its `eq_data` and activates it (`eq_data[11]` stays 0 so the pose is ours, not qpos0's).

Constraint Jacobian: always dense (`JACOBIAN`). MuJoCo's default (`auto`) switches to the sparse
path from nv = 60 on, which is exactly the full `randomwalls` world (4 agents, 9 boxes, 2 ramps,
4 DOFs each). On that path MuJoCo 4.0.0's sparse Cholesky factorization can give the Newton
solver a wrong Hessian factor in some contact configurations (MuJoCo issue #3767, fixed in
4.0.1; this venv has 4.0.0). Seen here as: the solver stops at its 100 iterations, its
constraint forces disagree with its qacc by ~1e4, and the Euler step (implicit damping
integrates the forces) throws a box at 100-300 m/s; the object then spins up until MuJoCo
reports a bad QACC and resets the world. The dense path solves the same states in ~10
iterations and is no slower at these sizes (16 randomwalls worlds x 240 steps of random play:
5.0-5.3 s CPU dense, 5.7-6.2 s sparse). Quadrant (nv 28) and chase (nv 8) were dense already,
so their trajectories are unchanged. tests/envs/test_stability.py guards this.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass

import mujoco
import numpy as np

from hns_train.envs.config import GameConfig
from hns_train.envs.layout import ABSENT, CUBE, LONG_X, Layout, n_wall_slots

GROUP_SOLID, GROUP_FLOOR, GROUP_MARK, GROUP_HIDDEN = 0, 1, 2, 3
RAY_GROUPS = np.array([1, 0, 0, 0, 0, 0], dtype=np.uint8)  # solids only
FREE_RANGE = 1e4  # joint range of an unlocked object (metres / radians)
PARK_Z = -50.0  # absent entities wait here
PARKED_CONTYPE, PARKED_CONAFFINITY = 2, 4  # (2 & 4) == 0 and (2 & 1) == (4 & 1) == 0
JACOBIAN = mujoco.mjtJacobian.mjJAC_DENSE  # MuJoCo 4.0.0's sparse Newton diverges (docstring)

HIDER_RGBA = (66 / 255, 235 / 255, 244 / 255, 1.0)
SEEKER_RGBA = (0.93, 0.26, 0.23, 1.0)
BOX_RGBA = (0.93, 0.66, 0.24, 1.0)
RAMP_RGBA = (0.56, 0.36, 0.85, 1.0)
WALL_RGBA = (0.42, 0.44, 0.48, 1.0)
ARM_RGBA = (0.15, 0.15, 0.18, 1.0)
FLOOR_RGBA = (0.86, 0.85, 0.8, 1.0)
CYLINDER_RGBA = (0.95, 0.95, 0.95, 1.0)
SITE_RGBA = (0.2, 0.6, 0.3, 0.6)
SITE_MARK_HALF_HEIGHT = 0.002  # a site is drawn as a flat square just above the floor
LOCKED_EMISSION = 1.0  # a locked object glows (the original set its material's emission to 1)


@dataclass(frozen=True)
class WorldIndex:
    """Addresses into MjModel/MjData, identical for every world of one config."""

    agent_body: np.ndarray  # (A,)
    agent_geom: np.ndarray  # (A,) main sphere
    agent_qpos: np.ndarray  # (A, 4) x, y, z, yaw
    agent_qvel: np.ndarray  # (A, 4)
    agent_ctrl: np.ndarray  # (A, 3) x, y, yaw
    object_body: np.ndarray  # (O,) boxes then ramps
    object_geom: np.ndarray  # (O,)
    object_qpos: np.ndarray  # (O, 4)
    object_qvel: np.ndarray  # (O, 4)
    object_jnt: np.ndarray  # (O, 4) joint ids (for locking)
    weld: np.ndarray  # (A, O) equality ids
    geom_body: np.ndarray  # (ngeom,) body of each geom (ray hits -> entity)
    n_boxes: int
    n_ramps: int

    @property
    def n_agents(self) -> int:
        return len(self.agent_body)

    @property
    def n_objects(self) -> int:
        return len(self.object_body)

    @property
    def entity_body(self) -> np.ndarray:
        """(E,) int64 body of each entity: agents, then objects (boxes, ramps)."""
        return np.concatenate([self.agent_body, self.object_body]).astype(np.int64)

    @property
    def entity_geom(self) -> np.ndarray:
        """(E,) int64 main geom of each entity."""
        return np.concatenate([self.agent_geom, self.object_geom]).astype(np.int64)

    def check_entity_rows(self, nbody: int) -> None:
        """Entity e must be body 1 + e with joints x, y, z, yaw at qpos / qvel 4e..4e+3 (the
        build order of `build_spec`), in a model of `nbody` bodies: the games then read entity
        state as views of the state rows, without gathers."""
        E = self.n_agents + self.n_objects
        order = np.arange(4 * E).reshape(E, 4)
        qpos = np.concatenate([self.agent_qpos, self.object_qpos]).reshape(-1, 4)
        qvel = np.concatenate([self.agent_qvel, self.object_qvel]).reshape(-1, 4)
        if not (
            nbody == 1 + E
            and np.array_equal(self.entity_body, np.arange(1, E + 1))
            and np.array_equal(qpos, order)
            and np.array_equal(qvel, order)
        ):
            raise RuntimeError("world.py no longer builds entities as bodies 1..E with 4 joints")


def _friction(mu: float) -> list[float]:
    return [mu, 0.005, 0.0001]


def _add_joints(body, prefix: str, damping: tuple[float, ...], limited: bool) -> None:
    """Slides x, y, z and a yaw hinge, in that order (what `check_entity_rows` relies on), with
    their dampings. An object's are limited to +-FREE_RANGE, so that a lock can narrow the
    range; an agent's are free."""
    limits = {}
    if limited:
        limits = dict(limited=mujoco.mjtLimited.mjLIMITED_TRUE, range=[-FREE_RANGE, FREE_RANGE])
    axes = ([1, 0, 0], [0, 1, 0], [0, 0, 1], [0, 0, 1])
    for axis, name, d in zip(axes, ("x", "y", "z", "yaw"), damping, strict=True):
        body.add_joint(
            name=f"{prefix}_{name}",
            type=mujoco.mjtJoint.mjJNT_HINGE if name == "yaw" else mujoco.mjtJoint.mjJNT_SLIDE,
            axis=axis,
            damping=d,
            **limits,
        )


def _hide(geom) -> None:
    # Collision bits that match no geom (not even another parked one) rather than 0/0: MuJoCo
    # leaves 0/0 geoms out of its bounding-volume tree, so hiding them would change the tree's
    # size with the layout, and `mujoco.batch` needs one MjData layout for every world.
    if geom.contype or geom.conaffinity:
        geom.contype, geom.conaffinity = PARKED_CONTYPE, PARKED_CONAFFINITY
    geom.group = GROUP_HIDDEN


def lidar_directions(n: int) -> np.ndarray:
    """(n, 3) unit directions of the lidar fan: horizontal, in the world frame, evenly spaced
    from +x counter-clockwise."""
    angles = 2 * np.pi * np.arange(n) / n
    return np.stack([np.cos(angles), np.sin(angles), np.zeros_like(angles)], -1)


def ramp_vertices(size: float) -> np.ndarray:
    """Right triangular prism around its bounding-box centre: tall face at -y, slope to +y."""
    h = size / 2
    return np.array(
        [[-h, -h, -h], [h, -h, -h], [-h, h, -h], [h, h, -h], [-h, -h, h], [h, -h, h]], float
    )


@dataclass
class SpecParts:
    """An `MjSpec` of one config and the elements a layout changes (`apply_layout`)."""

    spec: mujoco.MjSpec
    walls: list  # wall geoms, one per slot
    agent_bodies: list
    agent_geoms: list  # main spheres
    agent_arms: list  # (left, right) arm spheres per agent (solid, like the main sphere)
    box_bodies: list
    box_geoms: list
    cylinder: object = None  # the shelter task's static cylinder geom
    sites: tuple = ()  # the blueprint task's site marks, one per slot


def build_spec(cfg: GameConfig, layout: Layout) -> mujoco.MjSpec:
    """A new `MjSpec` of `layout` (compiles to the same model as a reused one, see ModelCache)."""
    parts = new_spec(cfg)
    apply_layout(parts, cfg, layout)
    return parts.spec


def new_spec(cfg: GameConfig) -> SpecParts:
    """Every element of a world of `cfg`, with the layout-dependent attributes still unset."""
    spec = mujoco.MjSpec()
    spec.compiler.degree = False
    spec.option.timestep = cfg.timestep
    spec.option.gravity = [0.0, 0.0, cfg.gravity]
    spec.option.jacobian = JACOBIAN  # not the sparse path: see the module docstring
    spec.visual.global_.offwidth = max(cfg.render_width, 640)
    spec.visual.global_.offheight = max(cfg.render_height, 480)
    world = spec.worldbody
    half = cfg.floor_size / 2

    world.add_geom(
        name="floor",
        type=mujoco.mjtGeom.mjGEOM_PLANE,
        size=[3 * half, 3 * half, 0.1],
        pos=[half, half, 0],
        friction=_friction(cfg.floor_friction),
        rgba=FLOOR_RGBA,
        group=GROUP_FLOOR,
    )
    # Lighting for the overhead camera: the sums stay below 1 on upward faces (no washed-out
    # colours), and the slanted sun shades the ramp's slope apart from its top edge.
    spec.visual.headlight.ambient = [0.3, 0.3, 0.3]
    spec.visual.headlight.diffuse = [0.15, 0.15, 0.15]
    spec.visual.headlight.specular = [0.0, 0.0, 0.0]
    world.add_light(
        pos=[half, half, 12],
        dir=[-0.3, 0.45, -1],
        type=mujoco.mjtLightType.mjLIGHT_DIRECTIONAL,
        castshadow=False,
        diffuse=[0.55] * 3,
        specular=[0.1] * 3,
    )
    # Orthographic and from far above, so the 4 m outer walls do not hide the arena's edges.
    world.add_camera(
        name="top",
        pos=[half, half, 30.0],
        quat=[1, 0, 0, 0],
        proj=mujoco.mjtProjection.mjPROJ_ORTHOGRAPHIC,
        fovy=cfg.floor_size * 1.08,
    )

    walls = [
        world.add_geom(
            name=f"wall{k}",
            type=mujoco.mjtGeom.mjGEOM_BOX,
            friction=_friction(cfg.wall_friction),
            rgba=WALL_RGBA,
        )
        for k in range(n_wall_slots(cfg))
    ]

    r = cfg.agent_radius
    agent_bodies, agent_geoms, agent_arms = [], [], []
    for k in range(cfg.max_agents):
        hider = k < cfg.max_hiders
        body = world.add_body(name=f"agent{k}", pos=[0, 0, r])
        slide = cfg.agent_slide_damping
        dampings = (slide, slide, cfg.agent_z_damping, cfg.agent_hinge_damping)
        _add_joints(body, f"agent{k}", dampings, limited=False)
        main = body.add_geom(
            name=f"agent{k}",
            type=mujoco.mjtGeom.mjGEOM_SPHERE,
            size=[r, 0, 0],
            mass=cfg.agent_mass,
            friction=_friction(cfg.agent_friction),
            rgba=HIDER_RGBA if hider else SEEKER_RGBA,
        )
        ax, ay, az = cfg.arm_offset
        arms = tuple(
            body.add_geom(
                type=mujoco.mjtGeom.mjGEOM_SPHERE,
                size=[cfg.arm_radius, 0, 0],
                pos=[side * ax, ay, az],
                mass=0,
                friction=_friction(cfg.agent_friction),
                rgba=ARM_RGBA,
            )
            for side in (-1, 1)
        )
        agent_bodies.append(body)
        agent_geoms.append(main)
        agent_arms.append(arms)
        for name in ("x", "y", "yaw"):
            spec.add_actuator(
                name=f"agent{k}_{name}",
                target=f"agent{k}_{name}",
                trntype=mujoco.mjtTrn.mjTRN_JOINT,
                gear=[cfg.actuator_gear, 0, 0, 0, 0, 0],
                ctrllimited=mujoco.mjtLimited.mjLIMITED_TRUE,
                ctrlrange=[-1.0, 1.0],
            )

    box_bodies, box_geoms = [], []
    for k in range(cfg.max_boxes):
        body = world.add_body(name=f"box{k}")
        # the original damps all four joints of a box or ramp (not only the hinge)
        _add_joints(body, f"box{k}", (cfg.box_hinge_damping,) * 4, limited=True)
        # one material per object: locking lights up that object alone (set_locked_highlight)
        spec.add_material(name=f"box{k}", rgba=BOX_RGBA)
        geom = body.add_geom(
            name=f"box{k}",
            type=mujoco.mjtGeom.mjGEOM_BOX,
            mass=cfg.box_mass,
            friction=_friction(cfg.box_friction),
            material=f"box{k}",
        )
        box_bodies.append(body)
        box_geoms.append(geom)

    if cfg.n_ramps:
        spec.add_mesh(name="ramp", uservert=ramp_vertices(cfg.ramp_size).ravel().tolist())
    for k in range(cfg.n_ramps):
        body = world.add_body(name=f"ramp{k}", pos=[0, 0, cfg.ramp_size / 2])
        _add_joints(body, f"ramp{k}", (cfg.ramp_hinge_damping,) * 4, limited=True)
        spec.add_material(name=f"ramp{k}", rgba=RAMP_RGBA)
        body.add_geom(
            name=f"ramp{k}",
            type=mujoco.mjtGeom.mjGEOM_MESH,
            meshname="ramp",
            mass=cfg.ramp_mass,
            friction=_friction(cfg.ramp_friction),
            material=f"ramp{k}",
        )

    objects = [f"box{k}" for k in range(cfg.max_boxes)] + [f"ramp{k}" for k in range(cfg.n_ramps)]
    for a in range(cfg.max_agents):
        for name in objects:
            spec.add_equality(
                name=f"grab_agent{a}_{name}",
                type=mujoco.mjtEq.mjEQ_WELD,
                name1=f"agent{a}",
                name2=name,
                objtype=mujoco.mjtObj.mjOBJ_BODY,
                active=False,
                data=[0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 1, 0],
            )
    cylinder = None
    if cfg.cylinder:
        cylinder = world.add_geom(
            name="cylinder",
            type=mujoco.mjtGeom.mjGEOM_CYLINDER,
            friction=_friction(cfg.cylinder_friction),
            rgba=CYLINDER_RGBA,
        )
    sites = tuple(
        world.add_geom(
            name=f"site{k}",
            type=mujoco.mjtGeom.mjGEOM_BOX,
            size=[cfg.site_size / 2, cfg.site_size / 2, SITE_MARK_HALF_HEIGHT],
            contype=0,
            conaffinity=0,
            rgba=SITE_RGBA,
            group=GROUP_MARK,
        )
        for k in range(cfg.max_sites)
    )
    return SpecParts(
        spec,
        walls,
        agent_bodies,
        agent_geoms,
        agent_arms,
        box_bodies,
        box_geoms,
        cylinder,
        sites,
    )


def _show(geom, present: bool, contype: int = 1, conaffinity: int = 1, group: int = 0) -> None:
    """A geom's collision bits and group: its own, or those of a parked entity (`_hide`)."""
    geom.contype, geom.conaffinity, geom.group = contype, conaffinity, group
    if not present:
        _hide(geom)


def apply_layout(parts: SpecParts, cfg: GameConfig, layout: Layout) -> None:
    """Write every layout-dependent attribute (all of them, so a spec can serve any layout)."""
    for k, geom in enumerate(parts.walls):
        present = bool(layout.wall_present[k])
        geom.size = layout.wall_half[k] if present else [0.05, 0.05, 0.05]
        geom.pos = layout.wall_pos[k] if present else [-10.0 - k, -10.0, PARK_Z]
        _show(geom, present)
    for k, body in enumerate(parts.agent_bodies):
        present = bool(layout.agent_present[k])
        for arm in parts.agent_arms[k]:
            _show(arm, present)
        _show(parts.agent_geoms[k], present)
        body.gravcomp = 0.0 if present else 1.0
    for k, kind in enumerate(layout.box_kind):
        size = box_dimensions(cfg, kind)
        parts.box_bodies[k].pos = [0, 0, size[2] / 2]
        parts.box_geoms[k].size = size / 2
        _show(parts.box_geoms[k], kind != ABSENT)
        parts.box_bodies[k].gravcomp = 1.0 if kind == ABSENT else 0.0
    if parts.cylinder is not None:
        r, h = layout.cylinder_radius, cfg.cylinder_height
        present = r > 0  # a layout from before the task (a replay) has none
        parts.cylinder.size = [r if present else 0.05, h / 2, 0]
        x, y = layout.cylinder_xy if present else (-30.0, -10.0)
        parts.cylinder.pos = [x, y, h / 2 if present else PARK_Z]
        _show(parts.cylinder, present)
    for k, geom in enumerate(parts.sites):
        present = k < len(layout.site_present) and bool(layout.site_present[k])
        x, y = layout.site_xy[k] if present else (-30.0 - k, 10.0)
        geom.pos = [x, y, SITE_MARK_HALF_HEIGHT if present else PARK_Z]
        geom.group = GROUP_MARK if present else GROUP_HIDDEN


def set_locked_highlight(model: mujoco.MjModel, geom: int, locked: bool) -> None:
    """Draw object geom `geom` highlighted while locked (its own material's emission)."""
    model.mat_emission[model.geom_matid[geom]] = LOCKED_EMISSION if locked else 0.0


def index_world(cfg: GameConfig, model: mujoco.MjModel) -> WorldIndex:
    def body(name):
        return model.body(name).id

    def joints(prefix):
        return np.array([model.joint(f"{prefix}_{n}").id for n in ("x", "y", "z", "yaw")])

    agents = [f"agent{k}" for k in range(cfg.max_agents)]
    objects = [f"box{k}" for k in range(cfg.max_boxes)] + [f"ramp{k}" for k in range(cfg.n_ramps)]
    agent_jnt = np.array([joints(a) for a in agents]).reshape(-1, 4)
    object_jnt = np.array([joints(o) for o in objects], dtype=int).reshape(-1, 4)
    weld = np.array(
        [[model.equality(f"grab_{a}_{o}").id for o in objects] for a in agents], dtype=int
    ).reshape(len(agents), len(objects))
    return WorldIndex(
        agent_body=np.array([body(a) for a in agents]),
        agent_geom=np.array([model.geom(a).id for a in agents]),
        agent_qpos=model.jnt_qposadr[agent_jnt],
        agent_qvel=model.jnt_dofadr[agent_jnt],
        agent_ctrl=np.array(
            [[model.actuator(f"{a}_{n}").id for n in ("x", "y", "yaw")] for a in agents]
        ).reshape(-1, 3),
        object_body=np.array([body(o) for o in objects], dtype=int),
        object_geom=np.array([model.geom(o).id for o in objects], dtype=int),
        object_qpos=model.jnt_qposadr[object_jnt].reshape(-1, 4),
        object_qvel=model.jnt_dofadr[object_jnt].reshape(-1, 4),
        object_jnt=object_jnt,
        weld=weld,
        geom_body=model.geom_bodyid.copy(),
        n_boxes=cfg.max_boxes,
        n_ramps=cfg.n_ramps,
    )


def initial_qpos(cfg: GameConfig, layout: Layout, index: WorldIndex, nq: int) -> np.ndarray:
    """Joint positions placing every entity of `layout` (absent ones parked)."""
    qpos = np.zeros(nq)
    for k in range(cfg.max_agents):
        x, y = layout.agent_xy[k] if layout.agent_present[k] else (-10.0 - k, 10.0)
        z = 0.0 if layout.agent_present[k] else PARK_Z
        qpos[index.agent_qpos[k]] = (x, y, z, layout.agent_yaw[k])
    for k in range(cfg.max_boxes):
        present = layout.box_kind[k] != ABSENT
        x, y = layout.box_xy[k] if present else (-10.0 - k, 20.0)
        qpos[index.object_qpos[k]] = (x, y, 0.0 if present else PARK_Z, 0.0)
    for k in range(cfg.n_ramps):
        x, y = layout.ramp_xy[k]
        qpos[index.object_qpos[cfg.max_boxes + k]] = (x, y, 0.0, layout.ramp_yaw[k])
    return qpos


def box_dimensions(cfg: GameConfig, kind: int) -> np.ndarray:
    """(3,) full size of a box of `kind` in its own frame (an absent one: a cube's)."""
    if kind in (CUBE, ABSENT):
        return np.full(3, cfg.box_size)
    size = np.array(cfg.elongated_size)
    return size if kind == LONG_X else size[[1, 0, 2]]


def object_half_extents(cfg: GameConfig, layout: Layout) -> np.ndarray:
    """(O, 3) half sizes of each object's bounding box in its own frame (boxes, then ramps)."""
    halves = [box_dimensions(cfg, kind) / 2 for kind in layout.box_kind]
    halves += [np.full(3, cfg.ramp_size / 2)] * cfg.n_ramps
    return np.array(halves).reshape(-1, 3)


class ModelCache:
    """Compiled models for layouts, without rebuilding the `MjSpec` each time.

    One `MjSpec` serves every layout of the config: `apply_layout` rewrites all the attributes a
    layout sets (wall boxes, parked entities, box shapes) and the compiler derives the rest
    (inertias, bounding boxes, the static BVH), so a model equals a fresh `build_spec` compile
    array by array (tests/envs/test_vector.py). That spares the ~100 `add_*` calls of a build;
    the compile itself (~0.6 ms for quadrant) stays, because the compiler owns the BVH.

    A compiled model is also kept by layout key when that key comes back a second time: a copy
    costs about half a compile. Door positions are continuous in `quadrant` / `randomwalls`, so
    there keys almost never recur (`hits` stays 0); `chase` hits every time. Each world gets its
    own model object, since locks and grabs edit model fields.
    """

    def __init__(self, cfg: GameConfig, capacity: int = 64):
        self.cfg = cfg
        self.capacity = capacity
        self._models: dict[tuple, mujoco.MjModel] = {}
        self._seen: dict[tuple, None] = {}  # keys compiled once, insertion-ordered
        self._parts: SpecParts | None = None
        self.index: WorldIndex | None = None
        self.hits = 0
        self.misses = 0

    def model_for(self, layout: Layout) -> mujoco.MjModel:
        key = layout.structure_key()
        template = self._models.get(key)
        if template is not None:
            self.hits += 1
            return copy.copy(template)  # MjModel copies are deep
        self.misses += 1
        if self._parts is None:
            self._parts = new_spec(self.cfg)
        apply_layout(self._parts, self.cfg, layout)
        model = self._parts.spec.compile()
        if self.index is None:
            self.index = index_world(self.cfg, model)
        if self.capacity <= 0:
            return model
        if key in self._seen:
            if len(self._models) >= self.capacity:
                self._models.pop(next(iter(self._models)))
            self._models[key] = copy.copy(model)
        else:
            if len(self._seen) >= 16 * self.capacity:
                self._seen.pop(next(iter(self._seen)))
            self._seen[key] = None
        return model
