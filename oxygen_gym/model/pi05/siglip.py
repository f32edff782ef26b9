"""SigLIP vision tower (So400m/14 layout, no pooling head) and the linear projector into the backbone."""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from .config import VisionDims
from ..layers import linear

LN_EPS = 1e-6


class SiglipAttention(nn.Module):
    def __init__(self, width: int, num_heads: int) -> None:
        super().__init__()
        self.num_heads = num_heads
        self.q_proj = nn.Linear(width, width)
        self.k_proj = nn.Linear(width, width)
        self.v_proj = nn.Linear(width, width)
        self.out_proj = nn.Linear(width, width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, w = x.shape
        heads = lambda y: y.view(b, t, self.num_heads, -1).transpose(1, 2)  # noqa: E731
        q, k, v = heads(linear(x, self.q_proj)), heads(linear(x, self.k_proj)), heads(linear(x, self.v_proj))
        out = F.scaled_dot_product_attention(q.float(), k.float(), v.float()).to(x.dtype)
        return linear(out.transpose(1, 2).reshape(b, t, w), self.out_proj)


class SiglipMLP(nn.Module):
    def __init__(self, width: int, mlp_dim: int) -> None:
        super().__init__()
        self.fc1 = nn.Linear(width, mlp_dim)
        self.fc2 = nn.Linear(mlp_dim, width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return linear(F.gelu(linear(x, self.fc1), approximate="tanh"), self.fc2)


class SiglipLayer(nn.Module):
    def __init__(self, dims: VisionDims) -> None:
        super().__init__()
        self.layer_norm1 = nn.LayerNorm(dims.width, eps=LN_EPS)
        self.self_attn = SiglipAttention(dims.width, dims.num_heads)
        self.layer_norm2 = nn.LayerNorm(dims.width, eps=LN_EPS)
        self.mlp = SiglipMLP(dims.width, dims.mlp_dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.self_attn(_layer_norm(x, self.layer_norm1))
        return x + self.mlp(_layer_norm(x, self.layer_norm2))


def _layer_norm(x: torch.Tensor, ln: nn.LayerNorm) -> torch.Tensor:
    return F.layer_norm(x.to(ln.weight.dtype), ln.normalized_shape, ln.weight, ln.bias, ln.eps)


class SiglipVision(nn.Module):
    """Images `[B, 3, S, S]` in [-1, 1] -> `[B, patches, out_width]` image tokens (projected, not scaled)."""

    def __init__(self, dims: VisionDims, out_width: int) -> None:
        super().__init__()
        self.dims = dims
        self.patch_embedding = nn.Conv2d(3, dims.width, dims.patch_size, stride=dims.patch_size)
        self.position_embedding = nn.Parameter(torch.zeros(dims.num_patches, dims.width))
        self.layers = nn.ModuleList(SiglipLayer(dims) for _ in range(dims.depth))
        self.post_layernorm = nn.LayerNorm(dims.width, eps=LN_EPS)
        self.projector = nn.Linear(dims.width, out_width)

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        w = self.patch_embedding.weight
        x = F.conv2d(images.to(w.dtype), w, self.patch_embedding.bias, stride=self.dims.patch_size)
        x = x.flatten(2).transpose(1, 2) + self.position_embedding
        for layer in self.layers:
            x = layer(x)
        return linear(_layer_norm(x, self.post_layernorm), self.projector)
