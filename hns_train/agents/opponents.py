"""Who controls each agent row, the built-in fixed opponents, and acting a batch of rows
with each row's controller: the one dispatcher of the policy worker (distributed/policy.py)
and the pod (pod.py).

Controller codes, one per agent row (on the wire in inference requests, and in a pod):
    LATEST (-1)  the learning policy (its rows are the only ones trained on)
    RANDOM (-2)  the built-in random team
    NOOP (-3)    the built-in no-op team
    c >= 0       another network: the policy worker's pool snapshot of version c (or a guest),
                 the pod's device model slot c
`code_of` maps the pool's policy ids ("latest", "random", "noop", a version) to codes.

`Snapshots` reads a code's pool snapshot through a `SnapshotCache` for both: a snapshot that is
missing or broken is counted and remembered (up to `MAX_BAD_CODES` of them), never read again,
and the caller lets the latest policy play its rows.

`act_by_controller(groups, network, fixed, obs, state, starts)` acts every row: one forward pass
per network code on its rows (gathered and scattered with the group's index tensor), fixed
opponents' actions for the others, whose state is kept and whose log-prob and value are 0.
Only the learning policy's rows run the value network: another network's rows are never
learned from, so their value is 0 and the value network's half of their state is kept.

The action layout (5 int64 columns: x force, y force, z torque bins in [0, action_bins), grab,
lock; the no-op) is the contract's, `hns_train/envs/contract.py`; `noop_action` and
`ACTION_BINS` here are its own.

`fixed_actions(code, rows, rng, action_bins=11) -> actions (rows, 5)` acts a fixed opponent on
the host, drawing from `rng` (a `numpy.random.Generator`):
- RANDOM: every column uniformly over its range (the untrained policy's behaviour);
- NOOP: the contract's no-op (middle bins, no grab, no lock: a team that stands still).
`FIXED_OPPONENTS` maps the pool's names ("random", "noop") to their codes.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

import numpy as np
import torch

from hns_train.agents.policy import ActorCritic, ActOutput
from hns_train.agents.pool import LATEST as LATEST_ID
from hns_train.agents.pool import SnapshotCache
from hns_train.envs import contract
from hns_train.envs.contract import noop_action as noop_action  # the fixed controllers' no-op

LATEST, RANDOM, NOOP = -1, -2, -3
FIXED_OPPONENTS = {"random": RANDOM, "noop": NOOP}  # the pool's names of the fixed opponents
_NAMED = {LATEST_ID: LATEST, **FIXED_OPPONENTS}
SNAPSHOT_ERRORS = (OSError, ValueError, RuntimeError)  # no such snapshot, a broken file
MAX_BAD_CODES = 10_000  # snapshot codes remembered as unusable (not looked up on disk again)

ACTION_BINS = contract.DEFAULT_ACTION_BINS


def fixed_actions(
    code: int, rows: int, rng: np.random.Generator, action_bins: int = ACTION_BINS
) -> np.ndarray:
    """(rows, 5) host actions of the fixed opponent of `code` (RANDOM or NOOP), in the game's
    `action_bins` (a no-op is the middle bin, so it moves with them)."""
    if code == RANDOM:  # every column uniformly over its range
        nvec = contract.action_nvec(action_bins)
        return rng.integers(0, nvec, size=(rows, len(nvec)), dtype=contract.ACTION_DTYPE)
    if code == NOOP:  # rng unused
        return np.tile(np.array(noop_action(action_bins), contract.ACTION_DTYPE), (rows, 1))
    raise ValueError(f"controller code {code} is not a fixed opponent; allowed: {FIXED_OPPONENTS}")


def code_of(policy_id) -> int:
    """The controller code of a pool policy id ("latest", "random", "noop" or a version)."""
    if isinstance(policy_id, str):
        if policy_id not in _NAMED:
            raise ValueError(f"unknown controller {policy_id!r}; allowed: {sorted(_NAMED)}")
        return _NAMED[policy_id]
    return int(policy_id)


Groups = list[tuple[int, torch.Tensor | None]]


def controller_groups(codes: np.ndarray, device: torch.device) -> Groups:
    """Each controller's rows of `codes` (host, one per row), as (code, index tensor on
    `device`), the index None when the controller plays every row."""
    codes = np.asarray(codes).reshape(-1)
    groups: Groups = []
    for code in np.unique(codes):
        index = np.flatnonzero(codes == code)
        full = len(index) == len(codes)
        groups.append((int(code), None if full else torch.as_tensor(index, device=device)))
    return groups


def act_by_controller(
    groups: Groups,
    network: Callable[[int], ActorCritic],
    fixed: Callable[[int, int], torch.Tensor],
    obs: Mapping[str, torch.Tensor],
    state: torch.Tensor,
    starts: torch.Tensor,
) -> ActOutput:
    """Every row's action, log-prob, value and new state (tensors on the rows' device):
    `network(code)` acts the rows of a code >= LATEST, `fixed(code, n)` gives n actions of a
    fixed opponent (RANDOM, NOOP)."""
    if len(groups) == 1 and groups[0][0] >= LATEST:  # one network plays every row
        code = groups[0][0]
        return network(code).act_tensors(obs, state, starts, value=code == LATEST)
    rows, device = state.shape[0], state.device
    actions = torch.empty(rows, contract.N_ACTION_DIMS, dtype=torch.int64, device=device)
    logp = torch.zeros(rows, device=device)
    values = torch.zeros(rows, device=device)
    new_state = state.clone()
    for code, index in groups:
        n = rows if index is None else len(index)
        if code < LATEST:
            out = fixed(code, n)
            if index is None:
                actions.copy_(out)
            else:
                actions.index_copy_(0, index, out)
            continue
        sub = {k: v.index_select(0, index) for k, v in obs.items()}  # (several groups)
        out = network(code).act_tensors(
            sub, state.index_select(0, index), starts.index_select(0, index), value=code == LATEST
        )
        actions.index_copy_(0, index, out.actions)
        logp.index_copy_(0, index, out.logp)
        values.index_copy_(0, index, out.values)
        new_state.index_copy_(0, index, out.state)
    return ActOutput(actions, logp, values, new_state)


class Snapshots:
    """Pool snapshots by code, read through `cache` (state dicts, or the models it builds)."""

    def __init__(self, cache: SnapshotCache) -> None:
        self.cache = cache
        self.unusable = 0  # asks for a missing or broken snapshot
        self._bad: dict[int, str] = {}  # unusable code -> why
        self._last_error = ""

    def get(self, code: int):
        """The snapshot of `code`, or None when it is missing or broken (counted; `why`)."""
        code = int(code)
        if code not in self._bad:
            try:
                return self.cache.get(code)
            except SNAPSHOT_ERRORS as err:
                self._last_error = str(err)
                if len(self._bad) < MAX_BAD_CODES:
                    self._bad[code] = self._last_error
        self.unusable += 1
        return None

    def why(self, code: int) -> str:
        """Why snapshot `code` is unusable (past `MAX_BAD_CODES` codes: the newest error)."""
        return self._bad.get(int(code), self._last_error)
