"""The Qwen3-VL vision tower: patches -> ViT blocks with 2D rotary -> 2x2 merged image tokens, plus the DeepStack
features (merged tokens of intermediate blocks) that the text decoder adds to its first layers.

Module and parameter names follow transformers' `Qwen3VLVisionModel` (modeling_qwen3_vl.py) so its state dict
(`model.visual.*`) loads directly; the math is written here.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from ..layers import apply_rope, linear
from .qwen_config import VisionDims

def gelu_tanh(x: torch.Tensor) -> torch.Tensor:
    return F.gelu(x, approximate="tanh")


def quick_gelu(x: torch.Tensor) -> torch.Tensor:
    return x * torch.sigmoid(1.702 * x)


# Module-level functions, not lambdas: a model is pickled into the `parallel` mode's worker processes.
_ACTIVATIONS = {
    "gelu_pytorch_tanh": gelu_tanh,
    "gelu_new": gelu_tanh,
    "gelu": F.gelu,
    "silu": F.silu,
    "quick_gelu": quick_gelu,
}


def activation(name: str):
    if name not in _ACTIVATIONS:
        raise ValueError(f"hidden_act={name!r} not supported (known: {sorted(_ACTIVATIONS)})")
    return _ACTIVATIONS[name]


class PatchEmbed(nn.Module):
    """A Conv3d whose kernel equals its stride: one matmul over each flattened (C, tp, p, p) patch row."""

    def __init__(self, d: VisionDims) -> None:
        super().__init__()
        k = (d.temporal_patch_size, d.patch_size, d.patch_size)
        self.proj = nn.Conv3d(d.in_channels, d.width, kernel_size=k, stride=k, bias=True)

    def forward(self, pixels: torch.Tensor) -> torch.Tensor:
        w = self.proj.weight
        return F.linear(pixels.to(w.dtype), w.reshape(w.shape[0], -1), self.proj.bias)


class VisionMLP(nn.Module):
    def __init__(self, d: VisionDims) -> None:
        super().__init__()
        self.linear_fc1 = nn.Linear(d.width, d.mlp_dim, bias=True)
        self.linear_fc2 = nn.Linear(d.mlp_dim, d.width, bias=True)
        self.act = activation(d.act)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return linear(self.act(linear(x, self.linear_fc1)), self.linear_fc2)


class VisionAttention(nn.Module):
    def __init__(self, d: VisionDims) -> None:
        super().__init__()
        self.d = d
        self.qkv = nn.Linear(d.width, 3 * d.width, bias=True)
        self.proj = nn.Linear(d.width, d.width, bias=True)

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, spans: list[int]) -> torch.Tensor:
        """Bidirectional attention within each frame (`spans`: patch counts, in order) over `x [N, width]`."""
        n = x.shape[0]
        q, k, v = linear(x, self.qkv).view(n, 3, self.d.num_heads, self.d.head_dim).permute(1, 2, 0, 3).unbind(0)
        q, k = apply_rope(q[None], cos, sin)[0], apply_rope(k[None], cos, sin)[0]  # [heads, N, hd]
        outs = [
            F.scaled_dot_product_attention(qs.float(), ks.float(), vs.float()).to(x.dtype)
            for qs, ks, vs in zip(q.split(spans, 1), k.split(spans, 1), v.split(spans, 1))
        ]
        return linear(torch.cat(outs, 1).transpose(0, 1).reshape(n, -1), self.proj)


class VisionBlock(nn.Module):
    def __init__(self, d: VisionDims) -> None:
        super().__init__()
        self.norm1 = nn.LayerNorm(d.width, eps=1e-6)
        self.norm2 = nn.LayerNorm(d.width, eps=1e-6)
        self.attn = VisionAttention(d)
        self.mlp = VisionMLP(d)

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, spans: list[int]) -> torch.Tensor:
        x = x + self.attn(self.norm1(x), cos, sin, spans)
        return x + self.mlp(self.norm2(x))


class PatchMerger(nn.Module):
    """Concatenate each 2x2 block of neighbouring patches (consecutive rows) and project to the text width.
    `postshuffle`: the LayerNorm runs over the concatenation (DeepStack mergers), else per patch (final merger)."""

    def __init__(self, d: VisionDims, postshuffle: bool) -> None:
        super().__init__()
        self.postshuffle = postshuffle
        self.merged = d.width * d.merge_size**2
        self.norm = nn.LayerNorm(self.merged if postshuffle else d.width, eps=1e-6)
        self.linear_fc1 = nn.Linear(self.merged, self.merged)
        self.linear_fc2 = nn.Linear(self.merged, d.out_width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.norm(x.reshape(-1, self.merged)) if self.postshuffle else self.norm(x).reshape(-1, self.merged)
        return linear(F.gelu(linear(x, self.linear_fc1)), self.linear_fc2)


def merge_block_order(t: int, h: int, w: int, m: int) -> torch.Tensor:
    """Row-major patch (row, col) of each patch in the processor's order: frames, then m x m blocks row-major,
    then the patches of a block row-major (Qwen2VLImageProcessor flattens pixels this way). `[t*h*w, 2]`."""
    rows = torch.arange(h).view(h // m, 1, m, 1).expand(h // m, w // m, m, m)
    cols = torch.arange(w).view(1, w // m, 1, m).expand(h // m, w // m, m, m)
    rc = torch.stack([rows.reshape(-1), cols.reshape(-1)], -1)
    return rc.repeat(t, 1)


class Qwen3VLVisionTower(nn.Module):
    """`forward(pixel_values [N, patch_dim], image_grid_thw [n_img, 3])` -> (merged tokens `[N/m^2, out_width]`,
    DeepStack features: one `[N/m^2, out_width]` per index of `deepstack_indexes`)."""

    def __init__(self, d: VisionDims) -> None:
        super().__init__()
        self.d = d
        self.patch_embed = PatchEmbed(d)
        self.pos_embed = nn.Embedding(d.num_position_embeddings, d.width)
        self.blocks = nn.ModuleList(VisionBlock(d) for _ in range(d.depth))
        self.merger = PatchMerger(d, postshuffle=False)
        self.deepstack_merger_list = nn.ModuleList(PatchMerger(d, postshuffle=True) for _ in d.deepstack_indexes)

    def interpolated_pos_embed(self, t: int, h: int, w: int) -> torch.Tensor:
        """The square table resampled bilinearly (align-corners: the grid's corners land on the table's) to h x w,
        in the processor's patch order. transformers' `fast_pos_embed_interpolate` computes the same four-tap sum."""
        s = self.d.grid_side
        table = self.pos_embed.weight.view(s, s, -1)
        dev = table.device
        ys, xs = torch.linspace(0, s - 1, h, device=dev), torch.linspace(0, s - 1, w, device=dev)
        y0, x0 = ys.floor().long(), xs.floor().long()
        y1, x1 = (y0 + 1).clamp(max=s - 1), (x0 + 1).clamp(max=s - 1)
        dy = (ys - y0).to(table)[:, None, None]
        dx = (xs - x0).to(table)[None, :, None]
        grid = (table[y0][:, x0] * (1 - dx) + table[y0][:, x1] * dx) * (1 - dy)
        grid = grid + (table[y1][:, x0] * (1 - dx) + table[y1][:, x1] * dx) * dy  # [h, w, width]
        rc = merge_block_order(t, h, w, self.d.merge_size).to(dev)
        return grid[rc[:, 0], rc[:, 1]]

    def rotary(self, grids: list[list[int]], device) -> tuple[torch.Tensor, torch.Tensor]:
        """2D rotary: the first half of each head's frequencies turn with the patch row, the second with its column."""
        dim = self.d.head_dim // 2
        inv_freq = 1.0 / (10000.0 ** (torch.arange(0, dim, 2, dtype=torch.float, device=device) / dim))
        rc = torch.cat([merge_block_order(t, h, w, self.d.merge_size) for t, h, w in grids]).to(device)
        angles = torch.cat([rc[:, :1] * inv_freq, rc[:, 1:] * inv_freq], -1)[None]  # [1, N, head_dim/2]
        return angles.cos(), angles.sin()

    def forward(self, pixel_values: torch.Tensor, image_grid_thw: torch.Tensor) -> tuple[torch.Tensor, list[torch.Tensor]]:
        grids = [[int(v) for v in g] for g in image_grid_thw.tolist()]
        x = self.patch_embed(pixel_values)
        x = x + torch.cat([self.interpolated_pos_embed(t, h, w) for t, h, w in grids]).to(x)
        cos, sin = self.rotary(grids, x.device)
        spans = [h * w for t, h, w in grids for _ in range(t)]  # attention stays within one frame
        deepstack = []
        for i, block in enumerate(self.blocks):
            x = block(x, cos, sin, spans)
            if i in self.d.deepstack_indexes:
                deepstack.append(self.deepstack_merger_list[self.d.deepstack_indexes.index(i)](x))
        return self.merger(x), deepstack
