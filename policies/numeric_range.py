"""What numbers may enter the policy and leave it.

Why: a robot must never be handed NaN. Two guards, both cheap next to a frame:
- inputs in robot units (`state`, `prev_actions`) must be finite and within `MAX_ROBOT_UNITS` in magnitude. No joint,
  pose, gripper or encoder reading comes near it, and below it nothing the policy computes from them overflows float32
  (the guided real-time-chunking error squares the distance to `prev_actions`: 1e20 overflowed to inf, then NaN);
- every action a frame produces must be finite, or the frame's actions are refused with `NonFiniteActionsError`
  (naming the head and the likely cause) before any caller or `on_actions` callback sees them.
"""
from __future__ import annotations

import numpy as np

MAX_ROBOT_UNITS = 1e6  # |value| allowed in `state` and `prev_actions`, robot units


class NonFiniteActionsError(RuntimeError):
    """A frame produced NaN or inf actions; they were withheld. The policy and its language requests stay usable."""


def check_robot_units(values: np.ndarray, field: str) -> None:
    """Finite and within +-MAX_ROBOT_UNITS, or a ValueError naming `field` and what was expected."""
    if not np.isfinite(values).all():
        raise ValueError(f"{field}: holds NaN or inf")
    peak = float(np.abs(values).max()) if values.size else 0.0
    if peak > MAX_ROBOT_UNITS:
        raise ValueError(
            f"{field}: a value of magnitude {peak:.3g}, outside [-{MAX_ROBOT_UNITS:g}, {MAX_ROBOT_UNITS:g}] robot units "
            "(no robot's state or action comes near it; larger values overflow the model's arithmetic)"
        )


def check_finite_actions(per_head: dict[str, np.ndarray], guided: bool) -> None:
    """Raise NonFiniteActionsError when any head's actions hold NaN or inf."""
    bad = [h for h, a in per_head.items() if not np.isfinite(a).all()]
    if not bad:
        return
    cause = ("the previous chunk it was guided towards (prev_actions) or the state" if guided
             else "the observation's state or the model's weights")
    raise NonFiniteActionsError(
        f"actions of head(s) {bad} are not finite (NaN or inf); they were withheld. Likely cause: {cause}"
    )
