"""Per-step cost of a transfer task's hook in the game, against the same world without the task.

For each task preset: steps of `HideAndSeekGame` with random actions at N worlds (one thread),
timing the whole step and, separately, the task's own calls (`act`, `lockable`, `pins` and
`after_step`, each wrapped with a timer; applying what they return is the game's step). The
plain run is the task's world with `task="hide_and_seek"` where that world is a game
(count_based: the quadrant world with the same prep_fraction 0); object_counting has no game of
its own, so only its hook time is shown. Rounds alternate task and plain runs so that both see
the same machine load; the median round is printed.

    python bench/task_cost.py [--tasks count_based object_counting] [--worlds 1 16]
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np

from hns_train.envs.config import make_config
from hns_train.envs.game import HideAndSeekGame

PLAIN = {"count_based": dict(task="hide_and_seek")}  # the same world as a game


def _timed(fn, total: list[float]):
    def call(*args):
        t0 = time.perf_counter()
        out = fn(*args)
        total[0] += time.perf_counter() - t0
        return out

    return call


def run(preset: str, worlds: int, steps: int, seed: int, **overrides) -> tuple[float, float]:
    """(us per step, us per step in the task's hook) over `steps` steps after a warm-up."""
    cfg = make_config(preset, **overrides)
    game = HideAndSeekGame(cfg, n_worlds=worlds, seed=seed)
    game.reset()
    rng = np.random.default_rng(seed)
    actions = rng.integers(0, game.action_nvec, size=(steps, worlds, game.n_agents, 5))
    for a in actions[: cfg.horizon]:  # warm-up: compiled kernels, first episode
        game.step(a)
    hook = [0.0]
    if game.task is not None:  # the hooks the game calls every step
        for name in ("act", "lockable", "pins", "after_step"):
            setattr(game.task, name, _timed(getattr(game.task, name), hook))
    t0 = time.perf_counter()
    for a in actions:
        _, _, truncated, _ = game.step(a)
        if truncated.any():
            game.reset(np.flatnonzero(truncated))
    total = time.perf_counter() - t0
    return 1e6 * total / steps, 1e6 * hook[0] / steps


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", nargs="+", default=["count_based", "object_counting"])
    parser.add_argument("--worlds", nargs="+", type=int, default=[1, 16])
    parser.add_argument("--steps", type=int, default=400)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    print("task, worlds: step us (hook us) | plain step us | step - plain (per world-step)")
    for task in args.tasks:
        for n in args.worlds:
            with_task, hook, plain = [], [], []
            for r in range(args.rounds):
                step, h = run(task, n, args.steps, seed=r)
                with_task.append(step)
                hook.append(h)
                if task in PLAIN:
                    plain.append(run(task, n, args.steps, seed=r, **PLAIN[task])[0])
            step, h = statistics.median(with_task), statistics.median(hook)
            line = f"{task}, N={n}: {step:8.1f} us ({h:6.1f} us in the hook)"
            if plain:
                p = statistics.median(plain)
                line += f" | {p:8.1f} us | {step - p:+7.1f} us ({(step - p) / n:+6.2f} us)"
            print(line, flush=True)


if __name__ == "__main__":
    main()
