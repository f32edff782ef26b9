"""Lift slowly while holding: scale a policy's upward commands wherever it closes the gripper.

The shipped LIBERO model pinches the bowl by its rim, and the state expert's pinch slips far less with a slower first
lift (docs/libero-spatial.md, "A slower first lift"); most of the policy's failures are a bowl lost in transit. This
applies the same idea to any policy at execution time: its own upward commands are scaled while its gripper command
closes, and the approach, the carry across and the lowering over the plate run at its own speed. On the shipped model
it was measured no better ("Lifting slowly while holding"), so it is an eval option, off by default.

LIBERO's actions are OSC_POSE deltas (dims 0-2 translation, z up) and a gripper command that closes when > 0
(robosuite/models/grippers/panda_gripper.py, PandaGripper.format_action moves the fingers by its sign).
"""
from __future__ import annotations

from typing import Any

import numpy as np

from gripper_latch import LIBERO_GRIPPER_DIM

LIBERO_UP_DIM = 2  # OSC_POSE delta z, + up


def check_lift_scale(scale: Any, name: str = "lift_scale") -> float:
    """A factor in (0, 1]: 1 leaves the commands as they are."""
    if isinstance(scale, bool) or not isinstance(scale, (int, float)) or not 0 < scale <= 1:
        raise ValueError(f"{name} must be a number in (0, 1] (the factor on upward commands while the gripper "
                         f"closes; 1 is off), got {scale!r}")
    return float(scale)


class SlowLift:
    """Wraps a policy whose `act(obs)` returns (horizon, action_dim) actions: each action whose gripper command
    closes (> 0) and whose `up_dim` command rises (> 0) has that command multiplied by `scale`. Stateless per call.
    Everything else (horizon, last_frame, close, reset, ...) is the wrapped policy's.
    """

    def __init__(self, policy: Any, *, scale: float, up_dim: int = LIBERO_UP_DIM,
                 gripper_dim: int = LIBERO_GRIPPER_DIM) -> None:
        self.policy, self.scale = policy, check_lift_scale(scale)
        self.up_dim, self.gripper_dim = up_dim, gripper_dim

    def __getattr__(self, name: str) -> Any:
        return getattr(self.__dict__["policy"], name)

    def act(self, obs: dict, *args, **kwargs):
        actions, updates = self.policy.act(obs, *args, **kwargs)
        chunk = np.array(actions, copy=True)
        if chunk.ndim != 2 or not 0 <= max(self.up_dim, self.gripper_dim) < chunk.shape[1]:
            raise ValueError(f"the slow lift needs (horizon, action_dim > {max(self.up_dim, self.gripper_dim)}) "
                             f"actions; the policy returned shape {chunk.shape}")
        lifting = (chunk[:, self.gripper_dim] > 0) & (chunk[:, self.up_dim] > 0)
        chunk[lifting, self.up_dim] *= self.scale
        return chunk, updates
