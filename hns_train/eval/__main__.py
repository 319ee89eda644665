"""`python -m hns_train.eval`: see `hns_train.eval.cli` for the commands."""

import os
import sys

from hns_train.eval.cli import main
from hns_train.eval.stop import RenderStopped

try:
    code = main()
except RenderStopped as stop:
    # Its partial output is deleted by now. The interpreter's teardown (GL, MuJoCo, torch) is
    # skipped: at a render's low priority on busy cores it took seconds, and whoever stopped
    # the render waits for its exit.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(stop.code)
raise SystemExit(code)
