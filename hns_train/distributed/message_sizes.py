"""The size of every large message a run will send, from its config alone: checked at start.

Every socket of a run refuses a message larger than `pipeline.max_message_mb` (streams.py): a
receiver drops it, or libzmq drops the sender's connection, and the run goes on without it. A
parameter message that never fits leaves the policy workers without weights for the whole run,
so `check_message_sizes` turns such a config into a `ConfigError` before any worker starts
(`Controller.__init__`), naming the message, its size and the settings that change it.

Sizes come from the run's contract, with no worker, game or weights made:
- parameters: the state dict of the configured `ActorCritic` (the controller builds it once, on
  the CPU, for this and for its resume check), as `contract.state_dict_to_arrays` sends it;
- a sample chunk: `chunks.chunk_layout` of T = `chunk_len` steps and B = the learning columns of
  one actor group (`envs_per_actor / ring_size` worlds x the agents the learning policy can play,
  `PoolConfig.learning_agents`), LSTM states included;
- inference requests and replies, only where they travel on the wire (the Ray launcher, or
  `pipeline.shared_memory=false`): `contract.request_layout` and `contract.reply_layout` of one
  group's rows, the layouts the receivers check them against;
each as `wire.encoded_size` counts it (all frames: the msgpack header with its array
descriptors, plus the raw arrays), with `META_ALLOWANCE` bytes for a meta dict larger than the
representative one used here.

The `c` backend sends all of the above; a pod (`pod`) trains in its own process and sends no
chunks, but still publishes parameters: it lists only those. Control
messages (heartbeats, a few KB) and pool snapshots (files, not messages) are not counted.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from hns_train.agents.chunks import chunk_layout
from hns_train.agents.policy import ActorCritic
from hns_train.config import ConfigError, RunConfig
from hns_train.distributed.contract import param_layout, reply_layout, request_layout
from hns_train.distributed.wire import encoded_size
from hns_train.envs.contract import N_ACTION_DIMS, observation_shapes

META_ALLOWANCE = 256  # bytes of meta beyond the representative meta counted below
_BIG_INT = 2**63 - 1  # the longest int msgpack writes (9 bytes): counters, versions
_MiB = 1 << 20


@dataclass(frozen=True)
class MessageSize:
    """One kind of message a run sends: what it is, its largest size, what makes it smaller."""

    name: str
    nbytes: int
    smaller: str  # settings that make it smaller, besides raising pipeline.max_message_mb


def _parameters(model: ActorCritic) -> MessageSize:
    meta = {"version": _BIG_INT, "publisher": "0" * 16}
    size = encoded_size("params", param_layout(model), meta)
    return MessageSize(
        "parameters (trainer -> policy workers, eval workers)",
        size + META_ALLOWANCE,
        "a smaller network (agent.network: embed_dim, dense_dim, lstm_dim, lidar_filters)",
    )


def _chunk(cfg: RunConfig, columns: int) -> int:
    game = cfg.game_config()
    p, net = cfg.pipeline, cfg.agent.network
    layout = chunk_layout(
        observation_shapes(game),
        p.chunk_len,
        columns,
        cfg.agent.ppo.bptt_len,
        (4, net.lstm_dim),
        N_ACTION_DIMS,
    )
    meta = {"actor": f"actor{p.n_actors - 1}"}
    return encoded_size("chunk", layout, meta) + META_ALLOWANCE


def _inference(cfg: RunConfig, rows: int) -> list[MessageSize]:
    lstm = cfg.agent.network.lstm_dim
    request = request_layout(observation_shapes(cfg.game_config()), lstm, rows)
    reply = reply_layout(rows, lstm, N_ACTION_DIMS)
    meta = {"group": _BIG_INT, "seq": _BIG_INT, "kind": "value"}
    rows_setting = "fewer rows per group (pipeline.envs_per_actor / pipeline.ring_size)"
    return [
        MessageSize(
            f"an inference request ({rows} agent rows of one actor group)",
            encoded_size("act", request, meta) + META_ALLOWANCE,
            rows_setting,
        ),
        MessageSize(
            f"an inference reply ({rows} agent rows of one actor group)",
            encoded_size("act_result", reply, {**meta, "version": _BIG_INT}) + META_ALLOWANCE,
            rows_setting,
        ),
    ]


def message_sizes(cfg: RunConfig, model: ActorCritic) -> list[MessageSize]:
    """The largest message of each kind the run `cfg` (network `model`) sends, parameters first."""
    if cfg.pipeline.backend == "pod":
        return [_parameters(model)]
    p = cfg.pipeline
    game = cfg.game_config()
    worlds = p.envs_per_actor // p.ring_size  # of one actor group
    columns = worlds * cfg.pool.learning_agents(game.max_hiders, game.max_seekers)
    out = [
        _parameters(model),
        MessageSize(
            f"a sample chunk (one per actor group: {columns} agent columns x {p.chunk_len} steps)",
            _chunk(cfg, columns),
            "smaller chunks (pipeline.envs_per_actor / pipeline.ring_size worlds per group, "
            "pipeline.chunk_len steps)",
        ),
    ]
    if p.launcher == "ray" or not p.shared_memory:
        out += _inference(cfg, worlds * game.max_agents)
    return out


def check_message_sizes(cfg: RunConfig, model: ActorCritic) -> list[MessageSize]:
    """The run's messages; ConfigError naming each one larger than `pipeline.max_message_mb`."""
    cap_mb = cfg.pipeline.max_message_mb
    cap = cap_mb * _MiB
    sizes = message_sizes(cfg, model)
    over = [m for m in sizes if m.nbytes > cap]
    if over:
        need = max(math.ceil(m.nbytes / _MiB) for m in over)
        lines = "; ".join(
            f"{m.name} is {m.nbytes:,} bytes ({m.nbytes / _MiB:.1f} MiB): make it smaller with "
            f"{m.smaller}"
            for m in over
        )
        raise ConfigError(
            f"config: pipeline.max_message_mb={cap_mb} ({cap:,} bytes) is smaller than "
            f"messages this run sends, which every socket would refuse: {lines}; or raise "
            f"pipeline.max_message_mb to at least {need}"
        )
    return sizes
