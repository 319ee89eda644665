"""Evaluation worker: the latest policy against pool snapshots and fixed opponents, rated.

Loop: parameters arrive over the parameter stream (newest only) and are checked as they come
against the run's contract (`contract.check_params`: a bad message is dropped there); the newest
that passed is loaded into the model when a round starts, so versions that arrive between
rounds, most of them, are never loaded. As soon as the first ones are there, and then every
`eval.every_s` seconds (start to start), the worker plays one round of `eval.worlds` matches
on its own `HideAndSeekGame`: the latest policy against the next entry of a fixed schedule of
(opponent class, role the latest plays), cycling through `eval.opponents` x (hider, seeker) so
the roles alternate:
- `pool`: a snapshot drawn by the pool's own rule (`PolicyPool.candidate_probabilities` for the
  role it will play); skipped while the pool is empty;
- `random`, `noop`: the built-in teams; `scripted_seeker`: only ever plays the seekers.
Policies act without exploration noise when `eval.deterministic` (argmax of each head), the
paper's evaluation setting. Eval runs on the CPU with the worker's own torch threads, and costs
one round (W worlds x horizon steps) per `every_s`: by default 4 matches a minute.

Ratings (`hns_train.eval.ratings`, the pool's SQLite): every match updates openskill ratings of
both teams in their roles. The learning policy is rated as one entry, "latest", that follows it
from version to version: parameters change a little per optimisation step, so its skill carries
over, and openskill's dynamics term (tau) keeps its sigma from collapsing so the rating can
track improvement. Each match row stores the version it was played at (`latest_version`), the
opponent class and the replay path, so per-version results stay recoverable. Snapshots are
rated under their version number: the same numbers the pool's rating-prioritised sampler reads.
A snapshot's rating starts from the prior, not from "latest" at its version: the pool owns
snapshot entries and this worker never writes ratings other than through matches.

Replays: `eval.replay_share` of matches are recorded (a fractional share accumulates across
rounds; the first round always records one) into `run_dir/replays/eval_v<version>_<hiders>_vs_
<seekers>_<time>_e<worker>r<round>w<world>.npz`. With `eval.render_videos` the newest replay of
each round is rendered to the mp4 next to it by `python -m hns_train.eval REPLAY` in a child
process (headless EGL; never a fork of a process holding a GL context), at lower CPU priority
and on one rendering thread; at most one render runs at a time, and a newer replay replaces one
still waiting. A video costs about 1 s of start-up plus 15-50 ms per frame (81 frames of the
quadrant game: about 4.5 s of CPU), i.e. a few percent of one core at the default `every_s`.

Heartbeat counters: `matches` and `rounds` (since the previous heartbeat), `version` (the one
last evaluated), `rating` {role: [mu, sigma]} of "latest", `win_rate` {class: rate} over the
newest matches (`runview.win_rates`), `new_replays`, `new_videos` (paths since the previous
heartbeat) and, right after a round, `leaderboard` {columns, rows}.
"""

from __future__ import annotations

import contextlib
import logging
import math
import os
import signal
import subprocess
import tempfile
import time
from dataclasses import dataclass
from functools import partial
from pathlib import Path

import numpy as np

from hns_train.agents.policy import ActorCritic
from hns_train.agents.pool import LATEST, ROLES, PolicyPool, SnapshotCache
from hns_train.atomic_file import partial_files
from hns_train.distributed.contract import check_params, param_layout
from hns_train.distributed.policy import load_params
from hns_train.distributed.streams import ParamSubscriber
from hns_train.distributed.worker import Worker, WorkerSpec, pool_dir, start_module, wait_or_kill
from hns_train.envs.contract import observation_shapes
from hns_train.envs.game import HideAndSeekGame
from hns_train.eval.league import OTHER_ROLE
from hns_train.eval.matches import MatchResult, PolicyController
from hns_train.eval.policies import SEEKER_ONLY, label, named_controller
from hns_train.eval.ratings import Ratings
from hns_train.eval.recorder import play_recorded, team_metadata
from hns_train.eval.runview import win_rates
from hns_train.optional import available

