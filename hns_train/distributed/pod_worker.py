"""Pod worker (`pipeline.backend=pod`): a learner that simulates its own worlds.

Each of the `pipeline.n_trainers` learners is a `Pod` (hns_train/agents/pod.py) on its device:
`pod.worlds` worlds of the C game (a CPU pod, `pod.threads` MuJoCo and torch threads) or of the
MuJoCo Warp game (a GPU pod; `pod.physics`), rollouts of `pipeline.chunk_len` steps, and PPO
with `agent.ppo` on each. There are no actors, policy workers or sample sockets. The worker's
`step` advances its `Pod.iteration` by one env step (between steps it answers control messages
and heartbeats, as every worker does); the worker's `update` is the iteration's hook: at the
rollout's end it runs the update through its `Learner` (learner.py: guarded, then parameters
published for eval workers, pool snapshots, checkpoints) or skips it when the run would end
first.
Several pods train one policy as DDP ranks (each its own worlds, gradients averaged as for
trainers) and agree at every rollout's end whether to stop.

Heartbeats carry a learner's counters (`Learner.report`) plus what actors report (frames,
episodes, episode statistic sums, physics warnings) and the pod's wall time split into
simulation, acting and learning (`sim_s`, `act_s`, `learn_s`), and its process CPU time split
into collecting the rollout, PPO, the ranks' agreement and sums, rank 0's publishing,
checkpoints and snapshots, and building it all at the start (`collect_cpu_s`, `learn_cpu_s`,
`sync_cpu_s`, `duties_cpu_s`, `setup_cpu_s`), with `sync_s` the wall time in the agreement and
sums: where a rank's time goes as ranks grow is read from any run (bench/pod_scale.py). A
trainer's own figures about the chunks it receives, drops and reuses are left out: a pod
receives none, and trains on each rollout once, as it comes.

A pod never heartbeats without progress: its heartbeats come only from the worker's loop,
between calls of `step` (worker.py; no thread beats for it), and each call steps every world,
runs or skips the rollout's update, or, once the ranks agreed to stop, waits for its own stop.
A step that hangs leaves the pod silent, and the controller restarts it from the newest
checkpoint after `pipeline.heartbeat_timeout_s`. An update is announced (`busy`, learner.py) and
may be silent until the next heartbeat for `pipeline.update_timeout_s`, then restarts the same;
so is a DDP rank's wait at its rollout's end for a slower peer (the ranks' agreement).
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable

import torch

from hns_train.agents.pod import Pod
from hns_train.agents.pool import PolicyPool
from hns_train.distributed.learner import LearnerWorker
from hns_train.distributed.worker import WorkerSpec, pool_dir


class PodWorker(LearnerWorker):
    def __init__(self, spec: WorkerSpec) -> None:
        super().__init__(spec)
        cfg, pod, learner = self.cfg, self.cfg.pod, self.learner
        threads = pod.threads or max(1, (os.cpu_count() or 1) // cfg.pipeline.n_trainers)
        if learner.device.type == "cpu":
            torch.set_num_threads(threads)
        self.game = make_game(cfg, learner.device, seed=self._seed(1), threads=threads)
        close_game = getattr(self.game, "close", None)  # the Warp game's layout-bank thread
        if callable(close_game):
            self.resources.callback(close_game)
        opponents = learner.pool if cfg.pool.draws_opponents else None  # rank 0's: one handle
        if cfg.pool.draws_opponents and opponents is None:  # open only when it can draw one
            opponents = self.resources.enter_context(PolicyPool(pool_dir(spec.run_dir), cfg.pool))
        self.pod = Pod(
            self.game,
            learner.ppo,
            cfg.pipeline.chunk_len,
            pool=opponents,
            opponent_slots=pod.opponent_slots,
            snapshot_cache=pod.snapshot_cache,
            seed=self._seed(2),
        )
        self._iteration = None  # the pod's iteration under way
        # process CPU seconds since the last heartbeat: stepping (the hook's time included),
        # and the hook's (agreement and update)
        self._step_cpu_s = self._hook_cpu_s = 0.0
        # building the learner, the game and the pod (reported once, apart from the loop's)
        self._setup_cpu_s = time.process_time() - self._cpu_at if self._cpu_at else 0.0

    def _seed(self, salt: int) -> list[int]:
        return [self.cfg.seed, 4, self.rank, self.spec.incarnation, salt]

    # ------------------------------------------------------------------ loop
    def step(self) -> bool:
        if self.learner.agreed_stop:
            return False
        if self._iteration is None:
            self._iteration = self.pod.iteration(hook=self.update)
        cpu = time.process_time()
        stats = None
        try:
            next(self._iteration)  # one env step
        except StopIteration as done:  # the rollout's update (or its skip) is over
            self._iteration = None
            stats = done.value
        self._step_cpu_s += time.process_time() - cpu
        if stats is not None:  # a rollout is trained on as it comes, once: every step is new
            learned = int(stats.pop("learned_steps"))
            self.learner.count_update(stats, learned, learned)
        return True

    def update(self, learn: Callable[[], dict], agent_steps: int) -> dict | None:
        # every rank ends its rollout here: stop together, or train together unless the run
        # would end before this update could; a peer may still be simulating its rollout
        cpu = time.process_time()
        try:
            self.learner.peers_may_lag = True
            if not self.learner.agree(stop=self.stopping, ready=True):
                return None
            return self.learner.guarded_update(learn, agent_steps)
        finally:
            self._hook_cpu_s += time.process_time() - cpu

    # ------------------------------------------------------------------ control
    def counters(self) -> dict:
        return {
            **self.learner.report(),
            # what an actor reports, and where the pod's time went (sim_s, act_s, learn_s)
            **self.pod.take_counters(),
            "physics_warnings": self.pod.game.physics_warnings(),
            **self._take_cpu_split(),
        }

    def _take_cpu_split(self) -> dict[str, float]:
        """The process CPU seconds since the last heartbeat by part (module docstring)."""
        ddp, learner = self.learner.ddp, self.learner
        spent = ddp.take_collective_s() if ddp is not None else {}
        sync_cpu = spent.get("collective_cpu_s", 0.0)
        out = {
            "collect_cpu_s": max(self._step_cpu_s - self._hook_cpu_s, 0.0),
            "learn_cpu_s": max(self._hook_cpu_s - sync_cpu - learner.duties_cpu_s, 0.0),
            "sync_cpu_s": sync_cpu,
            "duties_cpu_s": learner.duties_cpu_s,
            "sync_s": spent.get("collective_s", 0.0),
            "setup_cpu_s": self._setup_cpu_s,
        }
        self._step_cpu_s = self._hook_cpu_s = learner.duties_cpu_s = self._setup_cpu_s = 0.0
        return out


def make_game(cfg, device: torch.device, seed, threads: int = 1):
    """The pod's worlds: MuJoCo Warp on `device` or the C game (`pod.physics`, auto: Warp on
    CUDA, C on a CPU)."""
    physics = cfg.pod.physics
    if physics == "auto":  # transfer tasks run on the C game only (envs/tasks.py)
        on_gpu = device.type == "cuda" and cfg.game_config().task == "hide_and_seek"
        physics = "warp" if on_gpu else "c"
    if physics == "warp":
        from hns_train.envs.warp.game import WarpGame  # the optional extra, only here

        warp_device = "cpu" if device.type == "cpu" else f"cuda:{device.index or 0}"
        # worlds start at staggered steps, so resets spread over a rollout's steps
        return WarpGame(
            cfg.game_config(), cfg.pod.worlds, seed=seed, device=warp_device, stagger=True
        )
    from hns_train.envs.vector import VectorGame

    return VectorGame(cfg.game_config(), cfg.pod.worlds, seed=seed, threads=threads)
