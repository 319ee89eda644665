"""How many contacts, constraint rows and solver iterations the Warp worlds need in play.

Random play that grabs and locks often (each agent's grab and lock bits 1 with probability
--grab), every world of a `WarpGame` on Warp's device, --episodes episodes: after every env
step it reads, per world, the contacts (`contact.worldid` of the `nacon` active ones), the
constraint rows (`nefc`) and the Newton iterations of the last substep (`solver_niter`), and
the overflow bits of all substeps. Run once with generous buffers (--nconmax, --njmax) to see
the need, then with the defaults (no flags) to check that they hold it: the physics
warnings (overflows) must be 0. Prints one line per preset and `WARP_CAPACITY {json}`.

    python bench/warp_capacity.py --preset quadrant randomwalls [--worlds 16] [--episodes 1]
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import time

import numpy as np
import torch

from hns_train.envs.config import make_config
from hns_train.envs.warp.game import WarpGame
from hns_train.envs.warp.physics import PhysicsConfig


def measure(preset, n_worlds, episodes, grab, seed, physics, device) -> dict:
    cfg = make_config(preset)
    game = WarpGame(cfg, n_worlds, seed=seed, device=device, physics=physics)
    game.reset()
    d = game.worlds.d
    rng = np.random.default_rng(seed)
    contacts, rows, iters = [], [], []
    t0 = time.perf_counter()
    for _ in range(episodes * cfg.horizon):
        act = rng.integers(0, game.action_nvec, size=(n_worlds, game.n_agents, 5))
        act[..., 3:] = rng.random((n_worlds, game.n_agents, 2)) < grab
        game.step(torch.as_tensor(act, device=game.dev), check=False)
        n = int(d.nacon.numpy()[0])
        world = d.contact.worldid.numpy()[:n]
        contacts.append(np.bincount(world, minlength=n_worlds))
        rows.append(d.nefc.numpy().copy())
        iters.append(d.solver_niter.numpy().copy())
    seconds = time.perf_counter() - t0
    contacts, rows, iters = (np.stack(x) for x in (contacts, rows, iters))
    out = {
        "preset": preset,
        "worlds": n_worlds,
        "steps": episodes * cfg.horizon,
        "nconmax": game.worlds.nconmax,
        "njmax": game.worlds.njmax,
        "iterations": int(game.worlds.template.opt.iterations),
        "max_contacts_per_world": int(contacts.max()),
        "p99_contacts_per_world": float(np.percentile(contacts, 99)),
        "max_contacts_all_worlds": int(contacts.sum(1).max()),
        "max_rows_per_world": int(rows.max()),
        "p99_rows_per_world": float(np.percentile(rows, 99)),
        "max_solver_iterations": int(iters.max()),
        "p99_solver_iterations": float(np.percentile(iters, 99)),
        "mean_solver_iterations": float(iters.mean()),
        "physics_warnings": game.read_warnings(),
        "ms_per_step": 1e3 * seconds / (episodes * cfg.horizon),
    }
    game.close()
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--preset", nargs="+", default=["quadrant", "randomwalls"])
    p.add_argument("--worlds", type=int, default=16)
    p.add_argument("--episodes", type=int, default=1)
    p.add_argument("--grab", type=float, default=0.5)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--nconmax", type=int, default=None)
    p.add_argument("--njmax", type=int, default=None)
    p.add_argument("--iterations", type=int, default=None, help="default: PhysicsConfig's")
    p.add_argument("--device", default=None)
    args = p.parse_args()
    given = {k: getattr(args, k) for k in ("nconmax", "njmax", "iterations")}
    physics = PhysicsConfig(**{k: v for k, v in given.items() if v is not None})
    print(f"# {datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC")
    print(f"# load average at start: {os.getloadavg()}")
    results = []
    for preset in args.preset:
        r = measure(preset, args.worlds, args.episodes, args.grab, args.seed, physics, args.device)
        results.append(r)
        print(
            f"{preset}: {r['worlds']} worlds x {r['steps']} steps | contacts/world max "
            f"{r['max_contacts_per_world']} (p99 {r['p99_contacts_per_world']:.0f}; nconmax "
            f"{r['nconmax']}) | rows/world max {r['max_rows_per_world']} (p99 "
            f"{r['p99_rows_per_world']:.0f}; njmax {r['njmax']}) | solver iterations max "
            f"{r['max_solver_iterations']} (p99 {r['p99_solver_iterations']:.0f}, mean "
            f"{r['mean_solver_iterations']:.1f}; cap {r['iterations']}) | overflows "
            f"{r['physics_warnings']} | {r['ms_per_step']:.0f} ms/step",
            flush=True,
        )
    print(f"# load average at end: {os.getloadavg()}")
    print("WARP_CAPACITY " + json.dumps(results))


if __name__ == "__main__":
    main()
