"""Hide-and-seek environments: the game core and its public interfaces.

- `parallel_env(preset="quadrant", seed=None, render_mode=None, **game_params)`: PettingZoo
  `ParallelEnv` over one world (`parallel.py`); `env(...)`: the same as an AEC env.
- `HideAndSeekGame`: W worlds stepped in lockstep with array observations (`game.py`).
- `VectorGame`: N worlds with automatic reset for actors (`vector.py`), returning `VectorStep`.
- `make_config`, `GameConfig`, `PRESETS`: every number of the spec as a named parameter.
- `contract` (`hns_train.envs.contract`): the action and observation layout (heads, bins,
  no-op, keys, shapes, dtypes, masks, column meanings) that every consumer reads.

Importing this package on a machine without a display selects MuJoCo's headless EGL backend
(`MUJOCO_GL=egl`) unless `MUJOCO_GL` is already set, so offscreen rendering works out of the box;
this must happen before `mujoco` is first imported.
"""

import os
import sys

if (
    "MUJOCO_GL" not in os.environ
    and sys.platform.startswith("linux")
    and not (os.environ.get("DISPLAY") or os.environ.get("WAYLAND_DISPLAY"))
):
    os.environ["MUJOCO_GL"] = "egl"

from hns_train.envs.config import PRESETS, GameConfig, make_config  # noqa: E402
from hns_train.envs.game import HideAndSeekGame  # noqa: E402
from hns_train.envs.parallel import HideAndSeekParallelEnv, env, parallel_env  # noqa: E402
from hns_train.envs.vector import VectorGame, VectorStep  # noqa: E402

__all__ = [
    "PRESETS",
    "GameConfig",
    "HideAndSeekGame",
    "HideAndSeekParallelEnv",
    "VectorGame",
    "VectorStep",
    "env",
    "make_config",
    "parallel_env",
]
