"""Game configuration: every number of the hide-and-seek spec as a named, typed parameter.

`GameConfig` is flat for the game itself: any field can be overridden by keyword
(`parallel_env(preset="quadrant", horizon=120)`) or from YAML. The transfer tasks' own numbers
live in one section per task (`lock`, `blueprint`, `shelter`, `counting`, `count_based`: the
dataclasses below), overridden as a mapping (`counting={"show_steps": 5}`; in a run's YAML
`game: {counting: {show_steps: 5}}`, on the command line `game.counting.show_steps=5`). The
world a task plays in (sites, the cylinder, walls and placement) is the game's, in `GameConfig`.
The flat names these numbers had before (`counting_show_steps`, `lock_reward`, ...: `MOVED`)
are still read by `make_config` and mean the same setting. `make_config(preset, **overrides)`
starts from a named preset and rejects unknown presets and unknown or ill-typed parameters with a
`ValueError` that names what was wrong and what is allowed. Every declared range, the sections'
included, is checked once, by `GameConfig` (`range_problems`); a section checks only the rules
across its own fields.

Presets (spec §1):
- `quadrant`: 2 v 2, horizon 80, one room in the high-x / low-y quadrant, 2 cubes, 1 ramp that
  cannot be locked, out-of-bounds rect [0.1, 5.9]^2 that also penalises boxes and ramps.
- `randomwalls`: the full game: 1-4 random rooms, 3-9 boxes (some elongated), 2 lockable ramps,
  horizon 240, out-of-bounds rect [-6, 12]^2.
- `chase`: 1 v 1 in the empty 6 m arena, short horizon, no preparation phase: the smallest task
  that still exercises vision, for checking that a learner learns.
- Transfer tasks (tasks.py), each with its world: `lock_and_return`, `sequential_lock`,
  `blueprint`, `shelter`, `object_counting` (a pinned agent counts boxes that leave its sight,
  counting.py), and `count_based`, the quadrant world rewarded by visit counts (intrinsic.py).

Units: metres, seconds, radians. A "cell" is one cell of the 30 x 30 placement grid (0.2 m).
Each field's meaning is its `#:` comment, which `help(parallel_env)` prints: a new field needs one.
"""

from __future__ import annotations

import math
import typing
from dataclasses import dataclass, field, fields
from typing import Annotated

from hns_train.typed_config import (
    AtLeast1,
    Bounds,
    FieldError,
    Finite,
    NonNegative,
    OneOf,
    OneOfOrClass,
    Positive,
    fits,
    from_dict,
    range_problems,
)

# inclusive [low, high], sampled uniformly per episode, 0 <= low <= high
Range = Annotated[tuple[int, int], Bounds(0)]
AreaFraction = Annotated[float, Bounds(0, 1, inclusive=False)]  # in (0, 1]
# bins of each movement action: odd, so that the middle bin is zero force (envs/contract.py)
ACTION_BINS = Bounds(3, odd=True)


@dataclass(frozen=True)
class LockTaskConfig:
    """Section `lock`: lock_and_return and sequential_lock (locking.py; the original's
    LockObjectsTask, docs/fidelity.md)."""

    reward: Finite = 5.0  #: reward for each box that becomes locked [transfer]
    unlock_penalty: Finite = 5.0  #: penalty for each box that becomes unlocked [transfer]
    shaped_reward_scale: Finite = 0.5  #: reward per metre gained towards the target [transfer]
    success_reward: Finite = 1.0  #: reward of every step the task is complete [transfer]
    #: lock_and_return: largest distance to the spawn xy, m [transfer]
    return_threshold: NonNegative = 0.1


