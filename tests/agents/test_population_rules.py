"""The tournament's rules: ranges, explore, matchmaking weights, exploit choice, its files."""

from __future__ import annotations

import json

import numpy as np
import pytest

from hns_train.agents.population import (
    Member,
    PopulationConfig,
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
from hns_train.config import ConfigError, flat_settings, load_config

BASE = {
    "agent.ppo.lr": 3e-4,
    "agent.ppo.ent_coef": 0.01,
    "agent.ppo.epochs": 2,
    "game.preset": "chase",
}


def test_ranges_scale_and_integers_follow_the_base_config():
    ranges = parse_ranges(
        {
            "agent.ppo.lr": [1e-4, 1e-3],
            "agent.ppo.ent_coef": [0.0, 0.02],
            "agent.ppo.epochs": [1, 4],
        },
        BASE,
    )
    assert ranges["agent.ppo.lr"].scale == "log"
    assert ranges["agent.ppo.ent_coef"].scale == "linear"  # low 0 cannot be log
    assert ranges["agent.ppo.epochs"].integer and not ranges["agent.ppo.lr"].integer
    rng = np.random.default_rng(0)
    draws = [sample_hyper(ranges, rng) for _ in range(400)]
    lrs = np.array([d["agent.ppo.lr"] for d in draws])
    assert lrs.min() >= 1e-4 and lrs.max() <= 1e-3
    # log-uniform: about half the draws below the geometric mean (3.16e-4), not the arithmetic
    assert 0.4 < np.mean(lrs < np.sqrt(1e-4 * 1e-3)) < 0.6
    assert {d["agent.ppo.epochs"] for d in draws} == {1, 2, 3, 4}
    assert all(isinstance(d["agent.ppo.epochs"], int) for d in draws)


@pytest.mark.parametrize(
    "ranges, message",
    [
        ({"agent.ppo.nope": [1, 2]}, "not a setting"),
        ({"game.preset": [1, 2]}, "not a number"),
        ({"agent.ppo.lr": [1e-3, 1e-4]}, "low <= high"),
        ({"agent.ppo.lr": [0.0, 1e-3, "log"]}, "log range needs low > 0"),
        ({"agent.ppo.lr": [1e-4, 1e-3, "cubic"]}, "scale"),
        ({"agent.ppo.lr": "fast"}, "give [low, high]"),
    ],
)
def test_bad_ranges_name_the_key_and_what_is_allowed(ranges, message):
    with pytest.raises(ValueError, match=message.replace("[", r"\[")):
        parse_ranges(ranges, BASE)


def test_explore_stays_in_range_and_says_how():
    ranges = parse_ranges({"agent.ppo.lr": [1e-4, 1e-3], "agent.ppo.epochs": [1, 4]}, BASE)
    rng = np.random.default_rng(1)
    hyper = {"agent.ppo.lr": 9.5e-4, "agent.ppo.epochs": 4}
    seen = set()
    for _ in range(300):
        new, how = perturb(hyper, ranges, rng, (0.8, 1.2), 0.25)
        assert 1e-4 <= new["agent.ppo.lr"] <= 1e-3
        assert new["agent.ppo.epochs"] in (1, 2, 3, 4)
        seen.update(how.values())
        if how["agent.ppo.lr"] == "x1.2":  # 9.5e-4 * 1.2 clips to the top of the range
            assert new["agent.ppo.lr"] == 1e-3
        if how["agent.ppo.lr"] == "x0.8":
            assert new["agent.ppo.lr"] == pytest.approx(7.6e-4)
    assert seen == {"x0.8", "x1.2", "resample"}


def test_pfsp_prefers_opponents_the_member_rarely_beats():
    assert pfsp_weight(0.1) > pfsp_weight(0.5) > pfsp_weight(0.9) > 0
    assert pfsp_weight(1.0) > 0  # never met again would freeze its rating
    assert pfsp_weight(0.2, power=2.0) == pytest.approx(0.64)


def _cfg(**kw) -> PopulationConfig:
    return PopulationConfig(members=4, **kw)


def test_exploit_bottom_copies_a_top_member_predicted_to_beat_it():
    strength = {"m0": 30.0, "m1": 10.0, "m2": 25.0, "m3": 20.0}

    def beats(a, b):
        return 1.0 / (1.0 + np.exp(-(strength[a] - strength[b]) / 4.0))

    out = choose_exploits(strength, ["m1", "m2", "m3"], beats, _cfg())
    assert [(e.member, e.source) for e in out] == [("m1", "m0")]
    assert out[0].win_probability == pytest.approx(beats("m0", "m1"))
    # not ready: nothing happens; too close to call: nothing happens
    assert choose_exploits(strength, ["m2", "m3"], beats, _cfg()) == []
    assert choose_exploits(strength, ["m1"], lambda a, b: 0.69, _cfg()) == []
    # the best member is never replaced, even when it is all there is at the bottom
    two = {"m0": 30.0, "m1": 29.0}
    out = choose_exploits(two, ["m0", "m1"], lambda a, b: 0.9, PopulationConfig(members=2))
    assert [(e.member, e.source) for e in out] == [("m1", "m0")]
    one_member = choose_exploits({"m0": 1.0}, ["m0"], lambda a, b: 1.0, _cfg())
    assert one_member == []


def test_readiness_counts_versions_and_games_since_the_last_change():
    m = Member(index=1, seed=1, hyper={}, version=120, changed_at_version=80, changed_at_games=5)
    assert m.ready(games=21, ready_versions=40, ready_games=16)
    assert not m.ready(games=20, ready_versions=40, ready_games=16)
    assert not m.ready(games=21, ready_versions=41, ready_games=16)


def test_overrides_parse_and_refuse_unknown_members():
    assert parse_overrides(["1:agent.ppo.lr=0", "1:agent.ppo.epochs=1", "0:seed=3"], 2) == {
        1: ["agent.ppo.lr=0", "agent.ppo.epochs=1"],
        0: ["seed=3"],
    }
    with pytest.raises(ValueError, match="INDEX:section.key=value"):
        parse_overrides(["agent.ppo.lr=0"], 2)
    with pytest.raises(ValueError, match="members are 0..1"):
        parse_overrides(["2:agent.ppo.lr=0"], 2)


def test_config_checks_the_population_section():
    cfg = load_config(
        "chase", ["population.members=3", "population.ranges={agent.ppo.lr: [1e-4, 1e-3]}"]
    )
    assert cfg.population.members == 3
    assert flat_settings(cfg)["agent.ppo.lr"] == pytest.approx(3e-4)
    with pytest.raises(ConfigError, match="agent.ppo.foo"):
        load_config("chase", ["population.ranges={agent.ppo.foo: [1, 2]}"])
    with pytest.raises(ConfigError, match="p_cross \\+ p_past"):
        load_config("chase", ["population.p_cross=0.8", "population.p_past=0.5"])
    with pytest.raises(ConfigError, match="cannot be searched"):
        load_config("chase", ["population.ranges={seed: [0, 10]}"])


def test_manifest_round_trip(tmp_path):
    members = {"m0": Member(0, 7, {"agent.ppo.lr": 3e-4}, version=10, exploits=1)}
    save_manifest(
        tmp_path / "population.json",
        {
            "format": 1,
            "members": {n: vars(m) | {"games": 4} for n, m in members.items()},
            "next_index": 1,
            "rng": {},
        },
    )
    path = tmp_path / "population.json"
    assert members_from_manifest(path, load_manifest(path)) == members
    with pytest.raises(ValueError, match="manifest lacks next_index, members.m1.seed"):
        members_from_manifest(path, {"members": {"m1": {"index": 1, "hyper": {}}}, "rng": {}})
    (tmp_path / "bad.json").write_text(json.dumps({"format": 99}))
    with pytest.raises(ValueError, match="format 99"):
        load_manifest(tmp_path / "bad.json")
    with pytest.raises(ValueError, match="not a population run"):
        load_manifest(tmp_path / "none.json")
