"""Atomic file writes (checkpoints, manifests, replays, renders): a temporary file in the
target's folder is written, fsync'ed, given the permissions a plain `open()` would give a new
file (0666 less the process umask; mkstemp makes 0600 files) and renamed over the target, so
readers see the old file or the new one, never half of one; a write that fails or is
interrupted deletes its temporary file, and its error (writing, renaming) names the target.
Nothing heavy is imported here: a render, or a read of a run's YAML, does not pay for torch.
"""

from __future__ import annotations

import glob
import os
import tempfile
from collections.abc import Callable
from pathlib import Path

import yaml


def _fsync_dir(folder: Path) -> None:
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:  # platforms without directory handles
        return
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _new_file_mode() -> int:
    """0666 less the umask, read at each write rather than cached at import: a program may set
    its umask after importing the package, and the two system calls cost nothing beside the
    fsync. The umask can only be read by setting it; the value set meanwhile is 077, so a file
    another thread creates in that instant is at worst more private than asked, never less."""
    umask = os.umask(0o077)
    os.umask(umask)
    return 0o666 & ~umask


def atomic_write(path: str | os.PathLike, write: Callable[[str], None], suffix: str = "") -> Path:
    """Run `write(tmp)` on a temporary file next to `path` (named with `suffix`, so writers that
    go by the extension pick the right format), then rename it over `path`."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=_prefix(path), suffix=f".tmp{suffix}", dir=path.parent)
    os.close(fd)
    try:
        write(tmp)
        with open(tmp, "rb") as f:
            os.fsync(f.fileno())
        os.chmod(tmp, _new_file_mode())
        os.replace(tmp, path)
    except BaseException as e:
        Path(tmp).unlink(missing_ok=True)
        if isinstance(e, OSError) and e.errno is not None and e.filename in (None, tmp):
            # the hidden temporary means nothing to the user: name the file they asked for
            raise OSError(e.errno, e.strerror, str(path)) from e  # the same subclass, by errno
        raise
    _fsync_dir(path.parent)
    return path


def _prefix(path: Path) -> str:
    return f".{path.stem}."


def partial_files(path: str | os.PathLike, suffix: str | None = None) -> list[Path]:
    """The temporary files that `atomic_write(path, ..., suffix)` calls (suffix: by default
    `path`'s extension) left behind: only a process killed outright (SIGKILL) mid-write leaves
    one, so whoever killed it deletes them."""
    path = Path(path)
    pattern = (
        glob.escape(_prefix(path))
        + "*"
        + glob.escape(f".tmp{path.suffix if suffix is None else suffix}")
    )
    return sorted(path.parent.glob(pattern))


def atomic_write_bytes(path: str | os.PathLike, data: bytes) -> Path:
    """Write `data` to `path` atomically."""
    return atomic_write(path, lambda tmp: Path(tmp).write_bytes(data))


def read_yaml(path: Path, error: type[ValueError] = ValueError) -> object:
    """What the YAML file `path` holds, None where there is no such file; `error` naming the
    file where it is not UTF-8 text or not valid YAML (a write cut short, an edit gone wrong).
    An OSError names its file itself."""
    if not path.is_file():
        return None
    try:
        return yaml.safe_load(path.read_text())
    except UnicodeDecodeError:
        raise error(f"{path}: not a YAML file (not UTF-8 text)") from None
    except yaml.YAMLError as err:
        # PyYAML's message spans lines with a caret drawing; the error is said in one line
        said = " ".join(line.strip() for line in str(err).splitlines() if line.strip(" ^"))
        raise error(f"{path}: not valid YAML: {said}") from None
