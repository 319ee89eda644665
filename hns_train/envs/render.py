"""Pictures of hide-and-seek worlds: the fixed overhead camera ("top" in world.py).

- `TopViewRenderer(width, height)` renders any (MjModel, MjData) of this game to a uint8
  (height, width, 3) frame offscreen. It keeps one GL context and rebuilds MuJoCo's render
  context only when a model brings different render assets (meshes, textures, framebuffer size),
  so the per-episode models of one preset (new walls and poses, same assets) reuse it. The replay
  renderer in `eval/` uses it on models it rebuilt.
- `HumanViewer` shows the world in `mujoco.viewer.launch_passive` (the env refuses
  `render_mode='human'` where no display exists: `display_available`).
- `python -m hns_train.envs.render --preset quadrant --out docs/quadrant.png` writes one frame;
  docs/randomwalls.png is `--preset randomwalls --seed 11` (a layout with outer walls and rooms).

Offscreen rendering needs a headless GL backend chosen before MuJoCo is imported:
`hns_train.envs` sets `MUJOCO_GL=egl` when it is unset and no display exists. Game state is
advanced with `mj_kinematics` only, which leaves camera and light poses stale, so rendering runs
`mj_camlight` first. A locked object is drawn glowing: `world.set_locked_highlight` edits the
model when the lock changes, so frames need no extra state.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys

import mujoco
import numpy as np

CAMERA = "top"
MAX_SCENE_GEOMS = 2000


def display_available() -> bool:
    """Whether an interactive window can be opened (macOS always; Linux with X11 or Wayland)."""
    if sys.platform == "darwin":
        return True
    return bool(os.environ.get("DISPLAY") or os.environ.get("WAYLAND_DISPLAY"))


def _assets_key(model: mujoco.MjModel) -> tuple:
    """What MuJoCo's render context and scene depend on (everything else is read per frame)."""
    return (
        model.nmesh,
        model.mesh_vert.tobytes(),
        model.mesh_face.tobytes(),
        model.ntex,
        model.tex_data.size,
        model.nhfield,
        model.nskin,
        model.nflex,
        model.vis.global_.offwidth,
        model.vis.global_.offheight,
    )


class TopViewRenderer:
    """Offscreen frames of (model, data) from the model's "top" camera."""

    def __init__(self, width: int = 480, height: int = 480):
        if width < 1 or height < 1:
            raise ValueError(f"render size must be positive, got {width} x {height}")
        self.width, self.height = width, height
        self._gl = mujoco.GLContext(width, height)
        self._gl.make_current()
        self._key: tuple | None = None
        self._context: mujoco.MjrContext | None = None
        self._scene: mujoco.MjvScene | None = None
        self._option = mujoco.MjvOption()
        self._camera = mujoco.MjvCamera()
        self._camera.type = mujoco.mjtCamera.mjCAMERA_FIXED
        self._rect = mujoco.MjrRect(0, 0, width, height)

    def _prepare(self, model: mujoco.MjModel) -> None:
        key = _assets_key(model)
        if key == self._key:
            return
        buf_w, buf_h = model.vis.global_.offwidth, model.vis.global_.offheight
        if self.width > buf_w or self.height > buf_h:
            raise ValueError(
                f"frame {self.width} x {self.height} exceeds the model's offscreen buffer "
                f"{buf_w} x {buf_h}; allowed: width <= {buf_w}, height <= {buf_h}"
            )
        if self._context is not None:
            self._context.free()
        self._context = mujoco.MjrContext(model, mujoco.mjtFontScale.mjFONTSCALE_150)
        mujoco.mjr_setBuffer(mujoco.mjtFramebuffer.mjFB_OFFSCREEN, self._context)
        self._scene = mujoco.MjvScene(model, maxgeom=MAX_SCENE_GEOMS)
        self._key = key

    def render(
        self,
        model: mujoco.MjModel,
        data: mujoco.MjData,
        camera: mujoco.MjvCamera | None = None,
        decorate=None,
    ) -> np.ndarray:
        """(height, width, 3) uint8 frame of `data` seen from the top camera.

        `camera` replaces the top camera (e.g. a free camera following an agent); `decorate`,
        called with the `MjvScene` before drawing, may add or recolour scene geoms (overlays).
        """
        if self._gl is None:
            raise RuntimeError("render() called after close()")
        cam = mujoco.mj_name2id(model, mujoco.mjtObj.mjOBJ_CAMERA, CAMERA)
        if cam < 0:
            raise ValueError(f"model has no camera named {CAMERA!r} (built by world.build_spec)")
        self._gl.make_current()
        self._prepare(model)
        mujoco.mj_camlight(model, data)
        self._camera.fixedcamid = cam
        mujoco.mjv_updateScene(
            model,
            data,
            self._option,
            None,
            self._camera if camera is None else camera,
            mujoco.mjtCatBit.mjCAT_ALL,
            self._scene,
        )
        if decorate is not None:
            decorate(self._scene)
        mujoco.mjr_render(self._rect, self._scene, self._context)
        frame = np.empty((self.height, self.width, 3), dtype=np.uint8)
        mujoco.mjr_readPixels(frame, None, self._rect, self._context)
        return np.ascontiguousarray(frame[::-1])  # OpenGL rows run bottom-up

    def close(self) -> None:
        if self._gl is None:
            return
        self._gl.make_current()
        if self._context is not None:
            self._context.free()
        self._context = self._scene = None
        self._gl.free()
        self._gl = None

    def __del__(self):
        # at interpreter shutdown the GL library may be gone already
        with contextlib.suppress(Exception):
            self.close()


