"""Actor worker: the chunks it ships, checked against the game on real sockets and workers."""

import numpy as np
import torch

from hns_train.agents.chunks import Chunk
from hns_train.agents.opponents import NOOP, RANDOM
from hns_train.config import CONFIG_DIR, load_config
from hns_train.distributed.actor import MAX_PENDING_CHUNKS, ActorWorker
from hns_train.distributed.contract import state_dict_to_arrays
from hns_train.distributed.launchers import make_endpoints
from hns_train.distributed.policy import PolicyWorker
from hns_train.distributed.streams import ControlServer, ParamPublisher, SampleReceiver
from hns_train.distributed.worker import WorkerSpec


def small_chase(tmp_path, *overrides):
    return load_config(
        CONFIG_DIR / "chase.yaml",
        [
            f"runs_dir={tmp_path}",
            "pipeline.launcher=serial",
            "pipeline.envs_per_actor=6",
            "pipeline.chunk_len=40",
            "agent.network.embed_dim=32",
            "agent.network.attention_heads=2",
            "agent.network.dense_dim=32",
            "agent.network.lstm_dim=16",
            *overrides,
        ],
    )


def start_workers(cfg, tmp_path, shared_rows=None):
    """Policy and actor workers on inproc sockets, with the trainer's end played by the test;
    requests through shared memory in folder `shared_rows` when it is given."""
    endpoints = make_endpoints(cfg, "inproc")
    if shared_rows is not None:
        endpoints["shared_rows"] = str(shared_rows)
    control = ControlServer(endpoints["control"])
    samples = SampleReceiver(endpoints["samples"][0])
    params = ParamPublisher(endpoints["params"])
    spec = dict(config=cfg.to_dict(), run_dir=str(tmp_path / "run"), endpoints=endpoints)
    policy = PolicyWorker(WorkerSpec("policy", 0, **spec))
    actor = ActorWorker(WorkerSpec("actor", 0, **spec))
    for worker in (policy, actor):
        worker.poll_ms = 0
    params.publish(0, state_dict_to_arrays(policy.model.state_dict()))
    return policy, actor, samples, params, control


def collect_chunks(cfg, tmp_path, n: int, shared_rows=None) -> list[Chunk]:
    torch.manual_seed(0)  # the same initial weights and action samples in every call
    policy, actor, samples, params, control = start_workers(cfg, tmp_path, shared_rows)
    chunks = []
    for _ in range(20_000):
        policy.step()
        actor.step()
        message = samples.recv(timeout_ms=0)
        if message is not None:
            chunks.append(Chunk.from_arrays(message.arrays).validate())
        if len(chunks) == n:
            break
    for closable in (actor, policy, samples, params, control):
        closable.close()
    assert len(chunks) == n
    return chunks


def test_chunks_follow_episodes_rewards_and_the_learning_team(tmp_path):
    cfg = small_chase(tmp_path)
    horizon = cfg.game_config().horizon
    chunks = collect_chunks(cfg, tmp_path, 4)
    for chunk in chunks:
        # Only the seekers (the learning team) are shipped: one column per world of a group.
        assert chunk.batch_size == 3 and chunk.num_steps == 40
        assert (chunk.obs["observation_self"][..., 8] == 0).all()  # is_hider = 0
        # Chunks are aligned with episodes: start on the first step, end with a truncation.
        assert chunk.episode_start[0].all() and not chunk.episode_start[1:].any()
        ends = np.zeros(horizon, bool)
        ends[-1] = True
        np.testing.assert_array_equal(chunk.truncated, np.repeat(ends[:, None], 3, 1))
        assert np.all(chunk.truncated_value[-1] != 0)  # V(final observation) was asked for
        # The seeker's reward is +1 exactly when the next observation shows the hider.
        seen_next = chunk.obs["mask_aa_obs"][1:, :, 0] > 0
        np.testing.assert_array_equal(chunk.rewards[:-1], np.where(seen_next, 1.0, -1.0))
        # The LSTM state is carried inside the episode (stored every bptt_len steps).
        assert np.abs(chunk.lstm_state[0]).sum() == 0 and np.abs(chunk.lstm_state[1]).sum() > 0


