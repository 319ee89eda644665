"""Synthetic observations and rollouts that follow the env contract, for the tests and
bench/agents_speed.py.

No env is involved: features are standard normal, masks random with visible ⊆ exists (as the
env guarantees), rewards ±1, and every `episode_len` steps an episode is truncated. Rollouts go
through the same path an actor uses (`ActorCritic.act` + `ChunkRecorder`), including the extra
value evaluation of each finished episode's final observation.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from hns_train.agents.chunks import Chunk, ChunkRecorder
from hns_train.agents.policy import ActorCritic
from hns_train.envs.contract import ALL_ENTITY_KEYS, is_mask_key


def random_observations(
    shapes: Mapping[str, Sequence[int]],
    batch_shape: Sequence[int],
    rng: np.random.Generator,
    p_exists: float = 0.8,
    p_visible: float = 0.5,
) -> dict[str, np.ndarray]:
    """Observations of the given shapes with leading `batch_shape`."""
    batch_shape = tuple(batch_shape)
    obs = {
        k: rng.normal(size=batch_shape + tuple(s)).astype(np.float32)
        for k, s in shapes.items()
        if not is_mask_key(k)
    }
    for kind in ALL_ENTITY_KEYS:
        if kind.exists_mask not in shapes:
            continue
        size = batch_shape + tuple(shapes[kind.exists_mask])
        exists = rng.random(size) < p_exists
        visible = exists & (rng.random(size) < p_visible)
        obs[kind.exists_mask] = exists.astype(np.float32)
        obs[kind.visible_mask] = visible.astype(np.float32)
    return obs


def synthetic_chunk(
    model: ActorCritic,
    num_steps: int,
    batch_size: int,
    bptt_len: int,
    rng: np.random.Generator,
    episode_len: int | None = None,
    first_step: int = 0,
    policy_version: int = 0,
) -> Chunk:
    """Roll `model` out on random observations for one chunk of B agent streams.

    Episodes last `episode_len` steps (None: no boundary); the chunk starts `first_step` steps
    into the first episode, so boundaries can fall anywhere inside it.
    """
    shapes = model.layout.shapes
    recorder = ChunkRecorder(num_steps, bptt_len)
    state = model.initial_state(batch_size)
    for t in range(first_step, first_step + num_steps):
        obs = random_observations(shapes, (batch_size,), rng)
        start = np.full(batch_size, t % episode_len == 0 if episode_len else t == 0)
        out = model.act(obs, state, episode_start=start)
        recorder.record_inputs(obs, state, start)
        final_values = None
        if episode_len is not None and (t + 1) % episode_len == 0:
            final_obs = random_observations(shapes, (batch_size,), rng)
            final_values = model.act(final_obs, out.state).values
        rewards = rng.choice([-1.0, 1.0], size=batch_size).astype(np.float32)
        recorder.record_outputs(out.actions, out.logp, out.values, rewards)
        if final_values is not None:
            recorder.end_episodes(final_values)
        state = out.state
    next_obs = random_observations(shapes, (batch_size,), rng)
    bootstrap = model.act(next_obs, state).values
    return recorder.finish(bootstrap, policy_version)
