"""The rules of hide-and-seek as array operations over a batch of W worlds (numpy only).

Shapes: W worlds, A agent slots (hiders first, then seekers), O object slots (boxes, then
ramps). Nothing here calls MuJoCo; `game.py` feeds these functions state read from MuJoCo and
applies what they decide. The same functions can later run on GPU arrays.

Rules (spec §3-4):
- Vision: j is seen by i if j lies in i's 135-degree cone (half-angle 67.5 degrees around the
  front direction, heading - pi/2, measured in the xy-plane) and the ray from i's centre to j's
  centre first hits a geom of j (`ray_hit_body`).
- Eligible object: seen on the previous step and within 0.25 m of the agent's centre, measured
  to the object's oriented bounding box.
- Lock (team rule): an object locked by team T is unlocked by a member of T that is eligible
  and sends lock=0, even when another agent sends lock=1 on the same step (the unlock vetoes
  the lock); it becomes locked if an eligible agent sends lock=1 and it is not being unlocked
  this step. The locker is the lowest-index requesting agent (hiders before seekers; the
  original drew one at random). Lock ownership is cleared on unlock, so an unlocked object has
  no team that could veto a lock. The original never cleared it and started each episode with
  every object owned by agent 0 (a hider), so in range with lock=0 the last locking team (the
  hiders, for an object never locked) vetoed any lock of an unlocked object. That bug is not
  copied (spec §3).
- Grab, decided afresh every step as in the original: an agent sending grab=1 holds the closest
  eligible object, whatever it held before; it holds nothing when none is eligible or it sends
  grab=0. So a held object that stops being eligible (the weld stretched it past the range, or
  it was not seen) is dropped and the closest eligible one is taken instead. Locked objects can
  be grabbed and locking does not release a grab (as in the original): the weld to a frozen
  object pins the agent.
- Reward: hiders +1 if no seeker sees any hider, else -1; seekers the negation. Agents outside
  the out-of-bounds rect get the penalty instead; with `penalise_objects_oob` every agent gets it
  while any box or ramp is outside. All rewards are 0 during preparation and for absent agents.
"""

from __future__ import annotations

import numpy as np

NO_TEAM = -1
HIDERS, SEEKERS = 0, 1


def in_vision_cone(
    origin: np.ndarray, yaw: np.ndarray, target: np.ndarray, half_angle: float
) -> np.ndarray:
    """(W, A, T) bool: target t inside agent a's cone.

    origin (W, A, 3), yaw (W, A), target (W, T, 3).
    """
    d = target[:, None, :, :2] - origin[:, :, None, :2]
    return cone_from_offsets(d, np.sin(yaw), np.cos(yaw), half_angle)


def cone_from_offsets(
    d: np.ndarray, sin_yaw: np.ndarray, cos_yaw: np.ndarray, half_angle: float
) -> np.ndarray:
    """`in_vision_cone` from the offsets d (W, A, T, >=2; xy first) and each agent's sin / cos
    of yaw (W, A): the front is (sin yaw, -cos yaw)."""
    front = np.stack([sin_yaw, -cos_yaw], axis=-1)[:, :, None, :]
    return cone_from_front(d, front, np.cos(half_angle))


def cone_from_front(d: np.ndarray, front: np.ndarray, cos_half_angle: float) -> np.ndarray:
    """The cone test on offsets d (W, A, T, >=2) and fronts (W, A, 1, 2)."""
    d = d[..., :2]
    norm = np.sqrt((d * d).sum(-1))  # np.linalg.norm's arithmetic, without its checks
    cos = (d * front).sum(-1) / np.maximum(norm, 1e-9)
    return cos >= cos_half_angle


