"""Multimodal RoPE (M-RoPE): three position axes (time, height, width) and the rotary angles they give.

Text tokens advance all three axes together; an image's tokens share one start and spread over (t, h, w) of the
merged patch grid, so a prompt's next position is its largest position + 1, which is less than its token count.
Positions follow transformers' `Qwen3VLModel.get_rope_index`, the frequency layout its
`Qwen3VLTextRotaryEmbedding.apply_interleaved_mrope` (transformers/models/qwen3_vl/modeling_qwen3_vl.py).
"""
from __future__ import annotations

import torch


def rope_inv_freq(head_dim: int, theta: float, device=None) -> torch.Tensor:
    """The `head_dim / 2` default rotary frequencies (fp32)."""
    exponent = torch.arange(0, head_dim, 2, device=device, dtype=torch.int64).float() / head_dim
    return 1.0 / (theta**exponent)


def frequency_axes(section: tuple[int, int, int], interleaved: bool = True, device=None) -> torch.Tensor:
    """Which position axis (0 t, 1 h, 2 w) drives each of the `sum(section)` frequencies.

    Interleaved (Qwen3-VL): frequency j follows h if j % 3 == 1 and j < 3 * section[1], w if j % 3 == 2 and
    j < 3 * section[2], else t. Chunked (Qwen2-VL): the first section[0] follow t, the next section[1] h, the rest w.
    """
    j = torch.arange(sum(section), device=device)
    if not interleaved:
        return (j >= section[0]).long() + (j >= section[0] + section[1]).long()
    h = (j % 3 == 1) & (j < 3 * section[1])
    w = (j % 3 == 2) & (j < 3 * section[2])
    return h.long() + 2 * w.long()


def mrope_cos_sin(positions: torch.Tensor, inv_freq: torch.Tensor, axes: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """cos, sin `[B, T, head_dim/2]` (fp32) for M-RoPE positions `[3, B, T]`, given the frequencies and the axis
    each follows (`rope_inv_freq`, `frequency_axes`). Split-half layout, as `layers.apply_rope` applies it
    (transformers' rotate_half over `cat(freqs, freqs)` is the same rotation). No host reads: graph-safe."""
    pos = positions.float()[axes]  # [head_dim/2, B, T]: each frequency's own axis
    angles = pos.permute(1, 2, 0) * inv_freq
    return angles.cos(), angles.sin()


def text_positions(start: torch.Tensor, steps: int) -> torch.Tensor:
    """`[3, B, steps]` positions of text continuing at `start [B]`: all three axes equal."""
    pos = start[:, None] + torch.arange(steps, device=start.device)[None]
    return pos[None].expand(3, -1, -1)


def _image_block(grid: list[int], merge: int) -> torch.Tensor:
    """`[3, t*h*w/merge^2]` (t, h, w) offsets of one image's merged tokens, in the vision tower's output order."""
    t, h, w = grid[0], grid[1] // merge, grid[2] // merge
    tt = torch.arange(t).view(t, 1, 1).expand(t, h, w)
    hh = torch.arange(h).view(1, h, 1).expand(t, h, w)
    ww = torch.arange(w).view(1, 1, w).expand(t, h, w)
    return torch.stack([tt, hh, ww]).reshape(3, -1)


def mrope_positions(
    input_ids: torch.Tensor, lengths: torch.Tensor, image_grid_thw: torch.Tensor | None, image_token_id: int, merge: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """M-RoPE positions `[3, B, L]` of right-padded prompts and each row's next position `[B]` (max + 1).

    Row b's valid tokens are `input_ids[b, :lengths[b]]`; each run of image tokens takes the next grid of
    `image_grid_thw` (rows in order, images in order within a row). Padding gets position 0. Host-side: a prefill
    knows its prompts, so this is not part of any captured graph.
    """
    b, length = input_ids.shape
    ids = input_ids.tolist()
    lens = [int(n) for n in lengths.tolist()]
    grids = [] if image_grid_thw is None else [[int(v) for v in g] for g in image_grid_thw.tolist()]
    out = torch.zeros(3, b, length, dtype=torch.int64)
    nxt = torch.zeros(b, dtype=torch.int64)
    g = 0
    for row in range(b):
        i, p, n = 0, 0, lens[row]
        while i < n:
            if ids[row][i] != image_token_id:
                out[:, row, i] = p
                i, p = i + 1, p + 1
                continue
            if g >= len(grids):
                raise ValueError(f"input_ids row {row} has more image token runs than image_grid_thw has images ({len(grids)})")
            block = _image_block(grids[g], merge)
            count = block.shape[1]
            if i + count > n or any(tok != image_token_id for tok in ids[row][i : i + count]):
                raise ValueError(
                    f"input_ids row {row}: image {g} (image_grid_thw {grids[g]}) needs {count} consecutive image tokens "
                    f"(id {image_token_id}) at index {i}"
                )
            out[:, row, i : i + count] = block + p
            p += int(block.max()) + 1
            i, g = i + count, g + 1
        nxt[row] = p
    if g != len(grids):
        raise ValueError(f"image_grid_thw has {len(grids)} images but input_ids hold {g} image token runs")
    return out.to(input_ids.device), nxt.to(input_ids.device)
