"""The game's task hook: a task's action filter, reward, returns and score reach the caller."""

from __future__ import annotations

import numpy as np
import pytest

from hns_train.envs import contract, tasks
from hns_train.envs.config import make_config
from hns_train.envs.game import HideAndSeekGame
from hns_train.envs.stats import STAT_KEYS
from hns_train.envs.vector import VectorGame


class _Probe(tasks.Task):
    """Reward 0.5 per step, forces the lock head to 0, scores the number of steps seen."""

    name = "blueprint"
    stat_names = ("probe",)

    def reset(self, worlds):
        super().reset(worlds)
        self.steps = np.zeros(self.game.n_worlds)

    def act(self, actions):
        actions[..., contract.LOCK] = 0
        self.last_actions = actions.copy()

    def reward(self, reward):
        reward[...] = 0.5
        self.steps += 1

    def score(self, worlds):
        return self.steps[worlds]

    def extra_stats(self, worlds):
        return {"probe": self.steps[worlds] * 2}


@pytest.fixture
def probe(monkeypatch):
    monkeypatch.setitem(tasks.TASK_MODULES, "blueprint", "tasks")
    monkeypatch.setitem(tasks.TASKS, "blueprint", _Probe)


def test_the_task_owns_reward_returns_and_score(probe):
    cfg = make_config("blueprint", horizon=6)
    game = HideAndSeekGame(cfg, n_worlds=2, seed=0)
    assert isinstance(game.task, _Probe)
    game.reset()
    actions = np.ones((2, game.n_agents, 5), dtype=np.int64)
    for _ in range(cfg.horizon):
        _, reward, truncated, infos = game.step(actions)
        assert np.all(reward == 0.5)
        assert np.all(game.task.last_actions[..., contract.LOCK] == 0)
        assert actions[0, 0, contract.LOCK] == 1  # the caller's array is not edited
    assert truncated.all()
    for info in infos:
        assert info["task_score"] == cfg.horizon
        assert info["probe"] == 2 * cfg.horizon
        assert info["seeker_return"] == pytest.approx(0.5 * cfg.horizon)  # the agent's team
        assert info["hider_return"] == 0.0  # no hider in a one-agent task


def test_hide_and_seek_has_no_task_and_scores_zero():
    cfg = make_config("chase", horizon=3)
    game = HideAndSeekGame(cfg, n_worlds=1, seed=0)
    assert game.task is None
    game.reset()
    for _ in range(3):
        _, _, _, infos = game.step(np.full((1, 2, 5), 0, dtype=np.int64))
    assert infos[0]["task_score"] == 0.0


def test_bad_task_names_are_refused():
    with pytest.raises(ValueError, match="task='fetch' is not one of"):
        make_config("quadrant", task="fetch")
    with pytest.raises(ValueError, match="each team needs at least one agent"):
        make_config("quadrant", n_seekers=(0, 0))


BONUS_TASK = """
import numpy as np
from hns_train.envs.tasks import Task

class Bonus(Task, stat_names=("bonus_steps",)):
    def reset(self, worlds):
        super().reset(worlds)
        self.steps = np.zeros(self.game.n_worlds)

    def reward(self, reward):
        reward += 1.0
        self.steps += 1

    def extra_stats(self, worlds):
        return {"bonus_steps": self.steps[worlds]}
"""


def test_a_task_named_by_import_path_adds_to_the_games_reward(tmp_path, monkeypatch):
    """A task of the user's own module (on sys.path, not in the package) receives the game's
    reward of the step and may add to it; its statistic is reported with the game's."""
    (tmp_path / "bonus_task.py").write_text(BONUS_TASK)
    monkeypatch.syspath_prepend(str(tmp_path))
    cfg = make_config("chase", horizon=4, task="bonus_task:Bonus")
    assert tasks.stat_keys(cfg) == (*STAT_KEYS, "bonus_steps")
    own, plain = (
        HideAndSeekGame(c, n_worlds=2, seed=3) for c in (cfg, make_config("chase", horizon=4))
    )
    own.reset()
    plain.reset()
    actions = np.random.default_rng(0).integers(0, 2, (2, own.n_agents, 5))
    for _ in range(cfg.horizon):
        _, reward, _, infos = own.step(actions)
        _, base, _, plain_infos = plain.step(actions)
        np.testing.assert_allclose(reward, base + 1.0)
    assert [i["bonus_steps"] for i in infos] == [cfg.horizon] * 2
    for info, plain_info in zip(infos, plain_infos, strict=True):
        for team in ("hider_return", "seeker_return"):
            assert info[team] == pytest.approx(plain_info[team] + cfg.horizon)


@pytest.mark.parametrize(
    ("task", "said"),
    [
        ("no_such_tasks:Bonus", "no module named 'no_such_tasks' (is its folder on PYTHONPATH"),
        ("hns_train.envs.tasks:Bonus", "module hns_train.envs.tasks ("),
        (
            "hns_train.envs.tasks:GameView",
            "GameView is not a subclass of hns_train.envs.tasks.Task",
        ),
        ("math:pi", "pi is a float, not a subclass of hns_train.envs.tasks.Task"),
        ("tasks.py", "is not one of ('hide_and_seek', "),
    ],
)
def test_a_task_import_path_that_does_not_resolve_is_named_in_one_line(task, said):
    with pytest.raises(ValueError) as err:
        make_config("quadrant", task=task)
    assert f"task={task!r}" in str(err.value) and said in str(err.value)
    assert "\n" not in str(err.value)


