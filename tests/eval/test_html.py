"""HTML export: valid, self-contained (no network), holding the replay's data; CLI dispatch."""

import json
import os
import re
import shutil
import subprocess
from html.parser import HTMLParser
from pathlib import Path

import numpy as np
import pytest

from hns_train.envs.config import make_config
from hns_train.envs.world import HIDER_RGBA, SEEKER_RGBA
from hns_train.eval import cli, recorder
from hns_train.eval import replay as R
from hns_train.eval.html import DECIMALS, to_html, write_html

VOID = {"meta", "input", "br", "img", "link", "hr", "source", "option"}


class Checker(HTMLParser):
    """Collects tags and the JSON data element; fails on unbalanced or misnested tags."""

    def __init__(self):
        super().__init__()
        self.stack, self.tags, self.errors = [], [], []
        self.scripts, self.data, self._in_data = [], None, False

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        self.tags.append((tag, attrs))
        if tag == "script":
            self.scripts.append(attrs)
            self._in_data = attrs.get("type") == "application/json"
        if tag not in VOID:
            self.stack.append(tag)

    def handle_endtag(self, tag):
        if tag in VOID:
            return
        if not self.stack or self.stack[-1] != tag:
            self.errors.append(f"</{tag}> closes {self.stack[-1:] or 'nothing'}")
        else:
            self.stack.pop()
        self._in_data = False

    def handle_data(self, data):
        if self._in_data:
            self.data = (self.data or "") + data


@pytest.fixture(scope="module")
def replay():
    cfg = make_config("quadrant")
    rp = recorder.record_episode(
        cfg,
        recorder.object_seeking_actions(cfg, seed=1),
        seed=5,
        metadata={"hiders": {"name": "pool", "version": 7}, "seekers": "latest </script>"},
    )
    assert rp["locked"].any()
    return rp


def test_html_is_valid_self_contained_and_holds_the_data(replay):
    page = to_html(replay)
    assert page.startswith("<!DOCTYPE html>")
    p = Checker()
    p.feed(page)
    p.close()
    assert not p.errors and not p.stack, (p.errors, p.stack)
    names = [t for t, _ in p.tags]
    assert names.count("canvas") == 1 and names.count("script") == 2
    # no network: no external scripts, styles, fonts, images, or any URL at all
    assert all("src" not in attrs for attrs in p.scripts)
    assert not any(t in ("link", "img", "iframe") for t in names)
    assert not re.search(r"(https?:)?//[a-z0-9.-]+\.[a-z]{2,}/", page, re.I)
    assert "http://" not in page and "https://" not in page and "@import" not in page
    # the embedded data is the replay, and a metadata string cannot close the script early
    data = json.loads(p.data)
    assert len(data["frames"]) == replay.n_frames
    assert data["labels"] == {"hiders": "pool v7", "seekers": "latest </script>"}
    model, _ = replay.rebuild()
    idx = replay.index(model)
    agents = np.flatnonzero(replay.layout.agent_present)
    for t in (0, 40, replay.n_frames - 1):
        xy_yaw = replay["qpos"][t, idx.agent_qpos[agents][:, [0, 1, 3]]]
        np.testing.assert_allclose(data["frames"][t]["a"], xy_yaw, atol=10**-DECIMALS)
        locked = [k >= 0 for k in data["frames"][t]["lk"]]
        assert locked == list(replay["locked"][t][: len(locked)])
        np.testing.assert_allclose(data["frames"][t]["sc"], replay.team_scores()[t])
    assert data["frames"][0]["p"] == replay.cfg.prep_steps and data["frames"][-1]["p"] == 0
    assert len(data["walls"]) == int(replay.layout.wall_present.sum())
    legend = page.split('<div id="legend">', 1)[1].split("</div>", 1)[0]
    for key in ("hider", "seeker", "box", "ramp", "locked", "sees a hider", "grab", "cone"):
        assert f"{key}" in legend, key


def test_cli_writes_html_and_dispatches_subcommands(replay, tmp_path, capsys, monkeypatch):
    path = R.save(replay, tmp_path / "ep.npz")
    monkeypatch.chdir(tmp_path)  # a replay of no run renders into ./runs/renders
    assert cli.main([str(path), "--format", "html"]) == 0
    out = Path("runs") / "renders" / "ep.html"
    assert capsys.readouterr().out.strip() == str(out)
    assert out.read_text(encoding="utf-8") == to_html(replay)
    # the record subcommand writes a replay that loads
    rec = tmp_path / "rec.npz"
    assert cli.main(["record", str(rec), "--steps", "5", "--actions", "random"]) == 0
    assert R.load(rec).n_steps == 5
    assert cli.main([]) == 2  # no replay, no run: usage


def test_an_output_path_under_a_file_is_an_error_naming_it(replay, tmp_path, capsys):
    """A file where the output's folder should be: one line and status 2, for a render and for
    `record`, not a traceback."""
    path = R.save(replay, tmp_path / "ep.npz")
    for argv in (
        [str(path), "--out", str(path / "ep.html")],
        ["record", str(path / "sub" / "rec.npz"), "--steps", "1", "--actions", "random"],
    ):
        assert cli.main(argv) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and str(path) in err and "not a folder" in err
        assert sorted(p.name for p in tmp_path.iterdir()) == ["ep.npz"]


