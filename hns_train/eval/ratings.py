"""Team-aware Bayesian ratings of policies per role, stored in the pool's SQLite index.

One rating (mu, sigma) per (policy, role): policy is a snapshot version, "latest", "random",
"noop" or the name of another fixed controller (`hns_train.agents.pool.policy_key`); role is
"hider" or "seeker" (the game is asymmetric, so a policy's strength is measured per role).
Ratings use openskill's Plackett-Luce model with its default prior (mu 25, sigma 25/3; the
same numbers as `pool_index.PRIOR_MU` / `PRIOR_SIGMA`, which the pool's rating-prioritised sampler
assumes for unrated snapshots).

A match is one episode between a hider team and a seeker team. Its `hider_score` in [0, 1]
(by default the hidden fraction: the share of post-preparation steps in which no seeker saw a
hider) becomes an outcome: hiders win above 0.5 + `DRAW_MARGIN`, seekers win below
0.5 - `DRAW_MARGIN`, otherwise a draw. A team may be one policy (the usual case: every
teammate runs the same controller) or a list of policies (mixed teams); each member's rating
in that team's role is updated.

Fixed ratings (anchors): policies named in `fixed` (e.g. {"untrained"}) are never re-rated.
Without a stored row an anchor reads as (`PRIOR_MU`, `FIXED_SIGMA` = 1.0): a small sigma, so
the model treats it as a known reference. A match against an anchor is rated with the anchor in
its team, and only the other team's rows are written; the anchor's row is not (its games count
stays as stored, 0 without a row). An anchor gives the rating scale a fixed point across a run:
every other rating drifts only relative to it, so numbers from the start and the end of a long
run (or of members added later) are comparable. Anchors appear on the leaderboard as `get`
reads them.

Win probability: `win_probability(a, b)` is the model's probability that a policy rated `a`
beats one rated `b` in a match (openskill's `predict_win` on the two one-policy teams; it splits
draws, so p(a, b) + p(b, a) = 1): Phi((mu_a - mu_b) / sqrt(2 beta^2 + sigma_a^2 + sigma_b^2)),
beta = 25/6. A population uses it to decide exploit (>= 0.7) and for PFSP weights.

Storage: tables `ratings` and `matches` of `pool.sqlite` (schema in `hns_train.agents.pool_index`).
Every update reads the current ratings and writes the new ones and the match row in one short
IMMEDIATE transaction, so several eval workers can rate concurrently without losing updates.

Public API:
- `Ratings(pool_or_folder, fixed=())`: `record(results)` (MatchResult-like objects: a hider
  and a seeker team, each a policy id or a list of them, and `hider_score`), `get(policy,
  role) -> Rating`, `games(policy)`, `copy_rating(source, target)`, `leaderboard(role=None) ->
  list[Rating]`, `format_leaderboard(role=None, limit=20) -> str`, `matches(limit=None) ->
  list[dict]`, `close()`; attribute `fixed` (frozenset of the anchors' policy keys).
- `Rating(policy, role, mu, sigma, games)` with `conservative` = mu - 3 sigma (the sort key).
- `win_probability(a: Rating, b: Rating) -> float`; `FIXED_SIGMA`.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from openskill.models import PlackettLuce

from hns_train.agents.pool import ROLES, IndexHolder, PolicyId, PolicyPool, check_role, policy_key
from hns_train.agents.pool_index import DB_NAME, PRIOR_MU, PRIOR_SIGMA, open_index, transaction
from hns_train.jsonl import json_number

CONSERVATIVE_SIGMAS = 3.0
DRAW_MARGIN = 0.05  # a hider score within this of 0.5 is a draw
# Sigma of an anchor (a `fixed` policy) without a stored row: small against the prior's 25/3, so
# matches against it move the other team towards the anchor's mu, not the anchor.
FIXED_SIGMA = 1.0


_MODEL = PlackettLuce(mu=PRIOR_MU, sigma=PRIOR_SIGMA)  # stateless: every rating shares it


@dataclass(frozen=True)
class Rating:
    policy: str
    role: str
    mu: float
    sigma: float
    games: int

    @property
    def conservative(self) -> float:
        """mu - 3 sigma: a lower bound the true skill exceeds with ~99.7% belief."""
        return self.mu - CONSERVATIVE_SIGMAS * self.sigma


def win_probability(a: Rating, b: Rating) -> float:
    """Probability that a policy rated `a` beats one rated `b` in a match (draws split)."""
    teams = [[_MODEL.rating(mu=a.mu, sigma=a.sigma)], [_MODEL.rating(mu=b.mu, sigma=b.sigma)]]
    return float(_MODEL.predict_win(teams)[0])


def _team(team: PolicyId | Sequence[PolicyId], name: str) -> list[str]:
    members = [team] if isinstance(team, (str, int)) else list(team)
    if not members:
        raise ValueError(f"{name} team is empty; give a policy id or a list of them")
    keys = [policy_key(m) for m in members]
    return list(dict.fromkeys(keys))  # one rating update per distinct policy


class Ratings(IndexHolder):
    """Ratings and match history in `<pool folder>/pool.sqlite`."""

    def __init__(
        self,
        pool: PolicyPool | str | os.PathLike,
        fixed: Collection[PolicyId] = (),
    ) -> None:
        if isinstance(fixed, (str, int)):
            raise ValueError(
                f"fixed must be a collection of policy ids, e.g. {{'untrained'}}; got {fixed!r}"
            )
        self.fixed = frozenset(policy_key(p) for p in fixed)
        folder = pool.folder if isinstance(pool, PolicyPool) else Path(pool)
        self.db_path = folder / DB_NAME
        self.conn = open_index(self.db_path)

    # ----- reading -----

    def _row(self, policy: str, role: str) -> Rating:
        row = self.conn.execute(
            "SELECT mu, sigma, games FROM ratings WHERE policy = ? AND role = ?", (policy, role)
        ).fetchone()
        if row is None:
            sigma = FIXED_SIGMA if policy in self.fixed else PRIOR_SIGMA
            return Rating(policy, role, PRIOR_MU, sigma, 0)
        return Rating(policy, role, float(row[0]), float(row[1]), int(row[2]))

    def get(self, policy: PolicyId, role: str) -> Rating:
        """Current rating (the prior for a policy that never played in `role`; an anchor
        without a stored row reads as (PRIOR_MU, FIXED_SIGMA))."""
        return self._row(policy_key(policy), check_role(role))

    def leaderboard(self, role: str | None = None) -> list[Rating]:
        """Rated policies and the anchors, best conservative estimate (mu - 3 sigma) first."""
        query = "SELECT policy, role, mu, sigma, games FROM ratings"
        args: tuple = ()
        if role is not None:
            query += " WHERE role = ?"
            args = (check_role(role),)
        rows = self.conn.execute(query, args).fetchall()
        ratings = [Rating(r[0], r[1], float(r[2]), float(r[3]), int(r[4])) for r in rows]
        stored = {(r.policy, r.role) for r in ratings}
        for policy in sorted(self.fixed):
            for r in ROLES if role is None else (role,):
                if (policy, r) not in stored:
                    ratings.append(self._row(policy, r))
        return sorted(ratings, key=lambda r: (-r.conservative, r.policy, r.role))

    def format_leaderboard(self, role: str | None = None, limit: int = 20) -> str:
        """A text table: rank, policy, role, mu - 3 sigma, mu ± 3 sigma, games."""
        lines = [f"{'#':>3} {'policy':<16} {'role':<6} {'mu-3sigma':>9} {'mu ± 3sigma':>15} games"]
        for i, r in enumerate(self.leaderboard(role)[:limit], start=1):
            spread = f"{r.mu:6.2f} ± {CONSERVATIVE_SIGMAS * r.sigma:5.2f}"
            lines.append(
                f"{i:>3} {r.policy:<16} {r.role:<6} {r.conservative:>9.2f} {spread:>15} {r.games}"
            )
        return "\n".join(lines)

    def matches(self, limit: int | None = None) -> list[dict[str, Any]]:
        """Rated matches, newest first."""
        query = "SELECT * FROM matches ORDER BY id DESC"
        if limit is not None:
            query += f" LIMIT {int(limit)}"
        out = []
        for row in self.conn.execute(query).fetchall():
            item = dict(row)
            item["stats"] = json.loads(item.pop("stats_json") or "null")
            out.append(item)
        return out

    def games(self, policy: PolicyId) -> int:
        """Rated matches `policy` has played, in any role."""
        key = policy_key(policy)
        row = self.conn.execute(
            "SELECT COUNT(*) FROM matches WHERE hider = ? OR seeker = ?", (key, key)
        ).fetchone()
        return int(row[0])

    # ----- writing -----

    def copy_rating(self, source: PolicyId, target: PolicyId) -> None:
        """`target` takes over `source`'s ratings (its games count from 0)."""
        with transaction(self.conn):
            self.conn.execute("DELETE FROM ratings WHERE policy = ?", (policy_key(target),))
            self.conn.execute(
                "INSERT INTO ratings (policy, role, mu, sigma, games, updated) "
                "SELECT ?, role, mu, sigma, 0, updated FROM ratings WHERE policy = ?",
                (policy_key(target), policy_key(source)),
            )

    def outcome(self, hider_score: float) -> tuple[int, int]:
        """openskill ranks (lower is better) of (hiders, seekers) for a score in [0, 1]."""
        if not 0.0 <= hider_score <= 1.0:
            raise ValueError(f"hider_score must be in [0, 1], got {hider_score}")
        if hider_score > 0.5 + DRAW_MARGIN:
            return 0, 1
        if hider_score < 0.5 - DRAW_MARGIN:
            return 1, 0
        return 0, 0

    def record(self, results: Iterable[Any]) -> int:
        """Rate many matches (objects with `hider`, `seeker`, `hider_score` and optionally
        `to_dict()`, e.g. `matches.MatchResult`) in one transaction; returns how many."""
        results = list(results)
        with transaction(self.conn):
            for r in results:
                stats = r.to_dict() if hasattr(r, "to_dict") else None
                self._update(
                    _team(r.hider, "hider"), _team(r.seeker, "seeker"), r.hider_score, stats
                )
        return len(results)

    def _update(
        self,
        hiders: list[str],
        seekers: list[str],
        hider_score: float,
        result: Mapping[str, Any] | None,
    ) -> None:
        hider_score = float(hider_score)
        ranks = self.outcome(hider_score)
        old = [[self._row(p, "hider") for p in hiders], [self._row(p, "seeker") for p in seekers]]
        teams = [[_MODEL.rating(mu=r.mu, sigma=r.sigma) for r in team] for team in old]
        new = _MODEL.rate(teams, ranks=list(ranks))
        now = time.time()
        self.conn.executemany(
            "INSERT INTO ratings (policy, role, mu, sigma, games, updated) "
            "VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT (policy, role) DO UPDATE SET "
            "mu = excluded.mu, sigma = excluded.sigma, games = excluded.games, "
            "updated = excluded.updated",
            [
                (o.policy, o.role, float(n.mu), float(n.sigma), o.games + 1, now)
                for team_old, team_new in zip(old, new, strict=True)
                for o, n in zip(team_old, team_new, strict=True)
                if o.policy not in self.fixed  # an anchor's row is never written
            ],
        )
        result = dict(result or {})
        self.conn.execute(
            "INSERT INTO matches (time, hider, seeker, hider_score, hider_return, seeker_return, "
            "hidden_fraction, stats_json) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
            (
                now,
                ",".join(hiders),
                ",".join(seekers),
                hider_score,
                _float_or_none(result.get("hider_return")),
                _float_or_none(result.get("seeker_return")),
                _float_or_none(result.get("hidden_fraction")),
                json.dumps(result, default=json_number) if result else None,
            ),
        )


def _float_or_none(value: Any) -> float | None:
    return None if value is None else float(value)
