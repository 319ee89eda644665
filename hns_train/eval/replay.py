"""Replays: one self-contained, versioned file per episode; its format, saving, loading (checked,
never unpickled) and setting a MuJoCo model to any of its frames. Recording is `recorder.py`.

A replay holds everything needed to rebuild one world of a `HideAndSeekGame` and show (or
re-simulate) every step of its episode: the `GameConfig`, the `Layout`, and per-step MuJoCo state
plus the game state a viewer needs. `world.build_spec(cfg, layout).compile()` rebuilds the model.

File format (`FORMAT_NAME`, version `FORMAT_VERSION`): a `.npz` written with
`np.savez_compressed` (atomic: temporary file, then rename) and read member by member with
`np.lib.format.read_array(allow_pickle=False)`, so a file can never run code. Members:
- `header`: uint8 array of UTF-8 JSON: `format`, `version`, `game_config` (every GameConfig
  field), `sizes` (n_frames, n_steps, nq, nv, nu, n_agents, n_objects), `layout_counts`
  (n_hiders, n_seekers), `seed`, `world`, `metadata` (free JSON: team names and policy
  versions under `hiders` / `seekers`, run name, ...), `episode_stats` (the game's end-of-episode
  info, or null), `mujoco_version`, `created_unix`.
- `layout.<field>`: the `Layout` arrays (walls, which agents/boxes exist, box kinds, poses),
  `layout_shapes(cfg)`: those of every config, plus the construction tasks' sites (`site_xy`,
  `site_present`) where the config has sites and the cylinder (`cylinder_xy`, `cylinder_radius`)
  where it has one, so every other config's files are as they were.
- Frame arrays, F = n_frames = n_steps + 1 rows; frame 0 is the state after reset, frame t the
  state after t env steps: `t` (int32), `prep` (bool, t < prep_steps), `qpos`, `qvel`,
  `qacc_warmstart`, `time` (float64), `locked` (bool, O), `lock_team` (int8, O; -1 none,
  0 hiders, 1 seekers), `lock_qpos` (float64, O x 4: the joint values an object is pinned at
  while locked), `grabbed` (int8, A; object index or -1), `grab_weld` (float64, A x 7: relative
  pose in the active weld's `eq_data[3:10]`), `sees_agent` (bool, A x A: row sees column),
  `sees_object` (bool, A x O).
- Step arrays, n_steps rows; row t is the step from frame t to t+1: `actions` (int8, A x 5, as
  given to the game), `ctrl` (float64, nu: controls applied), `rewards` (float32, A).

Invariants: the locks and grabs recorded at frame t+1 are those in force during step t -> t+1
(the game decides them at the start of a step), so frame t's physics state, step t's `ctrl` and
frame t+1's constraints reproduce frame t+1 bit for bit (`Replay.set_state` + `mj_step`).
Positions are body centres (layout.py's convention). A 2v2 quadrant episode (81 frames) is
about 40 kB on disk.

"""

from __future__ import annotations

import json
import math
import zipfile
from collections.abc import Callable
from dataclasses import dataclass
from functools import partialmethod
from pathlib import Path

import mujoco
import numpy as np

from hns_train.atomic_file import atomic_write
from hns_train.envs import contract, rules
from hns_train.envs.config import GameConfig, make_config
from hns_train.envs.layout import Layout, n_wall_slots
from hns_train.envs.world import (
    FREE_RANGE,
    WorldIndex,
    build_spec,
    index_world,
    set_locked_highlight,
)
from hns_train.jsonl import json_number

FORMAT_NAME = "hns_train.replay"
FORMAT_VERSION = 1
SUFFIX = ".npz"
# Most bytes the members of one replay may hold once unpacked (a long randomwalls episode holds
# a few MB): checked from the archive's declarations before anything is unpacked.
MAX_REPLAY_BYTES = 256 << 20


class ReplayError(ValueError):
    """A file that cannot be read as a replay; the message names the problem."""


