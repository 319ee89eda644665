"""Cross-play of a run's trained policy against its untrained one: did each team learn?

A self-play curve cannot say whether anything was learned: when both teams improve together the
hidden share may not move at all. Cross-play against the untrained policy (pool version 0, the
same network before any update) separates the two teams:

| pairing (hiders v seekers) | what it measures |
|---|---|
| untrained v untrained | the level of untrained play (the reference of both gains) |
| untrained v trained | trained seekers: `seeker_gain` = their in-sight share - the reference's |
| trained v untrained | trained hiders: `hider_gain` = their hidden share - the reference's |
| trained v trained | the behaviour the run produced (box moves and locks in preparation, ...) |

In-sight share = the share of play (post-preparation) steps in which some seeker sees some
hider = 1 - `hidden_fraction` of `envs/stats.py`. Every pairing plays the same seeds (the same
layouts and start positions), so the differences are paired and the layout noise cancels; each
gain carries the standard error of a paired difference over episodes, and `significant` asks for
a gain above `Z_SIGNIFICANT` standard errors. Actions are sampled (the untrained policy's
argmax is one fixed action, not its play).

Public API: `cross_play(game_cfg, policies, episodes, worlds, seed)` -> `CrossPlay` with
`.pairings[(hiders, seekers)]` (`PairingResult`) and `.gains()`; `BEHAVIOUR` lists the paper's
behaviour statistics reported per pairing.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from hns_train.eval.matches import play_matches

TRAINED, UNTRAINED = "trained", "untrained"
PAIRINGS = (  # (hiders, seekers)
    (UNTRAINED, UNTRAINED),
    (UNTRAINED, TRAINED),
    (TRAINED, UNTRAINED),
    (TRAINED, TRAINED),
)
BEHAVIOUR = (
    "max_box_move_prep",
    "num_box_lock_prep",
    "max_ramp_move_prep",
    "num_ramp_lock_prep",
    "max_box_move",
    "num_box_lock",
    "max_ramp_move",
    "num_ramp_lock",
)
Z_SIGNIFICANT = 3.0  # a gain counts when it exceeds this many standard errors


@dataclass
class PairingResult:
    """Per-episode figures of one pairing, in seed order."""

    hiders: str
    seekers: str
    hidden: np.ndarray  # (episodes,) hidden_fraction
    hider_return: np.ndarray
    seeker_return: np.ndarray
    stats: dict[str, np.ndarray] = field(default_factory=dict)  # each stat -> (episodes,)

    @property
    def episodes(self) -> int:
        return len(self.hidden)

    @property
    def in_sight(self) -> np.ndarray:
        return 1.0 - self.hidden

    def summary(self) -> dict[str, float]:
        out = {
            "episodes": self.episodes,
            "in_sight": float(self.in_sight.mean()),
            "hidden": float(self.hidden.mean()),
            "hider_return": float(self.hider_return.mean()),
            "seeker_return": float(self.seeker_return.mean()),
        }
        out.update({k: float(v.mean()) for k, v in self.stats.items()})
        return out


def standard_error(values) -> float:
    """The standard error of the mean of ``values`` (NaN with fewer than two)."""
    values = np.asarray(values, dtype=float)
    return float(values.std(ddof=1) / np.sqrt(len(values))) if len(values) > 1 else float("nan")


def paired_difference(a, b) -> tuple[float, float]:
    """(mean, standard error) of a[i] - b[i] over paired episodes or seeds (se NaN with one)."""
    d = np.asarray(a, dtype=float) - np.asarray(b, dtype=float)
    return float(d.mean()), standard_error(d)


@dataclass
class CrossPlay:
    pairings: dict[tuple[str, str], PairingResult]

    def __getitem__(self, key: tuple[str, str]) -> PairingResult:
        return self.pairings[key]

    def gains(self) -> dict[str, Any]:
        """seeker_gain, hider_gain (paired, with standard errors) and whether each is
        significant; behaviour of trained v trained next to untrained v untrained."""
        ref = self[UNTRAINED, UNTRAINED]
        seeker, seeker_se = paired_difference(self[UNTRAINED, TRAINED].in_sight, ref.in_sight)
        hider, hider_se = paired_difference(self[TRAINED, UNTRAINED].hidden, ref.hidden)
        both = self[TRAINED, TRAINED]
        return {
            "seeker_gain": seeker,
            "seeker_gain_se": seeker_se,
            "seeker_gain_significant": bool(seeker > Z_SIGNIFICANT * seeker_se),
            "hider_gain": hider,
            "hider_gain_se": hider_se,
            "hider_gain_significant": bool(hider > Z_SIGNIFICANT * hider_se),
            "box_move_prep": float(both.stats["max_box_move_prep"].mean()),
            "box_lock_prep": float(both.stats["num_box_lock_prep"].mean()),
            "box_move_prep_untrained": float(ref.stats["max_box_move_prep"].mean()),
            "box_lock_prep_untrained": float(ref.stats["num_box_lock_prep"].mean()),
            "ramp_move_prep": float(both.stats["max_ramp_move_prep"].mean()),
            "ramp_lock_prep": float(both.stats["num_ramp_lock_prep"].mean()),
        }

    def table(self) -> list[str]:
        """One line per pairing, fits 100 columns."""
        head = (
            f"{'hiders':>10} {'seekers':>10} {'eps':>5} {'in sight':>9} {'box move':>9} "
            f"{'box lock':>9} {'ramp move':>10} {'ramp lock':>10}"
        )
        lines = ["cross-play (box and ramp columns: in preparation, per episode)", head]
        for (h, s), r in self.pairings.items():
            m = r.summary()
            lines.append(
                f"{h:>10} {s:>10} {r.episodes:>5} {m['in_sight']:>9.3f} "
                f"{m['max_box_move_prep']:>9.2f} {m['num_box_lock_prep']:>9.2f} "
                f"{m['max_ramp_move_prep']:>10.2f} {m['num_ramp_lock_prep']:>10.2f}"
            )
        return lines


def cross_play(
    game_cfg: Any,
    policies: Mapping[str, Callable[[], Any]],
    episodes: int,
    worlds: int = 16,
    seed: int = 0,
    progress: bool = False,
    pairings: tuple[tuple[str, str], ...] = PAIRINGS,
    stats: tuple[str, ...] = BEHAVIOUR,
) -> CrossPlay:
    """Play every pairing of `pairings` for `episodes` episodes on the same seeds.

    `policies` maps the names in `pairings` ("trained" and "untrained") to factories of
    `matches` controllers (a fresh controller per pairing, so no sampling stream is shared
    between pairings); each pairing keeps the episode statistics named in `stats`."""
    import torch

    from hns_train.envs.game import HideAndSeekGame

    missing = {name for pair in pairings for name in pair} - set(policies)
    if missing:
        raise ValueError(f"cross_play needs controllers for {sorted(missing)}")
    if episodes < 2:
        raise ValueError(f"episodes must be >= 2 (a standard error needs two), got {episodes}")
    game = HideAndSeekGame(game_cfg, n_worlds=min(worlds, episodes))
    out: dict[tuple[str, str], PairingResult] = {}
    for hiders, seekers in pairings:
        torch.manual_seed(seed)  # sampled actions: the same stream for each pairing
        results = play_matches(
            game,
            policies[hiders](),
            policies[seekers](),
            n_matches=episodes,
            seed=seed,
            progress=progress,
        )
        out[hiders, seekers] = PairingResult(
            hiders=hiders,
            seekers=seekers,
            hidden=np.array([r.hidden_fraction for r in results]),
            hider_return=np.array([r.hider_return for r in results]),
            seeker_return=np.array([r.seeker_return for r in results]),
            stats={k: np.array([float(r.stats.get(k, 0.0)) for r in results]) for k in stats},
        )
    return CrossPlay(out)
