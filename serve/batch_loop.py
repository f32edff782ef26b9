"""The serving loop over the batch scheduler (not an engine of its own): one thread owns the BatchScheduler; every
robot's frames queue here and run in batches.

A robot session is a `PolicySession` of the template policy (policies/policy_session.py) whose engine is a
`SessionEngine` (a `FrameEngine`, policies/frame_engine.py): its `act()` does everything a lone policy does (prompt,
per-frame noise, language requests, text deltas, stats; the server checked the observation once) and hands the frame
to this loop, which waits up to `window_s` after the first frame for the other connected robots' frames, then runs them
as one batched frame (engine/batch.py).
"""
from __future__ import annotations

import math
import threading
import time
from collections import deque
from concurrent.futures import Future
from dataclasses import dataclass, field

from oxygen_gym.engine.batch import BatchScheduler
from oxygen_gym.engine.frame import FrameInput, FrameResult
from oxygen_gym.engine.request import Request
from oxygen_gym.engine.stats import FrameLog


class EngineBusy(RuntimeError):
    """The engine queue is full (more outstanding frames than robots allowed)."""


class SessionClosed(RuntimeError):
    """The robot disconnected before its frame ran: the frame was dropped, never run."""


@dataclass
class _Job:
    kind: str  # "frame" | "drop"
    session: int
    frame: FrameInput | None = None
    k: int = 0
    done: Future = field(default_factory=Future)
    arrived: float = field(default_factory=time.perf_counter)


