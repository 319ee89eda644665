"""The pod: its rollout has the chunk format's invariants, it takes the same PPO step as the
pipeline's trainer from the same samples, opponents play from fixed device slots, and an update
reads the device back once."""

import copy

import numpy as np
import pytest
import torch

from hns_train.agents import PPO, ActorCritic, Chunk, PPOConfig
from hns_train.agents.opponents import (
    LATEST,
    NOOP,
    RANDOM,
    act_by_controller,
    controller_groups,
    noop_action,
)
from hns_train.agents.pod import Pod
from hns_train.agents.pool import PolicyPool, PoolConfig
from hns_train.envs.contract import observation_shapes
from hns_train.envs.vector import VectorGame
from tests.host_syncs import HostSyncCounter
from tests.tolerances import FORWARD, UPDATE_STATS, assert_close, assert_same_update


def make_pod(preset="chase", worlds=4, rollout=20, pool=None, ppo_config=None, slots=2):
    torch.manual_seed(0)
    game = VectorGame(preset, worlds, seed=3)
    model = ActorCritic(observation_shapes(game.cfg), device="cpu")
    ppo = PPO(model, ppo_config or PPOConfig(epochs=2, minibatches=1))
    return Pod(game, ppo, rollout, pool=pool, opponent_slots=slots, seed=5)


def collect(pod):
    while not pod.step():
        pass
    return pod.rollout()


def as_chunk(buf, columns) -> Chunk:
    """The rollout's columns as the pipeline's chunk (host arrays, only those columns)."""

    def host(x):
        return x[:, columns].numpy().copy()

    return Chunk(
        obs={k: host(v) for k, v in buf.obs.items()},
        actions=host(buf.actions),
        logp=host(buf.logp),
        values=host(buf.values),
        rewards=host(buf.rewards),
        episode_start=host(buf.episode_start),
        truncated=host(buf.truncated),
        truncated_value=host(buf.truncated_value),
        bootstrap_value=buf.bootstrap_value[columns].numpy().copy(),
        lstm_state=host(buf.lstm_state),
        policy_version=np.zeros(len(columns), np.int64),
    ).validate()


def test_rollout_keeps_the_chunk_invariants_across_episode_ends():
    pod = make_pod(worlds=3, rollout=40)  # chase: horizon 40... the rollout spans episodes
    buf = collect(pod)
    assert torch.equal(buf.episode_start[1:], buf.truncated[:-1])
    ends = buf.truncated.any(dim=1).nonzero().flatten().tolist()
    assert ends, "no episode ended inside the rollout"
    assert buf.learn.all()  # self-play, everyone present: every row learns
    # V(final observation) is the value network's, continuing the finished episode's state
    assert torch.isfinite(buf.truncated_value[buf.truncated]).all()
    assert pod.take_counters()["episodes"] == 3


@pytest.mark.numerics
def test_the_pod_and_the_trainer_take_the_same_step_from_the_same_samples(tmp_path):
    # Hiders random (not trained on), seekers the learning policy: the pod trains its whole
    # buffer under a mask, the trainer only the seekers' columns, as actors ship them.
    pool = PolicyPool(tmp_path, PoolConfig(p_latest=0.0, p_random=1.0, p_noop=0.0,
                                           opponent_role="hider"))  # fmt: skip
    pod = make_pod(worlds=4, rollout=20, pool=pool)
    rollout = buf = collect(pod)
    seekers = np.flatnonzero(~np.tile(pod.game.is_hider, pod.game.n_worlds))
    assert torch.equal(buf.learn.any(dim=0).nonzero().flatten(), torch.as_tensor(seekers))

    trainer = copy.deepcopy(pod.ppo)
    chunk = as_chunk(buf, seekers)
    before = {k: v.clone() for k, v in pod.ppo.model.state_dict().items()}
    torch.manual_seed(1)
    pod_stats = pod.ppo.update(rollout)
    torch.manual_seed(1)
    trainer_stats = trainer.update(chunk)
    for key in ("loss", "policy_loss", "value_loss", "entropy", "approx_kl", "grad_norm"):
        assert_close(pod_stats[key], trainer_stats[key], UPDATE_STATS, key)
    model = pod.ppo.model
    parameters = {name for name, _ in model.named_parameters()}
    assert_same_update(model.state_dict(), trainer.model.state_dict(), before, parameters)


def test_opponents_play_from_fixed_slots_and_only_the_learner_learns(tmp_path):
    pool = PolicyPool(tmp_path, PoolConfig(p_latest=0.0, p_random=0.0, p_noop=0.0))
    model = ActorCritic(observation_shapes(VectorGame("chase", 1).cfg), device="cpu")
    for version in range(5):  # five snapshots, two slots
        pool.add_snapshot(version, {k: v + version for k, v in model.state_dict().items()})
    pod = make_pod(worlds=6, rollout=40, pool=pool, slots=2)
    slot_models = {id(m) for m in pod.slots.models}
    collect(pod)
    assert len(pod.slots.models) == 2 and {id(m) for m in pod.slots.models} == slot_models
    codes = pod.codes
    assert ((codes == LATEST).sum(axis=1) == 1).all()  # one team learns in every world
    learner_rows = np.where(pod.game.is_hider[None, :], codes[:, :1], codes[:, 1:]) == LATEST
    assert torch.equal(pod.learn_rows, torch.as_tensor(learner_rows.reshape(-1)))
    loaded = dict(pod.slots.versions)
    for version, slot in loaded.items():  # a slot holds exactly the snapshot it says
        expected = pool.load_snapshot(version)
        got = pod.slots.models[slot].state_dict()
        assert all(torch.equal(got[k], expected[k]) for k in expected)
    # 6 worlds, each with a snapshot opponent, play from 2 slots: some had to share one
    assert (codes >= 0).sum() == 6 and set(codes[codes >= 0]) <= {0, 1}


