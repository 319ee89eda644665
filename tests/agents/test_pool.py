"""Policy pool: snapshots and their SQLite index, sampling rules, cache, resume, concurrency."""

import multiprocessing as mp
import sqlite3
import time

import numpy as np
import pytest
import torch

from hns_train.agents import ActorCritic, NetworkConfig
from hns_train.agents.checkpoint import save_checkpoint
from hns_train.agents.opponents import LATEST as WIRE_LATEST
from hns_train.agents.opponents import (
    NOOP,
    RANDOM,
    Snapshots,
    code_of,
    fixed_actions,
    noop_action,
)
from hns_train.agents.pod import OpponentSlots
from hns_train.agents.pool import (
    GUEST_BASE,
    LATEST,
    PolicyPool,
    PoolConfig,
    SnapshotCache,
    TeamControllers,
    policy_key,
)
from hns_train.agents.pool_index import PRIOR_MU, open_index, transaction
from hns_train.envs.config import make_config
from hns_train.envs.contract import observation_shapes
from hns_train.typed_config import from_dict
from tests.synthetic import random_observations

SHAPES = observation_shapes(make_config("chase", n_lidar=0))
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
    assert pool.versions() == [5]
    assert pool.maybe_add(0, model.state_dict())  # the untrained policy is kept for cross-play
    assert pool.versions() == [0, 5]
    row = pool.conn.execute(
        "SELECT frames, episodes, games, hider_mu FROM pool_index WHERE version = 5"
    ).fetchone()
    assert tuple(row) == (1000, 12, 0, None)
    assert pool.path_for(5).exists()

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
    rows = reopened.conn.execute("SELECT version, frames, hider_mu FROM pool_index").fetchall()
    index = {version: (frames, hider_mu) for version, frames, hider_mu in rows}
    assert index[40][0] == 400 and index[20][1] == 31.5  # 40 indexed from its file
    assert torch.equal(reopened.load_snapshot(30)["w"], torch.full((2,), 3.0))


def test_a_file_that_is_not_an_index_leaves_no_connection_open(tmp_path, monkeypatch):
    bad = tmp_path / "pool.sqlite"
    bad.write_bytes(b"this is not a database" * 100)
    opened = []
    connect = sqlite3.connect

    def recording_connect(*args, **kwargs):
        opened.append(connect(*args, **kwargs))
        return opened[-1]

    monkeypatch.setattr(sqlite3, "connect", recording_connect)
    with pytest.raises(sqlite3.DatabaseError, match="not a database"):
        open_index(bad)
    assert len(opened) == 1
    with pytest.raises(sqlite3.ProgrammingError, match="closed"):
        opened[0].execute("SELECT 1")


def test_snapshot_cache_is_lru(tmp_path):
    pool = pool_with(tmp_path, 3)
    cache = SnapshotCache(pool, size=2)
    assert torch.equal(cache.get(10)["w"], torch.full((2,), 1.0))
    cache.get(20)
    cache.get(10)  # 10 is now the most recent
    cache.get(30)  # evicts 20
    assert cache.misses == 3
    cache.get(10)
    cache.get(30)
    assert cache.misses == 3  # both held
    cache.get(20)  # evicted: read again
    assert cache.misses == 4
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


def test_a_missing_or_broken_snapshot_is_counted_and_not_read_again(tmp_path):
    """The pod's and the policy worker's rule: the caller lets the latest play such a code."""
    pool = pool_with(tmp_path, 4)
    pool.path_for(20).write_bytes(b"not a checkpoint")
    # a sound checkpoint file without weights to play: a training checkpoint copied in
    save_checkpoint(pool.path_for(40), {"optimizer": {"step": 3}}, {"version": 40})
    snapshots = Snapshots(SnapshotCache(pool, size=2))
    assert torch.equal(snapshots.get(10)["w"], torch.full((2,), 1.0))
    assert snapshots.get(20) is None and snapshots.get(99) is None
    assert snapshots.get(40) is None and "no policy weights" in snapshots.why(40)
    assert "99" in snapshots.why(99) and snapshots.why(20)
    misses = snapshots.cache.misses
    assert snapshots.get(20) is None and snapshots.get(99) is None
    assert snapshots.unusable == 5 and snapshots.cache.misses == misses
    assert torch.equal(snapshots.get(30)["w"], torch.full((2,), 3.0))


