"""`python -m hns_train.train [--config FILE] [--resume RUN_DIR] [section.key=value ...]`

The main job: trains with the actor / policy / trainer pipeline (or pods). With no arguments it
runs `configs/default.yaml` (the quadrant game, `local` launcher) until stopped with Ctrl-C,
which writes a final checkpoint; `--resume runs/NAME` continues that run from its newest
checkpoint with counters, pool and ratings intact (overrides still apply).

With `population.members=N` (N > 1) it trains a population of N learners in one run directory
(`hns_train.distributed.population`); `--resume` continues the whole population. While one runs:
`python -m hns_train.train population add RUN_DIR` adds a member, `... population retire RUN_DIR
MEMBER` retires one.
"""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path

from tqdm.contrib.logging import logging_redirect_tqdm

from hns_train.agents.transfer import resolve_init
from hns_train.config import ConfigError, load_config


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m hns_train.train",
        description="Train hide-and-seek agents with self-play PPO.",
    )
    parser.add_argument("--config", type=Path, help="YAML config (default: configs/default.yaml)")
    parser.add_argument(
        "--resume", type=Path, metavar="RUN_DIR", help="continue the run in RUN_DIR"
    )
    parser.add_argument("overrides", nargs="*", help="section.key=value, e.g. stop.minutes=10")
    return parser.parse_args(argv)


def population_request(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m hns_train.train population",
        description="Add a member to, or retire one from, a population while it runs.",
    )
    parser.add_argument("action", choices=("add", "retire"))
    parser.add_argument("run_dir", type=Path)
    parser.add_argument("member", nargs="?", help="the member to retire (e.g. m2)")
    args = parser.parse_args(argv)
    from hns_train.distributed.population import request

    try:
        path = request(args.run_dir, args.action, args.member)
    except ValueError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    print(f"asked: {args.action} {args.member or ''} ({path.name}); the population takes it")
    return 0


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv[:1] == ["population"]:
        return population_request(argv[1:])
    args = parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(name)s %(message)s")
    try:
        if args.resume is not None:
            saved = args.resume / "config.yaml"
            if not saved.is_file():
                raise ConfigError(f"--resume {args.resume}: no config.yaml there (not a run dir)")
            where = [f"runs_dir={args.resume.parent}", f"name={args.resume.name}"]
            cfg = load_config(args.config or saved, [*args.overrides, *where])
        else:
            cfg = load_config(args.config, args.overrides)
        cfg = resolve_init(cfg)  # a fine-tuning run: the task's rows fit the source network
        if cfg.population.members > 1:
            return _run_population(cfg, resume=args.resume is not None)
        from hns_train.distributed.controller import Controller

        controller = Controller(cfg, resume=args.resume is not None)
    except (ConfigError, ValueError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    return _run(controller, lambda summary: summary.lines())


def _run_population(cfg, resume: bool) -> int:
    from hns_train.distributed.population import PopulationController, summary_lines

    controller = PopulationController(cfg, resume=resume)
    return _run(controller, lambda summary: summary_lines(summary, cfg.run_dir))


def _run(controller, lines) -> int:
    """Run a (population) controller to its end; 1 when it ended with an error, said last."""
    # Log lines of this process go through tqdm so that they do not break the progress bar.
    try:
        with logging_redirect_tqdm():
            summary = controller.run()
    except (OSError, ValueError) as err:  # its workers are stopped; why, in one line
        print(f"error: {err}", file=sys.stderr)
        return 1
    print("\n".join(lines(summary)))
    if controller.error:
        print(f"error: {controller.error}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
