"""The CPU engine keeps its activations in the heap: glibc's thresholds are raised once, each setting on its own,
with glibc's own maximum where a larger mmap threshold is rejected (before, a rejected mmap threshold left the trim
threshold at its default too, and only the benchmark tuned the heap at all)."""
import pytest

from oxygen_gym.engine import cpu_allocator
from oxygen_gym.engine.scheduler import FrameScheduler
from oxygen_gym.engine.slots import SlotPool
from oxygen_gym.model import build_model


@pytest.fixture
def fake_glibc(monkeypatch):
    """A glibc that rejects mmap thresholds above 32 MiB; records every accepted setting."""
    accepted: list[tuple[int, int]] = []

    def mallopt(param, value):
        if param == cpu_allocator.M_MMAP_THRESHOLD and value > cpu_allocator.GLIBC_MMAP_THRESHOLD_MAX:
            return False
        accepted.append((param, value))
        return True

    monkeypatch.setattr(cpu_allocator, "mallopt", mallopt)
    monkeypatch.setattr(cpu_allocator, "_tuned", None)
    monkeypatch.delenv("MALLOC_MMAP_THRESHOLD_", raising=False)
    monkeypatch.delenv("MALLOC_TRIM_THRESHOLD_", raising=False)
    return accepted


def test_a_rejected_mmap_threshold_falls_back_and_the_trim_threshold_is_still_set(fake_glibc, monkeypatch):
    assert cpu_allocator.tune_allocator(256 << 20, 1 << 30) is True
    assert fake_glibc == [(cpu_allocator.M_MMAP_THRESHOLD, 32 << 20), (cpu_allocator.M_TRIM_THRESHOLD, 1 << 30)]
    import os

    assert os.environ["MALLOC_MMAP_THRESHOLD_"] == str(32 << 20)  # what worker processes inherit
    assert cpu_allocator.tune_allocator() is True and len(fake_glibc) == 2  # once per process


def test_a_cpu_scheduler_tunes_the_heap(fake_glibc):
    model = build_model("tiny", seed=0)
    kv = model.kv_layout
    FrameScheduler(model, SlotPool(2, 64, layers=kv.layers, kv_heads=kv.kv_heads, head_dim=kv.head_dim), "oxygen")
    assert (cpu_allocator.M_TRIM_THRESHOLD, 1 << 30) in fake_glibc