def test_fixed_opponents_act_by_code():
    rng = np.random.default_rng(0)
    assert (fixed_actions(NOOP, 3, rng) == noop_action()).all()
    random = fixed_actions(RANDOM, 200, rng)
    assert random.shape == (200, 5) and len(np.unique(random[:, 0])) > 1
    with pytest.raises(ValueError, match="not a fixed opponent"):
        fixed_actions(WIRE_LATEST, 3, rng)


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
        from_dict(PoolConfig, {"snapshot_evry": 3})
    assert from_dict(PoolConfig, {"rule": "uniform"}).rule == "uniform"


def test_opponent_role_fixes_which_team_the_opponent_plays(tmp_path):
    config = PoolConfig(p_latest=0.0, p_random=1.0, p_noop=0.0, opponent_role="hider")
    rng = np.random.default_rng(0)
    with PolicyPool(tmp_path / "pool", config) as pool:
        draws = {pool.draw(rng) for _ in range(200)}
    assert draws == {TeamControllers(hiders="random", seekers="latest")}
    with pytest.raises(ValueError, match="opponent_role"):
        PoolConfig(opponent_role="both")


# ----- guests -----


def guest_pool(tmp_path, **config) -> PolicyPool:
    """Two snapshots (10, 20) and guests: cross c1 (hider 1, seeker 3), cross c2 (hider 2,
    seeker 0), past p1 (1, 1)."""
    pool = pool_with(tmp_path, 2, **config)
    pool.add_guest("c1", "cross", tiny_state(101.0), hider_weight=1.0, seeker_weight=3.0)
    pool.add_guest("c2", "cross", tiny_state(102.0), hider_weight=2.0, seeker_weight=0.0)
    pool.add_guest("p1", "past", tiny_state(201.0))
    return pool


def test_guest_ids_replacement_and_file_rule(tmp_path):
    pool = guest_pool(tmp_path)
    c1, c2, p1 = (g.id for g in pool.guests())
    assert (c1, c2, p1) == (GUEST_BASE, GUEST_BASE + 1, GUEST_BASE + 2)
    info = {g.name: g for g in pool.guests()}
    assert (info["c1"].kind, info["c1"].hider_weight, info["c1"].seeker_weight) == ("cross", 1, 3)
    assert info["p1"].path == tmp_path / "pool" / f"guest_{p1}.pt" and info["p1"].path.exists()
    # Guests are not snapshots: no listing or snapshot rule sees them.
    assert pool.versions() == [10, 20]
    assert list(pool.candidate_probabilities("hider")[0]) == [10, 20]

    # Replacing by name: a new id each time; the replaced file stays until replaced twice.
    second = pool.add_guest("c1", "cross", tiny_state(111.0), hider_weight=5.0)
    assert second == p1 + 1
    assert [(g.name, g.id) for g in pool.guests()] == [("c2", c2), ("p1", p1), ("c1", second)]
    assert torch.equal(pool.load_snapshot(c1)["w"], torch.full((2,), 101.0))  # still loadable
    third = pool.add_guest("c1", "past", tiny_state(121.0))
    assert third == second + 1 and pool.guests()[-1].kind == "past"
    assert not pool.guest_path(c1).exists()
    assert pool.guest_path(second).exists() and pool.guest_path(third).exists()
    with pytest.raises(ValueError, match=f"no guest with id {c1}"):
        pool.load_snapshot(c1)
    assert torch.equal(pool.load_snapshot(second)["w"], torch.full((2,), 111.0))
    assert torch.equal(pool.load_snapshot(third)["w"], torch.full((2,), 121.0))
    assert sorted(p.name for p in (tmp_path / "pool").glob("guest_*.pt")) == sorted(
        f"guest_{i}.pt" for i in (c2, p1, second, third)
    )

    # Removing the newest guest does not free its id; its files stay (a process may load one).
    assert pool.remove_guest("c1") and not pool.remove_guest("c1")
    assert [g.name for g in pool.guests()] == ["c2", "p1"]
    assert pool.guest_path(third).exists()
    assert pool.add_guest("m1.400", "past", tiny_state(3.0)) == third + 1

    pool.set_guest_weights("c2", 0.5, 4.0)
    assert (pool.guests()[0].hider_weight, pool.guests()[0].seeker_weight) == (0.5, 4.0)
    with pytest.raises(ValueError, match="no guest named 'zz'.*'c2'"):
        pool.set_guest_weights("zz", 1.0, 1.0)


