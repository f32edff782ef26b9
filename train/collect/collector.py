"""Collect expert demonstrations: a fixed, ordered list of episodes, run by worker processes, written by the parent
as they finish (one HDF5 file per task). Resumable: episodes already in the files or in the attempt log are skipped,
and each episode's scene, init state and injected noise depend only on its key, so a resumed or re-run collection
writes the same data whatever the worker count or order."""
from __future__ import annotations

import json
import multiprocessing as mp
import os
import time
import zlib
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
from tqdm import tqdm

from oxygen_gym.envs.libero_scenes import SAME_SCENE_M, fresh_scene_seed
from oxygen_gym.policies.action_noise import check_noise_scale
from oxygen_gym.policies.checkpoints.noise_scale import resolved_noise_scale
from oxygen_gym.policies.temporal_ensemble import TemporalEnsemble, check_decay

from .dagger import MixedActor, check_beta, policy_for
from .perturb import PerturbingActor, check_rate
from .libero_hdf5 import POLICY_ORIENTATION, Demo, demo_names, write_demo

ATTEMPTS = "attempts.jsonl"
MANIFEST = "dataset.json"


@dataclass(frozen=True)
class EpisodeKey:
    """One demonstration: on official init state `init_state`, or (`scene` set) on a fresh scene drawn from LIBERO's
    placement distribution with a seed derived from (suite, task, scene). Variant 0 is the clean expert; variant
    v > 0 injects action noise (DART) from a seed derived from the key, and the stored `actions` stay the expert's
    clean commands. Every variant of a scene shares its scene."""

    suite: str
    task_id: int
    init_state: int | None
    variant: int
    scene: int | None = None

    @property
    def name(self) -> str:
        where = f"init{self.init_state}" if self.scene is None else f"scene{self.scene}"
        return f"{self.suite}/task{self.task_id}/{where}/v{self.variant}"

    @property
    def index(self) -> int:
        """The scene or init state index (the demo is `demo_{index * variants + variant}`)."""
        return self.init_state if self.scene is None else self.scene

    def noise_seed(self) -> int:
        if self.scene is None:
            parts = [zlib.crc32(self.suite.encode()), self.task_id, self.init_state, self.variant]
        else:
            parts = [zlib.crc32(b"fresh"), zlib.crc32(self.suite.encode()), self.task_id, self.scene, self.variant]
        return int(np.random.SeedSequence(parts).generate_state(1)[0])

    def scene_seed(self) -> int | None:
        """numpy seed of LIBERO's placement sampler for a fresh scene (None on an official init state)."""
        return None if self.scene is None else fresh_scene_seed(self.suite, self.task_id, self.scene)