class HumanViewer:
    """MuJoCo's interactive viewer, reopened when an episode brings a new model (needs a
    display: `display_available`)."""

    def __init__(self):
        self._viewer = None
        self._model = None

    def show(self, model: mujoco.MjModel, data: mujoco.MjData) -> None:
        import mujoco.viewer

        if self._viewer is not None and (self._model is not model or not self._viewer.is_running()):
            self.close()
        if self._viewer is None:
            mujoco.mj_camlight(model, data)
            self._viewer = mujoco.viewer.launch_passive(model, data)
            self._viewer.cam.type = mujoco.mjtCamera.mjCAMERA_FIXED
            self._viewer.cam.fixedcamid = mujoco.mj_name2id(
                model, mujoco.mjtObj.mjOBJ_CAMERA, CAMERA
            )
            self._model = model
        self._viewer.sync()

    def close(self) -> None:
        if self._viewer is not None:
            self._viewer.close()
        self._viewer = self._model = None


def render_frame(
    preset: str = "quadrant", seed: int = 0, steps: int = 0, **game_params
) -> np.ndarray:
    """One frame of a fresh `preset` world after `steps` random-action steps."""
    from hns_train.envs.config import make_config
    from hns_train.envs.game import HideAndSeekGame

    cfg = make_config(preset, **game_params)
    game = HideAndSeekGame(cfg, 1, seed=seed)
    game.reset()
    rng = np.random.default_rng(seed)
    for _ in range(steps):
        game.step(rng.integers(0, game.action_nvec, size=(1, game.n_agents, 5)))
    renderer = TopViewRenderer(cfg.render_width, cfg.render_height)
    try:
        return renderer.render(game.model, game.data)
    finally:
        renderer.close()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="Render one overhead frame of a preset's world.")
    parser.add_argument("--preset", default="quadrant")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--steps", type=int, default=0, help="random-action steps before the shot")
    parser.add_argument("--out", required=True, help="PNG path")
    args = parser.parse_args(argv)
    import imageio.v3 as iio

    frame = render_frame(args.preset, args.seed, args.steps)
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    iio.imwrite(args.out, frame)
    print(f"wrote {args.out} ({frame.shape[1]} x {frame.shape[0]}, preset {args.preset})")


if __name__ == "__main__":
    main()
