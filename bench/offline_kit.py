"""Build the offline install kit: the wheels the project needs, in parts of limited size.

    python bench/offline_kit.py [--python-version 3.12] [--out dist/offline-kit]
        [--skip "torch ..."] [--node-packages FILE|none] [--call-mb 56] [--part-mb MIB]
        [--cuda-only] [--no-extras]                                         # or: make offline-kit

For a GPU node without internet, whose site Python already has torch (and CUDA): everything the
project needs beyond what the node has, as manylinux x86-64 wheels for `--python-version`,
written to `OUT/part-1/`, `OUT/part-2/`, ... so that each part passes a limited file transfer.
`part-1/` also holds `install.sh` (bench/kit_install.py: install with no index into a folder,
checksums checked) and `kit.json` (what is where).

- What: pip resolves the project's dependencies (pyproject.toml, with the `warp` extra) for the
  target with `--dry-run --report`; a package goes in when it is reachable from the project
  without passing through a skipped one, so `--skip torch` also leaves out what only torch
  brings. `--no-extras` leaves out the logging and video packages (wandb, imageio-ffmpeg: the
  runs then say once that they go without); the desktop viewer's packages (mujoco-studio, glfw)
  are never needed headless.
- Size: a device call carries the checkout's tree (tracked files and untracked ones git does not
  ignore) and one part, together at most `--call-mb` MiB (default 56: the call's limit is 64,
  the rest is room for the tree to grow). A part is at most `--part-mb` MiB, by default what
  the tree leaves of `--call-mb` less 1 MiB (the checkout may grow a little before the call);
  a part that would not fit beside the tree is refused before anything is written, naming
  both sizes. Each part's size is printed next to the tree's. Split wheels' xz streams are
  kept in ~/.cache/hns-train-kit-xz, so a rebuild does not compress them again.
- The node's packages: `--node-packages FILE` (default, with `--cuda-only`: bench/
  node_packages.txt, the image's list; `none`: carry everything) names what the node already
  has, `NAME` or `NAME==VERSION`. Those are left out, with what only they bring, unless the
  project needs a version the node may not have: a known version that fails a requirement on it
  (from the project or a package the kit carries), or an unknown one that such a requirement
  pins or caps (`==`, `~=`, `<`, `<=`); a node package wanted with an extra still brings what
  that extra adds. Carrying one the node has shadows the node's own, so only a need does it.
- `--cuda-only`: warp-lang without `warp-clang.so`, Warp's CPU compiler (Warp initialises
  without it and compiles CUDA kernels with NVRTC). Warp's own examples and tests (24 MB
  unpacked) are always left out: nothing here runs them.
- Order: every wheel first, as they are, into the first part with room; a wheel larger than a
  part (warp-lang; llvmlite where the kit carries numba) is rewritten uncompressed, compressed
  as one xz stream (Python's `lzma` undoes it on the target) and split across the room left,
  Warp last, so the first parts hold everything but the rest of Warp.
- Nothing is installed here and nothing from the downloads is imported or unpickled.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import lzma
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import zipfile
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

sys.path.insert(0, str(Path(__file__).resolve().parent))
from kit_install import sha256  # noqa: E402  (the installer checks with the same digest)

ROOT = Path(__file__).resolve().parent.parent
INSTALLER = Path(__file__).resolve().parent / "kit_install.py"
MIB = 1 << 20
# manylinux tags of the real wheels (mujoco-core, warp-lang, pyzmq: 2_28; matplotlib: 2_17);
# pip takes these as given, so the older ones are listed too.
PLATFORMS = (
    "manylinux_2_28_x86_64",
    "manylinux_2_27_x86_64",
    "manylinux_2_26_x86_64",
    "manylinux_2_17_x86_64",
    "manylinux2014_x86_64",
    "manylinux_2_5_x86_64",
    "manylinux1_x86_64",
)
EXTRAS = ("wandb", "imageio-ffmpeg")  # logging and videos only
HEADLESS = ("mujoco-studio", "glfw")  # mujoco's desktop viewer
CPU_ONLY_FILES = re.compile(r"^warp/bin/.*warp-clang[^/]*$")
NOT_RUN_FILES = re.compile(r"^warp/(examples|tests)/")  # Warp's own examples and tests: 24 MB
NEEDED_FOR = {
    "warp-lang": "the Warp game: pod.physics=warp, bench/warp_speed.py, gpu_day's Warp steps",
    "mujoco-warp": "the Warp game",
    "numba": "the game's compiled loops (hns_train/envs/kernels.py): every run",
    "llvmlite": "numba: every run",
}
NODE_PACKAGES = Path(__file__).resolve().parent / "node_packages.txt"
CALL_MB = 56.0  # tree + part per device call: 8 MiB under the call's 64 for the tree to grow
# the default part leaves this much of --call-mb free too: the checkout may grow a little
# between the kit's build and a call without a new kit
TREE_GROWTH = 1 << 20
# xz streams of the split wheels, by the uncompressed wheel's digest and the preset: a kit
# rebuilt with another part size or package list does not compress Warp again (minutes)
XZ_CACHE = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "hns-train-kit-xz"
# a requirement with one of these says which versions will not do: an unknown version may be one
CAPS = frozenset({"==", "===", "~=", "<", "<="})
RESERVE = 256 * 1024  # room in part 1 for install.sh, kit_install.py and kit.json
XZ_CHUNK = 4 * MIB
MIN_PIECE = 64 * 1024  # no piece of a split file smaller than this, but its last


def project_requirements(no_extras: bool) -> list[str]:
    try:
        import tomllib
    except ModuleNotFoundError:  # Python 3.10
        sys.exit("offline_kit: needs Python 3.11 or later here (tomllib); the target may be older")
    meta = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    reqs = [*meta["dependencies"], *meta["optional-dependencies"]["warp"]]
    if no_extras:
        reqs = [r for r in reqs if canonicalize_name(Requirement(r).name) not in EXTRAS]
    return reqs


def pip_target_args(python_version: str) -> list[str]:
    args = ["--only-binary=:all:", "--python-version", python_version, "--implementation", "cp"]
    for platform in PLATFORMS:
        args += ["--platform", platform]
    return args


def resolve(reqs: list[str], python_version: str, work: Path) -> dict[str, dict]:
    """pip's resolution for the target: {canonical name: report entry}."""
    report = work / "report.json"
    cmd = [sys.executable, "-m", "pip", "install", "-q", "--dry-run", "--ignore-installed"]
    cmd += ["--disable-pip-version-check", "--target", str(work / "none"), "--report", str(report)]
    run([*cmd, *pip_target_args(python_version), *reqs], "resolve the requirements")
    entries = json.loads(report.read_text())["install"]
    return {canonicalize_name(e["metadata"]["name"]): e for e in entries}