@dataclass(frozen=True)
class CollectConfig:
    suite: str = "libero_spatial"
    tasks: tuple[int, ...] = (0,)
    init_states: tuple[int, ...] = tuple(range(30))
    # fresh scene indices; when given, episodes run on scenes drawn from LIBERO's placement distribution instead of
    # official init states (all 50 of which stay held out), and init_states must be empty
    fresh_scenes: tuple[int, ...] = ()
    variants: int = 2  # episodes per init state: 1 clean + (variants - 1) with injected noise
    noise_std: float = 0.3  # std of the injected noise on the 3 position actions (action units; 1 = 5 cm)
    protocol: str = "openpi"
    camera_size: int | None = None  # None = the protocol's render size
    fast_render: bool = True
    # the cameras render every `image_every`-th step only (the rest run physics alone; a render is most of a step's
    # time) and only those steps' images are stored (Demo.image_steps); 1: every step
    image_every: int = 1
    # images stored resized (with pad, as `policy.act` resizes them) to this many pixels square; None: as rendered
    image_size: int | None = None
    fast_reset: bool = True  # soft reset, seeded per episode: a demo's scene depends on its key only, never on order
    max_steps: int | None = None  # None = the protocol's limit for the suite
    workers: int = 2
    # DAgger (dagger.py): this policy drives, executing each chunk with probability 1 - dagger_beta, and the state
    # expert labels every visited state; demos are kept whether or not the episode succeeded
    dagger_checkpoint: str | None = None
    dagger_beta: float = 0.3
    # the driving policy's sampling noise, one number or one per action dim (policies/action_noise.py); None: the
    # checkpoint's declared `noise_scale`, else 1 (resolved here, so the manifest records what ran)
    dagger_noise_scale: float | tuple[float, ...] | None = None
    # the driving policy's chunks temporally ensembled with this decay (policies/temporal_ensemble.py); None: off
    dagger_ensemble: float | None = None
    # perturbed demonstrations (perturb.py): the state expert drives and labels every variant; variants > 0 replace
    # chunks with pushes and gripper flips at this rate per chunk; demos are kept whether or not they succeeded
    perturb_rate: float = 0.0
    # fresh scenes only: reject a scene in which some object moved more than this (metres, horizontally) while it
    # settled after LIBERO's draw, i.e. a draw whose objects interpenetrated (libero_scenes.settle_displacement);
    # None keeps every scene
    max_settle_m: float | None = None
    # the state expert (perturbed demos, DAgger) opens once the held object is within this of the target horizontally,
    # at its lowering height (envs/state_expert.py at_release_point); None: at its lowering waypoint within 1.5 cm
    release_xy_m: float | None = None
    # the state expert's upward speed (fraction of its full step) over the first 5 cm of a lift, so the rim pinch holds
    # (envs/state_expert.py cap_first_lift); None: full speed
    lift_speed: float | None = None
    # the state expert's lowering waypoint over the target, metres above the held object's grasp height there
    # (envs/state_expert.py lowering_waypoint): 0 sets the bowl down on the plate; None: 6 cm up, from which it falls
    place_height_m: float | None = None
    # actions of each chunk executed before the driving policy (DAgger) or the perturbation schedule is asked again;
    # None: the protocol's (openpi: 5), so rollouts match the eval they feed or stand in for
    replan: int | None = None

    def __post_init__(self) -> None:
        if self.fresh_scenes and self.init_states:
            raise ValueError("collect from official init states or from fresh scenes, not both "
                             f"(init_states={list(self.init_states)}, fresh_scenes={list(self.fresh_scenes)})")
        if self.dagger_checkpoint is not None:
            check_beta(self.dagger_beta)
        if self.dagger_noise_scale is not None:
            scale = check_noise_scale(self.dagger_noise_scale, "--dagger-noise-scale")
        elif self.dagger_checkpoint is not None:
            scale = resolved_noise_scale(self.dagger_checkpoint, None)
        else:
            scale = 1.0
        object.__setattr__(self, "dagger_noise_scale", scale)
        if self.dagger_ensemble is not None:
            if self.dagger_checkpoint is None or self.dagger_beta != 0:
                raise ValueError("--dagger-ensemble ensembles the driving policy's consecutive chunks; give --dagger "
                                 "with --dagger-beta 0 (an expert chunk would break the chunks' timeline)")
            check_decay(self.dagger_ensemble, "--dagger-ensemble")
        check_rate(self.perturb_rate)
        if isinstance(self.image_every, bool) or not isinstance(self.image_every, int) or self.image_every < 1:
            raise ValueError(f"--image-every must be an integer >= 1 (render every N-th step), got {self.image_every!r}")
        if self.image_every > 1 and self.dagger_checkpoint is not None:
            raise ValueError("--image-every > 1 renders some steps only, but a --dagger policy needs the cameras at "
                             "every step it is asked; use --image-every 1 with --dagger")
        if self.image_size is not None and (isinstance(self.image_size, bool) or not isinstance(self.image_size, int)
                                            or not 8 <= self.image_size <= 1024):
            raise ValueError(f"--image-size must be an integer in [8, 1024] pixels, got {self.image_size!r}")
        if self.perturb_rate and self.dagger_checkpoint is not None:
            raise ValueError("--perturb and --dagger both choose who drives; give one")
        if self.max_settle_m is not None:
            if not self.fresh_scenes:
                raise ValueError("--max-settle-cm filters fresh scenes; give --fresh-scenes with it")
            if not self.max_settle_m > 0:
                raise ValueError(f"--max-settle-cm must be > 0, got {self.max_settle_m * 100:g}")
        expert_flags = [flag for flag, value in (("--release-xy-cm", self.release_xy_m), ("--lift-speed", self.lift_speed),
                                                          ("--place-height-cm", self.place_height_m))
                        if value is not None]
        if expert_flags and not self.keeps_failures:
            raise ValueError(f"{' and '.join(expert_flags)} set the state expert; give --perturb or --dagger with it")
        if self.release_xy_m is not None and not 0 < self.release_xy_m < 0.04:  # beyond OVER_TARGET: not placing yet
            raise ValueError(f"--release-xy-cm must be in (0, 4), got {self.release_xy_m * 100:g}")
        if self.lift_speed is not None and not 0 < self.lift_speed < 1:
            raise ValueError(f"--lift-speed must be in (0, 1) (a fraction of the full step), got {self.lift_speed:g}")
        if self.place_height_m is not None and not 0 <= self.place_height_m < 0.15:  # below the carry height (OVER)
            raise ValueError(f"--place-height-cm must be in [0, 15), got {self.place_height_m * 100:g}")
        if self.replan is not None:
            if not self.keeps_failures:
                raise ValueError("--replan sets how much of each chunk the driver executes; give --perturb or --dagger "
                                 "with it")
            from oxygen_gym.envs.protocols import check_replan

            check_replan(self.replan)

    def executed_per_chunk(self) -> int:
        """Actions of each chunk run before the driver is asked again: `replan`, else the protocol's."""
        from oxygen_gym.envs.protocols import get_libero_protocol

        return get_libero_protocol(self.protocol).replan if self.replan is None else self.replan

    @property
    def keeps_failures(self) -> bool:
        """Whether a demo that failed is kept: yes when the state expert labels it (its labels hold off its path)."""
        return self.dagger_checkpoint is not None or self.perturb_rate > 0

    def episodes(self) -> list[EpisodeKey]:
        if self.fresh_scenes:
            return [EpisodeKey(self.suite, t, None, v, scene=k) for t in self.tasks for k in self.fresh_scenes
                    for v in range(self.variants)]
        return [EpisodeKey(self.suite, t, i, v) for t in self.tasks for i in self.init_states for v in range(self.variants)]

    def to_json(self) -> dict:
        d = asdict(self)
        d["tasks"], d["init_states"], d["fresh_scenes"] = list(self.tasks), list(self.init_states), list(self.fresh_scenes)
        if isinstance(self.dagger_noise_scale, tuple):
            d["dagger_noise_scale"] = list(self.dagger_noise_scale)
        return d


