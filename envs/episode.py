"""run_episode: the closed loop that eval, the demo and users share, and the EpisodeResult it returns."""
from __future__ import annotations

import math
import time
from dataclasses import asdict, dataclass, field
from typing import Any

import gymnasium as gym
import numpy as np
from tqdm import tqdm

from .video import VideoRecorder
from .wrappers import ActionChunkPlayer, NarrationRecorder, PolicyCall, StepTimer, check_rendered, notify_policy_call


@dataclass
class EpisodeResult:
    """What one closed-loop episode did and how fast; `to_dict()` is JSON-serialisable."""

    success: bool
    steps: int  # control steps executed (wait steps after reset not included)
    latencies_ms: list[float]  # per policy call, as the policy measured it (wall clock if it cannot)
    narration: list[dict]  # every language request: task, text, frame, start/end control step, done
    video_path: str | None
    episode_id: str = ""
    terminated: bool = False
    truncated: bool = False
    calls: int = 0
    replan: int = 0
    latency_source: str = "policy"
    action_hz: float = 0.0  # actions executed per second of policy compute
    tokens: int = 0
    tokens_per_s: float = 0.0  # language tokens per second of policy compute
    stage_ms: dict[str, float] = field(default_factory=dict)  # mean per call, per stage
    env_ms_mean: float = 0.0  # mean wall time of one env step
    wall_s: float = 0.0
    # where wall_s went, in seconds: reset (rebuild, settle steps and their render), physics (env steps less their
    # camera rendering), render (camera rendering during steps), policy (wall time of act()), other (the rest:
    # wrappers, labels, video encoding); render is 0 and inside physics for envs that do not count it (every env of
    # this package counts it: their `render_count`, envs/rendering.py)
    time_s: dict[str, float] = field(default_factory=dict)
    frames_rendered: int | None = None  # camera images rendered during steps (None: the env does not count them)
    cpu_s: float = 0.0  # this process's CPU seconds over the episode: wall_s / cpu_s well above 1 means a shared CPU
    info: dict = field(default_factory=dict)  # the env's last info
    # per policy call, the env's info["subtask"] for the observation the call saw (envs that label subtasks)
    subtask_labels: list = field(default_factory=list)
    # per policy call, the env's info["memory"] (the memory task's answer, envs/scene_memory.py) for the same observation
    memory_labels: list = field(default_factory=list)
    # live runs only (run_live_episode): latency source, execution, per-call delays, held and stale steps
    live: dict = field(default_factory=dict)

    def to_dict(self) -> dict:
        return _jsonable(asdict(self))