def run(cmd: list[str], what: str) -> None:
    done = subprocess.run(cmd)
    if done.returncode != 0:
        sys.exit(f"offline_kit: pip could not {what} (exit {done.returncode}); see pip's message")


def marker_env(python_version: str) -> dict[str, str]:
    return {
        "python_version": python_version,
        "python_full_version": python_version + ".0",
        "sys_platform": "linux",
        "platform_system": "Linux",
        "platform_machine": "x86_64",
        "os_name": "posix",
        "implementation_name": "cpython",
        "platform_python_implementation": "CPython",
        "extra": "",
    }


def walk(
    roots: list[str], resolved: dict[str, dict], python_version: str, cut: set, node: set
) -> tuple[set, dict[str, list[tuple[str, Requirement]]]]:
    """Names reachable from the roots in the target's dependency graph, not passing `cut` nor
    `node`; and for each name of `node` reached, who wants it and how. A `node` package is there
    with its own dependencies, but not necessarily with those of an extra: those are followed."""
    env = marker_env(python_version)
    seen: set[str] = set()
    wanted: dict[str, list[tuple[str, Requirement]]] = {}
    visited: set[tuple[str, str]] = set()  # (name, extra): a requirement's extras add deps
    todo = [("the project", Requirement(r)) for r in roots]
    todo = [(by, r) for by, r in todo if r.marker is None or r.marker.evaluate(env)]
    while todo:  # a dependency's marker is evaluated when it is queued, with its extra
        by, req = todo.pop()
        name = canonicalize_name(req.name)
        if name in cut:
            continue
        on_node = name in node
        if on_node:
            wanted.setdefault(name, []).append((by, req))
        if name not in resolved:
            continue
        if not on_node:
            seen.add(name)
        for extra in ("", *sorted(req.extras)):
            if (name, extra) in visited or (on_node and not extra):
                continue
            visited.add((name, extra))
            for dep in resolved[name]["metadata"].get("requires_dist") or []:
                dep = Requirement(dep)
                if dep.marker is not None and not dep.marker.evaluate({**env, "extra": extra}):
                    continue
                if on_node and (dep.marker is None or dep.marker.evaluate(env)):
                    continue  # a dependency of the package itself: the node's copy has it
                todo.append((name, dep))
    return seen, wanted


