"""A previous chunk in robot units -> the engine's RTC guidance in model space (engine/rtc.py).

Why here: the robot transform and the normaliser live with the policy; the engine only sees model-space tensors.
The new chunk's index i is aligned with `prev_actions[i]`: the previous chunk's actions not yet executed when the
observation was taken, index 0 being the next one the robot would run.
"""
from __future__ import annotations

import numpy as np
import torch

from oxygen_gym.engine.rtc import Guidance, RTCConfig, prefix_weights

from .normalize import Normalizer
from .numeric_range import check_robot_units
from .robots import RobotSpec


def check_prev_actions(prev, action_dim: int, field: str = "prev_actions") -> np.ndarray:
    """`prev` as float32 `(n, action_dim)`, finite and in range (policies/numeric_range.py), or an error naming `field`."""
    try:
        a = np.asarray(prev, dtype=np.float32)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"{field}: expected a float array of shape (n, {action_dim}), got {type(prev).__name__}") from exc
    if a.ndim != 2 or a.shape[1] != action_dim:
        raise ValueError(f"{field}: expected shape (n, {action_dim}) in robot units, got {a.shape}")
    check_robot_units(a, field)
    return a


def check_delay(delay, chunk: int, field: str = "inference_delay") -> int:
    if isinstance(delay, bool) or not isinstance(delay, (int, np.integer)) or not 0 <= int(delay) <= chunk:
        raise ValueError(f"{field}: expected an int in [0, {chunk}] (control steps), got {delay!r}")
    return int(delay)


def chunk_guidance(
    prev: np.ndarray,
    delay: int,
    *,
    config: RTCConfig,
    chunk: int,
    model_dim: int,
    default_horizon: int,
    robot: RobotSpec,
    normalizer: Normalizer,
) -> Guidance | None:
    """One head's guidance for a batch-1 frame, or None when nothing of the previous chunk is attended to (an empty
    `prev`). Weights cover the robot's action dims only (a model's padding dims are free)."""
    n = min(len(prev), chunk)
    end = min(config.execution_horizon or default_horizon, n)
    if end == 0:
        return None
    model_prev = normalizer.normalize(robot.actions_to_model(prev[:n])).astype(np.float32)
    target = torch.zeros(1, chunk, model_dim)
    target[0, :n, : prev.shape[1]] = torch.from_numpy(model_prev)
    weights = torch.zeros(1, chunk, model_dim)
    weights[0, :, : prev.shape[1]] = prefix_weights(delay, end, chunk, config.schedule)[:, None]
    beta = torch.tensor([float(config.max_guidance_weight)])
    frozen = None
    if config.method == "trained":  # the delayed actions are fed clean (a model trained with --rtc-max-delay)
        frozen = torch.zeros(1, chunk, dtype=torch.bool)
        frozen[0, : min(delay, n)] = True
    return Guidance(target, weights, beta, config.method, frozen)
