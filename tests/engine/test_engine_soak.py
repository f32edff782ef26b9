"""The paper's D.3 soak: a fluctuating load (arrival counts repeating every 17 frames, request lengths every 7,
up to 40 active requests) must reach a periodic steady state: pool usage and memory return to the same level
every cycle (lcm(17, 7) = 119 frames) and nothing grows."""
import gc

import numpy as np
import pytest
import torch

from engine_workloads import random_prefix
from oxygen_gym.engine.frame import FrameInput
from oxygen_gym.engine.request import Request
from oxygen_gym.engine.scheduler import FrameScheduler
from oxygen_gym.engine.slots import SlotPool
from oxygen_gym.model.pi05.init import build_model

ARRIVALS = [0, 1, 3, 4, 2, 1, 0, 0, 2, 5, 3, 1, 0, 4, 2, 1, 3]  # repeats every 17 frames
LENGTHS = [10, 40, 60, 25, 90, 15, 50]  # repeats every 7 frames
CYCLE = 17 * 7


def _rss_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * 4096


def run_soak(frames: int):
    model = build_model("tiny", seed=2)
    c = model.config
    pool = SlotPool(40, 700, layers=c.vlm.depth, kv_heads=1, head_dim=c.vlm.head_dim)
    sched = FrameScheduler(model, pool, "oxygen")
    prefix = random_prefix(np.random.default_rng(0))
    noise = torch.randn(1, 10, 32, generator=torch.Generator().manual_seed(0))
    rid = 0
    at_cycle_start = []
    peak_active = 0
    for f in range(frames):
        n = LENGTHS[f % 7]
        reqs = [Request(rid + i, "narrate", f, [11, 12, 13], max_new_tokens=n, eos_id=-1) for i in range(ARRIVALS[f % 17])]
        rid += len(reqs)
        sched.run(FrameInput(f, prefix, noise, reqs), 2)
        pool.check_invariants()
        peak_active = max(peak_active, pool.active)
        if f % CYCLE == CYCLE - 1:
            gc.collect()
            at_cycle_start.append((pool.active, len(sched.waiting), sched.total_queued, _rss_bytes()))
    return at_cycle_start, peak_active, pool


def _check(levels, peak_active, pool):
    assert peak_active == pool.num_slots == 40  # the load really fills the pool
    steady = levels[1:]
    assert len({(a, w) for a, w, _, _ in steady}) == 1, f"pool usage drifts between cycles: {steady}"
    queued_per_cycle = np.diff([q for _, _, q, _ in steady])
    assert len(set(queued_per_cycle.tolist())) <= 1
    rss = [r for *_, r in steady]
    assert max(rss) - min(rss) < 32 * 2**20, f"memory grows across cycles: {[r >> 20 for r in rss]} MiB"


def test_soak_reaches_periodic_steady_state():
    _check(*run_soak(3 * CYCLE + 1))


@pytest.mark.slow
def test_soak_3000_frames():
    levels, peak, pool = run_soak(3000)
    assert len(levels) == 3000 // CYCLE
    _check(levels, peak, pool)
