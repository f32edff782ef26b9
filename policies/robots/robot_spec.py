"""What a robot is to the policy, the server and its env: the record each robot's file fills in (libero_robot.py,
droid_robot.py, aloha_robot.py, as openpi keeps one `<robot>_policy.py` per robot), and the identity conversion of a
robot whose units are the model's."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Protocol

import numpy as np

MODEL_SLOTS = ("base_0_rgb", "left_wrist_0_rgb", "right_wrist_0_rgb")  # pi0.5's image slots, openpi's names


class RobotTransform(Protocol):
    """Robot units <-> the model's (openpi's per-robot input and output transforms)."""

    def state_to_model(self, state: np.ndarray) -> np.ndarray: ...

    def actions_from_model(self, actions: np.ndarray) -> np.ndarray: ...

    def actions_to_model(self, actions: np.ndarray) -> np.ndarray:
        """The inverse of `actions_from_model` (a previous chunk handed back for real-time chunking)."""
        ...


class IdentityTransform:
    """A robot whose state and actions are already in the model's units (LIBERO, DROID)."""

    def state_to_model(self, state: np.ndarray) -> np.ndarray:
        return state

    def actions_from_model(self, actions: np.ndarray) -> np.ndarray:
        return actions

    def actions_to_model(self, actions: np.ndarray) -> np.ndarray:
        return actions

    def __repr__(self) -> str:
        return "IDENTITY"


IDENTITY = IdentityTransform()


@dataclass(frozen=True)
class WireLayout:
    """How openpi's example client for a robot sends an observation (serve/observations.py parses it by this).

    Flat: one key per camera image and the state in named parts, concatenated in order (LIBERO, DROID). Nested: an
    `images` map, whose openpi camera names `camera_aliases` maps to the robot's (ALOHA's `cam_high` -> `high`), and a
    `state`. The nested form with the robot's own camera names is accepted for every robot."""

    flat_images: dict[str, str] = field(default_factory=dict)  # message key -> camera; empty: no flat layout
    flat_state: tuple[tuple[str, int], ...] = ()  # message keys of the state's parts, with their lengths, in order
    camera_aliases: dict[str, str] = field(default_factory=dict)  # openpi's camera name in `images` -> the robot's


HoldRule = Callable[[np.ndarray | None, np.ndarray | None], np.ndarray]  # (last action, measured state) -> action


@dataclass(frozen=True)
class RobotSpec:
    """One robot's conventions. The three built-in robots are in `ROBOTS`; a custom robot needs only the first six
    fields (identity transform, no flat wire layout, holding repeats the last action)."""

    name: str
    cameras: dict[str, str]  # required camera name -> model slot
    optional_cameras: tuple[str, ...]  # accepted and ignored (the model has no slot for them)
    state_dim: int
    action_dim: int
    horizon: int
    transform: RobotTransform = IDENTITY  # robot units <-> the model's (ALOHA: aloha_robot.ALOHA_TO_PI)
    extra: dict = field(default_factory=dict)
    control_hz: float = 20.0  # the control loop's rate (envs' render_fps: LIBERO 20, DROID 15, ALOHA 50)
    state_layout: tuple[tuple[str, int], ...] = ()  # the state's named parts in order (their lengths sum to state_dim)
    wire: WireLayout = WireLayout()  # openpi's message layout for this robot (the server reads it)
    checkpoint_aliases: dict[str, tuple[str, ...]] = field(default_factory=dict)  # camera -> names checkpoints give it
    hold: HoldRule | None = None  # the action of a step with no new command; None: the last action again

    def __post_init__(self) -> None:
        if self.state_layout and sum(n for _, n in self.state_layout) != self.state_dim:
            raise ValueError(f"state_layout: parts {list(self.state_layout)} sum to "
                             f"{sum(n for _, n in self.state_layout)}, expected state_dim {self.state_dim}")

    def state_to_model(self, state: np.ndarray) -> np.ndarray:
        return self.transform.state_to_model(state)

    def actions_from_model(self, actions: np.ndarray) -> np.ndarray:
        return self.transform.actions_from_model(actions)

    def actions_to_model(self, actions: np.ndarray) -> np.ndarray:
        """The inverse of `actions_from_model` (a previous chunk handed back for real-time chunking)."""
        return self.transform.actions_to_model(actions)

    def hold_action(self, last_action: np.ndarray | None, state: np.ndarray | None = None) -> np.ndarray:
        """What the robot runs on a control step with no new action (envs/live_clock.py's `step(None)`), given the
        last action it ran (None before any) and its measured state (needed only by a robot that holds at it)."""
        if self.hold is not None:
            return self.hold(last_action, state)
        if last_action is not None:
            return np.asarray(last_action, dtype=np.float32).copy()
        return np.zeros(self.action_dim, dtype=np.float32)
