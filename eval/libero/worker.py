"""One evaluation episode: `(EpisodeSpec, EvalConfig) -> record dict`, the same code in the local loop, in Ray
workers and in the demo, for every sim (the env comes from the config's plug-in, eval/sims.py). A process keeps one
policy across episodes and the current task's env across that task's episodes (building a LIBERO sim takes ~10 s). Anything an episode raises becomes an `error` record with its
traceback, and the next episode starts from a fresh env.
"""
from __future__ import annotations

import atexit
import datetime as _dt
import os
import socket
import time
import traceback
import zlib
from pathlib import Path
from typing import Any

import numpy as np

from .eval_config import LIVE_DEFAULTS, EvalConfig, with_declared_replan
from .episode_set import EpisodeSpec

VIDEO_DIR = "videos"


def policy_seed(spec: EpisodeSpec) -> int:
    """The action-noise seed of one episode: fixed by (suite, task, seed, episode), so an episode's result does not
    depend on the worker that ran it or on what ran before, and different eval seeds give different noise."""
    parts = [spec.seed, zlib.crc32(spec.suite.encode()), spec.task_id, spec.episode]
    if spec.scene is not None:  # a fresh scene's noise differs from official init state `scene`'s
        parts.append(zlib.crc32(b"fresh-scene"))
    ss = np.random.SeedSequence(parts)
    return int(ss.generate_state(1, dtype=np.uint64)[0] >> 1)


def _now() -> str:
    return _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds")


def error_record(spec: EpisodeSpec, error: str, tb: str, **extra: Any) -> dict:
    """The record of an episode that raised instead of finishing."""
    return {**spec.to_dict(), "status": "error", "success": False, "steps": None, "error": error, "traceback": tb,
            "worker": f"{socket.gethostname()}:{os.getpid()}", "finished_at": _now(), **extra}


def episode_video_dir(out: str | os.PathLike, spec: EpisodeSpec) -> Path:
    """Where an episode's video goes (the env names the file after suite, task, seed and init state)."""
    return Path(out) / VIDEO_DIR / f"seed{spec.seed}"


