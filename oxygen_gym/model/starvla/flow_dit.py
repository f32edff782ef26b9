"""The cross-attention DiT both flow heads use (GR00T N1.5's `cross_attention_dit.py`, as lerobot 0.4.4 and StarVLA
ship it), written so the keys/values a block reads from the backbone are computed once per frame and reused by
every Euler step (they depend on the frame alone, never on the noisy actions or the flow time).

Parameter names follow diffusers' modules as those files build them (`transformer_blocks.N.norm1.linear`,
`attn1.to_q|to_k|to_v|to_out.0`, `ff.net.0.proj`, `ff.net.2`, `timestep_encoder.timestep_embedder.linear_1|2`,
`proj_out_1|2`), so a StarVLA or lerobot state dict loads strictly. Conventions (diffusers 0.3x):

- time: `Timesteps(256, flip_sin_to_cos=True, downscale_freq_shift=1)` -> [cos, sin] of t * 1e4^(-i / 127), then
  Linear-SiLU-Linear; the DiT is fed the integer bucket int(1000 tau) (`time_bucket`). StarVLA's flow time is
  core/guidance.py's convention already (`LayerwiseFM_ActionHeader.py` / lerobot's GR00T head `get_action`):
  tau = k / num_steps from 0 (noise) towards 1 (data), the head predicts the data-ward velocity, so the heads
  integrate with model/flow_sampler.py as they are.
- ada_norm block: x += attn(LayerNorm(x) * (1 + scale) + shift) with (scale, shift) = Linear(SiLU(temb)); then
  x += ff(LayerNorm(x)); LayerNorms without affine, eps 1e-5; ff = Linear-GELU(tanh)-Linear, 4x wide.
- a block cross-attends when built with a context width; with `interleave`, odd blocks self-attend (no mask).
- output (GR00T): LayerNorm(eps 1e-6) * (1 + scale) + shift with (shift, scale) = proj_out_1(SiLU(temb)), then
  proj_out_2; PI_v3 decodes the pre-output (`return_pre_output=True`).
"""
from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from ..layers import linear

KV = tuple[torch.Tensor, torch.Tensor]


def time_bucket(step: int, num_steps: int, buckets: int) -> int:
    """The integer time the DiT sees at Euler step `step` (`int(t_cont * num_timestep_buckets)`)."""
    return int(step / float(num_steps) * buckets)


