"""Headless MuJoCo rendering set-up shared by the envs.

On a machine without a GPU, MuJoCo renders through EGL on Mesa's software rasteriser: geometry bound, so multisample
antialiasing and shadows are a large share of each frame (two LIBERO cameras took ~200-400 ms per step on 2 CPU cores;
`offsamples = 0` roughly halved it). `fast_render` turns them off.
"""
from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Iterator


def use_headless_gl() -> None:
    """Choose EGL unless the user picked a GL backend; must run before robosuite, dm_control or libero import."""
    os.environ.setdefault("MUJOCO_GL", "egl")
    os.environ.setdefault("PYOPENGL_PLATFORM", "osmesa" if os.environ["MUJOCO_GL"] == "osmesa" else "egl")


def disable_robosuite_antialiasing(sim) -> None:
    """Rebuild a robosuite 1.4 offscreen context with multisampling off.

    MuJoCo reads `vis.quality.offsamples` only when the render context is made, which robosuite does while building
    the env, so the context is rebuilt in place (the env must not hard-reset afterwards, or it makes a new one).
    """
    sim.model.vis.quality.offsamples = 0
    ctx = sim._render_context_offscreen
    if ctx is None:
        return
    ctx.gl_ctx.make_current()
    ctx.con.free()
    ctx._set_mujoco_context_and_buffers()


def make_robosuite_context_current(sim) -> None:
    """robosuite 1.4 renders into whichever GL context is current; with several envs in one process (or one closed
    since), that may not be this env's. Call before anything that renders."""
    ctx = sim._render_context_offscreen
    if ctx is not None:
        ctx.gl_ctx.make_current()


class RenderCount:
    """Seconds spent rendering camera images, and how many, since it was made: the episode's time split
    (envs/episode.py) subtracts them from the env's step time to tell physics from rendering."""

    def __init__(self) -> None:
        self.render_s = 0.0
        self.frames = 0

    @contextlib.contextmanager
    def timing(self, frames: int) -> Iterator[None]:
        """Count the block's wall time as rendering `frames` camera images."""
        t0 = time.perf_counter()
        try:
            yield
        finally:
            self.render_s += time.perf_counter() - t0
            self.frames += frames
