"""`num_box_surf`: a seeker standing on a moving box is counted, nothing else is.

The scenes are real quadrant worlds whose state is written into qpos/qvel before each step:
box 0 crosses the open low-x / high-y quadrant while an agent rides on its top face.
"""

import numpy as np
import pytest

from hns_train.envs.config import make_config
from hns_train.envs.game import HideAndSeekGame
from hns_train.envs.stats import STAT_KEYS, box_surfing

HORIZON = 20  # quadrant with a short horizon: 8 prep steps, 12 play steps
BOX_Z = 0.5  # box top face height; an agent on it has its centre at 0.5 + radius


def _park_others(game, keep_agent: int) -> None:
    """Put every entity except box 0 and `keep_agent` into far corners, at rest."""
    idx, d = game.index, game.data
    corners = [(0.5, 0.5), (5.5, 0.5), (5.5, 2.5), (0.5, 2.0)]
    for k in range(game.n_agents):
        if k != keep_agent:
            d.qpos[idx.agent_qpos[k]] = (*corners[k % len(corners)], 0.0, 0.0)
            d.qvel[idx.agent_qvel[k]] = 0.0
    for o in range(1, game.n_objects):
        d.qpos[idx.object_qpos[o]] = (4.5 + 0.7 * (o - 1), 1.5, 0.0, 0.0)
        d.qvel[idx.object_qvel[o]] = 0.0


def _run(agent: int, on_top: bool, speed: float, from_step: int = 0) -> tuple[dict, list[bool]]:
    """One episode; from `from_step` on, box 0 moves along +x at `speed` with `agent` on it
    (or beside it on the floor). Returns the episode statistics and per-step surf flags."""
    cfg = make_config("quadrant", horizon=HORIZON)
    game = HideAndSeekGame(cfg, n_worlds=1, seed=3)
    game.reset()
    idx, d, r = game.index, game.data, cfg.agent_radius
    noop = np.broadcast_to(game.noop, (1, game.n_agents, 5))
    flags, info = [], {}
    x = 0.8
    for t in range(HORIZON):
        _park_others(game, agent)
        if t >= from_step:
            d.qpos[idx.object_qpos[0]] = (x, 4.5, 0.0, 0.0)
            d.qvel[idx.object_qvel[0]] = (speed, 0.0, 0.0, 0.0)
            pos = (x, 4.5, BOX_Z) if on_top else (x, 4.5 - 0.6, 0.0)
            d.qpos[idx.agent_qpos[agent]] = (*pos, 0.0)
            d.qvel[idx.agent_qvel[agent]] = (speed, 0.0, 0.0, 0.0)
        else:
            d.qpos[idx.object_qpos[0]] = (0.8, 4.5, 0.0, 0.0)
            d.qvel[idx.object_qvel[0]] = 0.0
            d.qpos[idx.agent_qpos[agent]] = (2.0, 5.0, 0.0, 0.0)
            d.qvel[idx.agent_qvel[agent]] = 0.0
        before = game.stats.values[0, STAT_KEYS.index("num_box_surf")]
        _, _, truncated, infos = game.step(noop)
        flags.append(bool(game.stats.values[0, STAT_KEYS.index("num_box_surf")] > before))
        if truncated[0]:
            info = infos[0]
        if t >= from_step:
            x = float(game.object_pos[0, 0, 0])  # the ride goes on from where the box got to
        # the rider is still on the box's top face after the physics step
        if t >= from_step and on_top:
            assert abs(game.agent_pos[0, agent, 2] - (BOX_Z + r)) < 0.05
    return info, flags


def test_seeker_on_moving_box_counts_every_play_step():
    seeker = 2  # quadrant slots: hiders 0-1, seekers 2-3
    info, flags = _run(seeker, on_top=True, speed=3.0)
    prep = make_config("quadrant", horizon=HORIZON).prep_steps
    assert "num_box_surf" in info
    assert info["num_box_surf"] == HORIZON - prep
    assert flags == [False] * prep + [True] * (HORIZON - prep)


def test_counter_starts_when_the_ride_starts():
    info, flags = _run(2, on_top=True, speed=3.0, from_step=14)
    assert info["num_box_surf"] == HORIZON - 14
    assert flags.index(True) == 14


@pytest.mark.parametrize(
    "agent, on_top, speed",
    [
        (2, True, 0.0),  # seeker on a box at rest: standing, not surfing
        (2, False, 3.0),  # seeker on the floor beside a moving box
        (0, True, 3.0),  # a hider riding a box is not box surfing
    ],
)
def test_counter_stays_zero_otherwise(agent, on_top, speed):
    info, flags = _run(agent, on_top=on_top, speed=speed)
    assert info["num_box_surf"] == 0
    assert not any(flags)


def test_rule_on_arrays():
    """Footprint uses the box's yaw; a grab by the rider counts even when the box is still."""
    half = np.array([[[0.825, 0.075, 0.25]]])  # elongated along its local x
    box = np.array([[[3.0, 3.0, 0.25]]])
    vel = np.zeros((1, 1, 4))
    seeker = np.array([[True]])
    present = np.array([[True]])

    def surf(agent_xy, yaw, grabbed):
        pos = np.array([[[*agent_xy, 0.5 + 0.15]]])
        return box_surfing(
            pos, seeker, box, np.array([[yaw]]), vel, half, present, np.array([[grabbed]]), 0.15
        )[0]

    assert surf((3.7, 3.0), 0.0, 0)  # along the long side, grabbed
    assert not surf((3.7, 3.0), 0.0, -1)  # not grabbed, box at rest
    assert not surf((3.7, 3.0), np.pi / 2, 0)  # rotated: (3.7, 3) is off the top face
    assert surf((3.0, 3.7), np.pi / 2, 0)
