"""How often does the clean state expert's grasp slip? Runs `StatePickPlaceExpert` alone (no noise) on fresh scenes and
counts its grasps (runs of the "close" phase: a second one means the first rim pinch slipped or the bowl fell) and its
opens, with the collection's release and lift settings. Physics only (64 px fast render: the expert reads sim state,
not images). Prints one JSON line per scene, then a summary per task. Not in CI.

    python tools/expert_grasps.py --fresh-scenes 0-2,6,11-13,16-18 --lift-speed 0.3
    python tools/expert_grasps.py --task 3 --fresh-scenes 0-9      # another libero_spatial task
    python tools/expert_grasps.py --task 0-9 --fresh-scenes 0-5 --lift-speed 0.5 --log runs.jsonl  # resumable

With `--trace FILE`, every step's phase, eef, finger gap, object pose and target are appended to FILE (JSON lines),
to see why a scene fails. With `--log`, each scene's line is appended to that file as it finishes, and scenes already in it (same task, scene
and settings) are not run again, so a long run stopped part way resumes where it stopped.
"""
from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np


def run_scene(env, scene: int, release_xy: float | None, lift_speed: float | None, task: int = 0,
              trace: Path | None = None) -> dict:
    from oxygen_gym.envs.state_expert import StatePickPlaceExpert
    from oxygen_gym.train.collect import EpisodeKey

    seed = EpisodeKey("libero_spatial", task, None, 0, scene=scene).scene_seed()  # the collection's scene for that key
    obs, _ = env.reset(seed=env.unwrapped.protocol.seed, options={"scene_seed": seed})  # as collect resets
    expert = StatePickPlaceExpert(env.unwrapped.libero_env.env, release_xy, lift_speed)
    phases, grips, done, start, rows = [], [], False, time.time(), []
    while not done:
        action = expert(obs["state"])
        phases.append(expert.phase)
        grips.append(float(action[6]))
        if trace is not None:
            rows.append(_trace_row(expert, obs["state"], action))
        obs, _, terminated, truncated, info = env.step(action)
        done = terminated or truncated
    if trace is not None:
        with trace.open("a") as f:
            f.writelines(json.dumps({"task": task, "scene": scene, "step": i, **r}) + "\n" for i, r in enumerate(rows))
    runs = [p for i, p in enumerate(phases) if i == 0 or p != phases[i - 1]]
    grip = np.array(grips)
    return {"task": task, "scene": scene, "success": bool(info["is_success"]), "steps": len(phases), "grasps": runs.count("close"),
            "opens": int(np.sum((grip[:-1] > 0) & (grip[1:] < 0))), "seconds": round(time.time() - start, 1)}


def _trace_row(expert, state: np.ndarray, action: np.ndarray) -> dict:
    """One step of the expert as it saw it: its phase, the eef, the finger gap, the object's pose (centre and
    quaternion, w first) and the target's centre, and the action it sent."""
    sim = expert.sim.sim
    body = expert.sim.obj_body_id[expert.obj]

    def r(x) -> list:
        return [round(float(v), 4) for v in x]

    return {"phase": expert.phase, "eef": r(state[:3]), "gap": round(float(state[6] - state[7]), 4),
            "obj": r(sim.data.body_xpos[body]), "quat": r(sim.data.body_xquat[body]),
            "target": r(expert._pos(expert.target)), "rest_z": round(expert.rest_z, 4), "action": r(action)}


def main() -> None:
    from oxygen_gym.train.collect.collect_command import parse_range

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--task", default="0", help="libero_spatial task ids, e.g. 4 or 0-9 (default 0)")
    parser.add_argument("--fresh-scenes", required=True, help="e.g. 0-2,6,11-13")
    parser.add_argument("--release-xy-cm", type=float, default=None, metavar="CM")
    parser.add_argument("--lift-speed", type=float, default=None, metavar="FRAC")
    parser.add_argument("--log", type=Path, default=None, help="JSON lines file to append to and resume from")
    parser.add_argument("--trace", type=Path, default=None,
                        help="JSON lines file to append every step to (phase, eef, finger gap, object pose, target)")
    args = parser.parse_args()
    tasks = [t for part in args.task.split(",") for t in parse_range(part, "--task")]
    scenes = [s for part in args.fresh_scenes.split(",") for s in parse_range(part, "--fresh-scenes")]
    settings = {"release_xy_cm": args.release_xy_cm, "lift_speed": args.lift_speed}
    done = {}
    if args.log is not None and args.log.is_file():
        for line in args.log.read_text().splitlines():
            row = json.loads(line)
            if all(row.get(k) == v for k, v in settings.items()):
                done[row["task"], row["scene"]] = row
    import gymnasium as gym

    import oxygen_gym.envs  # noqa: F401

    for task in tasks:
        rows = [done[task, s] for s in scenes if (task, s) in done]
        todo = [s for s in scenes if (task, s) not in done]
        env = gym.make("oxygen_gym/LIBERO-v0", suite="libero_spatial", task_id=task, camera_size=64,
                       fast_render=True, fast_reset=True) if todo else None
        try:
            for scene in todo:
                rows.append({**run_scene(env, scene, None if args.release_xy_cm is None else args.release_xy_cm / 100,
                                         args.lift_speed, task, args.trace), **settings})
                print(json.dumps(rows[-1]), flush=True)
                if args.log is not None:
                    with args.log.open("a") as f:
                        f.write(json.dumps(rows[-1]) + "\n")
        finally:
            if env is not None:
                env.close()
        print(json.dumps({"task": task, "scenes": len(rows), "succeeded": sum(r["success"] for r in rows),
                          "regrasped": sum(r["grasps"] > 1 for r in rows),
                          "mean_steps": float(np.mean([r["steps"] for r in rows])),
                          "mean_seconds": float(np.mean([r["seconds"] for r in rows])), **settings}), flush=True)


if __name__ == "__main__":
    main()