@dataclass(frozen=True)
class BlueprintConfig:
    """Section `blueprint`: its rewards (construction.py; numbers from the original's blueprint
    example config, docs/fidelity.md). The sites themselves are the world's (`n_sites`,
    `site_*` of GameConfig)."""

    activation_radius: Positive = 0.1  #: box centre and corners this close: done, m [transfer]
    #: smooth-min exponent of the dense reward, < 0 [transfer]
    smoothmin_alpha: Annotated[float, Bounds(-math.inf, 0, high_inclusive=False)] = -1.5
    #: dense reward = -scale * mean smooth-min distance over box corners [transfer]
    dense_scale: Finite = 0.05
    completed_reward: Finite = 3.0  #: reward per site, once, when all are done [transfer]


@dataclass(frozen=True)
class ShelterConfig:
    """Section `shelter`: the rays cast at the cylinder and its reward (construction.py). The
    cylinder itself is the world's (`cylinder*` of GameConfig)."""

    rays_per_side: AtLeast1 = 25  #: rays cast at the cylinder per floor side [transfer]
    ray_margin_cells: NonNegative = 1.01  #: ray starts lie this many cells in [transfer]
    reward_scale: Finite = 0.001  #: reward = -scale * rays reaching the cylinder [transfer]


@dataclass(frozen=True)
class CountingConfig:
    """Section `counting`: object counting (counting.py; the paper gives only its 6 boxes: every
    other number is a choice, docs/fidelity.md). One pinned agent watches a row of boxes slide
    left or right out of sight behind two screen walls; its x-force bin on the last step is its
    count. Its scene is the `counting` walls and placement of layout.py."""

    show_steps: AtLeast1 = 10  #: steps the boxes stand in view [transfer]
    move_steps: AtLeast1 = 20  #: steps the boxes slide out of sight [transfer]
    #: steps every box is hidden before the answer (horizon: the three sums) [transfer]
    hidden_steps: AtLeast1 = 10
    agent_y: float = 1.0  #: y of the pinned agent (x: floor centre; it faces +y), m [transfer]
    row_y: float = 3.0  #: y of the boxes' row and hiding spots, m [transfer]
    spacing: Positive = 0.55  #: between box centres, row and spots, m [transfer]
    screen_y: float = 2.4  #: y of the two screen walls, between agent and row, m [transfer]
    window: Positive = 2.2  #: gap between the screen walls, centred on the agent, m [transfer]
    spot_margin: float = 0.5  #: outermost spot's centre from the floor edge, m [transfer]
    correct_reward: Finite = 1.0  #: last-step reward of a right count [transfer]
    wrong_reward: Finite = 0.0  #: last-step reward of a wrong count [transfer]

    def __post_init__(self) -> None:
        if not 0 < self.agent_y < self.screen_y < self.row_y:
            raise ValueError(
                "counting needs 0 < agent_y < screen_y < row_y, got "
                f"{self.agent_y}, {self.screen_y}, {self.row_y}"
            )


# every transfer task a config may name, and the module of envs/ that defines it (tasks.py
# imports it on first use: it imports tasks.py)
TASK_MODULES = {
    "lock_and_return": "locking",
    "sequential_lock": "locking",
    "blueprint": "construction",
    "shelter": "construction",
    "object_counting": "counting",
    "count_based": "intrinsic",  # pretraining: count-based exploration, no game reward
}
TASK_NAMES = ("hide_and_seek", *TASK_MODULES)
TASK_BASE = "hns_train.envs.tasks:Task"  # what a task named by import path must subclass
WALL_MODES = ("quadrant", "random", "tri", "none", "counting")
PLACEMENT_MODES = ("quadrant", "uniform", "counting")
COUNT_STATES = ("objects", "objects_agents")


@dataclass(frozen=True)
class CountBasedConfig:
    """Section `count_based` (intrinsic.py): reward bonus_scale / sqrt(N(s)) every step."""

    bonus_scale: Positive = 1.0  #: reward scale / sqrt(visits of the state) [transfer]
    cell: Positive = 0.5  #: grid the state's positions are rounded to, m [transfer]
    #: 'objects' (boxes, ramps) or 'objects_agents' [transfer]
    state: Annotated[str, OneOf(COUNT_STATES)] = "objects"


