"""One frame path for 1..N robots: a lone frame is a batch of one through the code the server batches with, and it
keeps what a lone frame had before the paths were one: the prefill goes straight into the first new request's own
slot when one is free (its prefix KV is never copied), whichever entry runs it (`FrameScheduler.run`,
`BatchScheduler.run_batch`). Several robots' frames go to contiguous scratch rows (one batch to denoise)."""
import numpy as np
import pytest
import torch

from engine_workloads import random_prefix
from oxygen_gym.engine.batch import BatchScheduler
from oxygen_gym.engine.frame import FrameInput
from oxygen_gym.engine.request import Request
from oxygen_gym.engine.scheduler import FrameScheduler
from oxygen_gym.engine.slots import SlotPool
from oxygen_gym.model.pi05.init import build_model


@pytest.fixture(scope="module")
def tiny():
    return build_model("tiny", seed=3)


def _pool(model, slots: int, scratch_rows: int = 1) -> SlotPool:
    kv = model.kv_layout
    return SlotPool(slots, 700, layers=kv.layers, kv_heads=kv.kv_heads, head_dim=kv.head_dim, scratch_rows=scratch_rows)


def _copies(pool: SlotPool, monkeypatch) -> list[tuple[int, int]]:
    """Every (src, dst) KV copy the pool makes from now on."""
    seen = []
    real = pool.copy

    def copy(src, dst, length):
        seen.append((src, dst))
        real(src, dst, length)

    monkeypatch.setattr(pool, "copy", copy)
    return seen


def _frame(f: int, session: int, n_requests: int, first_id: int = 0) -> FrameInput:
    rng = np.random.default_rng(10 * session + f)
    reqs = [Request(first_id + i, f"t{i}", f, [5 + i, 9], max_new_tokens=4, eos_id=-1, session=session)
            for i in range(n_requests)]
    noise = torch.from_numpy(rng.standard_normal((1, 10, 32)).astype(np.float32))
    return FrameInput(f, random_prefix(rng), noise, reqs, session=session)


@pytest.mark.parametrize("batched", [False, True], ids=["FrameScheduler.run", "run_batch of one"])
def test_a_lone_frame_prefills_into_its_first_request_slot(tiny, monkeypatch, batched):
    pool = _pool(tiny, slots=4, scratch_rows=2)
    sched = BatchScheduler(tiny, pool) if batched else FrameScheduler(tiny, pool, "oxygen")
    copies = _copies(pool, monkeypatch)
    frame = _frame(0, 0, 2)
    res = sched.run_batch([frame], 2)[0] if batched else sched.run(frame, 2)
    first, second = frame.new_requests
    # the first request's slot holds the prefill itself; only the second request gets a copy, from that slot
    assert copies == [(first.slot, second.slot)] and pool.scratch not in (first.slot, second.slot)
    assert [len(t) for _, t in res.advanced] == [2, 2]


def test_several_robots_prefill_into_scratch_rows_and_each_request_gets_a_copy(tiny, monkeypatch):
    pool = _pool(tiny, slots=4, scratch_rows=2)
    sched = BatchScheduler(tiny, pool)
    copies = _copies(pool, monkeypatch)
    frames = [_frame(0, 0, 1), _frame(0, 1, 1)]
    sched.run_batch(frames, 2)
    assert copies == [(pool.scratch, frames[0].new_requests[0].slot), (pool.scratch + 1, frames[1].new_requests[0].slot)]