class EngineLoop:
    """Runs queued frames in batches of up to `max_batch` robots on its own thread.

    A batch closes as soon as every registered robot has a frame in it, or `window_s` after its first frame could have
    run (it arrived, and the engine was free): a frame never waits longer than the window for companions. Counting from
    when the engine frees up matters in closed loop: a robot whose frame missed a batch would otherwise run alone right
    after it, while the others wait for it, and the robots would stay out of step for good. `max_batch=1` serves robots
    one at a time (FIFO).

    Only active robots are waited for: one whose last frame finished less than `active_s` ago. A connected robot that
    went silent (or never sent a frame) does not hold every other robot's frame for the whole window. A robot that
    leaves has its queued frames dropped before they run (`SessionClosed`), and never blocks a batch.
    """

    def __init__(
        self, scheduler: BatchScheduler, *, max_batch: int, window_s: float, max_queue: int, active_s: float = 5.0
    ) -> None:
        if not 1 <= max_batch <= scheduler.max_batch:
            raise ValueError(f"max_batch must be in [1, {scheduler.max_batch}] (the pool's scratch rows), got {max_batch}")
        if window_s < 0:
            raise ValueError(f"window_s must be >= 0, got {window_s}")
        self.scheduler = scheduler
        self.max_batch = max_batch
        self.window_s = window_s
        self.max_queue = max_queue
        self.active_s = active_s
        self.batches = FrameLog()  # one record per batched frame
        self.robot_frames = 0  # frames served, all robots (batches.frames counts batches)
        self.frames_dropped = 0  # frames of robots that left before their frame ran
        self._jobs: deque[_Job] = deque()
        self._sessions: set[int] = set()
        self._last_done: dict[int, float] = {}  # session -> when its last frame finished
        self._cv = threading.Condition()
        self._stopping = False
        self._free_since = time.perf_counter()  # when the engine finished its last batch
        self._thread = threading.Thread(target=self._run, name="oxygen-serve-engine", daemon=True)
        self._thread.start()

    # ------------------------------------------------------------------ called from connection threads
    def register(self, session: int) -> None:
        with self._cv:
            self._sessions.add(session)

    def unregister(self, session: int) -> Future:
        """The robot left: its queued frames are dropped unrun, it no longer holds batches open, and its requests and
        slots are freed."""
        with self._cv:
            self._sessions.discard(session)
            self._last_done.pop(session, None)
            for job in [j for j in self._jobs if j.kind == "frame" and j.session == session]:
                self._jobs.remove(job)
                self._drop_frame(job)
        return self.drop(session)

    def _drop_frame(self, job: _Job) -> None:
        self.frames_dropped += 1
        job.done.set_exception(SessionClosed(f"session {job.session} left before its frame ran"))

    def submit(self, session: int, frame: FrameInput, k: int) -> Future:
        return self._put(_Job("frame", session, frame, k))

    def drop(self, session: int) -> Future:
        """Free every request of `session` (a reset or a disconnect), in order with its frames."""
        return self._put(_Job("drop", session), force=True)

    def _put(self, job: _Job, force: bool = False) -> Future:
        with self._cv:
            if self._stopping:
                raise RuntimeError("the engine is stopped")
            # frames only: a storm of connections closing queues one forced "drop" job each, and those must not make
            # a connected robot's frame look like an overload
            if not force and sum(j.kind == "frame" for j in self._jobs) >= self.max_queue:
                raise EngineBusy(f"engine queue full ({self.max_queue} outstanding frames)")
            self._jobs.append(job)
            self._cv.notify()
        return job.done

    def snapshot(self) -> dict:
        """Pool and table occupancy (read on the engine thread, between batches)."""
        fut: Future = Future()
        with self._cv:
            self._jobs.appendleft(_Job("snapshot", -1, done=fut))
            self._cv.notify()
        return fut.result(timeout=30)

    def stop(self) -> None:
        with self._cv:
            self._stopping = True
            self._cv.notify()
        self._thread.join(timeout=30)

    # ------------------------------------------------------------------ the engine thread
    def _run(self) -> None:
        while True:
            with self._cv:
                while not self._jobs and not self._stopping:
                    self._cv.wait()
                if self._stopping:
                    for job in self._jobs:
                        job.done.set_exception(RuntimeError("the engine stopped"))
                    self._jobs.clear()
                    return
                job = self._jobs[0]
                if job.kind != "frame":
                    self._jobs.popleft()
                else:
                    batch = self._collect()
            if job.kind == "drop":
                self._settle(job, self.scheduler.drop_session, job.session)
            elif job.kind == "snapshot":
                self._settle(job, self._occupancy)
            else:
                self._run_batch(batch)
                self._free_since = time.perf_counter()

    def _collect(self) -> list[_Job]:
        """Called with the lock held and a frame first in the queue: that frame plus companions (one per robot)."""
        deadline = max(self._jobs[0].arrived, self._free_since) + self.window_s
        batch: list[_Job] = []
        while True:
            taken = {j.session for j in batch}
            for j in list(self._jobs):
                if len(batch) >= self.max_batch:
                    break
                if j.kind != "frame":
                    break  # a drop or reset keeps its place: frames behind it wait for the next batch
                if j.session not in taken:
                    batch.append(j)
                    taken.add(j.session)
                    self._jobs.remove(j)
            now = time.perf_counter()
            active = {s for s in self._sessions if now - self._last_done.get(s, -math.inf) < self.active_s}
            missing = active - taken
            wait = deadline - now
            if len(batch) >= self.max_batch or not missing or wait <= 0 or self._stopping:
                return batch
            if self._jobs and self._jobs[0].kind != "frame":
                return batch
            self._cv.wait(wait)

    def _run_batch(self, batch: list[_Job]) -> None:
        ok = []
        with self._cv:
            live = [j for j in batch if j.session in self._sessions]
            for job in batch:
                if job.session not in self._sessions:  # left while the batch was collected
                    self._drop_frame(job)
        for job in live:
            try:
                self.scheduler.check_frame(job.frame)
                ok.append(job)
            except Exception as e:  # noqa: BLE001 - reported to that robot only
                job.done.set_exception(e)
        if not ok:
            return
        try:
            results = self.scheduler.run_batch([j.frame for j in ok], [j.k for j in ok])
        except Exception as e:  # noqa: BLE001 - a bug: every robot of the batch gets the error, the server goes on
            for job in ok:
                job.done.set_exception(e)
            return
        stats = results[0].stats
        self.batches.append(
            {
                "frame_ms": stats.frame_ms,
                "stage_ms": dict(stats.stage_ms),
                "tokens": sum(r.stats.tokens for r in results),
                "batch_sizes": list(stats.batch_sizes),
                "robots": len(ok),
                "queue_ms": 1e3 * (time.perf_counter() - min(j.arrived for j in ok)) - stats.frame_ms,
            }
        )
        self.robot_frames += len(ok)
        done = time.perf_counter()
        with self._cv:
            for job in ok:
                if job.session in self._sessions:
                    self._last_done[job.session] = done
        for job, res in zip(ok, results):
            job.done.set_result(res)

    @staticmethod
    def _settle(job: _Job, fn, *args) -> None:
        try:
            job.done.set_result(fn(*args))
        except Exception as e:  # noqa: BLE001
            job.done.set_exception(e)

    def _occupancy(self) -> dict:
        s = self.scheduler
        return {
            "pool_active": s.pool.active,
            "num_slots": s.pool.num_slots,
            "requests_in_flight": len(s.table),
            "requests_queued": len(s.waiting),
            "sessions_with_requests": sorted({r.session for r in s.in_flight()}),
        }


class SessionEngine:
    """A session policy's engine: `run` hands the frame to the shared loop and blocks until its batch ran."""

    mode = "oxygen"

    def __init__(self, loop: EngineLoop, session: int, timeout_s: float = 600.0) -> None:
        self.loop = loop
        self.session = session
        self.timeout_s = timeout_s
        self._live: list[Request] = []  # this robot's requests not yet done (the policy's budget reads them)
        self.total_queued = 0

    def run(self, frame: FrameInput, k: int, on_actions=None) -> FrameResult:
        """`on_actions`: called when the batch ran (a session's actions and language come back together)."""
        frame.session = self.session
        for r in frame.new_requests:
            r.session = self.session
        result = self.loop.submit(self.session, frame, k).result(timeout=self.timeout_s)
        self._live = [r for r in self._live + frame.new_requests if not r.done]
        if on_actions is not None:
            on_actions(result.head_actions)
        return result

    def in_flight(self) -> list[Request]:
        return [r for r in self._live if not r.done]

    def reset(self) -> None:
        self.loop.drop(self.session).result(timeout=self.timeout_s)
        self._live.clear()

    def close(self) -> None:
        """The loop outlives sessions; a disconnect goes through `EngineLoop.unregister`."""


def session_policy(template, engine: SessionEngine):
    """A robot session: the template `MultiTaskPolicy`'s `session` (a `PolicySession`) over the shared engine."""
    return template.session(engine)
