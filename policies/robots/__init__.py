"""The robots a policy drives, one file each (as openpi's libero / droid / aloha policies): `libero_robot.py`,
`droid_robot.py`, `aloha_robot.py` hold a robot's cameras and the model slots they feed, state layout, action
transform, hold action and openpi wire layout; `robot_spec.py` the record they fill in. A new robot is a new file
and one entry in `ROBOTS`; the policy, the server and the envs read it from here."""
from __future__ import annotations

from .aloha_robot import ALOHA, aloha_actions_from_pi, aloha_actions_to_pi, aloha_state_to_pi
from .droid_robot import DROID
from .libero_robot import LIBERO
from .robot_spec import IDENTITY, MODEL_SLOTS, RobotSpec, RobotTransform, WireLayout

ROBOTS: dict[str, RobotSpec] = {spec.name: spec for spec in (LIBERO, DROID, ALOHA)}


def get_robot(name: str) -> RobotSpec:
    if name not in ROBOTS:
        raise ValueError(f"robot: unknown robot {name!r}; expected one of {sorted(ROBOTS)}")
    return ROBOTS[name]


__all__ = [
    "ALOHA", "DROID", "IDENTITY", "LIBERO", "MODEL_SLOTS", "ROBOTS", "RobotSpec", "RobotTransform", "WireLayout",
    "aloha_actions_from_pi", "aloha_actions_to_pi", "aloha_state_to_pi", "get_robot",
]
