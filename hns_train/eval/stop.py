"""How a render stops on a signal (SIGTERM: from an evaluation worker that stops, or from Linux
when that worker dies) without leaving a partial or a finished output behind.

The handler raises `RenderStopped` (a SystemExit, code 128 + the signal), which unwinds through
`atomic_write` (deleting the temporary file) and the encoder (killing ffmpeg). Python drops an
exception raised where it cannot propagate (a weakref callback, such as the one of an import's
module lock, or a finaliser run by the garbage collector): it prints "Exception ignored" and the
render goes on. So the handler also records the stop, and a render asks `raise_if_stopped`
before each frame and before it renames its output: a dropped stop costs at most one frame.
"""

from __future__ import annotations

import signal


class RenderStopped(SystemExit):
    """A render stopped by a signal; its code is 128 + the signal."""


_stop_code = 0  # 128 + the signal that stopped the render; 0 while none has


def stop_on(signum: int) -> None:
    """Make `signum` stop this process's renders (from the main thread: Python's rule)."""
    signal.signal(signum, _stop)


def _stop(signum: int, frame: object) -> None:
    global _stop_code
    _stop_code = 128 + signum
    raise RenderStopped(_stop_code)


def raise_if_stopped() -> None:
    """Raise `RenderStopped` if a signal asked the render to stop, whether or not the
    handler's own exception got through."""
    if _stop_code:
        raise RenderStopped(_stop_code)