def obb_distance(
    point: np.ndarray, centre: np.ndarray, yaw: np.ndarray, half: np.ndarray
) -> np.ndarray:
    """(W, A, O) distance from points (W, A, 3) to yawed boxes.

    Boxes are centred at (W, O, 3) with yaw (W, O) and half sizes (W, O, 3).
    """
    d = point[:, :, None, :] - centre[:, None, :, :]
    c, s = np.cos(yaw)[:, None, :], np.sin(yaw)[:, None, :]
    local = np.stack([c * d[..., 0] + s * d[..., 1], -s * d[..., 0] + c * d[..., 1], d[..., 2]], -1)
    excess = np.maximum(np.abs(local) - half[:, None, :, :], 0.0)
    return np.linalg.norm(excess, axis=-1)


def update_locks(
    locked: np.ndarray,
    lock_team: np.ndarray,
    lock_agent: np.ndarray,
    eligible: np.ndarray,
    lock_action: np.ndarray,
    team: np.ndarray,
    lockable: np.ndarray,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """New (locked, lock_team, lock_agent) after one step of lock actions.

    locked (W, O) bool, lock_team / lock_agent (W, O) int, eligible (W, A, O), lock_action (W, A)
    in {0, 1}, team (A,), lockable (O,) or per world (W, O).
    """
    can = eligible & np.broadcast_to(lockable, locked.shape)[:, None, :]
    wants_lock = can & (lock_action[:, :, None] == 1)
    same_team = team[None, :, None] == lock_team[:, None, :]
    unlock = locked & (can & (lock_action[:, :, None] == 0) & same_team).any(axis=1)
    request = wants_lock.any(axis=1)
    new_locked = (locked | request) & ~unlock
    newly = new_locked & ~locked
    locker = wants_lock.argmax(axis=1)  # first requesting agent
    new_team = np.where(newly, team[locker], np.where(new_locked, lock_team, NO_TEAM))
    new_agent = np.where(newly, locker, np.where(new_locked, lock_agent, -1))
    return new_locked, new_team, new_agent


def choose_grabs(grab_action: np.ndarray, eligible: np.ndarray, dist: np.ndarray) -> np.ndarray:
    """(W, A) index of the object each agent holds after this step (-1: none).

    grab_action (W, A) in {0, 1}; eligible, dist (W, A, O). Ties go to the lower object index.
    """
    if dist.shape[2] == 0:
        return np.full(grab_action.shape, -1, dtype=np.int64)
    cand = np.where(eligible, dist, np.inf)
    closest = cand.argmin(axis=2)
    has = np.isfinite(cand.min(axis=2))
    return np.where((grab_action == 1) & has, closest, -1)


def outside(xy: np.ndarray, low: float, high: float) -> np.ndarray:
    return ((xy < low) | (xy > high)).any(axis=-1)


def rewards(
    sees_agent: np.ndarray,
    is_hider: np.ndarray,
    agent_present: np.ndarray,
    agent_xy: np.ndarray,
    object_xy: np.ndarray,
    object_present: np.ndarray,
    in_prep: np.ndarray,
    oob_low: float,
    oob_high: float,
    oob_penalty: float,
    penalise_objects: bool,
) -> tuple[np.ndarray, np.ndarray]:
    """(rewards (W, A), hiders_seen (W,)). sees_agent (W, A, A): row sees column."""
    seeker = ~is_hider[None, :] & agent_present
    hider = is_hider[None, :] & agent_present
    seen = (sees_agent & seeker[:, :, None] & hider[:, None, :]).any(axis=(1, 2))
    team_r = np.where(seen, -1.0, 1.0)[:, None]
    r = np.where(is_hider[None, :], team_r, -team_r)
    penalised = outside(agent_xy, oob_low, oob_high)
    if penalise_objects and object_xy.shape[1]:
        bad = (outside(object_xy, oob_low, oob_high) & object_present).any(axis=1)
        penalised = penalised | bad[:, None]
    r = np.where(penalised, oob_penalty, r)
    r = np.where(agent_present & ~in_prep[:, None], r, 0.0)
    return r.astype(np.float32), seen
