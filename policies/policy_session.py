"""One robot's stream of `act()` calls over a shared `Policy` (policies/policy.py).

Why apart: what is shared (weights, model, engine, KV slot pool, tokenizer, normalisers, tasks) is built once and
read by every robot; what is one robot's (its frame counter, noise and sampling seed, in-flight language requests and
their text, decode budget state, stats, last frame) lives here. A `MultiTaskPolicy` is a `Policy` with one session of
its own; the server gives each connected robot a session over its batching loop (serve/batch_loop.py).
"""
from __future__ import annotations

import copy
import time
from collections.abc import Callable
from typing import Any

import numpy as np
import torch

from oxygen_gym.engine.frame import FrameInput
from oxygen_gym.engine.request import Request
from oxygen_gym.engine.stats import DEFAULT_WINDOW, FrameLog
from oxygen_gym.engine.timing import peak_memory_bytes, peak_rss_bytes

from .frame_engine import FrameEngine
from .language import LanguageTask, LanguageUpdate, TextStream
from .numeric_range import NonFiniteActionsError, check_finite_actions
from .seeds import request_seed

# what a session reads of its shared policy: the rest of the policy (its own engine and pool) is not the session's
SHARED = frozenset({
    "model", "tokenizer", "robot", "tasks", "mode", "horizon", "chunk", "replan_steps", "declared_tasks",
    "image_resize", "rtc", "action_heads", "action_head", "head_chunks", "noise_scale", "num_steps", "state_norm",
    "action_norm", "io", "camera_slots", "adapters", "merged_adapters", "conventions", "config", "model_inputs",
    "_task_prompt_ids", "_guidance", "_head_dims", "pool_args", "slot_bytes", "model_bytes",
})


