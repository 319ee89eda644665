"""A pod (after ElegantRL-podracer): simulate W worlds, act, store the rollout and learn, all on
one device, in one process. One iteration is `Pod.iteration`, read top to bottom:

    for t in range(T):                       # collect (T = pipeline.chunk_len): Pod.step
        record o_t, LSTM state, episode starts (step t of the chunk recorder)
        act: the learning policy on its rows, pool opponents on theirs
        step every world; record a_t, log-prob, value, r_t, which rows learn
        worlds whose episode ended: V(final observation) recorded, new opponents drawn
        yield                                # the worker's turn: control messages, heartbeats
    hook(Pod.learn, agent_steps)             # learn: PPO on the whole rollout (ppo.py, agent.ppo)

The iteration is a generator, so the worker (distributed/pod_worker.py) takes its turn after
every env step, as every worker does (on the serial launcher the controller and the other
workers run there too), and a stopping run simply does not resume it. The hook (a callable) is
the worker's narrow part of the loop: it runs the update guarded, or skips it
(bench/pod_speed.py calls `Pod.step` and `Pod.learn` itself).

The game is the C `VectorGame` (host arrays: the CPU pod) or `WarpGame` (tensors on the Warp
device: the GPU pod); both are used through `DeviceGame`, which hands the pod tensors on the
model's device. The rollout is recorded by the actor's `ChunkRecorder` (chunks.py: the same
steps, episode ends and bootstrap, one implementation) into tensors allocated once on that
device, and is PPO's batch as it stands (`Pod.rollout`, a `ppo.Rollout`). A pod step
with the Warp game reads nothing back to the host: which worlds end their episode on a step is
known on the host without asking the device, since an episode always runs to the horizon
(spec §4) and the pod mirrors each world's episode clock; which rows each controller plays is
drawn on the host per episode, so every gather and scatter has a host-known size.

Self-play (spec "Self-play policy pool"): each world's two teams are drawn per episode by the
pool's rule (`PolicyPool.draw`: the latest policy with `p_latest`, else a snapshot, the random
or the no-op team for one side). Snapshots play from `opponent_slots` fixed models on the device
(least recently used first out): drawing an opponent copies weights into a free slot at most,
never builds a model, and when every slot is in use by a running episode the draw takes one of
the loaded snapshots instead. Only the learning policy's rows of present agents are trained on
(`learn_steps`); rows it did not play at all in a rollout are left out of the update (the host
knows them from the draws), so opponents cost no learning compute.

Counters (frames, episodes, episode statistics) accumulate on the device or the host mirror and
are read when a worker heartbeats, not per step.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Callable, Generator

import numpy as np
import torch

from hns_train.agents.chunks import ChunkRecorder
from hns_train.agents.opponents import (
    LATEST,
    RANDOM,
    Snapshots,
    act_by_controller,
    code_of,
    controller_groups,
)
from hns_train.agents.policy import ActorCritic
from hns_train.agents.pool import PolicyPool, SnapshotCache
from hns_train.agents.ppo import PPO, Rollout
from hns_train.envs import contract
from hns_train.envs.vector import VectorGame


class DeviceGame:
    """`VectorGame` or `WarpGame` behind one interface of tensors on `device`, with agent rows
    flattened world-major (row = world * A + agent)."""

    def __init__(self, game, device: torch.device, keys) -> None:
        self.game = game
        self.device = device
        self.keys = tuple(keys)  # the observation keys the model reads (entity types with rows)
        self.n_worlds, self.n_agents = game.n_worlds, game.n_agents
        self.rows = self.n_worlds * self.n_agents
        self.horizon = game.cfg.horizon
        self.is_hider = np.arange(self.n_agents) < game.cfg.max_hiders
        self.nvec = torch.as_tensor(np.asarray(game.action_nvec), device=device)
        self.host_actions = isinstance(game, VectorGame)
        self.stat_keys = tuple(game.stat_keys)  # the game's statistics, then its task's

    def _rows(self, x) -> torch.Tensor:
        x = torch.as_tensor(x, device=self.device)
        return x.reshape(self.rows, *x.shape[2:])

    def _obs(self, obs) -> dict[str, torch.Tensor]:
        return {k: self._rows(obs[k]).to(torch.float32) for k in self.keys}

    def reset(self) -> tuple[dict[str, torch.Tensor], torch.Tensor, np.ndarray]:
        """First observations (R, ...), who is present (R,) and each world's episode clock
        (host, read once here: a game may start its worlds at staggered steps)."""
        obs = self.game.reset()
        clock = getattr(self.game, "t", None)
        clock = np.zeros(self.n_worlds, np.int64) if clock is None else _host(clock).copy()
        return self._obs(obs), self._rows(self.game.agent_present), clock.astype(np.int64)

    def step(self, actions: torch.Tensor):
        """Advance every world with (R, 5) actions; `VectorStep` fields as row tensors."""
        a = actions.reshape(self.n_worlds, self.n_agents, -1)
        if self.host_actions:  # the C game takes host arrays
            a = a.numpy() if a.device.type == "cpu" else a.cpu().numpy()
        step = self.game.step(a)
        return (
            self._obs(step.obs),
            self._rows(step.rewards).to(torch.float32),
            self._rows(step.agent_present),
            step.final_obs,
            step.episode_stats,
            step.truncated,
        )

    def final_rows(self, final_obs, rows: torch.Tensor) -> dict[str, torch.Tensor]:
        return {k: self._rows(final_obs[k]).index_select(0, rows).float() for k in self.keys}

    def physics_warnings(self) -> int:
        """Contacts or constraints the physics dropped over the game's life (read at heartbeat
        time: for the Warp game, a host read)."""
        game = self.game.game if hasattr(self.game, "game") else self.game
        read = getattr(game, "read_warnings", None)
        return int(read() if callable(read) else game.physics_warnings_total)

    def random_actions(self, n: int) -> torch.Tensor:
        return (torch.rand(n, len(self.nvec), device=self.device) * self.nvec).long()


def tensor_storage(device: torch.device | str) -> Callable[[np.dtype, tuple], torch.Tensor]:
    """A `ChunkRecorder`'s storage as zeroed tensors on `device`, of the layout's dtypes."""

    def zeros(dtype: np.dtype, shape: tuple[int, ...]) -> torch.Tensor:
        torch_dtype = torch.from_numpy(np.empty(0, dtype)).dtype
        return torch.zeros(shape, dtype=torch_dtype, device=device)

    return zeros


UpdateHook = Callable[[Callable[[], dict], int], "dict | None"]  # see `Pod.iteration`


def _host(x) -> np.ndarray:
    return x.cpu().numpy() if isinstance(x, torch.Tensor) else np.asarray(x)


class OpponentSlots:
    """Pool snapshots on the device in fixed model slots, and the per-episode draw."""

    def __init__(
        self,
        pool: PolicyPool | None,
        new_model: Callable[[], ActorCritic],
        n_slots: int,
        rng: np.random.Generator,
        cache_size: int,
    ) -> None:
        self.pool = pool
        self.new_model = new_model
        self.n_slots = n_slots
        self.rng = rng
        self.models: list[ActorCritic] = []
        self.versions: OrderedDict[int, int] = OrderedDict()  # version -> slot, LRU first
        self.snapshots = Snapshots(SnapshotCache(pool, cache_size)) if pool is not None else None

    def draw(self, in_use: np.ndarray) -> tuple[int, int]:
        """(hider code, seeker code) for one episode; `in_use` (slots,) counts live episodes
        per slot (a slot in use is not overwritten)."""
        if self.pool is None:
            return LATEST, LATEST
        teams = self.pool.draw(self.rng)
        return self._code(teams.hiders, in_use), self._code(teams.seekers, in_use)

    def _code(self, policy_id, in_use: np.ndarray) -> int:
        if isinstance(policy_id, str):
            return code_of(policy_id)
        version = int(policy_id)
        if version in self.versions:
            self.versions.move_to_end(version)
            return self.versions[version]
        free = self._free_slot(in_use)
        if free is None:  # every slot plays a running episode: one of them plays this one too
            return int(self.rng.choice(list(self.versions.values())))
        state = self.snapshots.get(version)
        if state is None:  # missing or broken snapshot: the latest plays it
            return LATEST
        self.models[free].load_state_dict(state)  # copies into the slot: nothing is rebuilt
        for v, s in list(self.versions.items()):
            if s == free:
                del self.versions[v]
        self.versions[version] = free
        return free

    def _free_slot(self, in_use: np.ndarray) -> int | None:
        if len(self.models) < self.n_slots:
            self.models.append(self.new_model())
            return len(self.models) - 1
        for slot in self.versions.values():  # least recently drawn first
            if in_use[slot] == 0:
                return slot
        return None


class Pod:
    """W worlds, the learning policy, its opponents, a chunk recorder and PPO on one device."""

    def __init__(
        self,
        game,
        ppo: PPO,
        rollout_len: int,
        pool: PolicyPool | None = None,
        opponent_slots: int = 4,
        snapshot_cache: int = 64,
        seed=0,
        profile: bool = False,
    ) -> None:
        self.model = model = ppo.model
        self.ppo = ppo
        self.device = model.device
        self.game = DeviceGame(game, self.device, model.layout.shapes)
        self.profile = profile  # wait for the device after each phase, so the split is true
        g = self.game
        self.recorder = ChunkRecorder(
            rollout_len,
            ppo.config.bptt_len,
            len(model.action_sizes),
            new_array=tensor_storage(self.device),
        )
        # the steps the learning policy played for a present agent: the ones trained on
        self.learn_steps = torch.zeros(rollout_len, g.rows, dtype=torch.bool, device=self.device)
        self.rng = np.random.default_rng(seed)
        self.slots = OpponentSlots(
            pool,
            lambda: ActorCritic(model.layout.shapes, model.config, device=self.device).eval(),
            opponent_slots,
            self.rng,
            snapshot_cache,
        )
        self.counters = self._no_counters()
        self._stat_sums = torch.zeros(len(g.stat_keys), dtype=torch.float64, device=self.device)
        self._noop = torch.as_tensor(contract.noop_action(int(g.nvec[0])), device=self.device)
        self.reset()

    @property
    def t(self) -> int:
        """The step within the rollout."""
        return len(self.recorder)

    # ------------------------------------------------------------------ episodes
    def reset(self) -> None:
        g = self.game
        self.obs, self.present, self.clock = g.reset()
        self.state = torch.zeros(g.rows, 4, self.model.config.lstm_dim, device=self.device)
        self.episode_start = torch.ones(g.rows, dtype=torch.bool, device=self.device)
        self.codes = np.full((g.n_worlds, 2), LATEST, np.int64)  # (hider, seeker) per world
        self._learned = np.zeros(g.rows, bool)
        self.groups: list[tuple[int, torch.Tensor | None]] | None = None  # made by _draw
        self._draw(np.arange(g.n_worlds))

    def _draw(self, worlds: np.ndarray) -> None:
        """New controllers for the episodes that start in `worlds`; the row groups follow."""
        before = self.codes[worlds].copy()
        self.codes[worlds] = LATEST  # their old slots are free again
        for w in worlds:
            self.codes[w] = self.slots.draw(self._slots_in_use())
        if self.groups is not None and np.array_equal(before, self.codes[worlds]):
            return  # the same controllers play on (pure self-play: every episode end)
        rows = np.where(self.game.is_hider[None, :], self.codes[:, :1], self.codes[:, 1:])
        rows = rows.reshape(-1)
        self.groups = controller_groups(rows, self.device)
        self._learning = rows == LATEST
        self.learn_rows = torch.as_tensor(self._learning, device=self.device)
        # rows the learning policy played at some step of this rollout (host: no device read)
        self._learned |= self._learning

    def _slots_in_use(self) -> np.ndarray:
        used = self.codes[self.codes >= 0]
        return np.bincount(used, minlength=self.slots.n_slots)

    # ------------------------------------------------------------------ acting
    def _network(self, code: int) -> ActorCritic:
        return self.model if code == LATEST else self.slots.models[code]

    def _fixed(self, code: int, n: int) -> torch.Tensor:
        if code == RANDOM:
            return self.game.random_actions(n)
        return self._noop.expand(n, -1)

    # ------------------------------------------------------------------ the loop
    def iteration(self, hook: UpdateHook) -> Generator[None, None, dict | None]:
        """One iteration, CleanRL's order: collect a rollout of T steps of every world, then
        learn on it: `hook(learn, agent_steps)` (the worker's: run `learn`, PPO on the rollout
        of `agent_steps` agent-steps, and return its statistics, or skip it: None). Yields after
        every env step (the caller's turn); returns the update's statistics, None when the hook
        skipped it."""
        self.new_rollout()
        steps = self.recorder.num_steps
        for _ in range(steps):  # collect
            self.step()
            yield
        return hook(self.learn, steps * self.game.rows)  # learn

    def new_rollout(self) -> None:
        """The next rollout starts at slot 0, with the rows the learning policy plays now."""
        self.recorder.clear()
        self._learned = self._learning.copy()

    def step(self) -> bool:
        """One env step of every world into the recorder; True when the rollout is full."""
        rec, g, t = self.recorder, self.game, self.t
        start = time.perf_counter()
        rec.record_inputs(self.obs, self.state, self.episode_start)
        # every row acted by its controller: one forward pass per network, host-known row sets
        out = act_by_controller(
            self.groups, self._network, self._fixed, self.obs, self.state, self.episode_start
        )
        self._sync()
        acted = time.perf_counter()
        obs, rewards, present, final_obs, stats, truncated = g.step(out.actions)
        self._sync()
        simulated = time.perf_counter()
        rec.record_outputs(out.actions, out.logp, out.values, rewards)
        self.learn_steps[t] = self.learn_rows & self.present
        self.counters["frames"] += g.n_worlds
        self.clock += 1
        ended = np.flatnonzero(self.clock >= g.horizon)
        if isinstance(truncated, np.ndarray) and not np.array_equal(
            np.flatnonzero(truncated), ended
        ):
            raise RuntimeError(
                f"the game ended episodes in worlds {np.flatnonzero(truncated)[:8]} at step "
                f"{t}, the pod's episode clock in {ended[:8]}: episodes must run to the horizon"
            )
        state, starts = out.state, torch.zeros_like(self.episode_start)
        if ended.size:
            state = self._end_episodes(t, ended, final_obs, stats, state, starts)
        self.obs, self.present, self.state, self.episode_start = obs, present, state, starts
        self.counters["act_s"] += acted - start
        self.counters["sim_s"] += simulated - acted
        return rec.full

    def _end_episodes(self, t: int, ended: np.ndarray, final_obs, stats, state, starts):
        """Worlds `ended` finished their episode with step t: V(final observation) into the
        buffer (continuing the finished episode's state), their statistics counted, their rows
        start afresh (zero state, `starts` set) with new controllers. The next state."""
        g = self.game
        rows = torch.as_tensor(
            (ended[:, None] * g.n_agents + np.arange(g.n_agents)).reshape(-1), device=self.device
        )
        final_values = self.model.value_tensors(
            g.final_rows(final_obs, rows), state.index_select(0, rows)
        )
        self.recorder.end_episodes(final_values, rows)
        finished = torch.stack(
            [torch.as_tensor(stats[k], device=self.device).to(torch.float64) for k in g.stat_keys]
        )
        self._stat_sums += finished.nan_to_num(0.0).sum(dim=1)
        self.counters["episodes"] += len(ended)
        self.clock[ended] = 0
        starts.index_fill_(0, rows, True)
        self._draw(ended)
        return state.index_fill(0, rows, 0.0)

    def learn(self) -> dict[str, torch.Tensor]:
        """PPO on the full rollout (statistics stay on the device); the next rollout starts."""
        start = time.perf_counter()
        rollout = self.rollout()
        if not self._learned.all():  # opponents' rows cost nothing in the update
            rollout = rollout.select(
                torch.as_tensor(np.flatnonzero(self._learned), device=self.device)
            )
        self.new_rollout()  # whatever happens to the update, the next rollout starts afresh
        stats = self.ppo.update_async(rollout)
        stats["learned_steps"] = rollout.learn.sum().to(torch.float64)
        self._sync()
        self.counters["learn_s"] += time.perf_counter() - start
        return stats

    def rollout(self) -> Rollout:
        """The full rollout as PPO's batch, V(o_T) as its bootstrap value: views of the
        recorder's tensors, valid until the next step."""
        bootstrap = self.model.value_tensors(self.obs, self.state)
        return Rollout(**self.recorder.take(bootstrap), learn=self.learn_steps)

    @staticmethod
    def _no_counters() -> dict:
        return {"frames": 0, "episodes": 0, "sim_s": 0.0, "act_s": 0.0, "learn_s": 0.0}

    def take_counters(self) -> dict:
        """What the pod did since the last call, named as a heartbeat names it: frames,
        episodes, `stat_sums` (one per `DeviceGame.stat_keys`: one host read of the device's
        sums) and the wall time of simulating, acting and learning (`sim_s`, `act_s`,
        `learn_s`)."""
        out = {**self.counters, "stat_sums": self._stat_sums.tolist()}
        self._stat_sums.zero_()
        self.counters = self._no_counters()
        return out

    def _sync(self) -> None:
        if self.profile and self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
