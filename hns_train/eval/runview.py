"""`python -m hns_train.eval --run RUN_DIR`: what a run's evaluation has found so far.

Prints, from the run directory alone (no worker needs to be running):
- progress: the newest metrics record (version, frames, episodes, hours) and the pool snapshots;
- the leaderboard: every rated (policy, role) with mu ± 3 sigma, sorted by mu - 3 sigma
  (`Ratings.format_leaderboard`); "latest" is the learning policy (see
  `hns_train.distributed.evaluator` for how it is rated);
- the latest policy's win rates against each opponent class (`pool` snapshots, `random`,
  `noop`, `scripted_seeker`), over its newest `WINDOW` rated matches per class, as hider, as
  seeker and overall. A match is won, drawn or lost by the ratings' own outcome rule
  (`Ratings.outcome`: hidden fraction against 0.5 ± the draw margin); a draw counts half;
- emergent phases reached (`phase` records of metrics.jsonl);
- the newest `N_REPLAYS` replays under `replays/` with their videos.
A population run directory (one with `population.json`) gets the population view instead
(`hns_train.eval.population_view`); each of its members (`members/m<i>/`) is a run as above.

Public API: `run_view(run_dir) -> int`, `win_rates(ratings, window) -> dict[str, WinRecord]`,
`newest_replays(run_dir, n)`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from hns_train.agents.pool import LATEST, ROLES, PolicyPool
from hns_train.agents.pool_index import DB_NAME
from hns_train.atomic_file import read_yaml
from hns_train.eval.phases import read_metrics
from hns_train.eval.population_view import MANIFEST, population_view
from hns_train.eval.ratings import Ratings
from hns_train.eval.rundirs import is_run_dir

WINDOW = 200  # newest rated matches per opponent class behind a win rate
N_REPLAYS = 10


@dataclass
class Tally:
    games: int = 0
    wins: int = 0
    draws: int = 0

    @property
    def losses(self) -> int:
        return self.games - self.wins - self.draws

    @property
    def rate(self) -> float | None:
        """Win rate with a draw counted half; None without games."""
        return (self.wins + 0.5 * self.draws) / self.games if self.games else None

    def add(self, won: bool, drawn: bool) -> None:
        self.games += 1
        self.wins += int(won)
        self.draws += int(drawn)


@dataclass
class WinRecord:
    """The latest policy's results against one opponent class, overall and per role it played."""

    opponent: str
    all: Tally = field(default_factory=Tally)
    by_role: dict[str, Tally] = field(default_factory=lambda: {r: Tally() for r in ROLES})


def win_rates(ratings: Ratings, window: int = WINDOW) -> dict[str, WinRecord]:
    """The latest policy's newest `window` rated matches per opponent class (the class the
    eval worker stored with each match), tallied."""
    rows = ratings.conn.execute(
        "SELECT hider, json_extract(stats_json, '$.opponent_class') AS opponent, hider_score "
        "FROM matches WHERE (hider = ? OR seeker = ?) AND hider != seeker "
        "AND opponent IS NOT NULL ORDER BY id DESC",
        (LATEST, LATEST),
    )
    out: dict[str, WinRecord] = {}
    for hider, opponent, score in rows:
        role = "hider" if hider == LATEST else "seeker"
        record = out.setdefault(opponent, WinRecord(opponent))
        if record.all.games >= window:
            continue
        ranks = ratings.outcome(float(score))
        mine, theirs = (ranks[0], ranks[1]) if role == "hider" else (ranks[1], ranks[0])
        won, drawn = mine < theirs, mine == theirs
        record.all.add(won, drawn)
        record.by_role[role].add(won, drawn)
    return out


def newest_replays(run_dir: str | Path, n: int = N_REPLAYS) -> list[tuple[Path, Path | None]]:
    """(replay, its mp4 or None) for the newest `n` replays under run_dir/replays, newest first."""
    folder = Path(run_dir) / "replays"
    if not folder.is_dir():
        return []
    replays = [p for p in folder.rglob("*.npz") if not p.name.startswith(".")]
    replays.sort(key=lambda p: (p.stat().st_mtime, p.name), reverse=True)
    out = []
    for p in replays[:n]:
        video = p.with_suffix(".mp4")
        out.append((p, video if video.is_file() else None))
    return out


