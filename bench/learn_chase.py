"""Learning proof: a PPO seeker learns to keep a randomly moving hider in sight (`chase` preset).

The `chase` preset is 1 hider v 1 seeker in the empty 6 m arena with outer walls, horizon 40,
no preparation phase. The hider acts uniformly at random over its MultiDiscrete action; the
seeker is an `ActorCritic` trained with `PPO` on its own experience only. In an empty arena the
line of sight is always clear, so "in sight" means "inside the 135-degree vision cone": a seeker
that turns at random keeps the hider in sight about 135/360 ≈ 0.37 of the time, one that tracks
it close to 1.

Metric (`in_sight`): fraction of env steps after which the seeker sees the hider (its
`mask_aa_obs`; the seeker's reward is +1 on exactly those steps and -1 otherwise). It is
reported during training (the sampled policy on its own rollouts) against env frames (world
steps) and wall-clock, and at the end on a fresh evaluation (new seeds, sampled actions) next to
the random seeker measured the same way.

Loop (CleanRL style, one process): `rollout` steps a `VectorGame` of W worlds (auto-reset) for
one chunk of `--chunk-len` steps, recording the seekers' experience in the time-major `Chunk`
format (truncation values from the finished episode's final observation), then `PPO.update`
trains on it. Training stops at
`--minutes` of wall-clock or `--max-frames` frames, whichever comes first.

    python bench/learn_chase.py [--minutes 10] [--seed 0] [--worlds 64] [--threads 2]

The last line printed is `SUMMARY {json}` for scripts. `--threads 2` suits an otherwise idle
2-core machine (the PPO update is about 1.6x faster than on one thread); when other jobs hold the
cores use `--threads 1`: two torch threads competing for a busy core made acting and updates 10x
slower or worse in our measurements.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import platform
import subprocess
import time
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np
import torch
from tqdm import tqdm

from hns_train.agents import PPO, ActorCritic, ChunkRecorder, NetworkConfig, PPOConfig
from hns_train.agents.chunks import Chunk
from hns_train.envs.config import make_config
from hns_train.envs.observations import observation_shapes
from hns_train.envs.vector import VectorGame

TARGET_IN_SIGHT = 0.8


@dataclass
class Rollout:
    """W worlds with auto-reset plus what the seekers carry between steps and between chunks."""

    env: VectorGame
    rng: np.random.Generator  # the hiders' (and a random seeker's) actions
    obs: dict[str, np.ndarray]  # seekers' current observation, (B, ...) with B = W * seekers
    state: np.ndarray  # (B, 4, H) LSTM state before acting on `obs`
    episode_start: np.ndarray  # (B,) `obs` is the first of an episode

    @property
    def seekers(self) -> np.ndarray:
        return np.flatnonzero(~self.env.game.is_hider)

    @classmethod
    def start(cls, env: VectorGame, seed: int, lstm_dim: int) -> Rollout:
        batch = env.n_worlds * int((~env.game.is_hider).sum())
        state = np.zeros((batch, 4, lstm_dim), np.float32)
        r = cls(env, np.random.default_rng(seed), {}, state, np.ones(batch, bool))
        r.obs = r.seeker_rows(env.reset())
        return r

    def seeker_rows(self, per_world: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        """(W, A, ...) arrays -> the seekers' rows, (W * seekers, ...)."""
        batch = self.env.n_worlds * len(self.seekers)
        return {k: v[:, self.seekers].reshape(batch, *v.shape[2:]) for k, v in per_world.items()}


def rollout(
    r: Rollout,
    model: ActorCritic | None,
    num_steps: int,
    recorder: ChunkRecorder | None = None,
) -> np.ndarray:
    """Step every world `num_steps` times; return in_sight (num_steps, B).

    `model` None: the seeker acts uniformly at random (the baseline). With a `recorder`, the
    seekers' steps are added to it; the caller finishes the chunk with `bootstrap_value(r)`.
    `VectorGame` resets finished worlds itself and hands over their final observation, whose
    value is the truncation bootstrap, continuing the finished episode's LSTM state.
    """
    env, seekers = r.env, r.seekers
    in_sight = np.zeros((num_steps, len(r.episode_start)), bool)
    for t in range(num_steps):
        actions = r.rng.integers(0, env.action_nvec, size=(env.n_worlds, env.n_agents, 5))
        if model is not None:
            out = model.act(r.obs, r.state, r.episode_start)
            actions[:, seekers] = out.actions.reshape(env.n_worlds, len(seekers), 5)
        step = env.step(actions)
        ends = np.repeat(step.truncated, len(seekers))
        final = r.seeker_rows(step.final_obs)  # rows valid where `ends`
        next_obs = r.seeker_rows(step.obs)
        # Vision after this step: the finished episode's last observation where it ended. In
        # chase the seeker's only other agent is the hider.
        in_sight[t] = np.where(ends, final["mask_aa_obs"][:, 0], next_obs["mask_aa_obs"][:, 0])
        if recorder is not None:
            truncated_value = np.zeros(len(ends), np.float32)
            if ends.any():
                final_obs = {k: v[ends] for k, v in final.items()}
                truncated_value[ends] = model.act(final_obs, out.state[ends]).values
            recorder.add(
                obs=r.obs,
                state=r.state,
                episode_start=r.episode_start,
                actions=out.actions,
                logp=out.logp,
                values=out.values,
                rewards=step.rewards[:, seekers].ravel(),
                truncated=ends,
                truncated_value=truncated_value,
            )
        r.obs, r.episode_start = next_obs, ends
        if model is not None:
            r.state = out.state
    return in_sight


