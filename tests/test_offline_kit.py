"""The offline kit rehearsed end to end: built, installed with no index, then gpu_day from it.

The kit is built for this Python by bench/offline_kit.py (pip resolves and downloads from the
index, so the test is skipped where pip cannot reach one), without warp-lang's big library,
the packages torch brings and matplotlib (this environment has them; they are left out to keep
the test short), in parts of KIT_PART_MB = 4 so that a wheel larger than a part (mujoco-core)
is compressed, split and joined. Then:
- a missing part: part-1's install.sh installs the rest and names the part and what it held,
  with no traceback; a damaged piece is refused by its checksum;
- all parts: everything installs into the same folder (pip the first time, unzip the second),
  and `bench/gpu_day.sh` runs from the checkout with that folder on PYTHONPATH (DEVICE=cpu, a
  short DEADLINE): the report holds every step's section with its exit status, or its skip,
  and mujoco comes from the install.

The node's kit's choices are checked without the network, on this environment's own installed
dependency graph (the shape of pip's report): what the node's list (bench/node_packages.txt)
leaves out and what it must carry all the same; and the size rule, a part that would not fit
beside the checkout's tree in one device call.
"""

from __future__ import annotations

import importlib.metadata
import json
import lzma
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from tests.scripts import load_script

ROOT = Path(__file__).resolve().parent.parent
KIT_PART_MB = 4
SKIP = "torch numpy numba llvmlite warp-lang matplotlib"
STEPS = (
    "warp_compile",
    "warp_speed_quadrant",
    "warp_speed_randomwalls",
    "warp_pod",
    "c_pod",
    "learn_chase",
    "batch_memory",
)
DEADLINE_S = 30


def run(cmd, **kw) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, capture_output=True, text=True, **kw)


