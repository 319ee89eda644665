"""The Warp game's step makes no host synchronisation (envs/warp/game.py, bank.py).

`HostSyncCounter` (tests/host_syncs.py) counts every call that would make the host wait
for a GPU (tensor reads, data-dependent shapes), on the CPU device too. Given a tensor of
actions (checked lazily) or `check=False`, one `WarpGame.step` must count zero, including steps
where some worlds end their episodes and are reset from the layout bank, and steps that refresh
the bank. What the step does not read
(bad actions, physics buffer overflows) is accumulated on the device and read by
`read_warnings`. Needs Warp's kernels (cached after the first run of a machine), hence `slow`.
"""

import logging

import numpy as np
import pytest
import torch

pytest.importorskip("mujoco_warp")

from hns_train.envs.config import make_config  # noqa: E402
from hns_train.envs.stats import STAT_KEYS  # noqa: E402
from hns_train.envs.warp.bank import BankConfig  # noqa: E402
from hns_train.envs.warp.game import WarpGame  # noqa: E402
from tests.host_syncs import HostSyncCounter  # noqa: E402

pytestmark = pytest.mark.slow

W, HORIZON = 6, 4


@pytest.fixture(scope="module")
def game():
    cfg = make_config("quadrant", horizon=HORIZON)
    g = WarpGame(cfg, W, seed=3, stagger=True, bank=BankConfig(refresh_every=2, refresh_slots=3))
    g.reset()
    yield g
    g.close()


def _actions(game, rng) -> torch.Tensor:
    a = rng.integers(0, game.action_nvec, size=(W, game.n_agents, 5))
    return torch.as_tensor(a, device=game.dev)


def test_a_step_makes_no_host_sync_when_some_worlds_reset(game):
    rng = np.random.default_rng(0)
    partial = refreshes = 0
    for _ in range(2 * HORIZON):
        actions = _actions(game, rng)
        before = game.bank.refreshes
        with HostSyncCounter() as syncs:
            result = game.step(actions, check=False)
        assert syncs.total == 0, dict(syncs.calls)
        done = result.truncated.numpy()
        partial += int(done.any() and not done.all())
        refreshes += game.bank.refreshes - before
        stats = np.stack([result.episode_stats[k].numpy() for k in STAT_KEYS], 1)
        assert np.isfinite(stats[done]).all() and np.isnan(stats[~done]).all()
        assert (game.t.numpy()[done] == 0).all()
    assert partial, "no step ended some worlds' episodes but not all (stagger)"
    assert refreshes >= HORIZON - 1, "the bank was not refreshed"
    assert game.read_warnings() == 0


def test_step_results_are_device_tensors(game):
    result = game.step(_actions(game, np.random.default_rng(1)), check=False)
    tensors = [result.rewards, result.truncated, result.agent_present, result.final_agent_present]
    tensors += list(result.obs.values()) + list(result.final_obs.values())
    tensors += list(result.episode_stats.values())
    assert all(isinstance(t, torch.Tensor) and t.device == game.dev for t in tensors)
    assert result.episode_stats["hider_return"].shape == (W,)


def test_bad_actions_unchecked_are_clamped_and_raised_at_the_next_read(game):
    actions = _actions(game, np.random.default_rng(2))
    actions[4, 1, 2] = 11
    actions[5, 0, 0] = -1
    with HostSyncCounter() as syncs:
        game.step(actions, check=False)
    assert syncs.total == 0
    with pytest.raises(ValueError, match=r"2 action entries .* world 4, agent slot 1, dimension 2"):
        game.read_warnings()
    game.read_warnings()  # reported once
    with pytest.raises(ValueError, match="world 4, agent slot 1, dimension 2"):
        game.step(actions, check=True)  # raised at once
    with pytest.raises(ValueError, match="world 4, agent slot 1, dimension 2"):
        game.step(actions.numpy())  # host arrays are checked at once by default
    with HostSyncCounter() as syncs:
        game.step(actions)  # a tensor: checked lazily by default, as a pod passes them
    assert syncs.total == 0
    with pytest.raises(ValueError, match="2 action entries"):
        game.read_warnings()


def test_physics_overflows_are_counted_on_the_device_and_logged_at_the_read(game, caplog):
    before = game.read_warnings()
    game.worlds.overflow[2] = 1 << 1  # what MuJoCo Warp writes when njmax_nnz overflows
    with HostSyncCounter() as syncs:
        game.step(_actions(game, np.random.default_rng(3)), check=False)
    assert syncs.total == 0
    assert int(game.physics_warnings[2]) == 1 or bool(game.t[2] == 0)  # unless it just reset
    with caplog.at_level(logging.WARNING, logger="hns_train.envs.warp.game"):
        total = game.read_warnings()
    assert total == before + 1 == game.physics_warnings_total
    assert "overflowed njmax_nnz in world 2" in caplog.text
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="hns_train.envs.warp.game"):
        game.read_warnings()
    assert "overflowed" not in caplog.text  # logged once