def _jsonable(x: Any) -> Any:
    if isinstance(x, dict):
        return {str(k): _jsonable(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_jsonable(v) for v in x]
    if isinstance(x, np.ndarray):
        return _jsonable(x.tolist())
    if isinstance(x, np.generic):
        return _jsonable(x.item())
    if isinstance(x, float) and not math.isfinite(x):
        return None
    if x is None or isinstance(x, (bool, int, float, str)):
        return x
    return str(x)


def default_replan(env: gym.Env) -> int:
    """The env's protocol replan interval (openpi / lerobot numbers, protocols.py), else 1."""
    protocol = getattr(env.unwrapped, "protocol", None)
    return int(getattr(protocol, "replan", 1))


def policy_replan(policy: Any) -> int | None:
    """The actions of each chunk the policy says to execute per call (`replan_steps`, its checkpoint's declaration),
    or None where it says nothing (the env's protocol then decides)."""
    value = getattr(policy, "replan_steps", None)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
        raise ValueError(f"policy.replan_steps must be an int >= 1 or None, got {value!r}")
    return int(value)


def _policy_call_record(policy: Any, index: int, step: int, n_actions: int, updates: list,
                        wall_ms: float) -> PolicyCall:
    frame = getattr(policy, "last_frame", None)
    if isinstance(frame, dict) and frame.get("frame_ms") is not None:
        latency, source = float(frame["frame_ms"]), "policy"
    else:
        latency, source = wall_ms, "wall"
    frame = frame if isinstance(frame, dict) else {}
    tokens = frame.get("tokens")
    if tokens is None:
        tokens = sum(len(getattr(u, "new_token_ids", ())) for u in updates)
    return PolicyCall(
        index=index, step=step, n_actions=n_actions, latency_ms=latency, latency_source=source, tokens=int(tokens),
        stage_ms={k: float(v) for k, v in (frame.get("stage_ms") or {}).items()},
        batch_size=frame.get("batch_size"), updates=tuple(updates),
    )


@dataclass
class EpisodeWrappers:
    """What every episode loop (synchronous here, live in live_episode.py) sets up the same way: the checked
    arguments and the recording wrappers (timing, narration, optional video) around the env."""

    replan: int
    options: dict
    timer: StepTimer
    narrator: NarrationRecorder
    video: VideoRecorder | None
    limit: int | None  # control steps at most (max_steps, else the env's own)


def episode_wrappers(
    env: gym.Env, *, replan: int | None, max_steps: int | None, init_state: int | None, options: dict | None,
    video_dir: str | None, fps: float | None = None, video_name: str | None = None,
) -> EpisodeWrappers:
    replan = default_replan(env) if replan is None else replan
    if max_steps is not None and (isinstance(max_steps, bool) or not isinstance(max_steps, (int, np.integer))
                                  or max_steps < 1):
        raise ValueError(f"max_steps must be a positive int or None, got {max_steps!r}")
    options = dict(options or {})
    if init_state is not None:
        options["init_state"] = init_state
    timer = StepTimer(env)
    narrator = NarrationRecorder(timer)
    video = VideoRecorder(narrator, video_dir, fps=fps, name=video_name) if video_dir is not None else None
    limit = max_steps if max_steps is not None else getattr(env.unwrapped, "max_steps", None)
    return EpisodeWrappers(replan, options, timer, narrator, video, limit)


def run_episode(
    env: gym.Env,
    policy: Any,
    *,
    max_steps: int | None = None,
    replan: int | None = None,
    video_dir: str | None = None,
    seed: int | None = None,
    init_state: int | None = None,
    options: dict | None = None,
    fps: float | None = None,
    video_name: str | None = None,
    progress: bool = False,
    reset_policy: bool = True,
) -> EpisodeResult:
    """Reset `env`, then alternate `policy.act(obs)` and the first `replan` actions of its chunk until the episode
    ends or `max_steps` control steps ran. `env` stays open (reuse it for the next episode); `policy` is reset first.
    `replan` None: the policy's own `replan_steps` (what its checkpoint declares, `MultiTaskPolicy.replan_steps`),
    else the env's protocol interval.

    `policy` needs `act(obs) -> (actions (horizon, action_dim), language updates)`; its `last_frame["frame_ms"]`
    is the latency reported (wall clock around act() when it has none). The video (with `video_dir`) is named after
    the env's episode id and the outcome, or `video_name` and the outcome.
    """
    if replan is None:
        replan = policy_replan(policy)
    w = episode_wrappers(env, replan=replan, max_steps=max_steps, init_state=init_state, options=options,
                         video_dir=video_dir, fps=fps, video_name=video_name)
    replan, options, timer, narrator, video, limit = w.replan, w.options, w.timer, w.narrator, w.video, w.limit
    player = ActionChunkPlayer(video or narrator, replan)
    action_dim = player.action_space.shape[1]

    if reset_policy and hasattr(policy, "reset"):
        policy.reset()
    counter = getattr(env.unwrapped, "render_count", None)  # the env's render seconds and images (envs/rendering.py)
    t_start, cpu_start = time.perf_counter(), time.process_time()
    calls: list[PolicyCall] = []
    walls_ms: list[float] = []
    labels: list = []
    memory: list = []
    steps, terminated, truncated, info = 0, False, False, {}
    reset_s, render0, frames0 = 0.0, 0.0, 0
    # leave=None: kept when it is the only bar (the demo), cleared under eval's episodes bar
    bar = tqdm(total=limit, disable=not progress, unit="step", desc=str(getattr(env.unwrapped, "language", "")),
               leave=None, dynamic_ncols=True)
    try:
        obs, info = player.reset(seed=seed, options=options or None)
        reset_s = time.perf_counter() - t_start
        if counter is not None:
            render0, frames0 = counter.render_s, counter.frames
        while max_steps is None or steps < max_steps:
            labels.append(info.get("subtask"))
            memory.append(info.get("memory"))
            check_rendered(info, "the policy")
            t0 = time.perf_counter()
            actions, updates = policy.act(obs)
            wall_ms = (time.perf_counter() - t0) * 1e3
            walls_ms.append(wall_ms)
            actions = np.asarray(actions)
            if actions.ndim != 2 or actions.shape[1] != action_dim:
                raise ValueError(
                    f"policy.act returned actions of shape {actions.shape}; expected (horizon, {action_dim})")
            if actions.shape[0] < replan:
                raise ValueError(f"policy returned {actions.shape[0]} actions but replan={replan}; lower replan")
            n = replan if max_steps is None else min(replan, max_steps - steps)
            call = _policy_call_record(policy, len(calls), steps, n, list(updates or []), wall_ms)
            calls.append(call)
            notify_policy_call(player, call)
            obs, _, terminated, truncated, info = player.step(actions[:n])
            steps += info["chunk_steps"]
            bar.update(info["chunk_steps"])
            if terminated or truncated:
                break
        else:
            truncated = True  # our own step limit ended it
    finally:
        bar.close()
        video_path = video.finish() if video is not None else None
        if video_path is None and video is not None:
            video_path = video.last_path

    wall_s, cpu_s = time.perf_counter() - t_start, time.process_time() - cpu_start
    policy_s = sum(c.latency_ms for c in calls) / 1e3
    tokens = sum(c.tokens for c in calls)
    stage_keys = sorted({k for c in calls for k in c.stage_ms})
    env_ms = [r["env_ms"] for r in timer.records]
    render_s = counter.render_s - render0 if counter is not None else 0.0
    split = {"reset": reset_s, "physics": sum(env_ms) / 1e3 - render_s, "render": render_s,
             "policy": sum(walls_ms) / 1e3}
    split["other"] = wall_s - sum(split.values())
    final_info = {k: v for k, v in info.items() if k not in ("timing", "narration")}
    return EpisodeResult(
        success=bool(info.get("is_success", False)),
        steps=steps,
        latencies_ms=[c.latency_ms for c in calls],
        narration=narrator.narration(),
        video_path=str(video_path) if video_path is not None else None,
        episode_id=str(info.get("episode_id", "")),
        terminated=bool(terminated),
        truncated=bool(truncated),
        calls=len(calls),
        replan=replan,
        latency_source=calls[0].latency_source if calls else "policy",
        action_hz=steps / policy_s if policy_s > 0 else 0.0,
        tokens=tokens,
        tokens_per_s=tokens / policy_s if policy_s > 0 else 0.0,
        stage_ms={k: float(np.mean([c.stage_ms.get(k, 0.0) for c in calls])) for k in stage_keys},
        env_ms_mean=float(np.mean(env_ms)) if env_ms else 0.0,
        wall_s=wall_s,
        time_s={k: round(v, 4) for k, v in split.items()},
        frames_rendered=counter.frames - frames0 if counter is not None else None,
        cpu_s=cpu_s,
        info=final_info,
        subtask_labels=labels if any(x is not None for x in labels) else [],
        memory_labels=memory if any(x is not None for x in memory) else [],
    )
