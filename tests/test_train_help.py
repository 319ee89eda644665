"""`python -m hns_train.train --help`: the subcommands, the shipped config names and where every
key is described; what it names must exist."""

import re
from pathlib import Path

import pytest

from hns_train import train
from hns_train.config import CONFIG_DIR, find_config, load_config


@pytest.fixture
def help_text(capsys):
    with pytest.raises(SystemExit) as done:
        train.main(["--help"])
    assert done.value.code == 0
    return capsys.readouterr().out


def test_help_names_the_population_subcommands(help_text):
    assert "population add RUN_DIR" in help_text
    assert "population retire RUN_DIR MEMBER" in help_text


def test_help_lists_every_shipped_config_and_each_loads_by_that_name(help_text):
    shipped = sorted(
        p.relative_to(CONFIG_DIR).with_suffix("").as_posix() for p in CONFIG_DIR.rglob("*.yaml")
    )
    assert "transfer/lock_and_return" in shipped
    listed = " ".join(help_text.split("shipped configs")[1].split("keys (")[0].split())
    for name in shipped:
        assert re.search(rf"(^|[\s,]){re.escape(name)}(,|\s|$)", listed), name
        assert find_config(name).is_file()
    load_config("transfer/lock_and_return")  # a transfer config by its name, from any folder


def test_help_says_where_every_section_s_keys_are_described(help_text):
    root = Path(re.search(r"files under (\S+)\)", help_text).group(1))
    described = dict(re.findall(r"^  (\S[^\n]*?)\s{2,}(hns_train/\S+\.py)$", help_text, re.M))
    sections = ["name", "seed", "runs_dir", "game", "agent", "pipeline", "pool", "pod", "eval"]
    sections += ["logging", "stop", "population"]
    text = " ".join(described)
    for section in sections:
        assert section in text, section
    for path in described.values():
        assert (root / path).is_file(), path
    assert len(described) == len(train.KEY_SOURCES)