def test_guest_input_is_checked(tmp_path):
    pool = PolicyPool(tmp_path / "pool")
    for name in ("M1", "1", "latest", "random", "", 7, "m" * 65):
        with pytest.raises(ValueError, match="guest name"):
            pool.add_guest(name, "cross", tiny_state(1.0))
    with pytest.raises(ValueError, match="guest kind must be one of"):
        pool.add_guest("m1", "future", tiny_state(1.0))
    for bad in (-1.0, float("nan"), float("inf")):
        with pytest.raises(ValueError, match="hider_weight must be a finite number >= 0"):
            pool.add_guest("m1", "cross", tiny_state(1.0), hider_weight=bad)
        with pytest.raises(ValueError, match="seeker_weight"):
            pool.set_guest_weights("m1", 1.0, bad)
    assert pool.guests() == [] and not list((tmp_path / "pool").glob("guest_*"))
    with pytest.raises(ValueError, match="guest kind"):
        pool.guest_probabilities("self", "hider")
    for kwargs, match in (
        ({"p_cross": 1.5}, "p_cross=1.5 is not allowed; it must be >= 0 and <= 1"),
        ({"p_past": -0.1}, "p_past=-0.1 is not allowed"),
        ({"p_cross": 0.6, "p_past": 0.5}, "p_cross \\+ p_past must be <= 1"),
    ):
        with pytest.raises(ValueError, match=match):
            PoolConfig(**kwargs)


def test_guests_in_old_pool_files_and_on_reopen(tmp_path):
    pool = pool_with(tmp_path, 2)
    with transaction(pool.conn):  # a pool file from before guests existed
        pool.conn.execute("DROP TABLE guests")
        pool.conn.execute("DROP TABLE guest_files")
    pool.close()
    old = PolicyPool(tmp_path / "pool", PoolConfig(snapshot_every=10))
    assert old.guests() == [] and old.versions() == [10, 20]
    gid = old.add_guest("m1", "cross", tiny_state(7.0), hider_weight=0.0)
    old.close()
    # Reopening keeps the guest and does not index its file as a snapshot.
    reopened = PolicyPool(tmp_path / "pool", PoolConfig(snapshot_every=10))
    assert [(g.id, g.name, g.hider_weight) for g in reopened.guests()] == [(gid, "m1", 0.0)]
    assert reopened.versions() == [10, 20]
    assert torch.equal(reopened.load_snapshot(gid)["w"], torch.full((2,), 7.0))
    # A guest whose file has gone is dropped on open, like a snapshot.
    reopened.close()
    (tmp_path / "pool" / f"guest_{gid}.pt").unlink()
    assert PolicyPool(tmp_path / "pool").guests() == []


