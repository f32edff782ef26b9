"""LiveClock: the world does not wait for the policy. `step(action)` is one control step; `step(None)` is a step in
which the policy's queue is dry, and the robot holds, as the env defines holding (`hold_action(last)`):

- LIBERO (OSC_POSE deltas) and DROID (joint velocities): zero motion, the last gripper command;
- ALOHA (absolute joint targets): the last command again (before any command: the measured joint positions);
- any other env: the last action again (before any: zeros of the action space).

The control period comes from `control_dt=`, else the env's `control_dt`, `dt` (MuJoCo envs), or
1 / metadata["render_fps"]. `note(**fields)` tells the clock what the next step executes (AsyncPolicy.last_step:
the chunk, its index, the delay that chunk saw); each step adds `info["live"]` and a row of `records`.
"""
from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np

from .wrappers import request_render


def control_dt_of(env: gym.Env) -> float:
    """Seconds per control step of `env` (see the module docstring for the order of sources)."""
    base = env.unwrapped
    for attr in ("control_dt", "dt"):
        value = getattr(base, attr, None)
        if isinstance(value, (int, float)) and value > 0:
            return float(value)
    fps = (getattr(base, "metadata", None) or {}).get("render_fps")
    if isinstance(fps, (int, float)) and fps > 0:
        return 1.0 / fps
    raise ValueError(f"{type(base).__name__} states no control period (control_dt, dt or metadata['render_fps']); "
                     f"pass LiveClock(env, control_dt=SECONDS)")


class LiveClock(gym.Wrapper):
    """Steps the env once per control step, holding when given None; records per step what ran and the delay."""

    def __init__(self, env: gym.Env, control_dt: float | None = None) -> None:
        super().__init__(env)
        if control_dt is not None and not (isinstance(control_dt, (int, float)) and control_dt > 0):
            raise ValueError(f"control_dt: {control_dt!r}; expected seconds per control step > 0")
        self.control_dt = float(control_dt) if control_dt is not None else control_dt_of(env)
        self.records: list[dict[str, Any]] = []
        self._last: np.ndarray | None = None
        self._next: dict[str, Any] = {}

    def reset(self, **kwargs):
        self.records, self._last, self._next = [], None, {}
        return self.env.reset(**kwargs)

    def hold_action(self) -> np.ndarray:
        """What the robot does on a step without a new action (see the module docstring)."""
        hold = getattr(self.env.unwrapped, "hold_action", None)
        if callable(hold):
            return np.asarray(hold(self._last), dtype=np.float32)
        if self._last is not None:
            return self._last.copy()
        return np.zeros(self.action_space.shape, dtype=self.action_space.dtype)

    def note(self, **fields: Any) -> None:
        """What the next step executes (recorded with it)."""
        self._next = dict(fields)

    @property
    def held_steps(self) -> int:
        return sum(bool(r["held"]) for r in self.records)

    def step(self, action):
        held = action is None
        arr = self.hold_action() if held else np.asarray(action, dtype=np.float32)
        # any step's observation may start a call (when the queue falls to its threshold, or a call in flight hands
        # over), so an env that renders on request renders every step here
        request_render(self.env)
        obs, reward, terminated, truncated, info = self.env.step(arr)
        self._last = arr
        record = {**self._next, "step": len(self.records), "held": held}
        self._next = {}
        self.records.append(record)
        info = dict(info)
        info["live"] = dict(record)
        return obs, reward, terminated, truncated, info