def test_record_refuses_a_negative_seed_by_its_flag(tmp_path, capsys):
    assert cli.main(["record", str(tmp_path / "r.npz"), "--seed", "-1"]) == 2
    assert "--seed must be >= 0" in capsys.readouterr().err
    assert not any(tmp_path.iterdir())


def _browser() -> str | None:
    for name in ("chromium", "chromium-browser", "google-chrome", "chrome"):
        found = shutil.which(name)
        if found:
            return found
    return None


# CI installs Chromium (`make browser`), so there a missing browser fails instead of skipping.
@pytest.mark.parametrize("extra", [1, -41])
def test_record_refuses_steps_beyond_the_horizon_by_its_flag(tmp_path, capsys, extra):
    # an episode ends at its horizon: more steps were cut short, and -1 was blamed on n_steps
    horizon = make_config("chase").horizon
    steps = str(horizon + extra)
    argv = ["record", str(tmp_path / "r.npz"), "--preset", "chase", "--actions", "random"]
    argv += ["--steps", steps]
    assert cli.main(argv) == 2
    err = capsys.readouterr().err
    assert f"--steps must be in 0..{horizon}" in err and f"got {steps}" in err
    assert not any(tmp_path.iterdir())


def test_record_refuses_object_play_in_a_game_without_objects(tmp_path, capsys):
    # the scripted source used to stop on numpy's "argmin of an empty sequence"
    assert cli.main(["record", str(tmp_path / "r.npz"), "--preset", "chase"]) == 2
    err = capsys.readouterr().err
    assert "need boxes or ramps; the chase preset has none" in err
    assert not any(tmp_path.iterdir())


@pytest.mark.skipif(
    _browser() is None and not os.environ.get("CI"),
    reason="no Chromium on this machine to screenshot the page (make browser installs it)",
)
def test_html_renders_in_a_headless_browser(replay, tmp_path):
    assert _browser() is not None, "CI needs Chromium for this test: run `make browser` first"
    page = write_html(replay, tmp_path / "ep.html")
    shot = tmp_path / "shot.png"
    subprocess.run(
        [
            _browser(),
            "--headless",
            "--disable-gpu",
            "--no-sandbox",
            f"--screenshot={shot}",
            "--window-size=700,860",
            f"file://{page}?t=60",
        ],
        check=True,
        timeout=60,
        capture_output=True,
    )
    import imageio.v3 as iio

    image = iio.imread(shot)[..., :3].astype(int)
    assert image.shape[0] > 760 and image[:700].std() > 10  # the canvas drew something
    # the legend under the player shows the teams' colours (the controls above it have none)
    legend = image[715:]
    for colour in (HIDER_RGBA, SEEKER_RGBA):
        rgb = np.round(255 * np.array(colour[:3]))
        assert (np.abs(legend - rgb).max(-1) < 30).sum() > 20, colour


# A recording 2-D context and the few DOM calls the page makes: enough for node to run the page's
# own script over every frame and through playback, so script errors surface without a browser.
NODE_HARNESS = r"""
const calls = {};
const context = () => new Proxy({}, {
  get: (t, k) => (k in t ? t[k] : (...a) => { calls[k] = (calls[k] || 0) + 1; }),
  set: (t, k, v) => { t[k] = v; return true; } });
const els = {};
const el = id => els[id] || (els[id] = { width: 640, height: 640, value: "1", children: [],
  getContext: context, appendChild(c) { this.children.push(c); }, set innerHTML(v) {
  this.children = []; } });
globalThis.document = { getElementById: id => (id === "replay-data" ? { textContent: DATA } :
  el(id)), createElement: () => ({ style: {} }), addEventListener: () => {} };
globalThis.location = { search: "" };
globalThis.performance = { now: () => Date.now() };
let ticks = 0;
globalThis.requestAnimationFrame = f => {
  if (ticks++ < 500) setTimeout(() => f(performance.now() + ticks * 200), 0); };
"""
NODE_CHECK = r"""
for (let i = 0; i < N; i++) draw(i);
setPlaying(true);
setTimeout(() => console.log(JSON.stringify({ t, N, playing, calls,
  hud: els.hud.children.map(c => c.textContent).join(""),
  colours: els.hud.children.map(c => c.style.color || null) })), 200);
"""


@pytest.mark.skipif(shutil.which("node") is None, reason="node is not installed")
def test_page_script_draws_every_frame_and_plays_to_the_end(replay, tmp_path):
    page = to_html(replay)
    p = Checker()
    p.feed(page)
    script = page.split("<script>", 1)[1].split("</script>", 1)[0]
    source = f"const DATA = {json.dumps(p.data)};\n{NODE_HARNESS}\n{script}\n{NODE_CHECK}"
    (tmp_path / "page.js").write_text(source, encoding="utf-8")
    run = subprocess.run(
        ["node", str(tmp_path / "page.js")], capture_output=True, text=True, timeout=60
    )
    assert run.returncode == 0, run.stderr
    out = json.loads(run.stdout)
    assert out["t"] == out["N"] - 1 == replay.n_steps and not out["playing"]
    assert out["calls"]["arc"] >= 2 * replay.n_frames  # agents (and cones) drawn every frame
    assert "hiders" in out["hud"] and f"t {replay.n_steps}/" in out["hud"]
    # the scores are printed in the data's team colours: the page names no colour of its own
    colours = json.loads(p.data)["colours"]
    assert out["colours"] == [None, colours["hider"], colours["seeker"]]