def test_random_opponents_act_on_the_device_without_a_model(tmp_path):
    pool = PolicyPool(tmp_path, PoolConfig(p_latest=0.0, p_random=1.0, p_noop=0.0,
                                           opponent_role="hider"))  # fmt: skip
    pod = make_pod(worlds=2, rollout=20, pool=pool)
    assert (pod.codes[:, 0] == RANDOM).all() and not pod.slots.models
    buf = collect(pod)
    hider_rows = torch.as_tensor(np.tile(pod.game.is_hider, 2))
    assert not buf.learn[:, hider_rows].any() and buf.learn[:, ~hider_rows].all()
    nvec = torch.as_tensor(pod.game.game.action_nvec)
    assert ((buf.actions >= 0) & (buf.actions < nvec)).all()


def test_an_update_reads_the_device_back_once():
    pod = make_pod(worlds=2, rollout=20, ppo_config=PPOConfig(epochs=2, minibatches=2))
    while not pod.step():
        pass
    with HostSyncCounter() as syncs:
        stats = pod.learn()
    assert syncs.total == 0, syncs.calls
    with HostSyncCounter() as syncs:
        values = torch.stack(list(stats.values())).tolist()
    assert syncs.total == 1 and all(np.isfinite(values))


class RecordingHook:
    """A worker's part of an iteration, recorded."""

    def __init__(self) -> None:
        self.updates = []

    def __call__(self, learn, agent_steps):
        self.updates.append(agent_steps)
        return learn()


def test_an_iteration_collects_a_rollout_then_learns_through_the_hook():
    pod = make_pod(worlds=2, rollout=20)
    hook = RecordingHook()
    steps = pod.iteration(hook)
    for t in range(20):  # the caller's turn after every env step, before any update
        next(steps)
        assert pod.t == t + 1 and hook.updates == [] and pod.ppo.version == 0
    with pytest.raises(StopIteration) as done:
        next(steps)
    stats = done.value.value
    assert hook.updates == [20 * pod.game.rows] and pod.ppo.version == 1
    assert float(stats["learned_steps"]) == 20 * pod.game.rows
    assert pod.take_counters()["frames"] == 20 * 2

    # An iteration left after 7 steps (the run stops) is not learned on; the next starts afresh.
    left = pod.iteration(RecordingHook())
    for _ in range(7):
        next(left)
    again = RecordingHook()
    for _ in pod.iteration(again):  # to its update
        pass
    assert pod.ppo.version == 2
    assert again.updates == [20 * pod.game.rows]  # a whole rollout, from slot 0


@pytest.mark.numerics
def test_the_dispatcher_acts_each_controllers_rows_with_its_model():
    """`act_by_controller` (the policy worker's and the pod's): a network's rows get exactly
    what that network gives for them alone, the learning policy's with its values; another
    network's rows (learned by nobody) skip the value network: value 0, its state kept. Fixed
    opponents' rows keep their state, with log-prob and value 0."""
    torch.manual_seed(0)
    shapes = observation_shapes(VectorGame("chase", 1).cfg)
    nets = {LATEST: ActorCritic(shapes, device="cpu"), 0: ActorCritic(shapes, device="cpu")}
    codes = np.array([LATEST, 0, RANDOM, LATEST, NOOP, 0])
    rows = len(codes)
    obs = {k: torch.rand(rows, *s) for k, s in shapes.items()}
    state = torch.rand(rows, 4, nets[LATEST].config.lstm_dim)
    starts = torch.zeros(rows, dtype=torch.bool)
    noop = torch.as_tensor(noop_action())

    def fixed(code, n):
        return torch.ones(n, 5, dtype=torch.int64) if code == RANDOM else noop.expand(n, -1)

    out = act_by_controller(
        controller_groups(codes, "cpu"), nets.__getitem__, fixed, obs, state, starts
    )
    for code in (LATEST, 0):
        index = torch.as_tensor(np.flatnonzero(codes == code))
        sub = {k: v[index] for k, v in obs.items()}
        alone = nets[code].act_tensors(sub, state[index], starts[index])  # (values and states
        policy_state = out.state[index, :2]  # (do not depend on sampling)
        assert_close(policy_state, alone.state[:, :2], FORWARD, "policy state")
        if code == LATEST:
            assert_close(out.values[index], alone.values, FORWARD, "values")
            assert_close(out.state[index, 2:], alone.state[:, 2:], FORWARD, "value state")
        else:
            assert torch.all(alone.values != 0)
            assert torch.equal(out.values[index], torch.zeros(len(index)))
            assert torch.equal(out.state[index, 2:], state[index, 2:])
    for code, actions in ((RANDOM, torch.ones(5, dtype=torch.int64)), (NOOP, noop)):
        (row,) = np.flatnonzero(codes == code)
        assert torch.equal(out.actions[row], actions) and torch.equal(out.state[row], state[row])
        assert out.logp[row] == 0 and out.values[row] == 0