def test_another_pool_object_sees_guests_after_its_refresh(tmp_path):
    writer = pool_with(tmp_path, 1)
    stale = PolicyPool(tmp_path / "pool", PoolConfig(index_refresh_s=3600.0))
    fresh = PolicyPool(tmp_path / "pool", PoolConfig(index_refresh_s=0.05))
    for reader in (stale, fresh):
        assert len(reader.guest_probabilities("cross", "hider")[0]) == 0  # cached: no guests
    gid = writer.add_guest("m1", "cross", tiny_state(1.0))
    assert [g.id for g in stale.guests()] == [gid]  # the table is shared at once ...
    assert len(stale.guest_probabilities("cross", "hider")[0]) == 0  # ... the sampler's copy not
    time.sleep(0.1)  # longer than fresh's index_refresh_s
    assert list(fresh.guest_probabilities("cross", "hider")[0]) == [gid]
    assert torch.equal(SnapshotCache(fresh).get(gid)["w"], torch.full((2,), 1.0))


def _draw_key(tc: TeamControllers):
    return (tc.hiders, tc.seekers)


def test_guest_draw_frequencies_follow_p_cross_p_past_and_role_weights(tmp_path):
    pool = guest_pool(
        tmp_path, p_cross=0.3, p_past=0.2, p_latest=0.5, p_random=0.0, p_noop=0.0,
        rule="uniform",
    )  # fmt: skip
    c1, c2, p1 = (g.id for g in pool.guests())
    n = 30000
    counts = draw_counts(pool, n, seed=2)
    h, s = 0.5, 0.5  # the opponent plays either team with equal probability
    expected = {
        # cross: hider weights 1:2, seeker weights 3:0
        (c1, LATEST): 0.3 * h / 3,
        (c2, LATEST): 0.3 * h * 2 / 3,
        (LATEST, c1): 0.3 * s,
        # past: the one past guest
        (p1, LATEST): 0.2 * h,
        (LATEST, p1): 0.2 * s,
        # the other half: today's draw (p_latest 0.5, else one of two snapshots, uniform)
        (LATEST, LATEST): 0.5 * 0.5,
        (10, LATEST): 0.5 * 0.5 * h / 2,
        (20, LATEST): 0.5 * 0.5 * h / 2,
        (LATEST, 10): 0.5 * 0.5 * s / 2,
        (LATEST, 20): 0.5 * 0.5 * s / 2,
    }
    assert set(counts) == set(expected)  # c2 never plays seeker: its seeker weight is 0
    keys = list(expected)
    observed = np.array([counts[k] for k in keys])
    probs = np.array([expected[k] for k in keys])
    assert abs(probs.sum() - 1.0) < 1e-12
    assert chi_square_ok(observed, probs), (observed, probs * n)

    # New weights reach the draw (this process changed them: no wait for the refresh).
    pool.set_guest_weights("c2", 0.0, 1.0)
    ids, p = pool.guest_probabilities("cross", "seeker")
    assert list(ids) == [c1, c2] and np.allclose(p, [0.75, 0.25])
    assert list(pool.guest_probabilities("cross", "hider")[0]) == [c1]


def test_guest_draw_obeys_opponent_role(tmp_path):
    pool = guest_pool(tmp_path, p_cross=1.0, opponent_role="seeker")
    c1 = pool.guests()[0].id
    # c2's seeker weight is 0, so c1 is the only cross guest that can play seeker.
    assert draw_counts(pool, 300) == {(LATEST, c1): 300}


def reference_draw(pool: PolicyPool, rng: np.random.Generator) -> TeamControllers:
    """The draw as it was before guests (the test's oracle for p_cross = p_past = 0)."""
    cfg = pool.config
    if rng.random() < cfg.p_latest:
        return TeamControllers(LATEST, LATEST)
    role = cfg.opponent_role if cfg.opponent_role != "any" else ("hider", "seeker")[rng.integers(2)]
    u = rng.random()
    if u < cfg.p_random:
        opponent = "random"
    elif u < cfg.p_random + cfg.p_noop:
        opponent = "noop"
    else:
        versions, probs = pool.candidate_probabilities(role)
        if len(versions) == 0:
            return TeamControllers(LATEST, LATEST)
        pick = int(np.searchsorted(np.cumsum(probs), rng.random(), side="right"))
        opponent = int(versions[min(pick, len(versions) - 1)])
    if role == "hider":
        return TeamControllers(hiders=opponent, seekers=LATEST)
    return TeamControllers(hiders=LATEST, seekers=opponent)


