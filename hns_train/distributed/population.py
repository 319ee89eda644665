"""The population controller: a tournament of learners, each an ordinary run, in one run
directory (after ElegantRL-podracer's tournament-based ensemble and DeepMind's PBT).

`python -m hns_train.train --config C population.members=N` with N > 1 runs this instead of a
single `Controller`. It owns `runs/<name>/` (layout below) and, each tick:
- keeps every member's run alive: member `m<i>` is `python -m hns_train.train` in its own
  process group on `members/m<i>/`, with its own hyperparameters; a member whose process ends
  without being asked restarts alone from its newest checkpoint (`--resume`) while the others
  train on (at most `population.max_restarts` times);
- plays the league (`hns_train.eval.league`): one round every `league_every_s`, members in turn,
  roles in turn, against another member's latest policy, a hall-of-fame entry or an anchor;
- reads each member's newest checkpoint as soon as it is written; every `sync_every_s`, makes
  hall-of-fame candidates (one per `hof_every` versions of a member; the best `hall_of_fame`
  rated entries are kept, new ones until they have `ready_games` games; the newest, where the
  league does not play the hall of fame) and writes the guests of every member's pool: the
  other members' latest (cross) and the hall of fame (past), with PFSP weights;
- exploit and explore (`hns_train.agents.population.choose_exploits`): the member is stopped (its
  run writes a final checkpoint), the source's newest checkpoint becomes its newest checkpoint
  (every tensor as the source wrote it; counters of frames and episodes stay the member's own),
  its hyperparameters are perturbed, it takes over the source's ratings and restarts;
- takes `requests/*.json` (`python -m hns_train.train population add|retire RUN_DIR ...`): a new
  member joins with hyperparameters drawn in the ranges, a retired one stops for good;
- writes `population.json` (the manifest: members, hyperparameters, hall of fame, counters, RNG)
  and a `population.jsonl` status record every `record_every_s`, and every event to
  `lineage.jsonl`.
`--resume runs/<name>` reads the manifest (refused, naming the fields, when one it needs is
missing) and restarts every running member from its checkpoint; a league database that lost the
games the manifest counts is said (a warning and a `league_reset` event). One population owns its
run directory (`run_lock.py`); a population with no running member stops; no member folder is
ever deleted by a start or an exploit: an old one is moved aside (`move_aside`).
The population stops at `stop.frames` (all members' frames), `stop.minutes` or `stop.versions`
(the most advanced member), or on Ctrl-C: every member is asked to stop and checkpoints.

Layout: `config.yaml`, `population.json`, `population.jsonl`, `lineage.jsonl`, `requests/`,
`league/` (league ratings, hall-of-fame and anchor weights), `members/m<i>/` (ordinary runs, each
with its config, checkpoints, pool, metrics and wandb run in the population's wandb group) and
`members/m<i>.log` (the member's output).

On Ray, each member's run places its own workers (one placement group per member) on the
cluster named by `pipeline.ray_address`; the members' controllers run beside this one.
"""

from __future__ import annotations

import json
import logging
import signal
import subprocess
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

import numpy as np
import torch
import yaml

from hns_train.agents.checkpoint import (
    CheckpointDir,
    NoRoomError,
    atomic_write_bytes,
    load_checkpoint,
    save_checkpoint,
)
from hns_train.agents.pool import PolicyPool
from hns_train.agents.population import (
    ANCHORS,
    LEAGUE,
    LINEAGE,
    MANIFEST,
    MANIFEST_FORMAT,
    STATUS,
    Member,
    choose_exploits,
    load_manifest,
    members_from_manifest,
    parse_overrides,
    parse_ranges,
    perturb,
    pfsp_weight,
    sample_hyper,
    save_manifest,
)
from hns_train.config import RunConfig, apply_override, config_from_dict, flat_settings, save_config
from hns_train.distributed.controller import Stoppable, stop_signals
from hns_train.distributed.reporting import ProgressBar
from hns_train.distributed.wandb_logger import open_run
from hns_train.distributed.worker import pool_dir, start_module, wait_or_kill
from hns_train.eval.league import League
from hns_train.eval.population_view import best_scored, lineage_rows, member_scores
from hns_train.jsonl import append_record, read_new

