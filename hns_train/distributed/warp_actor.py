"""Warp actor (`pipeline.backend=warp`): simulation and inference in one worker, one device.

The actor steps its `envs_per_actor` worlds as one `WarpGame` (envs/warp) on
`pipeline.warp_device` and runs the policy itself on the same device: no policy workers, no
inference sockets on the hot path. It subscribes to the trainer's parameter stream like a policy
worker (acting only once the first parameters arrived), draws each episode's controllers like
the C actor (latest policy, pool snapshots, fixed opponents: `policy.act_by_controller`), and
ships sample chunks to the trainers through the same sample stream, with the same chunk layout:
only the latest policy's rows of present agents, `truncated_value` from the final observation
(continuing the finished episode's LSTM state), and a chunk that ends mid-episode bootstrapped
with the values of the next step's observation. `pipeline.ring_size` does not apply: there is
no inference round trip to hide.

Worlds end their episodes independently (the game's per-world step counter; with
`pipeline.warp_stagger` they start at random steps of their first episode): on a step where
some worlds ended, their rows get `truncated` and `truncated_value` (every row's final
observation is evaluated, the others' values dropped), their LSTM state is zeroed and their
controllers redrawn; a row whose controller changed inside a chunk is left out of that chunk
(its steps were not all the learning policy's). A full chunk ships on the next step, with those
values as the bootstrap of its unfinished rows. Its rows go out in as many messages as keep
each under `pipeline.max_message_mb` (`split_columns`): all rows of 4096 worlds would be over a
gigabyte, which the trainer's socket refuses. The game's device flags (bad actions, physics
overflows) are read once per heartbeat (`WarpGame.read_warnings`), not per step.

Everything downstream (trainers, pool, eval workers, controller, logging) is unchanged; the
controller starts no policy workers for this backend.

The Ray launcher reserves no GPU for actors (there is no `ray_actor_gpus`), so on a Ray cluster
a Warp actor runs on the CPU device for now. The policy acts on the game's observation
tensors on their device; its outputs (actions, log-probs, values, LSTM states) and the chunk
rows are host arrays, so on a GPU those cross to the host once per step (not measured: no GPU).
"""

from __future__ import annotations

import time

import numpy as np
import torch

from hns_train.agents.chunks import Chunk, ChunkRecorder
from hns_train.agents.policy import ActorCritic
from hns_train.distributed import opponent_codes
from hns_train.distributed.actor import MAX_PENDING_CHUNKS
from hns_train.distributed.contract import DropLog, param_reference
from hns_train.distributed.params import resolve_device
from hns_train.distributed.policy import act_by_controller, load_checked_params
from hns_train.distributed.streams import ParamSubscriber, SampleSender
from hns_train.distributed.wire import encode
from hns_train.distributed.worker import Worker, WorkerSpec
from hns_train.envs.observations import observation_shapes


