"""Real-time chunking (RTC, Black et al. 2025): inpaint the start of a new action chunk so it agrees with the previous
chunk's actions that will still execute while the new one is being computed. In `core/`, below the engine (which
batches the rows' guidance) and the families (whose heads take it); oxygen_gym/engine/rtc.py re-exports it.

Written from the reference's math (Physical-Intelligence/real-time-chunking-kinetix `src/model.py`,
`get_prefix_weights` and `realtime_action`), in a flow-time convention every family maps its own onto:

- tau: 0 = noise, 1 = data; u = dx/dtau (the data-ward velocity); Euler `x += u / num_steps`.
  (pi0.5 integrates t = 1 -> 0 with v = dx/dt: tau = 1 - t and u = -v; XR0 already uses tau.)
- denoised estimate `x1 = x + (1 - tau) * u(x)`; error `e = W * (y - x1)`, `y` the previous chunk aligned to the
  new chunk's indices and `W` the prefix weights;
- `guided`: correction = the vector-Jacobian product (d x1 / d x)^T e, one backward pass through the action expert
  per step with the prefix KV held constant (nothing flows into the backbone); `cheap`: correction = e (the velocity
  treated as constant, so the Jacobian is the identity: what lerobot's RTC computes, lerobot#2511);
- guidance weight `min(c * inv_r2, beta)` with `c = (1 - tau) / tau` (inf at tau = 0, so beta there) and
  `inv_r2 = (tau^2 + (1 - tau)^2) / (1 - tau)^2`; the guided velocity is `u + w * correction`;
- `trained` (training-time RTC, arXiv 2512.05964; `oxygen-gym train --rtc-max-delay`): no correction; the first d
  actions are the previous chunk's, fed clean at the data end of the flow with their own time conditioning, every
  step (`Guidance.frozen`); only heads trained that way (pi0.5's experts here) accept it.

Every row of a batch carries its own weights (its own delay and previous chunk) and its own beta, so robots with
different delays denoise in one batch; a row with zero weights gets exactly the plain velocity.
"""
from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch

RTC_SCHEDULES = ("zeros", "ones", "linear", "exp")
RTC_METHODS = ("guided", "cheap", "trained")


@dataclass(frozen=True)
class RTCConfig:
    """How a policy inpaints a chunk when `act()` is given the previous chunk's unexecuted actions.

    `execution_horizon`: how many of the previous chunk's actions the new one attends to (the weights reach 0 there;
    None: the policy's `action_horizon`); `schedule`: the weights between the inference delay and that horizon
    (`zeros`: 1 below the delay, 0 after; `ones`: 1 up to the horizon; `linear` / `exp`: a ramp down);
    `max_guidance_weight`: beta; `method`: `guided` (VJP: one forward + one backward through the action expert per
    denoise step), `cheap` (no backward: one forward per step, the plain weighted error) or `trained` (a model
    trained with `--rtc-max-delay`: the delayed prefix is fed clean, no guidance at all; schedule and beta unused)."""

    execution_horizon: int | None = None
    schedule: str = "exp"
    max_guidance_weight: float = 5.0
    method: str = "guided"

    def __post_init__(self) -> None:
        if self.schedule not in RTC_SCHEDULES:
            raise ValueError(f"rtc.schedule: expected one of {RTC_SCHEDULES}, got {self.schedule!r}")
        if self.method not in RTC_METHODS:
            raise ValueError(f"rtc.method: expected one of {RTC_METHODS}, got {self.method!r}")
        beta = self.max_guidance_weight
        if not isinstance(beta, (int, float)) or not math.isfinite(beta) or beta < 0:
            raise ValueError(f"rtc.max_guidance_weight: expected a finite number >= 0, got {beta!r}")
        h = self.execution_horizon
        if h is not None and (not isinstance(h, int) or isinstance(h, bool) or h < 1):
            raise ValueError(f"rtc.execution_horizon: expected an int >= 1 or None, got {h!r}")


def prefix_weights(delay: int, end: int, total: int, schedule: str) -> torch.Tensor:
    """Weights `[total]` (fp32) over the new chunk's indices: 1 below `delay` (those actions execute during inference),
    a ramp down to 0 at `end` (exclusive), 0 from `end` on. `end` wins over `delay` (delay is clipped to it)."""
    if schedule not in RTC_SCHEDULES:
        raise ValueError(f"schedule: expected one of {RTC_SCHEDULES}, got {schedule!r}")
    start = min(delay, end)
    i = torch.arange(total, dtype=torch.float32)
    if schedule == "ones":
        w = torch.ones(total)
    elif schedule == "zeros":
        w = (i < start).float()
    else:
        w = ((start - 1 - i) / (end - start + 1) + 1).clamp(0.0, 1.0)
        if schedule == "exp":
            w = w * torch.expm1(w) / (math.e - 1)
    return torch.where(i >= end, torch.zeros(()), w)


def guidance_weight(tau: float, beta: torch.Tensor) -> torch.Tensor:
    """`min(c * inv_r2, beta)` per row at flow time `tau` (0 = noise); at tau = 0 the weight is beta."""
    if tau <= 0.0:
        return beta
    c = (1.0 - tau) / tau
    inv_r2 = (tau**2 + (1.0 - tau) ** 2) / (1.0 - tau) ** 2
    return torch.clamp(beta, max=c * inv_r2)


