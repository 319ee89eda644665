"""Run configuration: YAML files, base files, overrides and the errors a user sees."""

import subprocess
import sys
from pathlib import Path

import pytest

from hns_train import train
from hns_train.config import CONFIG_DIR, ConfigError, config_from_dict, load_config

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.parametrize("name", ["default", "smoke", "chase", "quadrant", "randomwalls"])
def test_shipped_configs_load(name):
    cfg = load_config(CONFIG_DIR / f"{name}.yaml")
    game = cfg.game_config()
    assert game.horizon % cfg.pipeline.chunk_len == 0
    assert cfg.pipeline.envs_per_actor % cfg.pipeline.ring_size == 0


def test_default_is_the_quadrant_game_with_the_paper_numbers():
    cfg = load_config()
    assert cfg.game_config().preset == "quadrant" and cfg.pipeline.launcher == "local"
    assert cfg.agent.ppo.gamma == 0.998 and cfg.agent.ppo.gae_lambda == 0.95


def test_overrides_are_typed_and_nested():
    cfg = load_config(
        CONFIG_DIR / "smoke.yaml",
        ["pipeline.n_actors=3", "agent.ppo.lr=1e-3", "game.horizon=40", "stop.minutes=2"],
    )
    assert cfg.pipeline.n_actors == 3 and cfg.agent.ppo.lr == 1e-3
    assert cfg.game_config().horizon == 40 and cfg.stop.minutes == 2.0


def test_unknown_key_names_key_and_file(tmp_path):
    path = tmp_path / "bad.yaml"
    path.write_text("pipeline:\n  n_actor: 2\n")
    with pytest.raises(ConfigError) as err:
        load_config(path)
    message = str(err.value)
    assert "pipeline.n_actor" in message and str(path) in message and "n_actors" in message


def test_ill_typed_value_names_key_and_file(tmp_path):
    path = tmp_path / "bad.yaml"
    path.write_text("pipeline:\n  n_actors: two\n")
    with pytest.raises(ConfigError, match=r"pipeline.n_actors='two'.*expected int"):
        load_config(path)
    with pytest.raises(ConfigError, match=r"command line.*stop.versions"):
        load_config(CONFIG_DIR / "smoke.yaml", ["stop.versions=[1]"])


def test_unknown_keys_get_the_closest_allowed_key():
    with pytest.raises(
        ConfigError, match=r"\['pipeline.n_actor'\] \(did you mean 'pipeline.n_actors'\?\)"
    ):
        load_config("chase", ["pipeline.n_actor=4"])
    with pytest.raises(ConfigError, match=r"\['horizn'\] \(did you mean 'horizon'\?\)"):
        load_config("chase", ["game.horizn=40"])
    with pytest.raises(ConfigError, match=r"\['stop.minute'\] \(did you mean 'stop.minutes'\?\)"):
        load_config("chase", ["stop.minute=4"])


@pytest.mark.parametrize(
    "override",
    ["stop.minutes=-1", "pipeline.backend=foo", "game.horizon=30", "pipeline.n_actors=0"],
)
def test_command_line_mistakes_are_blamed_on_the_command_line(override):
    with pytest.raises(ConfigError) as err:
        load_config("chase", [override])
    assert str(err.value).startswith("command line: ") and "chase.yaml" not in str(err.value)


def test_a_file_wrong_on_its_own_is_blamed_even_with_overrides(tmp_path):
    path = tmp_path / "mine.yaml"
    path.write_text("base: chase.yaml\npipeline:\n  backend: foo\n")
    with pytest.raises(ConfigError, match=rf"^{path}: pipeline.backend='foo'"):
        load_config(path, ["stop.minutes=1"])


def test_bad_game_parameter_and_cross_field_rules(tmp_path):
    with pytest.raises(ConfigError, match="unknown game parameter"):
        load_config(CONFIG_DIR / "smoke.yaml", ["game.horizn=40"])
    with pytest.raises(ConfigError, match="unknown preset"):
        load_config(CONFIG_DIR / "smoke.yaml", ["game.preset=forest"])
    with pytest.raises(ConfigError, match="chunk_len=20 must divide the game horizon 30"):
        load_config(CONFIG_DIR / "smoke.yaml", ["game.horizon=30"])
    with pytest.raises(ConfigError, match="launcher"):
        load_config(CONFIG_DIR / "smoke.yaml", ["pipeline.launcher=slurm"])


def test_base_file_is_merged_and_cycles_are_refused(tmp_path):
    (tmp_path / "a.yaml").write_text("base: b.yaml\nname: a\n")
    (tmp_path / "b.yaml").write_text("base: a.yaml\nname: b\n")
    with pytest.raises(ConfigError, match="includes itself"):
        load_config(tmp_path / "a.yaml")
    (tmp_path / "c.yaml").write_text(f"base: {CONFIG_DIR / 'smoke.yaml'}\nseed: 7\n")
    cfg = load_config(tmp_path / "c.yaml")
    assert cfg.seed == 7 and cfg.name == "smoke" and cfg.pipeline.launcher == "serial"