def why_carried(name: str, version: str | None, wants: list[tuple[str, Requirement]]) -> str:
    """Why the kit carries a package the node has ('' when it need not)."""
    for by, req in wants:
        spec = req.specifier
        if version is not None and not spec.contains(version, prereleases=True):
            return f"the node has {version}, {by} needs {name}{spec}"
        if version is None and any(s.operator in CAPS for s in spec):
            return f"the node's version is not known, {by} needs {name}{spec}"
    return ""


def select(
    roots: list[str],
    resolved: dict[str, dict],
    python_version: str,
    cut: set,
    node: dict[str, str | None],
) -> tuple[set, list[str], dict[str, str]]:
    """What the kit holds; the node's packages it leaves out; those it carries, each with why.

    A carried node package brings its own dependencies, which may make another one needed
    (numba's llvmlite), so this repeats until nothing changes."""
    carried: dict[str, str] = {}
    while True:
        keep, wanted = walk(roots, resolved, python_version, cut, set(node) - set(carried))
        more = {n: why_carried(n, node[n], wants) for n, wants in wanted.items()}
        more = {n: why for n, why in more.items() if why}
        if not more:
            return keep, sorted(wanted), carried
        carried.update(more)


def in_kit(name: str, resolved: dict[str, dict], keep: set, python_version: str) -> list[str]:
    """The kit's packages that `name` requires: the installer holds it back until they are
    there too, rather than let it shadow the node's own copy with one it cannot import."""
    env = marker_env(python_version)
    deps = set()
    for dep in resolved[name]["metadata"].get("requires_dist") or []:
        dep = Requirement(dep)
        if dep.marker is None or dep.marker.evaluate(env):
            deps.add(canonicalize_name(dep.name))
    return sorted(deps & keep)


def read_node_packages(path: Path) -> dict[str, str | None]:
    """{canonical name: version, or None where not known} from NAME or NAME==VERSION lines."""
    try:
        text = path.read_text()
    except OSError as err:
        sys.exit(f"offline_kit: cannot read the node's package list {path}: {err.strerror}")
    node: dict[str, str | None] = {}
    for n, line in enumerate(text.splitlines(), start=1):
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        match = re.fullmatch(r"([A-Za-z0-9][A-Za-z0-9._-]*)(?:==([A-Za-z0-9.+!-]+))?", line)
        if match is None:
            sys.exit(f"offline_kit: {path}:{n}: {line!r} is not NAME or NAME==VERSION")
        node[canonicalize_name(match[1])] = match[2]
    return node


def tree_bytes(root: Path) -> int | None:
    """What a device call carries of the checkout: tracked files and untracked ones that git
    does not ignore, in bytes (None when this is not a git checkout)."""
    try:
        listed = subprocess.run(
            [
                "git",
                "-C",
                str(root),
                "ls-files",
                "-z",
                "--cached",
                "--others",
                "--exclude-standard",
            ],
            capture_output=True,
            check=True,
        ).stdout
    except (OSError, subprocess.CalledProcessError):
        return None
    total = 0
    for name in filter(None, listed.split(b"\0")):
        with contextlib.suppress(FileNotFoundError):  # deleted, not yet committed: stays here
            total += (root / os.fsdecode(name)).lstat().st_size
    return total


def inside_and_carried(out: Path, root: Path) -> bool:
    """Whether `out` is inside the checkout and git does not ignore it (it would travel)."""
    try:
        out.resolve().relative_to(root)
    except ValueError:
        return False
    probe = subprocess.run(
        ["git", "-C", str(root), "check-ignore", "-q", str(out.resolve())], capture_output=True
    )
    return probe.returncode == 1  # 0: ignored; 128: not a git checkout


def oversized(sizes: list[int], tree: int, call: int) -> str:
    """The refusal for the first part that would not fit beside the tree in one call ('' if
    they all do)."""
    for n, size in enumerate(sizes, start=1):
        if tree + size > call:
            return (
                f"part-{n} would be {size / MIB:.1f} MiB and the checkout's tree is "
                f"{tree / MIB:.1f} MiB: {(tree + size) / MIB:.1f} MiB in one device call, over "
                f"--call-mb {call / MIB:g}; use --part-mb {(call - tree) / MIB:.1f} or less"
            )
    return ""


