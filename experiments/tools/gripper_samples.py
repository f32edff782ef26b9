"""Is a policy's "open" while carrying one unlucky noise draw, or what the policy means at that state?

Reads rollouts recorded by `oxygen-gym collect libero ... --dagger CHECKPOINT --dagger-beta 0` and, at each policy
frame (every `--replan` steps, as the rollout asked the policy) whose sim-state subtask is carry, place or release,
asks `--checkpoint` again on the recorded observation with `--samples` different noise seeds. Per frame: the share of
the first `--replan` gripper commands that are "open" (robosuite's Panda gripper moves on the command's sign, -1
open), averaged over the samples, beside whether the rollout itself executed an open there. A frame whose executed
open has a low sample share was an unlucky draw (more samples or a vote would have kept it closed); a high share is
the policy's decision. Not in CI: an analysis tool whose numbers are in experiments/libero-spatial-log.md.

    python experiments/tools/gripper_samples.py data/fresh-check/libero_spatial_task0_demo.hdf5 --checkpoint libero-spatial
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np

from oxygen_gym.eval.libero.failure_modes import phase
from oxygen_gym.policies.action_noise import noise_scale_arg
from oxygen_gym.train.collect.libero_hdf5 import Demo, demo_names, read_demos
from oxygen_gym.train.open_loop import GRIPPER_DIM

PHASES = ("carry", "place", "release")


def recorded_obs(demo: Demo, t: int) -> dict:
    """The observation the rollout's policy got at step `t` (what collect's MixedActor passed to act())."""
    state = np.concatenate([demo.ee_states[t], demo.gripper_states[t]]).astype(np.float32)
    return {"images": {"base": demo.agentview[t], "wrist": demo.wrist[t]}, "state": state,
            "prompt": str(demo.attrs["language"])}


def open_share(policy, obs: dict, samples: int, replan: int) -> float:
    """Mean over `samples` noise seeds of the share of the chunk's first `replan` gripper commands that open."""
    shares = []
    for s in range(samples):
        policy.reset(seed=1000 + s)
        actions, _ = policy.act(obs)
        shares.append(float((np.asarray(actions)[:replan, GRIPPER_DIM] < 0).mean()))
    return float(np.mean(shares))


def analyse(path: Path, policy, samples: int, replan: int) -> list[dict]:
    frames = []
    for name in demo_names(path):  # one demo in memory at a time (read_demos: images in policy orientation)
        (demo,) = read_demos(path, [name])
        phases = [phase(s) for s in demo.subtasks]
        executed = demo.executed_actions[:, GRIPPER_DIM]
        for t in range(0, len(phases), replan):
            if phases[t] in PHASES:
                frames.append({"demo": name, "step": t, "phase": phases[t],
                               "executed_open": bool((executed[t:t + replan] < 0).any()),
                               "sample_open_share": round(open_share(policy, recorded_obs(demo, t), samples, replan), 4)})
    return frames


def summary(frames: list[dict]) -> dict:
    """Per phase: frames, frames whose rollout executed an open, and those frames' sample shares (sorted)."""
    out = {}
    for p in PHASES:
        rows = [r for r in frames if r["phase"] == p]
        opened = sorted(r["sample_open_share"] for r in rows if r["executed_open"])
        out[p] = {"frames": len(rows), "executed_open": len(opened),
                  "executed_open_with_share_below_0.25": sum(s < 0.25 for s in opened),
                  "mean_share": round(float(np.mean([r["sample_open_share"] for r in rows])), 4) if rows else None,
                  "shares_where_executed_open": opened}
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("hdf5", type=Path)
    parser.add_argument("--checkpoint", required=True, help="the policy that drove the rollouts (or another one)")
    parser.add_argument("--samples", type=int, default=12, help="noise seeds per frame")
    parser.add_argument("--noise-scale", type=noise_scale_arg, default=None, metavar="S",
                        help="the policy's sampling noise (default: the checkpoint's declaration; 1 repeats the "
                             "log's runs, made before libero-spatial declared one)")
    parser.add_argument("--replan", type=int, default=5, help="steps executed per policy call (openpi's LIBERO: 5)")
    parser.add_argument("--json", type=Path, help="write every frame and the summary here")
    args = parser.parse_args()
    if args.samples < 1 or args.replan < 1:
        parser.error(f"--samples and --replan must be >= 1, got {args.samples} and {args.replan}")
    from oxygen_gym import MultiTaskPolicy
    from oxygen_gym.envs.protocols import get_libero_protocol

    policy = MultiTaskPolicy.from_pretrained(args.checkpoint, robot="libero", tasks=[], seed=0,
                                             image_resize=get_libero_protocol("openpi").image_resize,
                                             noise_scale=args.noise_scale)
    frames = analyse(args.hdf5, policy, args.samples, args.replan)
    result = summary(frames)
    print(json.dumps(result, indent=1))
    if args.json:
        args.json.write_text(json.dumps({"summary": result, "frames": frames}, indent=1))


if __name__ == "__main__":
    main()
