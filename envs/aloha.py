"""`oxygen_gym/ALOHA-v0`: gym-aloha's bimanual ViperX tasks (dm_control physics, gym-aloha's assets and rewards),
rendering only the cameras the policy reads, at the size it asks for.

gym-aloha's own step renders three 640x480 views it does not return (~0.3-0.45 s on CPU); here the task returns
joint state only and the env renders `high` (the `top` camera) and the two wrist cameras itself (~47 ms at 224 px
without antialiasing and shadows, measured on 2 CPU cores).
"""
from __future__ import annotations

import collections
from typing import Sequence

from .rendering import RenderCount, use_headless_gl

use_headless_gl()

import gymnasium as gym  # noqa: E402
import mujoco  # noqa: E402
import numpy as np  # noqa: E402
from gymnasium import spaces  # noqa: E402

from oxygen_gym.policies.robots.aloha_robot import ALOHA  # noqa: E402

from .protocols import ALOHA_PROTOCOL, SimProtocol  # noqa: E402
from .spaces import camera_size as _camera_size  # noqa: E402
from .spaces import EpisodeCounter, check_action, policy_observation_space, positive_int  # noqa: E402

# policy camera name (the robot's, policies/robots/aloha_robot.py) -> camera in gym-aloha's model
CAMERAS = {"high": "top", "left_wrist": "left_wrist", "right_wrist": "right_wrist"}
TASKS = {
    # prompts of the datasets the public ALOHA-sim policies were trained on (openpi's pi0_aloha_sim: "Transfer cube")
    "transfer_cube": ("bimanual_viperx_transfer_cube.xml", "Transfer cube"),
    "insertion": ("bimanual_viperx_insertion.xml", "Insert the peg into the socket"),
}
N_EPISODE_POSES = 2**31 - 1


def _state_only(self, physics) -> collections.OrderedDict:
    return collections.OrderedDict(qpos=self.get_qpos(physics))


def _task_class(task: str):
    from gym_aloha.tasks.sim import InsertionTask, TransferCubeTask

    base = TransferCubeTask if task == "transfer_cube" else InsertionTask
    # gym-aloha's rewards and resets, minus the three unused 640x480 renders in get_observation
    return type(f"StateOnly{base.__name__}", (base,), {"get_observation": _state_only})


