"""CPU kernel path for batched decoding: the backbone's linears at 2-64 rows through oneDNN with prepacked weights.

Why: on an AVX2 CPU without AMX, MKL's fp32 GEMM at a few rows costs several times its 1-row cost (measured on a 2-core EPYC,
3.7x at 6 rows for pi0.5-sized layers), so batched decoding would be far from free. oneDNN with the weight reordered
once into its blocked layout (`mkldnn._reorder_linear_weight`, then `mkldnn._linear_pointwise`) streams the weights
once per call at any small row count. Measured on the `small` model (2-core EPYC, docs/benchmarks.md), the choice is
per call shape: one row (isolated decoding) is fastest on MKL's GEMV; 2-64 rows (a decode batch) on packed oneDNN;
hundreds of rows (prefill) are compute-bound and MKL is faster; the action expert's small, cache-resident matrices
at 10 rows (denoise) are faster on MKL too, so only the backbone (`vlm.`) is marked.

Off by default. `enable(model)` marks the backbone's linears; `layers.linear()` then routes inputs of
`min_rows..max_rows` rows through the packed weight. The row count alone picks the path, so every execution mode runs a
given call on the same kernel and greedy tokens stay identical across modes. The mark is a plain attribute (it pickles, so
the `parallel` baseline's worker processes inherit it); the packed weights live in a process-local cache and are
built lazily in each process on first use, and rebuilt if the weight changes in place.
"""
from __future__ import annotations

import weakref

import torch
import torch.nn.functional as F
from torch import nn

PATHS = ("eager", "onednn")
# Decode batches of MIN_ROWS..DEFAULT_MAX_ROWS rows use the packed weight; one row and prefill sizes keep F.linear.
MIN_ROWS = 2
DEFAULT_MAX_ROWS = 64
SCOPE = ("vlm.",)  # the backbone: the only stack that decodes
_MARK = "_onednn_max_rows"
_PACKED: "weakref.WeakKeyDictionary[nn.Linear, tuple[int, int, torch.Tensor]]" = weakref.WeakKeyDictionary()


def available() -> bool:
    """oneDNN is built into this torch and can reorder weights."""
    return bool(torch.backends.mkldnn.is_available()) and hasattr(torch.ops.mkldnn, "_reorder_linear_weight")


def enable(model: nn.Module, max_rows: int = DEFAULT_MAX_ROWS, scope: tuple[str, ...] = SCOPE) -> int:
    """Route the small-row calls of the fp32 CPU linears under `scope` (module-name prefixes) through oneDNN.
    Returns how many were marked."""
    if not available():
        raise RuntimeError("cpu kernel path 'onednn' needs a torch build with oneDNN (torch.backends.mkldnn)")
    if max_rows < 1:
        raise ValueError(f"max_rows must be >= 1, got {max_rows}")
    marked = 0
    for name, mod in model.named_modules():
        if isinstance(mod, nn.Linear) and name.startswith(scope):
            w = mod.weight
            if w.device.type == "cpu" and w.dtype == torch.float32:
                setattr(mod, _MARK, int(max_rows))
                marked += 1
    return marked


def disable(model: nn.Module) -> None:
    for mod in model.modules():
        if isinstance(mod, nn.Linear):
            mod.__dict__.pop(_MARK, None)
            _PACKED.pop(mod, None)


def path_of(model: nn.Module) -> str:
    """`onednn` when `enable` marked this model, else `eager`."""
    return "onednn" if any(_MARK in m.__dict__ for m in model.modules()) else "eager"


def max_rows_of(layer: nn.Linear) -> int:
    """The row limit `enable` set on this linear (0 = not enabled): layers.linear() reads it on every call."""
    return layer.__dict__.get(_MARK, 0)


def packed_linear(x: torch.Tensor, layer: nn.Linear) -> torch.Tensor:
    """`F.linear(x, layer.weight, layer.bias)` through the prepacked weight (rows within the layer's limit)."""
    w = layer.weight
    rows = x.numel() // x.shape[-1] if x.numel() else 0
    if x.dtype != w.dtype or not MIN_ROWS <= rows <= layer.__dict__[_MARK]:
        return F.linear(x.to(w.dtype), w, layer.bias)
    return torch.ops.mkldnn._linear_pointwise(x, _packed(layer), layer.bias, "none", [None], "")


def _packed(layer: nn.Linear) -> torch.Tensor:
    w = layer.weight
    key = (w._version, w.data_ptr())
    hit = _PACKED.get(layer)
    if hit is None or hit[:2] != key:
        with torch.inference_mode(False), torch.no_grad():
            packed = torch.ops.mkldnn._reorder_linear_weight(w.detach(), None)
        _PACKED[layer] = hit = (*key, packed)
    return hit[2]


def prepack(model: nn.Module) -> None:
    """Build every marked layer's packed weight now (instead of on the first call)."""
    for mod in model.modules():
        if isinstance(mod, nn.Linear) and _MARK in mod.__dict__:
            _packed(mod)


def packed_bytes(model: nn.Module) -> int:
    """Bytes held by this process's packed copies of `model`'s weights (they sit beside the originals)."""
    return sum(
        _PACKED[m][2].numel() * _PACKED[m][2].element_size() for m in model.modules() if isinstance(m, nn.Linear) and m in _PACKED
    )


def set_path(model: nn.Module, path: str, max_rows: int = DEFAULT_MAX_ROWS) -> str:
    """Select a kernel path by name (`eager` | `onednn` | `auto`: onednn for fp32 CPU models when available)."""
    if path not in (*PATHS, "auto"):
        raise ValueError(f"kernel path must be one of {(*PATHS, 'auto')}, got {path!r}")
    auto = path == "auto"
    if auto:
        first = next(model.parameters())
        path = "onednn" if available() and first.device.type == "cpu" and first.dtype == torch.float32 else "eager"
    if path == "onednn" and auto and not any(n.startswith(SCOPE) for n, _ in model.named_modules()):
        path = "eager"  # a model whose backbone is not under `vlm.` routes no linear through the packed path
    if path == "onednn":
        if enable(model, max_rows) == 0:
            raise ValueError("kernel path 'onednn' applies to fp32 CPU models; this model has no fp32 CPU linears")
        prepack(model)
    else:
        disable(model)
    return path
