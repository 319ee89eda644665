"""A population of learners against one learner at the same total frames: does the tournament pay?

    python bench/population.py [--games chase quadrant_cpu] [--frames 100000] [--members 4]
        [--crippled 1] [--runs-dir DIR] [--eval-episodes 128] [--eval-worlds 32] [--seed S]
        [--quick] [--quiet] [section.key=value ...]

Per game (a name under configs/ or a YAML path), two training runs, one after the other, each a
subprocess `python -m hns_train.train --config C ... pipeline.backend=pod stop.frames=F
logging.wandb=disabled` (the overrides after the options go to both):
1. the population: `population.members=M` with member `--crippled` given `agent.ppo.lr=0`
   (`population.overrides=['1:agent.ppo.lr=0']`): it cannot learn, so exploit should replace it
   with a copy of a stronger member;
2. one learner: `population.members=1` (today's plain run), the same `stop.frames`.
Then cross-play (`hns_train.eval.crossplay`, the same seeds for both) of each final policy
against the untrained network: the population's best member by league rating (`population_view.
best_member`; its newest checkpoint) against the league's `untrained.pt` anchor, and the single
learner's newest checkpoint against its pool version 0. Gains are paired, with standard errors.

From the population's files: `exploits` (population.json counters), `best_member`,
`crippled_replaced_at_version` (the crippled member's version at its first exploit in
lineage.jsonl, null if never replaced).

Prints a table per game and a last line `POPULATION {json}` with `members`, `frames`,
`exploits`, `best_member`, `crippled_replaced_at_version` (each game -> value) and `games`
(game -> the population's and the single learner's figures and cross-play gains with SE).
`--quick`: a few minutes' smoke of the same path (small frames, few evaluation episodes).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from hns_train.agents.population import member_name  # noqa: E402
from hns_train.config import CONFIG_DIR  # noqa: E402
from hns_train.eval.population_view import (  # noqa: E402
    LEAGUE,
    LINEAGE,
    best_member,
    first_exploit_version,
    read_manifest,
)
from hns_train.jsonl import read_records  # noqa: E402

GAMES = ("chase", "quadrant_cpu")
FRAMES, QUICK_FRAMES = 100_000, 25_600
EVAL_EPISODES, QUICK_EVAL_EPISODES = 128, 8
EVAL_WORLDS, QUICK_EVAL_WORLDS = 32, 4
CRIPPLE = "agent.ppo.lr=0"  # a member that cannot learn
LOG_TAIL = 40  # lines of a failed run's log shown
GAIN_KEYS = ("seeker_gain", "seeker_gain_se", "hider_gain", "hider_gain_se")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--games", nargs="+", default=list(GAMES), help="configs/ names or paths")
    parser.add_argument("--frames", type=int, default=0, help=f"total frames (default {FRAMES})")
    parser.add_argument("--members", type=int, default=4)
    parser.add_argument("--crippled", type=int, default=1, help="member given agent.ppo.lr=0")
    parser.add_argument("--runs-dir", default="", help="keep the runs here (default: a temp dir)")
    parser.add_argument("--eval-episodes", type=int, default=0)
    parser.add_argument("--eval-worlds", type=int, default=0)
    parser.add_argument("--seed", type=int, default=2_000_003, help="evaluation seeds start here")
    parser.add_argument("--quick", action="store_true", help="a few minutes' smoke")
    parser.add_argument("--quiet", action="store_true", help="no progress bar")
    parser.add_argument("overrides", nargs="*", help="section.key=value for both runs")
    args = parser.parse_args(argv)
    args.frames = args.frames or (QUICK_FRAMES if args.quick else FRAMES)
    args.eval_episodes = args.eval_episodes or (
        QUICK_EVAL_EPISODES if args.quick else EVAL_EPISODES
    )
    args.eval_worlds = args.eval_worlds or (QUICK_EVAL_WORLDS if args.quick else EVAL_WORLDS)
    if args.members < 2:
        parser.error(
            f"--members {args.members}: a population needs at least 2 (1 is the plain run)"
        )
    if not 0 <= args.crippled < args.members:
        parser.error(f"--crippled {args.crippled}: a member index in [0, {args.members})")
    if args.frames <= 0 or args.eval_episodes < 2 or args.eval_worlds < 1:
        parser.error("--frames must be > 0, --eval-episodes >= 2, --eval-worlds >= 1")
    for bad in [o for o in args.overrides if "=" not in o]:
        parser.error(f"override {bad!r}: give section.key=value")
    args.games = [config_path(g) for g in args.games]
    return args


def config_path(game: str) -> Path:
    """A configs/ name (`chase`) or a YAML path; SystemExit names the choices otherwise."""
    path = Path(game)
    if path.suffix in (".yaml", ".yml") and path.is_file():
        return path
    named = CONFIG_DIR / f"{game}.yaml"
    if named.is_file():
        return named
    choices = sorted(p.stem for p in CONFIG_DIR.glob("*.yaml"))
    raise SystemExit(f"error: --games {game!r}: no such config; use a path or one of {choices}")


def train_command(
    config: Path,
    members: int,
    crippled: int | None,
    frames: int,
    name: str,
    runs_dir: Path,
    overrides: list[str],
) -> list[str]:
    """The argv of one training run (a population when members > 1)."""
    cmd = [sys.executable, "-m", "hns_train.train", "--config", str(config)]
    cmd.append(f"population.members={members}")
    if crippled is not None:
        cmd.append(f"population.overrides=['{crippled}:{CRIPPLE}']")
    cmd += [
        "pipeline.backend=pod",
        f"stop.frames={frames}",
        f"name={name}",
        f"runs_dir={runs_dir}",
        "logging.wandb=disabled",
        "logging.progress=false",
        *overrides,
    ]
    return cmd


def run_training(cmd: list[str], log: Path) -> float:
    """Run one training subprocess, its output to `log`; its wall seconds. A failure exits
    with the log's tail."""
    start = time.perf_counter()
    with log.open("w") as out:
        rc = subprocess.run(cmd, stdout=out, stderr=subprocess.STDOUT, cwd=ROOT).returncode
    if rc != 0:
        tail = "\n".join(log.read_text(errors="replace").splitlines()[-LOG_TAIL:])
        raise SystemExit(f"error: {' '.join(cmd)} exited with {rc}; log {log}:\n{tail}")
    return time.perf_counter() - start


