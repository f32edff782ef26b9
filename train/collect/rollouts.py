"""Eval rollouts as training data (`oxygen-gym eval libero --save-rollouts hdf5|lerobot`): every control step of an
episode recorded the way `collect` records a demo (both cameras, the policy state, the executed action, the
subtask and memory labels, the sim state), appended to OUT/rollouts/ in LIBERO's HDF5 layout as each episode ends
(durable, and safe for several workers: libero_hdf5 waits for a file another process holds), and with `lerobot`
exported as a LeRobotDataset to OUT/rollouts/lerobot when the run ends.

The action is what the policy executed: the training target of a rollout is the policy's own behaviour (filter by
`success` to keep what worked)."""
from __future__ import annotations

from pathlib import Path

import gymnasium as gym
import numpy as np

from oxygen_gym.envs.wrappers import request_render

from .libero_hdf5 import POLICY_ORIENTATION, Demo, write_demo

ROLLOUTS_DIR = "rollouts"
FORMATS = ("none", "hdf5", "lerobot")


def check_format(text: str) -> str:
    if text not in FORMATS:
        raise ValueError(f"--save-rollouts: {text!r}; expected one of {', '.join(FORMATS)}")
    return text


class RolloutRecorder(gym.Wrapper):
    """Wraps the LIBERO env inside the episode loop's wrappers: sees every control step, and asks the env to render
    each observation (with render_on_request only the policy's and the video's frames would be)."""

    def __init__(self, env: gym.Env) -> None:
        super().__init__(env)
        self.steps: dict[str, list] = {}
        self._obs: dict | None = None
        self._info: dict = {}

    def reset(self, **kwargs):
        obs, info = self.env.reset(**kwargs)
        self.steps = {k: [] for k in ("agentview", "wrist", "state", "joints", "act", "states", "sub", "mem")}
        self._obs, self._info = obs, info
        return obs, info

    def step(self, action):
        obs, info = self._obs, self._info
        sim = self.env.unwrapped.libero_env.env
        state = np.asarray(obs["state"], np.float32)
        self.steps["agentview"].append(obs["images"]["base"])
        self.steps["wrist"].append(obs["images"]["wrist"])
        self.steps["state"].append(state)
        self.steps["joints"].append(np.asarray(sim.robots[0]._joint_positions, np.float32))
        self.steps["act"].append(np.asarray(action, np.float32))
        self.steps["states"].append(sim.sim.get_state().flatten())
        self.steps["sub"].append(str(info.get("subtask") or ""))
        self.steps["mem"].append(info.get("memory"))  # None where the env labels no memory
        request_render(self.env)  # the next observation is recorded too
        obs, reward, terminated, truncated, info = self.env.step(action)
        self._obs, self._info = obs, info
        return obs, reward, terminated, truncated, info

    def demo(self, attrs: dict) -> Demo | None:
        """The episode recorded since the last reset (None when no step ran)."""
        s = self.steps
        if not s.get("act"):
            return None
        state = np.stack(s["state"])
        actions = np.stack(s["act"])
        return Demo(agentview=np.stack(s["agentview"]), wrist=np.stack(s["wrist"]), ee_states=state[:, :6],
                    gripper_states=state[:, 6:8], joint_states=np.stack(s["joints"]), actions=actions,
                    executed_actions=actions.copy(), states=np.stack(s["states"]), subtasks=list(s["sub"]),
                    memory=[str(m or "") for m in s["mem"]] if any(m is not None for m in s["mem"]) else [],
                    attrs=attrs)


def save_rollout(recorder: RolloutRecorder, out: str | Path, spec, success: bool, policy_seed: int,
                 checkpoint: str) -> Path | None:
    """The recorder's episode appended to OUT/rollouts/<suite>_task<id>_seed<seed>_demo.hdf5 as demo_<episode>
    (a rerun of the episode replaces it)."""
    env = recorder.env.unwrapped
    where = {"init_state": spec.init_state} if spec.scene is None else {"scene": spec.scene}
    demo = recorder.demo({**where, "episode": f"{spec.suite}/task{spec.task_id}/seed{spec.seed}/{spec.episode}",
                          "success": bool(success), "seed": int(spec.seed), "policy_seed": int(policy_seed),
                          "policy": str(checkpoint), "language": str(getattr(env, "language", "")),
                          "task_name": str(getattr(env, "task_name", ""))})
    if demo is None:
        return None
    path = Path(out) / ROLLOUTS_DIR / f"{spec.suite}_task{spec.task_id}_seed{spec.seed}_demo.hdf5"
    path.parent.mkdir(parents=True, exist_ok=True)
    write_demo(path, f"demo_{spec.episode}", demo, {"image_orientation": POLICY_ORIENTATION, "suite": spec.suite,
                                                     "task_id": int(spec.task_id), "source": "eval rollouts"})
    return path


def finish_rollouts(out: str | Path, fmt: str) -> dict | None:
    """With `lerobot`: every rollout of OUT/rollouts as a LeRobotDataset in OUT/rollouts/lerobot (rebuilt whole)."""
    folder = Path(out) / ROLLOUTS_DIR
    if fmt != "lerobot" or not any(folder.glob("*_demo.hdf5")):
        return None
    from ..lerobot_format import LEROBOT_DIR, export_lerobot

    return export_lerobot(folder, folder / LEROBOT_DIR)