def download(entries: list[dict], python_version: str, dest: Path) -> list[Path]:
    pins = [f"{e['metadata']['name']}=={e['metadata']['version']}" for e in entries]
    cmd = [sys.executable, "-m", "pip", "download", "-q", "--no-deps", "-d", str(dest)]
    cmd += ["--disable-pip-version-check", *pip_target_args(python_version), *pins]
    run(cmd, "download the wheels")
    return sorted(dest.glob("*.whl"))


def rewrite_wheel(src: Path, dest: Path, drop: re.Pattern | None, stored: bool) -> list[str]:
    """Copy a wheel without the files `drop` matches (its RECORD to match); returns their names."""
    dropped = []
    method = zipfile.ZIP_STORED if stored else zipfile.ZIP_DEFLATED
    with zipfile.ZipFile(src) as zin, zipfile.ZipFile(dest, "w", method) as zout:
        for info in zin.infolist():
            if drop is not None and drop.match(info.filename):
                dropped.append(info.filename)
                continue
            data = zin.read(info)
            if info.filename.endswith(".dist-info/RECORD"):
                lines = data.decode().splitlines()
                data = "".join(
                    line + "\n" for line in lines if line.split(",", 1)[0] not in dropped
                ).encode()
            out = zipfile.ZipInfo(info.filename, info.date_time)
            out.external_attr = info.external_attr
            out.compress_type = method
            zout.writestr(out, data)
    # RECORD lists every file, and it is written last in a wheel, so dropped ones are known
    return dropped


def xz(src: Path, dest: Path, preset: int) -> None:
    comp = lzma.LZMACompressor(preset=preset)
    with open(src, "rb") as fin, open(dest, "wb") as fout:
        for block in iter(lambda: fin.read(XZ_CHUNK), b""):
            fout.write(comp.compress(block))
        fout.write(comp.flush())


def xz_cached(src: Path, dest: Path, preset: int) -> None:
    """xz() through XZ_CACHE; a cached stream is used only if it unpacks to `src` exactly."""
    digest = sha256(src)
    cached = XZ_CACHE / f"{digest}-{preset}.xz"
    if cached.is_file():
        unpacked = hashlib.sha256()
        try:
            with lzma.open(cached, "rb") as f:
                for block in iter(lambda: f.read(XZ_CHUNK), b""):
                    unpacked.update(block)
        except (OSError, lzma.LZMAError):
            pass
        if unpacked.hexdigest() == digest:
            shutil.copyfile(cached, dest)
            return
    xz(src, dest, preset)
    with contextlib.suppress(OSError):  # a cache that cannot be written only costs time
        XZ_CACHE.mkdir(parents=True, exist_ok=True)
        partial = cached.with_suffix(".partial")
        shutil.copyfile(dest, partial)
        partial.replace(cached)


def part_folders(out: Path) -> list[Path]:
    return sorted(out.glob("part-*"), key=lambda p: int(p.name.split("-")[1]))


def wheel_name_parts(path: Path) -> tuple[str, str]:
    name, version = path.name.split("-")[:2]
    return canonicalize_name(name), version


