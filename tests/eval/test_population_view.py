"""`python -m hns_train.eval --run POP_DIR` on a population directory: the league DB written by
`Ratings.update` (the untrained anchor fixed), the manifest by `save_manifest`, the lineage as
the controller writes it (`append_record`), the status records in the population design's
format; torn and missing files; a member's own directory keeps the run view. Then
bench/population.py's arguments, training command and readers."""

from __future__ import annotations

import json
import re
import shutil
import sqlite3
from pathlib import Path

import imageio.v3 as iio
import pytest
import torch

from hns_train.agents.policy import ActorCritic
from hns_train.agents.pool import PolicyPool
from hns_train.agents.population import save_manifest
from hns_train.config import CONFIG_DIR, load_config, save_config
from hns_train.envs.contract import observation_shapes
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
    log_axis,
    read_league,
    searched_scales,
)
from hns_train.eval.ratings import Ratings
from hns_train.jsonl import append_record, read_records
from hns_train.train import parse_args as train_parse_args
from tests.rated import Rated
from tests.scripts import load_script

SMALL = {"embed_dim": 16, "attention_heads": 2, "dense_dim": 32, "lstm_dim": 16}

LR, ENT = "agent.ppo.lr", "agent.ppo.ent_coef"
JOIN = {
    "m0": {LR: 3e-4, ENT: 0.01},
    "m1": {LR: 0.0, ENT: 0.01},  # the crippled member
    "m2": {LR: 1e-3, ENT: 0.02},
    "m3": {LR: 1e-4, ENT: 0.005},
}
AFTER = {LR: 2.4e-4, ENT: 0.013}  # m1 after copying m0 and perturbing
# m2 wins every match it plays, in both roles; m1 loses every one.
MATCHES = [
    ("m2", "m0", 0.9),
    ("m2", "m1", 0.95),
    ("m0", "m2", 0.9),  # m2 seeks: the hiders lose
    ("m1", "m2", 0.0),
    ("m0", "m1", 0.8),
    ("m1", "m0", 0.1),
    ("m3", "m1", 0.7),
    ("m2", "m3", 0.9),
    ("m3", "m2", 0.0),
    ("m2", "untrained", 0.9),
    ("untrained", "m2", 0.1),
    ("m0.400", "untrained", 0.6),
    ("untrained", "m3", 0.5),
]


