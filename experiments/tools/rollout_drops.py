"""Why a policy drops the object in transit: did it command the gripper open, or did the object slip from a closed one?

Reads rollouts recorded by `oxygen-gym collect libero ... --dagger CHECKPOINT --dagger-beta 0` (per control step:
`subtasks` from the sim-state labeller, `executed_actions` as sent to the env, `obs/gripper_states` finger joints).
A drop is a carry step followed by a reach or grasp one (the same rule as eval/libero/failure_modes.py, per step
here instead of per policy frame). It counts as `opened` when any executed gripper command in the `--window` steps
before it was negative (robosuite's Panda gripper moves on the command's sign, -1 open), else `closed`. Not in CI: an
analysis tool whose numbers are in experiments/libero-spatial-log.md.

    python experiments/experiments/tools/rollout_drops.py data/fresh-check/libero_spatial_task0_demo.hdf5 [--window 10] [--json out.json]
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path

import h5py
import numpy as np

from oxygen_gym.eval.libero.failure_modes import losses_of_hold, phase
from oxygen_gym.train.open_loop import GRIPPER_DIM


def drops_of_rollout(subtasks: list[str], gripper_commands: np.ndarray, window: int) -> list[dict]:
    """Each carry -> reach/grasp step of one rollout, with the executed gripper commands of the steps before it."""
    out = []
    for i in losses_of_hold([phase(s) for s in subtasks], "carry"):
        opens = int((gripper_commands[max(0, i - window):i] < 0).sum())
        out.append({"step": i, "kind": "opened" if opens else "closed", "open_commands": opens})
    return out


def carry_open_share(subtasks: list[str], gripper_commands: np.ndarray) -> tuple[int, int]:
    """(executed open commands, steps) over the rollout's carry steps."""
    carry = np.array([phase(s) == "carry" for s in subtasks], dtype=bool)
    return int((gripper_commands[carry] < 0).sum()), int(carry.sum())


def analyse(path: Path, window: int) -> dict:
    """Drops per rollout and in total, and the share of carry steps commanded open."""
    rollouts, carry_opens, carry_steps = {}, 0, 0
    with h5py.File(path, "r") as f:
        for name in sorted(f["data"], key=lambda n: int(n.rsplit("_", 1)[-1])):
            demo = f["data"][name]
            if "executed_actions" not in demo or "subtasks" not in demo:
                raise ValueError(f"{path}:{name} lacks executed_actions or subtasks (record with oxygen-gym collect)")
            subtasks = [s.decode() if isinstance(s, bytes) else str(s) for s in demo["subtasks"][()]]
            grip = demo["executed_actions"][()][:, GRIPPER_DIM]
            rollouts[name] = drops_of_rollout(subtasks, grip, window)
            o, s = carry_open_share(subtasks, grip)
            carry_opens, carry_steps = carry_opens + o, carry_steps + s
    kinds = [d["kind"] for drops in rollouts.values() for d in drops]
    opened, closed = kinds.count("opened"), kinds.count("closed")
    return {"rollouts": len(rollouts), "with_drop": sum(bool(d) for d in rollouts.values()), "drops": opened + closed,
            "opened": opened, "closed": closed, "carry_open_share": round(carry_opens / max(carry_steps, 1), 4),
            "window": window, "per_rollout": rollouts}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("hdf5", type=Path, nargs="+")
    parser.add_argument("--window", type=int, default=10, help="steps before a drop searched for an open command")
    parser.add_argument("--json", type=Path, help="write the full result here")
    args = parser.parse_args()
    if args.window < 1:
        parser.error(f"--window must be >= 1, got {args.window}")
    results = {str(p): analyse(p, args.window) for p in args.hdf5}
    for path, r in results.items():
        print(f"{path}: {r['rollouts']} rollouts, {r['with_drop']} with a drop; {r['drops']} drops: "
              f"{r['opened']} after an open command in the {r['window']} steps before, {r['closed']} with the gripper "
              f"commanded closed; {100 * r['carry_open_share']:.1f}% of carry steps commanded open")
    if args.json:
        args.json.write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
