"""The README's shell commands, walked in the README's order on a copy of the repository, from a
shell without the virtualenv on its PATH (as the README leaves a new user), so the README cannot
drift from what works.

Whatever ```bash blocks the README holds when the test runs are walked, each command its own test
(in order: later commands use the runs earlier ones made); every other command must exit with
status 0. A command that needs what a CI machine lacks (a GPU, a Ray cluster, a display, the
network, hours) is skipped with the reason, visibly (`pytest -rs`). Training runs: one whose run
a later command reads (`--run`, `--resume`, `agent.init=`, `play`, `population add`, `latest`)
trains, with `TRAIN_SETTINGS` appended (a short stop, and a smaller batch so that the first
checkpoint comes in seconds); the others are skipped as runs alike (starting a training run
costs 20-70 s on 2 busy cores), their configs and overrides loaded and checked here. `eval play`
gets `PLAY_SETTINGS`. `make` is told that the environment is already built (`-o` on its stamps;
this interpreter's environment stands in for `.venv`). Statically, for every command: Python is
named as `.venv/bin/python`, every run a command names is made by an earlier one, and no two
training commands write the same run.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
# Appended to the training commands that are walked: one optimisation step on 2 chunks, with a
# time limit as backstop (the later of each key wins over the command's own).
TRAIN_SETTINGS = "stop.versions=1 stop.minutes=3 pipeline.batch_chunks=2"
# Appended to `eval play`: one match per role and small videos (four 480 x 480 videos of full
# matches are a minute on 2 busy cores).
PLAY_SETTINGS = "--matches 1 --width 160 --height 160"
COMMAND_TIMEOUT_S = 240
# Copied into the walk's clone: what a fresh clone holds that the commands read. The package is
# imported from the repository itself (PYTHONPATH), the same code with its compiled kernels
# cached: compiling them again in each worker of each command would cost minutes on 2 cores.
CLONE = ("Makefile", "pyproject.toml", "README.md", "configs", "replays", "bench", "examples")
CLONE += ("docs",)
# What CI cannot run, in the README's own terms; first match wins.
SKIPS = (
    (r"\bmake\b.*\btest\b", "the test suite itself (this walk is part of it)"),
    (r"launcher=ray|ray_address|\bray (start|stop)\b", "needs a Ray cluster"),
    (r"(?i)cuda|gpu", "needs an NVIDIA GPU"),
    (r"\bpip\b.*\b(install|download)\b|offline-kit", "installs packages (the network)"),
    (r"\bwandb sync\b", "uploads to wandb (the network and an account)"),
    (r"--show\b", "opens MuJoCo's viewer (needs a display)"),
    (
        r"\bbench/",
        "a benchmark: minutes to hours (bench/ scripts print figures, tests/ check them)",
    ),
    (r"\b(ssh|scp|rsync|sbatch|srun|salloc)\b", "another machine or a Slurm cluster"),
)
RUN_ARGS = (
    r"--run\s+(\S+)",
    r"--resume\s+(\S+)",
    r"agent\.init=(\S+?)[\"'\s]",
    r"\bplay\s+(\S+)",
    r"\bpopulation\s+(?:add|retire)\s+(\S+)",
    r"--init(?:-count)?\s+(\S+)",
)


@dataclass
class Command:
    line: int  # where it starts in the README
    text: str

    def __str__(self) -> str:
        return f"README.md:{self.line}: {self.text}"


def _strip_comment(line: str) -> str:
    """The line without a trailing `# comment` (a # outside quotes, after a blank or at the
    start)."""
    quote = None
    for i, ch in enumerate(line):
        if quote:
            if ch == quote and line[i - 1] != "\\":
                quote = None
        elif ch in "'\"":
            quote = ch
        elif ch == "#" and (i == 0 or line[i - 1].isspace()):
            return line[:i].rstrip()
    return line.rstrip()


def readme_commands(text: str) -> list[Command]:
    """Every command of the README's ```bash / ```sh / ```shell blocks, continuation lines
    joined, comments dropped."""
    out: list[Command] = []
    lines = text.splitlines()
    inside = False
    pending, start = "", 0
    for number, raw in enumerate(lines, 1):
        fence = raw.strip()
        if fence.startswith("```"):
            inside = not inside and fence[3:].strip() in ("bash", "sh", "shell")
            continue
        if not inside:
            continue
        line = _strip_comment(raw)
        if not pending:
            start = number
        if line.endswith("\\"):
            pending += line[:-1].rstrip() + " "
            continue
        command = (pending + line.strip()).strip()
        pending = ""
        if command:
            out.append(Command(start, re.sub(r"\s+", " ", command)))
    return out


COMMANDS = readme_commands(README.read_text())


def skip_reason(command: str) -> str | None:
    for pattern, reason in SKIPS:
        if re.search(pattern, command):
            return reason
    if _trains(command) and f"runs/{_run_name(command)}" not in _read_later(command):
        return "a training run that no later command reads (its config is checked statically)"
    return None


def _trains(command: str) -> bool:
    return bool(re.match(r"make\s+train\b", command)) and "--resume" not in command


def _named_runs(command: str) -> list[str]:
    return [run for p in RUN_ARGS for run in re.findall(p, command + " ")]


def _read_later(command: str) -> set[str]:
    """The runs that commands after `command` read (`latest`: the newest run made before)."""
    later = COMMANDS[[c.text for c in COMMANDS].index(command) + 1 :]
    runs = set()
    for c in later:
        if skip_reason_fixed(c.text):
            continue
        for run in _named_runs(c.text):
            if run == "latest":
                made = [x for x in COMMANDS[: COMMANDS.index(c)] if _trains(x.text)]
                run = f"runs/{_run_name(made[-1].text)}" if made else run
            runs.add(run)
    return runs


def skip_reason_fixed(command: str) -> str | None:
    """The skip reasons that do not depend on other commands."""
    return next((reason for pattern, reason in SKIPS if re.search(pattern, command)), None)


def as_walked(command: str) -> str:
    """The command with the walk's additions: the stop setting, and make told the environment
    is built (`-o` names the stamps as the Makefile does, relative to the clone: an absolute
    path is another target to make, and the stamps' times would decide)."""
    stamps = "-o .venv/.installed -o .venv/.installed-test"
    if re.match(r"make\s+train\b", command):
        if "ARGS=" in command:
            command = re.sub(
                r'ARGS="(.*)"', lambda m: f'ARGS="{m.group(1)} {TRAIN_SETTINGS}"', command
            )
        else:
            command += f' ARGS="{TRAIN_SETTINGS}"'
    elif re.search(r"-m hns_train\.train\b", command) and not {"population", "--help"} & set(
        command.split()
    ):
        command += f" {TRAIN_SETTINGS}"
    elif re.search(r"-m hns_train\.eval play\b", command):
        command += f" {PLAY_SETTINGS}"
    if command.startswith("make "):
        command = f"make {stamps} VENV=.venv " + command[len("make ") :]
    return command


@pytest.fixture(scope="module")
def clone(tmp_path_factory):
    """A fresh clone's files, `.venv` standing for this interpreter's environment, and a shell
    environment with no virtualenv on its PATH and wandb's files inside the clone."""
    where = tmp_path_factory.mktemp("clone")
    for name in CLONE:
        src = ROOT / name
        if src.is_dir():
            shutil.copytree(src, where / name, ignore=shutil.ignore_patterns("__pycache__"))
        elif src.exists():
            shutil.copy2(src, where / name)
    (where / ".venv").symlink_to(Path(sys.prefix))
    bins = {str(Path(sys.prefix) / "bin"), str(Path(sys.executable).parent)}
    path = [p for p in os.environ.get("PATH", "").split(os.pathsep) if p not in bins]
    env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "WANDB_MODE")}
    env.update(PATH=os.pathsep.join(path), PYTHONPATH=str(ROOT), MUJOCO_GL="egl")
    env.update(WANDB_SILENT="true", HOME=str(where / "home"))
    for var in ("WANDB_DIR", "WANDB_CONFIG_DIR", "WANDB_CACHE_DIR", "WANDB_DATA_DIR"):
        env[var] = str(where / "wandb-home" / var.lower())
    return where, env


