"""Physics stays stable under random play, and a physics failure is counted, never silent.

Random play here pushes hard and holds on: movement bins are mostly the extremes, grab and lock
are asked for most of the time, and each action dimension is kept from the previous step with
probability `STICK` (so agents keep pushing a held box into walls, boxes and locked objects).
Under MuJoCo 4.0.0's sparse Newton path (world.py's docstring) this throws boxes at 100-300 m/s
within a few hundred steps of `randomwalls` and ends in bad-QACC resets; with the dense path no
body got faster than 25 m/s in 160 such randomwalls episodes, 240 quadrant, 640 chase.

Speed bound: agents top out at 9 m/s (force 90 N against damping 10), a pushed or spun box at
about 25 m/s or rad/s; 60 is a broken solver, not a hard push.
"""

import logging

import hns_scene as S
import mujoco
import numpy as np
import pytest

from hns_train.envs.config import make_config
from hns_train.envs.game import HideAndSeekGame

MAX_SPEED = 60.0  # m/s or rad/s on any DOF (see the module docstring)
P_GRAB, P_LOCK, STICK = 0.8, 0.6, 0.8
MOVE_BINS = np.array([0, 0, 2, 5, 8, 10, 10])  # mostly full force


def random_play(preset: str, n_worlds: int, episodes: int, seed: int) -> dict:
    """Seeded hard random play; the largest speed, warnings and whether the state stayed finite."""
    cfg = make_config(preset)
    game = HideAndSeekGame(cfg, n_worlds=n_worlds, seed=seed)
    rng = np.random.default_rng(seed)
    game.reset()
    shape = (n_worlds, game.n_agents)
    actions = np.zeros((*shape, 5), dtype=np.int64)
    actions[..., :3] = cfg.action_bins // 2
    max_speed, finite, per_episode = 0.0, True, []
    for _ in range(episodes):
        for _ in range(cfg.horizon):
            new = np.empty_like(actions)
            new[..., :3] = rng.choice(MOVE_BINS, size=(*shape, 3))
            new[..., 3] = rng.random(shape) < P_GRAB
            new[..., 4] = rng.random(shape) < P_LOCK
            actions = np.where(rng.random((*shape, 5)) < STICK, actions, new)
            obs, _, truncated, _ = game.step(actions)
            qvel = game.batch.bind("qvel")
            max_speed = max(max_speed, float(np.abs(qvel).max()))
            finite &= bool(np.isfinite(game.batch.bind("qpos")).all() and np.isfinite(qvel).all())
            finite &= all(bool(np.isfinite(v).all()) for v in obs.values())
        assert truncated.all()
        per_episode.append(game.physics_warnings.copy())
        game.reset()
    return dict(
        max_speed=max_speed,
        finite=finite,
        warnings=game.physics_warnings_total,
        per_episode=np.array(per_episode),
    )


@pytest.mark.parametrize(
    "preset, n_worlds, episodes, seed",
    [
        ("randomwalls", 8, 1, 3),
        ("randomwalls", 8, 1, 4),
        ("quadrant", 8, 2, 3),
        ("chase", 8, 4, 3),
        ("blueprint", 8, 1, 3),
        ("shelter", 8, 1, 3),  # boxes pushed against the static cylinder
    ],
)
def test_random_play_is_stable(preset, n_worlds, episodes, seed):
    out = random_play(preset, n_worlds, episodes, seed)
    assert out["warnings"] == 0 and not out["per_episode"].any()
    assert out["finite"]
    assert out["max_speed"] < MAX_SPEED, f"a DOF reached {out['max_speed']:.3g} (m/s or rad/s)"


def test_models_use_the_dense_constraint_jacobian():
    # nv of a full randomwalls world is 60, where MuJoCo's default switches to the sparse path
    game = HideAndSeekGame(make_config("randomwalls"), n_worlds=1, seed=0)
    game.reset()
    assert game.model.nv == 60
    assert game.model.opt.jacobian == mujoco.mjtJacobian.mjJAC_DENSE
    assert not mujoco.mj_isSparse(game.model)