class WarpActorWorker(Worker):
    kind = "actor"

    def __init__(self, spec: WorkerSpec) -> None:
        super().__init__(spec)
        from hns_train.envs.warp.game import WarpGame  # the optional extra, only here

        cfg, p = self.cfg, self.cfg.pipeline
        self.device = resolve_device(p.warp_device)
        warp_device = "cpu" if self.device.type == "cpu" else f"cuda:{self.device.index or 0}"
        self.game = WarpGame(
            cfg.game_config(),
            p.envs_per_actor,
            seed=self._seed(0),
            device=warp_device,
            stagger=p.warp_stagger,
        )
        self.shapes = observation_shapes(cfg.game_config())
        self.model = self._new_model()
        self.params = ParamSubscriber(
            spec.endpoints["params"],
            security=self.security,
            max_message_bytes=self.max_message_bytes,
        )
        self.samples = SampleSender(spec.endpoints["samples"], hwm=4, security=self.security)
        self.draw = opponent_codes.OpponentDraw(cfg.pool, spec.run_dir, seed=self._seed(99))
        self.opponents = opponent_codes.Opponents(
            cfg.pool, spec.run_dir, self._new_model, seed=self._seed(98), name=self.name
        )
        self.version = -1
        self._reference = param_reference(self.model)
        self.bad_params = DropLog(f"{self.name} parameters")
        W, A = self.game.n_worlds, self.game.n_agents
        self.rows = W * A
        self.obs = _rows(self.game.reset())
        self.state = np.zeros((self.rows, 4, cfg.agent.network.lstm_dim), np.float32)
        self.episode_start = np.ones(self.rows, bool)
        self.recorder = ChunkRecorder(p.chunk_len, cfg.agent.ppo.bptt_len)
        self.unfinished = False  # recorder full, waiting for the next step's values
        self.oldest_version = -1
        self.codes = np.zeros(self.rows, np.int64)
        self.chunk_latest = np.ones(self.rows, bool)
        self._draw_controllers()
        self.ship_present = np.zeros(self.rows, bool)
        self.pending_chunks: list[tuple[dict, dict]] = []
        self._frames = self._episodes = self._chunks_sent = 0
        self._stat_sums = np.zeros(len(self.game.stat_keys))

    def _seed(self, salt: int) -> list[int]:
        return [self.cfg.seed, 1, self.spec.index, self.spec.incarnation, salt]

    def _new_model(self) -> ActorCritic:
        return ActorCritic(self.shapes, self.cfg.agent.network, device=self.device).eval()

    # ------------------------------------------------------------------ loop
    def step(self) -> bool:
        message = self.params.poll_latest(timeout_ms=0)  # newest, or a new publisher's
        self.version = load_checked_params(
            message, self.model, self._reference, self.device, self.bad_params, self.version
        )
        self._flush_chunks()
        if self.version < 0 or len(self.pending_chunks) >= MAX_PENDING_CHUNKS:
            time.sleep(self.poll_ms / 1000)  # no weights yet, or the trainer is behind
            return False
        self._act_and_step()
        self._flush_chunks()
        return True

    def _act(self, obs, state, episode_start):
        return act_by_controller(self.model, self.opponents, obs, state, episode_start, self.codes)

    def _act_and_step(self) -> None:
        game = self.game
        W, A = game.n_worlds, game.n_agents
        actions, logp, values, state = self._act(self.obs, self.state, self.episode_start)
        if self.unfinished:  # the full chunk: these values bootstrap its unfinished rows
            self._ship(values, self.ship_present)
        if self.oldest_version < 0:
            self.oldest_version = self.version
        # checked lazily, read at heartbeats (the actions are host arrays here)
        result = game.step(actions.reshape(W, A, -1), check=False)
        self._frames += W
        step = dict(
            obs=_host(self.obs),
            state=self.state,
            episode_start=self.episode_start,
            actions=actions,
            logp=logp,
            values=values,
            rewards=result.rewards.cpu().numpy().reshape(-1),
        )
        truncated = result.truncated.cpu().numpy()
        ended = np.repeat(truncated, A)  # rows of the worlds whose episode ended
        if truncated.any():
            stats = torch.stack([result.episode_stats[k] for k in self.game.stat_keys])
            self._stat_sums += torch.nansum(stats, dim=1).cpu().numpy()
            self._episodes += int(truncated.sum())
            # values of the final observations, continuing the finished episodes' states
            # (every row is evaluated; only the rows that ended are kept)
            final = _rows(result.final_obs)
            _, _, final_values, _ = self._act(final, state, np.zeros(self.rows, bool))
            final_values = np.where(ended, final_values, 0.0).astype(np.float32)
            self.recorder.add(**step, truncated=ended, truncated_value=final_values)
        else:
            self.recorder.add(**step, truncated=ended)
        present = result.agent_present.cpu().numpy().reshape(-1)
        if self.recorder.full:  # shipped next step; each row with its last episode's agents
            final_present = result.final_agent_present.cpu().numpy().reshape(-1)
            self.ship_present = np.where(ended, final_present, present)
            self.unfinished = True
        self.obs = _rows(result.obs)
        self.state = np.where(ended[:, None, None], 0.0, state).astype(np.float32)
        self.episode_start = ended
        if truncated.any():
            self._draw_controllers(np.flatnonzero(truncated))

    def _draw_controllers(self, worlds=None) -> None:
        """New controllers for `worlds` (default: all). A row whose controller changes inside
        a chunk is not the learning policy's throughout, so it is left out of that chunk."""
        game = self.game
        worlds = range(game.n_worlds) if worlds is None else worlds
        hider = game.is_hider.cpu().numpy()
        codes = self.codes.reshape(game.n_worlds, game.n_agents)
        for w in worlds:
            hiders, seekers = self.draw.draw()
            codes[w] = np.where(hider, hiders, seekers)
        if not self.recorder.full:
            self.chunk_latest &= self.codes == opponent_codes.LATEST

    def _ship(self, bootstrap: np.ndarray, present) -> None:
        """Finish the chunk; queue the rows of `present` agents that the learning policy drove
        for the whole chunk, split into messages under `pipeline.max_message_mb`."""
        chunk = self.recorder.finish(bootstrap, max(self.oldest_version, 0))
        self.unfinished = False
        self.oldest_version = -1
        keep = self.chunk_latest & np.asarray(present).reshape(-1)
        self.chunk_latest = self.codes == opponent_codes.LATEST
        for part in split_columns(chunk, np.flatnonzero(keep), self.max_message_bytes):
            self.pending_chunks.append((part, {"actor": self.name}))

    def _flush_chunks(self) -> None:
        while self.pending_chunks:
            arrays, meta = self.pending_chunks[0]
            if not self.samples.send("chunk", arrays, meta, timeout_ms=0):
                return  # back-pressure: the trainer is behind
            self.pending_chunks.pop(0)
            self._chunks_sent += 1

    # ------------------------------------------------------------------ control
    def counters(self) -> dict:
        out = {
            "frames": self._frames,
            "episodes": self._episodes,
            "chunks": self._chunks_sent,
            "stat_sums": self._stat_sums.tolist(),
            "version_seen": self.version,
            "queued_chunks": len(self.pending_chunks),
            # contact / constraint buffer overflows of the Warp physics since the actor started
            # (the game's device flags, read once per heartbeat; raises for bad actions)
            "physics_warnings": self.game.read_warnings(),
            "rejected": self.bad_params.total,
            "time": time.time(),
        }
        self._frames = self._episodes = self._chunks_sent = 0
        self._stat_sums = np.zeros(len(self.game.stat_keys))
        return out

    def close_streams(self) -> None:
        self.game.close()
        self.params.close()
        self.samples.close()
        self.draw.close()
        self.opponents.close()


