"""Per-robot conventions (as openpi's libero / droid / aloha policies do them): which camera feeds which model
image slot, state and action sizes, the default action horizon, and robot-specific state/action conversions."""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

MODEL_SLOTS = ("base_0_rgb", "left_wrist_0_rgb", "right_wrist_0_rgb")


@dataclass(frozen=True)
class RobotSpec:
    name: str
    cameras: dict[str, str]  # required camera name -> model slot
    optional_cameras: tuple[str, ...]  # accepted and ignored (the model has no slot for them)
    state_dim: int
    action_dim: int
    horizon: int
    adapt: str | None = None  # robot-specific conversion ("aloha")
    extra: dict = field(default_factory=dict)
    control_hz: float = 20.0  # the control loop's rate (envs' render_fps: LIBERO 20, DROID 15, ALOHA 50)

    def state_to_model(self, state: np.ndarray) -> np.ndarray:
        return aloha_state_to_pi(state) if self.adapt == "aloha" else state

    def actions_from_model(self, actions: np.ndarray) -> np.ndarray:
        return aloha_actions_from_pi(actions) if self.adapt == "aloha" else actions

    def actions_to_model(self, actions: np.ndarray) -> np.ndarray:
        """The inverse of `actions_from_model` (a previous chunk handed back for real-time chunking)."""
        return aloha_actions_to_pi(actions) if self.adapt == "aloha" else actions


ROBOTS: dict[str, RobotSpec] = {
    "libero": RobotSpec("libero", {"base": "base_0_rgb", "wrist": "left_wrist_0_rgb"}, (), 8, 7, 10, control_hz=20.0),
    "droid": RobotSpec(
        "droid", {"exterior": "base_0_rgb", "wrist": "left_wrist_0_rgb"}, ("exterior_2",), 8, 8, 15, control_hz=15.0
    ),
    "aloha": RobotSpec(
        "aloha",
        {"high": "base_0_rgb", "left_wrist": "left_wrist_0_rgb", "right_wrist": "right_wrist_0_rgb"},
        ("low",),
        14,
        14,
        50,
        adapt="aloha",
        control_hz=50.0,
    ),
}


def get_robot(name: str) -> RobotSpec:
    if name not in ROBOTS:
        raise ValueError(f"robot: unknown robot {name!r}; expected one of {sorted(ROBOTS)}")
    return ROBOTS[name]


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