log = logging.getLogger(__name__)
IDLE_WAIT_MS = 50  # longest wait for parameters between rounds (heartbeats stay on time)
RENDER_TERM_S = 5.0  # how long a stopped render may take to delete its partial file
RENDER_NICE = 10
LEADERBOARD_ROWS = 20
LEADERBOARD_COLUMNS = ["policy", "role", "mu", "sigma", "mu_minus_3sigma", "games"]


def schedule(classes: list[str]) -> list[tuple[str, str]]:
    """(opponent class, role the latest policy plays) in playing order; roles alternate."""
    out = []
    for cls in classes:
        for role in ROLES:
            if cls in SEEKER_ONLY and role == "seeker":
                continue  # the latest would have to hide from... a seeker-only controller
            out.append((cls, role))
    return out


class EvalWorker(Worker):
    def __init__(self, spec: WorkerSpec) -> None:
        super().__init__(spec)
        cfg, e = self.cfg, self.cfg.eval
        self.settings = e
        self.game_cfg = cfg.game_config()
        shapes = observation_shapes(self.game_cfg)
        self.latest = ActorCritic(shapes, cfg.agent.network, device="cpu").eval()
        self.opponent = ActorCritic(shapes, cfg.agent.network, device="cpu").eval()
        self.game = HideAndSeekGame(self.game_cfg, n_worlds=e.worlds, seed=self._seed(0))
        self.params = self.open_stream(
            ParamSubscriber,
            spec.endpoints["params"],
            check=partial(check_params, layout=param_layout(self.latest)),
            what=f"{self.name} parameters",
        )
        self.pool = self.resources.enter_context(PolicyPool(pool_dir(spec.run_dir), cfg.pool))
        self.snapshots = SnapshotCache(self.pool, size=2)
        self.ratings = self.resources.enter_context(Ratings(self.pool))
        self.replay_dir = Path(spec.run_dir) / "replays"
        self.plan = schedule(e.opponent_classes())
        self.rng = np.random.default_rng([cfg.seed, 4, spec.index])
        self.loaded = -1  # version of the parameters in `latest` (-1: none yet)
        self._arrived = None  # the newest checked parameter message not loaded yet
        self.version = -1  # version last evaluated
        self.rounds = 0
        self._next = 0  # index into self.plan
        self._last_round = -math.inf
        self._replay_credit = 0.0  # matches owed a recording (the first round records one)
        self._render: VideoJob | None = None
        self.resources.callback(self._stop_render)  # closed without a clean stop: no child left
        self._render_next: Path | None = None
        self._since_beat = _since_beat()  # what the next heartbeat reports as new
        self._rating: dict[str, list[float]] = {}
        self._win_rate: dict[str, float] = {}
        self.round_s = 0.0

    def _seed(self, round_index: int) -> int:
        # disjoint from actors' seeds and between eval workers; one seed per world of a round
        base = (int(self.cfg.seed) * 1_000 + self.spec.index + 1) * 1_000_000_007
        return base + round_index * self.settings.worlds

    # ------------------------------------------------------------------ loop
    def step(self) -> bool:
        due = time.monotonic() - self._last_round >= self.settings.every_s
        wait = 0 if (due and self._ready()) else min(self.poll_ms * 10, IDLE_WAIT_MS)
        message = self.params.poll_latest(timeout_ms=wait)
        if message is not None:
            self._arrived = message  # loaded when a round starts (`play_round`)
        self._poll_render()
        if not self._ready() or not due or self.stopping:
            return False
        self.play_round()
        return True

    def _ready(self) -> bool:
        return self.loaded >= 0 or self._arrived is not None

    def _next_opponent(self) -> tuple[str, str, object] | None:
        """(class, latest's role, opponent id) of the next playable schedule entry."""
        for _ in range(len(self.plan)):
            cls, role = self.plan[self._next % len(self.plan)]
            self._next += 1
            if cls != "pool":
                return cls, role, cls
            versions, probs = self.pool.candidate_probabilities(OTHER_ROLE[role])
            if len(versions):
                return cls, role, int(self.rng.choice(versions, p=probs))
        return None

    def play_round(self) -> list:
        """One round of `worlds` matches against the next opponent; returns the MatchResults."""
        start = time.monotonic()
        self._last_round = start
        if self._arrived is not None:
            self.loaded = load_params(self._arrived, self.latest, "cpu")
            self._arrived = None
        picked = self._next_opponent()
        if picked is None:
            return []
        cls, role, opponent = picked
        version = self.loaded
        det = self.settings.deterministic
        seed = self._seed(self.rounds)
        # (controller, replay metadata) of each role's team
        teams = {role: (PolicyController(self.latest, LATEST, det), team_metadata(LATEST, version))}
        if cls == "pool":
            self.opponent.load_state_dict(self.snapshots.get(opponent))
            theirs = PolicyController(self.opponent, opponent, deterministic=det)
            teams[OTHER_ROLE[role]] = (theirs, team_metadata("snapshot", int(opponent)))
        else:
            theirs = named_controller(cls, OTHER_ROLE[role], seed, self.game_cfg.action_bins)
            teams[OTHER_ROLE[role]] = (theirs, team_metadata(cls))
        (hiders, hider_meta), (seekers, seeker_meta) = teams["hider"], teams["seeker"]
        meta = {
            "hiders": hider_meta,
            "seekers": seeker_meta,
            "run": self.cfg.name,
            "kind": "eval",
            "latest_version": version,
            "opponent_class": cls,
            "deterministic": det,
        }
        W = self.settings.worlds
        n_rec = 0
        if self.settings.replay_share > 0:
            self._replay_credit += self.settings.replay_share * W
            n_rec = min(W, max(int(self._replay_credit), 1 if self.rounds == 0 else 0))
            self._replay_credit -= n_rec  # the first round's extra replay is paid back later
        prefix = (
            f"eval_v{version:06d}_{label(hiders.policy_id)}_vs_{label(seekers.policy_id)}_"
            f"{time.strftime('%Y%m%d-%H%M%S')}_e{self.spec.index}r{self.rounds}"
        )
        names = [self.replay_dir / f"{prefix}w{w}.npz" for w in range(n_rec)]
        results, paths = play_recorded(self.game, hiders, seekers, W, seed, meta, names)
        replays = [None if p is None else str(p) for p in paths]
        self._since_beat["new_replays"] += replays[:n_rec]
        if names and self.settings.render_videos and available("imageio_ffmpeg"):
            self._render_next = names[-1]
        rated = [
            _Rated(**vars(r), latest_version=version, opponent_class=cls, replay=p)
            for r, p in zip(results, replays, strict=True)
        ]
        self.ratings.record(rated)
        self.version = version
        self.rounds += 1
        self._since_beat["matches"] += len(results)
        self._since_beat["rounds"] += 1
        self._refresh_summary()
        self._poll_render()
        self.round_s = time.monotonic() - start
        return results

    def _refresh_summary(self) -> None:
        for role in ROLES:
            r = self.ratings.get(LATEST, role)
            if r.games:
                self._rating[role] = [r.mu, r.sigma]
        self._win_rate = {
            cls: rec.all.rate for cls, rec in win_rates(self.ratings).items() if rec.all.games
        }
        board = self.ratings.leaderboard()[:LEADERBOARD_ROWS]
        self._since_beat["leaderboard"] = {
            "columns": LEADERBOARD_COLUMNS,
            "rows": [[r.policy, r.role, r.mu, r.sigma, r.conservative, r.games] for r in board],
        }

    # ------------------------------------------------------------------ videos
    def _poll_render(self) -> None:
        if self._render is not None:
            problem = self._render.outcome()
            if problem is None:  # still rendering
                return
            if problem:
                log.warning("rendering %s failed: %s", self._render.out, problem)
            else:
                self._since_beat["new_videos"].append(str(self._render.out))
            self._render = None
        if self._render_next is not None:
            replay, self._render_next = self._render_next, None
            self._render = VideoJob(replay)

    # ------------------------------------------------------------------ worker protocol
    def counters(self) -> dict:
        out = {
            "version": self.version,
            "round_s": self.round_s,
            "rating": dict(self._rating),
            "win_rate": dict(self._win_rate),
            **self._since_beat,
        }
        self._since_beat = _since_beat()
        return out

    def shutdown(self) -> None:
        self._render_next = None  # a stop starts no video; the replay is there to render later
        timeout_s = self.settings.stop_render_wait_s
        if self._render is not None:
            try:
                self._render.proc.wait(timeout_s)
            except subprocess.TimeoutExpired:
                log.warning(
                    "stopping: video %s unfinished after %.0f s", self._render.out, timeout_s
                )
                self._stop_render()
        self._poll_render()  # a video finished now is reported by the last heartbeat

    def _stop_render(self) -> None:
        if self._render is not None:
            self._render.kill()
            self._render = None