class TimestepEmbedding(nn.Module):
    def __init__(self, channels: int, width: int) -> None:
        super().__init__()
        self.linear_1 = nn.Linear(channels, width)
        self.linear_2 = nn.Linear(width, width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return linear(F.silu(linear(x, self.linear_1)), self.linear_2)


class TimestepEncoder(nn.Module):
    CHANNELS = 256

    def __init__(self, width: int) -> None:
        super().__init__()
        self.timestep_embedder = TimestepEmbedding(self.CHANNELS, width)

    @classmethod
    def sinusoid(cls, t: torch.Tensor) -> torch.Tensor:
        """diffusers' get_timestep_embedding(t, 256, flip_sin_to_cos=True, downscale_freq_shift=1): [cos, sin]."""
        half = cls.CHANNELS // 2
        exponent = -math.log(10000.0) * torch.arange(half, dtype=torch.float32, device=t.device) / (half - 1)
        args = t.float()[:, None] * torch.exp(exponent)[None]
        return torch.cat([torch.cos(args), torch.sin(args)], dim=-1)

    def forward(self, t: torch.Tensor) -> torch.Tensor:
        """`t [B]` (integer buckets) -> `[B, width]`."""
        proj = self.sinusoid(t).to(self.timestep_embedder.linear_1.weight.dtype)
        return self.timestep_embedder(proj)


class Attention(nn.Module):
    """diffusers' Attention (biased q/k/v and out): heads x head_dim wide; k/v from `context_dim` (None: self)."""

    def __init__(self, width: int, heads: int, head_dim: int, context_dim: int | None = None, bias: bool = True) -> None:
        super().__init__()
        inner = heads * head_dim
        self.heads, self.head_dim = heads, head_dim
        self.to_q = nn.Linear(width, inner, bias=bias)
        self.to_k = nn.Linear(context_dim or width, inner, bias=bias)
        self.to_v = nn.Linear(context_dim or width, inner, bias=bias)
        self.to_out = nn.ModuleList([nn.Linear(inner, width, bias=True)])

    def _split(self, x: torch.Tensor) -> torch.Tensor:
        b, t, _ = x.shape
        return x.view(b, t, self.heads, self.head_dim).transpose(1, 2)

    def kv(self, context: torch.Tensor) -> KV:
        """Keys and values `[B, heads, T, head_dim]` of `context [B, T, context_dim]` (cacheable per frame)."""
        return self._split(linear(context, self.to_k)), self._split(linear(context, self.to_v))

    def attend(self, x: torch.Tensor, kv: KV, mask: torch.Tensor | None) -> torch.Tensor:
        """`x [B, Q, width]` over `kv`; `mask [B, T]` bool (True = may attend) or None."""
        b, q_len, _ = x.shape
        q = self._split(linear(x, self.to_q))
        k, v = kv
        m = None if mask is None else mask[:, None, None, :]
        out = F.scaled_dot_product_attention(q, k.to(q.dtype), v.to(q.dtype), attn_mask=m)
        return linear(out.transpose(1, 2).reshape(b, q_len, -1), self.to_out[0])


class GeluProj(nn.Module):
    def __init__(self, d_in: int, d_out: int) -> None:
        super().__init__()
        self.proj = nn.Linear(d_in, d_out)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.gelu(linear(x, self.proj), approximate="tanh")


class FeedForward(nn.Module):
    """diffusers' FeedForward(activation_fn="gelu-approximate"): keys `net.0.proj`, `net.2` (dropouts hold none)."""

    def __init__(self, width: int, mult: int = 4) -> None:
        super().__init__()
        self.net = nn.ModuleList([GeluProj(width, mult * width), nn.Dropout(0.0), nn.Linear(mult * width, width)])

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return linear(self.net[0](x), self.net[2])


class AdaLayerNorm(nn.Module):
    def __init__(self, width: int, eps: float = 1e-5) -> None:
        super().__init__()
        self.linear = nn.Linear(width, 2 * width)
        self.eps = eps

    def forward(self, x: torch.Tensor, temb: torch.Tensor) -> torch.Tensor:
        scale, shift = linear(F.silu(temb), self.linear).chunk(2, dim=1)
        return F.layer_norm(x, x.shape[-1:], eps=self.eps) * (1 + scale[:, None]) + shift[:, None]


class Block(nn.Module):
    """BasicTransformerBlock: `ada` (the DiT's, AdaLayerNorm + affine-free norm3) or plain LayerNorms with affine
    (the SelfAttentionTransformer over GR00T's backbone features)."""

    def __init__(self, width: int, heads: int, head_dim: int, context_dim: int | None, ada: bool = True) -> None:
        super().__init__()
        self.ada = ada
        self.norm1 = AdaLayerNorm(width) if ada else nn.LayerNorm(width, eps=1e-5)
        self.attn1 = Attention(width, heads, head_dim, context_dim)
        self.norm3 = nn.LayerNorm(width, eps=1e-5, elementwise_affine=not ada)
        self.ff = FeedForward(width)
        self.cross = context_dim is not None

    def forward(self, x: torch.Tensor, temb: torch.Tensor | None, kv: KV | None, mask: torch.Tensor | None):
        """`kv`: the context's keys/values for a cross block (precomputed), None to self-attend; `mask [B, T]` over
        what it attends (None: everything)."""
        n = self.norm1(x, temb) if self.ada else self.norm1(x)
        x = x + self.attn1.attend(n, self.attn1.kv(n) if kv is None else kv, mask)
        return x + self.ff(self.norm3(x))


class FlowDiT(nn.Module):
    """The DiT (`model.*` of a head). `context_dim`: the width cross blocks read; `interleave`: odd blocks
    self-attend; `output_dim`: proj_out_2's width."""

    def __init__(self, width: int, heads: int, head_dim: int, depth: int, context_dim: int, output_dim: int,
                 interleave: bool) -> None:
        super().__init__()
        self.interleave = interleave
        self.timestep_encoder = TimestepEncoder(width)
        self.transformer_blocks = nn.ModuleList(
            Block(width, heads, head_dim, None if interleave and i % 2 == 1 else context_dim) for i in range(depth)
        )
        self.proj_out_1 = nn.Linear(width, 2 * width)
        self.proj_out_2 = nn.Linear(width, output_dim)

    @property
    def cross_blocks(self) -> list[int]:
        return [i for i, b in enumerate(self.transformer_blocks) if b.cross]

    def context_kv(self, contexts: list[torch.Tensor]) -> list[KV]:
        """Per cross block (in order), its keys/values of its context `[B, T, context_dim]`: once per frame."""
        blocks = [self.transformer_blocks[i] for i in self.cross_blocks]
        if len(contexts) != len(blocks):
            raise ValueError(f"the DiT has {len(blocks)} cross-attention blocks, got {len(contexts)} contexts")
        return [b.attn1.kv(c) for b, c in zip(blocks, contexts)]

    def forward(self, x: torch.Tensor, t: torch.Tensor, kvs: list[KV], mask: torch.Tensor | None,
                pre_output: bool = False) -> torch.Tensor:
        """`x [B, Q, width]` at integer time buckets `t [B]`; `kvs`: `context_kv`'s list; `mask [B, T]`."""
        temb = self.timestep_encoder(t)
        cross = iter(kvs)
        for block in self.transformer_blocks:
            x = block(x, temb, next(cross), mask) if block.cross else block(x, temb, None, None)
        if pre_output:
            return x
        shift, scale = linear(F.silu(temb), self.proj_out_1).chunk(2, dim=1)
        x = F.layer_norm(x, x.shape[-1:], eps=1e-6) * (1 + scale[:, None]) + shift[:, None]
        return linear(x, self.proj_out_2)
