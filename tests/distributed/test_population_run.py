"""The population controller with real member runs (each a process with a pod), a real league
database and real checkpoint files: exploit and explore, a crippled member replaced, a member
restarted alone, members added and retired, resume from the manifest."""

from __future__ import annotations

import dataclasses
import json
import os
import re
import signal
import time

import pytest
import torch
import yaml

from hns_train import train
from hns_train.agents.checkpoint import CheckpointDir, load_checkpoint
from hns_train.agents.pool import PolicyPool
from hns_train.config import load_config
from hns_train.distributed.population import MemberRun, PopulationController, request
from hns_train.eval.cli import main as eval_main
from hns_train.eval.population_view import best_member
from hns_train.eval.ratings import Ratings
from hns_train.jsonl import read_records
from tests.rated import Rated

LR_RANGE = (1e-4, 3e-3)


def population_config(tmp_path, *extra):
    return load_config(
        "chase",
        [
            f"runs_dir={tmp_path}",
            "name=pop",
            "pipeline.backend=pod",
            "pipeline.launcher=serial",
            "pod.worlds=16",
            "eval.n_workers=0",
            "logging.wandb=disabled",
            "logging.progress=false",
            "logging.every_s=1",  # members report their counters within a second
            "population.members=3",
            f"population.ranges={{agent.ppo.lr: [{LR_RANGE[0]}, {LR_RANGE[1]}]}}",
            "population.overrides=['1:agent.ppo.lr=0']",
            "population.league_roles=[seeker]",
            "population.league_opponents=[random, untrained, members]",
            "population.p_cross=0.25",
            "population.p_past=0.25",
            "population.ready_versions=4",
            "population.ready_games=4",
            "population.copy_win_probability=0.9",
            "population.league_every_s=0.1",  # a league round on every tick of the test
            "population.sync_every_s=2",  # also how often members checkpoint
            "population.hof_every=8",
            "population.bottom_fraction=0.34",
            "population.top_fraction=0.34",
            *extra,
        ],
    )


