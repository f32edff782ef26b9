"""The KV slot pool: one preallocated KV tensor shared by every request of every frame.

Slots [0, active) hold live requests and are kept contiguous, so a batched decode step reads the view
`cache.rows(0, active)` with no stacking or splitting. Freeing a slot moves the last active slot into the hole.
One extra scratch row (index `num_slots`) serves prefills whose KV is not kept (an action path with no language
request to hand it to, or a full pool), so actions never wait for a slot. A pool shared by several robots has
`scratch_rows` of them (rows `num_slots .. num_slots + scratch_rows - 1`): one batched frame prefills and denoises
every robot's observation in that contiguous block.
"""
from __future__ import annotations

from collections.abc import Hashable

import torch

from ..core.kv_view import KVCache


class SlotPool:
    def __init__(
        self,
        num_slots: int,
        capacity: int,
        *,
        layers: int,
        kv_heads: int,
        head_dim: int,
        device: torch.device | str = "cpu",
        dtype: torch.dtype = torch.float32,
        scratch_rows: int = 1,
    ) -> None:
        if num_slots < 1:
            raise ValueError(f"num_slots must be >= 1, got {num_slots}")
        if capacity < 1:
            raise ValueError(f"capacity must be >= 1, got {capacity}")
        if scratch_rows < 1:
            raise ValueError(f"scratch_rows must be >= 1, got {scratch_rows}")
        self.num_slots = num_slots
        self.scratch_rows = scratch_rows
        rows = num_slots + scratch_rows
        self.cache = KVCache.empty(layers, rows, kv_heads, capacity, head_dim, device=device, dtype=dtype)
        self.active = 0
        self.lengths = [0] * rows  # valid cache positions per slot (for moves)
        self.owner: list[Hashable | None] = [None] * num_slots

    @property
    def capacity(self) -> int:
        return self.cache.capacity

    @property
    def scratch(self) -> int:
        return self.num_slots

    @property
    def free_slots(self) -> int:
        return self.num_slots - self.active

    def can_allocate(self, n: int = 1) -> bool:
        return self.active + n <= self.num_slots

    def allocate(self, owner: Hashable) -> int:
        """Take the next slot (always the end of the active range) for request `owner`."""
        if not self.can_allocate():
            raise RuntimeError("slot pool is full; callers must check can_allocate() and queue")
        slot = self.active
        self.active += 1
        self.owner[slot] = owner
        self.lengths[slot] = 0
        return slot

    def free(self, slot: int) -> tuple[Hashable, int] | None:
        """Release `slot`. If it was not the last active one, the last slot's KV moves into it.

        Returns `(moved_owner, new_slot)` when a move happened, so the owner's request can follow its KV.
        """
        if not 0 <= slot < self.active:
            raise ValueError(f"slot {slot} is not active (active range [0, {self.active}))")
        last = self.active - 1
        moved = None
        if slot != last:
            self.copy(last, slot, self.lengths[last])
            self.owner[slot] = self.owner[last]
            moved = (self.owner[slot], slot)
        self.owner[last] = None
        self.lengths[last] = 0
        self.active -= 1
        return moved

    def swap(self, a: int, b: int) -> None:
        """Exchange two active slots' KV and owners (a multi-robot decode step gathers its robots' requests at the
        front of the active range, so the step still reads one contiguous view)."""
        if a == b:
            return
        for s in (a, b):
            if not 0 <= s < self.active:
                raise ValueError(f"slot {s} is not active (active range [0, {self.active}))")
        la, lb = self.lengths[a], self.lengths[b]
        saved_k, saved_v = self.cache.k[:, a, :, :la].clone(), self.cache.v[:, a, :, :la].clone()
        self.copy(b, a, lb)
        self.cache.k[:, b, :, :la] = saved_k
        self.cache.v[:, b, :, :la] = saved_v
        self.lengths[b] = la
        self.owner[a], self.owner[b] = self.owner[b], self.owner[a]

    def copy(self, src: int, dst: int, length: int) -> None:
        """Copy the first `length` KV positions of slot `src` into slot `dst` (every layer, one op each)."""
        if length:
            self.cache.k[:, dst, :, :length] = self.cache.k[:, src, :, :length]
            self.cache.v[:, dst, :, :length] = self.cache.v[:, src, :, :length]
        self.lengths[dst] = length

    def view(self, start: int, stop: int) -> KVCache:
        return self.cache.rows(start, stop)

    def reset(self) -> None:
        self.active = 0
        self.lengths = [0] * (self.num_slots + self.scratch_rows)
        self.owner = [None] * self.num_slots

    def check_invariants(self) -> None:
        """Active slots are exactly [0, active), each owned once; free slots are unowned."""
        owners = self.owner[: self.active]
        if any(o is None for o in owners):
            raise AssertionError(f"hole in the active range: {owners}")
        if len(set(owners)) != len(owners):
            raise AssertionError(f"a request owns two slots: {owners}")
        if any(o is not None for o in self.owner[self.active :]):
            raise AssertionError("a free slot still has an owner")

    def nbytes(self) -> int:
        return self.cache.nbytes()


def default_num_slots(per_slot_bytes: int, device: torch.device | str, cap: int = 64) -> int:
    """Slots that fit a fair share of the device: 30% of free GPU memory, or 10% of RAM on CPU; at most `cap`."""
    device = torch.device(device)
    if device.type == "cuda":
        free, _ = torch.cuda.mem_get_info(device)
        budget = int(free * 0.3)
    else:
        import os

        budget = int(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") * 0.1)
    return max(1, min(cap, budget // max(per_slot_bytes, 1)))
