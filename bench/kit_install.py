"""Install an offline kit's wheels into a folder with no index (standard library only).

The kit builder (bench/offline_kit.py) copies this file into `part-1/` next to `kit.json` and
`install.sh`; on the target machine

    bash part-1/install.sh TARGET        # or: python3 part-1/kit_install.py TARGET

installs whatever the parts present next to `part-1/` hold into TARGET, then
`PYTHONPATH=TARGET:CHECKOUT` runs the project from a checkout. Every file is checked against
the sha256 the builder recorded. A file too large for one part was compressed with xz and split
across parts: it is joined and unpacked once all its pieces are present; a missing part is named,
with what it leaves out, and the rest is installed all the same, but for a wheel that needs one
of the missing (numba without its llvmlite): it is held back and named, so that it does not
shadow the target's own working copy with one that cannot import. Run again once the missing parts
are there, it installs everything present once more: pip `--target --upgrade` replaces a top-level
folder whole, so a folder that two wheels share (`mujoco/` of mujoco and mujoco-core) must come
from one call.

Wheels go in with one `pip install --no-index --no-deps --target` call, or, where the target
Python has no pip (or with --unzip), by unpacking them as zip files.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import lzma
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

MANIFEST = "kit.json"
INSTALLED = ".hns-kit-installed"  # the wheels installed into TARGET, one a line
CHUNK = 1 << 20


class KitError(Exception):
    """A problem with the kit or the target that the user can fix; printed without a traceback."""


def sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(CHUNK), b""):
            digest.update(block)
    return digest.hexdigest()


def checked(path: Path, expected: str) -> Path:
    if sha256(path) != expected:
        raise KitError(f"{path} does not match its checksum: copy it again from the kit")
    return path


def join_pieces(kit: Path, entry: dict, work: Path) -> Path:
    """Concatenate the pieces, check the result, unpack the xz stream; returns the wheel's path."""
    joined = work / (entry["file"] + ".xz")
    with open(joined, "wb") as out:
        for piece in entry["pieces"]:
            path = checked(kit / f"part-{piece['part']}" / piece["name"], piece["sha256"])
            with open(path, "rb") as f:
                shutil.copyfileobj(f, out, CHUNK)
    checked(joined, entry["xz_sha256"])
    wheel = work / entry["file"]
    with lzma.open(joined, "rb") as src, open(wheel, "wb") as dst:
        shutil.copyfileobj(src, dst, CHUNK)
    joined.unlink()
    return checked(wheel, entry["sha256"])


def parts_of(entry: dict) -> set[int]:
    """The parts that hold a wheel: one, or each that holds a piece of it."""
    return {entry["part"]} if "part" in entry else {p["part"] for p in entry["pieces"]}


def held_back(entries: list[dict], present: set[int]) -> dict[str, list[str]]:
    """Wheels whose parts are present but which need a wheel of a missing part, directly or
    through another held back: {project: the missing ones it needs}. Installed alone, such a
    wheel (numba without its llvmlite) would shadow the target's working copy with a broken one."""
    missing = {e["project"] for e in entries if not parts_of(e) <= present}
    held: dict[str, list[str]] = {}
    changed = True
    while changed:
        changed = False
        for e in entries:
            needs = [r for r in e.get("requires", []) if r in missing or r in held]
            if needs and e["project"] not in held and e["project"] not in missing:
                held[e["project"]] = needs
                changed = True
    return held


def has_pip(python: str) -> bool:
    probe = subprocess.run([python, "-m", "pip", "--version"], capture_output=True)
    return probe.returncode == 0


