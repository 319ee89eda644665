"""Replay files: exact round trip of real play, exact re-simulation, clear errors for bad files."""

import io
import json
import zipfile
from pathlib import Path

import mujoco
import numpy as np
import pytest

from hns_train.envs.config import make_config
from hns_train.envs.game import HideAndSeekGame
from hns_train.eval import recorder
from hns_train.eval import replay as R

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def played():
    """One quadrant episode of scripted play that grabs and locks, recorded while the live
    positions the game computed are kept aside for comparison."""
    cfg = make_config("quadrant")
    game = HideAndSeekGame(cfg, n_worlds=2, seed=5)
    act = recorder.object_seeking_actions(cfg, seed=1)
    obs = game.reset(seeds=[11, 5])
    rec = recorder.ReplayRecorder(
        game, world=1, metadata={"hiders": {"name": "scripted", "version": 3}}
    )
    rec.record_reset(seed=5)
    live = [(game.agent_pos[1].copy(), game.object_pos[1].copy())]
    for _ in range(cfg.horizon):
        actions = act(obs)
        obs, rewards, truncated, infos = game.step(actions)
        rec.record_step(rewards, actions, infos[1])
        live.append((game.agent_pos[1].copy(), game.object_pos[1].copy()))
    assert truncated.all()
    return rec.to_replay(), live, game


def test_recording_exercises_grabs_locks_and_sight(played):
    replay, _, game = played
    assert replay.n_steps == replay.cfg.horizon and replay.n_frames == replay.n_steps + 1
    assert (replay["grabbed"] >= 0).any(), "the scripted play should grab"
    assert replay["locked"].any(), "the scripted play should lock"
    assert (replay["lock_team"][replay["locked"]] >= 0).all()
    assert (replay["lock_team"][~replay["locked"]] == -1).all()
    assert replay["sees_agent"].any()
    np.testing.assert_array_equal(replay["prep"], np.arange(81) < replay.cfg.prep_steps)
    # the end-of-episode statistics and the cumulative scores agree
    stats = replay.header["episode_stats"]
    np.testing.assert_allclose(
        replay.team_scores()[-1], [stats["hider_return"], stats["seeker_return"]]
    )


def test_round_trip_reproduces_every_position_exactly(played, tmp_path):
    replay, live, _ = played
    path = R.save(replay, tmp_path / "ep.npz")
    assert not [p for p in tmp_path.iterdir() if p.name != "ep.npz"], "temporary file left"
    loaded = R.load(path)
    assert loaded.cfg == replay.cfg
    assert loaded.metadata == {"hiders": {"name": "scripted", "version": 3}}
    assert loaded.header["seed"] == 5 and loaded.header["world"] == 1
    assert set(loaded.arrays) == set(replay.arrays)
    for name, value in replay.arrays.items():
        np.testing.assert_array_equal(loaded[name], value, err_msg=name)
        assert loaded[name].dtype == value.dtype, name
    for name in R.layout_shapes(replay.cfg):
        np.testing.assert_array_equal(getattr(loaded.layout, name), getattr(replay.layout, name))

    model, data = loaded.rebuild()
    idx = loaded.index(model)
    for t, (agent_pos, object_pos) in enumerate(live):
        loaded.set_state(model, data, t, idx)
        present = loaded.layout.agent_present
        np.testing.assert_array_equal(data.xpos[idx.agent_body][present], agent_pos[present])
        np.testing.assert_array_equal(data.xpos[idx.object_body], object_pos)
        # locked objects glow, others do not
        glow = model.mat_emission[model.geom_matid[idx.object_geom]] > 0
        np.testing.assert_array_equal(glow, loaded["locked"][t])
        assert data.eq_active.sum() == (loaded["grabbed"][t] >= 0).sum()


def test_resimulation_from_the_file_is_bit_exact(played, tmp_path):
    replay = R.load(R.save(played[0], tmp_path / "ep.npz"))
    model, data = replay.rebuild()
    idx = replay.index(model)
    for t in range(replay.n_steps):
        replay.prepare_step(model, data, t, idx)
        mujoco.mj_step(model, data, replay.cfg.substeps)
        np.testing.assert_array_equal(data.qpos, replay["qpos"][t + 1], err_msg=f"step {t}")
        np.testing.assert_array_equal(data.qvel, replay["qvel"][t + 1], err_msg=f"step {t}")


def test_record_episode_with_any_action_source_and_the_example_file(tmp_path):
    cfg = make_config("quadrant")
    replay = recorder.record_episode(cfg, recorder.random_actions(cfg, seed=2), seed=3, n_steps=12)
    assert replay.n_steps == 12
    again = recorder.record_episode(cfg, recorder.random_actions(cfg, seed=2), seed=3, n_steps=12)
    np.testing.assert_array_equal(replay["qpos"], again["qpos"])  # seeds make episodes equal
    example = ROOT / "replays" / "example_quadrant.npz"
    assert example.stat().st_size < 1_000_000
    loaded = R.load(example)
    assert loaded.cfg.preset == "quadrant" and loaded.n_steps == loaded.cfg.horizon


def test_recorder_misuse_is_reported():
    cfg = make_config("chase")
    game = HideAndSeekGame(cfg, n_worlds=1, seed=0)
    with pytest.raises(ValueError, match="world 3"):
        recorder.ReplayRecorder(game, world=3)
    game.reset()
    rec = recorder.ReplayRecorder(game)
    with pytest.raises(RuntimeError, match="record_reset"):
        rec.record_step(np.zeros((1, 2)), np.zeros((1, 2, 5)))
    rec.record_reset()
    game.reset()
    with pytest.raises(RuntimeError, match="reset"):
        rec.record_step(np.zeros((1, 2)), np.zeros((1, 2, 5)))
    with pytest.raises(ValueError, match=rf"n_steps must be in 0..{cfg.horizon}.*got -1"):
        recorder.record_episode(cfg, recorder.random_actions(cfg), n_steps=-1)


