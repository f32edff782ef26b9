"""The execution modes: one table, read by the policy, the scheduler, eval, bench and the CLIs.

Per frame (the paper's terms; docs/api.md's Modes table):
isolated     the baseline: a prefill per action head and per language request; each request decodes to completion
parallel     isolated, with the action path and the language path in two worker processes on the same device
shared       one prefill serves every action head and the frame's requests, which decode to completion
oxygen       one prefill; new requests join the in-flight batch; the batch decodes k steps; finished ones leave
upper_bound  like oxygen, but each request decodes only k tokens and is dropped (the benchmarks' bound, not a policy)
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Mode:
    name: str
    summary: str
    runs_in: str  # "scheduler" (FrameScheduler, in process) | "workers" (ParallelExecutor)
    for_users: bool  # a policy or an evaluation may run in it (upper_bound is a benchmark's bound only)
    decodes_k: bool  # a request advances k tokens per frame (else it decodes to completion within its frame)


MODE_TABLE: dict[str, Mode] = {  # baseline first, then what each step adds
    m.name: m
    for m in (
        Mode("isolated", "a prefill per action head and per language request (the baseline)", "scheduler", True, False),
        Mode("parallel", "isolated, action and language paths in two worker processes", "workers", True, False),
        Mode("shared", "one prefill for actions and language; language decodes to completion", "scheduler", True, False),
        Mode("oxygen", "one prefill, cross-frame batched decoding of k tokens per request per frame", "scheduler", True, True),
        Mode("upper_bound", "oxygen with each request cut to k tokens (the benchmarks' bound)", "scheduler", False, True),
    )
}

ALL_MODES: tuple[str, ...] = tuple(MODE_TABLE)
USER_MODES: tuple[str, ...] = tuple(n for n, m in MODE_TABLE.items() if m.for_users)
SCHEDULER_MODES: tuple[str, ...] = tuple(n for n, m in MODE_TABLE.items() if m.runs_in == "scheduler")
K_MODES: tuple[str, ...] = tuple(n for n, m in MODE_TABLE.items() if m.decodes_k)


def check_mode(mode: str, allowed: tuple[str, ...] = ALL_MODES, field: str = "mode") -> str:
    if mode not in allowed:
        raise ValueError(f"{field}: unknown mode {mode!r}; expected one of {allowed}")
    return mode
