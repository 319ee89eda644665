"""Offscreen rendering of a replay to frames, PNG, mp4 or gif, with the overlays a viewer needs.

Frames come from `envs.render.TopViewRenderer` (one GL context, `MUJOCO_GL=egl` on headless
machines) on the model the replay rebuilds; this module adds, per frame:
- locks: a locked object keeps its colour (a tint would make a box look like a large agent),
  glows a little (`LOCK_EMISSION`) and gets an outline on its top face in the colour of the
  team that locked it, as in the html replay;
- ramps: the top edge of the tall face (local -y) drawn dark, as in the html replay, so the
  slope's direction shows from above;
- vision cones: each agent's 135-degree cone out to `CONE_RADIUS` m, in its team's colour;
- lines of sight: a capsule from each agent to every opponent it sees, in the observer's team
  colour (seekers seeing hiders are the lines that cost hiders their reward, drawn thicker);
- grabs: a white capsule from an agent to the object it holds;
- text (PIL): step and horizon, the preparation countdown, cumulative team scores, team
  names/policy versions from the replay metadata, and whether any hider is seen. With the top
  camera it sits in a strip above the arena (the world is drawn in the rest of the frame, so
  nothing hides under it); in frames too small for a strip, and with a follow camera, over the
  picture's top-left corner.

Cameras: `top` (the model's orthographic overhead camera) or `follow:AGENT` (a free camera
`FOLLOW_DISTANCE` m behind and `FOLLOW_ELEVATION` degrees above agent AGENT, looking along its
heading; where a wall or a box would hide the agent it comes closer, then looks down more steeply,
so the agent stays in view next to walls and boxes; AGENT is the env's agent name, e.g.
`seeker_0`, or a slot number). Frame rate defaults to real time (`Replay.fps`): 1 / (timestep *
substeps) = 13.3 fps for the presets. mp4 (H.264 via imageio-ffmpeg) needs even frame sizes; gif
has no such limit. Outputs are written atomically (temporary file, rename).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated

import mujoco
import numpy as np
from PIL import Image, ImageDraw, ImageFont

from hns_train.atomic_file import atomic_write
from hns_train.envs.parallel import agent_names
from hns_train.envs.render import TopViewRenderer
from hns_train.envs.world import HIDER_RGBA, SEEKER_RGBA, object_half_extents
from hns_train.eval.recorder import team_label
from hns_train.eval.replay import Replay
from hns_train.eval.rundirs import FRAME_PX, output_format
from hns_train.eval.rundirs import VIDEO_FORMATS as FORMATS
from hns_train.eval.stop import raise_if_stopped
from hns_train.optional import available
from hns_train.typed_config import Bounds, check_ranges

FOLLOW_DISTANCE = 2.5
FOLLOW_ELEVATION = -35.0
# Where a wall or an object would hide the agent, the camera first comes closer, in front of
# the obstacle (FOLLOW_MARGIN m before it) down to FOLLOW_NEAR m, or turns round the agent, and
# only then looks down more steeply: a steep camera behind an agent that backs onto the outer
# wall sees mostly the wall's top and the void beyond it.
FOLLOW_ELEVATIONS = (FOLLOW_ELEVATION, -50.0, -65.0, -80.0, -89.0)
FOLLOW_NEAR = 1.2
# Azimuths (degrees from behind the agent) tried at each elevation before a steeper one: an
# agent with its back to a wall is seen from beside it, with the arena in the picture.
FOLLOW_TURNS = (0.0, 45.0, -45.0, 90.0, -90.0)
FOLLOW_MIN_DISTANCE = 0.8
FOLLOW_MARGIN = 0.1
VISIBLE_GROUPS = np.array([1, 1, 1, 0, 0, 0], np.uint8)  # geom groups a frame shows
LOCK_EMISSION = 0.2  # scene-level glow of a locked object in video frames
LOCK_OUTLINE = 0.03  # capsule radius (m) of a locked object's outline
RAMP_EDGE = 0.035  # capsule radius (m) of a ramp's tall-face edge
RAMP_EDGE_RGBA = (0.12, 0.12, 0.12, 1.0)
CONE_RADIUS = 0.8  # m, in the video and the html replay
CONE_SEGMENTS = 8  # arc pieces of a drawn vision cone
CONE_ALPHA = 0.55
MAX_STRIP_SHARE = 0.25  # the text strip's largest share of the frame height
SIGHT_WIDTH = 0.02  # capsule radius (m) of an opponent line of sight
SEEKER_SIGHT_WIDTH = 0.035
GRAB_RGBA = (1.0, 1.0, 1.0, 0.9)
TEAM_RGBA = (np.array(HIDER_RGBA), np.array(SEEKER_RGBA))
TEAM_NAMES = ("hiders", "seekers")
MIN_FRAME_PX = 16  # a frame's least width and height
# a frame's largest width and height: half the 16384-pixel render buffer OpenGL 4 promises, so
# no driver fails to allocate the frame (a larger one stopped MuJoCo with a FatalError)
MAX_FRAME_PX = 8192
STRIP_RGB = (30, 32, 36)  # the text strip, the html page's background


@dataclass(frozen=True)
class VideoOptions:
    width: Annotated[int, Bounds(MIN_FRAME_PX, MAX_FRAME_PX)] = FRAME_PX
    height: Annotated[int, Bounds(MIN_FRAME_PX, MAX_FRAME_PX)] = FRAME_PX
    camera: str = "top"  # "top" | "follow:AGENT"
    fps: Annotated[float | None, Bounds(0, inclusive=False)] = None  # None: real time
    sight_lines: bool = True
    vision_cones: bool = True
    text: bool = True

    def __post_init__(self):
        check_ranges(self)

    def check_format(self, fmt: str) -> None:
        """ValueError where frames of this size cannot be written as `fmt` (H.264 in an mp4
        needs even sizes and the imageio-ffmpeg package): checked before anything is rendered."""
        if fmt == "mp4" and not available("imageio_ffmpeg"):
            raise ValueError("mp4 needs the imageio-ffmpeg package; write a .gif or .png")
        if fmt == "mp4" and (self.width % 2 or self.height % 2):
            raise ValueError(f"mp4 needs even frame sizes, got {self.width} x {self.height}")


def parse_camera(spec: str, replay: Replay) -> int | None:
    """None for the top camera, else the agent slot a `follow:AGENT` camera tracks."""
    if spec == "top":
        return None
    if not spec.startswith("follow:"):
        raise ValueError(f"camera {spec!r} is not 'top' or 'follow:AGENT'")
    who = spec.split(":", 1)[1]
    names = agent_names(replay.cfg.max_hiders, replay.cfg.max_seekers)  # hider_0, ... seeker_0
    present = replay.layout.agent_present
    if who in names:
        slot = names.index(who)
    elif who.lstrip("-").isdigit():
        slot = int(who)
    else:
        slot = -1
    allowed = [f"{k} / {n}" for k, n in enumerate(names) if present[k]]
    if not 0 <= slot < len(names) or not present[slot]:
        raise ValueError(f"camera {spec!r}: no agent {who!r} in this replay; allowed: {allowed}")
    return slot


class ReplayVideo:
    """Renders frames of one replay; use as a context manager or call `close()`."""

    def __init__(self, replay: Replay, options: VideoOptions | None = None):
        self.replay = replay
        self.options = opts = options or VideoOptions()
        self.follow = parse_camera(opts.camera, replay)
        self.model, self.data = replay.rebuild()
        vis = self.model.vis.global_
        vis.offwidth = max(vis.offwidth, opts.width)
        vis.offheight = max(vis.offheight, opts.height)
        self.index = replay.index(self.model)
        self.scores = replay.team_scores()
        size = max(10, opts.height // 30)
        self._font = ImageFont.load_default(size=size)
        self._font_size = size
        self._pad = max(3, size // 3)
        strip = 2 * (size + self._pad) + self._pad  # two lines of text
        wants_strip = opts.text and self.follow is None
        self._strip = strip if wants_strip and strip <= MAX_STRIP_SHARE * opts.height else 0
        self.renderer: TopViewRenderer | None = None  # made by the first frame: `show` has none
        self._half = object_half_extents(replay.cfg, replay.layout)
        self.camera = None  # the follow camera, as posed for the newest frame
        if self.follow is not None:
            self.camera = mujoco.MjvCamera()
            self.camera.type = mujoco.mjtCamera.mjCAMERA_FREE
            self.camera.distance = FOLLOW_DISTANCE
            self.camera.elevation = FOLLOW_ELEVATION

    # -- public
    def frame(self, t: int) -> np.ndarray:
        """(height, width, 3) uint8 picture of frame t with overlays."""
        raise_if_stopped()  # a stop the signal's own exception did not bring (stop.py)
        r = self.replay
        r.set_state(self.model, self.data, t, self.index)
        t = t % r.n_frames
        camera = None
        if self.camera is not None:
            a = self.follow
            heading = r["qpos"][t, self.index.agent_qpos[a, 3]] - np.pi / 2
            self._aim(self.data.xpos[self.index.agent_body[a]], np.degrees(heading))
            camera = self.camera
        if self.renderer is None:
            self.renderer = TopViewRenderer(self.options.width, self.options.height - self._strip)
        image = self.renderer.render(
            self.model, self.data, camera=camera, decorate=lambda scene: self._decorate(scene, t)
        )
        if self._strip:
            framed = np.empty((self.options.height, self.options.width, 3), np.uint8)
            framed[: self._strip] = STRIP_RGB
            framed[self._strip :] = image
            image = framed
        if self.options.text:
            image = self._draw_text(image, t)
        return image

    def _aim(self, target: np.ndarray, azimuth: float) -> None:
        """Point the follow camera at `target` from behind (`azimuth`): the first pose of
        `FOLLOW_ELEVATIONS` x `FOLLOW_TURNS` (turned that far round the agent) with at least
        `FOLLOW_NEAR` m clear (a wall or a box between the agent and the camera would hide the
        agent), `FOLLOW_DISTANCE` m away or in front of what blocks the line; else the pose
        where the clear line is longest."""
        cam = self.camera
        cam.lookat[:] = target
        body = int(self.index.agent_body[self.follow])
        hit_geom = np.zeros(1, np.int32)
        best = (-1.0, FOLLOW_ELEVATION, azimuth)
        for elevation in FOLLOW_ELEVATIONS:
            for turn in FOLLOW_TURNS:
                az, el = np.radians(azimuth + turn), np.radians(elevation)
                back = -np.array([np.cos(el) * np.cos(az), np.cos(el) * np.sin(az), np.sin(el)])
                hit = mujoco.mj_ray(
                    self.model, self.data, target, back, VISIBLE_GROUPS, 1, body, hit_geom
                )
                clear = FOLLOW_DISTANCE if hit < 0 else min(hit - FOLLOW_MARGIN, FOLLOW_DISTANCE)
                if clear >= FOLLOW_NEAR or clear > best[0]:
                    best = (clear, elevation, azimuth + turn)
                if clear >= FOLLOW_NEAR:
                    break
            else:
                continue
            break
        cam.distance = max(best[0], FOLLOW_MIN_DISTANCE)
        cam.elevation, cam.azimuth = best[1], best[2]

    def frames(self, progress: bool = False) -> Iterator[np.ndarray]:
        from tqdm import tqdm

        steps = range(self.replay.n_frames)
        for t in tqdm(steps, desc="rendering", unit="frame", disable=not progress, leave=False):
            yield self.frame(t)

    def close(self) -> None:
        if self.renderer is not None:
            self.renderer.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    # -- overlays
    def _decorate(self, scene: mujoco.MjvScene, t: int) -> None:
        r, idx, d = self.replay, self.index, self.data
        locked, lock_team = r["locked"][t], r["lock_team"][t]
        glow = {int(idx.object_geom[o]) for o in np.flatnonzero(locked)}
        for g in range(scene.ngeom):
            geom = scene.geoms[g]
            if geom.objtype == mujoco.mjtObj.mjOBJ_GEOM and geom.objid in glow:
                geom.emission = LOCK_EMISSION
        pos = d.xpos[idx.agent_body]
        obj_pos = d.xpos[idx.object_body]
        team = (np.arange(r.cfg.max_agents) >= r.cfg.max_hiders).astype(int)
        present = r.layout.agent_present
        for o in range(r.cfg.max_boxes, r.cfg.max_boxes + r.cfg.n_ramps):  # tall-face edges
            corners = self._top_corners(o)
            _add_connector(scene, corners[0], corners[1], RAMP_EDGE, RAMP_EDGE_RGBA)
        for o in np.flatnonzero(locked):
            k = int(lock_team[o])
            if k >= 0:
                corners = self._top_corners(o)
                for a, b in zip(corners, np.roll(corners, -1, axis=0), strict=True):
                    _add_connector(scene, a, b, LOCK_OUTLINE, TEAM_RGBA[k])
        half_angle = r.cfg.vision_half_angle
        for a in np.flatnonzero(present) if self.options.vision_cones else ():
            heading = r["qpos"][t, idx.agent_qpos[a, 3]] - np.pi / 2
            angles = heading + np.linspace(-half_angle, half_angle, CONE_SEGMENTS + 1)
            rim = pos[a] + CONE_RADIUS * np.stack(
                [np.cos(angles), np.sin(angles), np.zeros_like(angles)], axis=1
            )
            rgba = TEAM_RGBA[team[a]].copy()
            rgba[3] = CONE_ALPHA
            for p, q in [(pos[a], rim[0]), (pos[a], rim[-1]), *zip(rim[:-1], rim[1:], strict=True)]:
                _add_connector(scene, p, q, 1.5, rgba, mujoco.mjtGeom.mjGEOM_LINE)
        if self.options.sight_lines:
            sees = r["sees_agent"][t]
            for i, j in np.argwhere(sees):
                if team[i] == team[j]:
                    continue
                width = SEEKER_SIGHT_WIDTH if team[i] == 1 and team[j] == 0 else SIGHT_WIDTH
                rgba = TEAM_RGBA[team[i]].copy()
                rgba[3] = 0.85
                _add_connector(scene, pos[i], pos[j], width, rgba)
        for a, o in enumerate(r["grabbed"][t]):
            if o >= 0:
                _add_connector(scene, pos[a], obj_pos[o], 0.025, np.array(GRAB_RGBA))

    def _top_corners(self, o: int) -> np.ndarray:
        """(4, 3) corners of object o's top face, from its local -y edge round."""
        hx, hy, hz = self._half[o]
        body = self.index.object_body[o]
        frame = self.data.xmat[body].reshape(3, 3)
        local = np.array([[-hx, -hy, hz], [hx, -hy, hz], [hx, hy, hz], [-hx, hy, hz]])
        return self.data.xpos[body] + (local + [0, 0, 0.01]) @ frame.T

    def text_lines(self, t: int) -> list[list[tuple[str, tuple[int, ...]]]]:
        """Frame t's two lines of text, as (piece, RGB colour) runs: step, phase and whether a
        hider is seen; each team's score and label. The video and the viewer print them."""
        r = self.replay
        left = r.prep_left(t)
        phase = f"PREP {left}" if left else "PLAY"
        seen = r["sees_agent"][t][r.cfg.max_hiders :, : r.cfg.max_hiders].any()
        status = "" if left else ("  hiders SEEN" if seen else "  hiders hidden")
        lines = [[(f"t {t}/{r.cfg.horizon}  {phase}{status}", (255, 255, 255))], []]
        for k, name in enumerate(TEAM_NAMES):
            colour = tuple(int(255 * c) for c in TEAM_RGBA[k][:3])
            label = team_label(r.metadata.get(name))
            who = f"  ({label})" if label else ""
            lines[1].append((f"{name} {self.scores[t, k]:+.0f}{who}   ", colour))
        return lines

    def _draw_text(self, image: np.ndarray, t: int) -> np.ndarray:
        font, size, pad = self._font, self._font_size, self._pad
        pil = Image.fromarray(image)
        draw = ImageDraw.Draw(pil, "RGBA")
        lines = self.text_lines(t)
        widths = [sum(draw.textlength(s, font=font) for s, _ in line) for line in lines]
        if not self._strip:  # over the picture: a dark box behind the text
            height = len(lines) * (size + pad) + pad
            draw.rectangle([0, 0, max(widths) + 2 * pad, height], fill=(0, 0, 0, 150))
        for k, line in enumerate(lines):
            x = pad
            for s, colour in line:
                draw.text((x, pad + k * (size + pad)), s, fill=colour, font=font)
                x += draw.textlength(s, font=font)
        return np.asarray(pil)