def _upper_end(range_field: str) -> property:
    """A read-only attribute: the upper end of the (min, max) range field ``range_field``."""

    def upper(cfg) -> int:
        return getattr(cfg, range_field)[1]

    return property(upper, doc=f"The upper end of ``{range_field}``.")


@dataclass(frozen=True)
class GameConfig:
    preset: str = "quadrant"
    #: hide_and_seek, a transfer task (tasks.py; its numbers in its section below, its world
    #: set by its preset; docs/transfer.md), or the import path package.module:Class of a Task
    #: subclass of your own (docs/extending.md)
    task: Annotated[str, OneOfOrClass(TASK_NAMES, TASK_BASE)] = "hide_and_seek"

    # Teams and episode
    n_hiders: Range = (2, 2)  #: (low, high) hiders per episode, drawn uniformly at each reset [§1]
    #: (low, high) seekers per episode, drawn uniformly at each reset [§1]
    n_seekers: Range = (2, 2)
    #: env steps per episode; the last one truncates (PettingZoo: max_cycles) [§1]
    horizon: AtLeast1 = 80
    #: share of the horizon that is the preparation phase (seekers frozen) [§1]
    prep_fraction: Annotated[float, Bounds(0, 1, high_inclusive=False)] = 0.4

    # Physics
    timestep: float = 0.005  #: MuJoCo timestep, s [§1]
    substeps: AtLeast1 = 15  #: MuJoCo steps per env step [§1]
    gravity: float = -50.0  #: gravity on z, m/s^2 [§1]

    # Arena and walls
    floor_size: float = 6.0  #: side of the square floor, m (corner at the origin) [§1]
    grid_cells: int = 30  #: cells per side of the placement grid [§1]
    #: 'quadrant' (one room), 'random' (1-4 rooms), 'tri' (3 rooms), 'none' or 'counting'
    #: (object_counting's screen walls) [§1]
    walls: Annotated[str, OneOf(WALL_MODES)] = "quadrant"
    room_cells: Range = (15, 15)  #: quadrant room: (x, y) grid lines of its inner walls [§1]
    #: random walls: (low, high) rooms per episode [§1]
    n_rooms: Annotated[tuple[int, int], Bounds(1)] = (1, 4)
    min_room_cells: int = 6  #: random walls: smallest room side, cells [§1]
    door_width: float = 0.7  #: gap of a door in an inner wall, m [§1]
    p_one_wall_doorless: float = 0.5  #: quadrant: probability that one inner wall has no door [§1]
    #: tri: (low, high) share of the grid at which each inner wall lies: its cell line is
    #: int(grid_cells * u), u uniform in this range [transfer]
    tri_split: Annotated[
        tuple[float, float], Bounds(0, 1, inclusive=False, high_inclusive=False)
    ] = (0.4, 0.6)
    #: tri: whether each inner wall has a door (sequential_lock: none) [transfer]
    tri_doors: bool = False
    p_outer_walls: float = 1.0  #: probability that the 4 outer walls exist this episode [§1]
    wall_thickness: float = 0.1  #: m [§2]
    inner_wall_height: float = 0.5  #: m [§2]
    outer_wall_height: float = 4.0  #: m [§2]
    wall_friction: float = 0.01  #: friction of walls [§2]
    floor_friction: float = 0.2  #: friction of the floor [§2]

    # Agents
    agent_radius: float = 0.15  #: agent sphere radius, m [§2]
    agent_mass: float = 1.0  #: kg [§2]
    #: friction of agents (MuJoCo takes the max of a contact pair) [§2]
    agent_friction: float = 0.01
    agent_slide_damping: float = 10.0  #: damping of the x and y slide joints [§2]
    agent_z_damping: float = 1.0  #: damping of the z slide joint [§2]
    agent_hinge_damping: float = 10.0  #: damping of the yaw hinge [§2]
    #: radius of the two massless arm spheres marking an agent's front, m [§2]
    arm_radius: float = 0.05
    #: local (x, y, z) of the arms (the other at (-x, y, z)), m [§2]
    arm_offset: tuple[float, float, float] = (0.13, -0.075, -0.05)
    actuator_gear: float = 100.0  #: gear of the x, y and yaw actuators [§2]
    #: bins of each movement action (odd; the middle bin is zero) [§3]
    action_bins: Annotated[int, ACTION_BINS] = 11
    max_ctrl: float = 0.9  #: control of the outermost bin (bins span [-max_ctrl, max_ctrl]) [§3]

    # Boxes and ramps
    n_boxes: Range = (2, 2)  #: (low, high) boxes per episode [§1]
    n_elongated: Range = (0, 0)  #: (low, high) of them elongated, capped at the box count [§1]
    box_size: float = 0.5  #: side of a cube box, m [§2]
    #: (x, y, z) of an elongated box, m [§2]
    elongated_size: tuple[float, float, float] = (1.65, 0.15, 0.5)
    box_mass: float = 1.0  #: kg [§2]
    box_friction: float = 0.2  #: friction of boxes [§2]
    # *_hinge_damping damp every joint of a box / ramp (slides and hinge, as in the original);
    # the names predate that and stay, since saved replays carry the config by field name
    box_hinge_damping: float = 0.01  #: damping of each joint (slides, hinge) of a box [§2]
    n_ramps: int = 1  #: ramps per episode [§1]
    ramp_size: float = 0.5  #: side of a ramp's bounding cube (45 degree slope), m [§2]
    ramp_mass: float = 1.0  #: kg [§2]
    ramp_friction: float = 0.01  #: friction of ramps [§2]
    ramp_hinge_damping: float = 0.1  #: damping of each joint (slides, hinge) of a ramp [§2]
    boxes_lockable: bool = True  #: whether the lock action can freeze boxes [§3]
    ramps_lockable: bool = False  #: whether the lock action can freeze ramps [§3]
    box_size_obs: bool = False  #: append a box's full size (x, y, z) to box_obs [§5]
    #: ramp rows carry lock flags where ramps lock (off: fine-tuning without them)
    ramp_lock_obs: bool = True

    # Placement on the grid
    #: 'quadrant' (boxes in the room, seekers outside it), 'uniform' or 'counting'
    #: (object_counting's fixed scene) [§1]
    placement: Annotated[str, OneOf(PLACEMENT_MODES)] = "quadrant"
    #: >= 0: teammates within this many cells of the first one [§1]
    teammate_spread_cells: int = -1
    place_tries: int = 10  #: rejection-sampling tries per body before the layout is rebuilt [§2]
    agent_cells: int = 2  #: footprint of an agent on the grid, cells per side [§2]
    box_cells: int = 3  #: footprint of a cube box, cells per side [§2]
    #: footprint (long, short) of an elongated box, cells [§2]
    elongated_cells: tuple[int, int] = (9, 1)
    ramp_cells: int = 3  #: footprint of a ramp, cells per side [§2]

    # Rules
    oob_low: float = 0.1  #: low corner (x and y) of the out-of-bounds square, m [§4]
    oob_high: float = 5.9  #: high corner (x and y) of the out-of-bounds square, m [§4]
    #: reward of an agent (or, with penalise_objects_oob, of all) out of bounds [§4]
    oob_penalty: float = -10.0
    #: every agent gets oob_penalty when a box or ramp is out [§4]
    penalise_objects_oob: bool = True
    #: half-angle of the vision cone, radians (67.5 degrees) [§4]
    vision_half_angle: float = math.radians(67.5)
    #: largest distance from agent centre to an object it grabs or locks, m [§3]
    grab_range: float = 0.25
    n_lidar: int = 30  #: lidar rays per agent [§5]
    lidar_range: float = 6.0  #: lidar range, m (the value of a ray that hits nothing) [§5]

    # The construction tasks' worlds (construction.py; numbers from the original's blueprint and
    # shelter example configs, docs/fidelity.md). Zero sites / no cylinder: no change to the game.
    # blueprint: construction sites, squares on the floor that boxes must cover
    n_sites: Range = (0, 0)  #: blueprint: (low, high) sites per episode; 0: no site_obs [transfer]
    #: blueprint: side of a square site, m (the original: the box size) [transfer]
    site_size: Positive = 0.5
    #: blueprint: z of a site's centre and corners (box corners mid-height), m [transfer]
    site_height: float = 0.25
    #: blueprint: a site's footprint, grid cells per side (ceil(site_size / cell)) [transfer]
    site_cells: int = 3
    #: blueprint: sites lie in this middle share of the grid (off walls) [transfer]
    site_area_fraction: AreaFraction = 0.85
    #: shelter: a static cylinder in the arena, to shield from rays cast from its edges
    #: [transfer]
    cylinder: bool = False
    #: shelter: (low, high) cylinder diameter, m, uniform per episode [transfer]
    cylinder_diameter: Annotated[tuple[float, float], Bounds(0, inclusive=False)] = (1.5, 2.0)
    #: shelter: cylinder height, m (the original: the box size) [transfer]
    cylinder_height: Positive = 0.5
    #: shelter: the cylinder lies in this middle share [transfer]
    cylinder_area_fraction: AreaFraction = 0.7
    #: shelter: friction of the cylinder (MuJoCo's default: the original sets none) [transfer]
    cylinder_friction: float = 1.0

    # Transfer tasks: each one's own numbers (the sections above)
    lock: LockTaskConfig = field(default_factory=LockTaskConfig)
    blueprint: BlueprintConfig = field(default_factory=BlueprintConfig)
    shelter: ShelterConfig = field(default_factory=ShelterConfig)
    counting: CountingConfig = field(default_factory=CountingConfig)
    count_based: CountBasedConfig = field(default_factory=CountBasedConfig)

    # Rendering
    render_width: int = 480  #: pixels of render() frames [render]
    render_height: int = 480  #: pixels of render() frames [render]

    # ------------------------------------------------------------------
    @property
    def prep_steps(self) -> int:
        return int(round(self.prep_fraction * self.horizon))

    # The arrays hold a slot for the most of each thing an episode may draw.
    max_hiders = _upper_end("n_hiders")
    max_seekers = _upper_end("n_seekers")
    max_boxes = _upper_end("n_boxes")
    max_sites = _upper_end("n_sites")

    @property
    def max_agents(self) -> int:
        return self.max_hiders + self.max_seekers

    @property
    def cell(self) -> float:
        return self.floor_size / self.grid_cells

    def __post_init__(self) -> None:
        _check_types(self)
        errors = range_problems(self)
        if self.task == "hide_and_seek" and (self.n_hiders[0] < 1 or self.n_seekers[0] < 1):
            errors.append("each team needs at least one agent (n_hiders, n_seekers low >= 1)")
        elif self.n_hiders[0] + self.n_seekers[0] < 1:
            errors.append("a task needs at least one agent (n_hiders + n_seekers low >= 1)")
        errors += _construction_errors(self)
        if self.placement == "counting":
            errors += _counting_scene_errors(self)
        if errors:
            raise ValueError("invalid game config: " + "; ".join(errors))


