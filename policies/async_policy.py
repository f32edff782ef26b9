"""AsyncPolicy: a policy on the live clock. An inference thread computes the next chunk while the robot executes the
queue; `next_action(obs)` is called once per control step and returns the action to execute now (None: the queue is
dry and the robot holds, see LiveClock).

Time is counted in control steps. A call submitted with the observation of step s has its actions after
`steps_for(actions_ms, dt)` steps (live_latency.py). The chunk's index i is the action planned for step s + i, so:
- `execution="sync"` (blocking): a chunk is requested when its `replan` actions ran; the robot holds until the new one
  arrives and starts it at index 0 (what a synchronous client does: it waits, then plays the chunk from the start);
- `execution="async"`: a chunk is requested when the queue falls to `threshold` actions; the robot keeps executing the
  queue meanwhile, and the new chunk takes over at index e = the steps that actually elapsed (its first e actions
  were planned for steps already gone). Hand-over `switch` replaces the queue, `blend` averages the overlap
  (`blend_weight` on the new chunk, 0.7 as lerobot's async `weighted_average` in policy_server/robot_client), and
  `rtc` passes the queue as `prev_actions` and the expected delay as `inference_delay` to `act()`, then switches.
Every executed action is (chunk, index) with index = step - chunk's observation step, so none runs twice and none is
skipped except those whose step passed while their chunk was being computed (`executed` keeps the log).

Determinism: with a simulated latency (fixed, model) the step at which a chunk arrives depends only on the latency
source; the loop blocks on the thread when that step comes, so thread timing never enters the result. With
`measured` the loop is paced to the wall clock: step e after a submit waits until e * dt of wall time has passed or
the call returned, so a sim faster than real time sees the delay a real robot would (a slower one sees more).
"""
from __future__ import annotations

import inspect
import threading
import time
from collections import deque
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from .live_latency import CallWall, FixedLatency, MeasuredLatency, ModelLatency, parse_latency, steps_for

EXECUTIONS = ("sync", "async")
HANDOVERS = ("switch", "blend", "rtc")
RECENT_DELAYS = 5  # rtc with measured latency: d = the max delay of this many recent calls (cold start excluded)


@dataclass
class ChunkRecord:
    """One policy call as the robot saw it (steps are control steps since the episode began)."""

    index: int
    obs_step: int  # the step whose observation the call saw
    horizon: int = 0
    actions_ms: float | None = None  # until its actions were ready, on the clock's latency source
    busy_ms: float | None = None  # until the policy was free again
    clock_steps: int | None = None  # ceil(actions_ms / dt)
    handover_step: int | None = None  # the step at which the chunk took over the queue
    delay_steps: int | None = None  # handover_step - obs_step: the steps that actually passed
    start_index: int | None = None  # its first action executed (sync: 0; async: delay_steps)
    free_step: int | None = None  # the first step at which a new call could start
    held_steps: int = 0  # steps the robot held (queue dry) while this call was in flight
    prev_len: int = 0  # rtc: actions passed as prev_actions
    inference_delay: int | None = None  # rtc: the d passed to act()
    wall_actions_ms: float | None = None
    wall_total_ms: float | None = None
    tokens: int = 0  # language tokens the call decoded
    stage_ms: dict = field(default_factory=dict)  # the policy's own stage times for the call (last_frame)

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass(frozen=True)
class QueuedAction:
    action: np.ndarray
    chunk: int
    index: int
    blended: bool = False


class _Call:
    """A call in flight: filled by the inference thread, read by the control loop after the events."""

    def __init__(self, record: ChunkRecord, predicted_ms: float | None, rtc: bool):
        self.record, self.predicted_ms, self.rtc = record, predicted_ms, rtc
        self.ready, self.done = threading.Event(), threading.Event()
        self.t0 = time.perf_counter()
        self.actions: np.ndarray | None = None
        self.updates: list = []
        self.frame: dict | None = None
        self.error: BaseException | None = None
        self.wall_actions_ms: float | None = None
        self.wall_total_ms: float | None = None

    def elapsed_s(self) -> float:
        return time.perf_counter() - self.t0


