"""`oxygen_gym/DROID-v0`: a DROID-style single-arm setup on robosuite 1.4.0: a Franka Panda driven by joint velocities
at 15 Hz, scaled as DROID's own controller scales them, seen by two exterior cameras and a wrist camera.

DROID's controller takes joint velocities in [-1, 1] (a command whose largest entry exceeds 1 is scaled down as a
whole, keeping its direction) and moves each joint by up to 0.2 rad per 15 Hz step, i.e. 3 rad/s; robosuite's
JOINT_VELOCITY controller is configured to that range. The gripper takes DROID's position (0 open .. 1 closed),
binarised at 0.5 as openpi's DROID client does, since robosuite's Panda gripper is driven open/close.
"""
from __future__ import annotations

from typing import Any

from .rendering import RenderCount, disable_robosuite_antialiasing, make_robosuite_context_current, use_headless_gl

use_headless_gl()

import gymnasium as gym  # noqa: E402
import numpy as np  # noqa: E402
from gymnasium import spaces  # noqa: E402

from oxygen_gym.policies.robots.droid_robot import DROID  # noqa: E402

from .protocols import DROID_PROTOCOL, SimProtocol  # noqa: E402
from .spaces import camera_size as _camera_size  # noqa: E402
from .spaces import EpisodeCounter, check_action, policy_observation_space, positive_int  # noqa: E402

CONTROL_HZ = 15
MAX_JOINT_DELTA = 0.2  # rad per control step at full command (DROID's RobotIKSolver)
# policy camera name (the robot's, policies/robots/droid_robot.py) -> robosuite camera
CAMERAS = {"exterior": "agentview", "exterior_2": "sideview", "wrist": "robot0_eye_in_hand"}
TASKS = {  # task: (robosuite env, prompt, model camera for exterior_2: the bins arena has no sideview)
    "lift": ("Lift", "Lift the red cube", "sideview"),
    "stack": ("Stack", "Stack the red cube on the green cube", "sideview"),
    "pick_place_can": ("PickPlaceCan", "Put the can in its bin", "frontview"),
}
GRIPPER_OPEN_WIDTH = 0.08  # Panda finger joints span [0, 0.04] each; fully open is 8 cm between them
N_EPISODE_SEEDS = 2**31 - 1


def droid_joint_command(velocity: np.ndarray) -> np.ndarray:
    """DROID's scaling: a command whose largest |entry| exceeds 1 is divided by it, so the direction is kept."""
    peak = float(np.abs(velocity).max(initial=0.0))
    return velocity / peak if peak > 1.0 else velocity


