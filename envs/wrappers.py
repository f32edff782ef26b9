"""Wrappers for closed-loop runs, one concern each, in the style of Gymnasium's own.

Layering (inner to outer): env -> StepTimer -> NarrationRecorder -> VideoRecorder -> ActionChunkPlayer.
The inner wrappers work per control step and write into `info`; ActionChunkPlayer turns one `step()` into the
execution of a policy's action chunk. What a policy call produced (latency, language updates) reaches the wrappers
that care through `notify_policy_call(env, call)`, which calls `on_policy_call` on every wrapper in the chain.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium import spaces


@dataclass(frozen=True)
class PolicyCall:
    """One `policy.act(obs)` call, as the wrappers see it."""

    index: int  # act() calls since the episode began (the policy's `frame`)
    step: int  # control step at which its actions start
    n_actions: int  # actions of the chunk that will be executed
    latency_ms: float  # as the policy measured it (CUDA events / perf_counter), else wall clock
    latency_source: str = "policy"  # "policy" (policy.last_frame) or "wall" (a policy without last_frame)
    tokens: int = 0  # language tokens generated during the call
    stage_ms: dict[str, float] = field(default_factory=dict)
    batch_size: int | None = None
    updates: tuple = ()  # LanguageUpdate objects (anything with request_id, task, frame, new_text, text, done)


def notify_policy_call(env: gym.Env, call: PolicyCall) -> None:
    """Tell every wrapper in `env`'s chain that has `on_policy_call` about a policy call."""
    node = env
    while True:
        hook = getattr(type(node), "on_policy_call", None)
        if hook is not None:
            hook(node, call)
        if not isinstance(node, gym.Wrapper):
            return
        node = node.env


def request_render(env: gym.Env) -> None:
    """Ask `env` to render its cameras at its next step, for envs that render on request (LIBERO's
    `render_on_request`); others render every step anyway."""
    request = getattr(env.unwrapped, "request_render", None)
    if request is not None:
        request()


def check_rendered(info: dict, consumer: str) -> None:
    """Raise when `consumer` is about to use an observation whose cameras were not rendered (info["rendered"])."""
    if info.get("rendered") is False:
        raise RuntimeError(
            f"{consumer} got the observation of step {info.get('step')}, whose cameras were not rendered: the env "
            "renders on request, and nothing called request_render() before that step")


class ActionChunkPlayer(gym.Wrapper):
    """`step(chunk)` executes the first `replan` actions of a (horizon, action_dim) chunk, stopping early when the
    episode ends, and returns the last transition with the summed reward; `info["chunk_steps"]` says how many ran.
    Only the last step's observation is returned, so only that step is asked to render (`request_render`); an episode
    that ends earlier in the chunk returns an observation rendered only if another wrapper asked for it."""

    def __init__(self, env: gym.Env, replan: int) -> None:
        super().__init__(env)
        if isinstance(replan, bool) or not isinstance(replan, (int, np.integer)) or replan < 1:
            raise ValueError(f"replan must be a positive int, got {replan!r}")
        self.replan = int(replan)
        inner = env.action_space
        if not isinstance(inner, spaces.Box) or len(inner.shape) != 1:
            raise ValueError(f"ActionChunkPlayer needs a 1-D Box action space, got {inner}")
        self._action_dim = inner.shape[0]
        self.action_space = spaces.Box(
            np.broadcast_to(inner.low, (self.replan, self._action_dim)),
            np.broadcast_to(inner.high, (self.replan, self._action_dim)),
            dtype=inner.dtype,
        )

    def step(self, chunk):
        chunk = np.asarray(chunk)
        if chunk.ndim != 2 or chunk.shape[0] < 1 or chunk.shape[1] != self._action_dim:
            raise ValueError(f"action chunk must have shape (horizon >= 1, {self._action_dim}), got {chunk.shape}")
        total = 0.0
        actions = chunk[: self.replan]
        for i, action in enumerate(actions):
            if i == len(actions) - 1:
                request_render(self.env)
            obs, reward, terminated, truncated, info = self.env.step(action)
            total += float(reward)
            if terminated or truncated:
                break
        info = dict(info)
        info["chunk_steps"] = i + 1
        return obs, total, terminated, truncated, info


