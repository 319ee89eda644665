"""Policy pool: snapshots and their SQLite index, sampling rules, cache, resume, concurrency."""

import multiprocessing as mp
import sqlite3

import numpy as np
import pytest
import torch

from hns_train.agents import ActorCritic, NetworkConfig, obs_shapes
from hns_train.agents.pool import (
    LATEST,
    PolicyPool,
    PoolConfig,
    SnapshotCache,
    TeamControllers,
    policy_key,
)
from hns_train.agents.pool_index import PRIOR_MU, open_index, transaction
from hns_train.agents.synthetic import random_observations

SHAPES = obs_shapes(n_other_agents=1, n_boxes=0, n_ramps=0, lidar_rays=0)
SMALL = NetworkConfig(embed_dim=8, attention_heads=2, dense_dim=8, lstm_dim=8)


def tiny_state(value: float) -> dict[str, torch.Tensor]:
    return {"w": torch.full((2,), value), "b": torch.zeros(1)}


def pool_with(tmp_path, n: int, **config) -> PolicyPool:
    pool = PolicyPool(tmp_path / "pool", PoolConfig(snapshot_every=10, **config))
    for i in range(1, n + 1):
        pool.add_snapshot(10 * i, tiny_state(i), frames=100 * i, episodes=i)
    return pool


def set_rating(pool: PolicyPool, version: int, role: str, mu: float) -> None:
    with transaction(pool.conn):
        pool.conn.execute(
            "INSERT OR REPLACE INTO ratings VALUES (?, ?, ?, ?, ?, ?)",
            (policy_key(version), role, mu, 1.0, 3, 0.0),
        )


def draw_counts(pool: PolicyPool, n: int, seed: int = 0) -> dict:
    rng = np.random.default_rng(seed)
    counts: dict = {}
    for _ in range(n):
        tc = pool.draw(rng)
        counts[(tc.hiders, tc.seekers)] = counts.get((tc.hiders, tc.seekers), 0) + 1
    return counts


def chi_square_ok(observed: np.ndarray, probs: np.ndarray) -> bool:
    """Pearson chi-square below the 99.9% quantile (Wilson-Hilferty approximation)."""
    expected = observed.sum() * probs
    stat = float(((observed - expected) ** 2 / expected).sum())
    k = len(probs) - 1
    z = 3.09  # 99.9% one-sided normal quantile
    critical = k * (1 - 2 / (9 * k) + z * np.sqrt(2 / (9 * k))) ** 3
    return stat < critical


def test_snapshots_index_and_weights_round_trip(tmp_path):
    pool = PolicyPool(tmp_path / "pool", PoolConfig(snapshot_every=5))
    torch.manual_seed(0)
    model = ActorCritic(SHAPES, SMALL, device="cpu")
    assert not pool.maybe_add(3, model.state_dict())  # not a multiple of snapshot_every
    assert pool.maybe_add(5, model.state_dict(), frames=1000, episodes=12)
    assert not pool.maybe_add(5, model.state_dict())  # already stored
    assert pool.versions() == [5] and pool.latest_version() == 5
    assert pool.maybe_add(0, model.state_dict())  # the untrained policy is kept for cross-play
    assert pool.versions() == [0, 5] and pool.latest_version() == 5
    info = pool.snapshot_info(5)
    assert (info.frames, info.episodes, info.games, info.hider_mu) == (1000, 12, 0, None)
    assert info.path.exists()

    clone = ActorCritic(SHAPES, SMALL, device="cpu")
    clone.load_state_dict(pool.load_snapshot(5))
    obs = random_observations(SHAPES, (4,), np.random.default_rng(0))
    np.testing.assert_array_equal(
        model.act(obs, deterministic=True).values, clone.act(obs, deterministic=True).values
    )
    with pytest.raises(ValueError, match="no snapshot of version 6"):
        pool.load_snapshot(6)


def test_team_controllers_parse_and_reject_controller_ids():
    assert TeamControllers("7", "latest") == TeamControllers(hiders=7, seekers=LATEST)
    with pytest.raises(ValueError, match="hiders controller"):
        TeamControllers(hiders="scripted_seeker")
    with pytest.raises(ValueError, match="snapshot version must be >= 0"):
        TeamControllers(hiders=-1)
    with pytest.raises(ValueError, match="policy id"):
        TeamControllers(hiders="Bad Name")