def tick_until(controller, predicate, timeout_s, what, seen=None):
    """Tick until `predicate()` holds; past the deadline, fail naming `what` and, when given,
    what `seen()` reports of the state that kept it false."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        controller.tick()
        if predicate():
            return
        time.sleep(0.2)
    found = f"; found {seen()}" if seen else ""
    raise AssertionError(f"timed out after {timeout_s} s waiting for {what}{found}")


def checkpoints(run_dir, member):
    return CheckpointDir(run_dir / "members" / member / "checkpoints")


def events(run_dir, kind):
    return [e for e in read_records(run_dir / "lineage.jsonl")[0] if e["event"] == kind]


def assert_same_tensors(a, b, where=""):
    if isinstance(a, torch.Tensor):
        assert torch.equal(a, b), where
    elif isinstance(a, dict):
        assert a.keys() == b.keys(), where
        for key in a:
            assert_same_tensors(a[key], b[key], f"{where}.{key}")
    elif isinstance(a, (list, tuple)):
        assert len(a) == len(b), where
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            assert_same_tensors(x, y, f"{where}[{i}]")
    else:
        assert a == b, where


@pytest.mark.slow
def test_population_replaces_a_crippled_member_restarts_one_and_resumes(tmp_path):
    """The league plays a round on every tick of the test (not every 2 s), so ratings firm up
    as fast as the members train; members are ready after 4 versions and 4 games, and copy
    only at p_win >= 0.9, which keeps learners from copying each other on early, noisy ratings
    (the crippled member reaches 0.95-0.99). 2026-11-25: 36-55 s alone at load 8-9 and 41 s in
    the whole suite at load 1-3, where the earlier settings (ready after 8 and 8, a round every
    2 s, copy at 0.7) took 45-52 s alone at load 4-6."""
    cfg = population_config(tmp_path)
    run_dir = cfg.run_dir
    pop = PopulationController(cfg)
    try:
        pop.start_members()
        assert pop.members["m0"].hyper["agent.ppo.lr"] == pytest.approx(3e-4)  # base settings
        assert events(run_dir, "join")[1]["fixed"] == ["agent.ppo.lr=0"]
        assert pop.members["m1"].hyper["agent.ppo.lr"] == 0  # what it trains with
        m1_config = yaml.safe_load((run_dir / "members" / "m1.yaml").read_text())
        assert m1_config["agent"]["ppo"]["lr"] == 0.0  # the crippled member

        # The crippled member falls to the bottom and copies a better member's whole state
        # (a learning member may copy another before that: the test waits for m1's).
        def m1_exploits():
            return [e for e in events(run_dir, "exploit") if e["member"] == "m1"]

        tick_until(pop, m1_exploits, 300, "the crippled member to copy another")
        exploit = m1_exploits()[0]
        assert exploit["win_probability"] >= cfg.population.copy_win_probability == 0.9
        source, version = exploit["source"], exploit["source_version"]
        ours = load_checkpoint(checkpoints(run_dir, "m1").path_for(version))
        theirs = load_checkpoint(checkpoints(run_dir, source).path_for(version))
        assert_same_tensors(ours.state, theirs.state)  # weights, optimiser, normalisers, PopArt
        explore = [e for e in events(run_dir, "explore") if e["member"] == "m1"][0]
        lr = explore["hyper_after"]["agent.ppo.lr"]
        assert LR_RANGE[0] <= lr <= LR_RANGE[1]
        assert explore["how"]["agent.ppo.lr"] in ("x0.8", "x1.2", "resample")
        m1_config = yaml.safe_load((run_dir / "members" / "m1" / "config.yaml").read_text())
        assert m1_config["agent"]["ppo"]["lr"] == pytest.approx(lr)

        # The copy keeps training from the copied state.
        tick_until(
            pop,
            lambda: CheckpointDir(run_dir / "members" / "m1" / "checkpoints").steps()[-1] > version,
            120,
            "the copy's next checkpoint",
        )

        # Cross and past play: every member's pool holds the others and the hall of fame. The
        # first hall-of-fame entry comes at the first sync after a member's checkpoint at
        # version hof_every - 1 or later, which the copy above may precede.
        def m0_guests():
            with PolicyPool(run_dir / "members" / "m0" / "pool") as pool:
                return {g.name: g.kind for g in pool.guests()}

        def cross_and_past():
            guests = m0_guests() if pop.hall_of_fame else {}
            return {"m1", "m2"} <= guests.keys() and set(guests.values()) == {"cross", "past"}

        def seen():
            versions = {n: m.version for n, m in pop.members.items()}
            fame = [e["policy"] for e in pop.hall_of_fame]
            return f"versions {versions}, hall of fame {fame}, m0's guests {m0_guests()}"

        if not cross_and_past():  # mostly it holds already: no tick (a league round) is spent
            tick_until(
                pop,
                cross_and_past,
                120,
                f"a hall-of-fame entry (a member at version {cfg.population.hof_every - 1}) and "
                "m0's pool to hold m1 and m2 as cross guests and the hall of fame as past guests",
                seen,
            )
        assert pop.hall_of_fame
        guests = m0_guests()
        assert {"m1", "m2"} <= guests.keys()
        assert set(guests.values()) == {"cross", "past"}

        # Killing one member's run restarts that member alone. No member copies another from
        # here on (a copy restarts a member too), so the kill is the only cause of a restart.
        pop.p.ready_versions = 10**9
        pids = {n: r.process.pid for n, r in pop.runs.items()}
        os.killpg(pids["m2"], signal.SIGKILL)
        tick_until(pop, lambda: events(run_dir, "restart"), 60, "a restart")
        assert [e["member"] for e in events(run_dir, "restart")] == ["m2"]
        assert pop.runs["m0"].process.pid == pids["m0"] and pop.runs["m2"].alive()

        # Members join and retire while the population runs.
        request(run_dir, "add")
        tick_until(pop, lambda: "m3" in pop.members, 30, "m3 to join")
        lo, hi = LR_RANGE
        assert lo <= pop.members["m3"].hyper["agent.ppo.lr"] <= hi
        request(run_dir, "retire", "m3")
        tick_until(pop, lambda: events(run_dir, "retire"), 120, "m3 to retire")
        assert pop.members["m3"].status == "retired" and not pop.runs["m3"].alive()
        with pytest.raises(ValueError, match="no member 'm9'"):
            request(run_dir, "retire", "m9")
        before = pop.manifest()
    finally:
        pop.shutdown()
        pop.close()
    with Ratings(run_dir / "league") as ratings:
        board = {(r.policy, r.role): (r.mu, r.sigma) for r in ratings.leaderboard()}
    assert all(not pop.runs[n].alive() for n in pop.runs)

    # Resume: hyperparameters, hall of fame, lineage and ratings come back; members continue.
    resumed = PopulationController(load_config(run_dir / "config.yaml"), resume=True)
    try:
        after = resumed.manifest()
        for name, member in before["members"].items():
            assert after["members"][name]["hyper"] == member["hyper"]
            assert after["members"][name]["exploits"] == member["exploits"]
        assert after["hall_of_fame"] == before["hall_of_fame"]
        assert after["counters"]["exploits"] == before["counters"]["exploits"] >= 1
        with Ratings(run_dir / "league") as ratings:
            assert {(r.policy, r.role): (r.mu, r.sigma) for r in ratings.leaderboard()} == board
        # As before the kill, no member copies another: a copy on the resumed league's first
        # rounds would write its events after "resume", which the lineage must end with.
        resumed.p.ready_versions = 10**9
        resumed.start_members()
        assert sorted(resumed.runs[n].alive() for n in resumed.running()) == [True] * 3
        tick_until(
            resumed,
            lambda: all(resumed.members[n].frames > 0 for n in resumed.running()),
            60,
            "resumed members to report their counters",
        )
        assert resumed.members["m1"].version >= version  # from its checkpoint, not from 0
    finally:
        resumed.shutdown()
        resumed.close()
    assert [e["event"] for e in read_records(run_dir / "lineage.jsonl")[0]][-1] == "resume"


def test_population_of_one_is_the_plain_run(tmp_path):
    """members=1 runs today's controller: same layout, same config, same seeds (hence the same
    chunks); member 0 of a population keeps the run's seed and settings."""
    code = train.main(
        [
            "--config",
            "chase",
            f"runs_dir={tmp_path}",
            "name=one",
            "pipeline.backend=pod",
            "pipeline.launcher=serial",
            "pod.worlds=8",
            "eval.n_workers=0",
            "logging.wandb=disabled",
            "logging.progress=false",
            "stop.versions=1",
        ]
    )
    assert code == 0
    run_dir = tmp_path / "one"
    assert not (run_dir / "population.json").exists()
    assert CheckpointDir(run_dir / "checkpoints").steps() == [1]

    cfg = population_config(tmp_path / "p", "population.overrides=[]")
    pop = PopulationController(cfg)
    try:
        m0 = pop.member_config(pop.join())
    finally:
        pop.close()
    assert m0.seed == cfg.seed and m0.agent == cfg.agent and m0.game == cfg.game
    assert m0.pod == cfg.pod and m0.population.members == 1
    assert m0.eval.n_workers == 0  # the league rates members (population.member_eval_workers)
    own = {**dataclasses.asdict(cfg.pool), "p_cross": 0.25, "p_past": 0.25}
    assert dataclasses.asdict(m0.pool) == own