def _since_beat() -> dict:
    """The counters an eval heartbeat reports as new since the previous one (and, after a round,
    its `leaderboard`)."""
    return {"matches": 0, "rounds": 0, "new_replays": [], "new_videos": []}


@dataclass
class _Rated(MatchResult):
    """A MatchResult with the fields of its row in the ratings' match history."""

    latest_version: int = -1
    opponent_class: str = ""
    replay: str | None = None


class VideoJob:
    """`python -m hns_train.eval REPLAY --out REPLAY.mp4 --quiet` in a lower-priority child.

    A new interpreter (not a fork), so no GL context or socket of this process is shared."""

    def __init__(self, replay: Path) -> None:
        self.replay, self.out = Path(replay), Path(replay).with_suffix(".mp4")
        env = dict(os.environ)
        env.setdefault("MUJOCO_GL", "egl")
        env.setdefault("LP_NUM_THREADS", "1")  # software GL on one thread: training keeps the rest
        # stderr goes to a file: a pipe nobody reads until the end could fill up and stall it
        self._log = tempfile.TemporaryFile()  # noqa: SIM115 (closed in _close)
        # a worker killed with its controller must not leave a render behind (SIGTERM: the
        # render deletes its partial video)
        self.proc = start_module(
            ["hns_train.eval", str(self.replay), "--out", str(self.out), "--quiet"],
            signal.SIGTERM,
            env,
            stdout=subprocess.DEVNULL,
            stderr=self._log,
        )
        with contextlib.suppress(AttributeError, OSError):  # no such call, or the child is gone
            os.setpriority(os.PRIO_PROCESS, self.proc.pid, RENDER_NICE)
        self._error = ""

    def outcome(self) -> str | None:
        """None while it renders; then "" when the video was written, else what went wrong."""
        if self.proc.poll() is None:
            return None
        self._close()
        if self.proc.returncode == 0 and self.out.is_file():
            return ""
        return f"exit {self.proc.returncode}: {self._error[-500:]}"

    def kill(self) -> None:
        """Stop the render: SIGTERM first, on which it deletes its partial video file; one
        that has not exited after `RENDER_TERM_S` is killed, and its partial file deleted here."""
        if self.proc.poll() is None:
            self.proc.terminate()
        if not wait_or_kill(self.proc, RENDER_TERM_S):
            for partial in partial_files(self.out):
                partial.unlink(missing_ok=True)
        self._close()

    def _close(self) -> None:
        if not self._log.closed:
            self._log.seek(0)
            self._error = self._log.read().decode(errors="replace")
            self._log.close()
