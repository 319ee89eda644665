"""The Warp game at scale, as far as Warp's CPU device shows it (envs/warp/physics.py, bank.py).

- CUDA graph capture: the decision (`capture_plan`) and its log-once warning; on the CPU device
  nothing is captured.
- Resets: `WarpWorlds.reset_where` clears what `mujoco_warp.reset_data` would.
- Staggered starts: worlds begin their first episode at different steps, and the observation's
  preparation clock follows each world's own step.
- The layout bank: refreshed batches are the layouts the bank's generator draws, written into
  the slots round robin, the same in two games of the same seed (thread timing plays no part).
- Warp's per-kernel "Module ... load" lines stay off the terminal of a fresh process.
Building games needs Warp's kernels (cached after the first run of a machine), hence `slow`.
"""

import logging
import os
import subprocess
import sys

import numpy as np
import pytest
import torch

pytest.importorskip("mujoco_warp")

from hns_train.envs.config import make_config  # noqa: E402
from hns_train.envs.layout import sample_layout  # noqa: E402
from hns_train.envs.warp import physics  # noqa: E402
from hns_train.envs.warp.bank import BankConfig, layout_entries  # noqa: E402
from hns_train.envs.warp.game import WarpGame  # noqa: E402
from hns_train.envs.world import ModelCache  # noqa: E402

pytestmark = pytest.mark.slow


def test_capture_plan_says_why_not_and_the_warning_is_logged_once(caplog):
    assert physics.capture_plan(True, True)[0]
    ok, why = physics.capture_plan(False, True)
    assert not ok and "not a CUDA device" in why
    ok, why = physics.capture_plan(True, False)
    assert not ok and "memory pool" in why
    message = "test: the physics steps run uncaptured (a reason)"
    with caplog.at_level(logging.WARNING, logger=physics.log.name):
        physics.warn_once(message)
        physics.warn_once(message)
    assert caplog.text.count(message) == 1


def test_the_cpu_device_steps_uncaptured():
    game = WarpGame("chase", 2, seed=0, device="cpu")
    game.reset()
    game.step(np.full((2, game.n_agents, 5), 0))
    assert game.worlds._graphs is None and not game.worlds.device.is_cuda
    game.close()


def test_reset_where_leaves_nothing_for_mujoco_warps_reset_data_to_change():
    game = WarpGame("quadrant", 4, seed=2, device="cpu")
    game.reset()
    rng = np.random.default_rng(0)
    for _ in range(3):  # moving, grabbing and locking: velocities, welds, warm start
        act = rng.integers(0, game.action_nvec, size=(4, game.n_agents, 5))
        act[..., 3:] = 1
        game.step(act)
    ww = game.worlds
    mask = torch.tensor([True, False, True, False])
    game._reset_where(mask, game.bank.draw())
    names = physics.RESET_ZERO + ("eq_active", "qpos")
    ours = {n: wp_view(ww, n).clone() for n in names}
    assert ours["qvel"][~mask].abs().sum() > 0  # the other worlds kept their motion
    reset_mask = ww.wp.array(mask.numpy(), dtype=bool, device=ww.device)
    ww.mjw.reset_data(ww.m, ww.d, reset=reset_mask)
    ww.qpos.copy_(ours["qpos"])  # reset_data writes qpos0; ours is the layout's
    for n in names:
        np.testing.assert_array_equal(wp_view(ww, n).numpy(), ours[n].numpy(), err_msg=n)
    game.close()


def wp_view(worlds, name):
    return worlds.wp.to_torch(getattr(worlds.d, name))


def test_staggered_worlds_start_at_different_steps_with_their_own_clock():
    cfg = make_config("quadrant")
    game = WarpGame(cfg, 8, seed=1, stagger=True)
    obs = game.reset()
    t = game.t.numpy()
    assert len(set(t.tolist())) > 4 and (t >= 0).all() and (t < cfg.horizon).all()
    prep = obs["observation_self"][..., -1].numpy()  # preparation clock, last column
    want = np.minimum(t / cfg.prep_steps, 1.0)[:, None]
    present = game.agent_present.numpy()
    np.testing.assert_allclose(prep[present], np.broadcast_to(want, prep.shape)[present])
    again = WarpGame(cfg, 8, seed=1, stagger=True)
    again.reset()
    np.testing.assert_array_equal(again.t.numpy(), t)  # seeded
    game.close(), again.close()


def test_bank_refreshes_are_seeded_and_written_round_robin():
    cfg = make_config("quadrant")
    bank_cfg = BankConfig(per_world=2, refresh_every=1, refresh_slots=3)
    games = [WarpGame(cfg, 4, seed=9, bank=bank_cfg) for _ in range(2)]
    for g in games:
        g.reset()
    bank = games[0].bank
    assert bank.size == 8
    first = {k: v.clone() for k, v in bank.entries.items()}
    act = np.broadcast_to([5, 5, 5, 0, 0], (4, cfg.max_agents, 5))
    for _ in range(2):
        for g in games:
            g.step(act)
    assert bank.refreshes == 2
    # the thread's generator: spawned from the game's root seed, as the bank docstring says
    bank_seed = np.random.SeedSequence(9).spawn(4 + 2)[4]  # after the 4 world seeds
    rng = np.random.default_rng(bank_seed.spawn(2)[0])
    drawn = [sample_layout(cfg, rng) for _ in range(6)]
    refreshed = list(range(6))  # slots 0-2, then 3-5
    for slot, layout in zip(refreshed, drawn, strict=True):
        np.testing.assert_array_equal(bank.layouts[slot].wall_pos, layout.wall_pos)
        np.testing.assert_array_equal(bank.layouts[slot].agent_xy, layout.agent_xy)
    want = layout_entries(cfg, games[0].worlds, drawn, ModelCache(cfg))
    for key, value in want.items():
        np.testing.assert_array_equal(bank.entries[key][:6].numpy(), value, err_msg=key)
        np.testing.assert_array_equal(bank.entries[key][6:].numpy(), first[key][6:].numpy())
    other = games[1].bank
    for key, value in bank.entries.items():
        np.testing.assert_array_equal(other.entries[key].numpy(), value.numpy(), err_msg=key)
    np.testing.assert_array_equal(games[1].slot.numpy(), games[0].slot.numpy())
    for g in games:
        g.close()


def test_a_fresh_process_prints_no_warp_module_lines(tmp_path):
    code = (
        "import numpy as np\n"
        "from hns_train.envs.warp.game import WarpGame\n"
        "g = WarpGame('chase', 2, seed=0, device='cpu')\n"
        "g.reset()\n"
        "g.step(np.zeros((2, g.n_agents, 5), dtype=int))\n"
        "print('stepped')\n"
    )
    env = dict(os.environ)
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=600
    )
    assert out.returncode == 0, out.stderr[-2000:]
    assert "stepped" in out.stdout
    lines = (out.stdout + out.stderr).splitlines()
    assert not [line for line in lines if "Module" in line], lines[:5]