def test_the_summary_names_the_best_member_by_the_views_rule(tmp_path):
    """One member won its one league game, the other half of 30: the first has the higher mean
    mu (the exploit ranking), the second the higher mu - 3 sigma. The summary names the second,
    as the eval view does."""
    cfg = population_config(tmp_path / "p", "population.overrides=[]")
    pop = PopulationController(cfg)
    try:
        lucky, steady = pop.join().name, pop.join().name
        pop.league.ratings.record([Rated("random", lucky, 0.0)])
        for game in range(30):
            pop.league.ratings.record([Rated("random", steady, float(game % 2))])
        roles = cfg.population.league_roles
        assert pop.league.strength(lucky, roles) > pop.league.strength(steady, roles)
        best = pop.summary()["best_member"]
    finally:
        pop.close()
    manifest = {"members": {lucky: {}, steady: {}}}
    assert best == steady == best_member(pop.run_dir, manifest)


@pytest.mark.parametrize("rated_by_league", [False, True])
def test_the_hall_of_fame_stays_at_its_size(tmp_path, rated_by_league):
    """Entries the league plays stay until rated, then the worst go; where it never plays them
    (no rating will come) the oldest go, so a long run keeps `hall_of_fame` files, not one per
    `hof_every` versions of every member."""
    opponents = "[hall_of_fame, random]" if rated_by_league else "[random]"
    cfg = population_config(
        tmp_path, "population.hall_of_fame=2", f"population.league_opponents={opponents}"
    )
    pop = PopulationController(cfg)
    try:
        for version in (4, 8, 12, 16):
            pop._add_to_hall_of_fame("m0", version, {"w": torch.full((2,), float(version))})
        pop._trim_hall_of_fame()
        kept = [e["policy"] for e in pop.hall_of_fame]
        files = sorted(p.name for p in (tmp_path / "pop" / "league").rglob("*.pt"))
    finally:
        pop.close()
    if rated_by_league:  # none rated yet: all four wait for their games
        assert kept == ["m0.4", "m0.8", "m0.12", "m0.16"] and len(files) >= 4
    else:
        assert kept == ["m0.12", "m0.16"]
        assert len([f for f in files if "m0." in f]) == 2