def test_bad_metadata_and_paths_are_rejected_on_save(played, tmp_path):
    replay = played[0]
    with pytest.raises(ValueError, match=r"\.npz"):
        R.save(replay, tmp_path / "ep.bin")
    bad = R.Replay(
        replay.cfg, replay.layout, replay.arrays, {**replay.header, "metadata": {"x": object()}}
    )
    with pytest.raises(ValueError, match="JSON"):
        R.save(bad, tmp_path / "ep.npz")
    assert not list(tmp_path.iterdir())


# ----------------------------------------------------------------------------- bad files


@pytest.fixture(scope="module")
def saved(played, tmp_path_factory):
    return R.save(played[0], tmp_path_factory.mktemp("rep") / "ok.npz")


def _rewrite(src: Path, dst: Path, change) -> Path:
    """Copy the archive member by member, letting `change(members)` edit the dict."""
    with np.load(src, allow_pickle=False) as npz:
        members = {k: npz[k] for k in npz.files}
    change(members)
    np.savez_compressed(dst, **members)
    return dst


def _header_edit(**edits):
    def change(members):
        header = json.loads(members["header"].tobytes())
        header.update(edits)
        members["header"] = np.frombuffer(json.dumps(header).encode(), dtype=np.uint8)

    return change


def _truncated(src, d):
    (d / "t.npz").write_bytes(src.read_bytes()[: src.stat().st_size // 2])
    return d / "t.npz"


def _text(src, d):
    (d / "txt.npz").write_text("hello, not a replay")
    return d / "txt.npz"


def _foreign(src, d):
    np.savez(d / "foreign.npz", a=np.arange(3))
    return d / "foreign.npz"


def _edit(change):
    return lambda src, d: _rewrite(src, d / "edited.npz", change)


def _set(name, where, value):
    return _edit(lambda m: m[name].__setitem__(where, value))


BAD_FILES = {
    "missing": (lambda src, d: d / "missing.npz", "no such file"),
    "directory": (lambda src, d: d, "a directory, not a replay file"),
    "truncated": (_truncated, "truncated or corrupt"),
    "text": (_text, "not a replay"),
    "foreign-npz": (_foreign, "no 'header'"),
    "newer": (_edit(_header_edit(version=R.FORMAT_VERSION + 1)), "newer"),
    "other-format": (_edit(_header_edit(format="other.tool")), "not a replay"),
    "no-qpos": (_edit(lambda m: m.pop("qpos")), "'qpos' is missing"),
    "bad-shape": (_edit(lambda m: m.update(qvel=m["qvel"][:, :5])), "'qvel' has shape"),
    "no-layout": (_edit(lambda m: m.pop("layout.wall_pos")), "layout.wall_pos"),
    "nan": (_set("qpos", (3, 0), np.nan), "NaN"),
    "bad-index": (_set("grabbed", (2, 0), 9), "'grabbed' holds values"),
    "bad-config": (_edit(_header_edit(game_config={"horizon": "long"})), "invalid game config"),
    "unknown-field": (
        _edit(_header_edit(game_config={"horizon": 80, "tail_length": 3})),
        r"invalid game config: unknown game parameter\(s\) \['tail_length'\]",
    ),
    "pickled-object": (
        _edit(lambda m: m.update(rewards=np.array([object()] * 80))),
        "truncated or corrupt",
    ),
}


@pytest.mark.parametrize("case", sorted(BAD_FILES))
def test_bad_files_raise_a_clear_replay_error(saved, tmp_path, case):
    make, message = BAD_FILES[case]
    path = make(saved, tmp_path)
    with pytest.raises(R.ReplayError, match=message) as err:
        R.load(path)
    assert str(path) in str(err.value)  # the message says which file
    assert isinstance(err.value, ValueError)


def test_flipped_bytes_inside_a_member_are_caught(saved, tmp_path):
    raw = bytearray(saved.read_bytes())
    with zipfile.ZipFile(io.BytesIO(bytes(raw))) as z:
        info = z.getinfo("qpos.npy")
    # inside the compressed qpos data: past the local header, well before the next member
    at = info.header_offset + 30 + len(info.filename) + info.compress_size // 2
    raw[at] ^= 0xFF
    bad = tmp_path / "flip.npz"
    bad.write_bytes(bytes(raw))
    with pytest.raises(R.ReplayError, match="truncated or corrupt"):
        R.load(bad)


def test_replays_with_the_tasks_flat_names_of_older_files_still_load(saved, tmp_path):
    """Files written before the tasks' numbers had sections name them flat (lock_reward, ...):
    they load, each number in its section; new files write the sections as mappings."""

    def flat_names(members):
        header = json.loads(members["header"].tobytes())
        game_config = header["game_config"]
        assert game_config["counting"]["show_steps"] == 10  # a section, as a mapping
        del game_config["lock"], game_config["counting"]
        game_config.update(lock_reward=2.5, counting_show_steps=7)
        members["header"] = np.frombuffer(json.dumps(header).encode(), dtype=np.uint8)

    loaded = R.load(_rewrite(saved, tmp_path / "flat.npz", flat_names))
    assert (loaded.cfg.lock.reward, loaded.cfg.counting.show_steps) == (2.5, 7)
    assert loaded.cfg.lock.unlock_penalty == 5.0  # the rest of the section: its defaults
