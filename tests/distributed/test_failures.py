"""Nothing lost, nothing silent: damaged logs, full disks, devices this machine lacks, runs that
made no frame, two owners of one run directory, counters on resume. Real `python -m
hns_train.train` processes, real files, and a real small filesystem (tmpfs) for a full disk."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
import torch
from waiting import wait_for

from hns_train.agents.checkpoint import CheckpointDir

ROOT = Path(__file__).resolve().parents[2]
QUIET = ["logging.progress=false", "logging.wandb=disabled"]


def train(*args: str, timeout: float = 240) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "hns_train.train", *args, *QUIET]
    return subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=timeout)


def start_train(*args: str, log: Path) -> subprocess.Popen:
    out = log.open("w")
    cmd = [sys.executable, "-m", "hns_train.train", *args, *QUIET]
    return subprocess.Popen(cmd, cwd=ROOT, stdout=out, stderr=subprocess.STDOUT)


def parsed(path: Path) -> tuple[list[dict], int]:
    """The JSON objects of a JSONL file and how many lines are not one (read here, not with
    the code under test)."""
    found, bad = [], 0
    for line in path.read_text().splitlines():
        try:
            found.append(json.loads(line))
        except json.JSONDecodeError:
            bad += 1
    return found, bad


def records(run_dir: Path) -> list[dict]:
    return parsed(run_dir / "metrics.jsonl")[0]


def last_frames(run_dir: Path) -> int:
    return [r for r in records(run_dir) if r.get("kind") == "train"][-1]["frames"]


@pytest.fixture(scope="module")
def stopped_run(tmp_path_factory) -> Path:
    """A finished smoke run (one optimisation step): copied by each test that resumes it."""
    root = tmp_path_factory.mktemp("runs")
    out = train("--config", "smoke", f"runs_dir={root}", "name=done", "stop.versions=1")
    assert out.returncode == 0, out.stdout + out.stderr
    return root / "done"


@pytest.fixture(scope="module")
def damaged_and_resumed(stopped_run, tmp_path_factory):
    """The run with a line cut in the middle of metrics.jsonl and a last line cut short (a
    full disk, a kill mid-write), resumed until it makes new frames."""
    run = tmp_path_factory.mktemp("damaged") / "run"
    shutil.copytree(stopped_run, run)
    metrics = run / "metrics.jsonl"
    lines = metrics.read_text().splitlines()
    cut = lines[0][:40]
    metrics.write_text("\n".join([lines[0], cut, *lines[1:]]) + '\n{"kind": "train", "fra')
    before = last_frames(run)
    out = train("--resume", str(run), "stop.versions=0", f"stop.frames={before + 1}")
    return run, before, out


def test_a_damaged_metrics_line_costs_one_record_not_the_run(damaged_and_resumed):
    # On the code before: ValueError ".../metrics.jsonl:2 is not a JSON object" (a traceback)
    # on every resume.
    run, _, out = damaged_and_resumed
    log = out.stdout + out.stderr
    assert out.returncode == 0, log
    assert "Traceback" not in log, log
    assert log.count("damaged lines skipped") == 1, log
    # the half last line was ended before the next record: only the two damaged lines are lost
    assert parsed(run / "metrics.jsonl")[1] == 2
    assert any(r.get("kind") == "resume" for r in records(run))


def test_a_resume_continues_the_counts_where_the_run_stopped(stopped_run, tmp_path):
    # On the code before, the counts went back to the checkpoint's (fewer frames and
    # episodes than the run had recorded), and every curve went backwards at the resume.
    run = tmp_path / "run"
    shutil.copytree(stopped_run, run)
    before = [r for r in records(run) if r.get("kind") == "train"][-1]
    out = train("--resume", str(run), "stop.versions=0", f"stop.frames={before['frames'] + 1}")
    assert out.returncode == 0, out.stdout + out.stderr
    kept = records(run)
    resume = next(r for r in kept if r.get("kind") == "resume")
    assert (resume["frames"], resume["episodes"]) == (before["frames"], before["episodes"])
    train_records = [r for r in kept if r.get("kind") == "train"]
    for key in ("frames", "episodes", "hours"):
        values = [r[key] for r in train_records]
        assert values == sorted(values), (key, values)


@pytest.mark.parametrize(
    ("change", "named"),
    [
        ("agent.network.embed_dim=64", "shapes differ: policy_net.self_embed.weight saved (32, "),
        (
            "game.n_lidar=5",
            "shapes differ: obs_norm.stats.lidar.biased_mean saved (30,), here (5,)",
        ),
        ("agent.network.kind=mlp", "the weights are of kind 'entity', this network of 'mlp'; "),
    ],
)
def test_a_resume_whose_checkpoint_does_not_fit_is_refused_before_a_worker(
    stopped_run, tmp_path, capsys, change, named
):
    # On the code before: the trainer's load_state_dict traceback (a restart loop on the local
    # launcher, each restart failing the same way).
    from hns_train import train as train_module

    run = tmp_path / "run"
    shutil.copytree(stopped_run, run)
    checkpoints = sorted((run / "checkpoints").iterdir())
    assert train_module.main(["--resume", str(run), change, *QUIET]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"error: --resume {run}: {checkpoints[-1].name} does not fit"), err
    # the parameters that differ, named (torch's message stopped at "Error(s) in loading")
    assert named in err and err.count("\n") == 1, err
    assert sorted((run / "checkpoints").iterdir()) == checkpoints


@pytest.mark.parametrize("limit", ["versions", "frames", "minutes"])
def test_a_run_resumed_at_its_limit_stops_before_a_worker_starts(
    stopped_run, tmp_path, capsys, limit
):
    # On the code before: every worker started (the trainer loaded its checkpoint, the actors
    # played their first steps: a few more frames) before the first tick found the limit reached.
    from hns_train import train as train_module

    run = tmp_path / "run"
    shutil.copytree(stopped_run, run)
    frames = last_frames(run)
    setting = {"versions": "1", "frames": str(frames), "minutes": "0.001"}[limit]
    others = [f"stop.{k}=0" for k in ("versions", "frames", "minutes") if k != limit]
    checkpoints = {p.name: p.read_bytes() for p in (run / "checkpoints").iterdir()}
    with (run / "metrics.jsonl").open("a") as f:  # the phases recorded carry over
        f.write(json.dumps({"kind": "phase", "phase": "running_and_chasing", "frames": 9}) + "\n")
    args = ["--resume", str(run), f"stop.{limit}={setting}", *others, "logging.progress=true"]
    assert train_module.main(args) == 0
    shown, bar = capsys.readouterr()
    # no worker ran, so no trainer wrote a final checkpoint: the bar used to say it did
    assert f"stopping (reached stop.{limit}=" in bar and "final checkpoint" not in bar, bar
    assert f"stopped         reached stop.{limit}=" in shown, shown
    assert "phases reached  running_and_chasing" in shown, shown
    assert "optimisation    1 steps" in shown and f"env frames      {frames:,} " in shown, shown
    assert {p.name: p.read_bytes() for p in (run / "checkpoints").iterdir()} == checkpoints
    assert [r["kind"] for r in records(run)][-2:] == ["resume", "train"]


def test_a_writer_ends_a_line_cut_short_before_the_next_record(tmp_path):
    from hns_train.jsonl import append_record, read_records

    path = tmp_path / "lineage.jsonl"
    path.write_text('{"event": "join"}\n{"event": "exp')
    append_record(path, {"event": "retire"})
    found, notes = read_records(path)
    assert [r["event"] for r in found] == ["join", "retire"]
    assert notes == ["lineage.jsonl:2 is not a JSON object; skipped"]


def test_a_population_reads_each_whole_metrics_line_once_and_a_line_being_written_later(
    tmp_path,
):
    from hns_train.agents.population import Member
    from hns_train.distributed.population import MemberRun

    run = MemberRun(tmp_path, Member(index=0, seed=0, hyper={}))
    run.read_progress()  # before its run wrote anything
    run.dir.mkdir(parents=True)
    path = run.dir / "metrics.jsonl"
    path.write_text('{"kind": "train", "frames": 1}\nnot json\n{"kind": "train", "fra')
    run.read_progress()
    assert run.member.frames == 1
    with path.open("a") as f:
        f.write('mes": 3, "episodes": 2}\n{"kind": "phase", "frames": 9}\n')
    run.read_progress()
    assert (run.member.frames, run.member.episodes) == (3, 2)
    run.member.frames = 0  # each line is read once: nothing more to read
    run.read_progress()
    assert run.member.frames == 0


@pytest.mark.slow
def test_a_run_directory_has_one_owner(stopped_run, tmp_path):
    # On the code before, both resumes ran and wrote interleaved records and checkpoints.
    run = tmp_path / "run"
    shutil.copytree(stopped_run, run)
    first = start_train("--resume", str(run), "stop.versions=0", log=tmp_path / "first.log")
    try:
        wait_for(
            lambda: sum(r.get("kind") == "resume" for r in records(run)) == 1, 120, "the resume"
        )
        frames = last_frames(run)
        second = train("--resume", str(run), "stop.versions=0", f"stop.frames={frames + 1}")
        assert second.returncode == 2, second.stdout + second.stderr
        assert f"is in use by process {first.pid}" in second.stderr, second.stderr
        assert "Traceback" not in second.stderr
        assert sum(r.get("kind") == "resume" for r in records(run)) == 1
    finally:
        first.kill()  # kill -9: the owner cannot release anything itself
        first.wait()
    from hns_train.distributed.run_lock import RunLock

    RunLock(run).release()  # a dead owner holds no lock


def test_a_run_lock_is_refused_while_held_and_free_once_released_or_dropped(tmp_path):
    from hns_train.distributed.run_lock import RunLock, claim

    held = RunLock(tmp_path)
    with pytest.raises(ValueError, match=f"in use by process {os.getpid()}"):
        RunLock(tmp_path)
    held.release()
    RunLock(tmp_path).release()
    RunLock(tmp_path)  # never released: dropping it drops the lock
    RunLock(tmp_path).release()
    claim(tmp_path, resume=False).release()  # a start refused there left only the owner file
    (tmp_path / "config.yaml").touch()
    with pytest.raises(ValueError, match="already exists; pass --resume"):
        claim(tmp_path, resume=False)
    claim(tmp_path, resume=True).release()


def test_a_start_that_fails_after_taking_the_run_lets_go_of_all_it_took(tmp_path):
    # A host no port binds on fails the start once the run directory, its files and the
    # socket folder are taken. On the code before, the run directory kept its files and its
    # lock (held while the failed start was still referenced, as by this traceback), and the
    # socket folder stayed until the process ended: the same name could not start again.
    from hns_train.config import load_config
    from hns_train.distributed.controller import Controller
    from hns_train.distributed.run_lock import LOCK_NAME, SOCKETS_PREFIX, RunLock

    def socket_folders():
        return set(Path(tempfile.gettempdir()).glob(f"{SOCKETS_PREFIX}{os.getpid()}-*"))

    where = [f"runs_dir={tmp_path}", "name=again", "pipeline.launcher=local", *QUIET]
    before = socket_folders()
    bad_host = load_config("smoke", [*where, "pipeline.transport=tcp", "pipeline.host=192.0.2.1"])
    refused = "pipeline.host='192.0.2.1': no port can be bound"
    with pytest.raises(ValueError, match=refused) as failed:  # kept: it references the start
        Controller(bad_host)
    assert [p.name for p in (tmp_path / "again").iterdir()] == [LOCK_NAME]
    assert socket_folders() == before
    RunLock(tmp_path / "again").release()  # free, while the failed start is still referenced
    again = Controller(load_config("smoke", where))  # the same run directory, a new run
    again._stop_workers()  # none started: lets go of the lock, sockets and folders
    assert (tmp_path / "again" / "config.yaml").is_file()
    assert socket_folders() == before
    assert failed.value.__traceback__ is not None  # (held to here)


@pytest.mark.parametrize("runs_dir", ["read_only", "a_file"])
def test_a_runs_dir_that_cannot_be_written_is_named_in_one_line(runs_dir, tmp_path, capsys):
    # On the code before: a raw traceback ending in PermissionError or NotADirectoryError.
    from hns_train import train as train_module

    runs = tmp_path / "runs"
    if runs_dir == "read_only":
        if os.geteuid() == 0:
            pytest.skip("root writes into a read-only folder: permissions do not apply")
        runs.mkdir(mode=0o500)
        problem = "Permission denied"
    else:
        runs.write_text("not a folder")
        problem = f"{runs} is a file, so the run's folder"
    code = train_module.main(["--config", "smoke", f"runs_dir={runs}", "name=new", *QUIET])
    assert code == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and err.count("\n") == 1, err
    assert problem in err and str(runs / "new") in err, err


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has a CUDA device")
def test_an_unusable_device_is_refused_at_start(tmp_path):
    # On the code before: every pod crashed ("no CUDA device is available"), restarted,
    # crashed again, no frame was made, and the run ended "reached stop.minutes" with exit 0.
    start = time.monotonic()
    out = train(
        "--config",
        "smoke",
        f"runs_dir={tmp_path}",
        "name=cuda",
        "pipeline.backend=pod",
        "pod.physics=warp",
        "pipeline.device=cuda",
        "stop.minutes=0.3",
    )
    assert out.returncode == 2, out.stdout + out.stderr
    assert out.stderr.strip().splitlines() == [
        "error: this machine cannot run these settings: pipeline.device='cuda' but this "
        "machine has 0 CUDA devices; use pipeline.device=cpu or auto"
    ]
    assert not (tmp_path / "cuda").exists()
    assert time.monotonic() - start < 60


def test_a_device_this_machine_lacks_or_a_malformed_one_is_named_in_the_error():
    # The workers resolve the device with the same function: on the code before, a GPU index
    # past this machine's went to torch (its own error, in every worker), and a malformed name
    # on a machine without CUDA was reported as "no CUDA device is available".
    from hns_train.distributed.devices import resolve_device

    n = torch.cuda.device_count() if torch.cuda.is_available() else 0
    machine = f"this machine has {n} CUDA device{'' if n == 1 else 's'}"
    for name in (f"cuda:{n}", f"cuda:{n + 7}"):  # on this CPU-only machine: cuda:0 and cuda:7
        with pytest.raises(ValueError) as err:
            resolve_device(name)
        assert str(err.value) == f"pipeline.device='{name}' but {machine}"
    for name in ("cuda:x", "cuda:-1", "cuda:", "gpu", "cpu:0"):
        with pytest.raises(ValueError, match="allowed: auto, cpu, cuda, cuda:N"):
            resolve_device(name)
    assert resolve_device("cpu") == torch.device("cpu")


def test_warp_physics_without_mujoco_warp_is_refused_by_the_device_check(monkeypatch):
    from hns_train.config import load_config
    from hns_train.distributed.devices import device_problems

    monkeypatch.setitem(sys.modules, "mujoco_warp", None)  # as on an install without the extra
    cfg = load_config("smoke", ["pipeline.backend=pod", "pod.physics=warp", "pipeline.device=cpu"])
    (problem,) = device_problems(cfg)
    assert problem.startswith("MuJoCo Warp does not import here (ModuleNotFoundError")
    assert "pip install -e '.[warp]'" in problem and "pod.physics=c" in problem


def test_a_run_that_made_no_frame_does_not_exit_0(tmp_path):
    # Workers that cannot start before the run's time is up (here: 1.2 s, less than a spawned
    # worker takes to import torch) make no frame; the code before still exited 0.
    out = train(
        "--config",
        "smoke",
        f"runs_dir={tmp_path}",
        "name=idle",
        "pipeline.launcher=local",
        "stop.versions=0",
        "stop.minutes=0.02",
    )
    assert out.returncode == 1, out.stdout + out.stderr
    assert "error: no worker made a frame in" in out.stderr, out.stderr
    assert "Traceback" not in out.stderr


# ----------------------------------------------------------------------------- full disks


@pytest.fixture
def small_disk(tmp_path):
    """A real filesystem of 8 MiB (tmpfs), unmounted after the test."""
    mount = tmp_path / "disk"
    mount.mkdir()
    made = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=8m", "tmpfs", str(mount)], capture_output=True
    )
    if made.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {made.stderr.decode().strip()}")
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)


def fill(disk: Path, leave_bytes: int) -> None:
    """Fill `disk` until `leave_bytes` are free."""
    free = shutil.disk_usage(disk).free
    with (disk / "filler").open("wb") as f:
        f.write(b"\0" * max(0, free - leave_bytes))


def test_a_disk_without_room_for_two_checkpoints_is_refused_at_start(small_disk):
    fill(small_disk, 1 << 20)
    out = train("--config", "smoke", f"runs_dir={small_disk}", "name=full")
    assert out.returncode == 2, out.stdout + out.stderr
    line = out.stderr.strip().splitlines()[-1]
    assert line.startswith(f"error: no room for checkpoints in {small_disk}/full/checkpoints: ")
    assert "MiB free" in line and "MiB needed (2 checkpoints of" in line, line
    # nothing made that would refuse the same command once there is room ("already exists")
    assert [p.name for p in (small_disk / "full").iterdir()] == [".owner"]


@pytest.mark.slow
def test_a_disk_that_fills_during_a_run_ends_it_with_the_reason(stopped_run, small_disk):
    # On the code before: the trainer failed its checkpoint (OSError: [Errno 28]), was
    # restarted from the old checkpoint, failed again, until "trainer0 exited and reached
    # pipeline.max_restarts", never naming the disk.
    run = small_disk / "run"
    shutil.copytree(stopped_run, run)
    process = start_train(
        "--resume",
        str(run),
        "pipeline.launcher=local",
        "stop.versions=8",
        log=small_disk.parent / "run.log",
    )
    try:
        wait_for(lambda: any(r.get("kind") == "resume" for r in records(run)), 120, "the start")
        fill(small_disk, 200 << 10)  # room for records, none for a checkpoint
        process.wait(timeout=240)
    finally:
        if process.poll() is None:
            process.send_signal(signal.SIGINT)
            process.wait(timeout=120)
    log = (small_disk.parent / "run.log").read_text()
    assert process.returncode == 1, log
    assert "error: disk full: no room for checkpoints in " in log, log
    assert "MiB free" in log and "then --resume" in log, log
    assert "restarting it" not in log and "Traceback" not in log, log
    os.unlink(small_disk / "filler")
    newest = CheckpointDir(run / "checkpoints").latest()  # the newest good checkpoint is kept
    assert newest is not None
    assert parsed(run / "metrics.jsonl")[1] == 0


@pytest.mark.slow
def test_a_full_disk_in_the_controller_itself_ends_the_run_with_the_reason(stopped_run, small_disk):
    # On the code before: a raw chained traceback from the metrics writer (reporting.py), the
    # last checkpoint unwritten and half a line left in metrics.jsonl. Here every worker runs in
    # the controller's process (serial launcher): each write that fails is the controller's.
    run = small_disk / "run"
    shutil.copytree(stopped_run, run)
    process = start_train("--resume", str(run), "stop.versions=8", log=small_disk.parent / "log")
    try:
        wait_for(lambda: any(r.get("kind") == "resume" for r in records(run)), 120, "the start")
        fill(small_disk, 0)
        process.wait(timeout=240)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    log = (small_disk.parent / "log").read_text()
    assert process.returncode == 1, log
    assert "error: disk full: " in log and "Traceback" not in log, log
    os.unlink(small_disk / "filler")
    assert CheckpointDir(run / "checkpoints").latest() is not None


# ----------------------------------------------------------------------------- clean stops

STORE_GONE = """
import gc
from hns_train.distributed.ddp import make_store
store, port = make_store("127.0.0.1", 5.0)
del store  # what a controller's clean stop does with its rendezvous store
gc.collect()
"""


def test_an_exploit_without_room_for_the_copy_keeps_the_members_own_checkpoint(small_disk):
    # On the code before, the copy was written past the room check of every other checkpoint:
    # it took the last room on the disk, the member was restarted into a run that could
    # write nothing, and its own checkpoints were left in `replaced/`.
    from hns_train.agents.checkpoint import NoRoomError
    from hns_train.config import load_config
    from hns_train.distributed.population import MemberRun, PopulationController

    where = [f"runs_dir={small_disk}", "name=pop", "population.members=2", *QUIET]
    pop = PopulationController(load_config("smoke", where))
    try:
        folders = {}
        for member, tensor_bytes in zip((pop.join(), pop.join()), (1 << 20, 64), strict=True):
            pop.runs[member.name] = MemberRun(pop.run_dir, member)
            folders[member.name] = CheckpointDir(pop.runs[member.name].dir / "checkpoints")
            version = 4 if member.name == "m0" else 2
            state = {"ppo": {"version": version, "model": {"w": torch.zeros(tensor_bytes // 4)}}}
            meta = {"kind": "training", "counters": {"version": version}}
            folders[member.name].save(version, state, meta)
        fill(small_disk, leave_bytes=3 << 19)  # 1.5 MiB: room for one copy of m0's, not two
        hyper = dict(pop.members["m1"].hyper)
        with pytest.raises(NoRoomError, match="no room for checkpoints in .*m1/checkpoints"):
            pop.exploit("m1", "m0", win_probability=0.95)
        assert folders["m1"].steps() == [2]
        assert pop.members["m1"].hyper == hyper and pop.members["m1"].exploits == 0
        assert pop.runs["m1"].process is None  # not restarted into a disk without room
    finally:
        for run in pop.runs.values():
            if run.process is not None:
                run.process.kill()
        pop.close()


def test_the_rendezvous_store_closes_quietly():
    # On the code before, every clean stop of a run with several trainers printed
    # "OSError: [Errno 9] Bad file descriptor" with a traceback: the socket was closed twice.
    out = subprocess.run(
        [sys.executable, "-c", STORE_GONE], cwd=ROOT, capture_output=True, text=True, timeout=60
    )
    assert out.returncode == 0, out.stderr
    assert "Bad file descriptor" not in out.stderr and "Traceback" not in out.stderr, out.stderr


def test_socket_folders_of_gone_owners_are_removed(tmp_path):
    from hns_train.distributed.run_lock import SOCKETS_PREFIX, owned_folder

    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    live = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        for pid in (gone.pid, live.pid):
            (tmp_path / f"{SOCKETS_PREFIX}{pid}-x").mkdir()
        (tmp_path / "hns-unowned").mkdir()  # not made by a controller: left alone
        new = owned_folder(SOCKETS_PREFIX, tmp_path)
        assert new.name.startswith(f"{SOCKETS_PREFIX}{os.getpid()}-")
        assert sorted(p.name for p in tmp_path.iterdir()) == sorted(
            [f"{SOCKETS_PREFIX}{live.pid}-x", "hns-unowned", new.name]
        )
    finally:
        live.kill()
        live.wait()


RENDER_PARENT = """
import sys, time
from hns_train.distributed.evaluator import VideoJob
job = VideoJob(sys.argv[1])
print(job.proc.pid, flush=True)
time.sleep(600)
"""


def test_a_video_render_ends_with_its_eval_worker(tmp_path):
    # On the code before, a render outlived its eval worker killed with the controller and
    # went on to write its video.
    replay = tmp_path / "match.npz"
    shutil.copy(ROOT / "replays" / "example_quadrant.npz", replay)
    parent = subprocess.Popen(
        [sys.executable, "-c", RENDER_PARENT, str(replay)],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        render = int(parent.stdout.readline())
        wait_for(lambda: list(tmp_path.glob(".match.*.tmp.mp4")), 120, "the render to start")
    finally:
        parent.kill()  # kill -9: the worker cannot stop its child itself
        parent.wait()
    wait_for(lambda: not Path(f"/proc/{render}").exists(), 60, "the render to end")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["match.npz"]