_ONE_AGENT_TASK = dict(
    prep_fraction=0.0, box_size_obs=True, placement="uniform", penalise_objects_oob=False
)
_ONE_HIDER = dict(_ONE_AGENT_TASK, n_hiders=(1, 1), n_seekers=(0, 0))
_ONE_SEEKER = dict(_ONE_AGENT_TASK, n_hiders=(0, 0), n_seekers=(1, 1))
# the construction tasks: one seeker, 8 boxes, no walls, no ramps
_BUILDER = dict(_ONE_SEEKER, walls="none", n_boxes=(8, 8), n_ramps=0)

PRESETS: dict[str, dict] = {
    "quadrant": {},
    "randomwalls": dict(
        horizon=240,
        walls="random",
        p_outer_walls=0.5,
        wall_friction=1.0,
        n_boxes=(3, 9),
        n_elongated=(3, 9),
        n_ramps=2,
        ramps_lockable=True,
        box_size_obs=True,
        placement="uniform",
        teammate_spread_cells=3,
        oob_low=-6.0,
        oob_high=12.0,
        penalise_objects_oob=False,
    ),
    "chase": dict(
        n_hiders=(1, 1),
        n_seekers=(1, 1),
        horizon=40,
        prep_fraction=0.0,
        walls="none",
        p_outer_walls=1.0,
        n_boxes=(0, 0),
        n_ramps=0,
        placement="uniform",
        penalise_objects_oob=False,
    ),
    # Transfer tasks (tasks.py; numbers from the original's example configs, docs/fidelity.md).
    # One agent (_HIDER / _SEEKER: the flag the original's observation gave it); no preparation
    # phase; rewards are the task's, so no out-of-bounds rule.
    "lock_and_return": dict(
        _ONE_HIDER,
        task="lock_and_return",
        horizon=120,
        walls="random",
        n_rooms=(6, 6),
        wall_friction=1.0,
        n_boxes=(1, 1),
        n_ramps=0,
    ),
    # the original's sequential_lock.jsonnet: scenario var_tri_uniform, door_size 0
    "sequential_lock": dict(
        _ONE_HIDER,
        task="sequential_lock",
        horizon=120,
        walls="tri",
        wall_friction=1.0,
        n_boxes=(4, 4),
        n_ramps=3,
        ramps_lockable=True,
    ),
    "blueprint": dict(_BUILDER, task="blueprint", horizon=150, n_sites=(1, 4)),
    "shelter": dict(_BUILDER, task="shelter", horizon=240, n_elongated=(3, 3), cylinder=True),
    # A 10 m floor: the row of up to 6 boxes in view and, on each side, room for all of them
    # behind a screen wall (the layout's "counting" walls and placement; counting.py).
    "object_counting": dict(
        _ONE_HIDER,
        task="object_counting",
        horizon=40,  # counting.show_steps + counting.move_steps + counting.hidden_steps
        floor_size=10.0,
        walls="counting",
        n_boxes=(6, 6),  # the paper's six boxes
        n_ramps=0,
        box_size_obs=False,
        placement="counting",
    ),
    # The quadrant world, 2 v 2, every agent rewarded by visit counts alone (intrinsic.py); no
    # preparation phase: nobody is frozen, since there is no game to prepare for.
    "count_based": dict(task="count_based", prep_fraction=0.0),
}