# name -> (numpy dtype, shape after the leading frame/step axis, as a function of sizes)
FRAME_ARRAYS: dict[str, tuple[str, Callable[[dict], tuple]]] = {
    "t": ("int32", lambda s: ()),
    "prep": ("bool", lambda s: ()),
    "qpos": ("float64", lambda s: (s["nq"],)),
    "qvel": ("float64", lambda s: (s["nv"],)),
    "qacc_warmstart": ("float64", lambda s: (s["nv"],)),
    "time": ("float64", lambda s: ()),
    "locked": ("bool", lambda s: (s["n_objects"],)),
    "lock_team": ("int8", lambda s: (s["n_objects"],)),
    "lock_qpos": ("float64", lambda s: (s["n_objects"], 4)),
    "grabbed": ("int8", lambda s: (s["n_agents"],)),
    "grab_weld": ("float64", lambda s: (s["n_agents"], 7)),
    "sees_agent": ("bool", lambda s: (s["n_agents"], s["n_agents"])),
    "sees_object": ("bool", lambda s: (s["n_agents"], s["n_objects"])),
}
STEP_ARRAYS: dict[str, tuple[str, Callable[[dict], tuple]]] = {
    "actions": ("int8", lambda s: (s["n_agents"], contract.N_ACTION_DIMS)),
    "ctrl": ("float64", lambda s: (s["nu"],)),
    "rewards": ("float32", lambda s: (s["n_agents"],)),
}
SIZE_KEYS = ("n_frames", "n_steps", "nq", "nv", "nu", "n_agents", "n_objects")


def layout_shapes(cfg: GameConfig) -> dict[str, tuple[tuple, str]]:
    """name -> (shape, dtype kind) of each `Layout` field a replay of `cfg` holds."""
    S, A, B, R, g = n_wall_slots(cfg), cfg.max_agents, cfg.max_boxes, cfg.n_ramps, cfg.grid_cells
    shapes = {
        "wall_pos": ((S, 3), "f"),
        "wall_half": ((S, 3), "f"),
        "wall_present": ((S,), "b"),
        "agent_present": ((A,), "b"),
        "agent_xy": ((A, 2), "f"),
        "agent_yaw": ((A,), "f"),
        "box_kind": ((B,), "i"),
        "box_xy": ((B, 2), "f"),
        "ramp_xy": ((R, 2), "f"),
        "ramp_yaw": ((R,), "f"),
        "occupancy": ((g, g), "b"),
    }
    if cfg.max_sites > 0:  # the construction tasks' sites
        shapes |= {"site_xy": ((cfg.max_sites, 2), "f"), "site_present": ((cfg.max_sites,), "b")}
    if cfg.cylinder:
        shapes |= {"cylinder_xy": ((2,), "f"), "cylinder_radius": ((), "f")}
    return shapes


# ----------------------------------------------------------------------------- the replay


