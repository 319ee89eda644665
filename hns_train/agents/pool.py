"""The self-play policy pool: frozen snapshots, their SQLite index, and opponent sampling.

Folder `run_dir/pool/`:
- `snapshot_<version>.pt`: frozen weights (the `ActorCritic` state dict, normalisers included),
  written with `checkpoint.save_checkpoint` (atomic, no pickle).
- `guest_<id>.pt`: a guest's frozen weights, the same format (see "Guests" below).
- `pool.sqlite`: the index, shared by every process of a run; its tables (snapshots, guests,
  guest_files, ratings, matches) and how it is opened belong to `pool_index.py`. This module
  writes `snapshots`, `guests` and `guest_files` and reads the `pool_index` view for
  rating-prioritised sampling; `hns_train.eval.ratings` writes `ratings` and `matches`.

Guests: weights from outside this run that its opponents are drawn from, written by whoever
runs a population (`add_guest(name, kind, state_dict, hider_weight, seeker_weight)`): kind
"cross" (another learner's latest) or "past" (a hall-of-fame entry), each with a weight per role
it plays. A guest is named by `policy_key`'s name rule ("m1", "m1.400") and has an id >=
`GUEST_BASE` (2**40): ids increase and are never reused in a pool, so a guest id travels as an
ordinary snapshot code and `load_snapshot` / `SnapshotCache` load it unchanged. Adding a guest
under a name it already has gives the new weights a new id (caches are keyed by id) and drops
the old row; a replaced file is deleted only when its name has two newer ones (a process that
drew the old id may still be loading it), so each name keeps at most its two newest files.
`remove_guest` drops the row and leaves the files (the same reason). The snapshot listing
(`versions`) and the snapshot rules never include guests.

Who controls each team in an episode (`PolicyPool.draw(rng) -> TeamControllers`):
- with probability `p_cross` the opponent team is a "cross" guest, with probability `p_past` a
  "past" guest: the team it plays is chosen as below (`opponent_role`, else either with equal
  probability) and the guest drawn with probability proportional to its weight for that role;
  the learning policy plays the other team. With no guest of that kind (or all its weights 0
  for the role) the episode is drawn by the rules below instead. With p_cross = p_past = 0 no
  random number is drawn for this step, so draws are exactly those of a pool without guests;
- otherwise, with probability `p_latest` both teams are the learning policy ("latest": the
  paper's setting);
- otherwise one team, hiders or seekers with equal probability (or always the team named by
  `opponent_role`), is an opponent: "random" with
  probability `p_random`, "noop" with probability `p_noop`, else a pool snapshot chosen by `rule`:
  - `uniform`: every snapshot equally;
  - `recency`: weight 0.5 ** (age / recency_half_life), age = 0 for the newest snapshot, 1 for
    the one before, ... (in snapshots);
  - `rating`: softmax of the snapshot's mu *in the role it will play* / `rating_temperature`
    (stronger opponents more often; unrated snapshots count as the prior mu 25).
  With an empty pool the snapshot branch falls back to "latest" for both teams.
Only agents of a team whose controller is "latest" produce training data (actors keep the
agent rows whose controller code is the latest policy's).

A `PolicyPool` object belongs to one process (open one per process: SQLite connections do not
survive fork). Reopening the same folder resumes with every snapshot, guest and rating.
Sampling reads the index (snapshots and guests) at most every `index_refresh_s` seconds (and
right after this process adds a snapshot or changes a guest), so actors can draw per episode
without a query each time, and a guest written by another process is drawn within that time.

Public API:
- `PoolConfig` (dataclass), `TeamControllers(hiders, seekers)`, `policy_key(id) -> str`.
- `PolicyPool(folder, config=None)`: `maybe_add(version, state_dict, frames, episodes)`,
  `add_snapshot(...)`, `versions()`, `load_snapshot(version_or_guest_id)`, `draw(rng)`,
  `candidate_probabilities(role)`,
  `add_guest(name, kind, state_dict, hider_weight=1.0, seeker_weight=1.0) -> int`,
  `set_guest_weights(name, hider_weight, seeker_weight)`, `remove_guest(name) -> bool`,
  `guests() -> list[GuestInfo]`, `guest_probabilities(kind, role)`, `close()`.
- `GUEST_BASE`, `GUEST_KINDS` (from `pool_index`), `GuestInfo`.
- `SnapshotCache(pool, size)`: `get(version)` -> state dict, least-recently-used eviction.
"""

