"""Actor worker: steps worlds, asks policy workers for actions, ships sample chunks.

The actor's `envs_per_actor` worlds are split into `ring_size` groups (SRL's environment ring):
while one group waits for its actions, the actor steps another, so simulation overlaps
inference. Every group holds its own lockstep batch of worlds; all worlds of a group start
and end their episodes together (fixed horizon), which is why chunks of `chunk_len` steps
(a divisor of the horizon) never straddle two episodes and each column of a chunk is played
by one controller throughout.

Per agent row (world x agent slot) a request carries the raw observation, the LSTM state and
the episode-start flag, plus the controller code of that row (`agents/opponents.py`): the learning
policy, a pool snapshot, or a built-in opponent. Policy workers keep no per-agent state.

Bootstrapping: when the episodes of a group end, the actor asks once more for the values of the
final observations (continuing the finished episodes' LSTM states) and stores them as
`truncated_value`; a chunk that ends mid-episode waits for the next reply's values as its
`bootstrap_value`. Only the learning policy's rows of present agents go into chunks.

On one host a group's requests travel through its shared-memory block (`shared_rows.py`): the
game writes each observation into a slot, the state, episode-start flags and codes are written
next to it, and the socket carries the slot's address. The slot a group acts on is `slot`; a
step writes the next observation into the slot after it and, when episodes end, the finished
episodes' last observation into the one after that, so no slot is rewritten while a request
still needs it (the chunk recorder copies a step's observation when the step is taken).

Lost requests: a request unanswered for `pipeline.request_timeout_s` (its policy worker died
with it, or a reply was dropped as malformed) is sent again under a new sequence number; a late
reply to the old one no longer matches and is ignored. Replies are checked against the run's
contract (`contract.check_reply`) before use; a bad one is dropped and counted.

Back-pressure: chunks the sample stream does not take wait in the actor, at most
`MAX_PENDING_CHUNKS`; beyond that the actor stops starting new steps until the trainer catches
up, so memory stays bounded and a slow trainer slows the actors down.
"""

from __future__ import annotations

import logging
import os
import time
from dataclasses import dataclass, field

import numpy as np

from hns_train.agents.chunks import ChunkRecorder
from hns_train.agents.opponents import LATEST, code_of
from hns_train.agents.pool import PolicyPool, TeamControllers
from hns_train.distributed.contract import check_reply
from hns_train.distributed.shared_rows import SLOTS, RequestLayout, SharedBlock
from hns_train.distributed.streams import InferenceClient, SampleSender
from hns_train.distributed.worker import Worker, WorkerSpec, pool_dir
from hns_train.envs.contract import observation_shapes
from hns_train.envs.tasks import stat_keys
from hns_train.envs.vector import VectorGame

log = logging.getLogger(__name__)

MAX_PENDING_CHUNKS = 4  # finished chunks an actor holds while the sample stream is full


@dataclass
class Group:
    """One ring slot: a lockstep batch of worlds and where it is in its request cycle."""

    game: VectorGame
    obs: dict[str, np.ndarray]  # (W*A, ...) observation the next request is about
    state: np.ndarray  # (W*A, 4, H)
    episode_start: np.ndarray  # (W*A,)
    codes: np.ndarray  # (W*A,) controller code of each row
    recorder: ChunkRecorder
    block: SharedBlock | None = None  # the group's request slots (one host), else arrays
    slot_obs: list[dict] = field(default_factory=list)  # per slot: (W, A, ...) obs views
    slot: int = 0  # the block slot `obs` lies in
    waiting: str = ""  # "" (idle), "act", "value"
    seq: int = 0
    sent_at: float = 0.0  # when the request awaited was (last) sent
    request: tuple[dict, dict] = ({}, {})  # its arrays and block address, for a re-send
    next_obs: dict = field(default_factory=dict)  # first observations of the next episodes
    next_slot: int = 0  # the block slot `next_obs` lies in
    final_present: np.ndarray | None = None  # agents of the episodes that just ended
    unfinished: bool = False  # recorder full, waiting for the bootstrap values
    oldest_version: int = -1


