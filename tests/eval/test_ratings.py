"""Ratings: openskill updates per (policy, role), storage in the pool index, leaderboard."""

import math
import multiprocessing as mp

import pytest
import torch

from hns_train.agents.pool import PolicyPool, PoolConfig
from hns_train.agents.pool_index import PRIOR_MU, PRIOR_SIGMA
from hns_train.envs.config import make_config
from hns_train.envs.game import HideAndSeekGame
from hns_train.eval.matches import FixedController, ScriptedSeeker, play_matches
from hns_train.eval.ratings import DRAW_MARGIN, FIXED_SIGMA, Rating, Ratings, win_probability
from tests.rated import Rated


def test_scripted_seeker_rated_above_random_after_matches(tmp_path):
    ratings = Ratings(tmp_path / "pool")
    game = HideAndSeekGame(make_config("chase"), n_worlds=12, seed=0)
    seekers = [ScriptedSeeker(), FixedController("random", 1)]
    hiders = [FixedController("random", 2), FixedController("noop")]
    played = 0
    for k, hider in enumerate(hiders):
        for seeker in seekers:
            played += ratings.record(play_matches(game, hider, seeker, seed=100 * k))
    assert played == 48 and len(ratings.matches()) == 48

    board = ratings.leaderboard("seeker")
    assert [r.policy for r in board] == ["scripted_seeker", "random"]
    strong, weak = board
    # Separated beyond their uncertainty, not just in the mean.
    assert strong.conservative > weak.mu
    assert strong.games == weak.games == 24
    assert strong.sigma < PRIOR_SIGMA
    text = ratings.format_leaderboard("seeker")
    assert text.index("scripted_seeker") < text.index("random")


def test_record_directions_draws_and_storage(tmp_path):
    ratings = Ratings(tmp_path / "pool")
    assert ratings.record([Rated(10, "latest", 0.9, {"hider_return": 30.0, "extra": 1})]) == 1
    hider, seeker = ratings.get(10, "hider"), ratings.get("latest", "seeker")
    assert hider.mu > PRIOR_MU > seeker.mu
    assert hider.sigma < PRIOR_SIGMA and hider.games == 1
    assert (hider.policy, hider.role, seeker.role) == ("10", "hider", "seeker")
    assert ratings.get(10, "seeker").games == 0  # the other role is untouched

    # Inside the draw band the two equal-rated fresh policies keep equal means.
    ratings.record([Rated("noop", "random", 0.5 + DRAW_MARGIN / 2)])
    assert ratings.get("noop", "hider").mu == pytest.approx(ratings.get("random", "seeker").mu)
    ratings.record([Rated("noop", "random", 0.1)])  # seekers win
    assert ratings.get("random", "seeker").mu > ratings.get("noop", "hider").mu

    row = ratings.matches(limit=1)[0]
    assert (row["hider"], row["seeker"], row["hider_score"]) == ("noop", "random", 0.1)
    first = ratings.matches()[-1]
    assert first["hider_return"] == 30.0 and first["stats"] == {"hider_return": 30.0, "extra": 1}

    # Mixed team: each distinct member is rated in the team's role.
    ratings.record([Rated([10, 20, 20], "latest", 1.0)])
    assert ratings.matches(limit=1)[0]["hider"] == "10,20"
    assert (ratings.get(10, "hider").games, ratings.get(20, "hider").games) == (2, 1)

    for bad, match in (
        (lambda: ratings.record([Rated(1, 2, 1.5)]), "hider_score"),
        (lambda: ratings.record([Rated([], 2, 0.5)]), "empty"),
        (lambda: ratings.record([Rated("Not Valid", 2, 0.5)]), "policy id"),
        (lambda: ratings.get(1, "referee"), "role"),
    ):
        with pytest.raises(ValueError, match=match):
            bad()


