"""The PettingZoo interfaces: PettingZoo's own test suites, determinism, episode end, bad input."""

import re

import mujoco
import numpy as np
import pytest
from pettingzoo.test import api_test, parallel_api_test, parallel_seed_test

import hns_train.envs as E
from hns_train.envs.stats import STAT_KEYS
from hns_train.envs.tasks import stat_keys
from tests.envs import hns_scene as S

PRESETS = ["quadrant", "randomwalls"]
# Dict observations and MultiDiscrete actions are the spec's choice; PettingZoo hints otherwise.
pytestmark = [
    pytest.mark.filterwarnings("ignore:.*probably should be gymnasium.spaces"),
    pytest.mark.filterwarnings("ignore:Observation is not a NumPy array"),
]


@pytest.mark.parametrize("preset", PRESETS)
def test_pettingzoo_parallel_api(preset):
    parallel_api_test(E.parallel_env(preset, seed=1), num_cycles=1000)


@pytest.mark.parametrize("preset", PRESETS)
def test_pettingzoo_parallel_seed(preset):
    parallel_seed_test(lambda: E.parallel_env(preset))


@pytest.mark.parametrize("preset", PRESETS)
def test_pettingzoo_aec_api(preset):
    api_test(E.env(preset, seed=2), num_cycles=300)


# the transfer tasks' presets and the horizon each plays here (object counting's is its scene's)
TASK_HORIZONS = {"lock_and_return": 30, "sequential_lock": 30, "blueprint": 30, "shelter": 30}
TASK_HORIZONS |= {"object_counting": 40, "count_based": 30}


@pytest.mark.parametrize("preset", TASK_HORIZONS)
def test_task_presets_pass_pettingzoo_tests_replay_their_seeds_and_refuse_bad_actions(preset):
    """Each transfer task through PettingZoo: its API and seed tests, the same episode from the
    same seed, every statistic the task reports in the last infos, a bad action refused naming
    its agent."""
    horizon = TASK_HORIZONS[preset]
    parallel_api_test(E.parallel_env(preset, seed=1, horizon=horizon), num_cycles=100)
    api_test(E.env(preset, seed=2, horizon=horizon), num_cycles=60)
    parallel_seed_test(lambda: E.parallel_env(preset, horizon=horizon))
    first = S.seeded_episode(preset, 9, horizon=horizon)
    assert S.same(first, S.seeded_episode(preset, 9, horizon=horizon))
    assert not S.same(first, S.seeded_episode(preset, 10, horizon=horizon))
    keys = stat_keys(E.make_config(preset))
    assert "task_score" in keys and all(set(keys) <= set(i) for i in first[-1][4].values())
    env = E.parallel_env(preset, seed=0)
    env.reset(seed=0)
    actions = {a: np.array([5, 5, 5, 0, 0]) for a in env.agents}
    actions[env.agents[-1]] = np.array([5, 5, 5, 2, 0])
    with pytest.raises(ValueError, match=r"dimension 3 = 2 is outside \[0, 1\]") as err:
        env.step(actions)
    assert env.agents[-1] in str(err.value)


# absent agents never enter an episode, so they are never truncated either
@pytest.mark.filterwarnings("ignore:No agents present but not all possible_agents")
def test_pettingzoo_api_with_team_size_ranges():
    env = E.parallel_env("randomwalls", n_hiders=(1, 3), n_seekers=(1, 3), horizon=20)
    assert env.possible_agents == [f"hider_{k}" for k in range(3)] + [
        f"seeker_{k}" for k in range(3)
    ]
    parallel_api_test(env, num_cycles=100)
    sizes = set()
    for seed in range(12):
        env.reset(seed=seed)
        assert set(env.agents) <= set(env.possible_agents)
        hiders = sum(a.startswith("hider") for a in env.agents)
        assert 1 <= hiders <= 3 and 1 <= len(env.agents) - hiders <= 3
        sizes.add(len(env.agents))
    assert len(sizes) > 1


@pytest.mark.parametrize("preset", PRESETS)
def test_same_seed_same_episode(preset):
    first = S.seeded_episode(preset, seed=7, action_seed=3)
    assert len(first) == E.make_config(preset).horizon + 1
    assert S.same(first, S.seeded_episode(preset, seed=7, action_seed=3))
    other, _ = E.parallel_env(preset).reset(seed=8)
    assert not S.same(first[0], other)


def test_horizon_truncates_and_reports_statistics():
    env = E.parallel_env("quadrant", seed=0)
    env.reset()
    hider_return = 0.0
    for t in range(80):
        assert env.agents == ["hider_0", "hider_1", "seeker_0", "seeker_1"]
        actions = {a: env.action_space(a).sample() for a in env.agents}
        obs, rew, term, trunc, infos = env.step(actions)
        hider_return += rew["hider_0"]
        assert set(obs) == set(rew) == set(term) == set(trunc) == set(infos) == set(actions)
        assert not any(term.values())
        assert all(trunc.values()) == (t == 79) and any(trunc.values()) == (t == 79)
        if t < 79:
            assert infos["hider_0"] == {}
    assert env.agents == []
    for agent in ("hider_0", "seeker_1"):
        assert set(STAT_KEYS) <= set(infos[agent])
    assert all(isinstance(r, float) for r in rew.values())
    assert -800 <= hider_return <= 48  # 48 play steps of at most +1, penalties at most -10
    with pytest.raises(RuntimeError, match="reset"):
        env.step({})