T0 = 1_790_000_000.0
POPULATION = [  # the population's config: lr searched on a log range, ent_coef on a linear one
    "population.members=4",
    "population.overrides=['1:agent.ppo.lr=0']",
    f'population.ranges={{"{LR}": [1e-5, 1e-2], "{ENT}": [0.0, 0.05, "linear"]}}',
]
# (event, member, elapsed_s, fields) as the controller appends them
START = 1_764_000_000.0  # unix time the population started
LINEAGE_EVENTS = [
    *(("join", m, 0.0, {"hyper": h}) for m, h in JOIN.items()),
    ("restart", "m2", 300.0, {"reason": "heartbeat lost"}),
    (
        "exploit",
        "m1",
        600.0,
        {"source": "m0", "source_version": 480, "win_probability": 0.83, "version": 480},
    ),
    (
        "explore",
        "m1",
        600.0,
        {"hyper_before": JOIN["m0"], "hyper_after": AFTER, "how": {LR: "x0.8", ENT: "resample"}},
    ),
    ("retire", "m3", 900.0, {}),
    ("resume", "", 1000.0, {}),
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
    save_config(load_config(CONFIG_DIR / "chase.yaml", POPULATION), run / "config.yaml")
    save_manifest(run / MANIFEST, manifest())
    for kind, member, elapsed, fields in LINEAGE_EVENTS:
        record = {"time": START + elapsed, "elapsed_s": elapsed, "event": kind, "member": member}
        append_record(run / LINEAGE, {**record, **fields})
    write_jsonl(run / STATUS, status_records())
    with Ratings(run / LEAGUE, fixed={"untrained"}) as ratings:
        for hider, seeker, score in MATCHES:
            ratings.record([Rated(hider, seeker, score, {"hidden_fraction": score})])
    member = run / "members" / "m0"
    with Ratings(member / "pool") as ratings:
        ratings.record([Rated("latest", "random", 0.9)])
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
    with Ratings(copy / LEAGUE, fixed={"untrained"}) as ratings:
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
    for role in board:  # the anchor (25 ± 3) ranks among them; m2 is the best member
        assert [r.policy for r in board[role] if r.policy in JOIN][0] == "m2"
    assert any(r.policy == "untrained" and r.games == 0 for r in board["hider"])

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
    torn = f"{LINEAGE}: last line (line {len(LINEAGE_EVENTS) + 1}) cut short; skipped"
    assert torn in captured.out
    assert f"{STATUS}:2 is not a JSON object; skipped" in captured.out
    assert "copied m0 v480" in captured.out  # the lines before still count
    records, notes = read_records(copy / STATUS)
    assert len(records) == len(status_records()) and len(notes) == 1
    assert png_size(copy / PLOT) == figure_size(2)


def test_a_missing_league_database_is_a_message_and_is_not_created(copy, capsys):
    shutil.rmtree(copy / LEAGUE)
    assert main(["--run", str(copy)]) == 0
    out = capsys.readouterr().out
    assert "league: no ratings yet (league/pool.sqlite missing; the population controller " in out
    assert "creates it when it starts)" in out
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
    assert f"{MANIFEST}: the population manifest is not valid JSON" in captured.out
    assert "Traceback" not in captured.out + captured.err
    assert "copied m0 v480" in captured.out


def test_a_league_whose_ratings_do_not_read_is_a_message_and_its_connection_closed(
    tmp_path, monkeypatch
):
    """The database opens (its schema is in place) but reading the ratings fails: the view
    reports it and closes the connection it opened rather than leaving it to the collector."""
    (tmp_path / LEAGUE).mkdir()
    conn = sqlite3.connect(tmp_path / LEAGUE / "pool.sqlite")
    conn.executescript(
        "CREATE TABLE gone (x); CREATE VIEW ratings AS SELECT x FROM gone; DROP TABLE gone;"
    )
    conn.close()
    closed = []
    close = Ratings.close
    monkeypatch.setattr(Ratings, "close", lambda self: (closed.append(self), close(self)))
    board, message = read_league(tmp_path, lambda ratings: ratings.leaderboard())
    assert board is None
    assert message == "league: league/pool.sqlite is unreadable (no such table: main.gone)"
    assert len(closed) == 1
    with pytest.raises(sqlite3.ProgrammingError, match="closed"):
        closed[0].conn.execute("SELECT 1")


def test_odd_values_in_the_files_are_shown_not_raised(copy, capsys):
    data = json.loads((copy / MANIFEST).read_text())
    data["counters"] = [1, 2]
    data["hall_of_fame"] = 3
    data["members"]["m0"].update(frames=None, version="x", hyper="lr")
    data["members"]["m9"] = "not a member"
    (copy / MANIFEST).write_text(json.dumps(data))
    write_jsonl(copy / LINEAGE, [{"event": "explore", "member": "m1", "hyper_after": 5}, [1]])
    write_jsonl(copy / STATUS, [{"elapsed_s": "soon", "members": {"m0": {"hider_mu": "high"}}}])
    assert main(["--run", str(copy)]) == 0
    out = capsys.readouterr().out
    assert re.search(r"^  m0\s+running\s+\?\s+\?\s+0\s+0\s+-$", out, re.M)
    assert "m9" not in out.split("\nleague")[0]
    assert f"{LINEAGE}:2 is not a JSON object; skipped" in out  # valid JSON, not cut short
    assert png_size(copy / PLOT) == figure_size(2)


def test_population_with_no_records_yet_still_plots(tmp_path, capsys):
    run = tmp_path / "fresh"
    run.mkdir()
    (run / MANIFEST).write_text(json.dumps({"format": 1, "name": "fresh", "members": {}}))
    assert main(["--run", str(run)]) == 0
    out = capsys.readouterr().out
    assert "lineage: no events yet" in out and f"{LINEAGE}: missing" in out
    assert png_size(run / PLOT) == figure_size(0)


def test_readers_schedule_first_exploit_and_best_member(copy):
    events, _ = read_records(copy / LINEAGE)
    schedule = hyper_schedule(events)
    assert schedule["m1"][LR] == [(0.0, 0.0, "join"), (600.0, 2.4e-4, "exploit of m0")]
    assert schedule["m0"][LR] == [(0.0, 3e-4, "join")]
    assert first_exploit_version(events, "m1") == 480
    assert first_exploit_version(events, "m0") is None
    assert searched_scales(copy) == ({LR: "log", ENT: "linear"}, [])
    assert log_axis(LR, [0.0, 3e-4], {LR: "log"})  # searched on a log range: log, 0 included
    assert not log_axis(ENT, [0.01, 0.5], {ENT: "linear"})
    assert log_axis("pod.epochs", [1e-5, 1e-3], {}) and not log_axis("pod.epochs", [0, 4], {})
    assert best_member(copy) == "m2"  # from the league database
    shutil.rmtree(copy / LEAGUE)
    assert best_member(copy) is None  # no league, no rating to name one by
    assert not (copy / LEAGUE).exists()


# ----- bench/population.py: its arguments, the commands it runs and its readers -----


def load_bench():
    return load_script("bench/population.py", "population_bench")


def test_bench_arguments_and_the_training_command(capsys):
    bench = load_bench()
    args = bench.parse_args(["--quick", "pool.p_latest=0.5"])
    assert args.frames == bench.QUICK_FRAMES and args.eval_episodes == bench.QUICK_EVAL_EPISODES
    assert args.games == [CONFIG_DIR / "chase.yaml", CONFIG_DIR / "quadrant_cpu.yaml"]
    assert bench.parse_args(["--frames", "5000"]).frames == 5000
    for bad, message in (
        (["--members", "1"], "at least 2"),
        (["--crippled", "4"], "member index in"),
        (["--games", "nope"], "no such config"),
        (["nokey"], "section.key=value"),
    ):
        with pytest.raises(SystemExit) as info:
            bench.parse_args(bad)
        assert info.value.code != 0
        assert message in str(info.value.code) + capsys.readouterr().err

    cmd = bench.train_command(
        CONFIG_DIR / "chase.yaml", 4, 1, 25_600, "pop_chase", Path("/tmp/d"), ["seed=3"]
    )
    assert cmd[1:3] == ["-m", "hns_train.train"]
    parsed = train_parse_args(cmd[3:])  # what python -m hns_train.train makes of it
    assert parsed.config == CONFIG_DIR / "chase.yaml"
    assert parsed.overrides[:2] == [
        "population.members=4",
        "population.overrides=['1:agent.ppo.lr=0']",
    ]
    single = bench.train_command(
        CONFIG_DIR / "chase.yaml", 1, None, 25_600, "s", Path("/tmp/d"), []
    )
    assert "population.members=1" in single and not any("overrides" in a for a in single)
    # every setting is a key of the run config, the population's included
    cfg = load_config(parsed.config, parsed.overrides)
    assert cfg.population.members == 4 and cfg.population.overrides == ("1:agent.ppo.lr=0",)
    assert cfg.pipeline.backend == "pod" and cfg.stop.frames == 25_600 and cfg.seed == 3
    assert cfg.name == "pop_chase" and cfg.logging.wandb == "disabled"


def test_bench_reads_the_population_files(copy):
    figures = load_bench().population_figures(copy, crippled=1)
    assert figures == {
        "frames": 200_010,
        "episodes": 1206,
        "exploits": 1,
        "restarts": 1,
        "best_member": "m2",
        "crippled_replaced_at_version": 480,
    }
    assert load_bench().population_figures(copy, crippled=2)["crippled_replaced_at_version"] is None


def test_bench_cross_play_of_a_policy_against_itself_gains_nothing(tmp_path):
    bench = load_bench()
    small = [f"agent.network.{k}={v}" for k, v in SMALL.items()]
    cfg = load_config(CONFIG_DIR / "chase.yaml", small)
    run = tmp_path / "single"
    run.mkdir()
    save_config(cfg, run / "config.yaml")
    torch.manual_seed(0)
    model = ActorCritic(observation_shapes(cfg.game_config()), cfg.agent.network)
    with PolicyPool(run / "pool") as pool:
        untrained = pool.add_snapshot(0, model.state_dict())
    assert bench.untrained_snapshot(run) == untrained  # a plain run: pool version 0
    gains = bench.gains_against_untrained(untrained, untrained, 2, 2, seed=5, quiet=True)
    # the same weights on the same seeds and sampling streams play the same episodes
    assert gains["seeker_gain"] == 0.0 and gains["hider_gain"] == 0.0
    assert gains["version"] == 0 and set(bench.GAIN_KEYS) <= set(gains)
    anchor = run / LEAGUE / "untrained.pt"
    anchor.parent.mkdir()
    shutil.copy(untrained, anchor)
    assert bench.untrained_snapshot(run) == anchor  # a population: the league's anchor