def task_file(out: Path, suite: str, task_id: int) -> Path:
    return out / f"{suite}_task{task_id}_demo.hdf5"


# ------------------------------------------------------------------------------------------------ worker side
_ENV: dict = {}


def _env_for(cfg: CollectConfig, task_id: int):
    import gymnasium as gym

    import oxygen_gym.envs  # noqa: F401  registers the ids

    # every setting the env is built with: two collections in one process (tests, notebooks) must not share an env
    # built for the other's render size or step limit
    key = (cfg.suite, task_id, cfg.protocol, cfg.camera_size, cfg.fast_render, cfg.fast_reset, cfg.max_steps,
           cfg.image_every > 1)
    if _ENV.get("key") != key:
        if _ENV.get("env") is not None:
            _ENV["env"].close()
        _ENV["env"] = gym.make("oxygen_gym/LIBERO-v0", suite=cfg.suite, task_id=task_id, protocol=cfg.protocol,
                               camera_size=cfg.camera_size, fast_render=cfg.fast_render, fast_reset=cfg.fast_reset,
                               max_steps=cfg.max_steps, render_on_request=cfg.image_every > 1)
        _ENV["key"] = key
    return _ENV["env"]


def run_expert_episode(cfg: CollectConfig, key: EpisodeKey) -> tuple[EpisodeKey, Demo | None, dict]:
    """One expert episode (with `cfg.dagger_checkpoint`: one DAgger rollout); returns the demo (None when the
    expert failed or the scene is an official one) and its attempt record."""
    from oxygen_gym.engine.placement import place
    from oxygen_gym.envs.experts import PickPlaceExpert, SubtaskLabeller
    from oxygen_gym.envs.scene_memory import MemoryLabeller
    from oxygen_gym.envs.state_expert import StatePickPlaceExpert
    from oxygen_gym.envs.wrappers import request_render
    from oxygen_gym.model.image_resize import resize_with_pad

    place(processes=max(1, cfg.workers), simulator=True)  # engine/placement.py: 1 thread on a small share
    env = _env_for(cfg, key.task_id)
    t0 = time.perf_counter()
    if key.scene is None:
        options = {"init_state": key.init_state}
    else:
        options = {"scene_seed": key.scene_seed()}
    obs, info = env.reset(seed=env.unwrapped.protocol.seed, options=options)
    sim = env.unwrapped.libero_env.env
    scene_attrs = {} if key.scene is None else _fresh_scene_attrs(env.unwrapped, key)
    rejected = _rejection(cfg, scene_attrs)
    if rejected:
        return key, None, {"episode": key.name, **asdict(key), "success": False, "steps": 0, **scene_attrs,
                           "rejected": rejected, "seconds": 0.0}
    labeller, memory = SubtaskLabeller(sim), MemoryLabeller(sim)
    rng = np.random.default_rng(key.noise_seed())
    replan = cfg.executed_per_chunk()
    if cfg.perturb_rate > 0:
        expert = StatePickPlaceExpert(sim, cfg.release_xy_m, cfg.lift_speed, cfg.place_height_m)
        actor = None if key.variant == 0 else PerturbingActor(
            cfg.perturb_rate, replan, cfg.noise_std, rng)
    elif cfg.dagger_checkpoint is None:
        expert, actor = PickPlaceExpert(sim), None
    else:
        expert = StatePickPlaceExpert(sim, cfg.release_xy_m, cfg.lift_speed, cfg.place_height_m)
        policy = policy_for(cfg.dagger_checkpoint, cfg.protocol, cfg.dagger_noise_scale)
        if cfg.dagger_ensemble is not None:
            policy = TemporalEnsemble(policy, replan=replan, decay=cfg.dagger_ensemble)
        actor = MixedActor(policy, cfg.dagger_beta, replan, rng)
    steps: dict[str, list] = {k: [] for k in ("agentview", "wrist", "ee", "grip", "joints", "act", "exec", "states", "sub", "mem")}

    def stored(image: np.ndarray) -> np.ndarray:
        return image if cfg.image_size is None else resize_with_pad(image, cfg.image_size, cfg.image_size)

    done = False
    while not done:
        step = len(steps["act"])
        state = obs["state"]
        action = expert(state)
        if actor is not None:
            executed = actor(obs, action)
            expert.executed(executed)
        else:
            executed = action.copy()
            if key.variant > 0:
                executed[:3] = np.clip(executed[:3] + rng.normal(0.0, cfg.noise_std, 3), -1, 1)
        if step % cfg.image_every == 0:
            steps["agentview"].append(stored(obs["images"]["base"]))
            steps["wrist"].append(stored(obs["images"]["wrist"]))
        steps["ee"].append(state[:6])
        steps["grip"].append(state[6:8])
        steps["joints"].append(np.asarray(sim.robots[0]._joint_positions, np.float32))
        steps["act"].append(action)
        steps["exec"].append(executed)
        steps["states"].append(sim.sim.get_state().flatten())
        steps["sub"].append(labeller(state[:3], state[6:8]))
        steps["mem"].append(memory(state[:3], state[6:8]))
        if (step + 1) % cfg.image_every == 0:
            request_render(env)  # a no-op when the env renders every step (image_every 1)
        obs, _, terminated, truncated, info = env.step(executed)
        done = terminated or truncated
    record = {"episode": key.name, **asdict(key), "success": bool(info["is_success"]), "steps": int(info["step"]),
              "seconds": round(time.perf_counter() - t0, 2), **scene_attrs}
    extra = {}
    if isinstance(actor, MixedActor):
        extra = {"dagger_beta": cfg.dagger_beta, "dagger_noise_scale": cfg.dagger_noise_scale,
                 **({} if cfg.dagger_ensemble is None else {"dagger_ensemble": cfg.dagger_ensemble}),
                 "policy_steps": actor.policy_steps, "replan": replan}
    elif isinstance(actor, PerturbingActor):
        extra = {"perturb_rate": cfg.perturb_rate, "perturbations": actor.perturbations,
                 "perturbed_steps": actor.perturbed_steps, "replan": replan}
    record.update(extra)
    if not info["is_success"] and not cfg.keeps_failures:
        return key, None, record
    demo = Demo(
        agentview=np.stack(steps["agentview"]), wrist=np.stack(steps["wrist"]),
        ee_states=np.stack(steps["ee"]).astype(np.float32), gripper_states=np.stack(steps["grip"]).astype(np.float32),
        joint_states=np.stack(steps["joints"]), actions=np.stack(steps["act"]).astype(np.float32),
        executed_actions=np.stack(steps["exec"]).astype(np.float32), states=np.stack(steps["states"]),
        subtasks=steps["sub"], memory=steps["mem"],
        image_steps=None if cfg.image_every == 1 else np.arange(0, len(steps["act"]), cfg.image_every),
        attrs={**({"init_state": key.init_state} if key.scene is None else scene_attrs),
               "variant": key.variant, "episode": key.name,
               "noise_std": cfg.noise_std if key.variant and not isinstance(actor, MixedActor) else 0.0,
               "seed": int(env.unwrapped.protocol.seed), **extra,
               **({"success": bool(info["is_success"])} if cfg.keeps_failures else {}),
               "language": env.unwrapped.language, "task_name": env.unwrapped.task_name},
    )
    return key, demo, record