def test_empty_pool_and_p_latest(tmp_path):
    pool = PolicyPool(tmp_path / "pool", PoolConfig(p_latest=0.5, p_random=0.0, p_noop=0.0))
    # No snapshot yet: every draw falls back to self-play.
    assert draw_counts(pool, 200) == {(LATEST, LATEST): 200}
    pool.add_snapshot(100, tiny_state(1.0))
    counts = draw_counts(pool, 4000)
    assert set(counts) == {(LATEST, LATEST), (100, LATEST), (LATEST, 100)}
    observed = np.array([counts[(LATEST, LATEST)], counts[(100, LATEST)], counts[(LATEST, 100)]])
    assert chi_square_ok(observed, np.array([0.5, 0.25, 0.25]))


@pytest.mark.parametrize("rule", ["uniform", "recency", "rating"])
def test_sampling_frequencies_follow_the_rule(tmp_path, rule):
    pool = pool_with(
        tmp_path, 5, p_latest=0.0, p_random=0.1, p_noop=0.2, rule=rule,
        recency_half_life=1.5, rating_temperature=2.0,
    )  # fmt: skip
    # Seeker ratings rise with version, hider ratings fall: the rule must use the role played.
    for i, version in enumerate(pool.versions()):
        set_rating(pool, version, "seeker", PRIOR_MU + 2.0 * i)
        set_rating(pool, version, "hider", PRIOR_MU - 2.0 * i)
    versions = np.array(pool.versions())
    ages = np.arange(4, -1, -1)
    expected_weights = {
        "uniform": {"hider": np.ones(5), "seeker": np.ones(5)},
        "recency": {"hider": 0.5 ** (ages / 1.5), "seeker": 0.5 ** (ages / 1.5)},
        "rating": {
            "hider": np.exp(-2.0 * np.arange(5) / 2.0),
            "seeker": np.exp(2.0 * np.arange(5) / 2.0),
        },
    }[rule]

    n = 20000
    counts = draw_counts(pool, n, seed=1)
    assert (LATEST, LATEST) not in counts  # p_latest = 0
    for role in ("hider", "seeker"):
        got_versions, probs = pool.candidate_probabilities(role)
        weights = expected_weights[role]
        np.testing.assert_allclose(probs, weights / weights.sum(), rtol=1e-9)
        np.testing.assert_array_equal(got_versions, versions)

        def key(opp, role=role):
            return (opp, LATEST) if role == "hider" else (LATEST, opp)

        # Per role: fixed opponents with p_random / p_noop, snapshots with the rule's weights.
        observed = np.array(
            [counts.get(key("random"), 0), counts.get(key("noop"), 0)]
            + [counts.get(key(int(v)), 0) for v in versions]
        )
        expected = np.concatenate([[0.1, 0.2], 0.7 * weights / weights.sum()])
        assert chi_square_ok(observed, expected), (role, observed, expected * observed.sum())
    n_hider = sum(c for (h, _), c in counts.items() if h != LATEST)
    assert abs(n_hider / n - 0.5) < 4 * np.sqrt(0.25 / n)


def test_rating_rule_prefers_stronger_opponents(tmp_path):
    pool = pool_with(tmp_path, 3, rule="rating", rating_temperature=5.0)
    set_rating(pool, 10, "seeker", 40.0)
    set_rating(pool, 30, "seeker", 10.0)  # 20 stays unrated: the prior mu 25
    versions, probs = pool.candidate_probabilities("seeker")
    assert list(versions) == [10, 20, 30]
    assert probs[0] > probs[1] > probs[2]
    np.testing.assert_allclose(probs[0] / probs[1], np.exp((40.0 - PRIOR_MU) / 5.0))


def test_resume_keeps_snapshots_and_ratings(tmp_path):
    pool = pool_with(tmp_path, 3)
    set_rating(pool, 20, "hider", 31.5)
    pool.close()
    # A crash after writing a snapshot file but before indexing it, and a lost file.
    other = PolicyPool(tmp_path / "side", PoolConfig())
    other.add_snapshot(40, tiny_state(4.0), frames=400, episodes=4)
    (tmp_path / "side" / "snapshot_0000000040.pt").rename(
        tmp_path / "pool" / "snapshot_0000000040.pt"
    )
    (tmp_path / "pool" / "snapshot_0000000010.pt").unlink()

    reopened = PolicyPool(tmp_path / "pool", PoolConfig(snapshot_every=10))
    assert reopened.versions() == [20, 30, 40]
    assert reopened.snapshot_info(40).frames == 400
    assert reopened.snapshot_info(20).hider_mu == 31.5
    assert torch.equal(reopened.load_snapshot(30)["w"], torch.full((2,), 3.0))


