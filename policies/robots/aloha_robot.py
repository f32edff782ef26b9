"""ALOHA (bimanual ViperX, as openpi's `aloha_policy.py` with `adapt_to_pi=True` sees it): a top and two wrist
cameras (a low one accepted), 14 absolute joint targets per step (6 arm joints + gripper, per arm; grippers
normalised 0 closed .. 1 open), and the conversion between ALOHA's joint and gripper conventions and pi's."""
from __future__ import annotations

import numpy as np

from .robot_spec import RobotSpec, WireLayout

# ---- ALOHA <-> pi conversions (openpi's aloha_policy with adapt_to_pi=True) ----
_ALOHA_FLIP = np.array([1, -1, -1, 1, 1, 1, 1, 1, -1, -1, 1, 1, 1, 1], dtype=np.float64)
_GRIPPERS = [6, 13]


def _gripper_to_angular(x: np.ndarray) -> np.ndarray:
    """ALOHA's linear gripper position (normalised 0..1) to pi's angular normalisation."""
    lin = x * (0.05800 - 0.01844) + 0.01844  # PUPPET_GRIPPER_POSITION_CLOSE .. OPEN
    arm, horn = 0.036, 0.022  # Interbotix linkage constants
    rad = np.arcsin(np.clip((horn**2 + lin**2 - arm**2) / (2 * horn * lin), -1.0, 1.0))
    return (rad - 0.5476) / (1.6296 - 0.5476)


def _gripper_from_angular(x: np.ndarray) -> np.ndarray:
    """pi's gripper output back to ALOHA's normalised joint range."""
    return (x + 0.5476 - (-0.6213)) / (1.4910 - (-0.6213))


def aloha_state_to_pi(state: np.ndarray) -> np.ndarray:
    out = state.astype(np.float64) * _ALOHA_FLIP
    out[_GRIPPERS] = _gripper_to_angular(out[_GRIPPERS])
    return out.astype(np.float32)


def _gripper_to_model_output(x: np.ndarray) -> np.ndarray:
    """The inverse of `_gripper_from_angular` (it is affine)."""
    return x * (1.4910 - (-0.6213)) - 0.5476 + (-0.6213)


def aloha_actions_to_pi(actions: np.ndarray) -> np.ndarray:
    """ALOHA robot actions back to what pi's output was (the inverse of `aloha_actions_from_pi`)."""
    out = actions.astype(np.float64).copy()
    out[:, _GRIPPERS] = _gripper_to_model_output(out[:, _GRIPPERS])
    return (out * _ALOHA_FLIP).astype(np.float32)


def aloha_actions_from_pi(actions: np.ndarray) -> np.ndarray:
    out = actions.astype(np.float64) * _ALOHA_FLIP
    out[:, _GRIPPERS] = _gripper_from_angular(out[:, _GRIPPERS])
    return out.astype(np.float32)


class AlohaPiTransform:
    """ALOHA's units <-> pi's (the `RobotTransform` of this robot)."""

    def state_to_model(self, state: np.ndarray) -> np.ndarray:
        return aloha_state_to_pi(state)

    def actions_from_model(self, actions: np.ndarray) -> np.ndarray:
        return aloha_actions_from_pi(actions)

    def actions_to_model(self, actions: np.ndarray) -> np.ndarray:
        return aloha_actions_to_pi(actions)

    def __repr__(self) -> str:
        return "ALOHA_TO_PI"


ALOHA_TO_PI = AlohaPiTransform()


def hold_aloha(last_action: np.ndarray | None, state: np.ndarray | None = None) -> np.ndarray:
    """Absolute joint targets, so the last command again; before any, the measured joints `state` (the state the
    episode started in)."""
    if last_action is not None:
        return np.asarray(last_action, dtype=np.float32).copy()
    if state is None:
        raise ValueError("state: ALOHA holds at its measured joints before its first command; pass the 14 measured "
                         "joint positions")
    return np.asarray(state, dtype=np.float32)


ALOHA = RobotSpec(
    "aloha",
    {"high": "base_0_rgb", "left_wrist": "left_wrist_0_rgb", "right_wrist": "right_wrist_0_rgb"},
    ("low",),
    14,
    14,
    50,
    transform=ALOHA_TO_PI,
    control_hz=50.0,
    state_layout=(("left_arm", 6), ("left_gripper", 1), ("right_arm", 6), ("right_gripper", 1)),
    # openpi examples/aloha_real, examples/aloha_sim/env.py: a nested `images` map of CHW images, and `state` (14)
    wire=WireLayout(camera_aliases={
        "cam_high": "high", "cam_left_wrist": "left_wrist", "cam_right_wrist": "right_wrist", "cam_low": "low",
    }),
    checkpoint_aliases={
        "high": ("cam_high", "top", "high"),
        "left_wrist": ("cam_left_wrist", "left_wrist"),
        "right_wrist": ("cam_right_wrist", "right_wrist"),
        "low": ("cam_low", "low"),
    },
    hold=hold_aloha,
)
