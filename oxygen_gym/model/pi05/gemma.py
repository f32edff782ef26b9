"""Gemma decoder layers for the two experts. Each layer projects its own Q/K/V; attention runs over an
external KV cache (prefix written by the backbone, read by the action expert and by language decoding)."""
from __future__ import annotations

import torch
from torch import nn

from .config import GemmaDims
from ..fused_linear import fused_linear
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
        h, kh = self.dims.num_heads, self.dims.num_kv_heads
        heads = fused_linear(x, self, (self.q_proj, self.k_proj, self.v_proj)).view(b, t, h + 2 * kh, -1).transpose(1, 2)
        qk = apply_rope(heads[:, : h + kh], cos, sin)  # q and k rotate alike: one pass over both
        return qk[:, :h], qk[:, h:], heads[:, h + kh :]

    def kv(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """k (with RoPE) and v `[B, K, T, D]` alone: what a layer whose outputs nobody reads must still cache."""
        b, t, _ = x.shape
        d = self.dims.head_dim
        k = linear(x, self.k_proj).view(b, t, -1, d).transpose(1, 2)
        v = linear(x, self.v_proj).view(b, t, -1, d).transpose(1, 2)
        return apply_rope(k, cos, sin), v


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

    def write_kv_only(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, k_cache: torch.Tensor,
                      v_cache: torch.Tensor, write_at: tuple | slice) -> None:
        """Cache this layer's keys/values for `x` and skip its attention and MLP: the backbone's last layer when
        nothing reads its output (an action-only prefill; language continues from the cache, not from it)."""
        if self.adaptive:
            raise ValueError("write_kv_only: the action expert's layers always feed the velocity")
        k, v = self.self_attn.kv(self.input_layernorm(x), cos, sin)
        write_kv(k_cache, v_cache, write_at, k, v)


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
