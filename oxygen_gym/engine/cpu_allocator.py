"""Keep a CPU engine's freed activation buffers in the heap (glibc; process-wide, once per process).

Why: every frame allocates and frees the same activation blocks (a `small` prefill: ~16 MB per layer in 4 MB
blocks). With glibc's default thresholds such blocks are unmapped or trimmed off the heap when freed, so every
prefill page-faults them in again: measured on `small` (2-core Xeon), ~70k minor faults (275 MB) per 659-token
prefill and the prefill 20-40% slower, depending on what the process allocated before (so one benchmark point can
fault while the others do not). Raising the mmap and trim thresholds lets the heap reuse the blocks. The scheduler
calls this for CPU models, so policies, servers and benchmarks all run on a tuned heap; it is a no-op elsewhere.
Trade-off: freed memory up to the trim threshold stays in the process (resident memory sits at its high-water mark).
"""
from __future__ import annotations

import ctypes
import ctypes.util
import os

# glibc mallopt parameters (malloc.h)
M_TRIM_THRESHOLD = -1
M_MMAP_THRESHOLD = -3
# glibc rejects an M_MMAP_THRESHOLD above HEAP_MAX_SIZE / 2 (32 MiB on 64-bit) unless its heap size is tuned larger
GLIBC_MMAP_THRESHOLD_MAX = 32 << 20

_tuned: bool | None = None  # this process's result (the settings are process-wide: applied once)


def mallopt(param: int, value: int) -> bool:
    """glibc's mallopt; False where there is no glibc or it rejects the value."""
    name = ctypes.util.find_library("c")
    if not name:
        return False
    try:
        return ctypes.CDLL(name).mallopt(param, int(value)) == 1
    except (OSError, AttributeError):
        return False


def tune_allocator(mmap_threshold: int = 256 << 20, trim_threshold: int = 1 << 30) -> bool:
    """Raise glibc's mmap and trim thresholds, each on its own: where the mmap threshold asked for is rejected, the
    glibc maximum (32 MiB, still above the engine's blocks) is used, and the trim threshold is set regardless. Child
    processes started afterwards (the `parallel` baseline's workers) inherit the same through glibc's environment
    variables. Returns whether both settings took effect (cached: later calls change nothing)."""
    global _tuned
    if _tuned is not None:
        return _tuned
    applied = int(mmap_threshold)
    mmap_ok = mallopt(M_MMAP_THRESHOLD, applied)
    if not mmap_ok and applied > GLIBC_MMAP_THRESHOLD_MAX:
        applied = GLIBC_MMAP_THRESHOLD_MAX
        mmap_ok = mallopt(M_MMAP_THRESHOLD, applied)
    trim_ok = mallopt(M_TRIM_THRESHOLD, trim_threshold)
    os.environ.setdefault("MALLOC_MMAP_THRESHOLD_", str(applied))
    os.environ.setdefault("MALLOC_TRIM_THRESHOLD_", str(int(trim_threshold)))
    _tuned = bool(mmap_ok and trim_ok)
    return _tuned