# The flat names the tasks' numbers had before their sections: old name -> (section, field)
MOVED: dict[str, tuple[str, str]] = {
    **{f"lock_{k}": ("lock", k) for k in ("reward", "success_reward", "return_threshold")},
    "unlock_penalty": ("lock", "unlock_penalty"),
    "lock_shaped_reward_scale": ("lock", "shaped_reward_scale"),
    **{
        f"site_{k}": ("blueprint", k)
        for k in ("activation_radius", "smoothmin_alpha", "dense_scale", "completed_reward")
    },
    **{
        f"shelter_{k}": ("shelter", k)
        for k in ("rays_per_side", "ray_margin_cells", "reward_scale")
    },
    **{f"counting_{f.name}": ("counting", f.name) for f in fields(CountingConfig)},
    **{f"count_{k}": ("count_based", k) for k in ("bonus_scale", "cell", "state")},
}


def make_config(preset: str = "quadrant", **overrides) -> GameConfig:
    """The named preset with `overrides` applied; unknown presets and unknown or ill-typed
    parameters raise ValueError (`hns_train.typed_config`: lists become tuples, ints floats).
    A task's section is given as a mapping of its fields; the flat names of `MOVED` are read
    into their sections."""
    if preset not in PRESETS:
        raise ValueError(f"unknown preset {preset!r}; allowed presets: {sorted(PRESETS)}")
    values = {**PRESETS[preset], **nest_moved(overrides), "preset": preset}
    return from_dict(GameConfig, values, what="game parameter(s)")