def test_the_readme_has_commands_to_walk():
    assert len(COMMANDS) >= 10 and any(c.text.startswith("make train") for c in COMMANDS)


def test_no_python_command_needs_an_activated_environment():
    """A new user's shell has no virtualenv: Python is `.venv/bin/python` in every command."""
    bare = [str(c) for c in COMMANDS if re.match(r"(python3?|pip3?|hns-\w+)\b", c.text)]
    assert bare == []


def test_every_named_run_is_made_by_an_earlier_command():
    made: list[str] = []
    missing = []
    for c in COMMANDS:
        for run in _named_runs(c.text):
            if run.startswith("runs/") and run not in made:
                missing.append(f"{c}: {run}")
        if _trains(c.text):
            made.append(f"runs/{_run_name(c.text)}")
    assert missing == [], "no earlier command makes these runs"


def _train_args(command: str) -> tuple[str | None, list[str]]:
    """`--config` and the overrides of a `make train` command, as the shell would split them."""
    args = re.search(r'ARGS="(.*)"', command)
    words = shlex.split(args.group(1).replace('\\"', '"')) if args else []
    config = None
    if "--config" in words:
        i = words.index("--config")
        config = words[i + 1]
        del words[i : i + 2]
    return config, [w for w in words if "=" in w and not w.startswith("--")]


def test_every_training_command_s_config_and_overrides_load():
    from hns_train.config import load_config

    for c in COMMANDS:
        if _trains(c.text):
            config, overrides = _train_args(c.text)
            cfg = load_config(config, overrides)
            assert cfg.name == _run_name(c.text), c


def test_no_training_command_reuses_an_earlier_run_name():
    """Each `make train` (but `--resume`) writes a run of its own: a second one into the same
    folder would be refused."""
    trains = [c for c in COMMANDS if _trains(c.text)]
    names = [_run_name(c.text) for c in trains]
    repeated = [str(c) for c, n in zip(trains, names, strict=True) if names.count(n) > 1]
    assert repeated == []


def _run_name(command: str) -> str:
    """The run a `make train` command writes: `name=`, else its config's `name:`."""
    named = re.findall(r"\bname=([\w.-]+)", command)
    if named:
        return named[-1]
    config = re.search(r"--config\s+(\S+?)[\"'\s]", command + " ")
    from hns_train.config import load_config

    return load_config(config.group(1) if config else None).name


@pytest.mark.slow
@pytest.mark.parametrize("command", COMMANDS, ids=[f"line{c.line}" for c in COMMANDS])
def test_readme_command(command, clone):
    reason = skip_reason(command.text)
    if reason:
        pytest.skip(f"{command}: {reason}")
    where, env = clone
    walked = as_walked(command.text)
    start = time.monotonic()
    done = subprocess.run(
        ["bash", "-c", walked],
        cwd=where,
        env=env,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=COMMAND_TIMEOUT_S,
    )
    took = time.monotonic() - start
    print(f"{command} ({took:.1f} s)")
    tail = (done.stdout[-3000:] + "\n" + done.stderr[-3000:]).strip()
    assert done.returncode == 0, f"{command}\nran as: {walked}\nexit {done.returncode}\n{tail}"