def no_ratings_note(run_dir: Path) -> str:
    """Why a run's leaderboard is empty: it has no evaluation workers (`eval.n_workers=0`, as
    the chase config), or their first rated round has not finished."""
    config = read_yaml(run_dir / "config.yaml")
    section = config.get("eval") if isinstance(config, dict) else None
    workers = section.get("n_workers") if isinstance(section, dict) else None
    if workers == 0:
        return (
            "no rated matches: this run has no evaluation workers (eval.n_workers=0; the chase "
            f"config runs none): `python -m hns_train.eval play {run_dir} random` plays its "
            "newest checkpoint now, and eval.n_workers=1 rates a run as it trains"
        )
    return "no rated matches yet (evaluation workers rate the latest policy every eval.every_s)"


def _fmt_rate(t: Tally) -> str:
    return "-" if t.rate is None else f"{t.rate:.2f} ({t.games})"


def run_view(run_dir: str | Path) -> int:
    run_dir = Path(run_dir)
    if (run_dir / MANIFEST).is_file():
        return population_view(run_dir)
    db = run_dir / "pool" / DB_NAME
    if not db.is_file():
        if is_run_dir(run_dir):  # a run that has only just started
            raise ValueError(
                f"--run {run_dir}: no evaluation yet (no pool/{DB_NAME}: the run's workers "
                "make it when they start); look again once the run is under way"
            )
        raise ValueError(
            f"--run {run_dir}: not a run directory (no pool/{DB_NAME}); runs are made by "
            "python -m hns_train.train and live in runs/<name>/"
        )
    metrics = run_dir / "metrics.jsonl"
    train, phases = read_metrics(metrics) if metrics.is_file() else ([], [])
    print(f"run {run_dir}")
    if train:
        r = train[-1]
        print(
            f"  version {r.get('version', 0)}, {r.get('frames', 0):,} env frames, "
            f"{r.get('episodes', 0):,} episodes, {r.get('hours', 0.0):.2f} h"
        )
    with PolicyPool(run_dir / "pool") as pool:
        versions = pool.versions()
    if versions:
        print(f"  pool: {len(versions)} snapshots, versions {versions[0]}..{versions[-1]}")
    else:
        print("  pool: no snapshots yet")

    with Ratings(run_dir / "pool") as ratings:
        board = ratings.leaderboard()
        newest = ratings.matches(limit=1)
        total = ratings.conn.execute("SELECT COUNT(*) FROM matches").fetchone()[0]
        print(f"\nleaderboard ({total} rated matches; openskill mu ± 3 sigma, by mu - 3 sigma)")
        print(ratings.format_leaderboard() if board else f"  {no_ratings_note(run_dir)}")
        records_by_class = win_rates(ratings)
    if records_by_class:
        stats = (newest[0].get("stats") or {}) if newest else {}
        at = stats.get("latest_version")
        where = f" (newest match at version {at})" if at is not None else ""
        print(
            f"\nlatest policy's win rates{where}, newest {WINDOW} matches per opponent class; "
            "a draw counts half; (games)"
        )
        print(f"  {'opponent':<16} {'overall':>12} {'as hider':>12} {'as seeker':>12}  w/d/l")
        for name in sorted(records_by_class):
            rec = records_by_class[name]
            t = rec.all
            print(
                f"  {name:<16} {_fmt_rate(t):>12} {_fmt_rate(rec.by_role['hider']):>12} "
                f"{_fmt_rate(rec.by_role['seeker']):>12}  {t.wins}/{t.draws}/{t.losses}"
            )
    else:
        print("\nno matches of the latest policy rated yet")

    if phases:
        print("\nphases reached")
        for p in phases:
            print(f"  {p.phase}: {p.episodes:,} episodes, {p.frames:,} frames, {p.hours:.2f} h")
    else:
        print("\nphases reached: none yet")

    replays = newest_replays(run_dir)
    if replays:
        print(f"\nnewest replays ({len(replays)})")
        for path, video in replays:
            print(f"  {path}" + (f"\n    video {video}" if video is not None else ""))
    else:
        print(f"\nno replays yet in {run_dir / 'replays'}")
    return 0