def test_train_command_reports_a_bad_config_without_a_traceback(tmp_path):
    path = tmp_path / "bad.yaml"
    path.write_text("stop:\n  minute: 1\n")
    out = subprocess.run(
        [sys.executable, "-m", "hns_train.train", "--config", str(path)],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=120,
    )
    assert out.returncode == 2
    assert "stop.minute" in out.stderr and "Traceback" not in out.stderr


def test_shipped_configs_are_found_by_name_from_any_folder(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # no configs/ here
    assert load_config("chase").game_config().preset == "chase"
    assert load_config("configs/chase.yaml").name == "chase"
    (tmp_path / "mine.yaml").write_text("base: quadrant.yaml\nname: mine\n")
    cfg = load_config(tmp_path / "mine.yaml")
    assert (cfg.name, cfg.game_config().preset) == ("mine", "quadrant")
    with pytest.raises(ConfigError, match="does not exist .shipped configs: chase, default"):
        load_config("nothing.yaml")


def test_a_negative_render_wait_is_refused():
    with pytest.raises(ConfigError, match="render_wait_s=-1.0 is not allowed; it must be >= 0"):
        load_config(CONFIG_DIR / "smoke.yaml", ["eval.stop_render_wait_s=-1"])


def test_an_unknown_pipeline_backend_is_rejected(tmp_path):
    with pytest.raises(ConfigError, match="pipeline.backend='gpu' is not one of"):
        load_config(CONFIG_DIR / "smoke.yaml", [f"runs_dir={tmp_path}", "pipeline.backend=gpu"])
    # the text settings that name their values with the field (`typed_config.OneOf`)
    for override, said in (
        ("pipeline.launcher=mpi", "pipeline.launcher='mpi'"),
        ("pod.physics=gpu", "pod.physics='gpu'"),
        ("pool.rule=elo", "pool: rule='elo'"),
    ):
        with pytest.raises(ConfigError, match=rf"{said} is not one of \("):
            load_config(CONFIG_DIR / "smoke.yaml", [override])


def test_the_retired_warp_actor_mode_points_to_pods(tmp_path):
    """Asking for Warp actors, or setting their device or stagger, is one clear error naming
    `pipeline.backend=pod`; a saved config of an earlier version (every key at its default)
    still loads."""
    asks = ("pipeline.backend=warp", "pipeline.warp_device=cuda", "pipeline.warp_stagger=true")
    for override in asks:
        retired = "is retired: Warp actors were replaced by pods: use pipeline.backend=pod"
        with pytest.raises(ConfigError, match=retired) as err:
            load_config(CONFIG_DIR / "smoke.yaml", [f"runs_dir={tmp_path}", override])
        assert "Traceback" not in str(err.value)
    saved = load_config(CONFIG_DIR / "smoke.yaml").to_dict()
    saved["pipeline"].update(warp_device="auto", warp_stagger=False)
    assert config_from_dict(saved).pipeline.backend == "c"


def test_a_pod_trains_with_agent_ppo_and_the_old_pod_passes_point_there(tmp_path):
    """One set of PPO settings: the pod's config writes its passes in agent.ppo; the retired
    pod.epochs / pod.minibatches load when they change nothing (a saved config of an earlier
    version: the old default, or agent.ppo's value) and are an error naming agent.ppo else."""
    pod = load_config("quadrant_pod")
    assert pod.pipeline.backend == "pod"
    assert (pod.agent.ppo.epochs, pod.agent.ppo.minibatches) == (2, 2)
    chase = load_config("chase").to_dict()
    chase["pod"].update(epochs=4, minibatches=4)  # the same as agent.ppo's
    assert config_from_dict(chase).agent.ppo.epochs == 4
    chase["pod"].update(epochs=2)  # the old default
    assert config_from_dict(chase).agent.ppo.epochs == 4
    with pytest.raises(ConfigError, match=r"pod.epochs=3 is retired: .*set agent.ppo.epochs"):
        load_config("chase", [f"runs_dir={tmp_path}", "pod.epochs=3"])


def test_network_action_bins_must_match_the_game_contract():
    with pytest.raises(ConfigError) as err:
        load_config(CONFIG_DIR / "smoke.yaml", ["agent.network.move_bins=9"])
    assert "agent.network.move_bins=9" in str(err.value) and "action_bins=11" in str(err.value)
    both = ["agent.network.move_bins=9", "game.action_bins=9"]
    cfg = load_config(CONFIG_DIR / "smoke.yaml", both)
    assert cfg.agent.network.action_sizes == (9, 9, 9, 2, 2)
    with pytest.raises(ConfigError, match="move_bins"):
        load_config(CONFIG_DIR / "smoke.yaml", ["agent.network.move_bins=10"])


@pytest.mark.parametrize(
    "override, allowed",
    [
        ("agent.ppo.epochs=0", ">= 1"),
        ("population.hof_every=0", ">= 1"),
        ("population.copy_win_probability=1.5", ">= 0 and <= 1"),
        ("population.league_every_s=0", "> 0"),
        ("eval.worlds=0", ">= 1"),
    ],
)
def test_each_range_is_checked_once_by_the_range_table(tmp_path, override, allowed):
    """A field's range has one rule, the range table's, whose message names the key, the value
    and what is allowed (no second check in a section's __post_init__ answers first)."""
    key, value = override.split("=")
    with pytest.raises(ConfigError) as err:
        load_config(CONFIG_DIR / "smoke.yaml", [f"runs_dir={tmp_path}", override])
    assert f"{key}={value}" in str(err.value) and f"it must be {allowed}" in str(err.value)


def test_league_names_are_checked_against_the_names_allowed():
    with pytest.raises(ConfigError, match=r"population\.league_opponents=.*\['champions'\]"):
        load_config(CONFIG_DIR / "smoke.yaml", ["population.league_opponents=[members, champions]"])
    with pytest.raises(ConfigError, match=r"population\.league_roles=.*\['both'\] not among"):
        load_config(CONFIG_DIR / "smoke.yaml", ["population.league_roles=[hider, both]"])


def test_a_folder_or_broken_yaml_as_config_is_said_in_one_line(tmp_path):
    with pytest.raises(ConfigError, match=r"config file \S+ is a folder, not a YAML file"):
        load_config(tmp_path)
    broken = tmp_path / "broken.yaml"
    broken.write_text("pipeline: [\n")
    with pytest.raises(ConfigError, match="broken.yaml: not valid YAML: while parsing") as err:
        load_config(broken)
    assert "\n" not in str(err.value) and "line 2, column 1" in str(err.value)


@pytest.mark.parametrize("name", ["", "..", "../elsewhere", "/absolute"])
def test_a_run_name_that_is_no_folder_inside_runs_dir_is_refused(tmp_path, capsys, name):
    (tmp_path / "earlier").mkdir()  # runs_dir holds another run
    name = name.replace("/absolute", str(tmp_path.parent / "absolute"))
    code = train.main(
        ["--config", str(CONFIG_DIR / "smoke.yaml"), f"runs_dir={tmp_path}", f"name={name}"]
    )
    err = capsys.readouterr().err
    assert code == 2 and f"error: name={name!r} cannot name a run" in err, err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["earlier"]  # nothing written


def test_resume_of_the_current_folder_names_the_run_by_its_folder(tmp_path, capsys, monkeypatch):
    run = tmp_path / "mine"
    run.mkdir()
    (run / "config.yaml").write_text("base: smoke.yaml\n")
    monkeypatch.chdir(run)
    assert train.main(["--resume", "."]) == 2
    err = capsys.readouterr().err
    assert "nothing to resume from" in err and "cannot name a run" not in err, err


@pytest.mark.parametrize(
    "text, said",
    [
        (b"base: 3\n", "base=3 must name a YAML file"),
        (b"base: [quadrant.yaml]\n", "base=['quadrant.yaml'] must name a YAML file"),
        (b"base: gone.yaml\n", "base 'gone.yaml': no such file beside it or among the shipped"),
        (b"\xff\xfe\x00name: x\n", "not a YAML file (not UTF-8 text)"),
    ],
)
def test_a_bad_base_or_a_binary_file_is_blamed_on_the_file(tmp_path, text, said):
    path = tmp_path / "mine.yaml"
    path.write_bytes(text)
    with pytest.raises(ConfigError) as err:
        load_config(path)
    assert str(err.value).startswith(f"{path}: ") and said in str(err.value), err.value


@pytest.mark.parametrize("runs_dir, name", [("a_file", "smoke"), ("runs", "a_file")])
def test_a_run_folder_where_a_file_is_is_refused(tmp_path, capsys, runs_dir, name):
    (tmp_path / "runs").mkdir()
    file = tmp_path / runs_dir / name if runs_dir == "runs" else tmp_path / runs_dir
    file.write_text("mine\\n")
    argv = [f"runs_dir={tmp_path / runs_dir}", f"name={name}"]
    code = train.main(["--config", str(CONFIG_DIR / "smoke.yaml"), *argv])
    err = capsys.readouterr().err
    assert code == 2 and f"error: {file} is a file, so the run's folder" in err, err
    assert file.read_text() == "mine\\n"
