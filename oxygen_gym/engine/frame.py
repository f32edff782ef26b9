"""What a frame takes and gives: typed records passed between the policy and the scheduler."""
from __future__ import annotations

from dataclasses import dataclass, field

import torch

from .request import Request


@dataclass
class PrefixInputs:
    """Model-ready observation of one frame (batch 1): what a prefill needs, kept for queued requests."""

    images: list[torch.Tensor]
    image_masks: list[torch.Tensor]
    tokens: torch.Tensor
    token_masks: torch.Tensor


@dataclass
class FrameInput:
    frame: int
    prefix: PrefixInputs
    noise: torch.Tensor  # [1, horizon, action_dim]
    new_requests: list[Request] = field(default_factory=list)
    session: int = 0  # which robot sent it (a server batches several robots' frames; one policy is session 0)


@dataclass
class FrameStats:
    frame: int
    frame_ms: float
    stage_ms: dict[str, float]
    batch_sizes: list[int]
    tokens: int
    active: int
    queued: int
    pool_used: int


@dataclass
class FrameResult:
    actions: torch.Tensor  # [1, horizon, action_dim], model space
    advanced: list[tuple[Request, list[int]]]  # every request that advanced, with this frame's new tokens
    stats: FrameStats
