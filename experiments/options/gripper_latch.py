"""Confirm a gripper open across policy calls before executing it, so one call's stray "open" cannot drop a held object.

On LIBERO the shipped policy's failures are mostly a bowl let go mid-carry, nearly always within a few steps of an
"open" command. If such an open were one call's outlier, waiting for the next call would keep the bowl. The latch
executes an open while the gripper is held closed only once the policy has asked for it in `confirm` calls in a row;
until then the call's opening commands are replaced by the closing command last executed. It reads nothing but the
policy's own executed commands, so it works the same in eval, on a robot and in a DAgger rollout. A real release is
delayed by `confirm - 1` calls. On the shipped model it measured worse (docs/libero-spatial.md, "A latched open"):
delayed releases missed the plate, and held closed the slipping bowl fell anyway. So it is an option, off by default.

robosuite's Panda gripper moves by the sign of its command, -1 opening and +1 closing
(robosuite/models/grippers/panda_gripper.py, PandaGripper.format_action): a command < 0 is an open.
"""
from __future__ import annotations

from typing import Any

import numpy as np

from oxygen_gym.policies.temporal_ensemble import check_replan_interval

LIBERO_GRIPPER_DIM = 6  # LIBERO's 7-d action: 3 position, 3 rotation, gripper


def check_confirm(confirm: Any, name: str = "confirm") -> int:
    """Calls in a row that must ask for an open: an int >= 2 (1 would execute every open, i.e. no latch)."""
    if isinstance(confirm, bool) or not isinstance(confirm, int) or confirm < 2:
        raise ValueError(f"{name} must be an int >= 2 (policy calls in a row that must ask for a gripper open before "
                         f"it runs; 1 would be off), got {confirm!r}")
    return confirm


class GripperOpenLatch:
    """Wraps a policy whose `act(obs)` returns (horizon, action_dim) actions and of which the caller executes the
    first `replan` per call. While the last executed gripper command closed the gripper, a call whose executed
    actions ask to open is the n-th such call in a row; below `confirm` its opening commands (the whole chunk's) are
    replaced by the last executed closing command. `suppressed_calls` counts those calls in this episode.
    Everything else (horizon, last_frame, close, ...) is the wrapped policy's.
    """

    def __init__(self, policy: Any, *, replan: int, confirm: int = 2, gripper_dim: int = LIBERO_GRIPPER_DIM) -> None:
        self.policy, self.replan, self.confirm = policy, check_replan_interval(replan), check_confirm(confirm)
        self.gripper_dim = gripper_dim
        self._clear()

    def __getattr__(self, name: str) -> Any:
        return getattr(self.__dict__["policy"], name)

    def _clear(self) -> None:
        self._closing_command: float | None = None  # the last executed gripper command if it closes, else None
        self._asks = 0  # calls in a row that asked to open while the gripper was held closed
        self.suppressed_calls = 0

    def reset(self, *args, **kwargs) -> Any:
        """A new episode: the gripper starts open; then reset the wrapped policy."""
        self._clear()
        return self.policy.reset(*args, **kwargs)

    def act(self, obs: dict, *args, **kwargs):
        actions, updates = self.policy.act(obs, *args, **kwargs)
        chunk = np.array(actions, copy=True)
        if chunk.ndim != 2 or chunk.shape[0] < self.replan or not 0 <= self.gripper_dim < chunk.shape[1]:
            raise ValueError(f"the gripper latch needs (horizon >= replan={self.replan}, action_dim > gripper_dim="
                             f"{self.gripper_dim}) actions; the policy returned shape {chunk.shape}")
        gripper = chunk[:, self.gripper_dim]
        if self._closing_command is not None and (gripper[: self.replan] < 0).any():
            self._asks += 1
            if self._asks < self.confirm:
                gripper[gripper < 0] = self._closing_command
                self.suppressed_calls += 1
        else:
            self._asks = 0
        self._note_executed(gripper[: self.replan])
        return chunk, updates

    def _note_executed(self, executed: np.ndarray) -> None:
        """The gripper's state after this call's executed commands: the last nonzero one's sign (0 does not move)."""
        moving = executed[executed != 0]
        if len(moving):
            last = float(moving[-1])
            self._closing_command = last if last > 0 else None
