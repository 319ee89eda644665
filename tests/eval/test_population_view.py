"""`python -m hns_train.eval --run POP_DIR` on a population directory: the league DB written by
`Ratings.update`, the manifest and JSON lines in the population design's formats; torn and
missing files; a member's own directory keeps the run view."""

from __future__ import annotations

import json
import re
import shutil

import imageio.v3 as iio
import pytest

from hns_train.eval.cli import main
from hns_train.eval.population_view import (
    LEAGUE,
    LINEAGE,
    MANIFEST,
    PLOT,
    STATUS,
    best_member,
    figure_size,
    first_exploit_version,
    hyper_schedule,
    read_jsonl,
)
from hns_train.eval.ratings import Ratings

LR, ENT = "agent.ppo.lr", "agent.ppo.ent_coef"
JOIN = {
    "m0": {LR: 3e-4, ENT: 0.01},
    "m1": {LR: 0.0, ENT: 0.01},  # the crippled member
    "m2": {LR: 1e-3, ENT: 0.02},
    "m3": {LR: 1e-4, ENT: 0.005},
}
AFTER = {LR: 2.4e-4, ENT: 0.013}  # m1 after copying m0 and perturbing
T0 = 1_790_000_000.0
# m2 wins every match it plays, in both roles; m1 loses every one.
MATCHES = [
    ("m2", "m0", 0.9),
    ("m2", "m1", 0.95),
    ("m0", "m2", 0.9),  # m2 seeks: the hiders lose
    ("m1", "m2", 0.0),
    ("m0", "m1", 0.8),
    ("m1", "m0", 0.1),
    ("m3", "m1", 0.7),
    ("m0.400", "untrained", 0.6),
    ("untrained", "m3", 0.5),
]


def event(elapsed: float, kind: str, member: str, **extra) -> dict:
    return {"time": T0 + elapsed, "elapsed_s": elapsed, "event": kind, "member": member, **extra}


def lineage() -> list[dict]:
    return [
        *(event(0.0, "join", m, hyper=h) for m, h in JOIN.items()),
        event(300.0, "restart", "m2", reason="heartbeat lost"),
        event(
            600.0,
            "exploit",
            "m1",
            source="m0",
            source_version=480,
            win_probability=0.83,
            version=480,
        ),
        event(
            600.0,
            "explore",
            "m1",
            hyper_before=JOIN["m0"],
            hyper_after=AFTER,
            how={LR: "x0.8", ENT: "resample"},
        ),
        event(900.0, "retire", "m3"),
        event(1000.0, "resume", ""),
    ]


def status_records() -> list[dict]:
    out = []
    for k, t in enumerate((60.0, 400.0, 700.0, 1100.0)):
        members = {}
        for i, m in enumerate(JOIN):
            hyper = AFTER if m == "m1" and t > 600 else JOIN[m]
            members[m] = {
                "version": 100 * k + i,
                "frames": 1000 * k,
                "hyper": hyper,
                "hider_mu": 25.0 + i * k,
                "hider_sigma": 8.0 - k,
                "seeker_mu": 25.0 - 0.5 * i * k,
                "seeker_sigma": 8.0 - k,
            }
        out.append({"time": T0 + t, "elapsed_s": t, "frames": 4000 * k, "members": members})
    return out


def manifest() -> dict:
    members = {}
    for i, (m, hyper) in enumerate(JOIN.items()):
        members[m] = {
            "index": i,
            "status": "retired" if m == "m3" else "running",
            "seed": 100 + i,
            "hyper": AFTER if m == "m1" else hyper,
            "version": 700 + i,
            "frames": 50_000 + i,
            "episodes": 300 + i,
            "changed_at_version": 480 if m == "m1" else 0,
            "changed_at_games": 0,
            "exploits": int(m == "m1"),
            "restarts": int(m == "m2"),
        }
    return {
        "format": 1,
        "name": "pop",
        "seed": 7,
        "next_index": 4,
        "elapsed_s": 1200.0,
        "members": members,
        "hall_of_fame": [
            {"policy": "m0.400", "member": "m0", "version": 400, "file": "league/hof_m0.400.pt"}
        ],
        "counters": {"frames": 200_010, "episodes": 1206, "exploits": 1, "restarts": 1},
        "rng": {"bit_generator": "PCG64", "state": {"state": 1, "inc": 3}},
    }