def test_statistics_returns_match_summed_rewards():
    env = E.parallel_env("quadrant", seed=4)
    env.reset()
    rng = np.random.default_rng(0)
    totals = dict.fromkeys(env.agents, 0.0)
    while env.agents:
        actions = {a: rng.integers(0, env.action_space(a).nvec) for a in env.agents}
        _, rew, _, _, infos = env.step(actions)
        for a, r in rew.items():
            totals[a] += r
    hiders = np.mean([totals["hider_0"], totals["hider_1"]])
    seekers = np.mean([totals["seeker_0"], totals["seeker_1"]])
    assert infos["hider_0"]["hider_return"] == pytest.approx(hiders)
    assert infos["seeker_0"]["seeker_return"] == pytest.approx(seekers)


def test_spaces_and_mujoco_handles():
    env = E.parallel_env("quadrant")
    obs, infos = env.reset(seed=0)
    space = env.action_space("hider_0")
    assert space.nvec.tolist() == [11, 11, 11, 2, 2]
    assert env.action_space("hider_0") is not env.action_space("hider_1")
    for agent, o in obs.items():
        assert env.observation_space(agent).contains(o)
    assert isinstance(env.model, mujoco.MjModel) and isinstance(env.data, mujoco.MjData)
    aec = E.env("quadrant")
    aec.reset(seed=0)
    assert isinstance(aec.unwrapped.model, mujoco.MjModel)
    assert env.metadata["render_fps"] == pytest.approx(1 / 0.075)


# ---------------------------------------------------------------- bad input


@pytest.fixture
def live_env():
    env = E.parallel_env("quadrant", seed=0)
    env.reset()
    return env


def _noop_actions(env):
    return {a: np.array([5, 5, 5, 0, 0]) for a in env.agents}


@pytest.mark.parametrize(
    "action, message",
    [
        ([11, 5, 5, 0, 0], r"dimension 0 = 11 is outside \[0, 10\]"),
        ([5, 5, 5, 2, 0], r"dimension 3 = 2 is outside \[0, 1\]"),
        ([5, 5, 5, 0, -1], r"dimension 4 = -1 is outside \[0, 1\]"),
        ([5, 5, 5, 0], r"has shape \(4,\)"),
        ([[5, 5, 5, 0, 0]], r"has shape \(1, 5\)"),
        ([5.5, 5, 5, 0, 0], "not integers"),
        (3, r"has shape \(\)"),
    ],
)
def test_bad_action_raises_naming_agent_and_allowed_values(live_env, action, message):
    actions = _noop_actions(live_env)
    actions["seeker_1"] = action
    with pytest.raises(ValueError, match=message) as err:
        live_env.step(actions)
    assert "seeker_1" in str(err.value) and "MultiDiscrete([11, 11, 11, 2, 2])" in str(err.value)
    assert live_env.game.t[0] == 0  # nothing was stepped


def test_missing_action_raises(live_env):
    actions = _noop_actions(live_env)
    del actions["hider_1"]
    with pytest.raises(ValueError, match=r"no action for live agents \['hider_1'\]"):
        live_env.step(actions)


@pytest.mark.parametrize("agent", ["seeker_2", "dog", 0])
def test_action_for_an_agent_that_is_not_live_raises(live_env, agent):
    actions = _noop_actions(live_env)
    actions[agent] = np.array([5, 5, 5, 0, 0])
    with pytest.raises(ValueError, match="not live") as err:
        live_env.step(actions)
    assert "hider_0" in str(err.value)  # lists the live agents


@pytest.mark.parametrize("flatten", [False, True])
def test_pad_absent_gives_absent_agents_zero_observations_in_their_spaces(flatten):
    env = E.parallel_env(
        "quadrant", n_hiders=(1, 2), n_seekers=(1, 2), pad_absent=True, flatten=flatten
    )
    absent_seen = 0
    for seed in range(6):
        obs, infos = env.reset(seed=seed)
        assert set(obs) == set(infos) == set(env.possible_agents)
        for agent in set(env.possible_agents) - set(env.agents):
            absent_seen += 1
            assert env.observation_space(agent).contains(obs[agent])
            values = [obs[agent]] if flatten else list(obs[agent].values())
            assert not any(v.any() for v in values)
    assert absent_seen


def test_integral_float_actions_are_accepted(live_env):
    actions = {a: np.array([5.0, 5.0, 5.0, 0.0, 0.0]) for a in live_env.agents}
    live_env.step(actions)
    assert live_env.game.t[0] == 1