@dataclass
class Replay:
    """One recorded episode of one world. Frame arrays have n_frames rows, step arrays n_steps."""

    cfg: GameConfig
    layout: Layout
    arrays: dict[str, np.ndarray]
    header: dict

    # -- sizes and derived views
    @property
    def n_frames(self) -> int:
        return int(self.header["sizes"]["n_frames"])

    @property
    def n_steps(self) -> int:
        return int(self.header["sizes"]["n_steps"])

    @property
    def fps(self) -> float:
        """Frames per second of real time: one frame per env step."""
        return 1.0 / (self.cfg.timestep * self.cfg.substeps)

    @property
    def metadata(self) -> dict:
        return self.header.get("metadata") or {}

    def __getitem__(self, name: str) -> np.ndarray:
        return self.arrays[name]

    def team_scores(self) -> np.ndarray:
        """(n_frames, 2) cumulative hider / seeker return up to each frame.

        A team's per-step reward is the mean over its present members (equal for all members
        unless some are out of bounds), as in the episode statistics.
        """
        A = self.cfg.max_agents
        hider = np.arange(A) < self.cfg.max_hiders
        present = self.layout.agent_present
        rewards = self.arrays["rewards"].astype(np.float64)
        per_team = np.zeros((self.n_steps, 2))
        for team, members in ((0, hider & present), (1, ~hider & present)):
            if members.any():
                per_team[:, team] = rewards[:, members].mean(axis=1)
        return np.concatenate([np.zeros((1, 2)), np.cumsum(per_team, axis=0)])

    def prep_left(self, t: int) -> int:
        """Env steps of preparation left at frame t (0 once play has started)."""
        return max(0, self.cfg.prep_steps - int(self.arrays["t"][t]))

    # -- MuJoCo
    def rebuild(self) -> tuple[mujoco.MjModel, mujoco.MjData]:
        """Compile this replay's world and return (model, data) set to frame 0."""
        model = build_spec(self.cfg, self.layout).compile()
        sizes = self.header["sizes"]
        got = {"nq": model.nq, "nv": model.nv, "nu": model.nu}
        want = {k: sizes[k] for k in got}
        if got != want:
            raise ReplayError(
                f"replay sizes {want} do not match the world this hns_train builds {got}; "
                "it was written by an incompatible version of the world builder"
            )
        data = mujoco.MjData(model)
        self.set_state(model, data, 0)
        return model, data

    def index(self, model: mujoco.MjModel) -> WorldIndex:
        return index_world(self.cfg, model)

    def set_state(
        self,
        model: mujoco.MjModel,
        data: mujoco.MjData,
        t: int,
        index: WorldIndex | None = None,
        step: bool = False,
    ) -> None:
        """Put frame t into (model, data) for display: physics state, lock pins, grab welds;
        runs `mj_kinematics`. Edits the model's object joint ranges and weld data (as the game
        does), so use the model from `rebuild()`, not a shared one.

        With `step` (`prepare_step`), set them instead so that `mj_step(model, data,
        cfg.substeps)` re-simulates step t and lands exactly on frame t+1: frame t's physics,
        step t's controls, and the locks and grabs the game decided at the start of step t
        (recorded at frame t+1), with newly locked objects stopped as the game stops them."""
        if step:
            if not 0 <= t < self.n_steps:
                raise ValueError(f"step {t} is outside this replay's 0..{self.n_steps - 1}")
            idx = self._load(model, data, t, t + 1, index)
            newly = self.arrays["locked"][t + 1] & ~self.arrays["locked"][t]
            data.qvel[idx.object_qvel[newly].ravel()] = 0.0
            data.ctrl[:] = self.arrays["ctrl"][t]
            return
        t = self._frame(t)
        self._load(model, data, t, t, index)
        mujoco.mj_kinematics(model, data)
        mujoco.mj_camlight(model, data)  # camera and light poses for rendering

    prepare_step = partialmethod(set_state, step=True)

    def _frame(self, t: int) -> int:
        if not -self.n_frames <= t < self.n_frames:
            raise ValueError(f"frame {t} is outside this replay's 0..{self.n_frames - 1}")
        return t % self.n_frames

    def _load(self, model, data, t: int, constraints_t: int, index) -> WorldIndex:
        """Frame t's physics and frame constraints_t's locks and grabs into (model, data), with
        `index` (made from the model when None), which it returns."""
        idx = index if index is not None else index_world(self.cfg, model)
        self._set_physics(data, t)
        self._set_constraints(model, data, constraints_t, idx)
        return idx

    def _set_physics(self, data: mujoco.MjData, t: int) -> None:
        a = self.arrays
        data.qpos[:] = a["qpos"][t]
        data.qvel[:] = a["qvel"][t]
        data.qacc_warmstart[:] = a["qacc_warmstart"][t]
        data.time = float(a["time"][t])

    def _set_constraints(self, model, data, t: int, idx: WorldIndex) -> None:
        a = self.arrays
        jnt = idx.object_jnt
        locked = a["locked"][t]
        pins = a["lock_qpos"][t]
        model.jnt_range[jnt, 0] = np.where(locked[:, None], pins, -FREE_RANGE)
        model.jnt_range[jnt, 1] = np.where(locked[:, None], pins, FREE_RANGE)
        for geom, on in zip(idx.object_geom, locked, strict=True):
            set_locked_highlight(model, int(geom), bool(on))
        data.eq_active[:] = 0
        for agent, obj in enumerate(a["grabbed"][t]):
            if obj >= 0:
                eq = idx.weld[agent, obj]
                # anchor at the object's origin, relative pose, torque scale 1, flag 0 (game.py)
                model.eq_data[eq, :3] = 0.0
                model.eq_data[eq, 3:10] = a["grab_weld"][t, agent]
                model.eq_data[eq, 10:12] = (1.0, 0.0)
                data.eq_active[eq] = 1


# ----------------------------------------------------------------------------- file I/O


def save(replay: Replay, path) -> Path:
    """Write `replay` to `path` atomically (a temporary file in the same folder, then rename)."""
    path = Path(path)
    if path.suffix != SUFFIX:
        raise ValueError(f"replay path {str(path)!r} must end in {SUFFIX}")
    try:
        header = json.dumps(replay.header, default=json_number, allow_nan=True)
    except (TypeError, ValueError) as e:  # ValueError: an array of more than one number
        raise ValueError(f"replay metadata must be JSON serialisable: {e}") from None
    members = {"header": np.frombuffer(header.encode(), dtype=np.uint8)}
    for name in layout_shapes(replay.cfg):
        members[f"layout.{name}"] = np.asarray(getattr(replay.layout, name))
    members.update(replay.arrays)
    return atomic_write(path, lambda tmp: np.savez_compressed(tmp, **members), suffix=".npz")


