"""DROID (a Franka Panda driven by joint velocities at 15 Hz, as openpi's `droid_policy.py` sees it): an exterior and
a wrist camera (a second exterior camera accepted), 7 joint positions + gripper as state, 7 joint velocities + gripper
position as action, in the model's own units."""
from __future__ import annotations

import numpy as np

from .robot_spec import RobotSpec, WireLayout

ACTION_DIM = 8  # 7 joint velocities + gripper position

def hold_droid(last_action: np.ndarray | None, state: np.ndarray | None = None) -> np.ndarray:
    """Zero joint velocity; the gripper keeps its last position command (open before any)."""
    hold = np.zeros(ACTION_DIM, dtype=np.float32)
    if last_action is not None:
        hold[-1] = np.asarray(last_action, dtype=np.float32)[-1]
    return hold


DROID = RobotSpec(
    "droid",
    {"exterior": "base_0_rgb", "wrist": "left_wrist_0_rgb"},
    ("exterior_2",),
    8,
    ACTION_DIM,
    15,
    control_hz=15.0,
    state_layout=(("joint_position", 7), ("gripper_position", 1)),
    # openpi examples/droid/main.py
    wire=WireLayout(
        {
            "observation/exterior_image_1_left": "exterior",
            "observation/wrist_image_left": "wrist",
            "observation/exterior_image_2_left": "exterior_2",
        },
        (("observation/joint_position", 7), ("observation/gripper_position", 1)),
    ),
    checkpoint_aliases={
        "exterior": ("exterior_image_1_left", "exterior_1_left", "exterior"),
        "wrist": ("wrist_image_left", "wrist_left", "wrist"),
        "exterior_2": ("exterior_image_2_left", "exterior_2_left", "exterior_2"),
    },
    hold=hold_droid,
)