class ActorWorker(Worker):
    def __init__(self, spec: WorkerSpec) -> None:
        super().__init__(spec)
        cfg = self.cfg
        p = cfg.pipeline
        self.game_cfg = cfg.game_config()
        self.stat_keys = stat_keys(self.game_cfg)  # what `stat_sums` sums, in order
        self.inference = self.open_stream(
            InferenceClient,
            spec.endpoints["inference"],
            identity=spec.routing_id,
            check=self._awaited,
            what=f"{self.name} inference replies",
        )
        # Connected to every trainer rank: chunks go to them in turn (see make_endpoints).
        self.samples = self.open_stream(SampleSender, spec.endpoints["samples"], hwm=4)
        # each episode's teams, drawn by the pool's rule; the pool is open only when it can
        # draw anything but the learning policy
        self.draw_rng = np.random.default_rng(self._seed(99))
        self.pool = None
        if cfg.pool.draws_opponents:
            self.pool = self.resources.enter_context(PolicyPool(pool_dir(spec.run_dir), cfg.pool))
        lstm = cfg.agent.network.lstm_dim
        per_group = p.envs_per_actor // p.ring_size
        folder = spec.endpoints.get("shared_rows")
        self.groups = []
        for g in range(p.ring_size):
            game = VectorGame(
                self.game_cfg, per_group, seed=self._seed(g), threads=p.physics_threads
            )
            rows = per_group * game.n_agents
            block = None
            if folder:
                layout = RequestLayout.of(observation_shapes(self.game_cfg), lstm, rows)
                name = f"{self.name}-{spec.incarnation}-{os.getpid()}-g{g}"
                try:
                    block = SharedBlock(folder, name, layout)
                    self.resources.callback(block.close)
                except OSError as err:  # e.g. a small /dev/shm: this group uses the wire
                    log.warning(
                        "%s: no shared block of %d bytes (%s); requests of group %d carry "
                        "their arrays",
                        self.name,
                        layout.block_bytes,
                        err,
                        g,
                    )
            slot_obs = [_slot_obs(block, s, per_group) for s in range(SLOTS)] if block else []
            obs = game.reset(out=slot_obs[0] if slot_obs else None)
            group = Group(
                game=game,
                obs=_rows(obs),
                state=np.zeros((rows, 4, lstm), np.float32),
                episode_start=np.ones(rows, bool),
                codes=np.zeros(rows, np.int64),
                recorder=ChunkRecorder(
                    p.chunk_len, cfg.agent.ppo.bptt_len, len(cfg.agent.network.action_sizes)
                ),
                block=block,
                slot_obs=slot_obs,
            )
            self._draw_controllers(group)
            self.groups.append(group)
        self.pending_chunks: list[tuple[dict, dict]] = []
        self._frames = 0
        self._episodes = 0
        self._stat_sums = np.zeros(len(self.stat_keys))
        self._chunks_sent = 0
        self._latest_version = -1
        self._resent = 0

    def _seed(self, salt: int) -> list[int]:
        return [self.cfg.seed, 1, self.spec.index, self.spec.incarnation, salt]

    # ------------------------------------------------------------------ loop
    def step(self) -> bool:
        worked = False
        # Back-pressure: while the trainer does not take chunks, stop simulating instead of
        # queueing them in memory (the cores go to the trainer on a shared machine).
        if len(self.pending_chunks) < MAX_PENDING_CHUNKS:
            for gid, group in enumerate(self.groups):
                if not group.waiting:
                    self._request(gid, group, "act")
                    worked = True
        self._resend_overdue()
        message = self.inference.recv(timeout_ms=self.poll_ms)  # checked by `_awaited`
        while message is not None:
            self._on_reply(self.groups[message.meta["group"]], message)
            worked = True
            message = self.inference.recv(timeout_ms=0)
        self._flush_chunks()
        return worked

    def _awaited(self, message):
        """The reply to a request a group awaits, when it fits the run's contract (a bad one is
        dropped, and the request re-sent when overdue); None for a reply to an older request."""
        gid, seq = message.meta.get("group"), message.meta.get("seq")
        if not (type(gid) is int and 0 <= gid < len(self.groups) and seq == self.groups[gid].seq):
            return None
        net = self.cfg.agent.network
        check_reply(message.arrays, len(self.groups[gid].codes), net.lstm_dim, net.action_sizes)
        return message

    def _resend_overdue(self) -> None:
        timeout = self.cfg.pipeline.request_timeout_s
        if not timeout:
            return
        now = time.monotonic()
        for gid, group in enumerate(self.groups):
            if group.waiting and now - group.sent_at > timeout:
                group.seq += 1
                self._resent += 1
                self._send(gid, group)

    def _request(self, gid: int, group: Group, kind: str, obs=None, slot=None) -> None:
        """Ask for actions (`act`) about `group.obs`, or for the values (`value`) of the
        finished episodes' last observations: `obs`, or block slot `slot` on one host."""
        group.seq += 1
        group.waiting = kind
        starts = group.episode_start if kind == "act" else np.zeros_like(group.episode_start)
        if group.block is None:
            arrays = {f"obs/{k}": v for k, v in (group.obs if obs is None else obs).items()}
            arrays.update(state=group.state, episode_start=starts, code=group.codes)
            address = {}
        else:
            slot = group.slot if slot is None else slot
            views = group.block.slots[slot]
            np.copyto(views["state"], group.state)
            np.copyto(views["episode_start"], starts)
            np.copyto(views["code"], group.codes)
            arrays, address = {}, group.block.address(slot)
        group.request = (arrays, address)
        self._send(gid, group)

    def _send(self, gid: int, group: Group) -> None:
        """Send the request `group` awaits under its sequence number (again, when re-sent)."""
        group.sent_at = time.monotonic()
        arrays, address = group.request
        meta = {"group": gid, "seq": group.seq, "kind": group.waiting, **address}
        self.inference.send("act", arrays, meta)

    def _on_reply(self, group: Group, message) -> None:
        out = message.arrays
        version = int(message.meta.get("version", -1))
        self._latest_version = max(self._latest_version, version)
        if group.waiting == "value":
            self._end_episodes(group, out["values"])
            return
        if group.unfinished:  # the chunk that ended mid-episode gets its bootstrap values
            self._ship(group, out["values"], group.game.agent_present)
        if group.oldest_version < 0:
            group.oldest_version = version
        game = group.game
        W, A = game.n_worlds, game.n_agents
        group.recorder.record_inputs(group.obs, group.state, group.episode_start)
        actions = out["actions"].reshape(W, A, -1)
        if group.block is None:
            result = game.step(actions)
        else:  # the next observation goes to the slot after this one, final ones after that
            after, final = (group.slot + 1) % SLOTS, (group.slot + 2) % SLOTS
            views = group.slot_obs
            result = game.step(actions, out=views[after], final_out=views[final])
        self._frames += W
        group.recorder.record_outputs(
            out["actions"], out["logp"], out["values"], result.rewards.reshape(-1)
        )
        group.state = out["state"]
        group.episode_start = np.zeros(W * A, bool)
        if result.truncated.any():
            if not result.truncated.all():
                raise RuntimeError("worlds of one group must end their episodes together")
            self._stat_sums += [result.episode_stats[k].sum() for k in self.stat_keys]
            self._episodes += W
            group.next_obs = _rows(result.obs)
            group.final_present = result.final_agent_present
            gid = self.groups.index(group)
            if group.block is None:
                self._request(gid, group, "value", obs=_rows(result.final_obs))
            else:
                group.next_slot = after
                self._request(gid, group, "value", slot=final)
            return
        group.obs = _rows(result.obs)
        if group.block is not None:
            group.slot = after
        group.waiting = ""
        group.unfinished = group.recorder.full

    def _end_episodes(self, group: Group, final_values: np.ndarray) -> None:
        rows = len(final_values)
        group.recorder.end_episodes(final_values)
        if group.recorder.full:
            self._ship(group, np.zeros(rows, np.float32), group.final_present)
        group.obs = group.next_obs
        group.slot = group.next_slot
        group.state = np.zeros_like(group.state)
        group.episode_start = np.ones(rows, bool)
        self._draw_controllers(group)
        group.waiting = ""

    def _draw_controllers(self, group: Group) -> None:
        game = group.game
        codes = np.zeros((game.n_worlds, game.n_agents), np.int64)
        for w in range(game.n_worlds):
            teams = self.pool.draw(self.draw_rng) if self.pool is not None else TeamControllers()
            codes[w] = np.where(game.game.is_hider, code_of(teams.hiders), code_of(teams.seekers))
        group.codes = codes.reshape(-1)

    def _ship(self, group: Group, bootstrap: np.ndarray, present: np.ndarray) -> None:
        """Finish the group's chunk; queue the learning policy's rows of `present` agents."""
        chunk = group.recorder.finish(bootstrap, max(group.oldest_version, 0))
        group.unfinished = False
        group.oldest_version = -1
        keep = (group.codes == LATEST) & present.reshape(-1)
        if keep.any():  # all kept (both teams learning, all present): no gathering copy
            kept = chunk if keep.all() else chunk.select(np.flatnonzero(keep))
            self.pending_chunks.append((kept.to_arrays(), {"actor": self.name}))

    def _flush_chunks(self) -> None:
        while self.pending_chunks:
            arrays, meta = self.pending_chunks[0]
            if not self.samples.send("chunk", arrays, meta, timeout_ms=0):
                return  # back-pressure: the trainer is behind; keep stepping other groups
            self.pending_chunks.pop(0)
            self._chunks_sent += 1

    # ------------------------------------------------------------------ control
    def counters(self) -> dict:
        out = {
            "frames": self._frames,
            "episodes": self._episodes,
            "chunks": self._chunks_sent,
            "stat_sums": self._stat_sums.tolist(),
            "version_seen": self._latest_version,
            "queued_chunks": len(self.pending_chunks),
            "resent": self._resent,
            "rejected": self.inference.rejected,
            # MuJoCo's bad-state warnings since the actor started (each world's step put back)
            "physics_warnings": sum(g.game.game.physics_warnings_total for g in self.groups),
            "time": time.time(),
        }
        self._frames = self._episodes = self._chunks_sent = 0
        self._stat_sums = np.zeros(len(self.stat_keys))
        return out


def _slot_obs(block: SharedBlock, slot: int, worlds: int) -> dict[str, np.ndarray]:
    """The observation arrays of a block slot as (W, A, ...) views for the game to write into."""
    views = block.slots[slot]
    return {
        k[4:]: v.reshape(worlds, v.shape[0] // worlds, *v.shape[1:])
        for k, v in views.items()
        if k.startswith("obs/")
    }


def _rows(obs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """(W, A, ...) -> (W*A, ...): one row per agent slot, world-major."""
    return {k: v.reshape(v.shape[0] * v.shape[1], *v.shape[2:]) for k, v in obs.items()}