def load(path) -> Replay:
    """Read and validate a replay; any problem raises `ReplayError` naming it."""
    path = Path(path)
    where = f"replay {str(path)!r}"
    if path.is_dir():
        raise ReplayError(f"{where}: a directory, not a replay file (.npz)")
    if not path.is_file():
        raise ReplayError(f"{where}: no such file")
    if not zipfile.is_zipfile(path):
        with open(path, "rb") as fh:
            if fh.read(4) == b"PK\x03\x04":  # a zip that lost its end: cut short while copying
                raise ReplayError(f"{where}: truncated or corrupt file (an incomplete archive)")
        raise ReplayError(
            f"{where}: not a replay (not an .npz archive; a replay is written by "
            "hns_train.eval.replay.save)"
        )
    members = _read_members(path, where)
    header = _read_header(members, where)
    cfg = _read_config(header, where)
    sizes = _read_sizes(header, cfg, where)
    layout = _read_layout(members, header, cfg, where)
    arrays = _read_arrays(members, sizes, cfg, where)
    return Replay(cfg=cfg, layout=layout, arrays=arrays, header=header)


def _read_members(path: Path, where: str) -> dict[str, np.ndarray]:
    """The archive's arrays by name, read in bounded memory: before a member loads, its unpacked
    size (with the members before it) must fit `MAX_REPLAY_BYTES` and the array its .npy header
    declares must fit its unpacked size; a pickled member is refused."""
    members: dict[str, np.ndarray] = {}
    total = 0
    try:
        with zipfile.ZipFile(path) as archive:
            for info in archive.infolist():
                total += info.file_size
                if total > MAX_REPLAY_BYTES:
                    raise ReplayError(
                        f"{where}: members unpack to more than {MAX_REPLAY_BYTES} bytes "
                        f"(at {info.filename!r}); not a replay this code wrote"
                    )
                with archive.open(info) as fh:
                    version = np.lib.format.read_magic(fh)
                    read = (
                        np.lib.format.read_array_header_1_0
                        if version == (1, 0)
                        else np.lib.format.read_array_header_2_0
                    )
                    shape, _, dtype = read(fh)
                    need = math.prod(shape) * dtype.itemsize
                    if need > info.file_size and not dtype.hasobject:  # pickles: read_array refuses
                        raise ReplayError(
                            f"{where}: member {info.filename!r} declares a {list(shape)} {dtype} "
                            f"array ({need} bytes) in {info.file_size} bytes"
                        )
                    fh.seek(0)
                    name = info.filename.removesuffix(".npy")
                    members[name] = np.lib.format.read_array(fh, allow_pickle=False)
    except ReplayError:
        raise
    except Exception as e:  # zip, zlib, npy header and pickle refusals all end here
        raise ReplayError(f"{where}: truncated or corrupt file ({type(e).__name__}: {e})") from None
    return members


