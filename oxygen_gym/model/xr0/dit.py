"""The XR0 DiT: AdaLN-modulated decoder layers whose attention reads the backbone's cached K/V in place.

Parameter names follow the published checkpoint (`dit.layers.N.*`, and the projector / embedder modules of
action_expert.py), so a checkpoint loads strictly. Structure (XR0.py `DecoderLayer`, modeling_mibot.py):

    shift1, scale1, gate1, shift2, scale2, gate2 = adaln_table + t_proj(t)          (6 x [B, 1, W])
    x = middle_norm(x + gate1 * attn(modulate(input_norm(x), shift1, scale1)))
    x = final_norm(x + gate2 * mlp(modulate(post_norm(x), shift2, scale2)))

Norms are Qwen RMSNorms (`weight * x / rms(x)`, not Gemma's `1 + weight`); q/k get a per-head RMSNorm before RoPE;
the MLP is SwiGLU; qkv has a bias, o_proj none. The layer's own keys have `heads` heads (qkv is W -> 3W), the cache's
`kv_heads`: query head h reads cache head h // (heads / kv_heads) (transformers' repeat_kv).
"""
from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from ..layers import apply_rope, linear
from .xr0_config import DiTDims


class QwenRMSNorm(nn.Module):
    """transformers' Qwen3VLTextRMSNorm: normalise in fp32, cast back, then scale by `weight` (init 1)."""

    def __init__(self, width: int, eps: float = 1e-6) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(width))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        xf = x.float()
        xf = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * xf.to(x.dtype)


class SwiGLU(nn.Module):
    def __init__(self, width: int, mlp_dim: int) -> None:
        super().__init__()
        self.gate_proj = nn.Linear(width, mlp_dim, bias=False)
        self.up_proj = nn.Linear(width, mlp_dim, bias=False)
        self.down_proj = nn.Linear(mlp_dim, width, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return linear(F.silu(linear(x, self.gate_proj)) * linear(x, self.up_proj), self.down_proj)


def joint_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    cache_k: torch.Tensor,
    cache_v: torch.Tensor,
    cache_mask: torch.Tensor,
    own_mask: torch.Tensor,
) -> torch.Tensor:
    """Attention of the DiT tokens over [cached prefix | their own keys], without copying the cache.

    q, k, v `[B, H, Q, D]` (own tokens, after norm and RoPE); cache_k/v `[B, K, L, D]` (a view of the cache);
    cache_mask bool `[B, L]`; own_mask bool `[Q, Q]` (True = may attend). The two logit blocks are joined and
    softmaxed together in fp32, which equals the references' SDPA over `cat([cache, own])`. Returns `[B, Q, H*D]`.
    """
    b, h, nq, d = q.shape
    kh, length = cache_k.shape[1], cache_k.shape[2]
    g = h // kh
    scale = 1.0 / math.sqrt(d)
    qg = q.reshape(b, kh, g * nq, d)  # query head kh_i * g + j -> row (kh_i, j * nq + t)
    logits_cache = torch.matmul(qg, cache_k.transpose(-1, -2).to(q.dtype)).float() * scale  # [B, K, gQ, L]
    logits_own = torch.matmul(q, k.transpose(-1, -2)).float().reshape(b, kh, g * nq, nq) * scale
    logits = torch.cat([logits_cache, logits_own], dim=-1)
    mask = torch.cat([cache_mask[:, None, :].expand(b, nq, length), own_mask[None].expand(b, nq, nq)], dim=-1)
    mask = mask[:, None, None].expand(b, 1, g, nq, length + nq).reshape(b, 1, g * nq, length + nq)
    probs = logits.masked_fill(~mask, float("-inf")).softmax(-1)
    p_cache, p_own = probs[..., :length].to(q.dtype), probs[..., length:].to(q.dtype)
    out = torch.matmul(p_cache, cache_v.to(q.dtype)) + torch.matmul(p_own.reshape(b, h, nq, nq), v).reshape(
        b, kh, g * nq, d
    )
    return out.reshape(b, h, nq, d).transpose(1, 2).reshape(b, nq, h * d)


class DiTAttention(nn.Module):
    def __init__(self, dims: DiTDims, eps: float) -> None:
        super().__init__()
        self.heads, self.head_dim = dims.heads, dims.head_dim
        self.qkv_proj = nn.Linear(dims.width, 3 * dims.width, bias=True)
        self.o_proj = nn.Linear(dims.width, dims.width, bias=False)
        self.q_norm = QwenRMSNorm(dims.head_dim, eps)
        self.k_norm = QwenRMSNorm(dims.head_dim, eps)

    def forward(self, x, cos, sin, cache_k, cache_v, cache_mask, own_mask) -> torch.Tensor:
        b, nq, _ = x.shape
        q, k, v = linear(x, self.qkv_proj).view(b, nq, 3, self.heads, self.head_dim).unbind(2)
        q = apply_rope(self.q_norm(q).transpose(1, 2), cos, sin)
        k = apply_rope(self.k_norm(k).transpose(1, 2), cos, sin)
        out = joint_attention(q, k, v.transpose(1, 2), cache_k, cache_v, cache_mask, own_mask)
        return linear(out, self.o_proj)


def modulate(x: torch.Tensor, shift: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    return x * (1 + scale) + shift


class DiTLayer(nn.Module):
    def __init__(self, dims: DiTDims, eps: float = 1e-6) -> None:
        super().__init__()
        w = dims.width
        self.attn = DiTAttention(dims, eps)
        self.mlp = SwiGLU(w, dims.mlp_dim)
        self.input_layernorm = QwenRMSNorm(w, eps)
        self.middle_layernorm = QwenRMSNorm(w, eps)
        self.post_layernorm = QwenRMSNorm(w, eps)
        self.final_layernorm = QwenRMSNorm(w, eps)
        self.adaln_table = nn.Parameter(torch.randn(6, w) / w**0.5)

    def modulation(self, t_embeds: torch.Tensor) -> torch.Tensor:
        """`[B, 6, W]` (shift, scale, gate for attention, then for the MLP): depends on t only, callers cache it."""
        return self.adaln_table[None] + t_embeds

    def forward(self, x, mods, cos, sin, cache_k, cache_v, cache_mask, own_mask) -> torch.Tensor:
        shift1, scale1, gate1, shift2, scale2, gate2 = mods.to(x.dtype).chunk(6, dim=1)
        h = modulate(self.input_layernorm(x), shift1, scale1)
        x = self.middle_layernorm(x + gate1 * self.attn(h, cos, sin, cache_k, cache_v, cache_mask, own_mask))
        h = modulate(self.post_layernorm(x), shift2, scale2)
        return self.final_layernorm(x + gate2 * self.mlp(h))


class DiT(nn.Module):
    def __init__(self, dims: DiTDims, eps: float = 1e-6) -> None:
        super().__init__()
        self.layers = nn.ModuleList([DiTLayer(dims, eps) for _ in range(dims.depth)])
