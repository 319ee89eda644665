"""PettingZoo interfaces over one hide-and-seek world.

`parallel_env(preset="quadrant", seed=None, render_mode=None, **game_params)` returns a
`ParallelEnv`; `env(...)` the same game as an AEC env through PettingZoo's own
`parallel_to_aec` (which adds the order-enforcing wrapper). Game parameters go to `make_config`,
which rejects unknown presets and parameters with `ValueError`.

Agents are `hider_0..`, then `seeker_0..`. `possible_agents` holds the largest team sizes;
`agents` holds the agents present this episode (team sizes may be ranges, e.g.
`n_hiders=(1, 3)`), in slot order. Spaces (spec §3, §5): a gymnasium `Dict` of float32 arrays
per agent and `MultiDiscrete([11, 11, 11, 2, 2])` actions; each agent has its own space objects
so that seeding one does not seed another.

The horizon ends an episode by truncation (`truncations` all True on the last step,
`terminations` always False: learners must bootstrap). After that step `agents` is empty and the
episode statistics (stats.py) are in every agent's `infos` entry of that step.

Bad input never gets clipped: an action outside the space, of the wrong shape or not integral,
a missing action for a live agent, or an action for an agent that is not live raises
`ValueError` naming the agent, what was wrong and what is allowed.

Seeding: `seed` seeds the world generator once; `reset(seed=s)` reseeds it, so equal seeds give
equal episodes (physics is deterministic).
"""

from __future__ import annotations

import numpy as np
from gymnasium import spaces
from pettingzoo import ParallelEnv
from pettingzoo.utils.conversions import parallel_to_aec

from hns_train.envs.config import make_config
from hns_train.envs.game import HideAndSeekGame
from hns_train.envs.observations import observation_space

RENDER_MODES = ("rgb_array", "human")


