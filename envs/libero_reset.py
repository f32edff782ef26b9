"""LIBERO's hard reset without the rebuild: the same episode, byte for byte, for ~1/3 to 1/4 of the time.

A hard reset (robosuite 1.4 `MujocoEnv.reset` with `hard_reset=True`, what LIBERO and both references run every
episode) frees the simulation and its render context, rebuilds the Python model (`_load_model`: new robots,
grippers, objects, placement samplers), compiles its XML into a new MuJoCo model, makes a new render context (an EGL
context plus MuJoCo's GPU-side copy of every mesh and texture), samples the scene (`_reset_internal`) and makes new
observables. Compiling and the render context are most of its time and depend only on the XML; the XML depends only
on the task. `ExactResetEnv.reset` runs every step of it with three exceptions, each of which leaves nothing for an
episode to tell apart:

- the MuJoCo model is a copy (`mj_copyModel`, every byte) of the one compiled from the same XML string at the first
  reset, taken right after compiling, before a scene draw moves any fixture (`model.body_pos`); the data is a fresh
  `MjData` of that copy, as a compile gives. Any XML change (another task, a different `_load_model`) compiles again.
- the render context is kept (its GPU copies come from the model's meshes and textures, which no reset changes); its
  scene, camera and options are made new, as a new context makes them.
- robosuite renders each camera once when it makes an observable, and again when it swaps the sensor in, only to
  learn the image's shape (`Observable._check_sensor_validity`); those four renders of a discarded image are answered
  with a black image of that shape. They were ~2 s of each reset on 2 cores.

With several robosuite envs in one process, make an env's GL context current before its reset or step, as LiberoEnv
does (`rendering.make_robosuite_context_current`): a hard reset frees its old context with `eglReleaseThread`, which
spoils whichever context is current at that moment (measured: a kept context then renders black; a rebuilding env's
next render changes too).

Everything else (the Python model, every numpy draw in the order a hard reset makes them, the controllers, the
observables) is the hard reset's own code. tests/envs/test_libero_reset_exact.py compares the two byte for byte
(observations, rewards, dones, success, the full MjData) over init states, tasks and both protocols' seed streams.
"""
from __future__ import annotations

import contextlib
import copy
from typing import Iterator

import mujoco
import numpy as np
import robosuite
from libero.libero.envs import OffScreenRenderEnv
from robosuite.utils.binding_utils import MjSim
from robosuite.utils.errors import RandomizationError

# The robosuite whose MujocoEnv.reset `_reset_once` follows line by line (pyproject pins it).
ROBOSUITE_VERSION = "1.4.0"


class ExactResetEnv(OffScreenRenderEnv):
    """LIBERO's `OffScreenRenderEnv` whose `reset()` gives what its hard reset gives without rebuilding the simulation
    while the task's XML stays the same (module docstring). `rebuilds` and `reuses` count the resets of each kind."""

    def __init__(self, **kwargs) -> None:
        if robosuite.__version__ != ROBOSUITE_VERSION:
            raise RuntimeError(f"ExactResetEnv follows robosuite {ROBOSUITE_VERSION}'s reset, found robosuite "
                               f"{robosuite.__version__}; use the hard reset (LiberoEnv(rebuild_sim=True))")
        if kwargs.get("hard_reset", True) is not True:
            raise ValueError(f"ExactResetEnv stands in for the hard reset: hard_reset must be True, got "
                             f"{kwargs['hard_reset']!r}")
        super().__init__(**kwargs)
        if self.env.renderer not in ("mujoco", "default") or self.env.has_renderer:
            raise ValueError("ExactResetEnv supports robosuite's offscreen MuJoCo renderer only, got renderer="
                             f"{self.env.renderer!r}, has_renderer={self.env.has_renderer}")
        self._xml: str | None = None  # the XML the pristine model was compiled from
        self._pristine: mujoco.MjModel | None = None
        self.rebuilds = 0
        self.reuses = 0

    def reset(self) -> dict:
        """`ControlEnv.reset`: retried while LIBERO's placement sampler gives up (RandomizationError), as LIBERO does."""
        while True:
            try:
                return self._reset_once(self.env)
            except RandomizationError:
                continue

    def _reset_once(self, env) -> dict:
        """robosuite 1.4 `MujocoEnv.reset` with hard_reset=True, deterministic_reset=False and the MuJoCo renderer,
        step for step, except where the module docstring says."""
        if env.deterministic_reset:
            raise RuntimeError("ExactResetEnv.reset: the env is resetting from an XML string (deterministic_reset)")
        env._destroy_viewer()
        old, env.sim = env.sim, None  # as _destroy_sim leaves it while the model is rebuilt
        env._load_model()
        raw = env.model.get_xml()
        xml = env._xml_processor(raw) if env._xml_processor is not None else raw
        if xml == self._xml and old is not None and old._render_context_offscreen is not None:
            context, old._render_context_offscreen = old._render_context_offscreen, None  # the sim goes, it stays
            env.sim = _sim_from_compiled(self._pristine, context)
            env.initialize_time(env.control_freq)  # as _initialize_sim
            self.reuses += 1
        else:
            env.sim, old = old, None  # _destroy_sim frees its render context now: hold no reference to it
            env._destroy_sim()
            env._initialize_sim(xml_string=raw)
            self._xml, self._pristine = xml, copy.copy(env.sim.model._model)  # before any scene draw moves a fixture
            self.rebuilds += 1
        env._reset_internal()  # makes the render context when there is none (the rebuild)
        env.sim.forward()
        env._obs_cache = {}
        with _shape_probes_unrendered(env.sim):
            for name, observable in env._setup_observables().items():
                env.modify_observable(observable_name=name, attribute="sensor", modifier=observable._sensor)
        env.visualize(vis_settings={vis: False for vis in env._visualizations})
        return env._get_observations(force_update=True)


def _sim_from_compiled(pristine: mujoco.MjModel, context) -> MjSim:
    """A new MjSim on a copy of `pristine`, as `MjSim.from_xml_string` makes one and `_initialize_sim` forwards it,
    with `context` attached as `MjRenderContextOffscreen.__init__` attaches a new one (forward included)."""
    sim = MjSim(copy.copy(pristine))
    sim.forward()
    context.gl_ctx.make_current()
    sim.forward()
    sim.add_render_context(context)
    context.sim, context.model, context.data = sim, sim.model, sim.data
    context.scn = mujoco.MjvScene(sim.model._model, maxgeom=1000)
    context.cam = mujoco.MjvCamera()
    context.cam.fixedcamid = 0
    context.cam.type = mujoco.mjtCamera.mjCAMERA_FIXED
    context.vopt = mujoco.MjvOption()
    context.pert = mujoco.MjvPerturb()
    context.pert.active = 0
    context.pert.select = 0
    context.pert.skinselect = -1
    return sim


@contextlib.contextmanager
def _shape_probes_unrendered(sim: MjSim) -> Iterator[None]:
    """While robosuite makes observables and swaps their sensors in, a camera sensor's render (called only to learn
    the image's shape, then discarded) returns a black image of that shape instead of rendering."""

    def probe(width=None, height=None, *, camera_name=None, depth=False, mode="offscreen", device_id=-1,
              segmentation=False):
        if segmentation:  # a segmentation image's shape comes from the scene: render it
            return MjSim.render(sim, width, height, camera_name=camera_name, depth=depth, mode=mode,
                                device_id=device_id, segmentation=segmentation)
        rgb = np.zeros((height, width, 3), np.uint8)
        return (rgb, np.zeros((height, width), np.float32)) if depth else rgb

    sim.render = probe
    try:
        yield
    finally:
        del sim.render
