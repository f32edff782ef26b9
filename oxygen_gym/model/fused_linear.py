"""Linears that read the same input as one matmul (a layer's q/k/v projections).

Why: on a CPU the action expert's layers are small (50 rows, width 128), so each call's fixed cost (dispatch, a GEMM's
setup, the views after it) is a large share of a denoise step; one matmul over the concatenated weights does the
same arithmetic with one call. Each output element is the same dot product, up to the GEMM kernel's summation order
(bit for bit at pi0.5's shapes, measured; not promised at every shape).

The concatenated weight is built on first use and cached per owning module, keyed by every source tensor's version
and storage, so loading, casting or editing the originals in place rebuilds it instead of leaving a stale copy.
The joined weight is a second copy of the q/k/v weights (not in the engine's held-memory figure), so only CPU
calls fuse: there the per-call overhead it removes was measured; on a GPU the copy would be memory for no measured gain.
Calls that must see the separate layers keep them: LoRA targets (lora_bank.py routes per-row updates through each
layer), small-row calls on the oneDNN decode path (cpu_kernels.py: the row count alone picks a call's kernel), and
autograd through trainable weights (training, adapter training).
"""
from __future__ import annotations

import weakref
from collections.abc import Sequence

import torch
import torch.nn.functional as F
from torch import nn

from .cpu_kernels import MIN_ROWS, max_rows_of
from .layers import linear

_FUSED: "weakref.WeakKeyDictionary[nn.Module, tuple[tuple, torch.Tensor, torch.Tensor | None]]" = weakref.WeakKeyDictionary()


def fused_linear(x: torch.Tensor, owner: nn.Module, layers: Sequence[nn.Linear]) -> torch.Tensor:
    """`torch.cat([linear(x, l) for l in layers], -1)`, computed as one matmul where nothing needs the layers apart.
    `owner`: the module the cached concatenated weight belongs to (one fused group per owner)."""
    if not _can_fuse(x, layers):
        return torch.cat([linear(x, layer) for layer in layers], dim=-1)
    weight, bias = _fused(owner, layers)
    return F.linear(x.to(weight.dtype), weight, bias)


def _can_fuse(x: torch.Tensor, layers: Sequence[nn.Linear]) -> bool:
    first = layers[0].weight
    if first.device.type != "cpu":  # the gain is a CPU call's fixed cost; elsewhere the joined copy is only memory
        return False
    rows = x.numel() // x.shape[-1] if x.numel() else 0
    grad = torch.is_grad_enabled()
    has_bias = layers[0].bias is not None
    for layer in layers:
        w = layer.weight
        if "lora_target" in layer.__dict__ or (layer.bias is not None) != has_bias:
            return False
        if w.dtype != first.dtype or w.device != first.device or (grad and w.requires_grad):
            return False
        limit = max_rows_of(layer)
        if limit and x.dtype == w.dtype and MIN_ROWS <= rows <= limit:  # the packed oneDNN path takes this call
            return False
    return True


def _fused(owner: nn.Module, layers: Sequence[nn.Linear]) -> tuple[torch.Tensor, torch.Tensor | None]:
    sources = [layer.weight for layer in layers] + [layer.bias for layer in layers if layer.bias is not None]
    key = tuple((t._version, t.data_ptr()) for t in sources)
    hit = _FUSED.get(owner)
    if hit is None or hit[0] != key:
        # Built outside inference mode: the guided RTC denoise differentiates through these matmuls (in x only).
        with torch.inference_mode(False), torch.no_grad():
            weight = torch.cat([layer.weight.detach() for layer in layers], dim=0)
            bias = torch.cat([layer.bias.detach() for layer in layers]) if layers[0].bias is not None else None
        _FUSED[owner] = hit = (key, weight, bias)
    return hit[1], hit[2]