def bootstrap_value(r: Rollout, model: ActorCritic) -> np.ndarray:
    """V(o_T) for the observation after a chunk's last step."""
    return model.act(r.obs, r.state, r.episode_start).values


def evaluate(
    model: ActorCritic | None, worlds: int, episodes: int, seed: int, lstm_dim: int
) -> float:
    """Fraction of steps in sight over `episodes` fresh episodes per world (None: random)."""
    env = VectorGame(make_config("chase"), worlds, seed=seed)
    torch.manual_seed(seed)
    r = Rollout.start(env, seed + 1, lstm_dim)
    return float(rollout(r, model, episodes * env.cfg.horizon).mean())


@dataclass
class Settings:
    minutes: float = 10.0
    max_frames: int = 0  # 0 = no frame budget
    seed: int = 0
    worlds: int = 32
    chunk_len: int = 40
    threads: int = 2
    eval_worlds: int = 32
    eval_episodes: int = 2
    network: NetworkConfig = dataclasses.field(default_factory=NetworkConfig)
    # The paper reuses each sample ~4 times by replaying chunks across optimisation steps; a
    # serial loop gets the same reuse from 4 epochs over each fresh batch.
    ppo: PPOConfig = dataclasses.field(default_factory=lambda: PPOConfig(epochs=4, minibatches=4))

    def __post_init__(self) -> None:
        for name in ("worlds", "threads", "eval_worlds", "eval_episodes"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")
        if self.minutes <= 0 or self.max_frames < 0:
            raise ValueError(
                f"minutes must be > 0 and max_frames >= 0, got {self.minutes}, {self.max_frames}"
            )
        if self.chunk_len < 1 or self.chunk_len % self.ppo.bptt_len:
            raise ValueError(
                f"chunk_len ({self.chunk_len}) must be a positive multiple of the BPTT length "
                f"({self.ppo.bptt_len})"
            )


def train(s: Settings) -> dict:
    torch.set_num_threads(s.threads)
    torch.manual_seed(s.seed)
    cfg = make_config("chase")
    model = ActorCritic(observation_shapes(cfg), s.network, device="cpu")
    ppo = PPO(model, s.ppo)
    env = VectorGame(cfg, s.worlds, seed=s.seed)
    r = Rollout.start(env, s.seed + 1, s.network.lstm_dim)
    recorder = ChunkRecorder(s.chunk_len, s.ppo.bptt_len)

    budget = s.minutes * 60
    curve: list[dict] = []  # one row per update
    frames, reached = 0, None
    start = time.perf_counter()
    bar = tqdm(total=round(budget), unit="s", desc="learn_chase", mininterval=2.0)
    while True:
        in_sight = rollout(r, model, s.chunk_len, recorder)
        chunk: Chunk = recorder.finish(bootstrap_value(r, model), ppo.version)
        stats = ppo.update(chunk)
        frames += s.chunk_len * s.worlds
        seconds = time.perf_counter() - start
        curve.append(
            dict(
                frames=frames,
                seconds=round(seconds, 1),
                in_sight=round(float(in_sight.mean()), 4),
                entropy=round(stats["entropy"], 3),
                explained_variance=round(stats["explained_variance"], 3),
            )
        )
        # First time the mean over the last 5 updates (>= 5 x W x T frames) reaches the target.
        recent = float(np.mean([c["in_sight"] for c in curve[-5:]]))
        if reached is None and len(curve) >= 5 and recent >= TARGET_IN_SIGHT:
            reached = dict(frames=frames, seconds=round(seconds, 1))
        bar.update(min(round(seconds), bar.total) - bar.n)
        bar.set_postfix(frames=frames, in_sight=f"{recent:.3f}", ent=f"{stats['entropy']:.2f}")
        if seconds >= budget or (s.max_frames and frames >= s.max_frames):
            break
    bar.close()
    train_seconds = time.perf_counter() - start

    eval_seed = s.seed + 10_000  # episodes the seeker never trained on
    lstm = s.network.lstm_dim
    trained = evaluate(model, s.eval_worlds, s.eval_episodes, eval_seed, lstm)
    random_seeker = evaluate(None, s.eval_worlds, s.eval_episodes, eval_seed, lstm)
    return dict(
        curve=curve,
        frames=frames,
        updates=ppo.version,
        train_seconds=round(train_seconds, 1),
        frames_per_second=round(frames / train_seconds, 1),
        reached_target=reached,
        final_train_in_sight=round(float(np.mean([c["in_sight"] for c in curve[-5:]])), 4),
        eval_in_sight=round(trained, 4),
        eval_random_in_sight=round(random_seeker, 4),
        eval_steps=s.eval_worlds * s.eval_episodes * cfg.horizon,
        parameters=model.num_parameters(),
    )


def machine() -> dict:
    model_name = platform.processor() or platform.machine()
    try:
        for line in subprocess.run(["lscpu"], capture_output=True, text=True).stdout.splitlines():
            if line.startswith("Model name:"):
                model_name = line.split(":", 1)[1].strip()
    except OSError:
        pass
    return dict(
        cpu=model_name,
        cpus=os.cpu_count(),
        load_average=[round(x, 2) for x in os.getloadavg()],
        torch=torch.__version__,
        date=time.strftime("%Y-%m-%d %H:%M"),
    )


def thin(curve: list[dict], rows: int = 12) -> list[dict]:
    """About `rows` evenly spaced rows of the curve, always keeping the last."""
    marks = np.unique(np.linspace(0, len(curve) - 1, min(len(curve), rows)).round().astype(int))
    return [curve[i] for i in marks]


def print_report(s: Settings, result: dict, before: dict) -> None:
    curve = result["curve"]
    print(
        f"\nchase: PPO seeker vs uniformly random hider, {s.worlds} worlds x {s.chunk_len}-step "
        f"chunks, {result['parameters']:,} parameters, {s.threads} torch threads"
    )
    print(f"machine: {before['cpu']}, load average at start {before['load_average']}")
    print("in_sight = fraction of steps with the hider in the seeker's sight (sampled policy)")
    print(f"{'frames':>9} {'seconds':>8} {'in_sight':>9} {'entropy':>8}")
    for c in thin(curve):
        print(f"{c['frames']:9d} {c['seconds']:8.1f} {c['in_sight']:9.3f} {c['entropy']:8.2f}")
    reached = result["reached_target"]
    print(
        f"target {TARGET_IN_SIGHT} (mean of 5 updates) reached: "
        + (f"after {reached['frames']} frames, {reached['seconds']} s" if reached else "no")
    )
    print(
        f"fresh evaluation ({result['eval_steps']} steps): trained seeker "
        f"{result['eval_in_sight']:.3f}, random seeker {result['eval_random_in_sight']:.3f}"
    )
    print(
        f"{result['frames']} frames in {result['train_seconds']} s "
        f"({result['frames_per_second']} frames/s), {result['updates']} updates"
    )


def parse_args() -> Settings:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    d = Settings()
    p.add_argument("--minutes", type=float, default=d.minutes, help="wall-clock training budget")
    p.add_argument("--max-frames", type=int, default=d.max_frames, help="frame budget (0: none)")
    p.add_argument("--seed", type=int, default=d.seed)
    p.add_argument("--worlds", type=int, default=d.worlds)
    p.add_argument("--chunk-len", type=int, default=d.chunk_len)
    p.add_argument("--threads", type=int, default=d.threads, help="torch.set_num_threads")
    p.add_argument("--eval-worlds", type=int, default=d.eval_worlds)
    p.add_argument("--eval-episodes", type=int, default=d.eval_episodes)
    p.add_argument("--embed-dim", type=int, default=d.network.embed_dim)
    p.add_argument("--dense-dim", type=int, default=d.network.dense_dim)
    p.add_argument("--lstm-dim", type=int, default=d.network.lstm_dim)
    p.add_argument("--lr", type=float, default=d.ppo.lr)
    p.add_argument("--epochs", type=int, default=d.ppo.epochs)
    p.add_argument("--minibatches", type=int, default=d.ppo.minibatches)
    a = p.parse_args()
    return Settings(
        minutes=a.minutes,
        max_frames=a.max_frames,
        seed=a.seed,
        worlds=a.worlds,
        chunk_len=a.chunk_len,
        threads=a.threads,
        eval_worlds=a.eval_worlds,
        eval_episodes=a.eval_episodes,
        network=NetworkConfig(embed_dim=a.embed_dim, dense_dim=a.dense_dim, lstm_dim=a.lstm_dim),
        ppo=PPOConfig(lr=a.lr, epochs=a.epochs, minibatches=a.minibatches),
    )


def main() -> None:
    s = parse_args()
    before = machine()
    result = train(s)
    print_report(s, result, before)
    summary = {**result, "curve": thin(result["curve"]), "target_in_sight": TARGET_IN_SIGHT}
    summary.update(
        settings=dataclasses.asdict(s), machine=before, load_average_end=list(os.getloadavg())
    )
    print("SUMMARY " + json.dumps(summary, sort_keys=True))


if __name__ == "__main__":
    main()
