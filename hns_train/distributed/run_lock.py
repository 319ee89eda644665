"""One owner per run directory, and no socket folder left by an owner that is gone.

`claim(run_dir, resume)` refuses to start a new run in a directory that holds one, then takes
its `RunLock`. `RunLock(run_dir)` takes an exclusive `flock` on `run_dir/.owner` and writes the
owner's PID into it. The kernel drops the lock when the owning process ends, however it ends
(`kill -9` included), so a dead owner never holds a run; a second training or resume of a live
one is refused with the owner's PID. Worker processes do not inherit the descriptor (Python
opens it non-inheritable): a worker that outlives its controller for a moment holds nothing.

`owned_folder(prefix)` makes a folder named after its owner's PID, such as the controller's
folder of `ipc://` sockets (`/tmp/hns-<pid>-*`, short paths: the OS limits their length), and
first removes the folders of that prefix whose owner is gone (a controller killed with
`kill -9` cannot remove its own).
"""

from __future__ import annotations

import fcntl
import os
import shutil
import tempfile
from pathlib import Path

LOCK_NAME = ".owner"
SOCKETS_PREFIX = "hns-"


class RunLock:
    def __init__(self, run_dir: str | os.PathLike) -> None:
        self.path = Path(run_dir) / LOCK_NAME
        self.path.parent.mkdir(parents=True, exist_ok=True)
        # A file object: an owner that is never released (a refused start, a test) drops the
        # lock when the object goes, as its descriptor closes with it.
        self._file = self.path.open("a+b")
        try:
            fcntl.flock(self._file, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            self._file.seek(0)
            owner = self._file.read(32).decode(errors="replace").strip() or "unknown"
            self._file.close()
            raise ValueError(
                f"run directory {self.path.parent} is in use by process {owner}; stop that "
                "run first (Ctrl-C or kill " + owner + "), or choose another name (name=...)"
            ) from None
        self._file.truncate(0)
        self._file.write(f"{os.getpid()}\n".encode())
        self._file.flush()

    def release(self) -> None:
        self._file.close()  # closing the descriptor drops the lock


def claim(run_dir: str | os.PathLike, resume: bool) -> RunLock:
    """The lock of a run directory for a controller that starts (`resume` False: the directory
    must be new) or resumes it; a ValueError saying what to do otherwise."""
    path = Path(run_dir)
    # a start refused after the lock was taken leaves only the owner file: no run is there
    if not resume and path.is_dir() and any(p.name != LOCK_NAME for p in path.iterdir()):
        raise ValueError(
            f"run directory {run_dir} already exists; pass --resume {run_dir} "
            "to continue it, or choose another name (name=...)"
        )
    return RunLock(run_dir)


def owned_folder(prefix: str, base: str | os.PathLike | None = None) -> Path:
    """A new private folder `<prefix><pid>-<random>` in `base` (the temp folder), owned by this
    process; first, the folders of that prefix whose owner is gone are removed."""
    base = base or tempfile.gettempdir()
    remove_stale_folders(base, prefix)
    return Path(tempfile.mkdtemp(prefix=f"{prefix}{os.getpid()}-", dir=base))


def remove_stale_folders(base: str | os.PathLike, prefix: str) -> None:
    """Remove this user's folders `<prefix><pid>-*` in `base` whose owner process is gone;
    folders of other names (made by other programs) are left alone."""
    for folder in Path(base).glob(f"{prefix}*-*"):
        pid = folder.name[len(prefix) :].split("-", 1)[0]
        try:
            if not pid.isdigit() or folder.is_symlink() or folder.stat().st_uid != os.getuid():
                continue
            os.kill(int(pid), 0)
        except ProcessLookupError:
            shutil.rmtree(folder, ignore_errors=True)
        except OSError:  # alive under another user, or the folder went meanwhile
            continue