def test_snapshot_cache_is_lru(tmp_path):
    pool = pool_with(tmp_path, 3)
    cache = SnapshotCache(pool, size=2)
    assert torch.equal(cache.get(10)["w"], torch.full((2,), 1.0))
    cache.get(20)
    cache.get(10)  # 10 is now the most recent
    cache.get(30)  # evicts 20
    assert cache.cached_versions() == [10, 30]
    assert (cache.hits, cache.misses) == (1, 3)
    with pytest.raises(ValueError, match="size"):
        SnapshotCache(pool, 0)


def test_snapshot_cache_builds_once_per_load(tmp_path):
    """The policy worker's cache holds built models: a cached version is neither read from
    disk nor built again, and every read shows in `misses`."""
    pool = pool_with(tmp_path, 3)
    built = []
    cache = SnapshotCache(pool, size=3, build=lambda state: built.append(state) or len(built))
    assert [cache.get(v) for v in (10, 20, 10, 30, 20)] == [1, 2, 1, 3, 2]
    assert cache.misses == len(built) == 3
    cache.get(10)  # a size-3 cache holds all three
    assert cache.misses == 3
    with pytest.raises(ValueError, match="snapshot_cache"):
        PoolConfig(snapshot_cache=0)


def _add_matches(folder: str, count: int, ready) -> None:
    conn = open_index(f"{folder}/pool.sqlite")
    ready.set()  # imports done: start writing together with the parent
    for i in range(count):
        with transaction(conn):
            conn.execute(
                "INSERT INTO matches (time, hider, seeker, hider_score) VALUES (?, ?, ?, ?)",
                (float(i), "random", "noop", 0.5),
            )
    conn.close()


def test_concurrent_writers_lose_nothing(tmp_path):
    """Snapshots from this process while another process writes match rows (WAL mode)."""
    pool = PolicyPool(tmp_path / "pool", PoolConfig(snapshot_every=1))
    mode = pool.conn.execute("PRAGMA journal_mode").fetchone()[0]
    assert mode == "wal"
    ctx = mp.get_context("spawn")
    ready = ctx.Event()
    proc = ctx.Process(target=_add_matches, args=(str(tmp_path / "pool"), 300, ready))
    proc.start()
    assert ready.wait(60)
    for v in range(1, 21):
        pool.add_snapshot(v, tiny_state(float(v)))
    proc.join(60)
    assert proc.exitcode == 0
    assert pool.versions() == list(range(1, 21))
    rows = sqlite3.connect(tmp_path / "pool" / "pool.sqlite").execute(
        "SELECT COUNT(*) FROM matches"
    )
    assert rows.fetchone()[0] == 300


def test_config_validation():
    with pytest.raises(ValueError, match="rule"):
        PoolConfig(rule="elo")
    with pytest.raises(ValueError, match="p_latest"):
        PoolConfig(p_latest=1.5)
    with pytest.raises(ValueError, match="p_random \\+ p_noop"):
        PoolConfig(p_random=0.6, p_noop=0.6)
    with pytest.raises(ValueError, match="unknown PoolConfig fields"):
        PoolConfig.from_dict({"snapshot_evry": 3})
    assert PoolConfig.from_dict({"rule": "uniform"}).rule == "uniform"


def test_opponent_role_fixes_which_team_the_opponent_plays(tmp_path):
    config = PoolConfig(p_latest=0.0, p_random=1.0, p_noop=0.0, opponent_role="hider")
    rng = np.random.default_rng(0)
    with PolicyPool(tmp_path / "pool", config) as pool:
        draws = {pool.draw(rng) for _ in range(200)}
    assert draws == {TeamControllers(hiders="random", seekers="latest")}
    with pytest.raises(ValueError, match="opponent_role"):
        PoolConfig(opponent_role="both")
