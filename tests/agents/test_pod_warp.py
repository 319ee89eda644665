"""The pod on the MuJoCo Warp game (Warp's CPU device here; the same code runs on CUDA): a step
reads nothing back to the host, episode ends included, and its rollout keeps the chunk
invariants."""

import pytest
import torch

from hns_train.agents import PPO, ActorCritic, PPOConfig
from hns_train.agents.pod import Pod
from hns_train.envs.contract import observation_shapes
from tests.host_syncs import HostSyncCounter

pytest.importorskip("mujoco_warp")


@pytest.fixture(scope="module")
def pod():
    from hns_train.envs.warp.game import WarpGame

    torch.manual_seed(0)
    game = WarpGame("chase", 3, seed=2, device="cpu", stagger=True)
    model = ActorCritic(observation_shapes(game.cfg), device="cpu")
    return Pod(game, PPO(model, PPOConfig(epochs=1, minibatches=1)), rollout_len=40)


def test_a_warp_pod_step_never_waits_for_the_device(pod):
    pod.step()  # first use: kernels load
    with HostSyncCounter() as syncs:
        while not pod.step():  # chase: horizon 40, staggered: worlds end on different steps
            pass
    assert syncs.total == 0, syncs.calls
    with HostSyncCounter() as syncs:
        rollout = pod.rollout()
        stats = pod.ppo.update_async(rollout)
    assert syncs.total == 0, syncs.calls
    assert torch.equal(rollout.episode_start[1:], rollout.truncated[:-1])
    ends = rollout.truncated.any(dim=1).nonzero().flatten()
    assert len(ends) >= 2  # the worlds' episodes ended on different steps
    assert float(stats["finite"]) == 1.0