def test_a_sync_makes_the_other_members_and_the_hall_of_fame_each_members_guests(tmp_path):
    cfg = population_config(tmp_path, "population.hof_every=1")
    pop = PopulationController(cfg)
    try:
        for _ in range(3):
            member = pop.join()
            member.version = 1
            run = pop.runs[member.name] = MemberRun(pop.run_dir, member)
            (run.dir / "pool").mkdir(parents=True)
            run.state = {"w": torch.full((2,), float(member.index))}
            pop._fresh.add(member.name)

        def guests(name):
            with PolicyPool(pop.run_dir / "members" / name / "pool") as pool:
                return {g.name: g.kind for g in pool.guests()}

        pop.sync()
        past = {"m0.1": "past", "m1.1": "past", "m2.1": "past"}
        assert guests("m0") == {"m1": "cross", "m2": "cross", **past}
        pop.members["m2"].status = "retired"
        pop.sync()
        assert guests("m0") == {"m1": "cross", **past}
        assert guests("m1") == {"m0": "cross", **past}
    finally:
        pop.close()


def test_population_requests_refuse_what_is_not_a_population(tmp_path, capsys):
    assert train.main(["population", "add", str(tmp_path)]) == 2
    assert "not a population run" in capsys.readouterr().err


@pytest.mark.parametrize(
    "manifest, argv, said",
    [
        ({"m1": {}}, ["retire"], "retire needs the MEMBER to retire; members of RUN: ['m1']"),
        ({"m1": {}}, ["add", "m1"], "add takes no MEMBER (got 'm1')"),
        (None, ["retire", "m1"], "no member 'm1' in RUN; members: []"),
    ],
)
def test_population_requests_say_what_a_request_lacks(tmp_path, capsys, manifest, argv, said):
    data = {"format": 1} if manifest is None else {"format": 1, "members": manifest}
    (tmp_path / "population.json").write_text(json.dumps(data))
    assert train.main(["population", argv[0], str(tmp_path), *argv[1:]]) == 2
    assert f"error: {said.replace('RUN', str(tmp_path))}" in capsys.readouterr().err
    assert not (tmp_path / "requests").exists()  # nothing asked of the population


def run_two_members(tmp_path, *settings: str) -> int:
    """`hns-train` of a population "pop" of two chase members of pods, in `tmp_path`, one
    member's death ending it (`max_restarts=0`), with `settings` on top: its exit code."""
    return train.main(
        [
            "--config",
            "chase",
            f"runs_dir={tmp_path}",
            "name=pop",
            "pipeline.backend=pod",
            "eval.n_workers=0",
            "logging.progress=false",
            "population.members=2",
            "population.max_restarts=0",
            *settings,
        ]
    )


@pytest.mark.slow
def test_population_members_train_with_several_pod_ranks_each(tmp_path):
    """M members of N pod ranks on one node: each member's ranks meet through that member's own
    rendezvous and shared folder, and train its policy together."""
    code = run_two_members(
        tmp_path,
        "pipeline.launcher=local",
        "pipeline.n_trainers=2",
        "pod.worlds=4",
        "agent.ppo.epochs=1",
        "agent.ppo.minibatches=1",
        "logging.wandb=disabled",
        "logging.every_s=1",
        # A time limit, not stop.versions: the population stops every member once the most
        # advanced reaches that, and on 2 busy cores one member's four processes can still be
        # starting when the other's have taken two steps.
        "stop.minutes=1",
    )
    assert code == 0
    sums = []
    for m in ("m0", "m1"):
        member = tmp_path / "pop" / "members" / m
        # An update of a 2-rank member needs both ranks in its sums, so a checkpoint says they
        # trained together.
        assert CheckpointDir(member / "checkpoints").steps(), m
        records, _ = read_records(member / "metrics.jsonl")
        sums += [r["pod/sync_ms_per_frame"] for r in records if "pod/sync_ms_per_frame" in r]
    assert sums and max(sums) > 0, "no member's ranks reported time in their sums"


@pytest.mark.slow
def test_population_on_ray_gives_each_member_its_own_placement_group(tmp_path):
    ray = pytest.importorskip("ray")
    cfg = population_config(
        tmp_path,
        "population.members=2",
        "population.overrides=[]",
        "pipeline.launcher=ray",
        "pipeline.ray_num_cpus=2",
        "pod.worlds=8",
    )
    pop = PopulationController(cfg)
    try:
        pop.start_members()
        address = pop.ray_address
        assert address and ray.is_initialized()
        tick_until(pop, lambda: all(m.frames > 0 for m in pop.members.values()), 180, "training")
        groups = [g for g in ray.util.placement_group_table().values() if g["state"] == "CREATED"]
        assert len(groups) >= 2  # one (the pod's) per member
        for name in ("m0", "m1"):
            member_cfg = yaml.safe_load((cfg.run_dir / "members" / f"{name}.yaml").read_text())
            assert member_cfg["pipeline"]["ray_address"] == address
    finally:
        pop.shutdown()
        pop.close()
    assert not ray.is_initialized()
    assert all(not r.alive() for r in pop.runs.values())


