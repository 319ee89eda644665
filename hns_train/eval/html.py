"""Self-contained HTML export of a replay: a top-down 2-D animation for sharing.

One file, no network: the page holds its data (JSON in a `<script type="application/json">`
element), its drawing code (inline JavaScript on a `<canvas>`) and its styles; no external
scripts, fonts or images. It draws walls, boxes, ramps (the tall face, local -y, as a dark
edge), agents with their heading and a faint 135-degree vision cone, grabs (white links), locks
(tinted in the locking team's colour with a thick outline), opponent lines of sight (seekers
seeing hiders thick red, hiders seeing seekers thin cyan), the preparation countdown and the
cumulative team scores, with play/pause, a scrub slider, speed choice and keys (space: play or
pause; arrows: step), and a legend of what the shapes, colours and lines mean. Playback runs at
real time by default (1 / (timestep * substeps) frames per second, 13.3 for the presets).

Coordinates in the data are world metres rounded to millimetres (`DECIMALS`); positions are body
centres, yaw in radians; the canvas flips y so that +y points up, as in the top camera.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from hns_train.atomic_file import atomic_write_bytes
from hns_train.envs.parallel import agent_names
from hns_train.envs.world import (
    BOX_RGBA,
    HIDER_RGBA,
    RAMP_RGBA,
    SEEKER_RGBA,
    WALL_RGBA,
    object_half_extents,
)
from hns_train.eval.recorder import team_label
from hns_train.eval.replay import Replay
from hns_train.eval.video import CONE_RADIUS, TEAM_NAMES

DECIMALS = 3
CANVAS_PX = 640


def _css(rgba) -> str:
    r, g, b = (int(round(255 * c)) for c in rgba[:3])
    return f"#{r:02x}{g:02x}{b:02x}"


def replay_data(replay: Replay) -> dict:
    """Everything the page draws, as JSON-ready lists (rounded to `DECIMALS`)."""
    cfg, layout, a = replay.cfg, replay.layout, replay.arrays
    model, _ = replay.rebuild()
    idx = replay.index(model)
    qpos = a["qpos"]

    def r(x):
        return np.round(np.asarray(x, dtype=float), DECIMALS).tolist()

    agents = [int(k) for k in np.flatnonzero(layout.agent_present)]
    n_boxes = cfg.max_boxes
    objects = np.flatnonzero(layout.object_present).tolist()  # boxes drawn, then the ramps
    half = object_half_extents(cfg, layout)
    h = cfg.max_hiders
    names = agent_names(cfg.max_hiders, cfg.max_seekers)
    walls = [
        r([*layout.wall_pos[k, :2], *layout.wall_half[k, :2]])
        for k in np.flatnonzero(layout.wall_present)
    ]
    agent_q = qpos[:, idx.agent_qpos[agents][:, [0, 1, 3]]]  # (F, n, 3) x, y, yaw
    object_q = qpos[:, idx.object_qpos[objects][:, [0, 1, 3]]] if objects else np.zeros((0,))
    sees = a["sees_agent"][:, agents][:, :, agents]
    frames = []
    scores = replay.team_scores()
    for t in range(replay.n_frames):
        grabbed = a["grabbed"][t, agents]
        frames.append(
            {
                "a": r(agent_q[t]),
                "o": r(object_q[t]) if objects else [],
                "lk": [int(a["lock_team"][t, o]) if a["locked"][t, o] else -2 for o in objects],
                "g": [
                    objects.index(int(g)) if g >= 0 and int(g) in objects else -1 for g in grabbed
                ],
                "s": np.argwhere(sees[t]).tolist(),
                "sc": r(scores[t]),
                "p": replay.prep_left(t),
            }
        )
    labels = {team: team_label(replay.metadata.get(team)) for team in TEAM_NAMES}
    return {
        "format": replay.header["format"],
        "version": replay.header["version"],
        "preset": cfg.preset,
        "horizon": cfg.horizon,
        "prep_steps": cfg.prep_steps,
        "fps": replay.fps,
        "floor": cfg.floor_size,
        "agent_radius": cfg.agent_radius,
        "vision_half_angle": cfg.vision_half_angle,
        "cone_radius": CONE_RADIUS,
        "walls": walls,
        "agents": [
            {
                "slot": k,
                "team": 0 if k < h else 1,
                "name": names[k],
            }
            for k in agents
        ],
        "objects": [
            {
                "kind": "ramp" if o >= n_boxes else "box",
                "half": r(half[o, :2]),
                "slot": int(o),
            }
            for o in objects
        ],
        "colours": {
            "hider": _css(HIDER_RGBA),
            "seeker": _css(SEEKER_RGBA),
            "box": _css(BOX_RGBA),
            "ramp": _css(RAMP_RGBA),
            "wall": _css(WALL_RGBA),
        },
        "labels": {team: text for team, text in labels.items() if text},
        "episode_stats": replay.header.get("episode_stats"),
        "frames": frames,
    }


def to_html(replay: Replay) -> str:
    data = replay_data(replay)
    # "</" inside a script element would end it early; JSON allows the escaped form.
    payload = json.dumps(data, separators=(",", ":")).replace("</", "<\\/")
    title = f"hide-and-seek replay ({replay.cfg.preset}, {replay.n_steps} steps)"
    title = title.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    return (
        _PAGE.replace("__TITLE__", title)
        .replace("__SIZE__", str(CANVAS_PX))
        .replace("__LEGEND__", legend_html())
        .replace("__DATA__", payload)
    )


def legend_html() -> str:
    """A small key under the player: what each shape, colour and line on the canvas means."""
    hider, seeker = _css(HIDER_RGBA), _css(SEEKER_RGBA)
    box, ramp = _css(BOX_RGBA), _css(RAMP_RGBA)

    def svg(body: str) -> str:
        return f'<svg width="22" height="14" viewBox="0 0 22 14" aria-hidden="true">{body}</svg>'

    def dot(colour):
        return svg(f'<circle cx="11" cy="7" r="5" fill="{colour}" stroke="#222"/>')

    def square(fill, stroke="none", width=0):
        return svg(
            f'<rect x="5" y="1" width="12" height="12" fill="{fill}" stroke="{stroke}" '
            f'stroke-width="{width}"/>'
        )

    def stroke(colour, width):
        return svg(f'<line x1="1" y1="7" x2="21" y2="7" stroke="{colour}" stroke-width="{width}"/>')

    cone = svg(f'<path d="M2 12 L20 3 A12 12 0 0 1 20 13 Z" fill="{hider}" fill-opacity="0.35"/>')
    ramp_key = svg(
        f'<rect x="5" y="1" width="12" height="12" fill="{ramp}"/>'
        '<rect x="5" y="10" width="12" height="3" fill="#000" fill-opacity="0.45"/>'
    )
    items = [
        (dot(hider), "hider"),
        (dot(seeker), "seeker"),
        (square(box), "box"),
        (ramp_key, "ramp (dark edge: its tall face)"),
        (square(box, hider, 3), "locked (outline: the team that locked it)"),
        (stroke(seeker, 4), "a seeker sees a hider"),
        (stroke(hider, 1.5), "a hider sees a seeker"),
        (stroke("#ffffff", 3), "grab"),
        (cone, "vision cone (135 degrees)"),
    ]
    cells = "".join(f'<span class="key">{icon}{text}</span>' for icon, text in items)
    return f'<div id="legend">{cells}</div>'


def write_html(replay: Replay, path) -> Path:
    """Write the page to `path` atomically; returns the path."""
    return atomic_write_bytes(path, to_html(replay).encode("utf-8"))


_PAGE = """<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<title>__TITLE__</title>
<style>
body { background: #1e2024; color: #e8e8e8; font: 14px sans-serif; margin: 16px; }
#wrap { display: inline-block; }
canvas { background: #dcd9cc; display: block; border-radius: 4px; }
#controls { display: flex; gap: 8px; align-items: center; margin-top: 8px; }
#scrub { flex: 1; }
button, select { font: inherit; }
#hud { margin: 6px 0; min-height: 1.3em; }
#legend { display: flex; flex-wrap: wrap; gap: 4px 14px; margin-top: 8px; font-size: 12px;
  max-width: __SIZE__px; color: #c8c8c8; }
.key { display: inline-flex; align-items: center; gap: 4px; }
</style>
</head>
<body>
<div id="wrap">
<div id="hud"></div>
<canvas id="view" width="__SIZE__" height="__SIZE__"></canvas>
<div id="controls">
<button id="play" type="button">Play</button>
<input id="scrub" type="range" min="0" value="0" step="1">
<span id="frame"></span>
<select id="speed">
<option value="0.25">0.25x</option><option value="0.5">0.5x</option>
<option value="1" selected>1x</option><option value="2">2x</option>
<option value="4">4x</option>
</select>
</div>
__LEGEND__
</div>
<script type="application/json" id="replay-data">__DATA__</script>
<script>
"use strict";
const D = JSON.parse(document.getElementById("replay-data").textContent);
const canvas = document.getElementById("view"), ctx = canvas.getContext("2d");
const scrub = document.getElementById("scrub"), playBtn = document.getElementById("play");
const hud = document.getElementById("hud"), label = document.getElementById("frame");
const speedSel = document.getElementById("speed");
const N = D.frames.length;
scrub.max = N - 1;
const TEAM = [D.colours.hider, D.colours.seeker];
const CONE_ALPHA = [0.12, 0.10];  // vision cone opacity: hiders, seekers
// View: the arena plus whatever left it, with a margin.
let lo = 0, hi = D.floor;
for (const f of D.frames) for (const p of f.a.concat(f.o)) {
  lo = Math.min(lo, p[0], p[1]); hi = Math.max(hi, p[0], p[1]);
}
lo -= 0.2; hi += 0.2;
const S = canvas.width / (hi - lo);
const X = x => (x - lo) * S, Y = y => (hi - y) * S;

function rect(x, y, yaw, hx, hy, fill, stroke, width) {
  ctx.save(); ctx.translate(X(x), Y(y)); ctx.rotate(-yaw);
  ctx.fillStyle = fill; ctx.fillRect(-hx * S, -hy * S, 2 * hx * S, 2 * hy * S);
  if (stroke) { ctx.lineWidth = width; ctx.strokeStyle = stroke;
    ctx.strokeRect(-hx * S, -hy * S, 2 * hx * S, 2 * hy * S); }
  ctx.restore();
}
function mix(a, b, w) {
  const p = c => [1, 3, 5].map(i => parseInt(c.substr(i, 2), 16));
  const A = p(a), B = p(b);
  return "rgb(" + A.map((v, i) => Math.round((1 - w) * v + w * B[i])).join(",") + ")";
}
function line(p, q, colour, width) {
  ctx.beginPath(); ctx.moveTo(X(p[0]), Y(p[1])); ctx.lineTo(X(q[0]), Y(q[1]));
  ctx.strokeStyle = colour; ctx.lineWidth = width; ctx.stroke();
}
function draw(t) {
  const f = D.frames[t];
  ctx.clearRect(0, 0, canvas.width, canvas.height);
  ctx.fillStyle = "#dcd9cc"; ctx.fillRect(X(0), Y(D.floor), D.floor * S, D.floor * S);
  for (const w of D.walls) rect(w[0], w[1], 0, w[2], w[3], D.colours.wall);
  D.objects.forEach((o, k) => {
    const [x, y, yaw] = f.o[k], lock = f.lk[k];
    const base = o.kind === "ramp" ? D.colours.ramp : D.colours.box;
    // a locked object keeps its colour (tinted it would look like a large agent); the outline
    // in the locking team's colour marks it
    const fill = lock >= 0 ? mix(base, "#ffffff", 0.15) : base;
    const stroke = lock >= 0 ? TEAM[lock] : (lock === -1 ? "#ffffff" : null);
    rect(x, y, yaw, o.half[0], o.half[1], fill, stroke, lock > -2 ? 4 : 0);
    if (o.kind === "ramp") {  // the tall face is at local -y
      ctx.save(); ctx.translate(X(x), Y(y)); ctx.rotate(-yaw);
      ctx.fillStyle = "rgba(0,0,0,0.45)";
      ctx.fillRect(-o.half[0] * S, o.half[1] * S * 0.6, 2 * o.half[0] * S, 0.4 * o.half[1] * S);
      ctx.restore();
    }
  });
  const pos = f.a;
  D.agents.forEach((a, k) => {  // vision cones under everything else
    const [x, y, yaw] = pos[k], h = yaw - Math.PI / 2, r = D.cone_radius * S;
    ctx.beginPath(); ctx.moveTo(X(x), Y(y));
    ctx.arc(X(x), Y(y), r, -(h + D.vision_half_angle), -(h - D.vision_half_angle));
    ctx.closePath(); ctx.fillStyle = TEAM[a.team]; ctx.globalAlpha = CONE_ALPHA[a.team];
    ctx.fill(); ctx.globalAlpha = 1;
  });
  for (const [i, j] of f.s) {
    const ti = D.agents[i].team, tj = D.agents[j].team;
    if (ti === tj) continue;
    line(pos[i], pos[j], TEAM[ti], ti === 1 ? 4 : 1.5);
  }
  f.g.forEach((o, k) => { if (o >= 0) line(pos[k], f.o[o], "#ffffff", 3); });
  D.agents.forEach((a, k) => {
    const [x, y, yaw] = pos[k], h = yaw - Math.PI / 2, r = D.agent_radius * S;
    ctx.beginPath(); ctx.arc(X(x), Y(y), r, 0, 2 * Math.PI);
    ctx.fillStyle = TEAM[a.team]; ctx.fill();
    ctx.lineWidth = 1.5; ctx.strokeStyle = "#222"; ctx.stroke();
    line([x, y], [x + 1.6 * D.agent_radius * Math.cos(h), y + 1.6 * D.agent_radius * Math.sin(h)],
         "#222", 3);
  });
  const seen = f.s.some(([i, j]) => D.agents[i].team === 1 && D.agents[j].team === 0);
  const phase = f.p > 0 ? "PREP " + f.p : (seen ? "PLAY: hiders seen" : "PLAY: hiders hidden");
  const lab = k => D.labels[k] ? " (" + D.labels[k] + ")" : "";
  hud.innerHTML = "";
  const add = (text, colour) => { const s = document.createElement("span");
    s.textContent = text; if (colour) s.style.color = colour; hud.appendChild(s); };
  add("t " + t + "/" + D.horizon + "  " + phase + "   ");
  add("hiders " + f.sc[0].toFixed(0) + lab("hiders") + "   ", TEAM[0]);
  add("seekers " + f.sc[1].toFixed(0) + lab("seekers"), TEAM[1]);
  label.textContent = t + " / " + (N - 1);
  scrub.value = t;
}
let t = 0, playing = false, last = 0, acc = 0;
function tick(now) {
  if (!playing) return;
  acc += (now - last) / 1000 * D.fps * parseFloat(speedSel.value); last = now;
  while (acc >= 1) { acc -= 1; t += 1; }
  if (t >= N - 1) { t = N - 1; setPlaying(false); }
  draw(t);
  if (playing) requestAnimationFrame(tick);
}
function setPlaying(on) {
  if (on && t >= N - 1) t = 0;
  playing = on; playBtn.textContent = on ? "Pause" : "Play";
  if (on) { last = performance.now(); acc = 0; requestAnimationFrame(tick); }
}
playBtn.onclick = () => setPlaying(!playing);
scrub.oninput = () => { t = parseInt(scrub.value); draw(t); };
document.addEventListener("keydown", e => {
  if (e.key === " ") { setPlaying(!playing); e.preventDefault(); }
  if (e.key === "ArrowRight") { t = Math.min(N - 1, t + 1); draw(t); }
  if (e.key === "ArrowLeft") { t = Math.max(0, t - 1); draw(t); }
});
const start = new URLSearchParams(location.search).get("t");
t = start === null ? 0 : Math.max(0, Math.min(N - 1, parseInt(start) || 0));
draw(t);
</script>
</body>
</html>
"""
