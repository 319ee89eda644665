"""The one dict-to-dataclass loader behind every config section: conversions and error messages."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Annotated, Any

import pytest

from hns_train.typed_config import (
    AtLeast1,
    Bounds,
    FieldError,
    OneOf,
    Unit,
    bounds,
    field_docs,
    from_dict,
    range_problems,
)


@dataclass
class Inner:
    rate: float = 0.5
    shape: tuple[int, int] = (1, 1)
    every: int = 1

    def __post_init__(self) -> None:
        if self.rate > 1:
            raise ValueError(f"rate must be <= 1, got {self.rate}")
        self.per_step = 1 / self.every  # a rule that divides by a field


@dataclass
class Outer:
    name: str = "run"
    flag: bool = False
    extra: dict[str, Any] = field(default_factory=dict)
    inner: Inner = field(default_factory=Inner)


def test_builds_nested_sections_with_the_only_conversions():
    cfg = from_dict(Outer, {"inner": {"rate": "1e-3", "shape": [2, 3]}, "extra": {"a": 1}})
    assert cfg.inner.rate == 1e-3 and isinstance(cfg.inner.rate, float)
    assert cfg.inner.shape == (2, 3) and cfg.extra == {"a": 1} and cfg.name == "run"
    assert isinstance(from_dict(Inner, {"rate": 1}).rate, float)  # int -> float
    assert from_dict(Outer, None) == Outer()


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (
            {"inner": {"rat": 0.1}},
            r"unknown Inner fields \['inner.rat'\] \(did you mean 'inner.rate'\?\); "
            r"allowed: \['rate',",
        ),
        ({"inner": {"zzz": 0.1}}, r"unknown Inner fields \['inner.zzz'\]; allowed: "),
        ({"inner": {"every": True}}, r"inner.every=True has type bool; expected int"),
        ({"flag": 1}, r"flag=1 has type int; expected bool"),
        ({"inner": {"shape": [1, 2, 3]}}, r"inner.shape=\[1, 2, 3\] has type list; expected tuple"),
        ({"inner": {"rate": "fast"}}, r"inner.rate='fast' has type str; expected float"),
        ({"extra": 3}, r"extra=3 has type int; expected a mapping"),
        ({"inner": 3}, r"inner must be a mapping of its fields"),
        ({"inner": {"rate": 2}}, r"inner: rate must be <= 1, got 2"),
        ({"inner": {"every": 0}}, r"inner: \['inner.every'\] must not be 0"),
    ],
)
def test_errors_name_the_key_and_what_is_allowed(data, message):
    with pytest.raises(FieldError, match=message):
        from_dict(Outer, data)


def test_the_noun_of_unknown_keys_can_be_named():
    with pytest.raises(ValueError, match=r"unknown game parameter\(s\) \['speed'\]; allowed"):
        from_dict(Inner, {"speed": 1}, what="game parameter(s)")


@dataclass
class Bounded:
    count: AtLeast1 = 1
    share: Unit = 0.5
    decay: Annotated[float, Bounds(0, 1, inclusive=False)] = 0.9
    label: str = "x"
    mode: Annotated[str, OneOf(("fast", "slow"))] = "fast"


@dataclass
class BoundedRun:
    seed: int = 0
    section: Bounded = field(default_factory=Bounded)


def test_ranges_are_read_from_the_fields_and_every_problem_is_named():
    assert set(bounds(BoundedRun)) == {
        "section.count",
        "section.share",
        "section.decay",
        "section.mode",
    }
    assert range_problems(BoundedRun()) == []
    bad = BoundedRun(section=Bounded(count=0, share=float("nan"), decay=0.0, mode="quick"))
    assert range_problems(bad) == [
        "section.count=0 is not allowed; it must be >= 1",
        "section.share=nan must be a finite number",
        "section.decay=0.0 is not allowed; it must be > 0 and <= 1",
        "section.mode='quick' is not one of ('fast', 'slow')",
    ]
    # the type hint the loader checks is the annotated type's own
    assert from_dict(Bounded, {"share": 1}).share == 1.0


@dataclass
class Spans:
    counts: Annotated[tuple[int, int], Bounds(0)] = (1, 2)
    split: Annotated[tuple[float, float], Bounds(0, 1, False, False)] = (0.4, 0.6)
    fraction: Annotated[float, Bounds(0, 1, high_inclusive=False)] = 0.5
    bins: Annotated[int, Bounds(3, odd=True)] = 11
    kinds: Annotated[tuple[str, ...], OneOf(("fast", "slow"))] = ("fast",)


def test_pairs_open_upper_ends_odd_numbers_and_lists_of_names_are_declared_ranges():
    assert range_problems(Spans()) == []
    assert range_problems(Spans(counts=(0, 0), split=(0.5, 0.5), fraction=0.0, bins=3)) == []
    bad = Spans(counts=(2, 1), split=(0.0, 0.5), fraction=1.0, bins=4, kinds=("slow", "quick"))
    assert range_problems(bad) == [
        "counts=(2, 1) is not allowed; it must be (low, high) with 0 <= low <= high",
        "split=(0.0, 0.5) is not allowed; it must be (low, high) with 0 < low <= high < 1",
        "fraction=1.0 is not allowed; it must be >= 0 and < 1",
        "bins=4 is not allowed; it must be odd and >= 3",
        "kinds=('slow', 'quick'): ['quick'] not among the allowed ('fast', 'slow')",
    ]
    assert range_problems(Spans(counts=(-1, 2), bins=1))[0].startswith("counts=(-1, 2) is not")
    assert range_problems(Spans(bins=1)) == ["bins=1 is not allowed; it must be odd and >= 3"]


def test_sections_that_stand_alone_raise_every_problem_of_their_declared_ranges():
    from hns_train.agents.pool import PoolConfig
    from hns_train.envs.warp.bank import BankConfig
    from hns_train.envs.warp.physics import PhysicsConfig

    assert PhysicsConfig(njmax=None).njmax is None  # a field that may be None: None is allowed
    with pytest.raises(
        ValueError, match=r"^PhysicsConfig\.njmax=0 is not allowed; it must be >= 1"
    ):
        PhysicsConfig(njmax=0)
    with pytest.raises(ValueError) as err:
        BankConfig(per_world=0, prefetch=0)
    assert str(err.value) == (
        "BankConfig.per_world=0 is not allowed; it must be >= 1; "
        "BankConfig.prefetch=0 is not allowed; it must be >= 1"
    )
    with pytest.raises(ValueError, match=r"p_latest=1.5 .*; p_noop=-1.0 is not allowed"):
        PoolConfig(p_latest=1.5, p_noop=-1.0)


@dataclass
class Documented:
    # a group heading, not a meaning
    plain: int = 0  # a note, not a meaning
    trailing: int = 1  #: said at the end of its line
    #: said above it,
    #: over two lines
    above: tuple[int, int] = (
        0,
        1,
    )

    #: a meaning cut off by a blank line belongs to no field

    undocumented: int = 2


def test_field_meanings_are_the_hash_colon_comments_at_or_above_each_field():
    assert field_docs(Documented) == {
        "trailing": "said at the end of its line",
        "above": "said above it, over two lines",
    }