def population_figures(run_dir: Path, crippled: int) -> dict:
    """What the population's files say: frames, exploits, best member, when the crippled member
    was first replaced."""
    manifest, notes = read_manifest(run_dir)
    if not manifest:
        raise SystemExit(f"error: {run_dir}: no usable population.json ({'; '.join(notes)})")
    counters = manifest.get("counters") or {}
    lineage, _ = read_records(run_dir / LINEAGE)
    return {
        "frames": int(counters.get("frames", 0)),
        "episodes": int(counters.get("episodes", 0)),
        "exploits": int(counters.get("exploits", 0)),
        "restarts": int(counters.get("restarts", 0)),
        "best_member": best_member(run_dir, manifest),
        "crippled_replaced_at_version": first_exploit_version(lineage, member_name(crippled)),
    }


def newest_checkpoint(run_dir: Path) -> Path:
    from hns_train.agents.checkpoint import CheckpointDir

    newest = CheckpointDir(run_dir / "checkpoints").latest()
    if newest is None:
        raise SystemExit(f"error: {run_dir} holds no checkpoint to evaluate")
    return newest.path


def untrained_snapshot(run_dir: Path) -> Path:
    """A population's untrained anchor (league/untrained.pt); a plain run's pool version 0."""
    anchor = run_dir / LEAGUE / "untrained.pt"
    if anchor.is_file():
        return anchor
    from hns_train.agents.pool import PolicyPool

    if not (run_dir / "pool").is_dir():
        raise SystemExit(f"error: {run_dir}: neither {anchor} nor a pool with version 0")
    with PolicyPool(run_dir / "pool") as pool:
        if 0 not in pool.versions():
            raise SystemExit(f"error: {run_dir}/pool has no version 0 (the untrained policy)")
        return pool.path_for(0)


def gains_against_untrained(
    trained: Path, untrained: Path, episodes: int, worlds: int, seed: int, quiet: bool
) -> dict:
    """Cross-play of a checkpoint against an untrained snapshot: the paired gains with SE."""
    import torch

    from hns_train.eval.crossplay import TRAINED, UNTRAINED, cross_play
    from hns_train.eval.policies import load_policy_file, policy_controller

    torch.set_num_threads(1)  # small batches: extra intra-op threads only contend on 2 cores
    trained_file, untrained_file = load_policy_file(trained), load_policy_file(untrained)
    game_cfg = trained_file.config.game_config()
    make = {
        TRAINED: lambda: policy_controller(trained_file, game_cfg, TRAINED, deterministic=False),
        UNTRAINED: lambda: policy_controller(
            untrained_file, game_cfg, UNTRAINED, deterministic=False
        ),
    }
    result = cross_play(game_cfg, make, episodes, worlds, seed, progress=not quiet)
    gains = result.gains()
    out = {k: round(float(gains[k]), 4) for k in GAIN_KEYS}
    out["version"] = trained_file.version
    out["checkpoint"] = str(trained)
    return out