from __future__ import annotations

import functools
import logging
import math
import os
import re
import shutil
import sqlite3
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, TypeVar

import numpy as np

from hns_train import typed_config
from hns_train.agents.checkpoint import (
    CheckpointDir,
    CheckpointError,
    NoRoomError,
    disk_full,
    load_checkpoint,
    save_checkpoint,
)
from hns_train.agents.pool_index import (
    DB_NAME,
    GUEST_BASE,
    GUEST_KINDS,
    PRIOR_MU,
    open_index,
    transaction,
)
from hns_train.typed_config import AtLeast1, NonNegative, OneOf, Positive, Unit

log = logging.getLogger(__name__)

ROLES = ("hider", "seeker")
LATEST, RANDOM, NOOP = "latest", "random", "noop"
NAMED_POLICIES = (LATEST, RANDOM, NOOP)
RULES = ("uniform", "recency", "rating")
PolicyId = int | str


_NAME_RE = re.compile(r"[a-z][a-z0-9_.-]{0,63}")


def policy_key(policy: PolicyId) -> str:
    """Canonical text of a policy id: a snapshot version ("120"), latest/random/noop, or the
    lower-case name of another fixed controller (e.g. "scripted_seeker", for ratings)."""
    if isinstance(policy, (bool, np.bool_)):
        raise ValueError(f"policy id must be a version or one of {NAMED_POLICIES}, got {policy!r}")
    if isinstance(policy, (int, np.integer)):
        if policy < 0:
            raise ValueError(f"snapshot version must be >= 0, got {policy}")
        return str(int(policy))
    if isinstance(policy, str):
        if re.fullmatch(r"\d+", policy):
            return str(int(policy))
        if _NAME_RE.fullmatch(policy):
            return policy
    raise ValueError(
        f"policy id must be a snapshot version (int >= 0), one of {NAMED_POLICIES}, or a "
        f"lower-case name [a-z][a-z0-9_.-]*; got {policy!r}"
    )


def check_guest_name(name: str) -> str:
    """A guest's name: `policy_key`'s name rule, not a built-in controller, not a number."""
    if isinstance(name, str) and _NAME_RE.fullmatch(name) and name not in NAMED_POLICIES:
        return name
    raise ValueError(
        f"guest name must be a lower-case name [a-z][a-z0-9_.-]* of at most 64 characters "
        f"other than {NAMED_POLICIES} (e.g. 'm1', 'm1.400'); got {name!r}"
    )


def check_guest_weight(name: str, value: float) -> float:
    value = float(value)
    if not (math.isfinite(value) and value >= 0.0):
        raise ValueError(f"{name} must be a finite number >= 0, got {value}")
    return value


def check_role(role: str) -> str:
    if role not in ROLES:
        raise ValueError(f"role must be one of {ROLES}, got {role!r}")
    return role


class PoolError(ValueError):
    """The pool's index cannot be used; the message names the file and what to do."""


@dataclass
class PoolConfig:
    """Snapshotting and opponent sampling. All values (ours): the paper trains against the
    latest policy only, which is `p_latest = 1.0`."""

    snapshot_every: AtLeast1 = 100  # versions between snapshots
    p_latest: Unit = 0.8  # both teams are the learning policy
    rule: Annotated[str, OneOf(RULES)] = "recency"
    recency_half_life: Positive = 10.0  # snapshots; weight halves every this many snapshots back
    rating_temperature: Positive = 5.0  # rating units (prior sigma is 8.3); lower = greedier
    p_random: Unit = 0.05  # of opponent episodes: a team acting uniformly at random
    p_noop: Unit = 0.05  # of opponent episodes: a team sending the no-op action
    # Of all episodes: the opponent team is a guest of kind "cross" / "past" (set by a
    # population on each member; 0 without guests). The rest are drawn by the rules above.
    p_cross: Unit = 0.0
    p_past: Unit = 0.0
    index_refresh_s: NonNegative = 5.0  # how stale the sampler's copy of the index may be
    # the team an opponent plays (chase: hider)
    opponent_role: Annotated[str, OneOf(("any", *ROLES))] = "any"
    # Snapshots a policy worker keeps loaded (about 6.4 MB each with the paper's network). A
    # batch that needs more distinct snapshots than this reloads them from disk every time,
    # which can cost more than the inference itself.
    snapshot_cache: AtLeast1 = 64

    def __post_init__(self) -> None:
        typed_config.check_ranges(self)
        if self.p_random + self.p_noop > 1.0:
            raise ValueError(f"p_random + p_noop must be <= 1, got {self.p_random} + {self.p_noop}")
        if self.p_cross + self.p_past > 1.0:
            raise ValueError(f"p_cross + p_past must be <= 1, got {self.p_cross} + {self.p_past}")

    @property
    def draws_opponents(self) -> bool:
        """Whether `PolicyPool.draw` can give a team to anything but the learning policy (a
        process needs the pool open only then)."""
        return self.p_latest < 1.0 or self.p_cross + self.p_past > 0.0

    def learning_agents(self, max_hiders: int, max_seekers: int) -> int:
        """Most agents of one episode that the learning policy can play, by the rules of
        `PolicyPool.draw`: both teams when `p_latest` > 0 or a snapshot can be drawn (an empty
        pool falls back to "latest" for both), else the team facing the opponent role."""
        if self.p_latest > 0.0 or self.p_random + self.p_noop < 1.0:
            return max_hiders + max_seekers
        return {
            "hider": max_seekers,
            "seeker": max_hiders,
        }.get(self.opponent_role, max(max_hiders, max_seekers))


