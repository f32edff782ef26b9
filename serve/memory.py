"""Giving freed message memory back to the OS: glibc keeps it otherwise.

A server decodes messages of up to --max-message-mb, and container bombs expand into millions of small Python objects;
all of it is freed after the reply, but glibc's malloc keeps the freed pages in its arenas (one per thread that
allocated) instead of returning them, so the server's RSS stays at its worst moment's size (measured: docs/serve.md,
Memory). `malloc_trim(0)` returns those pages. It walks every arena under its lock, so it is called at most once per
`min_interval_s`, only after a message of at least `min_bytes`, and off the event loop (`Trimmer.run`). On a libc
without `malloc_trim` (musl, macOS) everything here does nothing.
"""
from __future__ import annotations

import asyncio
import ctypes
import ctypes.util
import time

_libc = None


def _malloc_trim():
    global _libc
    if _libc is None:
        try:
            _libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        except OSError:
            _libc = False
    fn = getattr(_libc, "malloc_trim", None) if _libc else None
    if fn is not None:
        fn.argtypes, fn.restype = [ctypes.c_size_t], ctypes.c_int
    return fn


def trim() -> bool | None:
    """Return the allocator's free memory to the OS now. True if some was returned, None without malloc_trim."""
    fn = _malloc_trim()
    return None if fn is None else bool(fn(0))


class Trimmer:
    """Trims after large messages, at most once per `min_interval_s`: `note(len(message))` once each message has been
    handled (its reply sent, so what it decoded into is freed; cheap, on the event loop), and `run()` as a task for the
    server's life (the trim itself runs in a worker thread)."""

    def __init__(self, min_bytes: int = 2**20, min_interval_s: float = 10.0) -> None:
        if min_bytes < 0 or min_interval_s <= 0:
            raise ValueError(f"Trimmer: min_bytes must be >= 0 and min_interval_s > 0, got {min_bytes}, {min_interval_s}")
        self.min_bytes, self.min_interval_s = min_bytes, min_interval_s
        self.pending = False
        self.last = float("-inf")  # time.monotonic() of the last trim
        self.trims = 0
        self.trim_ms_max = 0.0
        self.available = _malloc_trim() is not None

    def note(self, nbytes: int) -> None:
        """A message of `nbytes` has been handled: a trim is due if it was large. Call it after the reply, not on
        receipt: a trim that ran while the message was still being decoded would not free it, and clears the flag."""
        if nbytes >= self.min_bytes:
            self.pending = True

    def due(self, now: float | None = None) -> bool:
        now = time.monotonic() if now is None else now
        return self.available and self.pending and now - self.last >= self.min_interval_s

    def trim_now(self) -> float:
        """Trim (whatever `due` says); returns the milliseconds it took."""
        self.pending, t0 = False, time.perf_counter()
        trim()
        self.last = time.monotonic()
        ms = 1e3 * (time.perf_counter() - t0)
        self.trims += 1
        self.trim_ms_max = max(self.trim_ms_max, ms)
        return ms

    async def run(self, check_every_s: float = 1.0) -> None:
        """Trim whenever one is due (a large message came since the last trim, and min_interval_s has passed); for the
        server's life (cancel the task to stop). Trims that come due while messages still arrive free what earlier
        messages left; the one after the last large message frees the rest."""
        if not self.available:
            return
        loop = asyncio.get_running_loop()
        while True:
            await asyncio.sleep(check_every_s)
            if self.due():
                await loop.run_in_executor(None, self.trim_now)