class StepTimer(gym.Wrapper):
    """Adds `info["timing"]` per control step: the latency of the policy call whose action this is (as the policy
    measured it), the env step's wall time, and the rates that follow; `records` keeps them all for the episode."""

    def __init__(self, env: gym.Env) -> None:
        super().__init__(env)
        self.records: list[dict[str, Any]] = []
        self._call: PolicyCall | None = None
        self._step = 0

    def on_policy_call(self, call: PolicyCall) -> None:
        self._call = call

    def reset(self, **kwargs):
        self.records, self._call, self._step = [], None, 0
        return self.env.reset(**kwargs)

    def step(self, action):
        t0 = time.perf_counter()
        obs, reward, terminated, truncated, info = self.env.step(action)
        env_ms = (time.perf_counter() - t0) * 1e3
        self._step += 1
        call = self._call
        record: dict[str, Any] = {"step": self._step, "env_ms": env_ms}
        if call is not None:
            latency_s = max(call.latency_ms, 1e-6) / 1e3
            record.update(
                policy_call=call.index,
                new_call=self._step == call.step + 1,
                policy_ms=call.latency_ms,
                latency_source=call.latency_source,
                # Rate the policy sustains: the actions it hands over per second of its own compute.
                action_hz=call.n_actions / latency_s,
                # Rate of the whole loop on this machine: per action, one env step plus its share of the call.
                loop_hz=1e3 / (env_ms + call.latency_ms / max(call.n_actions, 1)),
                tokens_per_s=call.tokens / latency_s,
            )
        self.records.append(record)
        info = dict(info)
        info["timing"] = dict(record)
        return obs, reward, terminated, truncated, info


class NarrationRecorder(gym.Wrapper):
    """Keeps each language request's text with the control steps it spans, and adds `info["narration"]`: per
    language task, the text to show now (the newest finished request, else the longest one in flight)."""

    def __init__(self, env: gym.Env) -> None:
        super().__init__(env)
        self.requests: dict[int, dict[str, Any]] = {}
        self._call_steps: dict[int, int] = {}

    def reset(self, **kwargs):
        self.requests, self._call_steps = {}, {}
        return self.env.reset(**kwargs)

    def on_policy_call(self, call: PolicyCall) -> None:
        self._call_steps[call.index] = call.step
        for u in call.updates:
            rec = self.requests.get(u.request_id)
            if rec is None:
                start = self._call_steps.get(u.frame, call.step)
                rec = self.requests[u.request_id] = {
                    "request_id": int(u.request_id), "task": str(u.task), "frame": int(u.frame),
                    "start_step": int(start), "end_step": None, "last_frame": int(call.index),
                    "text": "", "done": False,
                }
            rec["text"] = str(u.text)
            rec["last_frame"] = int(call.index)
            rec["end_step"] = int(call.step)
            rec["done"] = bool(u.done)

    def latest(self) -> dict[str, str]:
        """Per task, the text to show now."""
        best: dict[str, tuple[tuple, str]] = {}
        for rec in self.requests.values():
            # finished beats in flight; then newer (finished) or longer (in flight)
            rank = (rec["done"], rec["request_id"] if rec["done"] else len(rec["text"]))
            if rec["text"] and (rec["task"] not in best or rank > best[rec["task"]][0]):
                best[rec["task"]] = (rank, rec["text"])
        return {task: text for task, (_, text) in best.items()}

    def narration(self) -> list[dict[str, Any]]:
        """Every request of the episode, oldest first: task, text, the frame that started it and the control steps
        from its start to its last update."""
        return [dict(rec) for _, rec in sorted(self.requests.items())]

    def step(self, action):
        obs, reward, terminated, truncated, info = self.env.step(action)
        info = dict(info)
        info["narration"] = self.latest()
        return obs, reward, terminated, truncated, info


