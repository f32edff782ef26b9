"""Slot pool and request table invariants: active slots stay contiguous, no slot is leaked or double-owned,
and a request's KV follows it when compaction moves it."""
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from oxygen_gym.engine.request import Request, RequestTable
from oxygen_gym.engine.slots import SlotPool

LAYERS, CAP = 2, 16


def _pool(n: int) -> SlotPool:
    return SlotPool(n, CAP, layers=LAYERS, kv_heads=1, head_dim=4)


def _write_marker(pool: SlotPool, r: Request, length: int) -> None:
    pool.cache.k[:, r.slot, :, :length] = float(r.request_id)
    pool.cache.v[:, r.slot, :, :length] = -float(r.request_id)
    pool.lengths[r.slot] = length
    r.length = length


ops = st.lists(st.tuples(st.sampled_from(["admit", "finish"]), st.integers(0, 1000), st.integers(1, CAP)), max_size=80)


@settings(max_examples=150, deadline=None)
@given(num_slots=st.integers(1, 8), operations=ops)
def test_contiguous_no_leak_kv_follows_request(num_slots, operations):
    pool = _pool(num_slots)
    table = RequestTable(pool)
    live: dict[int, Request] = {}
    next_id = 0
    for op, pick, length in operations:
        if op == "admit" and pool.can_allocate():
            r = Request(next_id, "t", 0, [5], max_new_tokens=4, eos_id=1)
            next_id += 1
            table.persist(r)
            _write_marker(pool, r, length)
            live[r.request_id] = r
        elif op == "finish" and live:
            rid = sorted(live)[pick % len(live)]
            table.evict(live.pop(rid))
        pool.check_invariants()
        assert pool.active == len(live) == len(table)
        assert sorted(r.slot for r in live.values()) == list(range(pool.active))
        for r in live.values():
            assert table.by_slot[r.slot] is r
            assert pool.owner[r.slot] == r.request_id
            assert torch.all(pool.cache.k[:, r.slot, :, : r.length] == r.request_id)
            assert torch.all(pool.cache.v[:, r.slot, :, : r.length] == -r.request_id)
    for r in list(live.values()):
        table.evict(r)
    assert pool.active == 0 and pool.free_slots == num_slots


def test_allocate_past_capacity_is_refused():
    pool = _pool(2)
    pool.allocate(0)
    pool.allocate(1)
    assert not pool.can_allocate()
    with pytest.raises(RuntimeError, match="full"):
        pool.allocate(2)
    with pytest.raises(ValueError, match="not active"):
        pool.free(5)