def test_requests_through_shared_memory_give_the_same_chunks_as_arrays_on_the_wire(tmp_path):
    """Same seeds, same weights, same action samples: the shared-memory path changes where
    a request's arrays lie, not one number of what is learned from. Eight chunks are four
    40-step episodes per group: resets, final values and reused slots are all covered."""
    folder = tmp_path / "rows"
    folder.mkdir()
    # one name per run: zmq frees an inproc address after close() in the background
    wire = collect_chunks(small_chase(tmp_path, "name=wire"), tmp_path / "wire", 8)
    cfg = small_chase(tmp_path, "name=shared")
    shared = collect_chunks(cfg, tmp_path / "shared", 8, shared_rows=folder)
    for a, b in zip(wire, shared, strict=True):
        left, right = a.to_arrays(), b.to_arrays()
        assert left.keys() == right.keys()
        for k in left:
            np.testing.assert_array_equal(left[k], right[k], err_msg=k)
    assert not any(folder.iterdir()), "an actor left its block behind"


def test_an_actor_without_room_for_its_blocks_sends_arrays(tmp_path, caplog):
    """A block that cannot be made (here: no folder; in practice a full /dev/shm) is a warning,
    and that group's requests carry their arrays: the actor still ships chunks."""
    cfg = small_chase(tmp_path, "name=noroom")
    policy, actor, samples, params, control = start_workers(cfg, tmp_path, tmp_path / "none")
    assert all(group.block is None for group in actor.groups)
    assert "requests of group 0 carry their arrays" in caplog.text
    message = None
    for _ in range(20_000):
        policy.step()
        actor.step()
        message = samples.recv(timeout_ms=0)
        if message is not None:
            break
    for closable in (actor, policy, samples, params, control):
        closable.close()
    assert message is not None and Chunk.from_arrays(message.arrays).validate().num_steps == 40


def test_an_actor_stops_simulating_when_the_trainer_takes_nothing(tmp_path):
    cfg = small_chase(tmp_path)
    policy, actor, samples, params, control = start_workers(cfg, tmp_path)
    frames = []
    for _ in range(3000):  # nobody reads `samples`: its queue and the sender's fill up
        policy.step()
        actor.step()
        frames.append(actor._frames)
    assert len(actor.pending_chunks) == MAX_PENDING_CHUNKS
    assert frames[-1] == frames[-500] > 0, "the actor kept stepping with a full sample stream"
    first = samples.recv(timeout_ms=1000)  # the trainer comes back: the actor resumes
    assert first is not None
    for _ in range(200):
        samples.recv(timeout_ms=0)
        policy.step()
        actor.step()
    assert actor._frames > frames[-1]
    for closable in (actor, policy, samples, params, control):
        closable.close()


def test_fixed_opponents_act_in_the_games_own_action_bins(tmp_path):
    # Every opponent episode is a random or no-op team, on a game with 7 bins instead of 11.
    bins = ["game.action_bins=7", "agent.network.move_bins=7"]
    fixed = ["pool.p_latest=0", "pool.p_random=0.5", "pool.p_noop=0.5"]
    cfg = small_chase(tmp_path, *bins, *fixed)
    policy, actor, samples, params, control = start_workers(cfg, tmp_path)
    random = policy._fixed(RANDOM, 500).cpu().numpy()
    assert random.min() >= 0 and random[:, :3].max() == 6  # all 7 move bins, none beyond
    np.testing.assert_array_equal(policy._fixed(NOOP, 2).cpu().numpy()[:, :3], 3)  # the middle
    for _ in range(300):  # a whole episode of each group against fixed teams, no refused action
        policy.step()
        actor.step()
    counters = actor.counters()
    assert counters["frames"] >= 300 and counters["rejected"] == 0
    for closable in (actor, policy, samples, params, control):
        closable.close()
