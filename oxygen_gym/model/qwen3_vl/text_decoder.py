"""The Qwen3 text decoder over an external KV cache: GQA attention with per-head q/k RMSNorm before M-RoPE,
SiLU-gated MLP, DeepStack visual features added to the first layers' outputs at image-token positions.

Names follow transformers' `Qwen3VLTextModel` (`model.language_model.*`, modeling_qwen3_vl.py). Keys are stored in
the cache after RoPE; a layer writes its new tokens' K/V, then attends over cache positions [0, read_len) under a
mask, as pi0.5's Gemma layers do (pi05/gemma.py), so prefill, extend and decode share one body.
"""
from __future__ import annotations

import torch
from torch import nn

from ..layers import apply_rope, grouped_attention, linear, write_kv
from .qwen_config import TextDims
from .vision_tower import activation


class QwenRMSNorm(nn.Module):
    """Qwen RMSNorm: normalise in fp32, cast back, then scale by `weight` (initialised to ones; Gemma's is 1 + w)."""

    def __init__(self, width: int, eps: float) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(width))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        xf = x.float()
        normed = (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.eps)).to(x.dtype)
        return self.weight * normed


class TextAttention(nn.Module):
    def __init__(self, d: TextDims) -> None:
        super().__init__()
        self.d = d
        self.q_proj = nn.Linear(d.width, d.num_heads * d.head_dim, bias=d.attention_bias)
        self.k_proj = nn.Linear(d.width, d.num_kv_heads * d.head_dim, bias=d.attention_bias)
        self.v_proj = nn.Linear(d.width, d.num_kv_heads * d.head_dim, bias=d.attention_bias)
        self.o_proj = nn.Linear(d.num_heads * d.head_dim, d.width, bias=d.attention_bias)
        self.q_norm = QwenRMSNorm(d.head_dim, d.rms_eps)  # per head, before RoPE
        self.k_norm = QwenRMSNorm(d.head_dim, d.rms_eps)

    def qkv(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor):
        """q `[B, H, T, D]`, k/v `[B, K, T, D]`; q and k normed per head, then rotated."""
        b, t, _ = x.shape
        hd = self.d.head_dim
        q = self.q_norm(linear(x, self.q_proj).view(b, t, -1, hd)).transpose(1, 2)
        k = self.k_norm(linear(x, self.k_proj).view(b, t, -1, hd)).transpose(1, 2)
        v = linear(x, self.v_proj).view(b, t, -1, hd).transpose(1, 2)
        return apply_rope(q, cos, sin), apply_rope(k, cos, sin), v


class TextMLP(nn.Module):
    def __init__(self, d: TextDims) -> None:
        super().__init__()
        self.gate_proj = nn.Linear(d.width, d.mlp_dim, bias=False)
        self.up_proj = nn.Linear(d.width, d.mlp_dim, bias=False)
        self.down_proj = nn.Linear(d.mlp_dim, d.width, bias=False)
        self.act = activation(d.act)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return linear(self.act(linear(x, self.gate_proj)) * linear(x, self.up_proj), self.down_proj)


class TextLayer(nn.Module):
    def __init__(self, d: TextDims) -> None:
        super().__init__()
        self.input_layernorm = QwenRMSNorm(d.width, d.rms_eps)
        self.self_attn = TextAttention(d)
        self.post_attention_layernorm = QwenRMSNorm(d.width, d.rms_eps)
        self.mlp = TextMLP(d)

    def forward(
        self,
        x: torch.Tensor,
        cos: torch.Tensor,
        sin: torch.Tensor,
        k_cache: torch.Tensor,
        v_cache: torch.Tensor,
        write_at: slice | tuple[torch.Tensor, torch.Tensor],
        read_len: int,
        mask: torch.Tensor | None,
    ) -> torch.Tensor:
        """New tokens `x [B, T, W]`: write their K/V into `k_cache/v_cache [B, K, C, D]` at `write_at` (a slice of
        the position axis, or (rows [B, 1], indices [B, T])), then attend over [0, read_len) under `mask [B, T,
        read_len]` (None: all)."""
        q, k, v = self.self_attn.qkv(self.input_layernorm(x), cos, sin)
        write_kv(k_cache, v_cache, write_at, k, v)
        att = grouped_attention(q, k_cache[:, :, :read_len], v_cache[:, :, :read_len], mask)
        x = x + linear(att, self.self_attn.o_proj)
        return x + self.mlp(self.post_attention_layernorm(x))


class Qwen3VLTextDecoder(nn.Module):
    """Embeddings, layers and final norm; `run` is the one loop every stage (prefill, extend, decode) goes through."""

    def __init__(self, d: TextDims) -> None:
        super().__init__()
        self.d = d
        self.embed_tokens = nn.Embedding(d.vocab_size, d.width)
        self.layers = nn.ModuleList(TextLayer(d) for _ in range(d.depth))
        self.norm = QwenRMSNorm(d.width, d.rms_eps)

    def run(
        self,
        x: torch.Tensor,
        cos: torch.Tensor,
        sin: torch.Tensor,
        k: torch.Tensor,
        v: torch.Tensor,
        write_at: slice | tuple[torch.Tensor, torch.Tensor],
        read_len: int,
        mask: torch.Tensor | None,
        visual_mask: torch.Tensor | None = None,
        deepstack: list[torch.Tensor] | None = None,
        record: list[torch.Tensor] | None = None,
        final_norm: bool = True,
    ) -> torch.Tensor:
        """All layers over `x [B, T, W]` with the cache `k, v [layers, B, K, C, D]`; returns the final-normed hidden
        (`final_norm=False`: the last layer's output as is, what `hidden_states[-1]` holds).

        `deepstack[i]` (rows in row-major order of `visual_mask [B, T]`) is added to layer i's output at the image
        tokens. `record` collects what transformers' `output_hidden_states` returns from
        `Qwen3VLForConditionalGeneration`: the input embeddings, then every layer's output *after* DeepStack's add
        (its in-place update mutates the recorded tensor), the last one un-normed.
        """
        if record is not None:
            record.append(x)
        for i, layer in enumerate(self.layers):
            x = layer(x, cos, sin, k[i], v[i], write_at, read_len, mask)
            if deepstack is not None and i < len(deepstack):
                x[visual_mask] = x[visual_mask] + deepstack[i].to(x.dtype)
            if record is not None:
                record.append(x)
        return self.norm(x) if final_norm else x
