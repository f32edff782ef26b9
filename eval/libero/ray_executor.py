"""Episodes on Ray workers: one actor per worker holds one policy (and its current env) across episodes, the driver
feeds each actor one episode at a time and appends every record to the results folder itself, so the folder has a
single writer and resumes exactly as a local run does.

`--ray` alone starts a local Ray instance; `--ray auto` or `--ray ray://HOST:10001` joins an existing cluster (every
node needs oxygen-gym installed; videos land in --out on the node that ran the episode, so use a shared filesystem).
"""
from __future__ import annotations

import os
import traceback
from collections import deque
from collections.abc import Iterator

from .eval_config import EvalConfig
from .episode_set import EpisodeSpec
from .eval_loop import Executor
from .worker import EpisodeWorker, error_record

_FORWARDED_ENV = ("MUJOCO_GL", "PYOPENGL_PLATFORM", "OMP_NUM_THREADS")


class EpisodeActor:
    """The Ray actor body: a thin shell over EpisodeWorker, the same code the local loop runs."""

    def __init__(self, config: dict):
        self.worker = EpisodeWorker(EvalConfig.from_dict(config))

    def run(self, spec: EpisodeSpec) -> dict:
        return self.worker.run(spec)

    def close(self) -> None:
        self.worker.close()


def _default_workers(ray, cpus_per_worker: float, gpus_per_worker: float) -> int:
    res = ray.cluster_resources()
    if gpus_per_worker > 0:
        return max(1, int(res.get("GPU", 0) // gpus_per_worker))
    return max(1, int(res.get("CPU", 1) // max(cpus_per_worker, 1e-9)))


def ray_executor(address: str | None = None, workers: int | None = None, gpus_per_worker: float | None = None,
                 cpus_per_worker: float = 1.0) -> Executor:
    """An executor for `run_eval` that spreads episodes over Ray actors."""

    def execute(specs: list[EpisodeSpec], config: EvalConfig) -> Iterator[dict]:
        import ray
        from ray.exceptions import RayError

        gpus = gpus_per_worker if gpus_per_worker is not None else (1.0 if config.device.startswith("cuda") else 0.0)
        started_here = not ray.is_initialized()
        if started_here:
            env_vars = {k: os.environ[k] for k in _FORWARDED_ENV if k in os.environ}
            ray.init(address=address, include_dashboard=False, runtime_env={"env_vars": env_vars} if env_vars else None,
                     log_to_driver=False)
        actor_cls = ray.remote(num_cpus=cpus_per_worker, num_gpus=gpus, max_restarts=0)(EpisodeActor)
        n = min(workers or _default_workers(ray, cpus_per_worker, gpus), len(specs))
        cfg = config.to_dict()
        actors = [actor_cls.remote(cfg) for _ in range(n)]
        queue = deque(specs)
        pending: dict = {}

        def submit(actor) -> None:
            if queue:
                spec = queue.popleft()
                pending[actor.run.remote(spec)] = (actor, spec)

        try:
            for actor in actors:
                submit(actor)
            while pending:
                (ref,), _ = ray.wait(list(pending), num_returns=1)
                actor, spec = pending.pop(ref)
                try:
                    record = ray.get(ref)
                except RayError as e:  # the worker process died (segfault, OOM): record it, replace the worker
                    record = error_record(spec, f"{type(e).__name__}: worker lost: {str(e).splitlines()[0]}",
                                          traceback.format_exc())
                    ray.kill(actor, no_restart=True)
                    actor = actor_cls.remote(cfg)
                    actors.append(actor)
                yield record
                submit(actor)
        finally:
            for actor in actors:
                try:
                    ray.get(actor.close.remote(), timeout=30)
                except Exception:  # noqa: BLE001 - a dead actor has nothing to close
                    pass
                ray.kill(actor, no_restart=True)
            if started_here:
                ray.shutdown()

    return execute