def write_jsonl(path, records) -> None:
    path.write_text("".join(json.dumps(r) + "\n" for r in records))


@pytest.fixture(scope="module")
def pop_dir(tmp_path_factory):
    run = tmp_path_factory.mktemp("runs") / "pop"
    run.mkdir()
    (run / "config.yaml").write_text("name: pop\npopulation:\n  members: 4\n")
    (run / MANIFEST).write_text(json.dumps(manifest()))
    write_jsonl(run / LINEAGE, lineage())
    write_jsonl(run / STATUS, status_records())
    with Ratings(run / LEAGUE) as ratings:
        for hider, seeker, score in MATCHES:
            ratings.update(hider, seeker, score, {"hidden_fraction": score})
    member = run / "members" / "m0"
    with Ratings(member / "pool") as ratings:
        ratings.update("latest", "random", 0.9)
    write_jsonl(
        member / "metrics.jsonl",
        [{"kind": "train", "version": 9, "frames": 4321, "episodes": 12, "hours": 0.1}],
    )
    return run


@pytest.fixture
def copy(pop_dir, tmp_path):
    return shutil.copytree(pop_dir, tmp_path / "pop")


def png_size(path) -> tuple[int, int]:
    image = iio.imread(path)  # raises on a file that is not an image
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    return image.shape[1], image.shape[0]


def test_population_view_prints_leaderboard_lineage_schedules_and_writes_the_plot(copy, capsys):
    assert main(["--run", str(copy)]) == 0
    out = capsys.readouterr().out
    assert "4 members (3 running)" in out and "elapsed 0:20:00" in out
    assert "200,010 frames, 1,206 episodes, 1 exploits, 1 restarts, hall of fame 1" in out

    # Every rated (policy, role) of the league, under its role, with the stored mu ± 3 sigma and
    # what the policy is.
    with Ratings(copy / LEAGUE) as ratings:
        board = {role: ratings.leaderboard(role) for role in ("hider", "seeker")}
    hider_part = out[out.index("  as hider") : out.index("  as seeker")]
    seeker_part = out[out.index("  as seeker") : out.index("\nlineage")]
    notes = {
        "m0": "running v700 lr=0.0003 ent_coef=0.01",
        "m1": "running v701 lr=0.00024 ent_coef=0.013",
        "m2": "running v702 lr=0.001 ent_coef=0.02",
        "m3": "retired v703 lr=0.0001 ent_coef=0.005",
        "m0.400": "hall of fame: m0 at v400",
        "untrained": "anchor: the untrained network",
    }
    for role, part in (("hider", hider_part), ("seeker", seeker_part)):
        assert len(board[role]) >= 4
        for r in board[role]:
            line = next(x for x in part.splitlines() if f" {r.policy} " in x)
            assert f"{r.mu:6.2f} ± {3 * r.sigma:5.2f}" in line and f" {role} " in line
            assert notes[r.policy] in line
    assert board["hider"][0].policy == "m2" and board["seeker"][0].policy == "m2"

    # Lineage: the exploit and its explore in one row; restarts, retirements, resumes.
    row = next(x for x in out.splitlines() if "exploit+explore" in x)
    assert re.search(r"0:10:00 m1\s+exploit\+explore\s+copied m0 v480 \(p win 0\.83\) at v480", row)
    assert "lr 0.0003->0.00024 (x0.8)" in out and "ent_coef 0.01->0.013 (resample)" in out
    assert re.search(r"0:05:00 m2\s+restart\s+heartbeat lost", out)
    assert re.search(r"0:15:00 m3\s+retire", out) and re.search(r"0:16:40 -\s+resume", out)
    assert max(len(x) for x in out.splitlines() if str(copy) not in x) <= 100

    # Schedules: m1's learning rate was 0 until the exploit at 10 minutes.
    schedules = out[out.index("hyperparameter schedules") :]
    m1 = schedules[schedules.index("  m1") : schedules.index("  m2")]
    assert re.search(r"lr\s+0 @0:00:00, 0\.00024 @0:10:00", m1)
    assert re.search(r"ent_coef\s+0\.01 @0:00:00, 0\.013 @0:10:00", m1)

    assert f"plot: {copy / PLOT}" in out
    assert png_size(copy / PLOT) == figure_size(2) == (1400, 80 + 260 * 4)