class AlohaEnv(gym.Env):
    """A bimanual ALOHA task. Action: 14 absolute joint targets (6 arm joints + gripper per arm; grippers normalised,
    0 closed .. 1 open). State: the same 14 quantities measured. Success: gym-aloha's top reward (4)."""

    metadata = {"render_modes": ["rgb_array"], "render_fps": 50}
    robot = ALOHA.name
    state_dim = ALOHA.state_dim
    action_dim = ALOHA.action_dim
    control_dt = 0.02  # gym-aloha's DT: 50 Hz

    def __init__(
        self,
        task: str = "transfer_cube",
        camera_size: int | tuple[int, int] | None = None,
        cameras: Sequence[str] = tuple(CAMERAS),
        fast_render: bool = False,
        max_steps: int | None = None,
        prompt: str | None = None,
        protocol: SimProtocol = ALOHA_PROTOCOL,
        render_mode: str | None = None,
    ) -> None:
        if task not in TASKS:
            raise ValueError(f"task must be one of {sorted(TASKS)}, got {task!r}")
        cameras = tuple(cameras)
        if not cameras or any(c not in CAMERAS for c in cameras) or len(set(cameras)) != len(cameras):
            raise ValueError(f"cameras must be distinct names from {list(CAMERAS)}, got {list(cameras)}")
        self.task = task
        self.cameras = cameras
        self.protocol = protocol
        self.camera_size = _camera_size(camera_size, protocol.render_size)
        self.fast_render = bool(fast_render)
        self.max_steps = positive_int("max_steps", protocol.max_steps if max_steps is None else max_steps)
        self.language = TASKS[task][1] if prompt is None else str(prompt)
        if render_mode is not None and render_mode not in self.metadata["render_modes"]:
            raise ValueError(f"render_mode must be None or one of {self.metadata['render_modes']}, got {render_mode!r}")
        self.render_mode = render_mode

        self._env = self._make_env()
        physics = self._env.physics
        arm = [physics.model.jnt_range[physics.model.name2id(f"vx300s_{side}/{j}", "joint")]
               for side in ("left", "right")
               for j in ("waist", "shoulder", "elbow", "forearm_roll", "wrist_angle", "wrist_rotate")]
        low = np.array([*(r[0] for r in arm[:6]), 0.0, *(r[0] for r in arm[6:]), 0.0], dtype=np.float32)
        high = np.array([*(r[1] for r in arm[:6]), 1.0, *(r[1] for r in arm[6:]), 1.0], dtype=np.float32)
        self.action_space = spaces.Box(low, high, dtype=np.float32)
        self.observation_space = policy_observation_space(self.cameras, self.camera_size, self.state_dim)

        self._base_seed = protocol.seed
        self._counter = EpisodeCounter(N_EPISODE_POSES)
        self._counter.base_seed = protocol.seed
        self._episode: int | None = None
        self._steps = 0
        self._over = True
        self._last_images: dict[str, np.ndarray] | None = None
        self.render_count = RenderCount()  # camera render seconds and images, for the episode's time split

    def _make_env(self):
        from dm_control import mujoco as dm_mujoco
        from dm_control.rl import control
        from gym_aloha.constants import ASSETS_DIR, DT

        physics = dm_mujoco.Physics.from_xml_path(str(ASSETS_DIR / TASKS[self.task][0]))
        h, w = self.camera_size
        vis = physics.model.vis
        vis.global_.offwidth, vis.global_.offheight = max(vis.global_.offwidth, w), max(vis.global_.offheight, h)
        if self.fast_render:
            vis.quality.offsamples = 0  # read when the render context is made, at the first render
        return control.Environment(physics, _task_class(self.task)(), time_limit=float("inf"), control_timestep=DT,
                                   n_sub_steps=None, flat_observation=False)

    @property
    def physics(self):
        """dm_control Physics of the scene, for scripted experts and tests."""
        return self._env.physics

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        """Episode `i` (options["init_state"], default: resets since the last seeded one) places the objects as
        gym-aloha does for seed `seed + i`, so seed s, episode 0 is gym-aloha's `reset(seed=s)`."""
        from gym_aloha.tasks.sim import BOX_POSE
        from gym_aloha.utils import sample_box_pose, sample_insertion_pose

        super().reset(seed=seed)
        episode = self._counter.next(seed, options)
        self._base_seed = self._counter.base_seed
        pose_seed = (self._base_seed + episode) % 2**32
        if self.task == "transfer_cube":
            BOX_POSE[0] = sample_box_pose(pose_seed)
        else:
            BOX_POSE[0] = np.concatenate(sample_insertion_pose(pose_seed))
        if self._env is None:  # closed earlier
            self._env = self._make_env()
        timestep = self._env.reset()
        self._episode, self._steps, self._over = episode, 0, False
        return self._observation(timestep.observation), self._info(False)

    def step(self, action):
        if self._episode is None:
            raise RuntimeError("ALOHA-v0: call reset() before step()")
        if self._over:
            raise RuntimeError("ALOHA-v0: the episode is over (terminated or truncated); call reset()")
        arr = check_action(action, self.action_dim)
        timestep = self._env.step(arr)
        self._steps += 1
        reward = float(timestep.reward or 0.0)
        success = reward >= self._env.task.max_reward
        terminated = success
        truncated = not terminated and self._steps >= self.max_steps
        self._over = terminated or truncated
        return self._observation(timestep.observation), reward, terminated, truncated, self._info(success)

    def hold_action(self, last_action: np.ndarray | None) -> np.ndarray:
        """A step without a new command (LiveClock): the robot's hold (aloha_robot.hold_aloha: the last command
        again; before any, the measured joints)."""
        measured = None if last_action is not None else self._env.task.get_qpos(self._env.physics)
        return ALOHA.hold_action(last_action, measured)

    def render(self):
        if self.render_mode != "rgb_array" or self._last_images is None:
            return None
        return np.concatenate([self._last_images[c] for c in self.cameras], axis=1)

    def close(self) -> None:
        if self._env is not None:
            self._env.physics.free()
            self._env = None
        self._episode = None

    def _observation(self, raw: dict) -> dict:
        h, w = self.camera_size
        flags = {mujoco.mjtRndFlag.mjRND_SHADOW: False} if self.fast_render else None
        physics = self._env.physics
        with self.render_count.timing(len(self.cameras)):
            images = {name: physics.render(height=h, width=w, camera_id=CAMERAS[name], render_flag_overrides=flags)
                      for name in self.cameras}
        self._last_images = images
        return {"images": images, "state": np.asarray(raw["qpos"], dtype=np.float32), "prompt": self.language}

    def _info(self, success: bool) -> dict:
        return {"is_success": bool(success), "task": self.task, "episode": self._episode, "seed": self._base_seed,
                "step": self._steps, "episode_id": f"aloha/{self.task}/seed{self._base_seed}/ep{self._episode}"}