def _add_connector(
    scene: mujoco.MjvScene, a, b, width: float, rgba, kind=mujoco.mjtGeom.mjGEOM_CAPSULE
) -> None:
    """A capsule (width: radius in m) or line (width in pixels) from a to b."""
    if scene.ngeom >= scene.maxgeom:
        return  # a full scene drops decorations rather than failing a render
    geom = scene.geoms[scene.ngeom]
    mujoco.mjv_initGeom(
        geom, kind, np.zeros(3), np.zeros(3), np.eye(3).ravel(), np.asarray(rgba, np.float32)
    )
    mujoco.mjv_connector(geom, kind, width, np.asarray(a, float), np.asarray(b, float))
    geom.category = mujoco.mjtCatBit.mjCAT_DECOR
    scene.ngeom += 1


# ----------------------------------------------------------------------------- outputs


def render_png(replay: Replay, path, t: int = -1, options: VideoOptions | None = None) -> Path:
    """Frame t (default: the last) to a PNG."""
    import imageio.v3 as iio

    with ReplayVideo(replay, options) as video:
        image = video.frame(t)
    return atomic_write(path, lambda tmp: iio.imwrite(tmp, image, extension=".png"), ".png")


def _encode_mp4(tmp: str, frames: Iterator[np.ndarray], fps: float, size: tuple[int, int]) -> None:
    """H.264 (yuv420p, quality 7 of 10) through an ffmpeg child. A render stopped mid-way
    (SIGTERM raises SystemExit) hands its exit to the encoder, which then kills ffmpeg instead
    of waiting for it to encode the frames it holds, for a file that is deleted anyway."""
    import imageio_ffmpeg

    encoder = imageio_ffmpeg.write_frames(
        tmp, size, fps=fps, codec="libx264", pix_fmt_out="yuv420p", quality=7, macro_block_size=1
    )
    encoder.send(None)  # starts ffmpeg
    try:
        for image in frames:
            encoder.send(np.ascontiguousarray(image))
    except BaseException as e:
        encoder.throw(e)  # raises e again, once ffmpeg is stopped
        raise
    encoder.close()  # ffmpeg finishes the file


