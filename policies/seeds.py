"""The seeds of a policy's random draws: each head's starting noise per frame, each language request's sampling.

Why a rule by name and number: a head's noise must not change when other heads are added or dropped, and every mode,
every session and the server must draw the same noise for the same (seed, frame), so their actions compare exactly.
"""
from __future__ import annotations

import zlib

import numpy as np


def seed_for(*parts: int) -> int:
    """A 63-bit seed from integers (numpy's SeedSequence: nearby inputs give unrelated seeds)."""
    # Python int arithmetic: numpy 1.x promotes `uint64 >> int` to float64 and raises (numpy 2 keeps uint64)
    return int(np.random.SeedSequence([int(p) for p in parts]).generate_state(1, dtype=np.uint64)[0]) >> 1


def head_noise_seed(seed: int, frame: int, head: str) -> int:
    """The seed of `head`'s noise at `frame`: by name, not by place, so a head's actions do not change when other
    heads are added or dropped, and every mode draws the same noise."""
    return seed_for(seed, frame, zlib.crc32(head.encode()))


def request_seed(seed: int, request_id: int) -> int:
    """The sampling seed of language request `request_id` of a session seeded `seed`."""
    return seed_for(seed, request_id, 1)
