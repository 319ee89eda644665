"""A population's league: rated matches between members, hall-of-fame entries and fixed anchors,
in `run_dir/league/` (ratings and matches in `pool.sqlite`, frozen weights beside it).

Policy names (`hns_train.agents.pool.policy_key`): `m0`, `m1`, ... a member's latest policy,
rated as one entry that follows it from version to version (as an eval worker rates "latest");
`m1.400` a hall-of-fame entry (member m1 at version 400, `hof_m1.400.pt`); the anchors
`untrained` (the untrained network of the population's seed, `untrained.pt`, written once, so it
stays the same across resumes), `random` and `noop`. Anchors are fixed ratings
(`Ratings(fixed=ANCHORS)`): they give the scale a fixed point, so a rating means the same at
hour one and hour twenty.

A match is one episode on a `HideAndSeekGame` of `league_worlds` worlds, policies acting
deterministically (the paper's evaluation setting); `play` plays one round (one match per world)
of a member in one role against one opponent and rates every match.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from functools import partialmethod
from pathlib import Path
from typing import Any

import numpy as np
import torch

from hns_train.agents.checkpoint import load_checkpoint, save_checkpoint
from hns_train.agents.policy import ActorCritic
from hns_train.agents.population import ANCHORS, UNTRAINED
from hns_train.envs.contract import observation_shapes
from hns_train.envs.game import HideAndSeekGame
from hns_train.eval.matches import MatchResult, PolicyController, play_matches
from hns_train.eval.policies import named_controller
from hns_train.eval.ratings import Ratings, win_probability

NAMED_ANCHORS = tuple(a for a in ANCHORS if a != UNTRAINED)  # played by built-in controllers
OTHER_ROLE = {"hider": "seeker", "seeker": "hider"}


class League:
    """Rated play between a population's policies (see the module docstring)."""

    def __init__(self, folder: str | Path, cfg: Any, seed: int = 0) -> None:
        self.folder = Path(folder)
        self.folder.mkdir(parents=True, exist_ok=True)
        self.cfg = cfg
        self.seed = int(seed)
        game_cfg = cfg.game_config()
        self.shapes = observation_shapes(game_cfg)
        self.network = cfg.agent.network
        self.game = HideAndSeekGame(game_cfg, n_worlds=cfg.population.league_worlds, seed=self.seed)
        self.ratings = Ratings(self.folder, fixed=ANCHORS)
        self.untrained_path = self.folder / f"{UNTRAINED}.pt"
        if not self.untrained_path.is_file():
            torch.manual_seed(self.seed)
            network = ActorCritic(self.shapes, self.network, device="cpu")
            save_checkpoint(self.untrained_path, {"model": network.state_dict()})
        self.untrained = load_checkpoint(self.untrained_path).state["model"]
        self.rounds = 0

    # ----- playing -----

    def play(
        self,
        member: str,
        role: str,
        member_state: Mapping[str, Any],
        opponent: str,
        opponent_state: Mapping[str, Any] | None = None,
    ) -> list[MatchResult]:
        """One round: `member` (weights `member_state`) plays `role` against `opponent` (weights
        `opponent_state`, or an anchor by name) in every world; every match is rated."""
        ours = self._controller(member, member_state)
        if opponent in NAMED_ANCHORS:
            seed = self.seed + self.rounds
            theirs = named_controller(opponent, OTHER_ROLE[role], seed, self.game.cfg.action_bins)
        else:
            state = self.untrained if opponent == UNTRAINED else opponent_state
            if state is None:
                raise ValueError(f"league: no weights given for opponent {opponent!r}")
            theirs = self._controller(opponent, state)
        hiders, seekers = (ours, theirs) if role == "hider" else (theirs, ours)
        seed = self.seed * 1_000_003 + self.rounds * self.game.n_worlds
        results = play_matches(self.game, hiders, seekers, seed=seed)
        self.ratings.record(results)
        self.rounds += 1
        return results

    def _controller(self, name: str, state: Mapping[str, Any]) -> PolicyController:
        return PolicyController.from_state_dict(self.shapes, state, name, self.network)

    # ----- ratings -----

    def strength(self, policy: str, roles: Sequence[str]) -> float:
        """Mean mu over the rated roles: the population's ranking key."""
        return float(np.mean([self.ratings.get(policy, r).mu for r in roles]))

    def p_win(self, member: str, opponent: str, roles: Sequence[str], same_role=False) -> float:
        """Predicted chance that `member` beats `opponent` in a match, averaged over the roles
        the member plays (the opponent plays the other role). With `same_role` (`beats`): the
        chance that `member` is the stronger of the two in a rated role, each rated in it."""
        return float(
            np.mean(
                [
                    win_probability(
                        self.ratings.get(member, r),
                        self.ratings.get(opponent, r if same_role else OTHER_ROLE[r]),
                    )
                    for r in roles
                ]
            )
        )

    beats = partialmethod(p_win, same_role=True)

    def hof_path(self, policy: str) -> Path:
        """Where a hall-of-fame entry's frozen weights live (`hof_m1.400.pt`)."""
        return self.folder / f"hof_{policy}.pt"
