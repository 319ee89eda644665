"""The SQLite index of a policy pool (`run_dir/pool/pool.sqlite`): its schema, and how every
process opens it and writes to it.

One file per run, shared by every process (WAL mode, autocommit, a 30 s busy timeout, short
IMMEDIATE write transactions), schema `SCHEMA` below:
- `snapshots(version PK, path, created, frames, episodes)`: written by `pool.PolicyPool`.
- `ratings(policy, role, mu, sigma, games, updated)`, PK (policy, role); `policy` is a
  snapshot version as text ("120"), "latest" / "random" / "noop", or another fixed
  controller's lower-case name (e.g. "scripted_seeker"); role "hider" | "seeker".
  Written by `hns_train.eval.ratings`; a missing row means the prior (`PRIOR_MU`, `PRIOR_SIGMA`).
- `matches(id, time, hider, seeker, hider_score, hider_return, seeker_return,
  hidden_fraction, stats_json)`: one row per rated match, written by `hns_train.eval.ratings`.
- `guests(id PK, name UNIQUE, kind 'cross' | 'past', path, hider_weight, seeker_weight,
  created)`: the current guests, weights from outside the run (another learner's latest, a
  hall-of-fame entry) that opponents are drawn from; written by `pool.PolicyPool.add_guest`.
  Ids are >= `GUEST_BASE` (2**40), above any snapshot version, and never reused in a pool.
- `guest_files(id PK, name, path)`: every guest file still on disk, current or replaced (a
  process may still be loading a replaced one): where `load_snapshot(id)` finds a guest's
  weights, which files of a name to delete, and the largest id ever given out.
- view `pool_index`: each snapshot with games played and its hider/seeker mu and sigma, read by
  `pool.PolicyPool` for rating-prioritised sampling (snapshots only: guests are not in it).

Every table is created IF NOT EXISTS, so a pool file written before a table existed opens and
gains it.

Public API: `open_index(db_path) -> sqlite3.Connection` (creates the tables if needed),
`transaction(conn)` (context manager for writes), `DB_NAME`, `SCHEMA`, `PRIOR_MU`, `PRIOR_SIGMA`,
`GUEST_BASE`, `GUEST_KINDS`.
"""

from __future__ import annotations

import os
import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

# openskill's default prior (mu 25, sigma 25/3): what a policy without a `ratings` row is worth.
# eval/ratings.py builds its model from these; pool.py's rating sampler assumes them.
PRIOR_MU = 25.0
PRIOR_SIGMA = 25.0 / 3.0
DB_NAME = "pool.sqlite"
# Guest ids start here: far above any snapshot version (a version counts optimiser steps), so a
# guest id travels as an ordinary snapshot code (an int >= 0) and never collides with one.
GUEST_BASE = 2**40
GUEST_KINDS = ("cross", "past")
BUSY_TIMEOUT_S = 30.0

SCHEMA = """
CREATE TABLE IF NOT EXISTS snapshots (
    version INTEGER PRIMARY KEY,
    path TEXT NOT NULL,
    created REAL NOT NULL,
    frames INTEGER NOT NULL DEFAULT 0,
    episodes INTEGER NOT NULL DEFAULT 0
);
CREATE TABLE IF NOT EXISTS ratings (
    policy TEXT NOT NULL,
    role TEXT NOT NULL CHECK (role IN ('hider', 'seeker')),
    mu REAL NOT NULL,
    sigma REAL NOT NULL,
    games INTEGER NOT NULL DEFAULT 0,
    updated REAL NOT NULL,
    PRIMARY KEY (policy, role)
);
CREATE TABLE IF NOT EXISTS matches (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    time REAL NOT NULL,
    hider TEXT NOT NULL,
    seeker TEXT NOT NULL,
    hider_score REAL NOT NULL,
    hider_return REAL,
    seeker_return REAL,
    hidden_fraction REAL,
    stats_json TEXT
);
CREATE TABLE IF NOT EXISTS guests (
    id INTEGER PRIMARY KEY,
    name TEXT UNIQUE NOT NULL,
    kind TEXT NOT NULL CHECK (kind IN ('cross', 'past')),
    path TEXT NOT NULL,
    hider_weight REAL NOT NULL,
    seeker_weight REAL NOT NULL,
    created REAL
);
CREATE TABLE IF NOT EXISTS guest_files (
    id INTEGER PRIMARY KEY,
    name TEXT NOT NULL,
    path TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS guest_files_name ON guest_files (name);
CREATE INDEX IF NOT EXISTS matches_hider ON matches (hider);
CREATE INDEX IF NOT EXISTS matches_seeker ON matches (seeker);
CREATE VIEW IF NOT EXISTS pool_index AS
SELECT s.version, s.path, s.created, s.frames, s.episodes,
       COALESCE(h.games, 0) + COALESCE(k.games, 0) AS games,
       h.mu AS hider_mu, h.sigma AS hider_sigma,
       k.mu AS seeker_mu, k.sigma AS seeker_sigma
FROM snapshots s
LEFT JOIN ratings h ON h.policy = CAST(s.version AS TEXT) AND h.role = 'hider'
LEFT JOIN ratings k ON k.policy = CAST(s.version AS TEXT) AND k.role = 'seeker';
"""


def open_index(db_path: str | os.PathLike) -> sqlite3.Connection:
    """Connect to (and create if needed) a pool index: WAL mode, autocommit, busy timeout.

    Writers use `with transaction(conn):` (BEGIN IMMEDIATE ... COMMIT): short transactions."""
    db_path = Path(db_path)
    db_path.parent.mkdir(parents=True, exist_ok=True)
    conn = sqlite3.connect(db_path, timeout=BUSY_TIMEOUT_S, isolation_level=None)
    try:
        conn.row_factory = sqlite3.Row
        conn.execute("PRAGMA journal_mode = WAL")
        conn.execute("PRAGMA synchronous = NORMAL")
        with transaction(conn):
            for statement in SCHEMA.split(";"):
                if statement.strip():
                    conn.execute(statement)
    except BaseException:
        conn.close()  # a file that is not an index must not keep a connection open
        raise
    return conn


@contextmanager
def transaction(conn: sqlite3.Connection) -> Iterator[sqlite3.Connection]:
    """One short IMMEDIATE (write-locking) transaction: commit, or roll back on error."""
    conn.execute("BEGIN IMMEDIATE")
    try:
        yield conn
    except BaseException:
        conn.execute("ROLLBACK")
        raise
    conn.execute("COMMIT")