def run_game(config: Path, args, runs_dir: Path, bar) -> dict:
    game = config.stem
    stamp = time.strftime("%Y%m%d_%H%M%S")
    pop_name, single_name = f"pop_{game}_{stamp}", f"single_{game}_{stamp}"
    bar.set_description(f"{game}: population of {args.members}")
    pop_cmd = train_command(
        config, args.members, args.crippled, args.frames, pop_name, runs_dir, args.overrides
    )
    pop_s = run_training(pop_cmd, runs_dir / f"{pop_name}.log")
    bar.update()
    bar.set_description(f"{game}: single learner")
    single_cmd = train_command(config, 1, None, args.frames, single_name, runs_dir, args.overrides)
    single_s = run_training(single_cmd, runs_dir / f"{single_name}.log")
    bar.update()

    pop_dir, single_dir = runs_dir / pop_name, runs_dir / single_name
    pop = population_figures(pop_dir, args.crippled)
    if pop["best_member"] is None:
        raise SystemExit(f"error: {pop_dir}: the league rated no member; no best member")
    bar.set_description(f"{game}: cross-play of {pop['best_member']}")
    member_dir = pop_dir / "members" / pop["best_member"]
    pop["cross_play"] = gains_against_untrained(
        newest_checkpoint(member_dir),
        untrained_snapshot(pop_dir),
        args.eval_episodes,
        args.eval_worlds,
        args.seed,
        args.quiet,
    )
    pop["wall_s"] = round(pop_s, 1)
    bar.update()
    bar.set_description(f"{game}: cross-play of the single learner")
    single = {
        "frames": single_frames(single_dir),
        "cross_play": gains_against_untrained(
            newest_checkpoint(single_dir),
            untrained_snapshot(single_dir),
            args.eval_episodes,
            args.eval_worlds,
            args.seed,
            args.quiet,
        ),
        "wall_s": round(single_s, 1),
    }
    bar.update()
    return {"population": pop, "single": single, "runs": [str(pop_dir), str(single_dir)]}


def single_frames(run_dir: Path) -> int:
    records, _ = read_records(run_dir / "metrics.jsonl")
    train = [r for r in records if r.get("kind", "train") == "train"]
    return int(train[-1].get("frames", 0)) if train else 0


def table(results: dict[str, dict]) -> list[str]:
    lines = [
        f"{'game':<14} {'learner':<16} {'frames':>9} {'seeker gain':>17} {'hider gain':>17}",
    ]
    for game, r in results.items():
        for label, part in (
            (f"population:{r['population']['best_member']}", r["population"]),
            ("single", r["single"]),
        ):
            g = part["cross_play"]
            lines.append(
                f"{game:<14} {label:<16} {part['frames']:>9,} "
                f"{g['seeker_gain']:>+8.3f} ± {g['seeker_gain_se']:.3f} "
                f"{g['hider_gain']:>+8.3f} ± {g['hider_gain_se']:.3f}"
            )
    return lines


def main(argv: list[str] | None = None) -> dict:
    from tqdm import tqdm

    args = parse_args(argv)
    runs_dir = Path(args.runs_dir or tempfile.mkdtemp(prefix="hns-population-"))
    runs_dir.mkdir(parents=True, exist_ok=True)
    runs_dir = runs_dir.resolve()  # the subprocesses run in the repository root
    load_start = os.getloadavg()[0]
    results: dict[str, dict] = {}
    with tqdm(total=4 * len(args.games), disable=args.quiet, unit="step") as bar:
        for config in args.games:
            results[config.stem] = run_game(config, args, runs_dir, bar)

    print()
    print("\n".join(table(results)))
    for game, r in results.items():
        p = r["population"]
        print(
            f"{game}: {p['exploits']} exploits, {p['restarts']} restarts; m{args.crippled} "
            f"(lr 0) replaced at version {p['crippled_replaced_at_version']}; runs {r['runs']}"
        )
    print("gains: cross-play against the untrained network, paired, ± one standard error")
    summary = {
        "members": args.members,
        "frames": args.frames,
        "crippled": member_name(args.crippled),
        "exploits": {g: r["population"]["exploits"] for g, r in results.items()},
        "best_member": {g: r["population"]["best_member"] for g, r in results.items()},
        "crippled_replaced_at_version": {
            g: r["population"]["crippled_replaced_at_version"] for g, r in results.items()
        },
        "games": results,
        "eval_episodes": args.eval_episodes,
        "quick": args.quick,
        "date": time.strftime("%Y-%m-%d %H:%M", time.gmtime()),
        "machine": f"{os.cpu_count()} cores ({platform.machine()})",
        "load": [round(load_start, 2), round(os.getloadavg()[0], 2)],
    }
    print("POPULATION " + json.dumps(summary))
    return summary


if __name__ == "__main__":
    main()