@pytest.fixture(scope="module")
def kit(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("kit") / "kit"
    built = run(
        [
            sys.executable,
            str(ROOT / "bench" / "offline_kit.py"),
            "--out",
            str(out),
            "--skip",
            SKIP,
            "--part-mb",
            str(KIT_PART_MB),
            "--no-extras",
            "--xz-preset",
            "1",
        ],
        timeout=300,
    )
    if built.returncode != 0 and "could not resolve" in built.stderr + built.stdout:
        pytest.skip(f"pip cannot reach a package index here: {built.stderr[-300:]}")
    assert built.returncode == 0, built.stdout + built.stderr
    (out.parent / "build.out").write_text(built.stdout)
    return out


def part_of(manifest: dict, project: str) -> int:
    entry = next(e for e in manifest["wheels"] if e["project"] == project)
    return entry["pieces"][-1]["part"]


@pytest.mark.slow
def test_kit_installs_without_index_and_runs_gpu_day(kit, tmp_path):
    manifest = json.loads((kit / "part-1" / "kit.json").read_text())
    parts = sorted(kit.glob("part-*"))
    assert len(parts) == manifest["parts"] >= 2
    printed = (kit.parent / "build.out").read_text()
    for n, part in enumerate(parts, start=1):  # within the limit, install.sh and manifest too
        size = sum(f.stat().st_size for f in part.iterdir())
        assert size <= KIT_PART_MB * 2**20
        # next to the tree that travels with it in a device call
        assert f"part-{n}: {round(size / 2**20, 1)} MiB + the checkout's tree " in printed
    split = [e for e in manifest["wheels"] if "pieces" in e]
    assert "mujoco-core" in {e["project"] for e in split}
    assert all(len(e["pieces"]) >= 2 for e in split)
    projects = {e["project"] for e in manifest["wheels"]}
    assert not projects & {"torch", "numpy", "warp-lang", "wandb", "imageio-ffmpeg", "glfw"}

    # a missing part: the rest is installed, the part and what it held are named
    target = tmp_path / "site"
    hold = part_of(manifest, "mujoco-core")
    away = tmp_path / "away"
    shutil.move(kit / f"part-{hold}", away)
    env = {**os.environ, "PYTHON": sys.executable, "PIP_NO_INDEX": "1"}
    first = run(["sh", str(kit / "part-1" / "install.sh"), str(target)], env=env, timeout=300)
    assert first.returncode == 0, first.stdout + first.stderr
    assert "Traceback" not in first.stdout + first.stderr
    assert f"part-{hold} is missing" in first.stdout
    assert "mujoco-core" in first.stdout
    assert "mujoco_core" not in (target / ".hns-kit-installed").read_text()
    # mujoco itself is held back: it needs mujoco-core
    assert "held back: mujoco, which needs mujoco-core" in first.stdout
    assert (target / "pettingzoo").is_dir()  # a wheel of a part that is present

    # a damaged piece is refused by its checksum, plainly
    shutil.move(away, kit / f"part-{hold}")
    piece = next((kit / f"part-{hold}").glob("mujoco_core-*.xz.*"))
    original = piece.read_bytes()
    piece.write_bytes(original[:-1] + bytes([original[-1] ^ 1]))
    bad = run(["sh", str(kit / "part-1" / "install.sh"), str(target)], env=env, timeout=300)
    assert bad.returncode == 2
    assert "does not match its checksum" in bad.stderr and "Traceback" not in bad.stderr
    piece.write_bytes(original)

    # all parts: the rest joins and installs into the same folder, unzipped as without pip
    second = run(
        ["sh", str(kit / "part-1" / "install.sh"), str(target), "--unzip"], env=env, timeout=300
    )
    assert second.returncode == 0, second.stdout + second.stderr
    assert "is missing" not in second.stdout
    where = run(
        [sys.executable, "-c", "import mujoco; print(mujoco.__file__, mujoco.__version__)"],
        env={**os.environ, "PYTHONPATH": str(target)},
    )
    assert where.stdout.startswith(str(target)), where.stdout + where.stderr

    # gpu_day from the install: every step has its section and status within the deadline
    reports = tmp_path / "reports"
    day = run(
        ["bash", str(ROOT / "bench" / "gpu_day.sh")],
        env={
            **os.environ,
            "PY": sys.executable,
            "PYTHONPATH": str(target),
            "DEVICE": "cpu",
            "DEADLINE": str(DEADLINE_S),
            "MIN_STEP_S": "3",
            "REPORT_DIR": str(reports),
        },
        timeout=DEADLINE_S + 60,
    )
    (report,) = reports.glob("gpu-*.md")
    text = report.read_text()
    # exit 0 when a step succeeded, 1 when none did (at this deadline either may happen)
    succeeded = "| exit 0 |" in text.split("## Summary", 1)[1]
    assert day.returncode == (0 if succeeded else 1), day.stderr[-2000:]
    for n, step in enumerate(STEPS, start=1):
        section = text.split(f"## {n}. {step}\n", 1)
        assert len(section) == 2, f"no section for {step} in\n{text}"
        status = section[1].split("\n## ", 1)[0]
        assert "exit " in status or "skipped:" in status, status
    assert f"mujoco 4.0.0 {target}" in text
    assert "## Summary" in text and f"of DEADLINE={DEADLINE_S}" in text


WITHOUT_PACKAGES = """
import sys
sys.modules["wandb"] = None  # as in an install of the kit without its logging extras
sys.modules["imageio_ffmpeg"] = None
from pathlib import Path
from hns_train.distributed.wandb_logger import WandbLogger, log_reference_run
from hns_train.eval.video import write_video
run = Path(sys.argv[1])
for _ in range(2):
    logger = WandbLogger(run, {"name": "x"}, mode="offline")
    logger.log({"kind": "train", "episodes": 1, "frames": 10})
    logger.finish()
print("enabled", logger.run is not None, "reference", log_reference_run(dir=run, mode="offline"))
print("wandb dir", (run / "wandb").exists())
try:
    write_video(None, run / "x.mp4")
except ValueError as err:
    print("video:", err)
"""


def test_runs_go_without_wandb_and_ffmpeg_saying_so_once(tmp_path):
    done = run(
        [sys.executable, "-c", WITHOUT_PACKAGES, str(tmp_path / "run")],
        env={**os.environ, "PYTHONPATH": str(ROOT), "WANDB_MODE": ""},
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert "enabled False reference None" in done.stdout
    assert "wandb dir False" in done.stdout
    assert "mp4 needs the imageio-ffmpeg package" in done.stdout
    assert done.stderr.count("wandb is not installed") == 1, done.stderr
    assert "Traceback" not in done.stderr


MIB = 2**20


@pytest.fixture(scope="module")
def offline_kit():
    return load_script("bench/offline_kit.py")


def installed_graph() -> dict[str, dict]:
    """This environment's installed distributions as pip's `--report` entries."""
    graph = {}
    for dist in importlib.metadata.distributions():
        name = dist.metadata["Name"]
        graph[canonicalize_name(name)] = {
            "metadata": {"name": name, "version": dist.version, "requires_dist": dist.requires}
        }
    return graph


def node_kit(offline_kit, node: dict) -> tuple[set, list, dict]:
    roots = [
        r
        for r in offline_kit.project_requirements(no_extras=True)
        if canonicalize_name(Requirement(r).name) != "torch"
    ]
    cut = {"torch", *offline_kit.HEADLESS, *offline_kit.EXTRAS}
    version = ".".join(map(str, sys.version_info[:2]))
    return offline_kit.select(roots, installed_graph(), version, cut, node)


def test_the_node_kit_leaves_out_what_the_node_has_unless_it_needs_another_version(offline_kit):
    node = offline_kit.read_node_packages(offline_kit.NODE_PACKAGES)
    assert node["numpy"] == "2.5.2" and node["torch"] == "2.11.0" and node["numba"] is None
    keep, left, carried = node_kit(offline_kit, node)
    assert {"mujoco", "mujoco-core", "warp-lang", "mujoco-warp", "pyzmq", "gymnasium"} <= keep
    shadowing = {"matplotlib", "pillow", "pyyaml", "typing-extensions", "packaging", "fsspec"}
    assert not keep & (shadowing | {"numpy", "etils", "fonttools", "absl-py"})
    assert {"matplotlib", "numpy", "pyyaml", "etils", "fsspec"} <= set(left)
    # the node's numba was not read and the project pins it; numba then caps llvmlite
    assert {"numba", "llvmlite"} <= keep
    assert carried["numba"] == "the node's version is not known, the project needs numba==0.68.1"
    assert carried["llvmlite"].startswith("the node's version is not known, numba needs llvmlite")

    # a known version: kept when it fails the requirement, left out (with llvmlite) when it meets it
    keep, _, carried = node_kit(offline_kit, {**node, "numba": "0.66.0"})
    assert carried["numba"] == "the node has 0.66.0, the project needs numba==0.68.1"
    keep, left, carried = node_kit(offline_kit, {**node, "numba": "0.68.1"})
    assert not keep & {"numba", "llvmlite"} and not carried
    assert {"numba", "numpy"} <= set(left)  # numba's own llvmlite is the node's concern

    # a node package wanted with an extra still brings what the extra adds: etils[epath]
    without_fsspec = {n: v for n, v in node.items() if n != "fsspec"}
    keep, left, _ = node_kit(offline_kit, without_fsspec)
    assert "fsspec" in keep and "etils" in left


def test_the_node_package_list_names_a_bad_line(offline_kit, tmp_path):
    listed = tmp_path / "node.txt"
    listed.write_text("# the node\nnumpy==2.5.2\ntorch>=2.4\n")
    with pytest.raises(SystemExit) as stop:
        offline_kit.read_node_packages(listed)
    assert str(stop.value) == (
        f"offline_kit: {listed}:3: 'torch>=2.4' is not NAME or NAME==VERSION"
    )


def test_a_part_that_would_not_fit_beside_the_tree_is_refused(offline_kit):
    tree = offline_kit.tree_bytes(ROOT)
    listed = subprocess.run(
        ["git", "-C", str(ROOT), "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        capture_output=True,
        check=True,
    ).stdout.split(b"\0")
    files = [ROOT / os.fsdecode(name) for name in listed if name]
    assert tree == sum(f.lstat().st_size for f in files if os.path.lexists(f)) > MIB

    call = 56 * MIB
    assert offline_kit.oversized([call - tree, 10 * MIB], tree, call) == ""
    refusal = offline_kit.oversized([40 * MIB, call - tree + MIB], tree, call)
    assert refusal == (
        f"part-2 would be {(call - tree + MIB) / MIB:.1f} MiB and the checkout's tree is "
        f"{tree / MIB:.1f} MiB: 57.0 MiB in one device call, over --call-mb 56; "
        f"use --part-mb {(call - tree) / MIB:.1f} or less"
    )


def test_a_kit_inside_the_checkout_must_be_ignored_by_git(offline_kit, tmp_path):
    assert offline_kit.inside_and_carried(ROOT / "kit-here", ROOT)
    assert not offline_kit.inside_and_carried(ROOT / "dist" / "offline-kit", ROOT)
    assert not offline_kit.inside_and_carried(tmp_path / "kit", ROOT)
    with pytest.raises(SystemExit, match="inside the checkout and git does not ignore it"):
        offline_kit.main(["--out", str(ROOT / "kit-here"), "--part-mb", "4"])


def test_a_wheel_that_needs_a_missing_part_is_held_back():
    kit_install = load_script("bench/kit_install.py")
    entries = [
        {"project": "numba", "part": 1, "requires": ["llvmlite", "numpy"]},
        {"project": "llvmlite", "pieces": [{"part": 1}, {"part": 2}], "requires": []},
        {"project": "pyzmq", "part": 1, "requires": []},
        {"project": "needs-numba", "part": 1, "requires": ["numba"]},
        {"project": "warp-lang", "pieces": [{"part": 2}, {"part": 3}]},  # a kit without requires
    ]
    assert kit_install.held_back(entries, {1}) == {
        "numba": ["llvmlite"],
        "needs-numba": ["numba"],
    }
    assert kit_install.held_back(entries, {1, 2}) == {}


def test_split_wheels_streams_are_cached_and_checked(offline_kit, tmp_path, monkeypatch):
    monkeypatch.setattr(offline_kit, "XZ_CACHE", tmp_path / "cache")
    wheel = tmp_path / "w.whl"
    wheel.write_bytes(os.urandom(50_000) * 3)
    offline_kit.xz_cached(wheel, tmp_path / "a.xz", 1)
    (cached,) = (tmp_path / "cache").iterdir()
    assert cached.name == f"{offline_kit.sha256(wheel)}-1.xz"
    assert cached.read_bytes() == (tmp_path / "a.xz").read_bytes()
    # a stream that unpacks to the wheel is used as it is (here one of another preset) ...
    cached.write_bytes(lzma.compress(wheel.read_bytes(), preset=0))
    offline_kit.xz_cached(wheel, tmp_path / "b.xz", 1)
    assert (tmp_path / "b.xz").read_bytes() == cached.read_bytes()
    # ... one that does not is made again, and replaced
    cached.write_bytes(lzma.compress(b"another wheel"))
    offline_kit.xz_cached(wheel, tmp_path / "c.xz", 1)
    assert lzma.decompress((tmp_path / "c.xz").read_bytes()) == wheel.read_bytes()
    assert lzma.decompress(cached.read_bytes()) == wheel.read_bytes()
