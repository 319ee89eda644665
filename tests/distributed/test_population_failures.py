"""A population resumed from damaged or odd state says what it found: a manifest missing a field,
no member left running, a league database that lost its games; and no start removes a member's
folder. Real `python -m hns_train.train` processes on real files."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from hns_train.agents.population import LEAGUE, MANIFEST, Member
from hns_train.config import load_config, save_config

ROOT = Path(__file__).resolve().parents[2]


def population_dir(root: Path, manifest: dict) -> Path:
    run = root / "pop"
    cfg = load_config(
        "smoke",
        [f"runs_dir={root}", "name=pop", "population.members=2", "logging.wandb=disabled"],
    )
    run.mkdir()
    save_config(cfg, run / "config.yaml")
    (run / MANIFEST).write_text(json.dumps(manifest))
    return run


def manifest(status: str = "retired", games: int = 184) -> dict:
    members = {
        Member(i, i, {}).name: {**vars(Member(i, i, {}, status=status)), "games": games}
        for i in range(2)
    }
    return {
        "format": 1,
        "name": "pop",
        "seed": 0,
        "next_index": 2,
        "elapsed_s": 60.0,
        "members": members,
        "hall_of_fame": [],
        "counters": {"frames": 0, "episodes": 0, "exploits": 0, "restarts": 0},
        "rng": np.random.default_rng([0, 7]).bit_generator.state,
    }


def resume(run: Path, timeout: float = 120) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "hns_train.train", "--resume", str(run), "logging.progress=false"]
    return subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=timeout)


def test_a_manifest_missing_a_field_is_refused_with_its_name(tmp_path):
    # On the code before: a raw traceback ending in KeyError: 'next_index'.
    broken = manifest()
    del broken["next_index"]
    del broken["members"]["m1"]["seed"]
    out = resume(population_dir(tmp_path, broken))
    assert out.returncode == 2, out.stdout + out.stderr
    assert "Traceback" not in out.stderr, out.stderr
    assert "the population manifest lacks next_index, members.m1.seed" in out.stderr


@pytest.fixture(scope="module")
def all_retired(tmp_path_factory):
    """A population whose members are all retired, with 368 rated games in its manifest and an
    empty league folder (the database was emptied), resumed."""
    run = population_dir(tmp_path_factory.mktemp("retired"), manifest())
    (run / LEAGUE).mkdir()
    try:
        out = resume(run, timeout=90)
    except subprocess.TimeoutExpired as err:  # the code before idled for ever
        pytest.fail(f"the population did not stop: {err}")
    return run, out


def test_a_population_with_no_running_member_stops_and_says_so(all_retired):
    _, out = all_retired
    assert out.returncode == 0, out.stdout + out.stderr
    assert "stopped (no member running (all retired)" in out.stdout, out.stdout


def test_a_league_that_lost_its_games_is_said_and_recorded(all_retired):
    # On the code before every rating restarted in silence (368 matches gone).
    run, out = all_retired
    assert "holds none of the 368 rated games the manifest counts" in out.stderr, out.stderr
    events = [json.loads(line) for line in (run / "lineage.jsonl").read_text().splitlines()]
    assert {"event": "league_reset", "games_lost": 368}.items() <= events[-1].items()


def test_a_member_start_moves_an_unfinished_folder_aside(tmp_path):
    # On the code before, a member that had not checkpointed yet lost its folder (logs,
    # replays, a `replaced/` of an exploit cut short) to `shutil.rmtree` at its next start.
    from hns_train.distributed.population import MemberRun

    member = Member(0, 0, {})
    (tmp_path / "members" / "m0" / "replaced").mkdir(parents=True)
    (tmp_path / "members" / "m0" / "replaced" / "ckpt_0000000004.pt").write_bytes(b"kept")
    run = MemberRun(tmp_path, member)
    run.start()  # no members/m0.yaml was written: the process refuses it and ends
    run.process.wait(timeout=120)
    kept = tmp_path / "members" / "m0.aside-1" / "replaced" / "ckpt_0000000004.pt"
    assert kept.read_bytes() == b"kept"


def test_a_failed_start_lets_go_of_the_run_directory(tmp_path):
    # On the code before, a population whose start failed after taking the run directory kept
    # its lock and the folders it had made: the next start in this process was refused as
    # "in use", a new start after a failed one as "already exists".
    from hns_train.distributed import population
    from hns_train.distributed.population import PopulationController

    broken = manifest()
    del broken["next_index"]
    run = population_dir(tmp_path, broken)
    cfg = load_config(run / "config.yaml")
    with pytest.raises(ValueError, match="lacks next_index") as first:
        PopulationController(cfg, resume=True)
    # while the first refusal is kept (its traceback holds its controller), the same refusal
    # again, not "in use by process ..."
    with pytest.raises(ValueError, match="lacks next_index"):
        PopulationController(cfg, resume=True)
    assert first.value

    fresh = load_config(
        "smoke",
        [f"runs_dir={tmp_path}", "name=new", "population.members=2", "logging.wandb=disabled"],
    )

    def no_league(*args, **kwargs):
        raise OSError("league database unavailable")

    original, population.League = population.League, no_league
    try:
        with pytest.raises(OSError, match="league database unavailable"):
            PopulationController(fresh)
    finally:
        population.League = original
    assert [p.name for p in fresh.run_dir.iterdir()] == [".owner"]
    controller = PopulationController(fresh)  # starts as in a new directory
    controller.close()