def split_columns(chunk: Chunk, columns: np.ndarray, max_bytes: int) -> list[dict]:
    """Wire arrays of `chunk` restricted to agent streams `columns`, in as few messages as keep
    each under `max_bytes` (frames together, the receiver's cap): bytes per stream from the
    arrays, the header's size from a one-stream message, a 4 KiB margin for the meta."""
    if not len(columns):
        return []
    one = chunk.select(columns[:1]).to_arrays()
    per_column = sum(a.nbytes for a in one.values())
    header = len(encode("chunk", one, {"actor": "x" * 64})[0]) + 4096
    fit = (max_bytes - header) // per_column
    if fit < 1:
        raise ValueError(
            f"one agent stream of a chunk takes {per_column} bytes, more than the "
            f"{max_bytes} bytes a message may hold: raise pipeline.max_message_mb or lower "
            "pipeline.chunk_len"
        )
    if fit >= len(columns) and len(columns) == chunk.batch_size:
        return [chunk.to_arrays()]  # every stream in one message: no gathering copy
    return [chunk.select(columns[i : i + fit]).to_arrays() for i in range(0, len(columns), fit)]


def _rows(obs) -> dict:
    """(W, A, ...) tensors -> (W*A, ...) tensors on the same device: one row per agent slot,
    world-major. The policy acts on them where they are; only chunks go to the host."""
    return {k: v.reshape(v.shape[0] * v.shape[1], *v.shape[2:]) for k, v in obs.items()}


def _host(obs) -> dict[str, np.ndarray]:
    """Host arrays of device tensors, for the chunk recorder (no copy on Warp's CPU device)."""
    return {k: v.cpu().numpy() for k, v in obs.items()}
