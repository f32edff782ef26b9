"""What every oxygen-gym env shares with the policy: the observation layout of docs/api.md and argument checks that fail
early with a message naming the field."""
from __future__ import annotations

import string
from typing import Sequence

import numpy as np
from gymnasium import spaces

PROMPT_MAX_CHARS = 1024
_PROMPT_SPACE = spaces.Text(max_length=PROMPT_MAX_CHARS, min_length=0, charset=string.printable)


def policy_observation_space(cameras: Sequence[str], size: tuple[int, int], state_dim: int) -> spaces.Dict:
    """`{"images": {camera: uint8 (H, W, 3)}, "state": float32 (state_dim,), "prompt": str}`, the policy's input."""
    h, w = size
    images = spaces.Dict({name: spaces.Box(0, 255, shape=(h, w, 3), dtype=np.uint8) for name in cameras})
    state = spaces.Box(-np.inf, np.inf, shape=(state_dim,), dtype=np.float32)
    return spaces.Dict({"images": images, "state": state, "prompt": _PROMPT_SPACE})


def camera_size(value: int | Sequence[int] | None, default: int) -> tuple[int, int]:
    """Normalise `camera_size` (None, an int, or (height, width)) to a (height, width) pair."""
    if value is None:
        value = default
    if isinstance(value, (int, np.integer)) and not isinstance(value, bool):
        pair = (int(value), int(value))
    elif isinstance(value, (tuple, list)) and len(value) == 2 and all(
        isinstance(v, (int, np.integer)) and not isinstance(v, bool) for v in value
    ):
        pair = (int(value[0]), int(value[1]))
    else:
        raise ValueError(f"camera_size must be a positive int or a (height, width) pair of ints, got {value!r}")
    if min(pair) < 16 or max(pair) > 2048:
        raise ValueError(f"camera_size must lie in [16, 2048] pixels per side, got {pair}")
    return pair


def check_action(action: object, dim: int) -> np.ndarray:
    """The action as float64 (action_dim,), or ValueError for a wrong shape or non-finite values."""
    try:
        arr = np.asarray(action, dtype=np.float64)
    except (TypeError, ValueError) as e:
        raise ValueError(f"action must be a numeric array of shape ({dim},), got {type(action).__name__}: {e}") from e
    if arr.shape != (dim,):
        raise ValueError(f"action must have shape ({dim},), got {arr.shape}")
    if not np.all(np.isfinite(arr)):
        bad = np.flatnonzero(~np.isfinite(arr)).tolist()
        raise ValueError(f"action must be finite; entries {bad} are {arr[bad].tolist()}")
    return arr


def check_index(name: str, value: object, size: int) -> int:
    """An integer index in [0, size), or ValueError naming the field."""
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise ValueError(f"{name} must be an int in [0, {size - 1}], got {value!r}")
    if not 0 <= int(value) < size:
        raise ValueError(f"{name} must be in [0, {size - 1}], got {value}")
    return int(value)


class EpisodeCounter:
    """Which episode a `reset(seed, options)` starts: `options["init_state"]` if given, else the number of resets
    since the last seeded one (wrapping at `size`). Shared by every env so the convention is the same."""

    def __init__(self, size: int) -> None:
        self.size = size
        self.base_seed = 0
        self.count = 0

    def next(self, seed: int | None, options: dict | None) -> int:
        options = dict(options or {})
        unknown = set(options) - {"init_state"}
        if unknown:
            raise ValueError(f"reset options accept only 'init_state', got {sorted(unknown)}")
        if seed is not None:
            self.base_seed, self.count = int(seed), 0
        index = options.get("init_state")
        index = self.count % self.size if index is None else check_index("options['init_state']", index, self.size)
        self.count += 1
        return index


def positive_int(name: str, value: object) -> int:
    """A positive integer (not a bool), or ValueError naming the field."""
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
        raise ValueError(f"{name} must be a positive int, got {value!r}")
    return int(value)