class PolicySession:
    """`act(obs) -> (actions, updates)` for one robot, on `engine` (a `FrameEngine`), over the shared `policy`.

    Reads of the shared policy's members (`robot`, `action_heads`, `horizon`, `tasks`, `model`, ...; `SHARED`) go
    through to it; they are read-only here."""

    def __init__(self, policy: Any, engine: FrameEngine | None, *, seed: int, budget: Any,
                 window: int = DEFAULT_WINDOW, pool_bytes: int = 0) -> None:
        """`engine` None: the policy's own engine (built at first use)."""
        self.policy = policy
        self._engine = engine
        self.seed = int(seed)
        self.budget = budget  # the decode budget's state (an auto budget learns per session)
        self._pool_bytes = pool_bytes  # the KV pool this session owns (none: a server session shares the server's)
        self._next_request_id = 0
        self._streams: dict[int, TextStream] = {}
        self._started_at: dict[int, float] = {}
        self._records = FrameLog(window)  # running totals + the last frames only: memory stays flat on long runs
        self.frame = 0
        self.last_frame: dict | None = None
        self._closed = False

    def __getattr__(self, name: str) -> Any:
        if name in SHARED:
            return getattr(self.__dict__["policy"], name)
        raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")

    @property
    def engine(self) -> FrameEngine:
        """What runs this session's frames."""
        return self.policy.engine if self._engine is None else self._engine

    # ------------------------------------------------------------------ the loop
    def frame_noise(self, frame: int) -> dict[str, torch.Tensor]:
        """Each head's noise for `frame` from this session's seed (`Policy.frame_noise`)."""
        return self.policy.frame_noise(frame, seed=self.seed)

    def act(
        self,
        obs: Any,
        *,
        prev_actions: np.ndarray | dict[str, np.ndarray] | None = None,
        inference_delay: int = 0,
        on_actions: Callable[[np.ndarray | dict[str, np.ndarray]], None] | None = None,
    ) -> tuple[np.ndarray | dict[str, np.ndarray], list[LanguageUpdate]]:
        """One frame: `MultiTaskPolicy.act` (docs/api.md). `obs` is act()'s dict, or a `CheckedObservation`
        (policies/observation.py: checked once already, with its own `prev_actions`)."""
        entered = time.perf_counter()
        if self._closed:
            raise RuntimeError("policy is closed")
        p = self.policy
        prefix, guidance = p.frame_inputs(obs, prev_actions, inference_delay)
        frame = self.frame
        noise = self.frame_noise(frame)
        new = [self._new_request(t, frame) for t in p.tasks if frame % t.every == 0]
        in_flight = self.engine.in_flight() + new
        now = time.perf_counter()
        k = self.budget.choose(
            len(in_flight), [r.remaining for r in in_flight], [now - self._started_at.get(r.request_id, now) for r in in_flight]
        )
        ready: dict = {}

        def dispatch(head_actions: dict[str, torch.Tensor]) -> None:
            per_head = {h: p.robot_actions(head_actions[h]) for h in p.action_heads}
            ready["actions"] = per_head[p.action_head] if len(per_head) == 1 else per_head
            ready["ms"] = (time.perf_counter() - entered) * 1e3
            try:
                check_finite_actions(per_head, guided=bool(guidance))
            except NonFiniteActionsError as e:  # withheld; raised once the engine has finished its frame
                ready["refused"] = e
                return
            if on_actions is not None:
                on_actions(ready["actions"])

        result = self.engine.run(FrameInput(frame, prefix, noise, new, guidance=guidance), k, on_actions=dispatch)
        self.frame += 1
        for r in new:
            self._started_at[r.request_id] = now
        self.budget.observe(result.stats.stage_ms, result.stats.batch_sizes, result.stats.stage_ms["decode"])
        if "actions" not in ready:  # an engine that did not call back (it must hand the actions out once)
            dispatch(result.head_actions)
        updates = [self._update(r, toks) for r, toks in result.advanced]
        self._record(result.stats, k, ready["ms"])
        if "refused" in ready:
            raise ready["refused"]
        return ready["actions"], updates

    def _new_request(self, task: LanguageTask, frame: int) -> Request:
        p = self.policy
        rid = self._next_request_id
        self._next_request_id += 1
        self._streams[rid] = TextStream(p.io.decode, frozenset({p.io.eos_id}))
        return Request(
            request_id=rid, task=task.name, frame=frame, prompt_ids=list(p._task_prompt_ids[task.name]),
            max_new_tokens=task.max_new_tokens, eos_id=p.io.eos_id, temperature=task.temperature,
            seed=request_seed(self.seed, rid), adapter=p.adapters.slot_of(task),
        )

    def _update(self, r: Request, tokens: list[int]) -> LanguageUpdate:
        stream = self._streams[r.request_id]
        delta = stream.push(tokens, r.done)
        if r.done:
            del self._streams[r.request_id]
            self._started_at.pop(r.request_id, None)
        return LanguageUpdate(r.request_id, r.task, r.frame, tuple(tokens), delta, stream.text, r.done)

    def _record(self, stats, k: int, obs_to_actions_ms: float) -> None:
        rec = {
            "frame": stats.frame,
            "frame_ms": stats.frame_ms,
            "obs_to_actions_ms": obs_to_actions_ms,  # act() entry -> actions handed out (on_actions)
            "stage_ms": dict(stats.stage_ms),
            "tokens": stats.tokens,
            "batch_sizes": list(stats.batch_sizes),
            "batch_size": max(stats.batch_sizes, default=0),
            "k": k,
            "active": stats.active,
            "queued": stats.queued,
        }
        self._records.append(rec)
        self.last_frame = rec

    # ------------------------------------------------------------------ bookkeeping
    def reset(self, seed: int | None = None) -> None:
        """Episode boundary: drop in-flight requests; the frame counter restarts at 0. A new `seed` changes the
        action noise and sampling from here on (a built-in model's weights stay those of the original seed)."""
        if seed is not None:
            self.seed = int(seed)
        self.engine.reset()
        self._streams.clear()
        self._started_at.clear()
        self.frame = 0

    def stats(self) -> dict:
        """Means and rates over every frame since this session began; `frame_ms` p50/p99 over the last
        `self._records.window` frames (the log keeps only those, so a long run's memory stays flat)."""
        p = self.policy
        return {
            **self._records.summary(p.horizon),
            "peak_memory_bytes": peak_memory_bytes(p.model.device),
            "held_memory_bytes": p.model_bytes + self._pool_bytes,  # computed: weights + KV pool
            "peak_rss_bytes": peak_rss_bytes(),
            "mode": p.mode,
            "queued_requests": int(getattr(self.engine, "total_queued", 0)),
            "deadline_misses": int(getattr(self.budget, "deadline_misses", 0)),
        }

    def session(self, engine: FrameEngine | None) -> PolicySession:
        """Another session of the same policy (`Policy.new_session`), seeded as this one is now."""
        return self.policy.new_session(engine, seed=self.seed, budget=self.budget)

    def close(self) -> None:
        """The session ends; the engine it ran on belongs to its owner (the policy, or the server's loop)."""
        self._closed = True


def copy_budget(budget: Any) -> Any:
    """A session's own decode budget, from the policy's (an auto budget's measurements are per session)."""
    return copy.deepcopy(budget)
