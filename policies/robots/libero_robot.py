"""LIBERO (a Franka Panda in robosuite, as openpi's `libero_policy.py` and lerobot's LIBERO env see it): two cameras,
an 8-d end-effector state, 7-d OSC_POSE delta actions (gripper -1 open, +1 closed) in the model's own units."""
from __future__ import annotations

import numpy as np

from .robot_spec import RobotSpec, WireLayout

# Zero motion, gripper open: the no-op both reference evaluations step while objects settle after a reset
# (envs/protocols.py LIBERO_WAIT_ACTION), and the start of holding.
STILL_ACTION: tuple[float, ...] = (0.0, 0.0, 0.0, 0.0, 0.0, 0.0, -1.0)


def hold_libero(last_action: np.ndarray | None, state: np.ndarray | None = None) -> np.ndarray:
    """OSC deltas of zero hold the pose; the gripper keeps its last command (open before any, as the wait steps)."""
    hold = np.array(STILL_ACTION, dtype=np.float32)
    if last_action is not None:
        hold[-1] = np.asarray(last_action, dtype=np.float32)[-1]
    return hold


LIBERO = RobotSpec(
    "libero",
    {"base": "base_0_rgb", "wrist": "left_wrist_0_rgb"},
    (),
    8,
    7,
    10,
    control_hz=20.0,
    state_layout=(("eef_pos", 3), ("eef_axis_angle", 3), ("gripper_qpos", 2)),
    # openpi examples/libero/main.py
    wire=WireLayout({"observation/image": "base", "observation/wrist_image": "wrist"}, (("observation/state", 8),)),
    # lerobot datasets name them `observation.images.image` / `image2` (lerobot envs/libero.py)
    checkpoint_aliases={
        "base": ("image", "agentview_image", "agentview", "agentview_rgb", "base"),
        "wrist": ("image2", "wrist_image", "robot0_eye_in_hand_image", "eye_in_hand_rgb", "wrist"),
    },
    hold=hold_libero,
)