class HideAndSeekParallelEnv(ParallelEnv):
    metadata = {
        "name": "hide_and_seek_v0",
        "render_modes": list(RENDER_MODES),
        "is_parallelizable": True,
    }

    def __init__(
        self,
        preset: str = "quadrant",
        seed: int | None = None,
        render_mode: str | None = None,
        **game_params,
    ):
        if render_mode is not None and render_mode not in RENDER_MODES:
            raise ValueError(
                f"unknown render_mode {render_mode!r}; allowed: None, {', '.join(RENDER_MODES)}"
            )
        self.cfg = make_config(preset, **game_params)
        self.game = HideAndSeekGame(self.cfg, n_worlds=1, seed=seed)
        self.render_mode = render_mode
        cfg = self.cfg
        # "human" only where a window can open, so that render checks pass on headless machines.
        # render.py is imported here, not at package import, so `python -m ...render` runs clean.
        from hns_train.envs.render import display_available

        modes = [m for m in RENDER_MODES if m != "human" or display_available()]
        self.metadata = {
            **type(self).metadata,
            "render_modes": modes,
            "render_fps": 1.0 / (cfg.timestep * cfg.substeps),
        }
        self.possible_agents = [f"hider_{k}" for k in range(cfg.max_hiders)] + [
            f"seeker_{k}" for k in range(cfg.max_seekers)
        ]
        self.agents: list[str] = []
        self._slot = {name: k for k, name in enumerate(self.possible_agents)}
        self._obs_spaces = {a: observation_space(cfg) for a in self.possible_agents}
        self._act_spaces = {
            a: spaces.MultiDiscrete(self.game.action_nvec.copy(), dtype=np.int64)
            for a in self.possible_agents
        }
        self._renderer = None  # render.TopViewRenderer, made on the first rgb_array frame
        self._viewer = None  # render.HumanViewer
        self._obs: dict[str, np.ndarray] | None = None

    # ------------------------------------------------------------------ spaces and MuJoCo
    def observation_space(self, agent: str) -> spaces.Dict:
        return self._obs_spaces[self._check_agent(agent)]

    def action_space(self, agent: str) -> spaces.MultiDiscrete:
        return self._act_spaces[self._check_agent(agent)]

    @property
    def model(self):
        """The current episode's MjModel (None before the first reset)."""
        return self.game.model

    @property
    def data(self):
        return self.game.data

    def _check_agent(self, agent) -> str:
        if agent not in self._slot:
            raise ValueError(f"unknown agent {agent!r}; agents of this env: {self.possible_agents}")
        return agent

    # ------------------------------------------------------------------ episode
    def reset(self, seed: int | None = None, options: dict | None = None):
        obs = self.game.reset(seeds=None if seed is None else [seed])
        present = self.game.agent_present[0]
        self.agents = [a for a in self.possible_agents if present[self._slot[a]]]
        self._obs = obs
        if self.render_mode == "human":
            self.render()
        return self._agent_obs(obs), {a: {} for a in self.agents}

    def step(self, actions: dict):
        if not self.agents:
            raise RuntimeError(
                "step() called with no live agents: the episode has ended (or reset() was "
                "never called); call reset()"
            )
        if not isinstance(actions, dict):
            raise ValueError(
                f"actions must be a dict from agent name to action, got {type(actions).__name__}"
            )
        not_live = sorted(set(actions) - set(self.agents), key=str)
        if not_live:
            raise ValueError(
                f"actions given for agents that are not live: {not_live}; "
                f"live agents: {self.agents}"
            )
        missing = [a for a in self.agents if a not in actions]
        if missing:
            raise ValueError(
                f"no action for live agents {missing}; every live agent in "
                f"{self.agents} needs an action"
            )
        batch = np.broadcast_to(self.game.noop, (1, self.game.n_agents, 5)).copy()
        nvec = self.game.action_nvec
        for agent, action in actions.items():
            # int64 arrays of the right shape (what action_space.sample() gives) go in as they
            # are and are range-checked together below; anything else is checked one by one
            if not (
                type(action) is np.ndarray and action.dtype == np.int64 and action.shape == (5,)
            ):
                action = self._check_action(agent, action)
            batch[0, self._slot[agent]] = action
        if ((batch < 0) | (batch >= nvec)).any():
            for agent, action in actions.items():
                self._check_action(agent, action)  # raises, naming the agent

        live = self.agents
        obs, reward, truncated, infos = self.game.step(batch)
        self._obs = obs
        ended = bool(truncated[0])
        observations = self._agent_obs(obs, live)
        rewards = {a: float(reward[0, self._slot[a]]) for a in live}
        terminations = dict.fromkeys(live, False)
        truncations = dict.fromkeys(live, ended)
        stats = infos[0]
        out_infos = {a: dict(stats) for a in live}
        if ended:
            self.agents = []
        if self.render_mode == "human":
            self.render()
        return observations, rewards, terminations, truncations, out_infos

    def _check_action(self, agent: str, action) -> np.ndarray:
        nvec = self.game.action_nvec
        allowed = f"MultiDiscrete({nvec.tolist()}): 5 integers, dimension k in [0, nvec[k] - 1]"
        try:
            a = np.asarray(action)
        except Exception as exc:  # ragged lists and the like
            raise ValueError(
                f"action for {agent} is not an array ({exc}); allowed: {allowed}"
            ) from None
        if a.shape != nvec.shape:
            raise ValueError(f"action for {agent} has shape {a.shape}; allowed: {allowed}")
        integral = np.issubdtype(a.dtype, np.integer) or (
            np.issubdtype(a.dtype, np.floating)
            and np.all(np.isfinite(a))
            and np.all(a == np.round(a))
        )
        if not integral:
            raise ValueError(
                f"action for {agent} is {a.tolist()} (dtype {a.dtype}), not integers; "
                f"allowed: {allowed}"
            )
        bad = np.flatnonzero((a < 0) | (a >= nvec))
        if bad.size:
            k = int(bad[0])
            raise ValueError(
                f"action for {agent} is {a.tolist()}: dimension {k} = {a[k]} is outside "
                f"[0, {nvec[k] - 1}]; allowed: {allowed}"
            )
        return a.astype(np.int64)

    def _agent_obs(self, obs, agents=None) -> dict[str, dict[str, np.ndarray]]:
        agents = self.agents if agents is None else agents
        # one copy per key (the game reuses its buffers); each agent gets its rows of it
        own = {k: v[0].copy() for k, v in obs.items()}
        return {a: {k: v[self._slot[a]] for k, v in own.items()} for a in agents}

    # ------------------------------------------------------------------ rendering
    def render(self):
        if self.render_mode is None:
            raise ValueError(
                "render() needs a render_mode; create the env with render_mode='rgb_array' "
                "(or 'human' where a display exists)"
            )
        if self.game.model is None:
            raise RuntimeError("call reset() before render()")
        from hns_train.envs.render import HumanViewer, TopViewRenderer

        if self.render_mode == "rgb_array":
            if self._renderer is None:
                self._renderer = TopViewRenderer(self.cfg.render_width, self.cfg.render_height)
            return self._renderer.render(self.game.model, self.game.data)
        if self._viewer is None:
            self._viewer = HumanViewer()
        self._viewer.show(self.game.model, self.game.data)
        return None

    def close(self):
        if self._renderer is not None:
            self._renderer.close()
            self._renderer = None
        if self._viewer is not None:
            self._viewer.close()
            self._viewer = None


def parallel_env(
    preset: str = "quadrant", seed: int | None = None, render_mode: str | None = None, **params
) -> HideAndSeekParallelEnv:
    """The PettingZoo `ParallelEnv` for `preset` (see the module docstring)."""
    return HideAndSeekParallelEnv(preset=preset, seed=seed, render_mode=render_mode, **params)


def env(
    preset: str = "quadrant", seed: int | None = None, render_mode: str | None = None, **params
):
    """The AEC form: `parallel_env(...)` through PettingZoo's `parallel_to_aec`."""
    return parallel_to_aec(parallel_env(preset, seed, render_mode, **params))
