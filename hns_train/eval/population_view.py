"""`python -m hns_train.eval --run RUN_DIR` on a population (tournament) run directory.

A run directory with a `population.json` manifest is a population (`runview.run_view` hands it
here); its members' own directories (`members/m<i>/`) are ordinary runs and keep the run view.
Reads only files (no worker needs to be running), in the formats of the population design:
- `population.json`: the manifest (members, status, current hyperparameters, counters, and the
  stop reason once the population has stopped: its members not retired are shown `stopped`);
- `lineage.jsonl`: one event per line (join, exploit, explore, restart, retire, resume);
- `population.jsonl`: a status record every `population.record_every_s` (per member: version,
  frames, hyperparameters, hider/seeker mu and sigma in the league);
- `league/pool.sqlite`: the league's ratings (`Ratings(run_dir / "league")`, the untrained
  network `UNTRAINED` held fixed as the population rates it);
- `config.yaml`: the population's config, for which hyperparameters are searched on a log scale.

Prints the league leaderboard per role with each member's status and hyperparameters, the
lineage (an exploit and the explore that follows it are one row: who copied whom, at which
version, hyperparameters before -> after), each member's hyperparameter schedule, and writes
`population.png`: mu per role of each member over elapsed time, then one panel per
hyperparameter (a log axis for keys whose `population.ranges` scale is log, or, for keys not
searched, whose positive values span `LOG_SPAN` or more), exploit events as dotted lines in the
member's colour. The PNG is `WIDTH` pixels wide and `TOP_PX + PANEL_PX` per panel high
(`figure_size`).

A JSONL line cut short (a write in progress, a crash) is skipped with a note; other bad lines
too, naming the line; a missing or unreadable league database or manifest is a message in the
output, not a traceback.

Public API: `population_view(run_dir) -> int`, `load_population(run_dir) -> Population`,
`read_manifest(run_dir) -> (manifest, notes)`, `hyper_schedule(lineage)`,
`first_exploit_version(lineage, member)`, `best_member(run_dir, manifest=None)`,
`read_league(run_dir, read)`, `member_scores(ratings, members)` and `best_scored(scores)`
(the rule the population controller's summary names its best member by),
`searched_scales(run_dir)`, `log_axis(key, values, scales)`, `plot_population(pop, out)`,
`figure_size(n_hyper)`, file names `MANIFEST`, `LINEAGE`, `STATUS`, `LEAGUE`, `PLOT`.
"""

from __future__ import annotations

import re
import sqlite3
import textwrap
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from hns_train.agents.pool import ROLES
from hns_train.agents.pool_index import DB_NAME
from hns_train.agents.population import (
    ANCHORS,
    LEAGUE,
    LINEAGE,
    MANIFEST,
    STATUS,
    UNTRAINED,
    load_manifest,
)
from hns_train.eval.figure import panels, save_png, side_legend
from hns_train.eval.phases import finite_number
from hns_train.eval.ratings import Ratings
from hns_train.jsonl import read_records

# File names of a population run directory (the population design; written by the controller).
PLOT = "population.png"

LOG_SPAN = 10.0  # a key not searched gets a log axis when its positive values span this ratio
LINEAGE_ROWS = 60  # newest lineage rows printed; older ones are counted
LEADERBOARD_ROWS = 20  # per role, as `Ratings.format_leaderboard`
TEXT_WIDTH = 100  # columns the tables wrap to
WIDTH, TOP_PX, PANEL_PX = 1400, 80, 260  # the PNG's pixels: WIDTH x TOP + PANEL * n
MAX_PANELS = 24  # hyperparameter panels drawn; beyond that the PNG grows past usefulness
HOF = re.compile(r"^(m\d+)\.(\d+)$")  # a hall-of-fame policy: member m1 at version 400
ROLE_MU = {role: (f"{role}_mu", f"{role}_sigma") for role in ROLES}
STOPPED = "stopped"  # a member that was running when its population stopped
COUNTERS = ("frames", "episodes", "exploits", "restarts")  # the manifest's, in the order shown
T = TypeVar("T")


