"""How close the suite's numerical-equality tests come to their tolerances, on this CPU's default
code paths and with the AVX2 ones forced, on 1 and on 2 torch threads.

Runs the tests marked `numerics` once per combination with `HNS_TOLERANCE_LOG` set
(tests/tolerances.py), then prints, per check, the largest difference seen in each run and the
largest share of its tolerance that any run used (under 1 passes; the margin is its inverse). The
last line, `TOLERANCES {json}`, holds the same for scripts.

    python bench/tolerances.py [--paths default avx2] [--threads 1 2] [-- PYTEST_ARGS]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from tests.code_paths import CODE_PATHS, environment  # noqa: E402
from tests.tolerances import LOG_ENV  # noqa: E402


def cpu_name() -> str:
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return platform.processor() or "unknown"


def run(paths: str, threads: int, log: Path, pytest_args: list[str]) -> tuple[float, bool]:
    env = {**os.environ, **environment(paths), LOG_ENV: str(log), "HNS_TEST_THREADS": str(threads)}
    start = time.perf_counter()
    cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-m", "numerics"]
    done = subprocess.run([*cmd, *pytest_args], cwd=ROOT, env=env)
    if done.returncode != 0:  # the other runs still say how close the passing checks came
        print(f"FAILED: the numerical tests with {paths} code paths on {threads} thread(s)")
    return time.perf_counter() - start, done.returncode == 0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--paths", nargs="+", choices=CODE_PATHS, default=list(CODE_PATHS))
    parser.add_argument("--threads", nargs="+", type=int, default=[1, 2])
    parser.add_argument("pytest_args", nargs="*", help="more pytest arguments (after --)")
    args = parser.parse_args()

    runs = [(p, t) for p in args.paths for t in args.threads]
    worst: dict[tuple[str, str], dict] = defaultdict(dict)  # (test, check) -> run -> record
    failed = []
    with tempfile.TemporaryDirectory() as tmp:
        for paths, threads in runs:
            log = Path(tmp) / f"{paths}-{threads}.jsonl"
            log.touch()
            seconds, ok = run(paths, threads, log, args.pytest_args)
            failed += [] if ok else [f"{paths}/{threads}"]
            print(f"{paths} code paths, {threads} thread(s): {seconds:.0f} s", flush=True)
            for line in log.read_text().splitlines():
                rec = json.loads(line)
                key, name = (rec["test"], rec["check"]), f"{paths}/{threads}"
                if rec["share"] >= worst[key].get(name, {"share": -1.0})["share"]:
                    worst[key][name] = rec

    names = [f"{p}/{t}" for p, t in runs]
    print(f"\n{cpu_name()}; largest |difference| per run, and the largest share of the tolerance")
    print(f"{'test :: check':70s} " + " ".join(f"{n:>12s}" for n in names) + "   share")
    summary = []
    for (test, check), by_run in sorted(worst.items()):
        share = max(r["share"] for r in by_run.values())
        label = f"{test.split('::')[-1][:40]} :: {check}"[:70]
        cells = " ".join(
            f"{by_run[n]['observed']:12.3g}" if n in by_run else f"{'-':>12s}" for n in names
        )
        print(f"{label:70s} {cells}   {share:.3f}")
        summary.append({"test": test, "check": check, "share": share,
                        "observed": {n: by_run[n]["observed"] for n in by_run}})  # fmt: skip
    top = max(summary, key=lambda r: r["share"]) if summary else None
    out = {
        "cpu": cpu_name(),
        "runs": names,
        "failed_runs": failed,
        "checks": len(summary),
        "largest_share": top["share"] if top else 0.0,
        "largest_share_check": f"{top['test']} :: {top['check']}" if top else "",
        "per_check": summary,
    }
    print("TOLERANCES " + json.dumps(out))


if __name__ == "__main__":
    main()