def _accepts(fn: Any, name: str) -> bool:
    try:
        params = inspect.signature(fn).parameters
    except (TypeError, ValueError):
        return False
    return name in params or any(p.kind is p.VAR_KEYWORD for p in params.values())


class AsyncPolicy:
    """`AsyncPolicy(policy, control_dt=0.05, latency="fixed:100", execution="async", handover="rtc")`; then per
    control step `action = ap.next_action(obs)` (None: hold). `reset()` at an episode boundary, `close()` at the end.

    `replan`: sync executes this many actions of each chunk (default: all it returns). `threshold`: async requests a
    chunk when this many actions are left (default: horizon - replan, the sync cadence). `hide_decode`: pass
    `on_actions` to a policy that takes it, so the chunk is handed over before the frame's language decode."""

    def __init__(self, policy: Any, *, control_dt: float, latency: str | Any = "measured", execution: str = "async",
                 handover: str = "switch", replan: int | None = None, threshold: int | None = None,
                 blend_weight: float = 0.7, hide_decode: bool = True) -> None:
        if execution not in EXECUTIONS:
            raise ValueError(f"execution: {execution!r}; expected one of {', '.join(EXECUTIONS)}")
        if handover not in HANDOVERS:
            raise ValueError(f"handover: {handover!r}; expected one of {', '.join(HANDOVERS)}")
        if not isinstance(control_dt, (int, float)) or not control_dt > 0:
            raise ValueError(f"control_dt: {control_dt!r}; expected seconds per control step > 0")
        if not 0.0 <= float(blend_weight) <= 1.0:
            raise ValueError(f"blend_weight: {blend_weight!r}; expected the new chunk's weight in [0, 1]")
        if len(getattr(policy, "action_heads", ())) > 1:
            raise ValueError("AsyncPolicy executes one action head; build the policy with heads=[NAME]")
        self.policy = policy
        self.control_dt = float(control_dt)
        self.latency = parse_latency(latency) if isinstance(latency, str) else latency
        if not isinstance(self.latency, (FixedLatency, MeasuredLatency, ModelLatency)):
            raise ValueError(f"latency: {latency!r}; expected measured, fixed:MS, model:FILE or a latency source")
        self.execution, self.handover, self.blend_weight = execution, handover, float(blend_weight)
        horizon = getattr(policy, "horizon", None)
        self.replan = _positive("replan", replan if replan is not None else horizon)
        self.threshold = threshold if threshold is not None else (int(horizon) - self.replan if horizon else 0)
        if isinstance(self.threshold, bool) or not isinstance(self.threshold, int) or self.threshold < 0:
            raise ValueError(f"threshold: {threshold!r}; expected actions left in the queue (int >= 0)")
        self.decode_hidden = bool(hide_decode) and _accepts(policy.act, "on_actions")
        if handover == "rtc" and not (_accepts(policy.act, "prev_actions") and _accepts(policy.act, "inference_delay")):
            raise ValueError("handover='rtc' needs a policy whose act() takes prev_actions and inference_delay "
                             "(MultiTaskPolicy with RTC)")
        if handover == "rtc" and execution == "sync":
            raise ValueError("handover='rtc' is an async hand-over; use execution='async'")
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="oxygen-inference")
        self._call: _Call | None = None
        self.reset_state()

    # ---- episode state -----------------------------------------------------------------------------------------
    def reset_state(self) -> None:
        self.step = 0
        self._queue: deque[QueuedAction] = deque()
        self.records: list[ChunkRecord] = []  # every call of the episode, in submit order
        self.executed: list[tuple[int, int] | None] = []  # per step: (chunk, index) executed, None = held
        self.last_step: dict = {}
        self._finished: list[tuple[ChunkRecord, list]] = []

    def reset(self, seed: int | None = None) -> None:
        """Episode boundary: wait for a call in flight (a thread cannot be cancelled), drop the queue, reset the
        policy (with `seed` when given)."""
        self.drain()
        self.reset_state()
        if hasattr(self.policy, "reset"):
            self.policy.reset(seed=seed) if seed is not None else self.policy.reset()

    def close(self) -> None:
        self.drain()
        self._pool.shutdown(wait=True)

    def __enter__(self) -> AsyncPolicy:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def pop_finished(self) -> list[tuple[ChunkRecord, list]]:
        """Calls that finished since the last pop, each with its language updates."""
        out, self._finished = self._finished, []
        return out

    @property
    def in_flight(self) -> bool:
        return self._call is not None

    # ---- the control step ------------------------------------------------------------------------------------
    def next_action(self, obs: dict) -> np.ndarray | None:
        """The action for this control step (None: hold); submits a call with `obs` when a chunk is due."""
        self._poll()
        if self._call is None and self._wants_chunk():
            self._submit(obs)
            self._poll()
        item = self._queue.popleft() if self._queue else None
        if item is None and self._call is not None:
            self._call.record.held_steps += 1
        chunk = self.records[item.chunk] if item is not None else None
        self.last_step = {
            "step": self.step, "held": item is None, "chunk": item.chunk if item else None,
            "index": item.index if item else None, "blended": bool(item and item.blended),
            "delay_steps": chunk.delay_steps if chunk else None, "in_flight": self._call is not None,
        }
        self.executed.append((item.chunk, item.index) if item else None)
        self.step += 1
        return None if item is None else item.action

    def _wants_chunk(self) -> bool:
        return not self._queue if self.execution == "sync" else len(self._queue) <= self.threshold

    def _submit(self, obs: dict) -> None:
        rtc = self.handover == "rtc"
        prev = np.stack([q.action for q in self._queue]) if rtc and self._queue else None
        record = ChunkRecord(index=len(self.records), obs_step=self.step)
        kwargs: dict[str, Any] = {}
        if rtc:
            d = min(self._expected_delay(), len(prev)) if prev is not None else 0
            kwargs.update(prev_actions=prev, inference_delay=d)
            record.prev_len, record.inference_delay = (len(prev) if prev is not None else 0), d
        guided = prev is not None
        call = _Call(record, self.latency.predict_actions_ms(guided, self.decode_hidden), guided)
        if self.decode_hidden:
            kwargs["on_actions"] = lambda actions: self._on_actions(call, actions)
        self.records.append(record)
        self._call = call
        self._pool.submit(self._run, call, obs, kwargs)

    def _expected_delay(self) -> int:
        """rtc's d: exact when the latency source predicts the call, else the max of recent delays (the first call
        of the episode is a cold start and left out when others exist)."""
        ms = self.latency.predict_actions_ms(True, self.decode_hidden)
        if ms is not None:
            return steps_for(ms, self.control_dt)
        seen = [r.delay_steps for r in self.records if r.delay_steps is not None]
        seen = seen[1:] if len(seen) > 1 else seen
        return max(seen[-RECENT_DELAYS:], default=0)

    # ---- the inference thread --------------------------------------------------------------------------------
    def _on_actions(self, call: _Call, actions: Any) -> None:
        call.wall_actions_ms = call.elapsed_s() * 1e3
        call.actions = self._chunk(actions)
        call.ready.set()

    def _run(self, call: _Call, obs: dict, kwargs: dict) -> None:
        try:
            actions, updates = self.policy.act(obs, **kwargs)
            call.wall_total_ms = call.elapsed_s() * 1e3
            if call.actions is None:
                call.actions, call.wall_actions_ms = self._chunk(actions), call.wall_total_ms
            call.updates = list(updates or [])
            frame = getattr(self.policy, "last_frame", None)
            call.frame = dict(frame) if isinstance(frame, dict) else None
        except BaseException as e:  # noqa: BLE001 - raised again in the control loop
            call.error = e
        finally:
            call.ready.set()
            call.done.set()

    def _chunk(self, actions: Any) -> np.ndarray:
        if isinstance(actions, dict):
            raise ValueError("AsyncPolicy executes one action head; the policy returned several")
        a = np.array(actions, dtype=np.float32)
        if a.ndim != 2 or a.shape[0] < 1:
            raise ValueError(f"policy.act returned actions of shape {a.shape}; expected (horizon, action_dim)")
        if self.execution == "sync" and a.shape[0] < self.replan:
            raise ValueError(f"policy returned {a.shape[0]} actions but replan={self.replan}; lower replan")
        return a

    # ---- arrivals ----------------------------------------------------------------------------------------------
    def _poll(self) -> None:
        call = self._call
        if call is None:
            return
        e = self.step - call.record.obs_step
        if call.record.handover_step is None:
            if not self._actions_reached(call, e):
                return
            self._hand_over(call, e)
        if self._free_reached(call, e):
            self._finish(call)

    def _wait(self, call: _Call, event: threading.Event, timeout: float | None = None) -> bool:
        hit = event.wait(timeout)
        if hit and call.error is not None:
            self._call = None
            raise RuntimeError(f"policy.act failed in the inference thread: {call.error!r}") from call.error
        return hit

    def _timed(self, call: _Call) -> None:
        """A simulated source's times for a finished call."""
        if call.record.busy_ms is None:
            self._wait(call, call.done)
            t = self.latency.timing(CallWall(call.wall_actions_ms, call.wall_total_ms, call.frame), call.rtc,
                                    self.decode_hidden)
            call.record.actions_ms, call.record.busy_ms = t.actions_ms, t.busy_ms

    def _actions_reached(self, call: _Call, e: int) -> bool:
        if self.latency.simulated:
            ms = call.predicted_ms
            if ms is None:
                self._timed(call)
                ms = call.record.actions_ms
            if e < steps_for(ms, self.control_dt):
                return False
            call.record.actions_ms = ms
            return self._wait(call, call.ready)
        # measured: still thinking at step e unless it returned within e * dt of wall time (the loop waits up to
        # then; a loop running late hands over at the first step after ceil(latency / dt), never before)
        if not self._wait(call, call.ready, max(0.0, e * self.control_dt - call.elapsed_s())):
            return False
        call.record.actions_ms = call.wall_actions_ms
        return e >= steps_for(call.wall_actions_ms, self.control_dt)

    def _free_reached(self, call: _Call, e: int) -> bool:
        if self.latency.simulated:
            self._timed(call)
            return e >= steps_for(call.record.busy_ms, self.control_dt)
        if not self._wait(call, call.done, max(0.0, e * self.control_dt - call.elapsed_s())):
            return False
        call.record.busy_ms = call.wall_total_ms
        return e >= steps_for(call.wall_total_ms, self.control_dt)

    def _hand_over(self, call: _Call, e: int) -> None:
        rec, actions = call.record, call.actions
        rec.horizon, rec.handover_step, rec.delay_steps = int(actions.shape[0]), self.step, e
        rec.clock_steps = steps_for(rec.actions_ms, self.control_dt)
        if self.execution == "sync":
            rec.start_index = 0
            self._queue = deque(QueuedAction(actions[i], rec.index, i) for i in range(self.replan))
            return
        rec.start_index = e
        new = [QueuedAction(actions[i], rec.index, i) for i in range(e, len(actions))]
        if self.handover == "blend":
            old, w = list(self._queue), self.blend_weight
            overlap = min(len(old), len(new))
            new = [QueuedAction((w * n.action + (1.0 - w) * o.action).astype(np.float32), n.chunk, n.index, True)
                   for o, n in zip(old[:overlap], new[:overlap])] + new[overlap:]
        self._queue = deque(new)

    def _finish(self, call: _Call) -> None:
        rec = call.record
        rec.free_step = self.step
        rec.wall_actions_ms, rec.wall_total_ms = call.wall_actions_ms, call.wall_total_ms
        frame = call.frame or {}
        tokens = frame.get("tokens")
        rec.tokens = int(tokens if tokens is not None else sum(len(getattr(u, "new_token_ids", ())) for u in call.updates))
        rec.stage_ms = {k: float(v) for k, v in (frame.get("stage_ms") or {}).items()}
        self._finished.append((rec, call.updates))
        self._call = None

    def drain(self) -> None:
        """Wait for the call in flight and record it as finished where it stands (no hand-over)."""
        call = self._call
        if call is not None:
            call.done.wait()
            self._finish(call)


def _positive(name: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
        raise ValueError(f"{name}: {value!r}; expected a positive number of actions")
    return int(value)
