"""One owner per run directory, and no socket folder left by an owner that is gone.

`RunLock(run_dir)` takes an exclusive `flock` on `run_dir/.owner` and writes the owner's PID
into it. The kernel drops the lock when the owning process ends, however it ends (`kill -9`
included), so a dead owner never holds a run; a second training or resume of a live one is
refused with the owner's PID. Worker processes do not inherit the descriptor (Python opens it
non-inheritable): a worker that outlives its controller for a moment holds nothing.

`socket_folder()` makes the controller's folder of `ipc://` sockets (`/tmp/hns-*`, short
paths: the OS limits their length) with its owner's PID in a file; `clean_socket_folders()`
removes the folders whose owner is gone (a controller killed with `kill -9` cannot remove its
own).
"""

from __future__ import annotations

import fcntl
import os
import shutil
import tempfile
from pathlib import Path

LOCK_NAME = ".owner"
SOCKETS_PREFIX = "hns-"
OWNER_FILE = "owner.pid"


class RunDirInUse(ValueError):
    """The run directory belongs to another live process."""


class RunLock:
    def __init__(self, run_dir: str | os.PathLike) -> None:
        self._fd: int | None = None
        self.path = Path(run_dir) / LOCK_NAME
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            owner = os.pread(fd, 32, 0).decode(errors="replace").strip() or "unknown"
            os.close(fd)
            raise RunDirInUse(
                f"run directory {self.path.parent} is in use by process {owner}; stop that "
                "run first (Ctrl-C or kill " + owner + "), or choose another name (name=...)"
            ) from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        self._fd = fd

    def release(self) -> None:
        if self._fd is not None:
            os.close(self._fd)  # closing the descriptor drops the lock
            self._fd = None

    def __del__(self) -> None:  # an owner that was never run (a refused start, a test)
        self.release()

    def __enter__(self) -> RunLock:
        return self

    def __exit__(self, *exc) -> None:
        self.release()


def in_use(run_dir: str | os.PathLike) -> bool:
    """Whether a run directory holds anything but its owner file (a start refused after the
    lock was taken leaves only that, and must not block the next try)."""
    path = Path(run_dir)
    return path.is_dir() and any(p.name != LOCK_NAME for p in path.iterdir())


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process: alive
        return True
    return True


def socket_folder() -> Path:
    """A new socket folder owned by this process."""
    folder = Path(tempfile.mkdtemp(prefix=SOCKETS_PREFIX))
    (folder / OWNER_FILE).write_text(f"{os.getpid()}\n")
    return folder


def clean_socket_folders(root: str | os.PathLike | None = None) -> list[Path]:
    """Remove the socket folders under `root` (the temp folder) whose owner process is gone;
    folders without an owner file (made by other programs, or being made) are left alone."""
    removed = []
    for folder in Path(root or tempfile.gettempdir()).glob(f"{SOCKETS_PREFIX}*"):
        try:
            pid = int((folder / OWNER_FILE).read_text().strip())
        except (OSError, ValueError):
            continue
        if pid != os.getpid() and not _alive(pid):
            shutil.rmtree(folder, ignore_errors=True)
            removed.append(folder)
    return removed