class EpisodeWorker:
    """Runs episodes of one EvalConfig in this process, keeping the policy and the current env between them."""

    def __init__(self, config: EvalConfig):
        self.config = config
        self.policy = None
        self.placement = None  # set with the policy (engine/placement.py)
        self.env = None
        self._env_key: tuple | None = None

    # ---- resources --------------------------------------------------------------------------------------------
    def get_policy(self):
        if self.policy is None:
            from oxygen_gym.engine.placement import place

            cfg = self.config
            # before torch loads where it can: this process shares the machine with its simulator and with the
            # run's other shards (Ray sets each actor's OMP_NUM_THREADS to its CPUs, which the rule honours)
            self.placement = place(processes=cfg.shard[1], simulator=True, threads=cfg.threads)
            from oxygen_gym import MultiTaskPolicy

            self.policy = MultiTaskPolicy.from_pretrained(cfg.checkpoint, config=cfg.policy_config())
            if cfg.ensemble is not None:
                from oxygen_gym.policies.temporal_ensemble import TemporalEnsemble

                self.policy = TemporalEnsemble(self.policy, replan=self.replan(), decay=cfg.ensemble)
        return self.policy

    def convention_kwargs(self) -> dict:
        """from_pretrained's checkpoint-convention arguments, and the protocol's image resize for a checkpoint."""
        return self.config.overrides().as_kwargs()

    def replan(self) -> int:
        """Actions executed per policy call: --replan, else the checkpoint's declared `replan_steps`, else the
        openpi client's replan_steps, or (lerobot) all the policy returns."""
        from ..sims import get_sim

        replan = with_declared_replan(self.config).replan  # run_eval resolved it already; the demo has not
        if replan is not None:
            return replan
        return get_sim(self.config.env).protocol_replan(self.config.protocol, self.policy)

    def get_env(self, spec: EpisodeSpec):
        """The episode's env from the sim's plug-in (eval/sims.py), kept while the next episode's key is the same."""
        from ..sims import get_sim

        sim = get_sim(self.config.env)
        key = sim.env_key(spec, self.config)
        if self._env_key != key:
            self.close_env()
            self.env = sim.make_env(spec, self.config)
            self._env_key = key
        return self.env

    def close_env(self) -> None:
        if self.env is not None:
            try:
                self.env.close()
            finally:
                self.env, self._env_key = None, None

    def close(self) -> None:
        self.close_env()
        if self.policy is not None:
            self.policy.close()
            self.policy = None

    # ---- one episode ------------------------------------------------------------------------------------------
    def run(self, spec: EpisodeSpec, video_dir: str | os.PathLike | None = None, progress: bool = False) -> dict:
        """Run one episode and return its record; never raises for a failure inside the episode.
        `video_dir` overrides where the video goes (the demo); `progress` shows a per-step bar."""
        from oxygen_gym.envs.episode import run_episode

        t0 = time.perf_counter()
        cfg = self.config
        pseed = policy_seed(spec)
        if video_dir is None and cfg.video_wanted(spec.episode, spec.scene):
            video_dir = episode_video_dir(cfg.out, spec)
        try:
            env = self.get_env(spec)
            if cfg.save_rollouts != "none":  # --save-rollouts: every step kept as training data
                from oxygen_gym.train.collect.rollouts import RolloutRecorder

                env = recorder = RolloutRecorder(env)
            policy = self.get_policy()
            policy.reset(seed=pseed)  # frame t draws its action noise from (seed, t)
            video = str(video_dir) if video_dir is not None else None
            live = cfg.live_settings()
            # an official init state, or a fresh scene's sampler seed (then no init state)
            options = spec.reset_options
            if live is None:
                result = run_episode(env, policy, seed=spec.seed, options=options, replan=self.replan(),
                                     video_dir=video, progress=progress)
            else:
                from oxygen_gym.envs.live_episode import run_live_episode

                result = run_live_episode(env, policy, seed=spec.seed, options=options,
                                          replan=self.replan(), video_dir=video, progress=progress, **live)
            if cfg.save_rollouts != "none":
                from oxygen_gym.train.collect.rollouts import save_rollout

                save_rollout(recorder, cfg.out, spec, result.success, pseed, cfg.checkpoint)
        except Exception as e:  # noqa: BLE001 - one bad episode must not end the evaluation
            tb = traceback.format_exc()
            self.close_env()  # the sim may be in any state now
            return error_record(spec, f"{type(e).__name__}: {e}", tb, policy_seed=pseed,
                                wall_s=time.perf_counter() - t0)
        return self._record(spec, result, pseed, time.perf_counter() - t0)

    def _record(self, spec: EpisodeSpec, result, pseed: int, wall_s: float) -> dict:
        r = result.to_dict()
        video = r.get("video_path")
        if video and self.config.video == "failures" and r["success"]:
            Path(video).unlink(missing_ok=True)
            video = None
        if video:  # relative to the results folder, so folders can be moved and shards merged
            video = os.path.relpath(video, self.config.out)
        lat = [x for x in r["latencies_ms"] if x is not None]
        from .narration import is_held_out, narration_accuracy, training_data

        if not hasattr(self, "_training_data"):
            self._training_data = training_data(self.config.checkpoint)
        task_name = getattr(self.env.unwrapped, "task_name", None)
        horizon = getattr(self.policy, "horizon", None)
        return {
            **spec.to_dict(),
            "status": "ok",
            "success": bool(r["success"]),
            "steps": int(r["steps"]),
            "task": getattr(self.env.unwrapped, "language", None),
            "policy_seed": pseed,
            "terminated": r["terminated"],
            "truncated": r["truncated"],
            "calls": r["calls"],
            "replan": r["replan"],
            # the paper's action frequency f = H / T (action horizon over mean frame latency)
            "action_hz": (horizon / (np.mean(lat) / 1e3)) if lat and horizon and np.mean(lat) > 0 else None,
            # actions executed per second of policy compute (replan / T), as the video overlay shows
            "executed_action_hz": r["action_hz"],
            "language_tokens": r["tokens"],
            "language_tokens_per_s": r["tokens_per_s"],
            "frame_ms": lat,
            "stage_ms": r["stage_ms"],
            "env_ms_mean": r["env_ms_mean"],
            "time_s": r["time_s"],  # run_episode's split of the episode's wall time
            "frames_rendered": r["frames_rendered"],
            "cpu_s": r["cpu_s"],
            "narration": r["narration"],
            "subtask_labels": r["subtask_labels"],
            "narration_accuracy": narration_accuracy(r["narration"], r["subtask_labels"]),
            "memory_labels": r["memory_labels"],
            # the memory task's answers against envs/scene_memory.MemoryLabeller (None without a "memory" task)
            "memory_accuracy": narration_accuracy(r["narration"], r["memory_labels"], task="memory"),
            "held_out": is_held_out(self._training_data, task_name, spec.init_state, spec.scene),
            "video": video,
            "error": None,
            **({"live": r["live"]} if self.config.live is not None else {}),
            "wall_s": wall_s,
            "placement": self.placement.as_record(),  # the threads this process ran with, and why
            "worker": f"{socket.gethostname()}:{os.getpid()}",
            "finished_at": _now(),
        }


