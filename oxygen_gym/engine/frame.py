"""What a frame takes and gives: typed records passed between the policy and the scheduler."""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch

from ..core.guidance import Guidance
from .request import Request


@dataclass
class FrameInput:
    """One observation and what it starts. `prefix`: the model's prefix-input bundle (core/model_contract.py);
    `noise`: per action head, `[1, horizon, action_dim]` (a bare tensor means the model's first head); the heads named
    here are the ones denoised this frame; `guidance`: the heads whose chunk is inpainted to agree with the previous
    chunk."""

    frame: int
    prefix: Any
    noise: torch.Tensor | dict[str, torch.Tensor]
    new_requests: list[Request] = field(default_factory=list)
    session: int = 0  # which robot sent it (a server batches several robots' frames; one policy is session 0)
    guidance: dict[str, Guidance] = field(default_factory=dict)  # real-time chunking per head (rtc.py), batch 1

    def head_noise(self, heads: list[str]) -> dict[str, torch.Tensor]:
        """Noise per head to denoise, in the model's head order; `heads`: the model's head names."""
        if isinstance(self.noise, torch.Tensor):
            return {heads[0]: self.noise}
        unknown = sorted(set(self.noise) - set(heads))
        if unknown:
            raise ValueError(f"noise names unknown action head(s) {unknown}; the model has {heads}")
        return {h: self.noise[h] for h in heads if h in self.noise}


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
    head_actions: dict[str, torch.Tensor]  # per head, [1, horizon, action_dim], model space (empty: no head ran)
    advanced: list[tuple[Request, list[int]]]  # this robot's requests that advanced, by request id, with their new tokens
    stats: FrameStats

    @property
    def actions(self) -> torch.Tensor | None:
        """The first head's actions (a one-head model's only ones)."""
        return next(iter(self.head_actions.values()), None)


@dataclass
class FrameProgress:
    """What one frame has done so far; lives for one frame only (nothing per-frame is kept on the scheduler)."""

    advanced: dict[tuple[int, int], tuple[Request, list[int]]] = field(default_factory=dict)  # (session, request id)
    batch_sizes: list[int] = field(default_factory=list)
    on_actions: Callable[[dict[str, torch.Tensor]], None] | None = None

    def actions_ready(self, actions: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """The heads are done: hand their actions out now (the caller's `on_actions`), before the language work."""
        if self.on_actions is not None:
            self.on_actions(actions)
        return actions

    def record(self, request: Request, token: int) -> None:
        self.advanced.setdefault((request.session, request.request_id), (request, []))[1].append(token)

    def advanced_of(self, session: int) -> list[tuple[Request, list[int]]]:
        """The requests of robot `session` that advanced, with their new tokens, by request id (an order that does not
        depend on where slot moves put them)."""
        mine = [v for (s, _), v in self.advanced.items() if s == session]
        return sorted(mine, key=lambda v: v[0].request_id)