@dataclass
class Population:
    """What a population run directory holds, as read; `notes` name what could not be read."""

    run_dir: Path
    manifest: dict[str, Any]
    lineage: list[dict[str, Any]]
    status: list[dict[str, Any]]
    notes: list[str] = field(default_factory=list)

    @property
    def members(self) -> dict[str, dict[str, Any]]:
        return self.manifest.get("members") or {}


def read_manifest(run_dir: Path) -> tuple[dict[str, Any], list[str]]:
    """population.json as a dict ({} and a note when it cannot be used); members that are not
    objects are dropped."""
    try:
        data = load_manifest(run_dir / MANIFEST)
    except ValueError as e:  # not JSON, not UTF-8, another format; names the file
        return {}, [f"{e}; members and counters unknown"]
    except OSError as e:
        return {}, [f"{MANIFEST}: unreadable ({e.strerror or e}); members and counters unknown"]
    members = data.get("members")
    if not isinstance(members, dict):
        return {}, [f"{MANIFEST}: 'members' is not an object; members and counters unknown"]
    data["members"] = {k: v for k, v in members.items() if isinstance(v, dict)}
    if data.get("stop_reason"):  # the population has stopped: so has every member not retired
        for v in data["members"].values():
            if v.get("status") == "running":
                v["status"] = STOPPED
    return data, []


def load_population(run_dir: str | Path) -> Population:
    run_dir = Path(run_dir)
    manifest, notes = read_manifest(run_dir)
    lineage, lineage_notes = read_records(run_dir / LINEAGE)
    status, status_notes = read_records(run_dir / STATUS)
    return Population(run_dir, manifest, lineage, status, notes + lineage_notes + status_notes)


# ----- reading the lineage -----


def _elapsed(event: dict[str, Any]) -> float:
    return finite_number(event.get("elapsed_s")) or 0.0


def hyper_schedule(
    lineage: list[dict[str, Any]],
) -> dict[str, dict[str, list[tuple[float, Any, str]]]]:
    """member -> key -> [(elapsed_s, value, cause)]: the value each hyperparameter took and
    when, from join events (every key) and explore events (keys whose value changed)."""
    out: dict[str, dict[str, list[tuple[float, Any, str]]]] = {}
    source: dict[str, str] = {}  # member -> whom it copied last (the explore's cause)
    for event in lineage:
        kind, member = event.get("event"), event.get("member")
        if not isinstance(member, str) or not member:
            continue
        if kind == "exploit":
            source[member] = str(event.get("source", "?"))
            continue
        if kind == "join":
            hyper, cause = event.get("hyper"), "join"
        elif kind == "explore":
            hyper, cause = event.get("hyper_after"), f"exploit of {source.get(member, '?')}"
        else:
            continue
        if not isinstance(hyper, dict):
            continue
        keys = out.setdefault(member, {})
        for key, value in hyper.items():
            points = keys.setdefault(key, [])
            if not points or points[-1][1] != value:
                points.append((_elapsed(event), value, cause))
    return out


def first_exploit_version(lineage: list[dict[str, Any]], member: str) -> int | None:
    """The version of `member` at its first exploit event (it was replaced), or None."""
    for event in lineage:
        if event.get("event") == "exploit" and event.get("member") == member:
            version = event.get("version")
            return int(version) if finite_number(version) is not None else None
    return None