def game_config(cfg: GameConfig | str) -> GameConfig:
    """``cfg`` itself, or the config of the preset it names (what the game classes take)."""
    if isinstance(cfg, str):
        return make_config(cfg)
    if not isinstance(cfg, GameConfig):
        raise ValueError(f"cfg must be a GameConfig or a preset name, got {type(cfg)}")
    return cfg


def nest_moved(values: dict) -> dict:
    """`values` with each flat name of `MOVED` put into its section's mapping (a section given
    as a mapping too keeps its other fields; a field given both ways is an error)."""
    out = {k: v for k, v in values.items() if k not in MOVED}
    for old, (section, name) in MOVED.items():
        if old not in values:
            continue
        given = out.get(section) or {}
        if not isinstance(given, dict):
            raise FieldError(f"{section} must be a mapping of its fields, got {given!r}")
        if name in given:
            raise FieldError(f"{old} and {section}.{name} name the same setting: give one")
        out[section] = {**given, name: values[old]}
    return out


def _construction_errors(cfg: GameConfig) -> list[str]:
    """The construction tasks' worlds (checked whatever the task; the footprint of the sites
    only where there are sites, so other grids need not fit them)."""
    errors = []
    if cfg.max_sites > 0 and (
        cfg.site_cells < 1 or cfg.site_cells * cfg.cell < cfg.site_size - 1e-9
    ):
        errors.append(
            f"site_cells={cfg.site_cells} must be >= 1 and cover site_size={cfg.site_size} m "
            f"({cfg.cell} m cells)"
        )
    if not cfg.shelter.ray_margin_cells < cfg.grid_cells / 2:
        errors.append(
            f"shelter.ray_margin_cells={cfg.shelter.ray_margin_cells} must be < grid_cells / 2"
        )
    if cfg.task == "blueprint" and cfg.n_sites[0] < 1:
        errors.append(f"the blueprint task needs n_sites low >= 1, got {cfg.n_sites}")
    if cfg.task == "shelter" and not cfg.cylinder:
        errors.append("the shelter task needs cylinder=True")
    return errors


