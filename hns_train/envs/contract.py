"""The action and observation contract of the hide-and-seek game: the one place its layout lives.

Every backend (the CPU game of `game.py`, a GPU one) writes it and every consumer (networks,
opponents, actors, replays, evaluation) reads it from here, so a change of layout is one change.
Everything is plain Python (ints, tuples, slices) plus `control_levels`; nothing assumes numpy
arrays per world, so array libraries other than numpy can use the same numbers.

Actions (spec §3), per agent, `ACTION_DTYPE` int64, `N_ACTION_DIMS` = 5 columns, in the order
of `ACTION_HEADS`: x force bin, y force bin, z torque bin (each in [0, action_bins), default
`DEFAULT_ACTION_BINS` = 11, the middle bin is zero force), grab (0/1), lock (0/1). Bin k sets
control `control_levels(bins, max_ctrl)[k]` = linspace(-max_ctrl, max_ctrl, bins)[k] on the
agent's actuator (gear `actuator_gear`). The no-op (`noop_action`) is the middle bins, no grab,
no lock: what absent agents and seekers in the preparation phase send.

Observations (spec §5), per agent, dtype `OBS_DTYPE` float32, keys in `OBS_KEYS` order with
shapes from `observation_shapes(cfg)` (without batch dims):

    observation_self (SELF_DIM,)            lidar (n_lidar,)
    agent_qpos_qvel (A-1, SELF_DIM)         mask_aa_obs (A-1,)   mask_aa_obs_spoof (A-1,)
    box_obs (max_boxes, BOX_DIM)            mask_ab_obs (NB,)    mask_ab_obs_spoof (NB,)
    ramp_obs (n_ramps, RAMP_DIM)            mask_ar_obs (NR,)    mask_ar_obs_spoof (NR,)

Construction sites (the blueprint task, `cfg.max_sites` > 0 only; every other config has none of
these keys): `site_obs (max_sites, SITE_DIM)` with `mask_as_obs` and `mask_as_obs_spoof`, after
the keys above. A row is the site's centre (x, y, z) then its 4 corners' (x, y, z) in the
original's order (-x -y, -x +y, +x -y, +x +y; `SiteColumns`); both masks say the site exists
(the original does not mask sites by vision). `SITE_KEYS` is not in `ENTITY_KEYS`, whose three
kinds every game has; `ALL_ENTITY_KEYS` holds all four.

`ENTITY_KEYS` pairs each entity key with its visible mask (`mask_*_obs`: in the vision cone and
in line of sight, what the policy may use) and its exists mask (`mask_*_obs_spoof`: present this
episode, what the omniscient critic uses). Masks hold 0.0 / 1.0.

Columns: observation_self and each agent_qpos_qvel row follow `SelfColumns` (centre x, y, z;
yaw wrapped to [-pi, pi); vx, vy, vz; yaw rate; is_hider; prep progress = min(1, t / prep
steps)); box and ramp rows start with `ObjectColumns` (centre x, y, z, cos yaw, sin yaw, vx, vy,
vz, yaw rate), then the box's full size (x, y, z) when `box_size_obs`, then the lock flags
(locked by me, by my team, at all) when the kind can be locked (for ramps: and `ramp_lock_obs`,
which a fine-tuned network trained without them turns off); ramps carry 3 zero pads in place
of the size when boxes carry sizes and ramp rows carry lock flags, so box and ramp rows line up
as in the original. `box_columns(cfg)` / `ramp_columns(cfg)` give those slices and the row widths
(BOX_DIM and RAMP_DIM above: their `dim`).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from hns_train.envs.config import ACTION_BINS, GameConfig

# ----------------------------------------------------------------------------- actions
ACTION_HEADS = ("move_x", "move_y", "turn_z", "grab", "lock")
N_ACTION_DIMS = len(ACTION_HEADS)
N_MOVE_DIMS = 3  # the first three heads are force / torque bins
GRAB, LOCK = 3, 4  # columns of the binary heads
DEFAULT_ACTION_BINS = 11
ACTION_DTYPE = np.int64


def check_action_bins(bins: int, name: str = "action_bins") -> int:
    """`bins` when it is an int that `ACTION_BINS` allows (odd, so the middle bin is zero force),
    else ValueError."""
    if not isinstance(bins, int | np.integer) or isinstance(bins, bool):
        raise ValueError(f"{name}={bins!r} is not an integer")
    problem = ACTION_BINS.problem(name, int(bins))
    if problem:
        raise ValueError(problem)
    return int(bins)


def action_nvec(bins: int = DEFAULT_ACTION_BINS) -> tuple[int, ...]:
    """Sizes of the action heads: (bins, bins, bins, 2, 2)."""
    bins = check_action_bins(bins)
    return (bins,) * N_MOVE_DIMS + (2, 2)


def noop_action(bins: int = DEFAULT_ACTION_BINS) -> tuple[int, ...]:
    """The no-op: middle force and torque bins, no grab, no lock."""
    bins = check_action_bins(bins)
    return (bins // 2,) * N_MOVE_DIMS + (0, 0)


def control_levels(bins: int, max_ctrl: float) -> np.ndarray:
    """(bins,) float64 control of each force / torque bin: linspace(-max_ctrl, max_ctrl, bins).
    The middle level is linspace's rounding of 0 (-1.1e-16 at 11 bins and 0.9), kept as it is:
    recorded episodes replay bit for bit."""
    return np.linspace(-max_ctrl, max_ctrl, check_action_bins(bins))


def check_actions(actions, n_worlds: int, n_agents: int, nvec: np.ndarray) -> np.ndarray:
    """`actions` as (n_worlds, n_agents, 5) int64, or a ValueError naming what is wrong: the
    shape, a dtype that is not integral, or the first entry outside its head's range (the rule
    of `integral` and `first_out_of_range`, which the PettingZoo env applies agent by agent)."""
    actions = np.asarray(actions)
    want = (n_worlds, n_agents, len(nvec))
    if actions.shape != want:
        raise ValueError(f"actions have shape {actions.shape}; expected {want} (worlds, agents, 5)")
    if not integral(actions):
        raise ValueError(f"actions must be integers, got dtype {actions.dtype}")
    bad = first_out_of_range(actions, nvec)
    if bad is not None:
        w, a, k = bad
        raise ValueError(bad_action_message(int(actions[bad]), w, a, k, nvec))
    return actions.astype(np.int64, copy=False)


def integral(actions: np.ndarray) -> bool:
    """Whether `actions` hold integers: an integer dtype, or floats holding whole numbers."""
    if actions.dtype.kind in "iu":
        return True
    return actions.dtype.kind == "f" and bool(np.all(actions == np.round(actions)))


def first_out_of_range(actions: np.ndarray, nvec) -> tuple[int, ...] | None:
    """Index of the first entry of integral `actions` (..., 5) outside its head's
    [0, nvec[k] - 1], or None."""
    if actions.min() >= 0 and (actions < nvec).all():
        return None
    return tuple(int(i) for i in np.argwhere((actions < 0) | (actions >= nvec))[0])


def bad_action_message(value: int, world: int, slot: int, k: int, nvec) -> str:
    """What is wrong with entry `value` of head k for world `world`, agent slot `slot`."""
    return (
        f"action {value} for world {world}, agent slot {slot}, dimension {k} is "
        f"outside [0, {nvec[k] - 1}] (MultiDiscrete {list(map(int, nvec))})"
    )


# ----------------------------------------------------------------------------- observations
OBS_DTYPE = np.float32
SELF_KEY = "observation_self"
AGENTS_KEY = "agent_qpos_qvel"
BOXES_KEY = "box_obs"
RAMPS_KEY = "ramp_obs"
LIDAR_KEY = "lidar"


@dataclass(frozen=True)
class EntityKeys:
    """The keys of one entity kind: feature rows and the two masks over them."""

    name: str
    key: str  # (N, D) feature rows
    visible_mask: str  # (N,) in cone and line of sight: the policy's attention mask
    exists_mask: str  # (N,) present this episode: the critic's attention mask


ENTITY_KEYS = (
    EntityKeys("agents", AGENTS_KEY, "mask_aa_obs", "mask_aa_obs_spoof"),
    EntityKeys("boxes", BOXES_KEY, "mask_ab_obs", "mask_ab_obs_spoof"),
    EntityKeys("ramps", RAMPS_KEY, "mask_ar_obs", "mask_ar_obs_spoof"),
)
SITES_KEY = "site_obs"
SITE_KEYS = EntityKeys("sites", SITES_KEY, "mask_as_obs", "mask_as_obs_spoof")
ALL_ENTITY_KEYS = (*ENTITY_KEYS, SITE_KEYS)  # the optional kinds last
VISIBLE_MASK_KEYS = tuple(e.visible_mask for e in ENTITY_KEYS)
EXISTS_MASK_KEYS = tuple(e.exists_mask for e in ENTITY_KEYS)
MASK_KEYS = VISIBLE_MASK_KEYS + EXISTS_MASK_KEYS
OBS_KEYS = (SELF_KEY, AGENTS_KEY, BOXES_KEY, RAMPS_KEY, LIDAR_KEY, *MASK_KEYS)


ALL_MASK_KEYS = (*MASK_KEYS, SITE_KEYS.visible_mask, SITE_KEYS.exists_mask)


def is_mask_key(key: str) -> bool:
    """Masks are 0/1 attention masks: never normalised."""
    return key in ALL_MASK_KEYS


class SelfColumns:
    """Columns of observation_self and of each agent_qpos_qvel row."""

    POS = slice(0, 3)  # centre x, y, z
    XY = slice(0, 2)
    YAW = 3  # wrapped to [-pi, pi)
    VEL = slice(4, 8)  # vx, vy, vz, yaw rate
    IS_HIDER = 8
    PREP = 9  # min(1, t / prep_steps); 1 without a preparation phase
    DIM = 10


class ObjectColumns:
    """First columns of every box_obs / ramp_obs row (`box_columns` / `ramp_columns`: the rest)."""

    POS = slice(0, 3)
    XY = slice(0, 2)
    COS_YAW = 3
    SIN_YAW = 4
    VEL = slice(5, 9)  # vx, vy, vz, yaw rate
    DIM = 9


class SiteColumns:
    """Columns of each site_obs row."""

    POS = slice(0, 3)  # centre x, y, z
    CORNERS = slice(3, 15)  # 4 corners x (x, y, z): -x -y, -x +y, +x -y, +x +y
    N_CORNERS = 4
    DIM = 15


SELF_DIM = SelfColumns.DIM
SITE_DIM = SiteColumns.DIM
OBJECT_BASE_DIM = ObjectColumns.DIM
LOCK_FLAGS = 3  # locked by me, by my team, at all


@dataclass(frozen=True)
class RowColumns:
    """Where the optional parts of a box / ramp row sit (None: not in this config)."""

    dim: int
    size: slice | None  # full size x, y, z (boxes) or zero pads (ramps)
    lock: slice | None  # locked by me, by my team, at all


def box_columns(cfg: GameConfig) -> RowColumns:
    col = OBJECT_BASE_DIM
    size = slice(col, col + 3) if cfg.box_size_obs else None
    col += 3 * cfg.box_size_obs
    lock = slice(col, col + LOCK_FLAGS) if cfg.boxes_lockable else None
    return RowColumns(col + LOCK_FLAGS * cfg.boxes_lockable, size, lock)


def ramp_columns(cfg: GameConfig) -> RowColumns:
    col = OBJECT_BASE_DIM
    flags = cfg.ramps_lockable and cfg.ramp_lock_obs
    pads = cfg.box_size_obs and flags
    size = slice(col, col + 3) if pads else None
    col += 3 * pads
    lock = slice(col, col + LOCK_FLAGS) if flags else None
    return RowColumns(col + LOCK_FLAGS * flags, size, lock)


def observation_shapes(cfg: GameConfig) -> dict[str, tuple[int, ...]]:
    """Per-agent shape of every key (no batch dims), in `OBS_KEYS` order, then the site keys
    where the config has sites."""
    counts = (cfg.max_agents - 1, cfg.max_boxes, cfg.n_ramps)
    dims = (SELF_DIM, box_columns(cfg).dim, ramp_columns(cfg).dim)
    shapes: dict[str, tuple[int, ...]] = {SELF_KEY: (SELF_DIM,)}
    for kind, n, d in zip(ENTITY_KEYS, counts, dims, strict=True):
        shapes[kind.key] = (n, d)
    shapes[LIDAR_KEY] = (cfg.n_lidar,)
    for kind, n in zip(ENTITY_KEYS, counts, strict=True):
        shapes[kind.visible_mask] = (n,)
    for kind, n in zip(ENTITY_KEYS, counts, strict=True):
        shapes[kind.exists_mask] = (n,)
    if cfg.max_sites > 0:
        shapes[SITE_KEYS.key] = (cfg.max_sites, SITE_DIM)
        shapes[SITE_KEYS.visible_mask] = (cfg.max_sites,)
        shapes[SITE_KEYS.exists_mask] = (cfg.max_sites,)
    return shapes


def check_network_settings(cfg: GameConfig, move_bins: int, where: str = "move_bins") -> None:
    """ValueError naming `where` unless a network's action bins fit the game's actions."""
    if move_bins != cfg.action_bins:
        raise ValueError(
            f"{where}={move_bins} does not match the game's action_bins={cfg.action_bins}: the "
            f"policy's action heads must be {list(action_nvec(cfg.action_bins))}"
        )
