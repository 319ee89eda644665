"""Packages a run can go without: wandb (logging) and imageio-ffmpeg (mp4 videos).

An install without them (the offline kit built with its extras left out) still trains,
evaluates and writes metrics.jsonl; `available(module)` says whether one is importable and,
the first time in a process that it is not, says once on stderr what goes without it.
"""

from __future__ import annotations

import importlib.util
import sys

WITHOUT = {
    "wandb": "wandb is not installed: no wandb run is written (as logging.wandb=disabled); "
    "metrics.jsonl has every record",
    "imageio_ffmpeg": "imageio-ffmpeg is not installed: no mp4 videos (replays are kept; "
    "gif and png need no ffmpeg)",
}
_said: set[str] = set()


def available(module: str) -> bool:
    """Whether `module` can be imported; if not, its message is printed once per process."""
    if importlib.util.find_spec(module) is not None:
        return True
    if module not in _said:
        _said.add(module)
        print(WITHOUT.get(module, f"{module} is not installed"), file=sys.stderr, flush=True)
    return False
