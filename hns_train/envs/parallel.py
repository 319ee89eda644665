"""PettingZoo interfaces over one hide-and-seek world.

`parallel_env(preset="quadrant", seed=None, render_mode=None, flatten=False, max_cycles=None,
pad_absent=False, **game_params)` returns a `ParallelEnv`; `env(...)` the same game as an AEC
env through PettingZoo's own `parallel_to_aec` (which adds the order-enforcing wrapper). Game
parameters go to `make_config`, which rejects unknown presets and parameters with `ValueError`.

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

Other trainers: `flatten=True` makes each observation one float32 `Box` vector (the `Dict`
flattened by `gymnasium.spaces.flatten`, keys in sorted order; `dict_observation_space(agent)`
unflattens it), which SuperSuit's wrappers and vectorisers take as they are. `max_cycles` is
PettingZoo's name of `horizon`. SuperSuit's vectorisers need fixed team sizes
(`n_hiders=(k, k)`). Variable team sizes (agents absent from a whole episode) work with
`PettingZooWrapper(parallel_env(..., pad_absent=True), use_mask=True, done_on_any=False)` of
TorchRL, which asks every possible agent's observation and info at reset and sends every
possible agent an action: `pad_absent=True` gives the absent ones zero observations and empty
infos at reset and ignores their actions (TorchRL's mask is False for them). Without
`pad_absent` both are errors, as PettingZoo wants.

Every keyword and its default is listed in `help(parallel_env)`, each game parameter with the
meaning its `#:` comment in `GameConfig` gives it (`typed_config.field_docs`; a test checks that
every field has one).
"""

from __future__ import annotations

import inspect
from dataclasses import fields, is_dataclass
from numbers import Integral
from operator import itemgetter

import numpy as np
from gymnasium import spaces
from pettingzoo import ParallelEnv
from pettingzoo.utils.conversions import parallel_to_aec

from hns_train.envs.config import PRESETS, GameConfig, make_config
from hns_train.envs.contract import first_out_of_range, integral
from hns_train.envs.game import HideAndSeekGame
from hns_train.envs.observations import observation_space
from hns_train.typed_config import Bounds, FieldError, check_value, field_docs

RENDER_MODES = ("rgb_array", "human")
FLAT_DTYPE = np.float32
_INT64 = np.dtype(np.int64)  # the native one: `rows.dtype is _INT64`


def agent_names(max_hiders: int, max_seekers: int) -> list[str]:
    """The agents' names in slot order: `hider_0..`, then `seeker_0..` (one naming everywhere:
    the env, replays and the eval CLI)."""
    return [f"hider_{k}" for k in range(max_hiders)] + [f"seeker_{k}" for k in range(max_seekers)]


def _keyword_help() -> str:
    docs = field_docs(GameConfig)
    lines = [
        "Keywords (defaults of the quadrant preset; other presets change some, see PRESETS):",
        f"    preset: {' | '.join(map(repr, PRESETS))}",
        "    seed: int | None = None  (seeds the world generator; reset(seed=...) reseeds it)",
        "    render_mode: None | 'rgb_array' | 'human'  ('human' needs a display)",
        "    flatten: bool = False  (observations as one float32 Box vector, for SuperSuit etc.)",
        "    max_cycles: int | None = None  (PettingZoo's name of horizon)",
        "    pad_absent: bool = False  (zero observations at reset and ignored actions for agents",
        "        absent this episode: for TorchRL's PettingZooWrapper(use_mask=True))",
    ]
    for f in fields(GameConfig):
        if f.name == "preset":
            continue
        if is_dataclass(f.default_factory):  # a task's section: one line a field
            section_docs = field_docs(f.default_factory)
            for sub in fields(f.default_factory):
                key = f"{f.name}.{sub.name}"
                lines.append(f"    {key} = {sub.default!r}: {section_docs.get(sub.name, '')}")
            continue
        changed = [p for p, over in PRESETS.items() if f.name in over]
        note = f"  (set by {', '.join(changed)})" if changed else ""
        lines.append(f"    {f.name} = {f.default!r}: {docs.get(f.name, '')}{note}")
    return "\n".join(lines)