@dataclass(frozen=True)
class TeamControllers:
    """Who acts for each team this episode: "latest", a snapshot version or guest id, "random"
    or "noop"."""

    hiders: PolicyId = LATEST
    seekers: PolicyId = LATEST

    def __post_init__(self) -> None:
        for team in ("hiders", "seekers"):
            key = policy_key(getattr(self, team))  # "120" -> 120, "random" stays
            if not key.isdigit() and key not in NAMED_POLICIES:
                raise ValueError(
                    f"{team} controller must be a snapshot version or one of {NAMED_POLICIES}, "
                    f"got {key!r}"
                )
            object.__setattr__(self, team, int(key) if key.isdigit() else key)


@dataclass(frozen=True)
class GuestInfo:
    id: int
    name: str
    kind: str
    path: Path
    hider_weight: float
    seeker_weight: float
    created: float | None


# Files of one guest name kept on disk: the current one and the one it replaced.
GUEST_FILES_KEPT = 2


_Holder = TypeVar("_Holder", bound="IndexHolder")


class IndexHolder:
    """Something that holds a connection to a pool index (``conn``, from `open_index`) and
    closes it on `close()` or on leaving a ``with`` block."""

    conn: sqlite3.Connection

    def close(self) -> None:
        self.conn.close()

    def __enter__(self: _Holder) -> _Holder:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class PolicyPool(IndexHolder):
    """Frozen snapshots in `folder` with the SQLite index; opponent sampling per episode."""

    def __init__(self, folder: str | os.PathLike, config: PoolConfig | None = None) -> None:
        self.folder = Path(folder)
        self.folder.mkdir(parents=True, exist_ok=True)
        self.config = config or PoolConfig()
        self.db_path = self.folder / DB_NAME
        self.files = CheckpointDir(self.folder, prefix="snapshot_")  # the snapshot files
        self.path_for = self.files.path_for
        self._lock = threading.Lock()
        self._cache_time = -math.inf
        self._versions: np.ndarray = np.zeros(0, dtype=np.int64)
        self._probs: dict[str, np.ndarray] = {}
        # (kind, role) -> (guest ids, draw probabilities), guests with weight > 0 only
        self._guest_probs: dict[tuple[str, str], tuple[np.ndarray, np.ndarray]] = {}
        try:
            self.conn = open_index(self.db_path)
            self._reconcile()
        except sqlite3.DatabaseError as err:
            if getattr(self, "conn", None) is not None:
                self.conn.close()
            # SQLite says "disk I/O error" where it cannot make its journal on a full disk:
            # that is no damage, and moving the index away would cost its ratings
            io_error = getattr(err, "sqlite_errorname", "").startswith("SQLITE_IOERR")
            if disk_full(err) or (io_error and shutil.disk_usage(self.folder).free < 1 << 20):
                raise NoRoomError(
                    f"no room on the disk of {self.folder} for the pool index ({err}); "
                    "free some space"
                ) from None
            raise PoolError(
                f"pool index {self.db_path} is unreadable ({err}): it is damaged or not a "
                "SQLite database; move it away and the snapshot files in "
                f"{self.folder} are indexed again (their ratings start over)"
            ) from None

    # ----- snapshots -----

    def maybe_add(
        self, version: int, state_dict: Mapping[str, Any], frames: int = 0, episodes: int = 0
    ) -> bool:
        """Add a snapshot when `version` is a multiple of `snapshot_every` and not yet stored."""
        # Version 0, the untrained policy, is a member too: the baseline of cross-play.
        if version % self.config.snapshot_every != 0 or version in self.versions():
            return False
        self.add_snapshot(version, state_dict, frames, episodes)
        return True

    def add_snapshot(
        self, version: int, state_dict: Mapping[str, Any], frames: int = 0, episodes: int = 0
    ) -> Path:
        """Write the frozen weights (file first, then the index row) and return the path."""
        version = int(version)
        if version < 0:
            raise ValueError(f"snapshot version must be >= 0, got {version}")
        created = time.time()
        path = save_checkpoint(
            self.path_for(version),
            {"model": dict(state_dict)},
            {
                "kind": "snapshot",
                "version": version,
                "frames": int(frames),
                "episodes": int(episodes),
                "created": created,
            },
        )
        self._insert(version, path, created, frames, episodes)
        self._cache_time = -math.inf
        return path

    def _insert(self, version: int, path: Path, created: float, frames: int, episodes: int) -> None:
        with transaction(self.conn):
            self.conn.execute(
                "INSERT OR REPLACE INTO snapshots (version, path, created, frames, episodes) "
                "VALUES (?, ?, ?, ?, ?)",
                (version, path.name, created, int(frames), int(episodes)),
            )

    def _reconcile(self) -> None:
        """Index snapshot files written just before a crash; drop snapshot and guest rows whose
        file has gone (guest files are never indexed as snapshots)."""
        indexed = set(self.versions())
        on_disk = set(self.files.steps())
        for version in sorted(on_disk - indexed):
            try:
                meta = load_checkpoint(self.path_for(version)).meta
            except CheckpointError as e:
                log.warning("pool: ignoring unusable snapshot file: %s", e)
                continue
            self._insert(
                version,
                self.path_for(version),
                float(meta.get("created", time.time())),
                int(meta.get("frames", 0)),
                int(meta.get("episodes", 0)),
            )
        missing = sorted(indexed - on_disk)
        if missing:
            log.warning("pool: snapshot files missing for versions %s; dropping them", missing)
            with transaction(self.conn):
                self.conn.executemany(
                    "DELETE FROM snapshots WHERE version = ?", [(v,) for v in missing]
                )
        lost = [g for g in self.guests() if not g.path.exists()]
        if lost:
            log.warning("pool: guest files missing for %s; dropping them", [g.name for g in lost])
            with transaction(self.conn):
                self.conn.executemany("DELETE FROM guests WHERE id = ?", [(g.id,) for g in lost])

    def versions(self) -> list[int]:
        rows = self.conn.execute("SELECT version FROM snapshots ORDER BY version").fetchall()
        return [int(r[0]) for r in rows]

    def load_snapshot(self, version: int, map_location: Any = "cpu") -> dict[str, Any]:
        """The frozen state dict of snapshot `version` or of a guest id (for
        `ActorCritic.load_state_dict`). A replaced guest id loads while its file is kept."""
        if int(version) >= GUEST_BASE:  # a guest id
            row = self.conn.execute(
                "SELECT path FROM guest_files WHERE id = ?", (int(version),)
            ).fetchone()
            if row is None:
                raise ValueError(f"no guest with id {version} in {self.folder}")
            path = self.folder / row[0]
        elif int(version) not in self.versions():
            raise ValueError(f"no snapshot of version {version} in {self.folder}")
        else:
            path = self.path_for(version)
        state = load_checkpoint(path, map_location).state
        if "model" not in state:  # e.g. a training checkpoint copied into the pool's folder
            raise CheckpointError(f"checkpoint {path} holds no policy weights ('model')")
        return state["model"]

    # ----- guests -----

    def guest_path(self, guest_id: int) -> Path:
        return self.folder / f"guest_{int(guest_id)}.pt"

    def add_guest(
        self,
        name: str,
        kind: str,
        state_dict: Mapping[str, Any],
        hider_weight: float = 1.0,
        seeker_weight: float = 1.0,
    ) -> int:
        """Write a guest's weights (file first, then its row) and return its new id; a guest of
        the same name is replaced (see the module docstring)."""
        name = check_guest_name(name)
        if kind not in GUEST_KINDS:
            raise ValueError(f"guest kind must be one of {GUEST_KINDS}, got {kind!r}")
        hider_weight = check_guest_weight("hider_weight", hider_weight)
        seeker_weight = check_guest_weight("seeker_weight", seeker_weight)
        # Reserve the id first (another process adding a guest gets the next one); the file is
        # listed before it exists, which is harmless: nothing draws an id without a guests row.
        with transaction(self.conn):
            row = self.conn.execute(
                "SELECT MAX(id) FROM (SELECT id FROM guest_files UNION ALL SELECT id FROM guests)"
            ).fetchone()
            guest_id = max(GUEST_BASE, (row[0] or 0) + 1)
            path = self.guest_path(guest_id)
            self.conn.execute(
                "INSERT INTO guest_files (id, name, path) VALUES (?, ?, ?)",
                (guest_id, name, path.name),
            )
        created = time.time()
        try:
            save_checkpoint(
                path,
                {"model": dict(state_dict)},
                {
                    "kind": "guest",
                    "guest_kind": kind,
                    "name": name,
                    "id": guest_id,
                    "created": created,
                },
            )
        except BaseException:
            with transaction(self.conn):
                self.conn.execute("DELETE FROM guest_files WHERE id = ?", (guest_id,))
            raise
        with transaction(self.conn):
            self.conn.execute("DELETE FROM guests WHERE name = ?", (name,))
            self.conn.execute(
                "INSERT INTO guests (id, name, kind, path, hider_weight, seeker_weight, created) "
                "VALUES (?, ?, ?, ?, ?, ?, ?)",
                (guest_id, name, kind, path.name, hider_weight, seeker_weight, created),
            )
            stale = self.conn.execute(
                "SELECT id, path FROM guest_files WHERE name = ? ORDER BY id DESC LIMIT -1 "
                "OFFSET ?",
                (name, GUEST_FILES_KEPT),
            ).fetchall()
            self.conn.executemany("DELETE FROM guest_files WHERE id = ?", [(r[0],) for r in stale])
        for r in stale:  # after the commit: no row names a file that is gone
            (self.folder / r[1]).unlink(missing_ok=True)
        self._cache_time = -math.inf
        return guest_id

    def set_guest_weights(self, name: str, hider_weight: float, seeker_weight: float) -> None:
        """New draw weights of guest `name` in each role (its id and file stay)."""
        hider_weight = check_guest_weight("hider_weight", hider_weight)
        seeker_weight = check_guest_weight("seeker_weight", seeker_weight)
        with transaction(self.conn):
            changed = self.conn.execute(
                "UPDATE guests SET hider_weight = ?, seeker_weight = ? WHERE name = ?",
                (hider_weight, seeker_weight, name),
            ).rowcount
        if changed == 0:
            names = [g.name for g in self.guests()]
            raise ValueError(f"no guest named {name!r} in {self.folder}; guests: {names}")
        self._cache_time = -math.inf

    def remove_guest(self, name: str) -> bool:
        """Stop drawing guest `name` (its files stay: a process may still be loading one);
        False when there was no such guest."""
        with transaction(self.conn):
            removed = self.conn.execute("DELETE FROM guests WHERE name = ?", (name,)).rowcount
        self._cache_time = -math.inf
        return removed > 0

    def guests(self) -> list[GuestInfo]:
        """The current guests, oldest id first (read now, not from the sampler's cache)."""
        rows = self.conn.execute("SELECT * FROM guests ORDER BY id").fetchall()
        return [GuestInfo(**{**dict(r), "path": self.folder / r["path"]}) for r in rows]

    # ----- sampling -----

    def _refresh(self) -> None:
        now = time.monotonic()
        if now - self._cache_time < self.config.index_refresh_s:
            return
        rows = self.conn.execute(
            "SELECT version, hider_mu, seeker_mu FROM pool_index ORDER BY version"
        ).fetchall()
        versions = np.array([r[0] for r in rows], dtype=np.int64)
        probs = {}
        for role in ROLES:
            mu = np.array(
                [PRIOR_MU if r[f"{role}_mu"] is None else r[f"{role}_mu"] for r in rows],
                dtype=np.float64,
            )
            probs[role] = self._rule_probabilities(mu)
        guests = self.guests()
        guest_probs = {}
        for kind in GUEST_KINDS:
            for role in ROLES:
                ids = np.array([g.id for g in guests if g.kind == kind], dtype=np.int64)
                w = np.array(
                    [getattr(g, f"{role}_weight") for g in guests if g.kind == kind],
                    dtype=np.float64,
                )
                keep = w > 0.0
                ids, w = ids[keep], w[keep]
                guest_probs[kind, role] = (ids, w / w.sum() if len(w) else w)
        self._versions, self._probs, self._guest_probs = versions, probs, guest_probs
        self._cache_time = now

    def _rule_probabilities(self, mu: np.ndarray) -> np.ndarray:
        n = len(mu)
        if n == 0:
            return np.zeros(0)
        cfg = self.config
        if cfg.rule == "uniform":
            logits = np.zeros(n)
        elif cfg.rule == "recency":
            age = np.arange(n - 1, -1, -1, dtype=np.float64)
            logits = -age / cfg.recency_half_life * math.log(2.0)
        else:
            logits = mu / cfg.rating_temperature
        weights = np.exp(logits - logits.max())
        return weights / weights.sum()

    def candidate_probabilities(self, role: str) -> tuple[np.ndarray, np.ndarray]:
        """(versions, probabilities) of drawing each snapshot to play `role` under the rule."""
        check_role(role)
        with self._lock:
            self._refresh()
            return self._versions, self._probs[role]

    def guest_probabilities(self, kind: str, role: str) -> tuple[np.ndarray, np.ndarray]:
        """(guest ids, probabilities) of drawing each guest of `kind` to play `role`: weights
        normalised, guests of weight 0 left out (empty when none can be drawn)."""
        if kind not in GUEST_KINDS:
            raise ValueError(f"guest kind must be one of {GUEST_KINDS}, got {kind!r}")
        check_role(role)
        with self._lock:
            self._refresh()
            return self._guest_probs[kind, role]

    def draw(self, rng: np.random.Generator) -> TeamControllers:
        """Controllers of both teams for one episode (see the module docstring)."""
        cfg = self.config
        if cfg.p_cross > 0.0 or cfg.p_past > 0.0:
            u = rng.random()
            kind = "cross" if u < cfg.p_cross else "past" if u < cfg.p_cross + cfg.p_past else ""
            if kind:
                role = self._opponent_role(rng)
                ids, probs = self.guest_probabilities(kind, role)
                if len(ids):
                    return _teams(role, int(rng.choice(ids, p=probs)))
        if rng.random() < cfg.p_latest:
            return TeamControllers(LATEST, LATEST)
        role = self._opponent_role(rng)
        u = rng.random()
        if u < cfg.p_random:
            opponent: PolicyId = RANDOM
        elif u < cfg.p_random + cfg.p_noop:
            opponent = NOOP
        else:
            versions, probs = self.candidate_probabilities(role)
            if len(versions) == 0:
                return TeamControllers(LATEST, LATEST)
            opponent = int(rng.choice(versions, p=probs))
        return _teams(role, opponent)

    def _opponent_role(self, rng: np.random.Generator) -> str:
        role = self.config.opponent_role
        return ROLES[int(rng.integers(2))] if role == "any" else role


def _teams(opponent_role: str, opponent: PolicyId) -> TeamControllers:
    """The opponent plays `opponent_role`, the learning policy the other team."""
    if opponent_role == "hider":
        return TeamControllers(hiders=opponent, seekers=LATEST)
    return TeamControllers(hiders=LATEST, seekers=opponent)


class SnapshotCache:
    """Least-recently-used cache of loaded snapshots and guests (keyed by version / guest id):
    state dicts, or what `build` makes of one (the policy worker's cache holds ready models)."""

    def __init__(
        self, pool: PolicyPool, size: int = 4, build: Callable[[dict[str, Any]], Any] | None = None
    ) -> None:
        if size < 1:
            raise ValueError(f"SnapshotCache size must be >= 1, got {size}")
        self.pool = pool
        self.size = size
        self.build = build
        self._load = functools.lru_cache(maxsize=size)(self._read)
        self.misses = 0  # snapshots read from disk: a cache too small for the pool shows here

    def _read(self, version: int) -> Any:
        state = self.pool.load_snapshot(version)
        item = state if self.build is None else self.build(state)
        self.misses += 1
        return item

    def get(self, version: int) -> Any:
        return self._load(int(version))