def exploit_events(lineage: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [e for e in lineage if e.get("event") == "exploit" and isinstance(e.get("member"), str)]


# ----- the league -----


def read_league(run_dir: Path, read: Callable[[Ratings], T]) -> tuple[T | None, str]:
    """`read` of the league's `Ratings` and "", or None and what stopped it: no database (one
    is never created, as Ratings would) or one that does not read. The ratings are closed."""
    if not (run_dir / LEAGUE / DB_NAME).is_file():
        return None, (
            f"league: no ratings yet ({LEAGUE}/{DB_NAME} missing; the population controller "
            "creates it when it starts)"
        )
    try:
        with Ratings(run_dir / LEAGUE, fixed=ANCHORS) as ratings:
            return read(ratings), ""
    except sqlite3.DatabaseError as e:
        return None, f"league: {LEAGUE}/{DB_NAME} is unreadable ({e})"


def member_scores(ratings, members) -> dict[str, float]:
    """member -> the mean over roles of its latest policy's mu - 3 sigma in the league (the
    prior for a role it has not played), for members the league rated at all."""
    rated = {r.policy for r in ratings.leaderboard() if r.games > 0}
    return {
        m: sum(ratings.get(m, role).conservative for role in ROLES) / len(ROLES)
        for m in members
        if m in rated
    }


def best_member(run_dir: str | Path, manifest: dict[str, Any] | None = None) -> str | None:
    """The population's best member: highest `member_scores` in the league; None when the
    league rated none or has no database to read (the status records only copy its ratings)."""
    run_dir = Path(run_dir)
    if manifest is None:
        manifest, _ = read_manifest(run_dir)
    members = manifest.get("members") or {}
    return read_league(run_dir, lambda ratings: best_scored(member_scores(ratings, members)))[0]


def best_scored(scores: dict[str, float]) -> str | None:
    """The member of highest score (of two equal, the lower index); None without scores."""
    return max(scores, key=lambda m: (scores[m], -_member_order(m))) if scores else None


def _member_order(name: str) -> int:
    return int(name[1:]) if name[1:].isdigit() else 1 << 30


# ----- text -----


def fmt_elapsed(seconds: float) -> str:
    s = int(round(max(seconds, 0.0)))
    return f"{s // 3600}:{s // 60 % 60:02d}:{s % 60:02d}"


def fmt_count(value: Any) -> str:
    n = finite_number(value)
    return "?" if n is None else f"{int(n):,}"


def fmt_value(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.3g}"
    return str(value)


def short_key(key: str) -> str:
    return key.rsplit(".", 1)[-1]


def fmt_hyper(hyper: Any) -> str:
    if not isinstance(hyper, dict) or not hyper:
        return "-"
    return " ".join(f"{short_key(k)}={fmt_value(v)}" for k, v in hyper.items())


def _wrap(head: str, text: str, indent: int) -> list[str]:
    lines = textwrap.wrap(
        text, TEXT_WIDTH - indent, break_on_hyphens=False, break_long_words=False
    ) or [""]
    return [(head + lines[0]).rstrip()] + [" " * indent + line for line in lines[1:]]


def policy_note(policy: str, members: dict[str, dict[str, Any]]) -> str:
    """What a league policy is: a member's latest (status, version, hyperparameters), a
    hall-of-fame entry, or the untrained anchor."""
    if policy in members:
        m = members[policy]
        return f"{m.get('status', '?')} v{m.get('version', '?')} {fmt_hyper(m.get('hyper'))}"
    hof = HOF.match(policy)
    if hof:
        return f"hall of fame: {hof.group(1)} at v{hof.group(2)}"
    if policy == UNTRAINED:
        return "anchor: the untrained network"
    return ""


def leaderboard_lines(ratings, members: dict[str, dict[str, Any]]) -> list[str]:
    out = []
    total = ratings.conn.execute("SELECT COUNT(*) FROM matches").fetchone()[0]
    out.append(
        f"\nleague leaderboard ({total} rated matches; openskill mu ± 3 sigma, by mu - 3 sigma)"
    )
    for role in ROLES:
        board = ratings.leaderboard(role)[:LEADERBOARD_ROWS]
        out.append(f"  as {role}")
        if not board:
            out.append("  no rated matches yet")
            continue
        table = ratings.format_leaderboard(role, limit=LEADERBOARD_ROWS).splitlines()
        out.append(table[0] + "  status, version, hyperparameters")
        for line, rating in zip(table[1:], board, strict=False):
            note = policy_note(rating.policy, members) if f" {rating.policy} " in line else ""
            out.extend(_wrap(line + "  ", note, len(line) + 2))
    return out


def member_lines(pop: Population) -> list[str]:
    m = pop.manifest
    counters = m.get("counters") if isinstance(m.get("counters"), dict) else {}
    hall = m.get("hall_of_fame") if isinstance(m.get("hall_of_fame"), list) else []
    members = pop.members
    running = sum(1 for v in members.values() if v.get("status") == "running")
    state = f"stopped: {m['stop_reason']}" if m.get("stop_reason") else f"{running} running"
    out = [
        f"population {pop.run_dir} ({m.get('name', '?')}): {len(members)} members "
        f"({state}), elapsed {fmt_elapsed(finite_number(m.get('elapsed_s')) or 0.0)}",
        "  "
        + ", ".join(f"{fmt_count(counters.get(k, 0))} {k}" for k in COUNTERS)
        + f", hall of fame {len(hall)}",
    ]
    if members:
        head = (
            f"  {'member':<7} {'status':<8} {'version':>8} {'frames':>12} {'expl':>4} {'rst':>4}  "
        )
        out.append(head + "hyperparameters")
        for name in sorted(members, key=_member_order):
            v = members[name]
            row = (
                f"  {name:<7} {str(v.get('status', '?')):<8} {fmt_count(v.get('version')):>8} "
                f"{fmt_count(v.get('frames')):>12} {fmt_count(v.get('exploits')):>4} "
                f"{fmt_count(v.get('restarts')):>4}  "
            )
            out.extend(_wrap(row, fmt_hyper(v.get("hyper")), len(head)))
    return out


def _changes(before: Any, after: Any, how: Any) -> str:
    before = before if isinstance(before, dict) else {}
    after = after if isinstance(after, dict) else {}
    how = how if isinstance(how, dict) else {}
    parts = []
    for key in after:
        tag = f" ({how[key]})" if key in how else ""
        if key not in before or before[key] != after[key] or tag:
            old = fmt_value(before[key]) if key in before else "?"
            parts.append(f"{short_key(key)} {old}->{fmt_value(after[key])}{tag}")
    return ", ".join(parts) if parts else "hyperparameters unchanged"


def lineage_rows(lineage: list[dict[str, Any]]) -> list[tuple[float, str, str, str]]:
    """(elapsed_s, member, event, details) per row; an explore right after its member's
    exploit is folded into that exploit's row."""
    rows: list[tuple[float, str, str, str]] = []
    open_exploit: dict[str, int] = {}  # member -> index of its exploit row awaiting an explore
    for event in lineage:
        kind = str(event.get("event", "?"))
        member = str(event.get("member") or "-")
        t = _elapsed(event)
        if kind == "exploit":
            p = finite_number(event.get("win_probability"))
            details = (
                f"copied {event.get('source', '?')} v{event.get('source_version', '?')}"
                + (f" (p win {p:.2f})" if p is not None else "")
                + f" at v{event.get('version', '?')}"
            )
            open_exploit[member] = len(rows)
            rows.append((t, member, kind, details))
            continue
        if kind == "explore":
            change = _changes(event.get("hyper_before"), event.get("hyper_after"), event.get("how"))
            at = open_exploit.pop(member, None)
            if at is not None:
                t0, m0, k0, d0 = rows[at]
                rows[at] = (t0, m0, k0 + "+explore", f"{d0}; {change}")
            else:
                rows.append((t, member, kind, change))
            continue
        open_exploit.pop(member, None)
        if kind == "join":
            details = fmt_hyper(event.get("hyper"))
        elif kind == "restart":
            details = str(event.get("reason", ""))
        else:
            details = ""
        rows.append((t, member, kind, details))
    return rows


def lineage_lines(pop: Population) -> list[str]:
    rows = lineage_rows(pop.lineage)
    if not rows:
        return [f"\nlineage: no events yet ({LINEAGE})"]
    exploits = sum(1 for r in rows if r[2].startswith("exploit"))
    out = [f"\nlineage ({len(rows)} events, {exploits} exploits; elapsed h:mm:ss)"]
    head = f"  {'elapsed':>9} {'member':<7} {'event':<15} "
    out.append(head + "details")
    if len(rows) > LINEAGE_ROWS:
        out.append(f"  ... {len(rows) - LINEAGE_ROWS} older events not shown")
    for t, member, kind, details in rows[-LINEAGE_ROWS:]:
        out.extend(_wrap(f"  {fmt_elapsed(t):>9} {member:<7} {kind:<15} ", details, len(head)))
    return out


def schedule_lines(pop: Population) -> list[str]:
    schedule = hyper_schedule(pop.lineage)
    if not schedule:
        return ["\nhyperparameter schedules: no join or explore events yet"]
    out = ["\nhyperparameter schedules (value @ elapsed h:mm:ss, from join and explore events)"]
    for member in sorted(schedule, key=_member_order):
        out.append(f"  {member}")
        for key, points in schedule[member].items():
            text = ", ".join(f"{fmt_value(v)} @{fmt_elapsed(t)}" for t, v, _ in points)
            out.extend(_wrap(f"    {short_key(key):<14} ", text, 19))
    return out


# ----- the plot -----


def figure_size(n_hyper: int) -> tuple[int, int]:
    """(width, height) in pixels of the PNG with `n_hyper` hyperparameter panels."""
    return WIDTH, TOP_PX + PANEL_PX * (len(ROLES) + min(n_hyper, MAX_PANELS))


def _time_unit(seconds: float) -> tuple[float, str]:
    if seconds >= 2 * 3600:
        return 3600.0, "hours"
    if seconds >= 120:
        return 60.0, "minutes"
    return 1.0, "seconds"


def searched_scales(run_dir: Path) -> tuple[dict[str, str], list[str]]:
    """key -> "log" | "linear" of the population's `population.ranges`, and a note when its
    config.yaml cannot be read."""
    from hns_train.agents.population import parse_ranges
    from hns_train.config import ConfigError, flat_settings, load_config

    path = run_dir / "config.yaml"
    if not path.is_file():
        return {}, []
    try:
        cfg = load_config(path)
        ranges = parse_ranges(cfg.population.ranges, flat_settings(cfg))
    except (ConfigError, ValueError, OSError) as e:
        return {}, [f"config.yaml: {str(e).splitlines()[0]}; axis scales guessed from values"]
    return {k: r.scale for k, r in ranges.items()}, []


def log_axis(key: str, values: list[float], scales: dict[str, str]) -> bool:
    if key in scales:
        return scales[key] == "log"
    positive = [v for v in values if v > 0]
    return len(positive) == len(values) > 0 and max(positive) / min(positive) >= LOG_SPAN


def plot_population(pop: Population, out: str | Path) -> Path:
    """Write the PNG (`figure_size` pixels) atomically and return its path."""
    schedule = hyper_schedule(pop.lineage)
    scales, _ = searched_scales(pop.run_dir)
    keys = list(dict.fromkeys(k for per in schedule.values() for k in per))
    for v in pop.members.values():  # members whose join event is not (yet) in the lineage
        if isinstance(v.get("hyper"), dict):
            keys.extend(k for k in v["hyper"] if k not in keys)
    keys = keys[:MAX_PANELS]
    members = sorted(
        set(pop.members)
        | set(schedule)
        | {m for r in pop.status for m in (r.get("members") or {}) if isinstance(m, str)},
        key=_member_order,
    )
    times = [_elapsed(r) for r in pop.status] + [_elapsed(e) for e in pop.lineage]
    t_end = max(times + [finite_number(pop.manifest.get("elapsed_s")) or 0.0])
    scale, unit = _time_unit(t_end)
    colours = {m: f"C{i % 10}" for i, m in enumerate(members)}

    width, height = figure_size(len(keys))
    fig, axes = panels(width, height, len(ROLES) + len(keys))
    for ax, role in zip(axes, ROLES, strict=False):
        mu_key, sigma_key = ROLE_MU[role]
        for m in members:
            xs, mus, sds = [], [], []
            for r in pop.status:
                rec = (r.get("members") or {}).get(m)
                mu = finite_number(rec.get(mu_key)) if isinstance(rec, dict) else None
                if mu is None:
                    continue
                xs.append(_elapsed(r) / scale)
                mus.append(mu)
                sds.append(finite_number(rec.get(sigma_key)) or 0.0)
            if xs:
                ax.plot(xs, mus, color=colours[m], linewidth=1.6, label=m)
                lo = [a - b for a, b in zip(mus, sds, strict=True)]
                hi = [a + b for a, b in zip(mus, sds, strict=True)]
                ax.fill_between(xs, lo, hi, color=colours[m], alpha=0.08, linewidth=0)
        ax.set_title(f"league rating as {role}: mu ± sigma", fontsize=10, loc="left")
    for ax, key in zip(axes[len(ROLES) :], keys, strict=True):
        series = {}
        for m in members:
            points = schedule.get(m, {}).get(key)
            if not points:
                hyper = pop.members.get(m, {}).get("hyper")
                if isinstance(hyper, dict) and finite_number(hyper.get(key)) is not None:
                    points = [(0.0, hyper[key], "manifest")]
            points = [(t, float(v)) for t, v, _ in points or [] if finite_number(v) is not None]
            if points:
                series[m] = points
        values = [v for pts in series.values() for _, v in pts]
        positive = [v for v in values if v > 0]
        log = bool(positive) and log_axis(key, values, scales)  # a log axis needs a value > 0
        floor = min(positive) / 10 if positive else 1.0
        note = ""
        for m, points in series.items():
            xs = [t / scale for t, _ in points] + [t_end / scale]
            ys = [v for _, v in points]
            ys.append(ys[-1])
            if log:
                if min(ys) <= 0:
                    note = f"; values <= 0 drawn at {floor:.3g} (marked v)"
                    low = [(x, floor) for x, y in zip(xs, ys, strict=True) if y <= 0]
                    x_low, y_low = zip(*low, strict=True)
                    ax.plot(x_low, y_low, "v", color=colours[m], markersize=7, clip_on=False)
                ys = [max(y, floor) for y in ys]
            ax.step(xs, ys, where="post", color=colours[m], linewidth=1.6, label=m)
        if log:
            ax.set_yscale("log")
        ax.set_title(f"{key} ({'log' if log else 'linear'} axis){note}", fontsize=10, loc="left")
    for ax in axes:
        for e in exploit_events(pop.lineage):
            ax.axvline(
                _elapsed(e) / scale,
                color=colours.get(e["member"], "0.4"),
                linestyle=":",
                linewidth=1.2,
            )
        ax.grid(True, alpha=0.3)
        if ax.get_legend_handles_labels()[0]:
            side_legend(ax)
    axes[-1].set_xlabel(f"elapsed ({unit})")
    axes[-1].set_xlim(0, max(t_end / scale, 1e-9))
    status = "" if pop.status else " (no status records yet)"
    fig.suptitle(
        f"population {pop.manifest.get('name', pop.run_dir.name)}{status}: ratings and "
        "hyperparameters per member; dotted: exploit events (the member's colour)",
        fontsize=11,
    )
    fig.tight_layout(rect=(0, 0, 1, 1 - TOP_PX / height / 2))
    return save_png(fig, out)


# ----- the view -----


def population_view(run_dir: str | Path) -> int:
    run_dir = Path(run_dir)
    pop = load_population(run_dir)
    pop.notes.extend(searched_scales(run_dir)[1])
    lines = member_lines(pop)
    board, problem = read_league(run_dir, lambda ratings: leaderboard_lines(ratings, pop.members))
    lines.extend(board or ["\n" + problem])
    lines.extend(lineage_lines(pop))
    lines.extend(schedule_lines(pop))
    if pop.notes:
        lines.append("\nnotes")
        lines.extend(f"  {n}" for n in pop.notes)
    print("\n".join(lines))
    path = plot_population(pop, run_dir / PLOT)
    print(f"\nplot: {path}")
    if pop.members:
        first = sorted(pop.members, key=_member_order)[0]
        print(f"a member's own run: python -m hns_train.eval --run {run_dir / 'members' / first}")
    return 0