def write_video(
    replay: Replay,
    path,
    options: VideoOptions | None = None,
    fmt: str | None = None,
    progress: bool = False,
    frame: int = -1,
) -> Path:
    """Render every frame of `replay` to an mp4 or gif at `path`, or frame `frame` (default: the
    last) to a png; the format is `fmt`, else `path`'s extension. Returns the path."""
    opts = options or VideoOptions()
    fmt = output_format(path, fmt, FORMATS)
    opts.check_format(fmt)
    if fmt == "png":
        return render_png(replay, path, frame, opts)
    fps = opts.fps or replay.fps

    def write(tmp: str) -> None:
        import imageio.v2 as iio2

        with ReplayVideo(replay, opts) as video:
            if fmt == "mp4":
                _encode_mp4(tmp, video.frames(progress), fps, (opts.width, opts.height))
            else:
                # gif frame durations are in milliseconds
                with iio2.get_writer(
                    tmp, format="GIF-PIL", mode="I", duration=1000.0 / fps, loop=0
                ) as writer:
                    for image in video.frames(progress):
                        writer.append_data(image)
        raise_if_stopped()  # not renamed into place once asked to stop

    return atomic_write(path, write, suffix=f".{fmt}")


# ----------------------------------------------------------------------------- interactive


def show(replay: Replay, camera: str = "top", fps: float | None = None) -> None:
    """Play the replay in MuJoCo's interactive viewer (needs a display), over and over until it
    is closed.

    The video frames' overlays (lock outlines, ramp edges, vision cones, lines of sight, grabs)
    are drawn into the viewer's user scene, and the video's text (`text_lines`) as viewer text.
    """
    import time

    from hns_train.envs.render import CAMERA, display_available

    if not display_available():
        raise RuntimeError(
            "the interactive viewer needs a display (DISPLAY or WAYLAND_DISPLAY is unset); "
            "render to a file instead (--format mp4|gif|png|html)"
        )
    import mujoco.viewer

    video = ReplayVideo(replay, VideoOptions(camera=camera, fps=fps))  # renders no frame
    model, data, idx = video.model, video.data, video.index
    period = 1.0 / (fps or replay.fps)
    with mujoco.viewer.launch_passive(model, data) as viewer:
        if video.follow is None:
            viewer.cam.type = mujoco.mjtCamera.mjCAMERA_FIXED
            viewer.cam.fixedcamid = mujoco.mj_name2id(model, mujoco.mjtObj.mjOBJ_CAMERA, CAMERA)
        else:
            viewer.cam.type = mujoco.mjtCamera.mjCAMERA_TRACKING
            viewer.cam.trackbodyid = int(idx.agent_body[video.follow])
            viewer.cam.distance = FOLLOW_DISTANCE
            viewer.cam.elevation = FOLLOW_ELEVATION
        t = 0
        while viewer.is_running():
            start = time.monotonic()
            with viewer.lock():
                replay.set_state(model, data, t, idx)
                viewer.user_scn.ngeom = 0
                video._decorate(viewer.user_scn, t)
                if hasattr(viewer, "set_texts"):
                    text = ["".join(piece for piece, _ in line) for line in video.text_lines(t)]
                    scale = mujoco.mjtFontScale.mjFONTSCALE_150
                    viewer.set_texts((scale, mujoco.mjtGridPos.mjGRID_TOPLEFT, *text))
            viewer.sync()
            t = (t + 1) % replay.n_frames
            time.sleep(max(0.0, period - (time.monotonic() - start)))