def _rejection(cfg: CollectConfig, scene_attrs: dict) -> str | None:
    """Why a fresh scene is not collected, or None: it is an official init state (they stay held out), or, with
    `max_settle_m`, its draw interpenetrated and an object moved too far while settling."""
    if scene_attrs.get("official_distance_m", 1.0) < SAME_SCENE_M:  # LIBERO drew an official scene: keep it held out
        return "the scene equals an official init state"
    moved = scene_attrs.get("settle_moved_m")
    if cfg.max_settle_m is not None and moved is not None and moved > cfg.max_settle_m:
        return (f"{scene_attrs['settle_moved_object']} moved {moved * 100:.1f} cm while the scene settled "
                f"(--max-settle-cm {cfg.max_settle_m * 100:g})")
    return None


def _fresh_scene_attrs(env, key: EpisodeKey) -> dict:
    """What a fresh scene's demo records: its index and seed, the objects' drawn positions, the official init
    state nearest to it (compared, not assumed: libero_scenes.py), and how far the objects moved while settling."""
    from oxygen_gym.envs.libero_scenes import (distance_to_official, object_qpos_slices, object_positions,
                                               official_positions, scene_positions, settle_displacement)

    sim = env.libero_env.env
    slices = object_qpos_slices(sim)
    names = list(slices)
    drawn = object_positions(env.start_qpos, slices)
    nearest, distance = distance_to_official(drawn, official_positions(sim, env.init_states))
    moved_index, moved = settle_displacement(drawn, scene_positions(sim))
    return {"scene": key.scene, "scene_seed": key.scene_seed(), "object_names": names,
            "object_positions": drawn.round(6).tolist(), "official_nearest": nearest,
            "official_distance_m": round(distance, 6), "settle_moved_object": names[moved_index],
            "settle_moved_m": round(moved, 6)}


