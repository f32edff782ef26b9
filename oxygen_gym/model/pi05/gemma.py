"""Gemma decoder layers for the two experts. Each layer projects its own Q/K/V; attention runs over an
external KV cache (prefix written by the backbone, read by the action expert and by language decoding)."""
from __future__ import annotations

import torch
from torch import nn

from .config import GemmaDims
from ..layers import AdaRMSNorm, GatedMLP, RMSNorm, apply_rope, grouped_attention, linear, write_kv


class GemmaAttention(nn.Module):
    def __init__(self, dims: GemmaDims) -> None:
        super().__init__()
        self.dims = dims
        self.q_proj = nn.Linear(dims.width, dims.num_heads * dims.head_dim, bias=False)
        self.k_proj = nn.Linear(dims.width, dims.num_kv_heads * dims.head_dim, bias=False)
        self.v_proj = nn.Linear(dims.width, dims.num_kv_heads * dims.head_dim, bias=False)
        self.o_proj = nn.Linear(dims.num_heads * dims.head_dim, dims.width, bias=False)

    def qkv(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor):
        """q `[B, H, T, D]`, k/v `[B, K, T, D]` with RoPE applied to q and k."""
        b, t, _ = x.shape
        d = self.dims.head_dim
        q = linear(x, self.q_proj).view(b, t, -1, d).transpose(1, 2)
        k = linear(x, self.k_proj).view(b, t, -1, d).transpose(1, 2)
        v = linear(x, self.v_proj).view(b, t, -1, d).transpose(1, 2)
        return apply_rope(q, cos, sin), apply_rope(k, cos, sin), v


class GemmaLayer(nn.Module):
    """Pre-norm layer. With `adaptive`, norms are adaRMS and residuals are gated (the action expert)."""

    def __init__(self, dims: GemmaDims, adaptive: bool) -> None:
        super().__init__()
        norm = AdaRMSNorm if adaptive else RMSNorm
        self.adaptive = adaptive
        self.input_layernorm = norm(dims.width)
        self.self_attn = GemmaAttention(dims)
        self.post_attention_layernorm = norm(dims.width)
        self.mlp = GatedMLP(dims.width, dims.mlp_dim)

    def forward(
        self,
        x: torch.Tensor,
        cos: torch.Tensor,
        sin: torch.Tensor,
        k_cache: torch.Tensor,
        v_cache: torch.Tensor,
        write_at: tuple | slice,
        read_len: int,
        mask: torch.Tensor | None,
        mod: tuple | None = None,
    ) -> torch.Tensor:
        """One layer over new tokens `x [B, T, W]`.

        Their keys/values are written into `k_cache/v_cache [B, K, C, D]` at `write_at` (a slice of the position
        axis, or advanced indices (rows, positions)), then the tokens attend to cache positions `[0, read_len)`
        under `mask [B, T, read_len]` (None = all). `mod` holds the adaRMS (scale, shift, gate) of both norms.
        """
        if self.adaptive:
            (s1, b1, g1), (s2, b2, g2) = mod
            h = AdaRMSNorm.modulate(x, s1, b1)
        else:
            h = self.input_layernorm(x)
        q, k, v = self.self_attn.qkv(h, cos, sin)
        write_kv(k_cache, v_cache, write_at, k, v)
        att = grouped_attention(q, k_cache[:, :, :read_len], v_cache[:, :, :read_len], mask)
        out = linear(att, self.self_attn.o_proj)
        if self.adaptive:
            x = x + out * g1.to(out.dtype)
            out = self.mlp(AdaRMSNorm.modulate(x, s2, b2))
            return x + out * g2.to(out.dtype)
        x = x + out
        return x + self.mlp(self.post_attention_layernorm(x))


class GemmaStack(nn.Module):
    def __init__(self, dims: GemmaDims, adaptive: bool) -> None:
        super().__init__()
        self.dims = dims
        self.adaptive = adaptive
        self.layers = nn.ModuleList(GemmaLayer(dims, adaptive) for _ in range(dims.depth))
        self.norm = AdaRMSNorm(dims.width) if adaptive else RMSNorm(dims.width)

    def modulations(self, cond: torch.Tensor) -> list:
        """Per layer ((scale, shift, gate) of the input norm, of the post-attention norm), then the final norm's."""
        mods = [(layer.input_layernorm.modulation(cond), layer.post_attention_layernorm.modulation(cond)) for layer in self.layers]
        return mods + [self.norm.modulation(cond)]