def test_a_physics_failure_is_counted_logged_and_cleared_by_reset(caplog):
    cfg = make_config("quadrant")
    game = HideAndSeekGame(cfg, n_worlds=3, seed=1)
    game.reset()
    noop = np.broadcast_to(game.noop, (3, game.n_agents, 5))
    game.step(noop)
    assert game.physics_warnings.tolist() == [0, 0, 0] and game.physics_warnings_total == 0
    # a non-finite velocity in world 1: MuJoCo warns (bad QVEL) and resets that world's state
    box = game.index.object_qvel[0, 0]
    game.batch.bind("qvel")[1, box] = np.inf
    with caplog.at_level(logging.WARNING, logger="hns_train.envs.game"):
        game.step(noop)
    assert game.physics_warnings.tolist() == [0, 1, 0]
    assert game.physics_warnings_total == 1
    assert np.isfinite(game.batch.bind("qvel")[1]).all()
    (record,) = [r for r in caplog.records if r.name == "hns_train.envs.game"]
    message = record.getMessage()
    assert "QVEL of world 1" in message and f"DOF {box} " in message
    assert "box0" in message
    assert "reset the world's state" in message  # its state was bad before the step: not put back
    # counted once: later steps without a new failure add nothing
    game.step(noop)
    assert game.physics_warnings.tolist() == [0, 1, 0] and game.physics_warnings_total == 1
    # a new episode in world 1 starts at 0; the total keeps the history
    game.reset([1])
    assert game.physics_warnings.tolist() == [0, 0, 0] and game.physics_warnings_total == 1
    game.batch.bind("qvel")[2, box] = np.nan
    game.step(noop)
    assert game.physics_warnings.tolist() == [0, 0, 1] and game.physics_warnings_total == 2


@pytest.mark.parametrize("threads", [1, 2])  # the one-call step after physics, and the C rays
def test_a_world_whose_physics_goes_bad_gets_its_state_and_grab_back(threads, caplog):
    """A NaN inertia makes the physics of a step go bad (bad QACC): MuJoCo resets the world to
    qpos0 and drops its welds; the game puts back the state from before the step, the held
    box's weld among it, so the grab table and the physics agree and the drag goes on."""
    cfg = make_config("quadrant", n_hiders=(1, 1), n_seekers=(1, 1))
    game = HideAndSeekGame(cfg, n_worlds=1, seed=0, threads=threads)
    game.reset()
    S.place(
        game, agents={0: (4.38, 4.2, S.FACE_PX), 1: (5.5, 5.0, 0.0)}, objects={0: (4.8, 4.2, 0)}
    )
    S.run(game, 3, a0=[0, 5, 5, 1, 0])  # grab the box and pull it west
    weld = game.index.weld[0, 0]
    assert game.grabbed[0, 0] == 0 and game.data.eq_active[weld] == 1
    qpos, qvel = game.data.qpos.copy(), game.data.qvel.copy()
    gap = S.object_xy(game, 0) - S.agent_xy(game, 0)
    inertia, seeker = game.models[0].body_inertia, game.index.agent_body[1]
    saved = inertia[seeker].copy()
    inertia[seeker] = np.nan
    try:
        with caplog.at_level(logging.WARNING, logger="hns_train.envs.game"):
            S.run(game, 1, a0=[0, 5, 5, 1, 0])
    finally:
        inertia[seeker] = saved
    assert game.physics_warnings[0] >= 1 and game.physics_warnings_total >= 1
    assert "put back the world's state from before the step" in caplog.text
    np.testing.assert_array_equal(game.data.qpos, qpos)
    np.testing.assert_array_equal(game.data.qvel, qvel)
    assert game.grabbed[0, 0] == 0 and game.data.eq_active[weld] == 1
    assert all(np.isfinite(v).all() for v in game.obs.values())
    S.run(game, 3, a0=[0, 5, 5, 1, 0])  # still held: the box follows the agent
    np.testing.assert_allclose(S.object_xy(game, 0) - S.agent_xy(game, 0), gap, atol=0.02)