class HideAndSeekParallelEnv(ParallelEnv):
    """Hide-and-seek as a PettingZoo `ParallelEnv`: one MuJoCo world, hiders against seekers.

    Agents `hider_0..` and `seeker_0..`; each acts with `MultiDiscrete([11, 11, 11, 2, 2])`
    (x force, y force, torque, grab, lock) and observes a `Dict` of entity arrays with masks
    (or one `Box` vector with `flatten=True`). Episodes always run `horizon` steps and end by
    truncation. Make it with `parallel_env(...)`; every keyword is listed in
    `help(hns_train.envs.parallel_env)`.
    """

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
        flatten: bool = False,
        max_cycles: int | None = None,
        pad_absent: bool = False,
        **game_params,
    ):
        from hns_train.envs.render import display_available

        if render_mode is not None and render_mode not in RENDER_MODES:
            raise ValueError(
                f"unknown render_mode {render_mode!r}; allowed: None, {', '.join(RENDER_MODES)}"
            )
        if render_mode == "human" and not display_available():
            raise ValueError(
                "render_mode='human' needs a display (DISPLAY or WAYLAND_DISPLAY is unset); use "
                "render_mode='rgb_array' on a headless machine, or render a replay to a file "
                "(python -m hns_train.eval REPLAY)"
            )
        flatten = check_value(flatten, bool, "flatten")
        pad_absent = check_value(pad_absent, bool, "pad_absent")
        # numpy's integers are seeds too (numpy takes them); a bool is not
        if seed is not None and (isinstance(seed, bool) or not isinstance(seed, Integral)):
            raise FieldError(f"seed={seed!r} has type {type(seed).__name__}; expected int | None")
        if problem := Bounds(0).problem("seed", seed):
            raise FieldError(problem)
        max_cycles = check_value(max_cycles, int | None, "max_cycles")
        if max_cycles is not None:
            if "horizon" in game_params and game_params["horizon"] != max_cycles:
                raise ValueError(
                    f"max_cycles={max_cycles} and horizon={game_params['horizon']} disagree; "
                    "max_cycles is PettingZoo's name of horizon: give one of them"
                )
            game_params["horizon"] = max_cycles
        self.cfg = make_config(preset, **game_params)
        self.flatten = flatten
        self.pad_absent = pad_absent
        self.game = HideAndSeekGame(self.cfg, n_worlds=1, seed=seed)
        self.render_mode = render_mode
        cfg = self.cfg
        # "human" only where a window can open, so that render checks pass on headless machines.
        # render.py is imported here, not at package import, so `python -m ...render` runs clean.
        modes = [m for m in RENDER_MODES if m != "human" or display_available()]
        self.metadata = {
            **type(self).metadata,
            "render_modes": modes,
            "render_fps": 1.0 / (cfg.timestep * cfg.substeps),
        }
        self.possible_agents = agent_names(cfg.max_hiders, cfg.max_seekers)
        self.agents: list[str] = []
        self._slot = {name: k for k, name in enumerate(self.possible_agents)}
        self._dict_spaces = {a: observation_space(cfg) for a in self.possible_agents}
        self._obs_spaces = (
            {a: _flat_space(sp) for a, sp in self._dict_spaces.items()}
            if self.flatten
            else self._dict_spaces
        )
        self._act_spaces = {
            a: spaces.MultiDiscrete(self.game.action_nvec.copy(), dtype=np.int64)
            for a in self.possible_agents
        }
        self._renderer = None  # render.TopViewRenderer, made on the first rgb_array frame
        self._viewer = None  # render.HumanViewer
        # What every step would otherwise work out again: the observation keys in the Dict
        # space's order with their flat widths (what gymnasium's flatten concatenates), the
        # no-op actions of absent agents, the live agents and their slots (set at reset).
        any_space = self._dict_spaces[self.possible_agents[0]].spaces
        self._flat_keys = [(k, int(np.prod(sp.shape))) for k, sp in any_space.items()]
        self._noop_batch = np.broadcast_to(self.game.noop, (1, self.game.n_agents, 5)).copy()
        self._live_set: frozenset[str] = frozenset()
        self._live_slots = np.zeros(0, dtype=np.intp)
        # the live agents, their (agent, slot) and (agent, itemgetter((0, slot))) pairs
        self._live_pairs: tuple[list[str], list, list] = ([], [], [])
        self._obs_keys = list(self.game.obs)

    # ------------------------------------------------------------------ spaces and MuJoCo
    def observation_space(self, agent: str) -> spaces.Dict | spaces.Box:
        """`Dict` of entity arrays, or with `flatten=True` the float32 `Box` it flattens to."""
        return self._obs_spaces[self._check_agent(agent)]

    def dict_observation_space(self, agent: str) -> spaces.Dict:
        """The `Dict` space even with `flatten=True`:
        `gymnasium.spaces.unflatten(env.dict_observation_space(a), obs[a])` gives the dict."""
        return self._dict_spaces[self._check_agent(agent)]

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
        """Build a new world (new layout, team sizes and positions) and return
        `(observations, infos)` for the agents present this episode (`self.agents`).

        `seed` reseeds the world generator (equal seeds, equal episodes); `options` is unused.
        """
        obs = self.game.reset(seeds=None if seed is None else [seed])
        present = self.game.agent_present[0]
        self.agents = [a for a in self.possible_agents if present[self._slot[a]]]
        self._live_set = frozenset(self.agents)
        self._live_slots = np.array([self._slot[a] for a in self.agents], dtype=np.intp)
        pairs = [(a, self._slot[a]) for a in self.agents]
        self._live_pairs = (self.agents, pairs, [(a, itemgetter((0, k))) for a, k in pairs])
        if self.render_mode == "human":
            self.render()
        # the game's rows of absent agents are zero: what pad_absent gives them
        observations = self._agent_obs(obs, self.possible_agents if self.pad_absent else None)
        return observations, {a: {} for a in observations}

    def step(self, actions: dict):
        """Advance one env step (`substeps` MuJoCo steps) with one action per live agent.

        Returns `(observations, rewards, terminations, truncations, infos)`, dicts keyed by the
        agents live before the step. Rewards: hiders +1 when no seeker sees a hider, else -1;
        seekers the opposite; 0 in the preparation phase; an agent out of bounds gets
        `oob_penalty` instead. `terminations` are always False; `truncations` are all True on
        the horizon's step, whose `infos` hold the episode statistics and after which `agents`
        is empty. Bad actions raise ValueError naming the agent and what is allowed.
        """
        if not self.agents:
            raise RuntimeError(
                "step() called with no live agents: the episode has ended (or reset() was "
                "never called); call reset()"
            )
        if not isinstance(actions, dict):
            raise ValueError(
                f"actions must be a dict from agent name to action, got {type(actions).__name__}"
            )
        if self.pad_absent:  # TorchRL sends actions for agents absent this episode too
            actions = {a: v for a, v in actions.items() if a in self._live_set}
        if actions.keys() != self._live_set:
            self._check_agents(actions)  # raises, naming the agents
        live = self.agents
        given = [actions[a] for a in live]  # in slot order
        # int64 arrays of the right shape (what action_space.sample() gives) go in as they are
        # and are range-checked by the game; anything else is checked one by one here
        for action in given:
            if not (type(action) is np.ndarray and action.dtype is _INT64 and action.shape == (5,)):
                given = [self._check_action(a, v) for a, v in zip(live, given, strict=True)]
                break
        rows = np.array(given)
        if len(live) == self.game.n_agents:  # (the game copies the actions it is given)
            batch = rows[None]
        else:  # absent agents send the no-op
            batch = self._noop_batch.copy()
            batch[0, self._live_slots] = rows
        try:
            # The game range-checks the actions before it changes anything and raises naming
            # world and slot; the env then names the agent.
            obs, reward, truncated, infos = self.game.step(batch)
        except ValueError:
            for agent in live:
                self._check_action(agent, actions[agent])  # raises, naming the agent
            raise
        ended = bool(truncated[0])
        observations = self._agent_obs(obs, live)
        values = reward[0].tolist()
        rewards = {a: values[k] for a, k in self._pairs(live)}
        terminations = dict.fromkeys(live, False)
        truncations = dict.fromkeys(live, ended)
        stats = infos[0]
        out_infos = {a: dict(stats) for a in live}
        if ended:
            self.agents = []
            self._live_set = frozenset()
        if self.render_mode == "human":
            self.render()
        return observations, rewards, terminations, truncations, out_infos

    def _check_agents(self, actions: dict) -> None:
        not_live = sorted(set(actions) - self._live_set, key=str)
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
        if not integral(a):
            raise ValueError(
                f"action for {agent} is {a.tolist()} (dtype {a.dtype}), not integers; "
                f"allowed: {allowed}"
            )
        bad = first_out_of_range(a, nvec)
        if bad is not None:
            (k,) = bad
            raise ValueError(
                f"action for {agent} is {a.tolist()}: dimension {k} = {a[k]} is outside "
                f"[0, {nvec[k] - 1}]; allowed: {allowed}"
            )
        return a.astype(np.int64)

    def _pairs(self, agents: list[str]) -> list[tuple[str, int]]:
        """(agent, slot) of each of `agents` (kept for the live list of this episode)."""
        live, pairs, _ = self._live_pairs
        return pairs if agents is live else [(a, self._slot[a]) for a in agents]

    def _agent_obs(self, obs, agents=None) -> dict:
        """Each agent's observation, in new memory (the game reuses its buffers, and users keep
        what a step returned): one copy per key for all agents, each agent's entries views of
        it; flattened, one concatenation for all agents, each agent's vector a row of it."""
        agents = self.agents if agents is None else agents
        if self.flatten:
            n = self.game.n_agents
            flat = np.concatenate(
                [obs[k][0].reshape(n, width) for k, width in self._flat_keys],
                axis=1,
                dtype=FLAT_DTYPE,
            )
            rows = list(flat)
            return {a: rows[k] for a, k in self._pairs(agents)}
        keys = self._obs_keys
        copies = list(map(np.ndarray.copy, obs.values()))
        # itemgetter((0, slot)) takes each agent's view of every copy without a Python loop
        live, _, getters = self._live_pairs
        if agents is not live:
            getters = [(a, itemgetter((0, self._slot[a]))) for a in agents]
        return {a: dict(zip(keys, map(rows, copies), strict=True)) for a, rows in getters}

    # ------------------------------------------------------------------ rendering
    def render(self):
        """`rgb_array`: a (render_height, render_width, 3) uint8 frame from the fixed overhead
        camera; `human`: show the world in MuJoCo's viewer (returns None)."""
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


def _flat_space(space: spaces.Dict) -> spaces.Box:
    flat = spaces.flatten_space(space)
    return spaces.Box(flat.low, flat.high, flat.shape, FLAT_DTYPE)


def parallel_env(*args, **params) -> HideAndSeekParallelEnv:
    return HideAndSeekParallelEnv(*args, **params)


def env(*args, **params):
    return parallel_to_aec(HideAndSeekParallelEnv(*args, **params))


# Both take exactly the env's keywords; help() shows them as the env's own signature.
parallel_env.__signature__ = env.__signature__ = inspect.signature(HideAndSeekParallelEnv)

parallel_env.__doc__ = f"""The PettingZoo `ParallelEnv` of hide-and-seek (`HideAndSeekParallelEnv`).

    env = parallel_env(preset="randomwalls", n_hiders=(1, 3), horizon=300)

Unknown keywords or ill-typed values raise ValueError naming what is allowed.

{_keyword_help()}
"""
env.__doc__ = f"""The AEC form: `parallel_env(...)` through PettingZoo's `parallel_to_aec`.

{_keyword_help()}
"""