def test_resume_keeps_ratings_and_pool_index_shows_them(tmp_path):
    pool = PolicyPool(tmp_path / "pool", PoolConfig(snapshot_every=10))
    pool.add_snapshot(10, {"w": torch.zeros(1)})
    ratings = Ratings(pool)
    for _ in range(3):
        ratings.record([Rated(10, "random", 1.0)])
    ratings.record([Rated("noop", 10, 0.0)])
    before = ratings.leaderboard()
    ratings.close()
    pool.close()

    reopened_pool = PolicyPool(tmp_path / "pool", PoolConfig(snapshot_every=10))
    reopened = Ratings(reopened_pool)
    assert reopened.leaderboard() == before
    info = reopened_pool.conn.execute("SELECT * FROM pool_index WHERE version = 10").fetchone()
    assert info["games"] == 4
    assert info["hider_mu"] == reopened.get(10, "hider").mu > PRIOR_MU
    assert info["seeker_mu"] == reopened.get(10, "seeker").mu > PRIOR_MU
    # The pool's rating-prioritised sampler reads the same numbers.
    versions, probs = reopened_pool.candidate_probabilities("hider")
    assert list(versions) == [10] and probs[0] == 1.0


def _rate_many(folder: str, n: int, ready) -> None:
    ratings = Ratings(folder)
    ready.set()  # imports done: start writing together with the parent
    for _ in range(n):
        ratings.record([Rated("random", "noop", 1.0)])
    ratings.close()


def test_concurrent_updates_are_not_lost(tmp_path):
    folder = tmp_path / "pool"
    ratings = Ratings(folder)
    ctx = mp.get_context("spawn")
    ready = ctx.Event()
    proc = ctx.Process(target=_rate_many, args=(str(folder), 100, ready))
    proc.start()
    assert ready.wait(60)
    for _ in range(100):
        ratings.record([Rated("random", "noop", 1.0)])
    proc.join(60)
    assert proc.exitcode == 0
    # Every read-modify-write counted: no update overwrote another one.
    assert ratings.get("random", "hider").games == 200
    assert ratings.get("noop", "seeker").games == 200
    assert len(ratings.matches()) == 200


def test_fixed_anchor_is_never_rerated(tmp_path):
    folder = tmp_path / "league"
    ratings = Ratings(folder, fixed={"untrained"})
    assert ratings.fixed == frozenset({"untrained"})
    anchor = ratings.get("untrained", "seeker")
    assert (anchor.mu, anchor.sigma, anchor.games) == (PRIOR_MU, FIXED_SIGMA, 0)
    assert ratings.get("m0", "hider").sigma == PRIOR_SIGMA  # others read the ordinary prior

    for _ in range(5):
        ratings.record([Rated("m0", "untrained", 0.9)])
        assert ratings.get("untrained", "seeker") == anchor  # unchanged
    ratings.record([Rated("untrained", ["m0", "m1"], 0.0)])  # anchor hider loses to a mixed team
    ratings.record([Rated("untrained", "m1", 1.0)])
    stored = {r[0] for r in ratings.conn.execute("SELECT policy FROM ratings").fetchall()}
    assert stored == {"m0", "m1"}  # no row for the anchor
    assert ratings.get("untrained", "seeker") == anchor
    assert ratings.get("untrained", "hider") == Rating("untrained", "hider", PRIOR_MU, 1.0, 0)
    m0 = ratings.get("m0", "hider")
    assert m0.mu > PRIOR_MU and m0.games == 5
    m0, m1 = ratings.get("m0", "seeker"), ratings.get("m1", "seeker")
    assert (m0.games, m1.games) == (1, 2)  # the mixed team's win, and m1's loss to the anchor
    assert m1.mu < PRIOR_MU < m0.mu
    assert len(ratings.matches()) == 7
    # The leaderboard shows the anchor in each role it is asked for.
    assert [r.policy for r in ratings.leaderboard("seeker")].count("untrained") == 1
    assert {(r.policy, r.role) for r in ratings.leaderboard()} >= {
        ("untrained", "hider"),
        ("untrained", "seeker"),
    }

    # Without `fixed`, the same policy is an ordinary one: it gets a row (prior sigma) and moves.
    plain = Ratings(folder)
    plain.record([Rated("m0", "untrained", 0.9)])
    seeker = plain.get("untrained", "seeker")
    assert seeker.sigma < PRIOR_SIGMA and seeker.mu < PRIOR_MU
    # With `fixed` again, the stored row is what the anchor reads as, and it stays as stored.
    again = Ratings(folder, fixed=["untrained"])
    again.record([Rated("m1", "untrained", 1.0)])
    assert again.get("untrained", "seeker") == plain.get("untrained", "seeker") == seeker

    for bad, match in ((lambda: Ratings(folder, fixed="untrained"), "collection of policy ids"),
                       (lambda: Ratings(folder, fixed={"Un Trained"}), "policy id")):  # fmt: skip
        with pytest.raises(ValueError, match=match):
            bad()