def test_population_logs_members_and_lineage_to_its_own_wandb_run(tmp_path, monkeypatch):
    """The population's wandb run (in the group of its members' runs) holds each member's
    rating and settings over time and the lineage table."""
    from wandb_runs import offline_runs, read_offline_run

    from hns_train.distributed.wandb_logger import REFERENCE_RUN_ID

    monkeypatch.delenv("WANDB_MODE", raising=False)  # the suite's switch; offline writes files
    for var in ("WANDB_DIR", "WANDB_CONFIG_DIR", "WANDB_CACHE_DIR", "WANDB_DATA_DIR"):
        monkeypatch.setenv(var, str(tmp_path / "wandb-home" / var.lower()))

    cfg = population_config(tmp_path, "logging.wandb=offline", "population.overrides=[]")
    pop = PopulationController(cfg)
    try:
        for _ in range(3):
            pop.join()
        pop.record()
    finally:
        pop.close()
    (offline,) = [p for p in offline_runs(cfg.run_dir) if not p.name.endswith(REFERENCE_RUN_ID)]
    run = read_offline_run(offline)
    (row,) = [r for r in run["history"] if "population/members" in r]
    assert row["population/members"] == 3 and row["frames"] == 0
    assert row["m0/agent/ppo/lr"] == pytest.approx(3e-4)
    assert LR_RANGE[0] <= row["m2/agent/ppo/lr"] <= LR_RANGE[1]
    assert row["m1/seeker_mu"] == pytest.approx(25.0)
    tables = [r for r in run["history"] if "population/lineage" in r]
    assert len(tables) == 3 and tables[-1]["population/lineage"]["_type"] == "table-file"
    table = json.loads((offline / "files" / tables[-1]["population/lineage"]["path"]).read_text())
    assert table["columns"] == ["hours", "member", "event", "details"]
    assert [row[1:3] for row in table["data"]] == [["m0", "join"], ["m1", "join"], ["m2", "join"]]
    assert table["data"][1][3].startswith("lr=")  # as the eval view shows the settings


@pytest.mark.slow
def test_population_with_wandb_offline_starts_every_member_once(tmp_path, monkeypatch, capsys):
    """As users run it (wandb offline, the default): members share their population's wandb
    service, so the paper's reference run is written once, by the population; no member dies
    at start on a run id another member holds (max_restarts=0 makes one death the run's end).
    Once it has stopped, its view shows every member stopped."""
    from wandb_runs import offline_runs

    from hns_train.distributed.wandb_logger import REFERENCE_RUN_ID

    monkeypatch.delenv("WANDB_MODE", raising=False)  # the suite's switch; offline writes files
    for var in ("WANDB_DIR", "WANDB_CONFIG_DIR", "WANDB_CACHE_DIR", "WANDB_DATA_DIR"):
        monkeypatch.setenv(var, str(tmp_path / "wandb-home" / var.lower()))
    code = run_two_members(
        tmp_path,
        "pipeline.launcher=serial",
        "pod.worlds=8",
        "logging.wandb=offline",
        "stop.versions=1",
    )
    run_dir = tmp_path / "pop"
    logs = {m: (run_dir / "members" / f"{m}.log").read_text() for m in ("m0", "m1")}
    assert all("is in use" not in text for text in logs.values()), logs
    assert code == 0 and events(run_dir, "restart") == []
    assert (run_dir / "wandb" / REFERENCE_RUN_ID).is_file()
    assert len(offline_runs(run_dir)) == 2  # the reference run and the population's own
    for m in ("m0", "m1"):
        member = run_dir / "members" / m
        assert not (member / "wandb" / REFERENCE_RUN_ID).exists()
        assert len(offline_runs(member)) == 1  # the member's own run
    capsys.readouterr()
    assert eval_main(["--run", str(run_dir)]) == 0
    out = capsys.readouterr().out
    assert "2 members (stopped: " in out
    rows = [line.split() for line in out.splitlines() if re.match(r"  m\d ", line)]
    assert [r[:2] for r in rows] == [["m0", "stopped"], ["m1", "stopped"]]