log = logging.getLogger(__name__)
TICK_S = 0.5
STOP_WAIT_S = 120.0  # a member asked to stop writes its final checkpoint within this
REQUESTS = "requests"


class MemberRun:
    """A member's run directory and process."""

    def __init__(self, root: Path, member: Member) -> None:
        self.member = member
        self.dir = root / "members" / member.name
        self.log_path = root / "members" / f"{member.name}.log"
        self.config_path = root / "members" / f"{member.name}.yaml"  # a new run starts from it
        self.process: subprocess.Popen | None = None
        self.stopping = False
        self._metrics_offset = 0
        self.checkpoint_step: int | None = None  # newest checkpoint read
        self.state: dict[str, Any] | None = None  # its model weights at that checkpoint
        self.hof_version = -1  # version of its newest hall-of-fame candidate

    @property
    def name(self) -> str:
        return self.member.name

    def start(self) -> None:
        resume = CheckpointDir(self.dir / "checkpoints").steps() if self.dir.is_dir() else []
        if resume:
            args = ["--resume", str(self.dir)]
        else:
            if self.dir.exists():  # started before but never checkpointed: begin again
                move_aside(self.dir)
            args = ["--config", str(self.config_path)]
        out = self.log_path.open("a")
        # Linux sends the member SIGINT (a clean stop with a final checkpoint) if the population
        # controller dies without stopping it
        self.process = start_module(
            ["hns_train.train", *args],
            signal.SIGINT,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # Ctrl-C reaches the population, which stops members in order
        )
        out.close()
        self.stopping = False

    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def ask_to_stop(self) -> None:
        if self.alive():
            self.stopping = True
            self.process.send_signal(signal.SIGINT)

    def wait_stopped(self, timeout_s: float = STOP_WAIT_S) -> None:
        if self.process is not None and not wait_or_kill(self.process, timeout_s):
            log.warning("member %s did not stop in %.0f s; killed", self.name, timeout_s)

    def read_progress(self) -> None:
        """Counters from the newest records of its metrics.jsonl (read incrementally)."""
        path = self.dir / "metrics.jsonl"
        records, self._metrics_offset = read_new(path, self._metrics_offset)
        for record in records:
            if record.get("kind") in ("train", "resume"):
                m = self.member
                m.version = int(record.get("version", m.version))
                m.frames = int(record.get("frames", m.frames))
                m.episodes = int(record.get("episodes", m.episodes))

    def refresh_state(self) -> bool:
        """Load its newest checkpoint's weights if it wrote a new one; True when it did."""
        if not (self.dir / "checkpoints").is_dir():  # not before its run made it
            return False
        folder = CheckpointDir(self.dir / "checkpoints")
        steps = folder.steps()
        if not steps or steps[-1] == self.checkpoint_step:
            return False
        latest = folder.latest()
        if latest is None:
            return False
        self.checkpoint_step = steps[-1]
        self.state = latest.state["ppo"]["model"]
        self.member.version = max(self.member.version, int(latest.state["ppo"]["version"]))
        return True


