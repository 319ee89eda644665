"""`python -m hns_train.train [--config FILE] [--resume RUN_DIR] [section.key=value ...]`

The main job: trains with the actor / policy / trainer pipeline (or pods). With no arguments it
runs `configs/default.yaml` (the quadrant game, `local` launcher) until stopped with Ctrl-C,
which writes a final checkpoint; `--resume runs/NAME` continues that run from its newest
checkpoint with counters, pool and ratings intact (overrides still apply).

With `population.members=N` (N > 1) it trains a population of N learners in one run directory
(`hns_train.distributed.population`); `--resume` continues the whole population. While one runs:
`python -m hns_train.train population add RUN_DIR` adds a member, `... population retire RUN_DIR
MEMBER` retires one. `python -m hns_train.train plan` (`hns-train plan`) sizes a run for a
machine (hns_train/plan.py).
"""

from __future__ import annotations

import argparse
import inspect
import logging
import sys
import textwrap
from pathlib import Path

from tqdm.contrib.logging import logging_redirect_tqdm

from hns_train import config
from hns_train.agents.config import AgentConfig
from hns_train.agents.pool import PoolConfig
from hns_train.agents.population import PopulationConfig
from hns_train.agents.transfer import resolve_init
from hns_train.config import ConfigError, load_config
from hns_train.envs.config import GameConfig

PROG = "python -m hns_train.train"
# Where each section's keys are defined: dataclass fields, each with its default and a comment.
KEY_SOURCES = (
    ("name, seed, runs_dir, pipeline.*, pod.*, eval.*, logging.*, stop.*", config.RunConfig),
    ("agent.*", AgentConfig),
    ("pool.*", PoolConfig),
    ("population.*", PopulationConfig),
    ("game.* (also: help(hns_train.envs.parallel_env))", GameConfig),
)


def _source(cls: type) -> str:
    """The file defining `cls`, as a path from the folder that holds the package."""
    return Path(inspect.getfile(cls)).resolve().relative_to(config.PACKAGE_ROOT).as_posix()


def help_epilog() -> str:
    """Subcommands, shipped config names and where every key is described, for --help."""
    names = textwrap.fill(
        ", ".join(config.shipped_configs()), 92, initial_indent="  ", subsequent_indent="  "
    )
    width = max(len(what) for what, _ in KEY_SOURCES)
    keys = "\n".join(f"  {what:<{width}}  {_source(cls)}" for what, cls in KEY_SOURCES)
    return f"""subcommands:
  {PROG} plan [--cores N ...]               size a run: layout, config, hours per phase
while a population runs in RUN_DIR:
  {PROG} population add RUN_DIR             a new member joins
  {PROG} population retire RUN_DIR MEMBER   a member (e.g. m2) stops for good

shipped configs (--config NAME works from any folder; a YAML of your own may start with
`base: NAME.yaml`):
{names}

keys (section.key=value, the value read as YAML; an unknown key is refused with the allowed
ones): every key is a field of these dataclasses, with its default and what it means
(files under {config.PACKAGE_ROOT}):
{keys}

examples:
  {PROG} --config chase stop.minutes=10
  {PROG} --resume runs/default
  {PROG} --config transfer/lock_and_return agent.init=runs/default"""


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog=PROG,
        description="Train hide-and-seek agents with self-play PPO.",
        epilog=help_epilog(),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--config",
        type=Path,
        metavar="NAME|FILE",
        help="a shipped config's name (below) or a YAML file (default: default)",
    )
    parser.add_argument(
        "--resume", type=Path, metavar="RUN_DIR", help="continue the run in RUN_DIR"
    )
    parser.add_argument("overrides", nargs="*", help="section.key=value, e.g. stop.minutes=10")
    return parser.parse_args(argv)


def population_request(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(
        prog=f"{PROG} population",
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


def check_run_folder(cfg: config.RunConfig) -> None:
    """The run's folder is one inside `runs_dir` (an empty name would make `runs_dir` itself
    the run, and `..` or a leading `/` would put it outside) where a folder can be."""
    name = Path(cfg.name)
    if not name.parts or ".." in name.parts or name.is_absolute():
        raise ConfigError(
            f"name={cfg.name!r} cannot name a run: its folder must lie inside runs_dir "
            f"({cfg.runs_dir}); give a folder name (such as name=chase1), without '..' or a "
            "leading '/'"
        )
    there = next((p for p in (cfg.run_dir, *cfg.run_dir.parents) if p.exists()), None)
    if there is not None and not there.is_dir():
        raise ConfigError(
            f"{there} is a file, so the run's folder {cfg.run_dir} (runs_dir/name) cannot be "
            "made; choose another runs_dir or name"
        )


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv[:1] == ["population"]:
        return population_request(argv[1:])
    if argv[:1] == ["plan"]:
        from hns_train.plan import main as plan

        return plan(argv[1:])
    args = parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(name)s %(message)s")
    try:
        if args.resume is not None:
            saved = args.resume / "config.yaml"
            if not saved.is_file():
                raise ConfigError(f"--resume {args.resume}: no config.yaml there (not a run dir)")
            # `--resume .` (or `..`) names its folder by its full path
            run = args.resume if args.resume.name not in ("", "..") else args.resume.resolve()
            where = [f"runs_dir={run.parent}", f"name={run.name}"]
            cfg = load_config(args.config or saved, [*args.overrides, *where])
        else:
            cfg = load_config(args.config, args.overrides)
        check_run_folder(cfg)
        cfg = resolve_init(cfg)  # a fine-tuning run: the task's rows fit the source network
        if cfg.population.members > 1:
            from hns_train.distributed.population import PopulationController, summary_lines

            controller = PopulationController(cfg, resume=args.resume is not None)
            return _run(controller, lambda summary: summary_lines(summary, cfg.run_dir))
        from hns_train.distributed.controller import Controller

        controller = Controller(cfg, resume=args.resume is not None)
    except (ConfigError, OSError, ValueError) as err:  # an OSError names its path
        print(f"error: {err}", file=sys.stderr)
        return 2
    return _run(controller, lambda summary: summary.lines())


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