def _counting_scene_errors(cfg: GameConfig) -> list[str]:
    """The counting placement stands one agent and a row of cubes (layout.py): every draw of
    the config must fit it."""
    one_agent = cfg.max_agents == 1 and cfg.n_hiders[0] + cfg.n_seekers[0] == 1
    cubes_only = cfg.n_elongated[1] == 0 and not (cfg.n_ramps or cfg.max_sites or cfg.cylinder)
    if one_agent and cubes_only:
        return []
    return [
        "placement 'counting' takes one agent and cubes only (n_hiders + n_seekers = 1, "
        "n_elongated=(0, 0), n_ramps=0, n_sites=(0, 0), cylinder=False); got "
        f"n_hiders={cfg.n_hiders}, n_seekers={cfg.n_seekers}, n_elongated={cfg.n_elongated}, "
        f"n_ramps={cfg.n_ramps}, n_sites={cfg.n_sites}, cylinder={cfg.cylinder}"
    ]


def _check_types(cfg: GameConfig) -> None:
    """Direct construction (`GameConfig(...)`) gets the type check of `make_config` too."""
    bad = [
        f"{f.name}={getattr(cfg, f.name)!r} (expected {_HINTS[f.name]})"
        for f in fields(cfg)
        if not fits(getattr(cfg, f.name), _HINTS[f.name])
    ]
    if bad:
        raise ValueError("ill-typed game parameter(s): " + ", ".join(bad))


_HINTS = typing.get_type_hints(GameConfig)
