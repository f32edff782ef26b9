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


def _admit(pool: SlotPool, table: RequestTable, r: Request, length: int) -> None:
    """What the scheduler does on admission: persist, write the prefix KV into the slot, record its length."""
    table.persist(r)
    pool.cache.k[:, r.slot, :, :length] = float(r.request_id)
    pool.cache.v[:, r.slot, :, :length] = -float(r.request_id)
    pool.lengths[r.slot] = r.length = length


def _decode_step(pool: SlotPool, table: RequestTable) -> list[Request]:
    """One decode step through the real table: fetch the batch, write each request's KV at its cache index (what the
    model's decode step does), update (which must record the new lengths in the pool), evict the finished."""
    batch = table.fetch("cpu")
    for r, pos in zip(batch.requests, batch.cache_index.tolist()):
        pool.cache.k[:, r.slot, :, pos] = float(r.request_id)
        pool.cache.v[:, r.slot, :, pos] = -float(r.request_id)
    table.update(batch, [5] * batch.size)  # never EOS: requests end on their budget
    for r in batch.requests:
        assert r.done or pool.lengths[r.slot] == r.length, "the table did not write the request's length to the pool"
    return table.evict_finished()


ops = st.lists(
    st.tuples(st.sampled_from(["admit", "decode", "finish"]), st.integers(0, 1000), st.integers(1, CAP // 2)), max_size=80
)


@settings(max_examples=150, deadline=None, derandomize=True)
@given(num_slots=st.integers(1, 8), operations=ops)
def test_contiguous_no_leak_kv_follows_request(num_slots, operations):
    pool = _pool(num_slots)
    table = RequestTable(pool)
    live: dict[int, Request] = {}
    next_id = 0
    for op, pick, length in operations:
        if op == "admit" and pool.can_allocate():
            r = Request(next_id, "t", 0, [5], max_new_tokens=1 + pick % (CAP // 2), eos_id=1)
            next_id += 1
            _admit(pool, table, r, length)
            live[r.request_id] = r
        elif op == "decode" and live:
            for r in _decode_step(pool, table):
                assert r.done and live.pop(r.request_id) is r
        elif op == "finish" and live:
            rid = sorted(live)[pick % len(live)]
            table.evict(live.pop(rid))
        pool.check_invariants()
        assert pool.active == len(live) == len(table)
        assert sorted(r.slot for r in live.values()) == list(range(pool.active))
        for r in live.values():
            assert table.by_slot[r.slot] is r
            assert pool.owner[r.slot] == (r.session, r.request_id)
            assert pool.lengths[r.slot] == r.length
            assert torch.all(pool.cache.k[:, r.slot, :, : r.length] == r.request_id)
            assert torch.all(pool.cache.v[:, r.slot, :, : r.length] == -r.request_id)
    for r in list(live.values()):
        table.evict(r)
    assert pool.active == 0 and pool.free_slots == num_slots


def test_decoded_kv_moves_with_a_request_when_an_earlier_one_leaves():
    """Decode through the table, then evict slot 0: the last request moves into it with its decoded positions."""
    pool = _pool(3)
    table = RequestTable(pool)
    reqs = [Request(i, "t", 0, [5], max_new_tokens=8, eos_id=1) for i in range(3)]
    for r, length in zip(reqs, (4, 6, 3)):
        _admit(pool, table, r, length)
    for _ in range(3):
        assert _decode_step(pool, table) == []
    assert [pool.lengths[r.slot] for r in reqs] == [7, 9, 6]
    table.evict(reqs[0])
    moved = reqs[2]
    assert moved.slot == 0 and pool.lengths[0] == 6
    assert torch.all(pool.cache.k[:, 0, :, :6] == 2) and torch.all(pool.cache.v[:, 0, :, :6] == -2)


def test_allocate_past_capacity_is_refused():
    pool = _pool(2)
    pool.allocate(0)
    pool.allocate(1)
    assert not pool.can_allocate()
    with pytest.raises(RuntimeError, match="full"):
        pool.allocate(2)
    with pytest.raises(ValueError, match="not active"):
        pool.free(5)