def build(args: argparse.Namespace) -> dict:
    start = time.monotonic()
    out = Path(args.out)
    call = int(args.call_mb * MIB)
    tree = tree_bytes(ROOT)
    if args.part_mb is not None:
        cap = int(args.part_mb * MIB)
    elif tree is None:
        sys.exit(
            f"offline_kit: {ROOT} is not a git checkout, so the tree that travels with a part "
            "cannot be measured: give --part-mb"
        )
    else:
        cap = call - tree - TREE_GROWTH
    if cap < 2 * RESERVE:
        sys.exit(
            f"offline_kit: a part of {cap / MIB:.1f} MiB is too small (at least 1 MiB): raise "
            f"--part-mb, or --call-mb (now {args.call_mb:g}; the tree is "
            f"{(tree or 0) / MIB:.1f} MiB)"
        )
    if inside_and_carried(out, ROOT):
        sys.exit(
            f"offline_kit: --out {out} is inside the checkout and git does not ignore it, so "
            "every device call would carry the whole kit: use dist/ (ignored) or another folder"
        )
    skip = {canonicalize_name(s) for s in args.skip.split()}
    cut = skip | set(HEADLESS) | (set(EXTRAS) if args.no_extras else set())
    node_list = args.node_packages
    if node_list is None:
        node_list = str(NODE_PACKAGES) if args.cuda_only else "none"
    node = {} if node_list == "none" else read_node_packages(Path(node_list))
    if out.exists() and not (out / "part-1" / "kit.json").is_file() and any(out.iterdir()):
        sys.exit(f"offline_kit: {out} exists and is not a kit; choose an empty --out")
    with tempfile.TemporaryDirectory(prefix="hns-kit-") as tmp:
        work = Path(tmp)
        # a skipped requirement is left out of the resolution too (torch: no multi-GB metadata)
        roots = [
            r
            for r in project_requirements(args.no_extras)
            if canonicalize_name(Requirement(r).name) not in skip
        ]
        resolved = resolve(roots, args.python_version, work)
        keep, node_left, node_carried = select(
            roots,
            resolved,
            args.python_version,
            cut,
            {n: v for n, v in node.items() if n not in cut},
        )
        wheels = download([resolved[n] for n in sorted(keep)], args.python_version, work / "dl")
        whole, packed = [], []
        for wheel in wheels:
            name, _ = wheel_name_parts(wheel)
            if name == "warp-lang":
                slim = work / "slim" / wheel.name
                slim.parent.mkdir(exist_ok=True)
                drop = NOT_RUN_FILES.pattern
                if args.cuda_only:
                    drop = f"{drop}|{CPU_ONLY_FILES.pattern}"
                rewrite_wheel(wheel, slim, re.compile(drop), stored=False)
                wheel = slim
            (whole if wheel.stat().st_size <= cap - RESERVE else packed).append(wheel)
        parts: list[list[tuple[Path, str]]] = [[]]  # (source, name in the part)
        used = [RESERVE]
        entries = []

        def room(n: int) -> int:
            while len(parts) <= n:
                parts.append([])
                used.append(0)
            return cap - used[n]

        for wheel in sorted(whole, key=lambda w: -w.stat().st_size):  # first fit, largest first
            size = wheel.stat().st_size
            n = 0
            while room(n) < size:
                n += 1
            parts[n].append((wheel, wheel.name))
            used[n] += size
            name, version = wheel_name_parts(wheel)
            entries.append(
                {
                    "file": wheel.name,
                    "project": name,
                    "version": version,
                    "part": n + 1,
                    "sha256": sha256(wheel),
                    "needed_for": NEEDED_FOR.get(name, ""),
                    "requires": in_kit(name, resolved, keep, args.python_version),
                }
            )
        # Warp last: what every run needs is complete in the first parts
        for wheel in sorted(packed, key=lambda w: wheel_name_parts(w)[0] == "warp-lang"):
            stored = work / "stored" / wheel.name
            stored.parent.mkdir(exist_ok=True)
            rewrite_wheel(wheel, stored, None, stored=True)
            blob = work / (wheel.name + ".xz")
            xz_cached(stored, blob, args.xz_preset)
            pieces, offset, total = [], 0, blob.stat().st_size
            n = 0
            with open(blob, "rb") as f:
                while offset < total:
                    if room(n) < MIN_PIECE:  # a part (nearly) full: the next one
                        n += 1
                        continue
                    size = min(room(n), total - offset)
                    piece = work / "pieces" / f"{blob.name}.{len(pieces) + 1:03d}"
                    piece.parent.mkdir(exist_ok=True)
                    piece.write_bytes(f.read(size))
                    parts[n].append((piece, piece.name))
                    used[n] += size
                    pieces.append(
                        {"name": piece.name, "part": n + 1, "size": size, "sha256": sha256(piece)}
                    )
                    offset += size
                    n += 1
            name, version = wheel_name_parts(wheel)
            entries.append(
                {
                    "file": wheel.name,
                    "project": name,
                    "version": version,
                    "pieces": pieces,
                    "sha256": sha256(stored),
                    "xz_sha256": sha256(blob),
                    "needed_for": NEEDED_FOR.get(name, ""),
                    "requires": in_kit(name, resolved, keep, args.python_version),
                }
            )
        while len(parts) > 1 and not parts[-1]:
            parts.pop()
        if tree is not None and (refusal := oversized(used[: len(parts)], tree, call)):
            sys.exit(f"offline_kit: {refusal}")  # before the old kit is removed
        if out.exists():
            shutil.rmtree(out)
        for n, files in enumerate(parts, start=1):
            folder = out / f"part-{n}"
            folder.mkdir(parents=True)
            for src, name in files:
                shutil.copyfile(src, folder / name)
    manifest = {
        "python_version": args.python_version,
        "platforms": list(PLATFORMS),
        "parts": len(parts),
        "part_mb": args.part_mb,
        "cuda_only": args.cuda_only,
        "left_out": {
            "skipped": sorted(skip),
            "not_headless": list(HEADLESS),
            "extras": list(EXTRAS) if args.no_extras else [],
            "on_node": node_left,
        },
        "node_packages": node_list,
        "carried_though_on_node": node_carried,
        "wheels": sorted(entries, key=lambda e: e["project"]),
    }
    part1 = out / "part-1"
    (part1 / "kit.json").write_text(json.dumps(manifest, indent=1) + "\n")
    shutil.copyfile(INSTALLER, part1 / "kit_install.py")
    script = part1 / "install.sh"
    script.write_text(
        "#!/usr/bin/env sh\n"
        "# install.sh TARGET: the kit's wheels into TARGET, no index needed (kit_install.py)\n"
        'exec "${PYTHON:-python3}" "$(dirname "$0")/kit_install.py" "$@"\n'
    )
    script.chmod(0o755)
    sizes = [sum(f.stat().st_size for f in folder.iterdir()) for folder in part_folders(out)]
    return {
        "out": str(out),
        "python_version": args.python_version,
        "parts": len(parts),
        "part_mib": [round(s / MIB, 1) for s in sizes],
        "wheels": len(entries),
        "tree_mib": None if tree is None else round(tree / MIB, 1),
        "call_mib": args.call_mb,
        "left_out_on_node": node_left,
        "carried_though_on_node": node_carried,
        "split": [e["file"] for e in entries if "pieces" in e],
        "seconds": round(time.monotonic() - start, 1),
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    here = ".".join(map(str, sys.version_info[:2]))
    parser.add_argument("--python-version", default=here, help=f"target Python (default {here})")
    parser.add_argument("--out", default=str(ROOT / "dist" / "offline-kit"))
    parser.add_argument(
        "--skip", default="torch", help="packages the target has (and what only they bring)"
    )
    parser.add_argument(
        "--node-packages",
        help="the node's packages, NAME or NAME==VERSION a line, left out unless needed "
        "(default: bench/node_packages.txt with --cuda-only, else none)",
    )
    parser.add_argument(
        "--call-mb", type=float, default=CALL_MB, help="tree + one part per device call, MiB"
    )
    parser.add_argument(
        "--part-mb",
        type=float,
        help="largest part, MiB (default: what the tree leaves of --call-mb, less 1)",
    )
    parser.add_argument("--cuda-only", action="store_true", help="leave out Warp's CPU compiler")
    parser.add_argument("--no-extras", action="store_true", help="leave out wandb, imageio-ffmpeg")
    parser.add_argument("--xz-preset", type=int, default=9, choices=range(10), metavar="0-9")
    args = parser.parse_args(argv)
    if not re.fullmatch(r"3\.\d+", args.python_version):
        sys.exit(f"offline_kit: --python-version must look like 3.12, got {args.python_version!r}")
    summary = build(args)
    tree = summary["tree_mib"]
    for n, mib in enumerate(summary["part_mib"], start=1):
        if tree is None:
            print(f"part-{n}: {mib} MiB (the checkout's tree not measured: not a git checkout)")
        else:
            print(
                f"part-{n}: {mib} MiB + the checkout's tree {tree} MiB = {mib + tree:.1f} MiB "
                f"in one device call (at most {args.call_mb:g})"
            )
    if summary["left_out_on_node"]:
        names = summary["left_out_on_node"]
        print(f"left out, the node has them ({len(names)}): {', '.join(names)}")
    for name, why in summary["carried_though_on_node"].items():
        print(f"carried though the node has it: {name} ({why})")
    print(f"{summary['wheels']} wheels for Python {args.python_version} in {summary['seconds']} s")
    print("OFFLINE_KIT " + json.dumps(summary))


if __name__ == "__main__":
    main()
