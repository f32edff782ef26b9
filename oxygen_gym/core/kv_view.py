"""The KV cache object a model reads and writes. Models never own one: the engine (slot pool) passes it in.
(oxygen_gym/engine/kv_cache.py re-exports it.)"""
from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass
class KVCache:
    """Keys and values of every layer for a set of rows (requests).

    `k`, `v`: `[layers, rows, kv_heads, capacity, head_dim]`. Row `b` of a model call is row `b` here, so a
    contiguous range of a slot pool is passed as a zero-copy view (`rows(a, b)`). A row's valid entries are its
    indices [0, length): padding is compacted away before prefill. Keys are stored after RoPE; a token's RoPE
    position is the model's business (equal to its index for 1D RoPE, not for M-RoPE).
    """

    k: torch.Tensor
    v: torch.Tensor

    @staticmethod
    def empty(
        layers: int, rows: int, kv_heads: int, capacity: int, head_dim: int, *, device=None, dtype=torch.float32
    ) -> "KVCache":
        shape = (layers, rows, kv_heads, capacity, head_dim)
        return KVCache(torch.zeros(shape, device=device, dtype=dtype), torch.zeros(shape, device=device, dtype=dtype))

    @property
    def num_rows(self) -> int:
        return self.k.shape[1]

    @property
    def capacity(self) -> int:
        return self.k.shape[3]

    def rows(self, start: int, stop: int) -> "KVCache":
        """A view of rows [start, stop): writes through it land in this cache."""
        return KVCache(self.k[:, start:stop], self.v[:, start:stop])

    def nbytes(self) -> int:
        return self.k.numel() * self.k.element_size() * 2