class PopulationController(Stoppable):
    def __init__(self, cfg: RunConfig, resume: bool = False) -> None:
        self.cfg = cfg
        self.p = cfg.population
        self.run_dir = cfg.run_dir
        self._claim_and_open(resume)  # what it holds is let go of by `close`

    def _open(self, resume: bool) -> None:
        """The start, once the run directory is this population's: its folders and config, the
        manifest of a resumed one, the league and the wandb run; each thing held is handed to
        `_held`."""
        cfg = self.cfg
        for sub in ("members", LEAGUE, REQUESTS):
            (self.run_dir / sub).mkdir(parents=True, exist_ok=True)
        save_config(cfg, self.run_dir / "config.yaml")
        self.ranges = parse_ranges(self.p.ranges, flat_settings(cfg))
        self.fixed = parse_overrides(self.p.overrides, self.p.members)
        self.rng = np.random.default_rng([cfg.seed, 7])
        self.members: dict[str, Member] = {}
        self.runs: dict[str, MemberRun] = {}
        self.hall_of_fame: list[dict[str, Any]] = []
        self.counters = {"exploits": 0, "restarts": 0}
        self.next_index = 0
        self.ray_address, self._owns_ray = "", False
        self._fresh: set[str] = set()  # members with new weights since the last sync
        self._manifest_games: dict[str, int] = {}
        self._league_reset = 0  # rated games the league database lost (see _check_league)
        if resume:
            self._restore()
        # The league plays on this process's one thread: members own the cores, and torch's
        # spinning OpenMP threads on a busy host made a round 5x slower (3.1 s against 0.6 s).
        torch.set_num_threads(1)
        self.league = League(self.run_dir / LEAGUE, cfg, seed=cfg.seed)
        self._held.callback(self.league.ratings.close)
        if resume:
            self._check_league()
        # The population's own wandb run, in the group of its members' runs, and the reference
        # run once, here, before any member starts (members find it and write none):
        # concurrent members would race for its one run id.
        self.wandb = open_run(
            cfg.logging,
            self.run_dir,
            cfg.to_dict(),
            resume=resume,
            name=f"{cfg.name}/population",
            group=cfg.name,
        )
        self._events: list[dict[str, Any]] = []
        if resume:
            self.event("resume", "")
        if self._league_reset:
            self.event("league_reset", "", games_lost=self._league_reset)
        self._turn = 0
        self._last = {"league": -np.inf, "sync": -np.inf, "record": -np.inf}

    # ------------------------------------------------------------------ members
    def member_config(self, member: Member) -> RunConfig:
        """The member's run config: the population's, with its own name, seed and settings."""
        data = self.cfg.to_dict()
        data.update(
            name=member.name,
            runs_dir=str(self.run_dir / "members"),
            seed=member.seed,
            population={},
        )
        data["logging"] = {**data["logging"], "group": self.cfg.name, "progress": False}
        data["stop"] = {}  # the population decides when every member stops
        data["eval"] = {**data["eval"], "n_workers": self.p.member_eval_workers}
        pool = data["pool"]
        pool.update(p_cross=self.p.p_cross, p_past=self.p.p_past)
        pipeline = data["pipeline"]  # guests and the league read checkpoints this often
        if self.ray_address:  # members place their workers on the population's Ray
            pipeline["ray_address"] = self.ray_address
        every = pipeline["checkpoint_every_s"]
        pipeline["checkpoint_every_s"] = min(every or np.inf, self.p.sync_every_s)
        cfg = config_from_dict(data, f"member {member.name}")
        for key, value in member.hyper.items():
            cfg = apply_override(cfg, f"{key}={value!r}")
        if member.exploits == 0:  # fixed settings hold until the member copies another
            for item in self.fixed.get(member.index, []):
                cfg = apply_override(cfg, item)
        return cfg.check(f"member {member.name}")

    def join(self) -> Member:
        index = self.next_index
        self.next_index += 1
        if index == 0:  # member 0 keeps the base settings: a population of 1 is a plain run
            base = flat_settings(self.cfg)
            hyper = {k: base[k] for k in self.ranges}
        else:
            hyper = sample_hyper(self.ranges, self.rng)
        fixed = self.fixed.get(index, [])  # settings that hold until its first exploit
        for item in fixed:  # a fixed searched setting is what the member trains with
            key, _, value = item.partition("=")
            if key in self.ranges:
                hyper = {**hyper, key: yaml.safe_load(value)}
        member = Member(index=index, seed=self.cfg.seed + index, hyper=hyper)
        self.members[member.name] = member
        self.event("join", member.name, hyper=hyper, fixed=fixed)
        return member

    def event(self, kind: str, member: str, **fields: Any) -> None:
        """One lineage event: a line in lineage.jsonl (`time`, `elapsed_s`, `event`, `member`
        and the event's own fields), and the lineage table in wandb, in the rows the eval view
        prints (an explore joins the exploit before it)."""
        record = {
            "time": time.time(),
            "elapsed_s": self.elapsed_s(),
            "event": kind,
            "member": member,
            **fields,
        }
        append_record(self.run_dir / LINEAGE, record)
        self._events.append(record)
        rows = [[t / 3600, *row] for t, *row in lineage_rows(self._events)]
        self.wandb.log_table("population/lineage", ["hours", "member", "event", "details"], rows)

    def launch(self, member: Member) -> None:
        cfg = self.member_config(member)
        run = self.runs.get(member.name) or MemberRun(self.run_dir, member)
        run.member = member
        self.runs[member.name] = run
        save_config(cfg, run.config_path)
        if (run.dir / "config.yaml").is_file():
            save_config(cfg, run.dir / "config.yaml")  # a resume reads the member's own copy
        run.start()

    def retire(self, name: str) -> None:
        member = self.members.get(name)
        if member is None or member.status != "running":
            raise ValueError(f"no running member {name!r}; running: {self.running()}")
        run = self.runs[name]
        run.ask_to_stop()
        run.wait_stopped()
        member.status = "retired"
        for other in self.running():
            with PolicyPool(pool_dir(self.runs[other].dir)) as pool:
                pool.remove_guest(name)
        self.event("retire", name)

    def running(self) -> list[str]:
        return [n for n, m in self.members.items() if m.status == "running"]

    # ------------------------------------------------------------------ run
    def run(self) -> dict[str, Any]:
        desc, progress = f"population {self.cfg.name}", self.cfg.logging.progress
        bar = ProgressBar(self.cfg, desc, disable=not progress)
        with stop_signals(self.request_stop):
            try:
                self.start_members()
                while not self.stop_reason:
                    self.tick()
                    bar.show(self.total_frames(), self._postfix())
                    time.sleep(TICK_S)
            except Exception as err:  # a controller bug must still stop every member
                self._fail(err)
                raise
            finally:
                bar.close()
                self.shutdown()
        summary = self.summary()
        self.close()
        return summary

    def close(self) -> None:
        """The wandb run (after `shutdown`), the league database and the run directory."""
        self.wandb.finish(1 if self.error else 0)
        self._held.close()

    def start_ray(self) -> None:
        """On `pipeline.launcher=ray` without `ray_address`: one local Ray for every member (each
        member's run still reserves its own placement groups on it)."""
        p = self.cfg.pipeline
        if p.launcher != "ray" or p.ray_address or self.ray_address:
            return
        from hns_train.distributed.ray_launcher import start_ray

        ray, self._owns_ray = start_ray(p)
        self.ray_address = ray.get_runtime_context().gcs_address

    def start_members(self) -> None:
        """Every member joins (a new population) and its run starts (or resumes)."""
        self.start_ray()
        if not self.members:
            for _ in range(self.p.members):
                self.join()
        for name in self.running():
            self.launch(self.members[name])

    def shutdown(self) -> None:
        """Every member stops with a final checkpoint; the manifest records the end."""
        runs = [self.runs[n] for n in self.running() if n in self.runs]
        for run in runs:  # all asked first: they write their final checkpoints together
            run.ask_to_stop()
        for run in runs:
            run.wait_stopped()
            run.read_progress()
        self.save()
        if self._owns_ray:
            import ray

            ray.shutdown()
            self._owns_ray, self.ray_address = False, ""

    def tick(self) -> None:
        now = time.monotonic()
        self._watch_members()
        self._take_requests()
        for name in self.running():
            run = self.runs[name]
            run.read_progress()
            if run.refresh_state():  # a directory listing; a checkpoint is read only when new
                self._fresh.add(name)
        if now - self._last["sync"] >= self.p.sync_every_s:
            self._last["sync"] = now
            self.sync()
        if now - self._last["league"] >= self.p.league_every_s:
            self._last["league"] = now
            self.play_league_round()
            self.exploit_and_explore()
        if now - self._last["record"] >= self.p.record_every_s:
            self._last["record"] = now
            self.record()
            self.save()
        self._check_limits()

    def _watch_members(self) -> None:
        for name in self.running():
            run = self.runs[name]
            if run.alive() or run.stopping:
                continue
            code = run.process.returncode if run.process is not None else None
            member = self.members[name]
            if member.restarts >= self.p.max_restarts:
                self.error = f"member {name} ended {member.restarts + 1} times (last exit {code})"
                self.request_stop(f"error: {self.error}; see {run.log_path}")
                return
            member.restarts += 1
            self.counters["restarts"] += 1
            reason = f"its run ended with exit code {code}"
            log.warning("member %s: %s; restarting it from its newest checkpoint", name, reason)
            self.event("restart", name, reason=reason)
            self.launch(member)

    def _take_requests(self) -> None:
        for path in sorted((self.run_dir / REQUESTS).glob("*.json")):
            try:
                request = json.loads(path.read_text())
                action = request.get("action")
                if action == "add":
                    self.launch(self.join())
                elif action == "retire":
                    self.retire(str(request.get("member")))
                else:
                    raise ValueError(f"action {action!r} is not 'add' or 'retire'")
                path.unlink()
                self.save()  # the next request may name the member that just joined
            except (ValueError, json.JSONDecodeError, AttributeError) as err:
                log.warning("population request %s refused: %s", path.name, err)
                path.rename(path.with_suffix(".refused"))

    # ------------------------------------------------------------------ league
    def _opponents(self, name: str) -> list[str]:
        kinds, out = self.p.league_opponents, []
        if "members" in kinds:
            out += [m for m in self.running() if m != name and self.runs[m].state is not None]
        if "hall_of_fame" in kinds:
            out += [e["policy"] for e in self.hall_of_fame if e["member"] != name]
        out += [a for a in ANCHORS if a in kinds]
        return out

    def _weights(self, policy: str) -> dict[str, Any] | None:
        if policy in self.runs:
            return self.runs[policy].state
        for entry in self.hall_of_fame:
            if entry["policy"] == policy:
                return load_checkpoint(self.run_dir / entry["file"]).state["model"]
        return None

    def play_league_round(self) -> None:
        """One round: the next member in turn, in the next role, against a drawn opponent."""
        ready = [m for m in self.running() if self.runs[m].state is not None]
        if not ready:
            return
        roles = self.p.league_roles
        member = ready[self._turn % len(ready)]
        role = roles[(self._turn // len(ready)) % len(roles)]
        self._turn += 1
        opponents = self._opponents(member)
        if not opponents:
            return
        opponent = opponents[int(self.rng.integers(len(opponents)))]
        self.league.play(member, role, self.runs[member].state, opponent, self._weights(opponent))

    def exploit_and_explore(self) -> None:
        roles = self.p.league_roles
        running = [m for m in self.running() if self.runs[m].state is not None]
        strength = {m: self.league.strength(m, roles) for m in running}
        games = {m: self.league.ratings.games(m) for m in running}
        ready = [
            m
            for m in running
            if self.members[m].ready(games[m], self.p.ready_versions, self.p.ready_games)
        ]
        decisions = choose_exploits(
            strength, ready, lambda a, b: self.league.beats(a, b, roles), self.p
        )
        for decision in decisions:
            self.exploit(decision.member, decision.source, decision.win_probability)

    def exploit(self, name: str, source: str, win_probability: float) -> None:
        """`name` becomes a copy of `source` (whole learner state), then explores."""
        member, run = self.members[name], self.runs[name]
        latest = CheckpointDir(self.runs[source].dir / "checkpoints").latest()
        if latest is None:
            return
        run.ask_to_stop()
        run.wait_stopped()
        own = CheckpointDir(run.dir / "checkpoints")
        mine = own.latest()
        kept = mine.meta.get("counters", {}) if mine is not None else {}
        counters = dict(latest.meta.get("counters", {}))
        # frames and episodes stay this member's own
        counters.update({k: kept[k] for k in ("frames", "episodes", "wall_clock_s") if k in kept})
        replaced = run.dir / "replaced"
        if replaced.exists():  # an earlier exploit's (or one cut short): kept beside
            move_aside(replaced)
        replaced.mkdir()
        for step in own.steps():
            own.path_for(step).replace(replaced / own.path_for(step).name)
        version = int(latest.state["ppo"]["version"])
        before = dict(member.hyper)
        hyper, how = perturb(
            self.members[source].hyper,
            self.ranges,
            self.rng,
            self.p.perturb_factors,
            self.p.resample_probability,
        )
        member.hyper = hyper
        meta = {**latest.meta, "counters": {**counters, "version": version}}
        meta["config"] = self.member_config(member).to_dict()
        try:  # the one save path: room for this copy and the next checkpoint, or none written
            own.save(version, latest.state, meta)
        except NoRoomError:  # the member keeps its own; the population stops, saying why
            member.hyper = before
            for path in replaced.iterdir():
                path.replace(own.folder / path.name)
            raise
        self.league.ratings.copy_rating(source, name)
        member.version = version
        member.changed_at_version = version
        member.changed_at_games = self.league.ratings.games(name)
        member.exploits += 1
        self.counters["exploits"] += 1
        run.checkpoint_step, run.state = None, None
        self.event(
            "exploit",
            name,
            source=source,
            source_version=version,
            win_probability=win_probability,
            version=version,
        )
        self.event("explore", name, hyper_before=before, hyper_after=hyper, how=how)
        log.warning(
            "member %s copied %s (p_win %.2f) at version %d", name, source, win_probability, version
        )
        self.launch(member)
        self.save()

    # ------------------------------------------------------------------ guests
    def sync(self) -> None:
        """Newest member weights; hall-of-fame candidates; every member's guests."""
        changed, self._fresh = self._fresh & set(self.running()), set()
        for name in sorted(changed):
            run, member = self.runs[name], self.members[name]
            if member.version - run.hof_version >= self.p.hof_every:
                self._add_to_hall_of_fame(name, member.version, run.state)
                run.hof_version = member.version
        self._trim_hall_of_fame()
        if self.p.p_cross + self.p.p_past == 0:
            return
        roles = self.p.league_roles
        everyone = [(m, "cross") for m in self.running() if self.runs[m].state is not None]
        everyone += [(e["policy"], "past") for e in self.hall_of_fame]
        for name in self.running():
            run = self.runs[name]
            if not (run.dir / "pool").is_dir():
                continue
            guests = {policy: kind for policy, kind in everyone if policy != name}
            with PolicyPool(pool_dir(run.dir)) as pool:
                present = {g.name for g in pool.guests()}
                for policy, kind in guests.items():
                    w = self._pfsp(name, policy, roles)
                    if policy in present and policy not in changed:
                        pool.set_guest_weights(policy, w, w)
                    else:
                        pool.add_guest(policy, kind, self._weights(policy), w, w)
                for gone in present - guests.keys():
                    pool.remove_guest(gone)

    def _pfsp(self, member: str, opponent: str, roles) -> float:
        return pfsp_weight(self.league.p_win(member, opponent, roles), self.p.pfsp_power)

    def _add_to_hall_of_fame(self, name: str, version: int, state) -> None:
        policy = f"{name}.{version}"
        if any(e["policy"] == policy for e in self.hall_of_fame):
            return
        path = self.league.hof_path(policy)
        save_checkpoint(path, {"model": state}, {"kind": "hall_of_fame", "version": version})
        self.hall_of_fame.append(
            {
                "policy": policy,
                "member": name,
                "version": version,
                "file": str(path.relative_to(self.run_dir)),
            }
        )

    def _trim_hall_of_fame(self) -> None:
        """Keep the best `hall_of_fame` rated entries; new entries stay until they are rated.
        Where the league does not play the hall of fame (`league_opponents`), no entry is ever
        rated: the newest `hall_of_fame` entries are kept."""
        excess = len(self.hall_of_fame) - self.p.hall_of_fame
        if excess <= 0:
            return
        if "hall_of_fame" in self.p.league_opponents:
            roles = self.p.league_roles
            rated = [
                e
                for e in self.hall_of_fame
                if self.league.ratings.games(e["policy"]) >= self.p.ready_games
            ]
            drop = sorted(rated, key=lambda e: self.league.strength(e["policy"], roles))[:excess]
        else:
            drop = self.hall_of_fame[:excess]  # oldest first
        for entry in drop:
            self.hall_of_fame.remove(entry)
            (self.run_dir / entry["file"]).unlink(missing_ok=True)

    # ------------------------------------------------------------------ state
    def total_frames(self) -> int:
        return sum(m.frames for m in self.members.values())

    def _check_limits(self) -> None:
        if not self.running():
            log.warning("no member is running in %s: the population stops", self.run_dir)
            self.request_stop(
                "no member running (all retired); add one with `python -m hns_train.train "
                f"population add {self.run_dir}` after --resume"
            )
        version = max((m.version for m in self.members.values()), default=0)
        self._stop_at_limits(self.cfg.stop, version, self.total_frames())

    def manifest(self) -> dict[str, Any]:
        return {
            "format": MANIFEST_FORMAT,
            "name": self.cfg.name,
            "seed": self.cfg.seed,
            "next_index": self.next_index,
            "elapsed_s": self.elapsed_s(),
            "members": {
                n: {**asdict(m), "games": self.league.ratings.games(n)}
                for n, m in self.members.items()
            },
            "hall_of_fame": self.hall_of_fame,
            "hof_versions": {n: r.hof_version for n, r in self.runs.items()},
            "counters": {
                "frames": self.total_frames(),
                "episodes": sum(m.episodes for m in self.members.values()),
                **self.counters,
            },
            "rng": self.rng.bit_generator.state,
            "stop_reason": self.stop_reason,  # set once every member has been stopped
        }

    def save(self) -> None:
        save_manifest(self.run_dir / MANIFEST, self.manifest())

    def _check_league(self) -> None:
        """The league database must still hold the games the manifest counts: one emptied or
        replaced would restart every rating in silence. The ratings start again from the prior,
        with a warning and a lineage event, and members count their games from there."""
        counted = {n: int(self._manifest_games.get(n, 0)) for n in self.members}
        if sum(counted.values()) == 0 or any(self.league.ratings.games(n) for n in counted):
            return
        db = self.run_dir / LEAGUE
        log.warning(
            "the league in %s holds none of the %d rated games the manifest counts: every "
            "rating starts again (restore its pool.sqlite from a copy to keep them)",
            db,
            sum(counted.values()),
        )
        for member in self.members.values():
            member.changed_at_games = 0
        self._league_reset = sum(counted.values())

    def _restore(self) -> None:
        manifest = load_manifest(self.run_dir / MANIFEST)
        self.members = members_from_manifest(self.run_dir / MANIFEST, manifest)
        self._manifest_games = {n: d.get("games", 0) for n, d in manifest["members"].items()}
        self.next_index = int(manifest["next_index"])
        self.hall_of_fame = list(manifest.get("hall_of_fame", []))
        counters = manifest.get("counters", {})
        self.counters = {k: int(counters.get(k, 0)) for k in ("exploits", "restarts")}
        self.prior_s = float(manifest.get("elapsed_s", 0.0))
        self.rng.bit_generator.state = manifest["rng"]
        for name, member in self.members.items():
            run = MemberRun(self.run_dir, member)
            run.hof_version = int(manifest.get("hof_versions", {}).get(name, -1))
            self.runs[name] = run

    def record(self) -> None:
        members = {}
        for name in self.running():
            m = self.members[name]
            row = {"version": m.version, "frames": m.frames, "hyper": m.hyper}
            for role in ("hider", "seeker"):
                r = self.league.ratings.get(name, role)
                row[f"{role}_mu"], row[f"{role}_sigma"] = r.mu, r.sigma
            members[name] = row
        record = {
            "time": time.time(),
            "elapsed_s": self.elapsed_s(),
            "frames": self.total_frames(),
            "members": members,
        }
        append_record(self.run_dir / STATUS, record)
        row = {
            "episodes": sum(m.episodes for m in self.members.values()),
            "frames": record["frames"],
            "hours": record["elapsed_s"] / 3600,
            "version": max((m.version for m in self.members.values()), default=0),
            "population/members": len(members),
            "population/exploits": self.counters["exploits"],
            "population/restarts": self.counters["restarts"],
        }
        for name, values in members.items():
            row.update({f"{name}/{k}": v for k, v in values.items() if k != "hyper"})
            # wandb reads dots in a key as nesting: agent.ppo.lr is charted as agent/ppo/lr
            row.update({f"{name}/{k.replace('.', '/')}": v for k, v in values["hyper"].items()})
        self.wandb.log(row)

    def _postfix(self) -> str:
        return f"members {len(self.running())} exploits {self.counters['exploits']}"

    def summary(self) -> dict[str, Any]:
        # The best member by the eval view's rule (mean mu - 3 sigma), not by the mean mu that
        # ranks members for exploit: a member lucky in its few games is not named best.
        best = best_scored(member_scores(self.league.ratings, self.running()))
        return {
            "stop_reason": self.stop_reason,
            "hours": self.elapsed_s() / 3600,
            "frames": self.total_frames(),
            "members": len(self.running()),
            "exploits": self.counters["exploits"],
            "restarts": self.counters["restarts"],
            "best_member": best,
            "hall_of_fame": len(self.hall_of_fame),
        }


def summary_lines(summary: dict[str, Any], run_dir: Path) -> list[str]:
    lines = [f"population {run_dir}: stopped ({summary['stop_reason']})"]
    lines += [f"  {k}: {v}" for k, v in summary.items() if k != "stop_reason"]
    lines.append(f"  see: python -m hns_train.eval --run {run_dir}")
    return lines


# ---------------------------------------------------------------------------- requests


def request(run_dir: str | Path, action: str, member: str | None = None) -> Path:
    """Ask the population running in `run_dir` to add a member or retire one (a file in
    `requests/` that its controller takes within a tick)."""
    run_dir = Path(run_dir)
    if not (run_dir / MANIFEST).is_file():
        raise ValueError(f"{run_dir} is not a population run (no {MANIFEST})")
    if action not in ("add", "retire"):
        raise ValueError(f"action {action!r} is not 'add' or 'retire'")
    if action == "add" and member is not None:
        raise ValueError(f"add takes no MEMBER (got {member!r}): the population names new members")
    if action == "retire":
        members = load_manifest(run_dir / MANIFEST).get("members")
        names = sorted(members) if isinstance(members, dict) else []
        if member is None:
            raise ValueError(f"retire needs the MEMBER to retire; members of {run_dir}: {names}")
        if member not in names:
            raise ValueError(f"no member {member!r} in {run_dir}; members: {names}")
    path = run_dir / REQUESTS / f"{time.time_ns()}.json"
    return atomic_write_bytes(path, json.dumps({"action": action, "member": member}).encode())


def move_aside(path: Path) -> Path:
    """Rename `path` to a free `<name>.aside-<n>` beside it: a population never deletes a
    member's files (a start or an exploit cut short must not cost what was there)."""
    n = 1
    while (target := path.with_name(f"{path.name}.aside-{n}")).exists():
        n += 1
    path.rename(target)
    log.warning("%s moved aside to %s", path, target.name)
    return target
