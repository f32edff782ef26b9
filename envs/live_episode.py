"""run_live_episode: run_episode with the world moving while the policy thinks (LiveClock + AsyncPolicy).

The loop is one control step at a time: `AsyncPolicy.next_action(obs)` (submits, hands over, or says hold), then
`LiveClock.step`. Steps held count against the episode's step limit, as they would on a robot. The result is an
EpisodeResult whose `live` field holds the per-call record (delays, hand-over steps, held steps) and totals.
"""
from __future__ import annotations

import time
from typing import Any

import gymnasium as gym
import numpy as np
from tqdm import tqdm

from oxygen_gym.policies.async_policy import AsyncPolicy, ChunkRecord

from .episode import EpisodeResult, episode_wrappers, policy_replan
from .live_clock import LiveClock
from .wrappers import PolicyCall, notify_policy_call


def live_summary(ap: AsyncPolicy, clock: LiveClock) -> dict:
    """Per episode: the settings, every call's record, and the totals the eval summary pools."""
    recs = [r.to_dict() for r in ap.records]
    delays = [r["delay_steps"] for r in recs if r["delay_steps"] is not None]
    executed = [x for x in ap.executed if x is not None]
    planned = sum(max(0, (r["horizon"] or 0) - (r["start_index"] or 0)) for r in recs if r["handover_step"] is not None)
    return {
        "latency": ap.latency.describe(), "execution": ap.execution, "handover": ap.handover,
        "control_dt": ap.control_dt, "threshold": ap.threshold, "replan": ap.replan, "decode_hidden": ap.decode_hidden,
        "steps": len(clock.records), "held_steps": clock.held_steps,
        "held_at": [r["step"] for r in clock.records if r["held"]],
        # actions of handed-over chunks whose step had passed before they arrived (async drops them by design)
        "stale_actions": sum(r["start_index"] or 0 for r in recs if r["handover_step"] is not None
                             and ap.execution == "async"),
        "executed_actions": len(executed), "planned_actions": planned,
        "delay_steps": delays, "delay_steps_mean": float(np.mean(delays)) if delays else None,
        "delay_steps_max": max(delays) if delays else None,
        "calls": recs,
    }


def _call_record(rec: ChunkRecord, updates: list, source: str) -> PolicyCall:
    return PolicyCall(index=rec.index, step=rec.handover_step if rec.handover_step is not None else rec.obs_step,
                      n_actions=max(0, rec.horizon - (rec.start_index or 0)), latency_ms=float(rec.actions_ms or 0.0),
                      latency_source=source, tokens=rec.tokens, stage_ms=dict(rec.stage_ms), updates=tuple(updates))


def _notify_finished(ap: AsyncPolicy, clock: LiveClock) -> None:
    """Tell the wrappers about calls that finished: their latency and language updates."""
    for rec, updates in ap.pop_finished():
        notify_policy_call(clock, _call_record(rec, updates, ap.latency.name))


def run_live_episode(
    env: gym.Env,
    policy: Any,
    *,
    latency: str | Any = "measured",
    execution: str = "sync",
    handover: str = "switch",
    threshold: int | None = None,
    blend_weight: float = 0.7,
    hide_decode: bool = True,
    control_dt: float | None = None,
    max_steps: int | None = None,
    replan: int | None = None,
    video_dir: str | None = None,
    seed: int | None = None,
    init_state: int | None = None,
    options: dict | None = None,
    video_name: str | None = None,
    progress: bool = False,
    policy_seed: int | None = None,
) -> EpisodeResult:
    """One episode on the live clock. `policy` is a policy with act(obs) (wrapped in an AsyncPolicy for this
    episode) or an AsyncPolicy already. Arguments as run_episode's, plus AsyncPolicy's; `policy_seed` resets the
    policy with that seed. `replan` None: as run_episode, the policy's declared `replan_steps` (an AsyncPolicy passed
    in keeps its own), else the env's protocol interval."""
    if replan is None and not isinstance(policy, AsyncPolicy):
        replan = policy_replan(policy)
    w = episode_wrappers(env, replan=replan, max_steps=max_steps, init_state=init_state, options=options,
                         video_dir=video_dir, video_name=video_name)
    replan, options, timer, narrator, video, limit = w.replan, w.options, w.timer, w.narrator, w.video, w.limit
    clock = LiveClock(video or narrator, control_dt=control_dt)
    own = not isinstance(policy, AsyncPolicy)
    ap = AsyncPolicy(policy, control_dt=clock.control_dt, latency=latency, execution=execution, handover=handover,
                     replan=replan, threshold=threshold, blend_weight=blend_weight,
                     hide_decode=hide_decode) if own else policy
    ap.reset(seed=policy_seed)
    t_start = time.perf_counter()
    labels: list = []
    memory: list = []
    steps, terminated, truncated, info = 0, False, False, {}
    # leave=None: kept when it is the only bar (the demo), cleared under eval's episodes bar
    bar = tqdm(total=limit, disable=not progress, unit="step", desc=str(getattr(env.unwrapped, "language", "")),
               leave=None, dynamic_ncols=True)
    try:
        obs, info = clock.reset(seed=seed, options=options or None)
        while max_steps is None or steps < max_steps:
            n_calls = len(ap.records)
            action = ap.next_action(obs)
            if len(ap.records) > n_calls:
                labels.append(info.get("subtask"))  # what the call's observation showed
                memory.append(info.get("memory"))
            _notify_finished(ap, clock)
            clock.note(**ap.last_step)
            obs, _, terminated, truncated, info = clock.step(action)
            steps += 1
            bar.update(1)
            if terminated or truncated:
                break
        else:
            truncated = True
    finally:
        bar.close()
        ap.drain()  # the call in flight at the end finishes before the policy is used again
        _notify_finished(ap, clock)
        if own:
            ap.close()
        video_path = video.finish() if video is not None else None
        if video_path is None and video is not None:
            video_path = video.last_path

    finished = [r for r in ap.records if r.actions_ms is not None]
    # compute rates from what the calls really took on this machine (the clock's latency, e.g. fixed:0, is in `live`)
    wall_ms = [r.wall_total_ms for r in finished if r.wall_total_ms is not None]
    policy_s = sum(wall_ms) / 1e3
    env_ms = [r["env_ms"] for r in timer.records]
    tokens = sum(r.tokens for r in ap.records)
    stage_keys = sorted({k for r in ap.records for k in r.stage_ms})
    final_info = {k: v for k, v in info.items() if k not in ("timing", "narration", "live")}
    return EpisodeResult(
        success=bool(info.get("is_success", False)), steps=steps, latencies_ms=wall_ms,
        narration=narrator.narration(), video_path=str(video_path) if video_path is not None else None,
        episode_id=str(info.get("episode_id", "")), terminated=bool(terminated), truncated=bool(truncated),
        calls=len(ap.records), replan=ap.replan, latency_source=ap.latency.name,
        action_hz=sum(x is not None for x in ap.executed) / policy_s if policy_s > 0 else 0.0,
        tokens=tokens, tokens_per_s=tokens / policy_s if policy_s > 0 else 0.0,
        stage_ms={k: float(np.mean([r.stage_ms.get(k, 0.0) for r in ap.records])) for k in stage_keys},
        env_ms_mean=float(np.mean(env_ms)) if env_ms else 0.0, wall_s=time.perf_counter() - t_start,
        info=final_info, subtask_labels=labels if any(x is not None for x in labels) else [],
        memory_labels=memory if any(x is not None for x in memory) else [],
        live=live_summary(ap, clock),
    )