def test_a_member_directory_keeps_the_run_view(pop_dir, capsys):
    assert main(["--run", str(pop_dir / "members" / "m0")]) == 0
    out = capsys.readouterr().out
    assert "version 9, 4,321 env frames, 12 episodes" in out
    assert "leaderboard (1 rated matches" in out
    assert "population" not in out


def test_torn_last_lines_and_bad_lines_are_skipped_with_a_note(copy, capsys):
    with (copy / LINEAGE).open("a") as f:
        f.write('{"time": 1, "elapsed_s": 1300.0, "event": "exp')
    lines = (copy / STATUS).read_text().splitlines()
    lines.insert(1, "not json")
    (copy / STATUS).write_text("\n".join(lines) + "\n")
    assert main(["--run", str(copy)]) == 0
    captured = capsys.readouterr()
    assert "Traceback" not in captured.out + captured.err
    assert f"{LINEAGE}: last line (line {len(lineage()) + 1}) cut short; skipped" in captured.out
    assert f"{STATUS}:2 is not a JSON object; skipped" in captured.out
    assert "copied m0 v480" in captured.out  # the lines before still count
    records, notes = read_jsonl(copy / STATUS)
    assert len(records) == len(status_records()) and len(notes) == 1
    assert png_size(copy / PLOT) == figure_size(2)


def test_a_missing_league_database_is_a_message_and_is_not_created(copy, capsys):
    shutil.rmtree(copy / LEAGUE)
    assert main(["--run", str(copy)]) == 0
    out = capsys.readouterr().out
    assert "league: no ratings yet (league/pool.sqlite missing" in out
    assert not (copy / LEAGUE).exists()
    assert "copied m0 v480" in out and (copy / PLOT).is_file()


def test_an_unreadable_league_database_or_manifest_is_a_message(copy, capsys):
    (copy / LEAGUE / "pool.sqlite").write_bytes(b"this is not a database" * 100)
    for suffix in ("-wal", "-shm"):
        (copy / LEAGUE / f"pool.sqlite{suffix}").unlink(missing_ok=True)
    (copy / MANIFEST).write_text('{"format": 1, "members": {')
    assert main(["--run", str(copy)]) == 0
    captured = capsys.readouterr()
    assert "league: league/pool.sqlite is unreadable" in captured.out
    assert f"{MANIFEST}: not valid JSON" in captured.out
    assert "Traceback" not in captured.out + captured.err
    assert "copied m0 v480" in captured.out


def test_population_with_no_records_yet_still_plots(tmp_path, capsys):
    run = tmp_path / "fresh"
    run.mkdir()
    (run / MANIFEST).write_text(json.dumps({"format": 1, "name": "fresh", "members": {}}))
    assert main(["--run", str(run)]) == 0
    out = capsys.readouterr().out
    assert "lineage: no events yet" in out and f"{LINEAGE}: missing" in out
    assert png_size(run / PLOT) == figure_size(0)


def test_readers_schedule_first_exploit_and_best_member(copy):
    events, _ = read_jsonl(copy / LINEAGE)
    schedule = hyper_schedule(events)
    assert schedule["m1"][LR] == [(0.0, 0.0, "join"), (600.0, 2.4e-4, "exploit of m0")]
    assert schedule["m0"][LR] == [(0.0, 3e-4, "join")]
    assert first_exploit_version(events, "m1") == 480
    assert first_exploit_version(events, "m0") is None
    assert best_member(copy) == "m2"  # from the league database
    shutil.rmtree(copy / LEAGUE)
    # without one, from the newest status record: m3 has the highest mean of (mu - 3 sigma)
    assert best_member(copy) == "m3"
    assert not (copy / LEAGUE).exists()
