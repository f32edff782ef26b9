"""An observation checked once: what `act()` takes without checking it again.

Why: the server checks every field of a message as it decodes it (serve/observations.py: image shapes, sizes and
dtype, camera names, the state vector, the prompt; serve/rtc_fields.py: the previous chunk's heads, arrays and delay),
and act() used to check the same fields again. A `CheckedObservation` carries the result of one check: act() checks a
plain dict (policies/inputs.py `check_observation`, its `prev_actions` in the policy's `_guidance`), and takes a
`CheckedObservation` as it is. `served_observation` builds one from the server's checked fields, adding only the
checks the server does not make (the state's range in robot units, a bare previous chunk for a several-head policy),
with the messages act() gives for them.
"""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np

from .inputs import ObservationError, check_observation
from .numeric_range import check_robot_units
from .robots import RobotSpec


@dataclass(frozen=True)
class CheckedObservation:
    """One frame's inputs, checked against `robot`: images uint8 (H, W, 3) per camera, state float32
    `(state_dim,)`, a non-empty prompt; `prev_actions` (head -> float32 `(n, action_dim)`, in robot units, heads the
    policy runs) with its `inference_delay`, or None."""

    robot: str
    images: Mapping[str, np.ndarray]
    state: np.ndarray
    prompt: str
    prev_actions: Mapping[str, np.ndarray] | None = None
    inference_delay: int = 0
    _sealed: object = field(default=None, repr=False, compare=False)

    def __post_init__(self) -> None:
        if self._sealed is not _SEAL:
            raise TypeError("CheckedObservation is made by check(...) or served_observation(...), which check it")

    @classmethod
    def check(cls, obs: object, robot: RobotSpec) -> CheckedObservation:
        """`obs` (act()'s dict) checked against `robot` (ObservationError naming the field)."""
        images, state, prompt = check_observation(obs, robot)
        return cls(robot.name, images, state, prompt, _sealed=_SEAL)


_SEAL = object()


def served_observation(
    policy_obs: dict,
    robot: RobotSpec,
    *,
    heads: list[str],
    prev_actions: Mapping[str, np.ndarray] | np.ndarray | None = None,
    inference_delay: int = 0,
) -> CheckedObservation:
    """The server's checked fields (serve/observations.py `to_policy_obs`, serve/rtc_fields.py `rtc_fields`) as one
    `CheckedObservation`, plus the checks those make not: the state's shape and range (act()'s messages,
    ObservationError) and a bare `prev_actions` for a several-head policy (ValueError)."""
    state = policy_obs["state"]
    if state.shape != (robot.state_dim,):
        raise ObservationError(f"obs['state'] must have shape ({robot.state_dim},) for robot {robot.name!r}, got {state.shape}")
    try:
        check_robot_units(state, "obs['state']")
    except ValueError as e:
        raise ObservationError(str(e)) from None
    per_head = None
    if prev_actions is not None:
        if isinstance(prev_actions, Mapping):
            per_head = dict(prev_actions)
        elif len(heads) == 1:
            per_head = {heads[0]: prev_actions}
        else:
            raise ValueError(f"prev_actions: this policy runs heads {heads}; pass a dict head -> array")
    return CheckedObservation(robot.name, policy_obs["images"], state, policy_obs["prompt"], per_head,
                              int(inference_delay), _sealed=_SEAL)
