"""Rated-match rows for `Ratings.record` without playing the matches: the fields a played
`MatchResult` (and the eval worker's row) hands over, with the statistics stored as given."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from hns_train.agents.pool import PolicyId


@dataclass
class Rated:
    hider: PolicyId | Sequence[PolicyId]
    seeker: PolicyId | Sequence[PolicyId]
    hider_score: float
    stats: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return dict(self.stats)
