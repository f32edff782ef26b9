"""How many threads a process that runs the policy gets, and how they wait: a rule of the package, not of the user.

Why: torch's defaults (one OpenMP thread per core, threads that spin while waiting for work) are right for a machine
the policy has to itself and wrong everywhere else. Beside other work every small op's barrier waits for a thread the
OS descheduled: measured on a 2-core machine (docs/benchmarks.md, `oxygen-gym bench contention`), `act()` became
9-15x slower with torch's defaults beside two busy processes, while one thread lost under 2x. A simulator, its
renderer (Mesa llvmpipe starts one thread per core), other eval workers and a server's own clients are all "other work".

The rule (`choose`), for a process that owns `cores / processes` cores:
- at most 2 cores owned: 1 thread. Two threads gain ~15% alone (`tiny`: 94 vs 109 ms) and lose 2-3x beside one
  busy process, 20-50x beside a two-thread one (shared/design/cpu-notes.md): one is the safe default.
- more: every owned core but one when a simulator shares the process (its physics and renderer need a core), all
  owned cores otherwise.
- OpenMP waits passively (`OMP_WAIT_POLICY=PASSIVE`) whenever the process shares cores (several processes, a
  simulator, or fewer cores owned than the machine has), so idle threads sleep instead of spinning. It only takes
  effect before torch loads OpenMP: entry points call `prepare_environment` before importing torch; child processes
  get it through their environment. `applied` records whether it did.
- the renderer's threads (`LP_NUM_THREADS`, Mesa llvmpipe) are capped at the cores owned.
An explicit thread count (a `--threads` flag, or `OMP_NUM_THREADS` in the environment) always wins and is recorded as
such. Every entry point records the `Placement` it used in its results (`as_record`).
"""
from __future__ import annotations

import os
import sys
from dataclasses import asdict, dataclass

SMALL_SHARE = 2  # cores owned at or below which one thread is the rule (see the module docstring)
WAIT_ENV, RENDER_ENV, THREADS_ENV = "OMP_WAIT_POLICY", "LP_NUM_THREADS", "OMP_NUM_THREADS"


@dataclass(frozen=True)
class Placement:
    """What a process runs with, and why (recorded in results)."""

    cores: int  # cores this process may run on (its CPU affinity)
    processes: int  # policy processes sharing those cores
    simulator: bool  # a simulator (and its renderer) runs in this process
    threads: int  # torch intra-op threads
    wait_policy: str  # "PASSIVE" or "ACTIVE" (torch's default: spin, then sleep)
    renderer_threads: int  # Mesa llvmpipe threads (LP_NUM_THREADS)
    source: str  # "rule", "flag" (an explicit --threads) or "env" (OMP_NUM_THREADS was set)
    applied: bool = False  # the wait policy reached OpenMP (set before torch loaded it)

    def as_record(self) -> dict:
        return asdict(self)


def available_cores() -> int:
    """Cores this process may run on: its affinity mask (a container's or taskset's limit), not the machine's count."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not Linux
        return max(1, os.cpu_count() or 1)


def choose(
    cores: int, *, processes: int = 1, simulator: bool = False, threads: int | None = None, env: dict | None = None,
) -> Placement:
    """The placement for one of `processes` policy processes on `cores` cores (see the module docstring).
    `threads`: an explicit count (wins); `env`: the environment to read a user's OMP_NUM_THREADS from."""
    if cores < 1 or processes < 1:
        raise ValueError(f"cores and processes must be >= 1, got cores={cores}, processes={processes}")
    if threads is not None and threads < 1:
        raise ValueError(f"--threads must be >= 1, got {threads}")
    env = os.environ if env is None else env
    owned = max(1, cores // processes)
    shared = processes > 1 or simulator
    if threads is not None:
        count, source = threads, "flag"
    elif _positive_int(env.get(THREADS_ENV)) is not None:
        count, source = _positive_int(env.get(THREADS_ENV)), "env"
    elif owned <= SMALL_SHARE:
        count, source = 1, "rule"
    else:
        count, source = owned - 1 if simulator else owned, "rule"
    wait = "PASSIVE" if shared or owned < cores or count < owned else "ACTIVE"
    return Placement(cores=cores, processes=processes, simulator=simulator, threads=count, wait_policy=wait,
                     renderer_threads=owned, source=source)


def prepare_environment(placement: Placement, env: dict | None = None) -> dict:
    """Write the placement's OpenMP and renderer settings into `env` (default: this process's environment), keeping
    any the user set. Call it before torch is imported, or on a child process's environment."""
    env = os.environ if env is None else env
    if placement.wait_policy == "PASSIVE":
        env.setdefault(WAIT_ENV, "PASSIVE")
    env.setdefault(RENDER_ENV, str(placement.renderer_threads))
    return env


def apply(placement: Placement) -> Placement:
    """Set torch's threads in this process (and the environment, for what loads later). Returns the placement with
    `applied` saying whether the wait policy reached OpenMP (it cannot once torch has loaded it)."""
    applied = placement.wait_policy != "PASSIVE" or "torch" not in sys.modules or os.environ.get(WAIT_ENV) == "PASSIVE"
    prepare_environment(placement)
    import torch

    torch.set_num_threads(placement.threads)
    return Placement(**{**asdict(placement), "applied": applied})


def place(*, processes: int = 1, simulator: bool = False, threads: int | None = None) -> Placement:
    """`choose` for this process's own cores, then `apply`: what an entry point calls first."""
    return apply(choose(available_cores(), processes=processes, simulator=simulator, threads=threads))


def record_placement(placement: Placement, folder) -> None:
    """`placement.json` in a run's output folder: what the run's threads were and why."""
    import json
    from pathlib import Path

    (Path(folder) / "placement.json").write_text(json.dumps(placement.as_record(), indent=1) + "\n")


def _positive_int(text: str | None) -> int | None:
    try:
        value = int(text) if text is not None else None
    except ValueError:
        return None
    return value if value is not None and value >= 1 else None