@pytest.mark.parametrize("task", sorted(tasks.TASK_MODULES))
def test_every_task_reports_the_statistics_it_names(task):
    """An ended episode's statistics are exactly `stat_keys`: the game's, then the task's own,
    every one a number (actors and pods sum them in this order, a run logs them)."""
    cfg = make_config(task)  # each task's own horizon (object counting's is fixed by its phases)
    keys = tasks.stat_keys(cfg)
    assert keys[: len(STAT_KEYS)] == STAT_KEYS and len(keys) > len(STAT_KEYS)
    game = VectorGame(cfg, n_worlds=2, seed=0)
    game.reset()
    noop = np.tile(contract.noop_action(cfg.action_bins), (2, game.n_agents, 1))
    for _ in range(cfg.horizon):
        step = game.step(noop)
    assert step.truncated.all()
    assert tuple(step.episode_stats) == keys
    assert all(np.isfinite(v).all() for v in step.episode_stats.values())


def test_a_task_whose_statistics_differ_from_its_names_is_caught(probe, monkeypatch):
    monkeypatch.setattr(_Probe, "stat_names", ("probe", "other"))
    game = HideAndSeekGame(make_config("blueprint", horizon=2), n_worlds=1, seed=0)
    game.reset()
    actions = np.ones((1, game.n_agents, 5), dtype=np.int64)
    game.step(actions)
    with pytest.raises(RuntimeError, match=r"extra_stats gave \('probe',\); its stat_names"):
        game.step(actions)


# what tasks.GameView lists: the only names a task may read of the game
_VIEW = set(tasks.GameView.__annotations__) | {
    n for n in vars(tasks.GameView) if not n.startswith("_")
}


class _ReadOnly:
    """The game as a task must use it: only the names of `tasks.GameView`, its arrays (and
    those of its dicts) read-only views, and no attribute can be set."""

    def __init__(self, game):
        object.__setattr__(self, "_game", game)

    def __getattr__(self, name):
        if name not in _VIEW:
            raise AttributeError(f"a task read game.{name}, which tasks.GameView does not list")
        value = getattr(self._game, name)
        if isinstance(value, dict):
            return {k: _read_only(v) for k, v in value.items()}
        return _read_only(value)

    def __setattr__(self, name, value):
        raise AttributeError(f"a task set game.{name}")


def _read_only(value):
    if not isinstance(value, np.ndarray):
        return value
    view = value.view()
    view.flags.writeable = False
    return view


@pytest.mark.parametrize("preset", sorted(set(tasks.TASK_MODULES)))
def test_tasks_only_read_the_game(preset):
    """Every task runs whole episodes seeing the game read-only, through GameView's names alone:
    what it changes (locks it allows, entities it moves, observation rows) goes through its
    hooks, which the game applies."""
    short = {} if preset == "object_counting" else {"horizon": 6}  # counting fixes its horizon
    cfg = make_config(preset, **short)
    game = HideAndSeekGame(cfg, n_worlds=2, seed=0)
    game.task.game = _ReadOnly(game)
    game.reset()
    rng = np.random.default_rng(0)
    for _ in range(cfg.horizon):
        _, _, truncated, infos = game.step(
            rng.integers(0, game.action_nvec, size=(2, game.n_agents, 5))
        )
    assert truncated.all() and all("task_score" in info for info in infos)


def test_task_numbers_live_in_their_sections_and_old_names_still_read():
    cfg = make_config("object_counting", counting={"wrong_reward": -0.5}, lock_reward=2.0)
    assert (cfg.counting.wrong_reward, cfg.lock.reward) == (-0.5, 2.0)
    assert cfg.counting.show_steps == 10  # the section's other fields keep their defaults
    flat = make_config("count_based", count_cell=0.25, count_state="objects_agents")
    assert flat == make_config("count_based", count_based={"cell": 0.25, "state": "objects_agents"})
    with pytest.raises(ValueError, match="count_cell and count_based.cell name the same setting"):
        make_config("count_based", count_cell=0.25, count_based={"cell": 0.5})
    with pytest.raises(ValueError, match=r"unknown CountingConfig fields \['counting.show'\]"):
        make_config("object_counting", counting={"show": 5})


def test_the_warp_game_refuses_a_task_saying_where_tasks_run():
    from hns_train.config import CONFIG_DIR, ConfigError, load_config

    asked = ["game.task=lock_and_return", "pipeline.backend=pod", "pod.physics=warp"]
    with pytest.raises(ConfigError, match="the Warp game .* plays hide-and-seek only; tasks run"):
        load_config(CONFIG_DIR / "smoke.yaml", asked)
    pytest.importorskip("mujoco_warp")
    from hns_train.envs.warp.game import WarpGame

    with pytest.raises(ValueError, match="the Warp game plays hide-and-seek only .* tasks run on"):
        WarpGame(make_config("lock_and_return"), n_worlds=1, device="cpu")
