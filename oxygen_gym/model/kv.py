"""The KV cache object the model reads and writes. The model never owns one: callers pass it in."""
from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass
class KVCache:
    """Keys and values of every layer for a set of rows (requests).

    `k`, `v`: `[layers, rows, kv_heads, capacity, head_dim]`. Row `b` of a model call is row `b` here, so a
    contiguous range of a slot pool is passed as a zero-copy view (`rows(a, b)`). Keys are stored after RoPE,
    position `p` of a sequence at index `p` (padding is compacted away before prefill).
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