@dataclass
class Guidance:
    """One head's RTC inputs for a batch of rows, in model space.

    `target [B, H, A]`: the previous chunk's actions at the new chunk's indices (anything where `weights` is 0);
    `weights [B, H, A]`: the prefix weights per index, zero on dims the robot does not use; `beta [B]`: the maximum
    guidance weight per row; `method`: `guided`, `cheap` or `trained` (one per batch: a server's sessions share one
    policy); `frozen [B, H]` bool (`trained` only): the indices below each row's delay, fed clean."""

    target: torch.Tensor
    weights: torch.Tensor
    beta: torch.Tensor
    method: str = "guided"
    frozen: torch.Tensor | None = None

    def __post_init__(self) -> None:
        if self.method not in RTC_METHODS:
            raise ValueError(f"guidance method: expected one of {RTC_METHODS}, got {self.method!r}")
        if self.target.shape != self.weights.shape or self.target.dim() != 3:
            raise ValueError(f"guidance target {tuple(self.target.shape)} and weights {tuple(self.weights.shape)} "
                             "must both be [B, H, A]")
        if self.beta.shape != self.target.shape[:1]:
            raise ValueError(f"guidance beta must be [B] = [{self.target.shape[0]}], got {tuple(self.beta.shape)}")
        if (self.method == "trained") != (self.frozen is not None):
            raise ValueError("guidance: `frozen` is given exactly for the `trained` method")
        if self.frozen is not None and self.frozen.shape != self.target.shape[:2]:
            raise ValueError(f"guidance frozen must be [B, H] = {list(self.target.shape[:2])}, got {list(self.frozen.shape)}")

    @property
    def rows(self) -> int:
        return self.target.shape[0]

    def check_against(self, noise: torch.Tensor, head: str) -> None:
        if self.target.shape != noise.shape:
            raise ValueError(f"guidance for head {head!r}: target {tuple(self.target.shape)} does not match the "
                             f"noise {tuple(noise.shape)}")

    def to(self, device: torch.device) -> "Guidance":
        frozen = None if self.frozen is None else self.frozen.to(device)
        return Guidance(self.target.to(device), self.weights.to(device), self.beta.to(device), self.method, frozen)

    @staticmethod
    def unguided(rows: int, horizon: int, action_dim: int, method: str) -> "Guidance":
        """Zero weights (nothing frozen): the plain velocity (a row without a previous chunk in a batch with
        guided rows)."""
        z = torch.zeros(rows, horizon, action_dim)
        frozen = torch.zeros(rows, horizon, dtype=torch.bool) if method == "trained" else None
        return Guidance(z, z.clone(), torch.zeros(rows), method, frozen)

    @staticmethod
    def cat(parts: Sequence["Guidance | None"], horizon: int, action_dim: int) -> "Guidance | None":
        """Rows of several frames in one batch (None: that frame has no guidance); None when no row has any."""
        if all(p is None for p in parts):
            return None
        methods = {p.method for p in parts if p is not None}
        if len(methods) != 1:
            raise ValueError(f"one batch denoises with one RTC method, got {sorted(methods)}")
        method = methods.pop()
        filled = [p if p is not None else Guidance.unguided(1, horizon, action_dim, method) for p in parts]
        device = next(p.target.device for p in parts if p is not None)
        filled = [p.to(device) for p in filled]
        return Guidance(
            torch.cat([p.target for p in filled]), torch.cat([p.weights for p in filled]),
            torch.cat([p.beta for p in filled]), method,
            torch.cat([p.frozen for p in filled]) if method == "trained" else None,
        )


def guided_velocity(
    velocity: Callable[[torch.Tensor], torch.Tensor], x: torch.Tensor, tau: float, guidance: Guidance
) -> torch.Tensor:
    """The RTC velocity `u + w * correction` at `x [B, H, A]`, flow time `tau` (0 = noise).

    `velocity(x)` is the head's data-ward velocity u with everything but `x` fixed (the prefix KV, the time
    conditioning); for `guided` it must be differentiable in `x` (the caller runs it outside inference mode)."""
    if guidance.method == "trained":
        raise ValueError("guidance method 'trained' is not a velocity correction: the head must feed the frozen prefix")
    w = guidance_weight(tau, guidance.beta.to(x.dtype))[:, None, None]
    if guidance.method == "cheap":
        u = velocity(x)
        x1 = x + (1.0 - tau) * u
        return u + w * (guidance.weights * (guidance.target - x1))
    with torch.inference_mode(False), torch.enable_grad():
        xg = x.detach().clone().requires_grad_(True)
        u = velocity(xg)
        x1 = xg + (1.0 - tau) * u
        err = (guidance.weights * (guidance.target - x1)).detach()
        (correction,) = torch.autograd.grad(x1, xg, grad_outputs=err)
    return u.detach() + w * correction


def check_guidance(guidance: dict[str, Guidance], noise: dict[str, torch.Tensor]) -> None:
    """A frame's guidance names heads it denoises, with matching shapes (raises naming the head)."""
    for head, g in guidance.items():
        if head not in noise:
            raise ValueError(f"guidance names action head {head!r}, which this frame does not denoise ({list(noise)})")
        if not isinstance(g, Guidance):
            raise ValueError(f"guidance[{head!r}]: expected a Guidance, got {type(g).__name__}")
        g.check_against(noise[head], head)