def test_without_p_cross_and_p_past_guests_change_no_draw(tmp_path):
    pool = guest_pool(tmp_path, p_latest=0.3, p_random=0.1, p_noop=0.1, rule="recency")
    ours, oracle = np.random.default_rng(9), np.random.default_rng(9)
    for _ in range(2000):
        assert pool.draw(ours) == reference_draw(pool, oracle)
    # Every random number as before: the generators are in the same state.
    assert ours.bit_generator.state == oracle.bit_generator.state


def test_guest_draw_falls_through_without_a_guest_of_its_kind(tmp_path):
    config = dict(p_latest=0.5, p_random=0.0, p_noop=0.0, rule="uniform")
    plain = draw_counts(pool_with(tmp_path / "a", 2, **config), 4000, seed=4)
    expected = np.array([0.5, 0.125, 0.125, 0.125, 0.125])
    keys = [(LATEST, LATEST), (10, LATEST), (20, LATEST), (LATEST, 10), (LATEST, 20)]
    assert chi_square_ok(np.array([plain[k] for k in keys]), expected)
    # p_cross = 1 with no cross guest that can be drawn (none, or only weight 0): today's draw.
    pool = pool_with(tmp_path / "b", 2, p_cross=1.0, **config)
    assert set(draw_counts(pool, 50)) <= set(keys)
    pool.add_guest("p1", "past", tiny_state(1.0))
    pool.add_guest("c0", "cross", tiny_state(1.0), hider_weight=0.0, seeker_weight=0.0)
    counts = draw_counts(pool, 4000, seed=4)
    assert set(counts) <= set(keys)
    assert chi_square_ok(np.array([counts.get(k, 0) for k in keys]), expected)


def test_guest_codes_reach_caches_opponent_slots_and_actors(tmp_path):
    torch.manual_seed(1)
    guest_model = ActorCritic(SHAPES, SMALL, device="cpu")
    pool = pool_with(tmp_path, 1, p_cross=1.0, opponent_role="hider")
    gid = pool.add_guest("m2", "cross", guest_model.state_dict())
    assert code_of(gid) == gid and TeamControllers(hiders=gid).hiders == gid
    cached = SnapshotCache(pool).get(gid)
    assert all(torch.equal(cached[k], v) for k, v in guest_model.state_dict().items())

    # A pod's opponent slots: the drawn guest plays from a slot holding its weights.
    slots = OpponentSlots(
        pool,
        lambda: ActorCritic(SHAPES, SMALL, device="cpu").eval(),
        n_slots=2,
        rng=np.random.default_rng(0),
        cache_size=4,
    )
    hider_code, seeker_code = slots.draw(np.zeros(2, np.int64))
    assert seeker_code == WIRE_LATEST and hider_code in (0, 1)
    assert slots.versions == {gid: hider_code}
    slot_state = slots.models[hider_code].state_dict()
    assert all(torch.equal(slot_state[k], v) for k, v in guest_model.state_dict().items())

    # Actors open the pool whenever it can draw an opponent, guests included (p_latest 1), and
    # send the drawn teams' codes.
    cfg = PoolConfig(p_latest=1.0, p_cross=1.0, opponent_role="hider")
    assert cfg.draws_opponents and not PoolConfig(p_latest=1.0).draws_opponents
    rng = np.random.default_rng(0)
    with PolicyPool(tmp_path / "pool", cfg) as actors_pool:
        teams = [actors_pool.draw(rng) for _ in range(20)]
    assert {(code_of(t.hiders), code_of(t.seekers)) for t in teams} == {(gid, WIRE_LATEST)}
