"""Building blocks shared by the families: norms, rotary embedding, cache writes, attention, gated MLP."""
from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from .cpu_kernels import max_rows_of, packed_linear

RMS_EPS = 1e-6


def linear(x: torch.Tensor, layer: nn.Linear) -> torch.Tensor:
    """Apply `layer` in its weight's dtype (fp32 norms feed bf16 matmuls in mixed checkpoints), plus the per-row
    LoRA update of the adapters routed to (lora_bank.py) when the layer is an adapter target."""
    if max_rows_of(layer):  # opt-in oneDNN path for small-row calls (cpu_kernels.enable)
        y = packed_linear(x, layer)
    else:
        y = F.linear(x.to(layer.weight.dtype), layer.weight, layer.bias)
    lora = layer.__dict__.get("lora_target")
    return y if lora is None else lora(x, y)


def rms_normalize(x: torch.Tensor) -> torch.Tensor:
    x = x.float()
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + RMS_EPS)


class RMSNorm(nn.Module):
    """Gemma RMSNorm: fp32, scale by (1 + weight)."""

    def __init__(self, width: int) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.zeros(width))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return (rms_normalize(x) * (1.0 + self.weight.float())).to(x.dtype)


class AdaRMSNorm(nn.Module):
    """The action expert's adaptive RMSNorm: `dense(cond)` gives (scale, shift, gate) per sample."""

    def __init__(self, width: int) -> None:
        super().__init__()
        self.dense = nn.Linear(width, 3 * width)

    def modulation(self, cond: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """(scale, shift, gate), each `[B, 1, width]` for a condition per sample `[B, W]`, or `[B, T, width]` for one
        per token `[B, T, W]` (training-time RTC: the clean prefix is at another flow time); depends only on the
        condition, so callers may cache it."""
        out = linear(cond, self.dense)
        scale, shift, gate = (out.unsqueeze(1) if cond.dim() == 2 else out).chunk(3, dim=-1)
        return scale, shift, gate

    @staticmethod
    def modulate(x: torch.Tensor, scale: torch.Tensor, shift: torch.Tensor) -> torch.Tensor:
        """Normalise `x`, then scale and shift it (a static method: `nn.Module.apply` keeps its meaning)."""
        return (rms_normalize(x) * (1.0 + scale.float()) + shift.float()).to(x.dtype)


def rope_cos_sin(positions: torch.Tensor, head_dim: int, base: float) -> tuple[torch.Tensor, torch.Tensor]:
    """cos, sin `[B, T, head_dim/2]` (fp32) for integer positions `[B, T]`."""
    inv_freq = 1.0 / (base ** (torch.arange(0, head_dim, 2, device=positions.device, dtype=torch.int64).float() / head_dim))
    freqs = positions.float()[..., None] * inv_freq
    return freqs.cos(), freqs.sin()


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Split-half rotary embedding on `x [B, heads, T, head_dim]`."""
    half = x.shape[-1] // 2
    x1, x2 = x[..., :half].float(), x[..., half:].float()
    c, s = cos[:, None], sin[:, None]
    return torch.cat((x1 * c - x2 * s, x2 * c + x1 * s), dim=-1).to(x.dtype)


def write_kv(k_cache: torch.Tensor, v_cache: torch.Tensor, write_at, k: torch.Tensor, v: torch.Tensor) -> None:
    """Store new keys/values `k, v [B, K, T, D]` in a layer's cache `[B, K, C, D]`: `write_at` is a slice of the
    position axis (every row at the same indices: prefill, the action tokens) or advanced indices (rows [B, 1],
    indices [B, T]) where each row continues at its own cache index (task prompts, decode steps)."""
    if isinstance(write_at, slice):
        k_cache[:, :, write_at] = k.to(k_cache.dtype)
        v_cache[:, :, write_at] = v.to(v_cache.dtype)
    else:
        rows, index = write_at
        k_cache[rows, :, index] = k.transpose(1, 2).to(k_cache.dtype)
        v_cache[rows, :, index] = v.transpose(1, 2).to(v_cache.dtype)


def grouped_attention(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor | None
) -> torch.Tensor:
    """Multi-query / grouped attention without repeating keys.

    q `[B, H, Tq, D]`, k/v `[B, K, Tk, D]`, mask bool `[B, Tq, Tk]` (True = may attend) or None.
    The H/K query heads that share a KV head are folded into the query axis, so one SDPA call reads each key
    once. Logits and softmax run in fp32. Returns `[B, Tq, H*D]`.

    Kept for several query tokens too: SDPA's `enable_gqa` (heads apart, the mask broadcast) was 1.1-1.8x faster at
    pi0.5's 8:1 heads but not bit-identical at the shipped `libero-spatial`'s 4:1 heads, which changed its closed-loop
    episodes (docs/benchmarks.md, "Against lerobot's PI05 on CPU").
    """
    b, h, tq, d = q.shape
    kh = k.shape[1]
    g = h // kh
    qf = q.reshape(b, kh, g * tq, d)  # head-major: index = (group, t)
    m = None
    if mask is not None:
        m = mask[:, None, None].expand(b, 1, g, tq, mask.shape[-1]).reshape(b, 1, g * tq, mask.shape[-1])
    dtype = q.dtype
    out = F.scaled_dot_product_attention(qf.float(), k.float(), v.float(), attn_mask=m, scale=1.0 / math.sqrt(d))
    return out.to(dtype).reshape(b, h, tq, d).transpose(1, 2).reshape(b, tq, h * d)


class GatedMLP(nn.Module):
    """Gemma GeGLU: down(gelu_tanh(gate(x)) * up(x))."""

    def __init__(self, width: int, mlp_dim: int) -> None:
        super().__init__()
        self.gate_proj = nn.Linear(width, mlp_dim, bias=False)
        self.up_proj = nn.Linear(width, mlp_dim, bias=False)
        self.down_proj = nn.Linear(mlp_dim, width, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = F.gelu(linear(x, self.gate_proj), approximate="tanh")
        up = linear(x, self.up_proj)
        # in place where no autograd records it: one [rows, mlp_dim] buffer fewer per layer
        h = h * up if torch.is_grad_enabled() else h.mul_(up)
        return linear(h, self.down_proj)
