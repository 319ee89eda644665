"""Third-party trainers take the env as it is: PettingZoo's max_cycles test, SuperSuit's
wrappers and vectorisers on `flatten=True`, TorchRL's PettingZooWrapper (fixed and variable team
sizes); and the keyword documentation that help() shows."""

from __future__ import annotations

import pydoc
import re
from dataclasses import fields, is_dataclass

import numpy as np
import pytest
from gymnasium import spaces
from pettingzoo.test import max_cycles_test, parallel_api_test

import hns_train.envs as E
from hns_train.envs.config import GameConfig

pytestmark = [
    pytest.mark.filterwarnings("ignore:.*probably should be gymnasium.spaces"),
    pytest.mark.filterwarnings("ignore:Observation is not a NumPy array"),
    pytest.mark.filterwarnings("ignore::UserWarning"),
    pytest.mark.filterwarnings("ignore::DeprecationWarning"),
]


def test_max_cycles_is_pettingzoos_name_of_the_horizon():
    max_cycles_test(E)  # the module: parallel_env(max_cycles=4) and env(max_cycles=4)
    assert E.parallel_env(max_cycles=7).cfg.horizon == 7
    assert E.parallel_env(max_cycles=7, horizon=7).cfg.horizon == 7
    with pytest.raises(ValueError, match="max_cycles=7 and horizon=9 disagree"):
        E.parallel_env(max_cycles=7, horizon=9)


def test_flat_observations_are_the_dict_flattened():
    flat = E.parallel_env("randomwalls", seed=3, flatten=True, horizon=5)
    nested = E.parallel_env("randomwalls", seed=3, horizon=5)
    parallel_api_test(flat, num_cycles=20)
    obs_f, _ = flat.reset(seed=4)
    obs_d, _ = nested.reset(seed=4)
    for agent in flat.agents:
        space = flat.observation_space(agent)
        assert isinstance(space, spaces.Box) and space.dtype == np.float32
        assert obs_f[agent].shape == space.shape and space.contains(obs_f[agent])
        back = spaces.unflatten(flat.dict_observation_space(agent), obs_f[agent])
        for key, value in obs_d[agent].items():
            np.testing.assert_array_equal(back[key], value)


@pytest.mark.parametrize("black_death", [False, True])
def test_supersuit_wrappers_and_vectorisers_take_the_flat_env(black_death):
    import supersuit as ss

    env = E.parallel_env("quadrant", seed=0, flatten=True, horizon=6)
    env = ss.pad_observations_v0(ss.flatten_v0(ss.dtype_v0(env, np.float32)))
    if black_death:  # SuperSuit adds one all-dead step with zero observations, then ends
        env = ss.black_death_v3(env)
    vec = ss.concat_vec_envs_v1(
        ss.pettingzoo_env_to_vec_env_v1(env), 2, num_cpus=0, base_class="gymnasium"
    )
    obs, _ = vec.reset(seed=0)
    n, size = vec.num_envs, E.parallel_env(flatten=True).observation_space("hider_0").shape[0]
    assert n == 2 * 4 and obs.shape == (n, size)
    ends = []
    for t in range(14):
        actions = np.stack([vec.action_space.sample() for _ in range(n)])
        obs, rewards, terms, truncs, _ = vec.step(actions)
        assert obs.shape == (n, size) and np.isfinite(obs).all()
        if truncs.all():
            ends.append(t)
        else:
            assert not truncs.any() and not terms.any()
    # every world ends at the horizon (one step later with black death), then is reset
    assert ends == ([6, 13] if black_death else [5, 11])
    vec.close()


def torchrl_rollout(env, steps: int, **kwargs):
    from torchrl.envs.libs.pettingzoo import PettingZooWrapper

    wrapped = PettingZooWrapper(env, **kwargs)
    return wrapped, wrapped.rollout(steps, break_when_any_done=False)


def test_torchrl_wraps_the_dict_env():
    wrapped, td = torchrl_rollout(E.parallel_env("quadrant", seed=0, horizon=5), 10)
    assert wrapped.group_map == {
        "hider": ["hider_0", "hider_1"],
        "seeker": ["seeker_0", "seeker_1"],
    }
    assert td["hider", "observation", "box_obs"].shape == (10, 2, 2, 12)
    assert td["next", "done"].squeeze(-1).nonzero().flatten().tolist() == [4, 9]
    rewards = td["next", "hider", "reward"].squeeze(-1)
    assert (rewards[:2] == 0).all() and set(rewards[2:5].flatten().tolist()) <= {-1.0, 1.0}


@pytest.mark.parametrize("seed", [0, 2])  # a first episode with all agents / with some absent
def test_torchrl_with_variable_team_sizes_masks_absent_agents(seed):
    env = E.parallel_env(
        "randomwalls", seed=seed, n_hiders=(1, 3), n_seekers=(1, 3), horizon=4, pad_absent=True
    )
    _, td = torchrl_rollout(env, 24, use_mask=True, done_on_any=False)
    done = td["next", "done"].squeeze(-1)
    assert done.nonzero().flatten().tolist() == [3, 7, 11, 15, 19, 23]  # whole episodes
    seekers = td["seeker", "mask"].sum(-1)
    assert len(set(seekers.tolist())) > 1  # team sizes vary between episodes
    for ep in range(6):  # an episode keeps its agents
        assert len(set(seekers[4 * ep : 4 * ep + 4].tolist())) == 1
    absent = ~td["seeker", "mask"]
    assert (td["seeker", "observation", "observation_self"][absent] == 0).all()
    assert (td["next", "seeker", "reward"].squeeze(-1)[absent] == 0).all()


def test_absent_agents_are_still_errors_by_default():
    env = E.parallel_env("randomwalls", seed=0, n_hiders=(1, 3), n_seekers=(1, 3))
    for seed in range(20):
        obs, _ = env.reset(seed=seed)
        if len(env.agents) < len(env.possible_agents):
            break
    absent = next(a for a in env.possible_agents if a not in env.agents)
    assert absent not in obs
    actions = {a: env.action_space(a).sample() for a in env.possible_agents}
    with pytest.raises(ValueError, match="not live"):
        env.step(actions)


def test_help_shows_every_keyword():
    text = pydoc.render_doc(E.parallel_env, renderer=pydoc.plaintext)
    for f in fields(GameConfig):
        if is_dataclass(f.default_factory):  # a task's section: each of its fields
            for sub in fields(f.default_factory):
                line = f"    {f.name}.{sub.name} = {sub.default!r}: "
                assert re.search(re.escape(line) + r"\S", text), f"{f.name}.{sub.name}"
        elif f.name != "preset":  # each with its meaning, read from its #: comment
            assert re.search(re.escape(f"    {f.name} = {f.default!r}: ") + r"\S", text), f.name
    for keyword in ("preset", "seed", "render_mode", "flatten", "max_cycles", "pad_absent"):
        assert f"    {keyword}: " in text, keyword
    presets = text.split("    preset: ")[1].split("\n")[0]
    assert presets.split(" | ") == [repr(p) for p in E.PRESETS]
    assert "pad_absent" in pydoc.render_doc(E.env, renderer=pydoc.plaintext)
    for method in (
        E.HideAndSeekParallelEnv,
        E.HideAndSeekParallelEnv.reset,
        E.HideAndSeekParallelEnv.step,
    ):
        assert method.__doc__ and len(method.__doc__) > 80