def _read_header(members, where) -> dict:
    raw = members.get("header")
    if raw is None:
        raise ReplayError(f"{where}: not a replay (the archive has no 'header' member)")
    if raw.dtype != np.uint8 or raw.ndim != 1:
        raise ReplayError(f"{where}: header must be a 1-D uint8 array, got {raw.dtype} {raw.shape}")
    try:
        header = json.loads(raw.tobytes().decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise ReplayError(f"{where}: header is not valid UTF-8 JSON ({e})") from None
    if not isinstance(header, dict) or header.get("format") != FORMAT_NAME:
        got = header.get("format") if isinstance(header, dict) else type(header).__name__
        raise ReplayError(f"{where}: not a replay (format {got!r}, expected {FORMAT_NAME!r})")
    version = header.get("version")
    if not isinstance(version, int) or isinstance(version, bool) or version < 1:
        raise ReplayError(f"{where}: invalid format version {version!r} (expected an int >= 1)")
    if version > FORMAT_VERSION:
        raise ReplayError(
            f"{where}: written in format version {version}, newer than the versions this "
            f"hns_train reads (1..{FORMAT_VERSION}); update hns_train to read it"
        )
    for key in ("game_config", "sizes", "layout_counts"):
        if not isinstance(header.get(key), dict):
            raise ReplayError(f"{where}: header field {key!r} is missing or not an object")
    if header.get("metadata") is not None and not isinstance(header["metadata"], dict):
        raise ReplayError(f"{where}: header field 'metadata' must be an object")
    return header


def _read_config(header, where) -> GameConfig:
    values = dict(header["game_config"])
    preset = values.pop("preset", "quadrant")
    try:  # make_config names unknown fields and reads the flat names of older replays
        return make_config(preset, **values)
    except (ValueError, TypeError) as e:
        raise ReplayError(f"{where}: invalid game config: {e}") from None


def _read_sizes(header, cfg, where) -> dict:
    sizes = header["sizes"]
    bad = [k for k in SIZE_KEYS if not isinstance(sizes.get(k), int) or sizes[k] < 0]
    if bad:
        raise ReplayError(f"{where}: header sizes {bad} missing or not non-negative ints")
    if sizes["n_frames"] != sizes["n_steps"] + 1 or sizes["n_frames"] < 1:
        raise ReplayError(
            f"{where}: n_frames {sizes['n_frames']} must be n_steps {sizes['n_steps']} + 1"
        )
    want = {"n_agents": cfg.max_agents, "n_objects": cfg.max_boxes + cfg.n_ramps}
    for k, v in want.items():
        if sizes[k] != v:
            raise ReplayError(f"{where}: {k} is {sizes[k]} but its game config implies {v}")
    return sizes


def _check_array(value, name, shape, kind, where) -> np.ndarray:
    if value is None:
        raise ReplayError(f"{where}: array {name!r} is missing")
    if value.shape != tuple(shape):
        raise ReplayError(f"{where}: array {name!r} has shape {value.shape}, expected {shape}")
    kinds = {"f": "f", "i": "iu", "b": "b"}[kind]
    if value.dtype.kind not in kinds:
        raise ReplayError(f"{where}: array {name!r} has dtype {value.dtype}, expected kind {kind}")
    if kind == "f" and not np.isfinite(value).all():
        raise ReplayError(f"{where}: array {name!r} holds NaN or infinite values")
    return value


def _read_layout(members, header, cfg, where) -> Layout:
    counts = header["layout_counts"]
    for k in ("n_hiders", "n_seekers"):
        if not isinstance(counts.get(k), int):
            raise ReplayError(f"{where}: layout_counts.{k} missing or not an int")
    arrays = {
        name: _check_array(members.get(f"layout.{name}"), f"layout.{name}", shape, kind, where)
        for name, (shape, kind) in layout_shapes(cfg).items()
    }
    present = arrays["agent_present"]
    h = cfg.max_hiders
    if (
        int(present[:h].sum()) != counts["n_hiders"]
        or int(present[h:].sum()) != counts["n_seekers"]
    ):
        raise ReplayError(f"{where}: layout agent_present disagrees with layout_counts {counts}")
    if not np.isin(arrays["box_kind"], (0, 1, 2, 3)).all():
        raise ReplayError(f"{where}: layout.box_kind holds values outside 0..3")
    if "cylinder_radius" in arrays:
        arrays["cylinder_radius"] = float(arrays["cylinder_radius"])
    return Layout(**arrays, n_hiders=counts["n_hiders"], n_seekers=counts["n_seekers"])


def _read_arrays(members, sizes, cfg, where) -> dict[str, np.ndarray]:
    arrays = {}
    for table, length in ((FRAME_ARRAYS, sizes["n_frames"]), (STEP_ARRAYS, sizes["n_steps"])):
        for name, (dtype, shape) in table.items():
            kind = np.dtype(dtype).kind.replace("u", "i")
            value = _check_array(members.get(name), name, (length, *shape(sizes)), kind, where)
            arrays[name] = value
    O = sizes["n_objects"]
    checks = [
        ("grabbed", (arrays["grabbed"] >= -1) & (arrays["grabbed"] < O), f"-1..{O - 1}"),
        (
            "lock_team",
            np.isin(arrays["lock_team"], (rules.NO_TEAM, rules.HIDERS, rules.SEEKERS)),
            "-1, 0, 1",
        ),
        ("t", arrays["t"] == np.arange(sizes["n_frames"]), "0, 1, 2, ... (one row per step)"),
        ("actions", (arrays["actions"] >= 0) & (arrays["actions"] < cfg.action_bins), "bins"),
    ]
    for name, ok, allowed in checks:
        if not ok.all():
            raise ReplayError(f"{where}: array {name!r} holds values outside {allowed}")
    return arrays
