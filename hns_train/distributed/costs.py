"""What each worker kind costs per unit of work, from the workers' heartbeats.

Every worker in its own process reports `cpu_s` (process CPU seconds since its previous
heartbeat, `worker.py`); actors report frames, policy workers the agent rows they served,
trainers the agent-steps their updates used (`samples`) and how many of those were used for
the first time (`new_samples`). Over one logging window the controller turns them into:

    cpu/actor_ms_per_frame      actor CPU per env frame (a frame = one step of one world)
    cpu/policy_us_per_row       policy-worker CPU per agent row served (one agent, one step)
    cpu/policy_ms_per_frame     the same per env frame
    cpu/trainer_us_per_sample   trainer CPU per agent-step in an update (reuse counts again)
    cpu/trainer_ms_per_frame    the same per env frame produced
    cpu/ms_per_frame            all of the above together per env frame produced
    throughput/policy_rows_per_batch     agent rows per batch of requests a policy worker serves
    throughput/policy_rows_per_forward   agent rows per forward pass (a batch takes one pass
                                         per controller: the latest policy, each snapshot)
    throughput/trained_fps      env frames per second whose samples reached an update for
                                the first time (agent-steps / agents per world)
    pod/{sim,act,learn}_ms_per_frame   a pod's wall time per env frame in simulation, acting
                                and learning (pod_worker.py; it also reports its frames)

A metric is left out when its window has no work or no CPU report (serial launcher).
"""

from __future__ import annotations

from collections import defaultdict

CPU_KINDS = ("actor", "policy", "trainer")
POD_PHASES = ("sim", "act", "learn")


class WorkCosts:
    """Sums of CPU time and work per worker kind over the current logging window."""

    def __init__(self, agents_per_frame: int) -> None:
        self.agents_per_frame = max(1, int(agents_per_frame))
        self._reset()

    def _reset(self) -> None:
        self.cpu_s: dict[str, float] = defaultdict(float)
        self.reported: set[str] = set()
        self.frames = self.rows = self.batches = self.forwards = 0
        self.samples = self.new_samples = 0
        self.pod_s: dict[str, float] = defaultdict(float)

    def add(self, kind: str, meta: dict) -> None:
        """One heartbeat's counters (already checked against the contract)."""
        if "cpu_s" in meta:
            self.cpu_s[kind] += float(meta["cpu_s"])
            self.reported.add(kind)
        self.frames += int(meta.get("frames", 0))  # actors, and pods
        for phase in POD_PHASES:
            self.pod_s[phase] += float(meta.get(f"{phase}_s", 0.0))
        if kind == "policy":
            self.rows += int(meta.get("rows", 0))
            self.batches += int(meta.get("batches", 0))
            self.forwards += int(meta.get("forwards", 0))
        elif kind == "trainer":
            self.samples += int(meta.get("samples", 0))
            self.new_samples += int(meta.get("new_samples", 0))

    def metrics(self, elapsed_s: float) -> dict[str, float]:
        """The window's figures (see the module docstring); starts a new window."""
        out: dict[str, float] = {}
        if elapsed_s > 0:
            out["throughput/trained_fps"] = self.new_samples / self.agents_per_frame / elapsed_s
        per_frame = {k: self.cpu_s[k] for k in CPU_KINDS if k in self.reported}
        if self.frames:
            for phase in POD_PHASES:
                if self.pod_s[phase]:
                    out[f"pod/{phase}_ms_per_frame"] = 1e3 * self.pod_s[phase] / self.frames
            for kind, cpu in per_frame.items():
                out[f"cpu/{kind}_ms_per_frame"] = 1e3 * cpu / self.frames
            if per_frame:
                out["cpu/ms_per_frame"] = 1e3 * sum(per_frame.values()) / self.frames
        if self.batches:
            out["throughput/policy_rows_per_batch"] = self.rows / self.batches
        if self.forwards:
            out["throughput/policy_rows_per_forward"] = self.rows / self.forwards
        if self.rows and "policy" in per_frame:
            out["cpu/policy_us_per_row"] = 1e6 * per_frame["policy"] / self.rows
        if self.samples and "trainer" in per_frame:
            out["cpu/trainer_us_per_sample"] = 1e6 * per_frame["trainer"] / self.samples
        self._reset()
        return out