def test_an_anchor_moves_the_other_team_more_than_an_unrated_opponent(tmp_path):
    """A confident anchor is a known reference: beating it is evidence about the winner alone."""
    with_anchor = Ratings(tmp_path / "a", fixed={"untrained"})
    without = Ratings(tmp_path / "b")
    for ratings in (with_anchor, without):
        ratings.record([Rated("m0", "untrained", 1.0)])
    a, b = with_anchor.get("m0", "hider"), without.get("m0", "hider")
    assert a.mu > b.mu > PRIOR_MU


def test_win_probability():
    def rating(mu, sigma=PRIOR_SIGMA):
        return Rating("x", "hider", mu, sigma, 0)

    assert win_probability(rating(PRIOR_MU), rating(PRIOR_MU)) == pytest.approx(0.5)
    beta = PRIOR_SIGMA / 2  # openskill's default beta: 25/6
    for a, b in (
        (rating(30.0, 2.0), rating(25.0, 1.0)),
        (rating(18.0), rating(27.0, 4.0)),
        (rating(40.0, 1.0), rating(25.0, 1.0)),
    ):
        p = win_probability(a, b)
        assert p + win_probability(b, a) == pytest.approx(1.0)
        z = (a.mu - b.mu) / math.sqrt(2 * beta**2 + a.sigma**2 + b.sigma**2)
        assert p == pytest.approx(0.5 * (1 + math.erf(z / math.sqrt(2))))
    assert win_probability(rating(45.0, 1.0), rating(25.0, 1.0)) > 0.9
    assert win_probability(rating(25.0, 1.0), rating(45.0, 1.0)) < 0.1
    # Uncertainty pulls the probability towards 0.5.
    assert win_probability(rating(35.0, 1.0), rating(25.0, 1.0)) > win_probability(
        rating(35.0, 8.0), rating(25.0, 8.0)
    )


def test_league_rates_a_round_and_its_predictions_agree(tmp_path):
    """A population's league plays a member against the untrained anchor in every world, rates
    each match, and its two predictions read the same ratings: `beats` compares a role with
    itself, `p_win` a role with the other."""
    from hns_train.config import load_config
    from hns_train.eval.league import League

    cfg = load_config("configs/smoke.yaml", ["game.preset=chase", "population.league_worlds=2"])
    league = League(tmp_path / "league", cfg, seed=3)
    member = dict(league.untrained)
    results = league.play("m0", "seeker", member, "untrained")
    assert len(results) == 2 and {r.seeker for r in results} == {"m0"}
    assert league.ratings.games("m0") == 2 and league.ratings.get("m0", "seeker").games == 2
    roles = ("hider", "seeker")
    assert league.beats("m0", "untrained", roles) + league.beats(
        "untrained", "m0", roles
    ) == pytest.approx(1.0)
    seeker = win_probability(
        league.ratings.get("m0", "seeker"), league.ratings.get("untrained", "hider")
    )
    assert league.p_win("m0", "untrained", ["seeker"]) == pytest.approx(seeker)
    # An exploit: m1 takes over m0's ratings, with no games of its own yet.
    league.ratings.copy_rating("m0", "m1")
    copied, source = league.ratings.get("m1", "seeker"), league.ratings.get("m0", "seeker")
    assert (copied.mu, copied.sigma, copied.games) == (source.mu, source.sigma, 0)
    assert league.ratings.games("m1") == 0 and league.ratings.get("m1", "hider").games == 0
    league.ratings.close()