class DroidEnv(gym.Env):
    """Panda + robosuite task. Action (8): 7 joint velocities in DROID units ([-1, 1] = up to 0.2 rad per step) and
    the gripper position (0 open .. 1 closed). State (8): 7 joint positions (rad) and the gripper (0 open .. 1 closed).
    Success: the robosuite task's own check."""

    metadata = {"render_modes": ["rgb_array"], "render_fps": CONTROL_HZ}
    robot = DROID.name
    cameras = tuple(CAMERAS)
    state_dim = DROID.state_dim
    action_dim = DROID.action_dim
    control_dt = 1.0 / CONTROL_HZ

    def __init__(
        self,
        task: str = "lift",
        camera_size: int | tuple[int, int] | None = None,
        fast_render: bool = False,
        max_steps: int | None = None,
        prompt: str | None = None,
        protocol: SimProtocol = DROID_PROTOCOL,
        render_mode: str | None = None,
    ) -> None:
        if task not in TASKS:
            raise ValueError(f"task must be one of {sorted(TASKS)}, got {task!r}")
        self.task = task
        self.protocol = protocol
        self.camera_size = _camera_size(camera_size, protocol.render_size)
        self.fast_render = bool(fast_render)
        self.max_steps = positive_int("max_steps", protocol.max_steps if max_steps is None else max_steps)
        self.language = TASKS[task][1] if prompt is None else str(prompt)
        self._camera_models = {**CAMERAS, "exterior_2": TASKS[task][2]}
        if render_mode is not None and render_mode not in self.metadata["render_modes"]:
            raise ValueError(f"render_mode must be None or one of {self.metadata['render_modes']}, got {render_mode!r}")
        self.render_mode = render_mode

        self.observation_space = policy_observation_space(self.cameras, self.camera_size, self.state_dim)
        low = np.array([-1.0] * 7 + [0.0], dtype=np.float32)
        self.action_space = spaces.Box(low, np.ones(8, dtype=np.float32), dtype=np.float32)

        self._sim = None  # robosuite env, built on first reset (a few seconds)
        self._base_seed = protocol.seed
        self._counter = EpisodeCounter(N_EPISODE_SEEDS)
        self._counter.base_seed = protocol.seed
        self._episode: int | None = None
        self._steps = 0
        self._over = True
        self._last_images: dict[str, np.ndarray] | None = None
        self.render_count = RenderCount()  # camera render seconds and images, for the episode's time split

    @property
    def robosuite_env(self):
        """The underlying robosuite env (built on first reset), for scripted experts and tests."""
        return self._sim

    def _ensure_sim(self):
        if self._sim is None:
            import robosuite
            from robosuite.controllers import load_controller_config

            controller = load_controller_config(default_controller="JOINT_VELOCITY")
            top = MAX_JOINT_DELTA * CONTROL_HZ  # rad/s reached at a full command
            controller.update(input_max=1, input_min=-1, output_max=top, output_min=-top, velocity_limits=[-top, top])
            h, w = self.camera_size
            self._sim = robosuite.make(
                TASKS[self.task][0], robots="Panda", controller_configs=controller, control_freq=CONTROL_HZ,
                has_renderer=False, has_offscreen_renderer=True, use_camera_obs=False, use_object_obs=True,
                reward_shaping=False, ignore_done=True, hard_reset=False, horizon=self.max_steps + 1,
                camera_names=list(self._camera_models.values()), camera_heights=h, camera_widths=w,
            )
            if self.fast_render:
                disable_robosuite_antialiasing(self._sim.sim)
        return self._sim

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        """Episode `i` (options["init_state"], default: resets since the last seeded one) draws its object placement
        and joint noise from a generator seeded by (seed, i), whatever ran before."""
        super().reset(seed=seed)
        episode = self._counter.next(seed, options)
        self._base_seed = self._counter.base_seed
        sim = self._ensure_sim()
        saved = np.random.get_state()  # robosuite's samplers draw from numpy's global RNG: seed it, then put it back
        try:
            np.random.seed(int(np.random.SeedSequence([self._base_seed, episode]).generate_state(1)[0]))
            sim.robots[0].gripper.current_action = np.zeros(sim.robots[0].gripper.dof)  # outlives a soft reset
            sim.reset()
        finally:
            np.random.set_state(saved)
        self._episode, self._steps, self._over = episode, 0, False
        return self._observation(), self._info(bool(sim._check_success()))

    def step(self, action):
        if self._sim is None or self._episode is None:
            raise RuntimeError("DROID-v0: call reset() before step()")
        if self._over:
            raise RuntimeError("DROID-v0: the episode is over (terminated or truncated); call reset()")
        arr = check_action(action, self.action_dim)
        joints = droid_joint_command(arr[:7])
        gripper = 1.0 if arr[7] > 0.5 else -1.0  # robosuite: +1 closes, -1 opens
        _, reward, _, _ = self._sim.step(np.concatenate([joints, [gripper]]))
        self._steps += 1
        success = bool(self._sim._check_success())
        terminated = success
        truncated = not terminated and self._steps >= self.max_steps
        self._over = terminated or truncated
        return self._observation(), float(reward), terminated, truncated, self._info(success)

    def hold_action(self, last_action: np.ndarray | None) -> np.ndarray:
        """A step without a new command (LiveClock): the robot's hold (droid_robot.hold_droid: zero joint
        velocity, the last gripper position command, open before any)."""
        return DROID.hold_action(last_action)

    def render(self):
        if self.render_mode != "rgb_array" or self._last_images is None:
            return None
        return np.concatenate([self._last_images[c] for c in self.cameras], axis=1)

    def close(self) -> None:
        if self._sim is not None:
            self._sim.close()
            self._sim = None
        self._episode = None

    def joint_state(self) -> tuple[np.ndarray, float]:
        """Joint positions (7, rad) and gripper closure (0 open .. 1 closed) of the arm now."""
        robot = self._sim.robots[0]
        data = self._sim.sim.data
        joints = np.array(data.qpos[robot._ref_joint_pos_indexes], dtype=np.float64)
        fingers = data.qpos[robot._ref_gripper_joint_pos_indexes]
        closure = 1.0 - (float(fingers[0]) - float(fingers[1])) / GRIPPER_OPEN_WIDTH
        return joints, float(np.clip(closure, 0.0, 1.0))

    def _observation(self) -> dict[str, Any]:
        h, w = self.camera_size
        sim = self._sim.sim
        make_robosuite_context_current(sim)
        # robosuite renders in OpenGL's convention (bottom row first): flip to upright
        with self.render_count.timing(len(self._camera_models)):
            images = {name: np.ascontiguousarray(sim.render(width=w, height=h, camera_name=cam)[::-1])
                      for name, cam in self._camera_models.items()}
        self._last_images = images
        joints, closure = self.joint_state()
        state = np.concatenate([joints, [closure]]).astype(np.float32)
        return {"images": images, "state": state, "prompt": self.language}

    def _info(self, success: bool) -> dict:
        return {"is_success": bool(success), "task": self.task, "episode": self._episode, "seed": self._base_seed,
                "step": self._steps, "episode_id": f"droid/{self.task}/seed{self._base_seed}/ep{self._episode}"}