def unzip_wheel(wheel: Path, target: Path) -> None:
    """A wheel by hand: its files into TARGET, `*.data/purelib|platlib` folded in, scripts left."""
    with zipfile.ZipFile(wheel) as zf:
        for info in zf.infolist():
            name = info.filename
            parts = name.split("/")
            if parts[0].endswith(".data"):
                if len(parts) < 3 or parts[1] not in ("purelib", "platlib"):
                    continue
                name = "/".join(parts[2:])
            if info.is_dir():
                continue
            dest = target / name
            dest.parent.mkdir(parents=True, exist_ok=True)
            with zf.open(info) as src, open(dest, "wb") as dst:
                shutil.copyfileobj(src, dst, CHUNK)
            mode = (info.external_attr >> 16) & 0o777
            if mode:
                os.chmod(dest, mode)


def install(wheels: list[Path], target: Path, python: str, unzip: bool) -> str:
    if not unzip and has_pip(python):
        cmd = [python, "-m", "pip", "install", "--no-index", "--no-deps", "--upgrade", "-q"]
        cmd += ["--disable-pip-version-check", "--target", str(target), *map(str, wheels)]
        done = subprocess.run(cmd)
        if done.returncode != 0:
            raise KitError(
                f"pip could not install the wheels into {target} (exit {done.returncode})"
            )
        return "pip"
    for wheel in wheels:
        unzip_wheel(wheel, target)
    return "unzip"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("target", type=Path, help="folder to install into (made if missing)")
    parser.add_argument("--python", default=sys.executable, help="the Python that will run it")
    parser.add_argument("--unzip", action="store_true", help="unpack the wheels without pip")
    args = parser.parse_args(argv)
    here = Path(__file__).resolve().parent
    kit = here.parent
    try:
        manifest = json.loads((here / MANIFEST).read_text())
    except (OSError, ValueError) as err:
        raise KitError(
            f"{here / MANIFEST} is missing or unreadable ({err}): rebuild the kit"
        ) from None
    version = ".".join(map(str, sys.version_info[:2]))
    if args.python == sys.executable and version != manifest["python_version"]:
        raise KitError(
            f"the kit holds wheels for Python {manifest['python_version']}, this is Python "
            f"{version}: run install.sh with PYTHON=python{manifest['python_version']}, "
            f"or build the kit with PYTHON_VERSION={version}"
        )
    present = {n for n in range(1, manifest["parts"] + 1) if (kit / f"part-{n}").is_dir()}
    missing = sorted(set(range(1, manifest["parts"] + 1)) - present)
    target = args.target.resolve()
    target.mkdir(parents=True, exist_ok=True)
    work = target / ".hns-kit-work"
    work.mkdir(exist_ok=True)
    try:
        wheels, left_out = [], []
        held = held_back(manifest["wheels"], present)
        for entry in manifest["wheels"]:
            if not parts_of(entry) <= present:
                left_out.append(entry)
            elif entry["project"] in held:
                continue
            elif "part" in entry:
                path = kit / f"part-{entry['part']}" / entry["file"]
                wheels.append(checked(path, entry["sha256"]))
            else:
                wheels.append(join_pieces(kit, entry, work))
        how = install(wheels, target, args.python, args.unzip) if wheels else "nothing"
    finally:
        shutil.rmtree(work, ignore_errors=True)
    (target / INSTALLED).write_text("".join(w.name + "\n" for w in wheels))
    print(f"installed {len(wheels)} of {len(manifest['wheels'])} wheels into {target} ({how})")
    for n in missing:
        away = [e for e in left_out if n in parts_of(e)]
        what = "; ".join(
            f"{e['project']} {e['version']}" + (f": {e['needed_for']}" if e["needed_for"] else "")
            for e in away
        )
        print(
            f"part-{n} is missing (looked for {kit / f'part-{n}'}): not installed: "
            f"{what or 'nothing else'}. Copy part-{n} next to part-1 and run install.sh again."
        )
    for project, needs in held.items():
        print(
            f"held back: {project}, which needs {', '.join(needs)} from a missing part "
            "(the target's own copy, if any, stays in use)"
        )
    print(f"use it with: PYTHONPATH={target}:CHECKOUT python ...")
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except KitError as err:
        print(f"install.sh: {err}", file=sys.stderr)
        sys.exit(2)
