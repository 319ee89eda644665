"""Soak test: a quadrant run on the local launcher while a random worker is killed (SIGKILL)
every `--kill-every-s` seconds. Prints, per minute, the run's env frames and optimisation
steps, what was killed, and the resident memory of the whole process tree (controller and
every worker); ends with one `SOAK {json}` line.

    python bench/soak.py --minutes 30            # the figures in docs/benchmarks.md
    python bench/soak.py --minutes 3 pipeline.n_actors=1   # a short look

A healthy run keeps frames and versions rising every minute despite the kills (actors,
policy, eval and the trainer are each restarted; the trainer from its newest checkpoint) and
keeps the tree's memory flat.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from hns_train.config import CONFIG_DIR, load_config  # noqa: E402
from hns_train.distributed.controller import Controller  # noqa: E402

PAGE_KB = os.sysconf("SC_PAGE_SIZE") // 1024


def tree_rss_mb(root: int) -> tuple[float, int]:
    """(resident MB summed over `root` and all its descendants, number of processes)."""
    parent = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        parent[int(stat.parent.name)] = int(fields[1])
    tree, frontier = {root}, [root]
    while frontier:
        pid = frontier.pop()
        for child, ppid in parent.items():
            if ppid == pid and child not in tree:
                tree.add(child)
                frontier.append(child)
    kb = 0
    for pid in tree:
        try:
            kb += int(Path(f"/proc/{pid}/statm").read_text().split()[1]) * PAGE_KB
        except (OSError, IndexError, ValueError):
            continue
    return kb / 1024, len(tree)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--minutes", type=float, default=30.0)
    parser.add_argument("--kill-every-s", type=float, default=60.0)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--config", type=Path, default=CONFIG_DIR / "quadrant.yaml")
    parser.add_argument("overrides", nargs="*", help="section.key=value")
    args = parser.parse_args(argv)
    runs = tempfile.mkdtemp(prefix="hns-soak-")
    cfg = load_config(
        args.config,
        [
            f"runs_dir={runs}",
            "name=soak",
            "pipeline.launcher=local",
            "logging.progress=false",
            f"stop.minutes={args.minutes}",
            *args.overrides,
        ],
    )
    controller = Controller(cfg)
    thread = threading.Thread(target=controller.run, daemon=True)
    rng = random.Random(args.seed)
    start = time.monotonic()
    thread.start()
    minutes, kills = [], []
    next_kill = start + args.kill_every_s
    next_report = start + 60.0
    print(f"soak: {args.minutes:g} min, a kill every {args.kill_every_s:g} s, run in {runs}")
    print(" min   env frames  versions  restarts   tree RSS MB  procs  killed")
    killed_since = []
    while thread.is_alive():
        thread.join(1.0)
        now = time.monotonic()
        if now >= next_kill and thread.is_alive():
            next_kill += args.kill_every_s
            live = [
                (name, s.pid)
                for name, s in controller.workers.items()
                if s.pid and s.connected and not s.stopped
            ]
            if live:
                name, pid = rng.choice(live)
                try:
                    os.kill(pid, signal.SIGKILL)
                    kills.append({"t_s": round(now - start, 1), "worker": name})
                    killed_since.append(name)
                except ProcessLookupError:
                    pass
        if now >= next_report:
            next_report += 60.0
            rss, procs = tree_rss_mb(os.getpid())
            row = {
                "minute": len(minutes) + 1,
                "frames": controller.frames,
                "version": controller.version,
                "restarts": controller.restarts,
                "rss_mb": round(rss, 1),
                "procs": procs,
                "killed": killed_since,
            }
            minutes.append(row)
            killed_since = []
            print(
                f"{row['minute']:4d} {row['frames']:12,d} {row['version']:9d} "
                f"{row['restarts']:9d} {row['rss_mb']:13,.1f} {procs:6d}  "
                f"{','.join(row['killed']) or '-'}",
                flush=True,
            )
    summary = controller.summary()
    frames = [m["frames"] for m in minutes]
    steps = [m["version"] for m in minutes]
    rss = [m["rss_mb"] for m in minutes]
    stalled = sum(1 for a, b in zip([0, *frames], frames, strict=False) if b <= a)
    # Memory after the first minutes (start-up, imports, buffers filling) to the end.
    settle = min(5, max(len(rss) - 1, 0))
    out = {
        "minutes": args.minutes,
        "kill_every_s": args.kill_every_s,
        "kills": len(kills),
        "killed": sorted({k["worker"] for k in kills}),
        "restarts": summary.restarts,
        "reason": summary.reason,
        "frames": summary.frames,
        "versions": summary.version,
        "minutes_without_new_frames": stalled,
        "minutes_without_new_versions": sum(
            1 for a, b in zip([0, *steps], steps, strict=False) if b <= a
        ),
        "rss_mb_first": rss[0] if rss else None,
        "rss_mb_after_settle": rss[settle] if rss else None,
        "rss_mb_last": rss[-1] if rss else None,
        "rss_mb_max": max(rss) if rss else None,
        "error": controller.error,
    }
    print("SOAK " + json.dumps(out))
    return 1 if controller.error else 0


if __name__ == "__main__":
    sys.exit(main())
