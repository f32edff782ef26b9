"""The small modules around the flow heads' DiT: action encoders (noisy actions + flow time), state encoder,
decoders, the embodiment-specific linears of GR00T N1.5, and the MLP-ResNet of OFT. Parameter names follow the
sources (StarVLA `LayerwiseFM_ActionHeader.py`, `MLP_ActionHeader.py`; lerobot 0.4.4
`policies/groot/action_head/flow_matching_action_head.py`), so their state dicts load strictly."""
from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from ..layers import linear


def time_sinusoid(t: torch.Tensor, width: int) -> torch.Tensor:
    """GR00T's SinusoidalPositionalEncoding: [sin, cos] of t * 1e4^(-i / (width / 2)); `t [B, T]` -> `[B, T, W]`."""
    half = width // 2
    exponent = -torch.arange(half, dtype=torch.float32, device=t.device) * (math.log(10000.0) / half)
    freqs = t.float()[..., None] * exponent.exp()
    return torch.cat([torch.sin(freqs), torch.cos(freqs)], dim=-1)


class MLP(nn.Module):
    """Linear-ReLU-Linear (`layer1`, `layer2`)."""

    def __init__(self, d_in: int, hidden: int, d_out: int) -> None:
        super().__init__()
        self.layer1 = nn.Linear(d_in, hidden)
        self.layer2 = nn.Linear(hidden, d_out)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return linear(F.relu(linear(x, self.layer1)), self.layer2)


class ActionEncoder(nn.Module):
    """PI_v3's: W3(swish(W2([W1 a, sinusoid(t)]))) with keys `layer1..3`."""

    def __init__(self, action_dim: int, width: int) -> None:
        super().__init__()
        self.width = width
        self.layer1 = nn.Linear(action_dim, width)
        self.layer2 = nn.Linear(2 * width, width)
        self.layer3 = nn.Linear(width, width)

    def forward(self, actions: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
        """`actions [B, H, A]`, integer time buckets `t [B]`."""
        a = linear(actions, self.layer1)
        tau = time_sinusoid(t[:, None].expand(-1, actions.shape[1]), self.width).to(a.dtype)
        return linear(F.silu(linear(torch.cat([a, tau], -1), self.layer2)), self.layer3)


class CategorySpecificLinear(nn.Module):
    """One linear per embodiment: `W [E, in, out]`, `b [E, out]`."""

    def __init__(self, categories: int, d_in: int, d_out: int) -> None:
        super().__init__()
        self.W = nn.Parameter(torch.zeros(categories, d_in, d_out))
        self.b = nn.Parameter(torch.zeros(categories, d_out))

    def forward(self, x: torch.Tensor, ids: torch.Tensor) -> torch.Tensor:
        """`x [B, T, in]`, `ids [B]`."""
        return torch.bmm(x, self.W[ids].to(x.dtype)) + self.b[ids].to(x.dtype)[:, None]


class CategorySpecificMLP(nn.Module):
    def __init__(self, categories: int, d_in: int, hidden: int, d_out: int) -> None:
        super().__init__()
        self.layer1 = CategorySpecificLinear(categories, d_in, hidden)
        self.layer2 = CategorySpecificLinear(categories, hidden, d_out)

    def forward(self, x: torch.Tensor, ids: torch.Tensor) -> torch.Tensor:
        return self.layer2(F.relu(self.layer1(x, ids)), ids)


class MultiEmbodimentActionEncoder(nn.Module):
    """GR00T N1.5's: W3(swish(W2([W1 a, sinusoid(t)]))) per embodiment (keys `W1..3`)."""

    def __init__(self, action_dim: int, width: int, categories: int) -> None:
        super().__init__()
        self.width = width
        self.W1 = CategorySpecificLinear(categories, action_dim, width)
        self.W2 = CategorySpecificLinear(categories, 2 * width, width)
        self.W3 = CategorySpecificLinear(categories, width, width)

    def forward(self, actions: torch.Tensor, t: torch.Tensor, ids: torch.Tensor) -> torch.Tensor:
        a = self.W1(actions, ids)
        tau = time_sinusoid(t[:, None].expand(-1, actions.shape[1]), self.width).to(a.dtype)
        return self.W3(F.silu(self.W2(torch.cat([a, tau], -1), ids)), ids)


class MLPResNetBlock(nn.Module):
    def __init__(self, width: int) -> None:
        super().__init__()
        self.ffn = nn.Sequential(nn.LayerNorm(width), nn.Linear(width, width), nn.ReLU())

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + F.relu(linear(self.ffn[0](x), self.ffn[1]))


class MLPResNet(nn.Module):
    """OFT's regressor: LayerNorm-Linear-ReLU, pre-LN residual blocks, LayerNorm-Linear (keys as StarVLA's)."""

    def __init__(self, num_blocks: int, d_in: int, hidden: int, d_out: int) -> None:
        super().__init__()
        self.layer_norm1 = nn.LayerNorm(d_in)
        self.fc1 = nn.Linear(d_in, hidden)
        self.mlp_resnet_blocks = nn.ModuleList(MLPResNetBlock(hidden) for _ in range(num_blocks))
        self.layer_norm2 = nn.LayerNorm(hidden)
        self.fc2 = nn.Linear(hidden, d_out)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = F.relu(linear(self.layer_norm1(x), self.fc1))
        for block in self.mlp_resnet_blocks:
            x = block(x)
        return linear(self.layer_norm2(x), self.fc2)