_WORKER: EpisodeWorker | None = None


def run_episode_spec(spec: EpisodeSpec, config: EvalConfig, progress: bool = False) -> dict:
    """The per-episode function: reuses this process's worker while the config stays the same. `progress`: a bar
    over the episode's steps."""
    global _WORKER
    same = _WORKER is not None and (_policy_fields(_WORKER.config), _WORKER.config.device) == (
        _policy_fields(config), config.device)
    if not same:
        close_worker()
        _WORKER = EpisodeWorker(config)
    _WORKER.config = config  # outputs (video folder) may differ between runs that share the policy
    record = _WORKER.run(spec, progress=progress)
    _register_exit_hook()
    return record


def _policy_fields(config: EvalConfig) -> dict:
    """The fields the policy and env are built from: live-control settings only change the loop around them."""
    return {k: v for k, v in config.result_fields().items() if k not in LIVE_DEFAULTS}


def close_worker() -> None:
    """Release this process's policy and env. Runs at interpreter exit too: an unclosed robosuite EGL context
    prints errors then."""
    global _WORKER
    if _WORKER is not None:
        worker, _WORKER = _WORKER, None
        worker.close()


def _register_exit_hook() -> None:
    """Close at exit, before any simulator's exit hook terminates the EGL display. Hooks run last-in first-out, and
    a sim registers its hook when it makes its first render context, during an episode: robosuite (LIBERO, DROID)
    and dm_control (ALOHA) each terminate the same device display, so after each episode this hook moves behind
    whatever registered since (a LIBERO eval, then an ALOHA one, then LIBERO again in one process printed
    EGL_NOT_INITIALIZED errors at exit when it was registered once)."""
    atexit.unregister(close_worker)
    atexit.register(close_worker)


def quiet_interrupt_exit(message: str, worker: EpisodeWorker | None = None) -> None:
    """After Ctrl-C (call it once the `except KeyboardInterrupt` block has ended, so the interrupted frames are
    released): close the env and policy (`worker`, else this process's) and free what the interrupt left half-built
    while the EGL display still exists, saying nothing about what that teardown raises, then print `message`.

    Without this, an interrupt during the first episode's reset (robosuite making its render context) left the env
    open and a half-made `MjRenderContextOffscreen` for interpreter exit, after robosuite's own exit hook had
    terminated the EGL display: their `__del__`s printed `EGLError(err = EGL_NOT_INITIALIZED, eglDestroyContext)` and
    `AttributeError: ... no attribute 'con'` tracebacks."""
    import contextlib
    import gc
    import io
    import sys

    hook = sys.unraisablehook
    sys.unraisablehook = lambda unraisable: None  # the __del__ of a half-made GL context
    try:
        with contextlib.redirect_stderr(io.StringIO()):
            try:
                worker.close() if worker is not None else close_worker()
            except BaseException:  # noqa: BLE001 - the interrupt already decided the outcome
                pass
            gc.collect()  # the half-built contexts, now unreferenced, while the display is alive
    finally:
        sys.unraisablehook = hook
    print(message, file=sys.stderr)