def _worker(args):
    cfg, key = args
    return run_expert_episode(cfg, key)


# ------------------------------------------------------------------------------------------------ parent side
def _done_episodes(out: Path) -> set[str]:
    log = out / ATTEMPTS
    done = set()
    if log.is_file():
        for line in log.read_text().splitlines():
            try:
                done.add(json.loads(line)["episode"])
            except (json.JSONDecodeError, KeyError):
                continue  # a line torn by a killed run: that episode runs again
    return done


def _file_attrs(cfg: CollectConfig, task_id: int) -> dict:
    from oxygen_gym.envs.libero import load_suite

    task = load_suite(cfg.suite).get_task(task_id)
    return {
        "env_name": "LIBERO-v0", "problem_info": {"language_instruction": task.language, "problem_name": task.name},
        "bddl_file_name": f"{task.problem_folder}/{task.bddl_file}", "suite": cfg.suite, "task_id": task_id,
        "image_orientation": POLICY_ORIENTATION, "env_args": cfg.to_json(),
    }


def collect(cfg: CollectConfig, out: str | Path, progress: bool = True) -> dict:
    """Run every not-yet-attempted episode of `cfg`; returns counts. Results land on disk as each episode ends."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    manifest = out / MANIFEST
    if manifest.is_file():
        old = json.loads(manifest.read_text())["config"]
        if old.get("dagger_open_confirm") is not None:  # an option taken out of the package (experiments/options/)
            raise ValueError(f"--out {out} was collected with --dagger-open-confirm, an option no longer in the package; "
                             "use another --out")
        keep = ("suite", "variants", "noise_std", "protocol", "camera_size", "fast_render", "image_every", "image_size",
                "fast_reset", "max_steps",
                "dagger_checkpoint", "dagger_beta", "dagger_noise_scale", "dagger_ensemble", "perturb_rate",
                "max_settle_m",
                "release_xy_m", "lift_speed", "place_height_m", "replan")
        if bool(old.get("fresh_scenes")) != bool(cfg.fresh_scenes):
            raise ValueError(f"--out {out} holds a collection from "
                             f"{'fresh scenes' if old.get('fresh_scenes') else 'official init states'}; use another folder")
        defaults = CollectConfig().to_json()
        diff = {k: (old.get(k, defaults[k]), cfg.to_json()[k]) for k in keep if old.get(k, defaults[k]) != cfg.to_json()[k]}
        if diff:
            raise ValueError(f"--out {out} holds a collection with other settings {diff}; use another folder")
    attempted = _done_episodes(out)
    pending = [k for k in cfg.episodes() if k.name not in attempted]
    before = json.loads(manifest.read_text()) if manifest.is_file() else {}
    all_inits = sorted(set(cfg.init_states) | set(before.get("init_states", [])))
    all_scenes = sorted(set(cfg.fresh_scenes) | set(before.get("fresh_scenes", [])))
    manifest.write_text(json.dumps({"config": cfg.to_json(), "init_states": all_inits, "fresh_scenes": all_scenes,
                                    "tasks": sorted(set(cfg.tasks) | set(before.get("tasks", []))),
                                    "format": "LIBERO HDF5 (train/collect/libero_hdf5.py)"}, indent=1))
    counts = {"attempted_before": len(attempted), "ran": 0, "kept": 0, "failed": 0, "succeeded": 0}
    if not pending:
        return counts
    attrs = {t: _file_attrs(cfg, t) for t in sorted({k.task_id for k in pending})}
    bar = tqdm(total=len(cfg.episodes()), initial=len(cfg.episodes()) - len(pending), desc="collect", unit="ep",
               disable=not progress, dynamic_ncols=True)
    ctx = mp.get_context("spawn")
    jobs = [(cfg, k) for k in pending]
    pool = ctx.Pool(cfg.workers, maxtasksperchild=None) if cfg.workers > 1 else None
    results = pool.imap_unordered(_worker, jobs) if pool else map(_worker, jobs)
    try:
        with open(out / ATTEMPTS, "a") as log:
            for key, demo, record in results:
                counts["ran"] += 1
                counts["succeeded"] += bool(record["success"])
                if demo is not None:
                    path = task_file(out, key.suite, key.task_id)
                    index = key.index * cfg.variants + key.variant
                    write_demo(path, f"demo_{index}", demo, attrs[key.task_id])
                    counts["kept"] += 1
                else:
                    counts["failed"] += 1
                log.write(json.dumps(record) + "\n")
                log.flush()
                os.fsync(log.fileno())
                bar.update(1)
                bar.set_postfix_str(f"kept {counts['kept']} succeeded {counts['succeeded']}", refresh=False)
    finally:
        bar.close()
        if pool:
            pool.terminate()
    return counts


def dataset_demos(out: str | Path) -> dict[Path, list[str]]:
    """Every task file of a collection folder and its complete demos."""
    return {p: demo_names(p) for p in sorted(Path(out).glob("*_demo.hdf5"))}