def test_bad_construction_raises():
    with pytest.raises(ValueError, match="unknown preset"):
        E.parallel_env("bogus")
    with pytest.raises(ValueError, match="unknown game parameter"):
        E.parallel_env("quadrant", horizn=10)
    with pytest.raises(ValueError, match="render_mode"):
        E.parallel_env("quadrant", render_mode="ansi")
    with pytest.raises(ValueError, match="unknown agent"):
        E.parallel_env("quadrant").observation_space("seeker_9")


@pytest.mark.parametrize(
    "keyword, message",
    [
        ({"flatten": "no"}, "flatten='no' has type str; expected bool"),
        ({"pad_absent": 1}, "pad_absent=1 has type int; expected bool"),
        ({"seed": "x"}, "seed='x' has type str; expected int | None"),
        ({"seed": -1}, "seed=-1 is not allowed; it must be >= 0"),
        ({"max_cycles": "80"}, "max_cycles='80' has type str; expected int | None"),
    ],
)
def test_ill_typed_env_keywords_are_refused_by_name(keyword, message):
    # flatten="no" used to flatten (any truthy value did); a bad seed failed in numpy unnamed
    with pytest.raises(ValueError, match=re.escape(message)):
        E.parallel_env("quadrant", **keyword)


def test_a_negative_reset_seed_is_refused_naming_seeds(live_env):
    # numpy refused it unnamed: "expected non-negative integer"
    allowed = "is not allowed; it must be >= 0"
    with pytest.raises(ValueError, match=re.escape(f"reset: seeds[0]=-1 {allowed}")):
        live_env.reset(seed=-1)
    with pytest.raises(ValueError, match=re.escape(f"reset: seeds[0]=-2 {allowed}")):
        live_env.game.reset(seeds=[np.int64(-2)])


def test_out_of_range_int64_action_raises_naming_agent(live_env):
    actions = _noop_actions(live_env)  # int64 arrays: checked together, then named one by one
    actions["seeker_1"] = np.array([5, 11, 5, 0, 0], dtype=np.int64)
    with pytest.raises(ValueError, match=r"dimension 1 = 11 is outside \[0, 10\]") as err:
        live_env.step(actions)
    assert "seeker_1" in str(err.value)
    assert live_env.game.t[0] == 0


def test_returned_observations_are_not_overwritten_by_later_steps(live_env):
    obs, *_ = live_env.step(_noop_actions(live_env))
    kept = {a: {k: v.copy() for k, v in o.items()} for a, o in obs.items()}
    live_env.step(_noop_actions(live_env))
    for a, o in obs.items():
        for k, v in o.items():
            assert not np.shares_memory(v, live_env.game.obs[k])
            np.testing.assert_array_equal(v, kept[a][k])
    assert (
        live_env.game.obs["observation_self"][0, :, 9] != kept["hider_0"]["observation_self"][9]
    ).all()


def test_flat_steps_are_the_dict_flattened_across_episodes_and_team_sizes():
    """flatten=True builds every agent's vector in one concatenation: the same numbers, in the
    Dict space's order, as gymnasium's flatten of the dict observation, at every step, and
    kept unchanged by later steps."""
    from gymnasium import spaces

    kw = dict(n_hiders=(1, 3), n_seekers=(1, 2), horizon=4)
    flat = E.parallel_env("randomwalls", seed=5, flatten=True, **kw)
    nested = E.parallel_env("randomwalls", seed=5, **kw)
    flat.reset(seed=5)
    nested.reset(seed=5)
    rng = np.random.default_rng(0)
    kept, sizes = [], set()
    for _ in range(12):  # three episodes
        if not flat.agents:
            flat.reset()
            nested.reset()
        sizes.add(len(flat.agents))
        nvec = flat.game.action_nvec
        actions = {a: rng.integers(0, nvec) for a in flat.agents}
        obs_f, rew_f, _, trunc_f, _ = flat.step(actions)
        obs_d, rew_d, _, trunc_d, _ = nested.step(actions)
        assert rew_f == rew_d and trunc_f == trunc_d
        assert all(type(r) is float for r in rew_f.values())
        for agent, vector in obs_f.items():
            want = spaces.flatten(flat.dict_observation_space(agent), obs_d[agent])
            assert vector.dtype == np.float32 and vector.shape == want.shape
            np.testing.assert_array_equal(vector, want)
            kept.append((vector, vector.copy()))
    assert len(sizes) > 1  # team sizes changed between episodes
    for vector, copy in kept:
        np.testing.assert_array_equal(vector, copy)


def test_absent_agents_send_the_no_op():
    env = E.parallel_env("randomwalls", seed=1, n_hiders=(1, 3), horizon=50)
    for seed in range(10):
        env.reset(seed=seed)
        if len(env.agents) < len(env.possible_agents):
            break
    absent = [env._slot[a] for a in env.possible_agents if a not in env.agents]
    assert absent, "no episode with an absent agent"
    sent = []
    step = env.game.step
    env.game.step = lambda batch: sent.append(batch.copy()) or step(batch)
    env.step({a: np.array([0, 10, 0, 1, 1]) for a in env.agents})
    assert (sent[0][0, absent] == env.game.noop).all()
    live = [env._slot[a] for a in env.agents]
    assert (sent[0][0, live] == [0, 10, 0, 1, 1]).all()
