"""Does a chunk that opens the gripper mid-carry take the open back later in the same chunk, where a release keeps it?

If so, a filter could execute an open only when the chunk's own unexecuted tail keeps opening, sparing releases that
a latch across calls delays (experiments/libero-spatial-log.md, "A latched open"). Reads rollouts recorded by `oxygen-gym
collect libero ... --dagger CHECKPOINT --dagger-beta 0`; at each policy frame (every `--replan` steps) where the
rollout executed an open while its last command closed, in the carry, place or release phase (sim-state labels),
asks `--checkpoint` again on the recorded observation with `--samples` noise seeds. For every sample whose executed
part opens: the share of the rest of its chunk that opens, and whether the whole chunk's majority opens. Not in CI:
an analysis tool whose numbers are in experiments/libero-spatial-log.md.

    python experiments/tools/chunk_tail_opens.py data/fc-shipped-1000-1025/libero_spatial_task0_demo.hdf5 --checkpoint libero-spatial
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np
from gripper_samples import PHASES, recorded_obs

from oxygen_gym.eval.libero.failure_modes import phase
from oxygen_gym.policies.action_noise import noise_scale_arg
from oxygen_gym.train.collect.libero_hdf5 import read_demos
from oxygen_gym.train.open_loop import GRIPPER_DIM


def opening_frames(demo, replan: int) -> list[tuple[int, str]]:
    """(step, phase) of each policy frame whose executed commands open while the command before closed."""
    phases = [phase(s.decode() if isinstance(s, bytes) else str(s)) for s in demo.subtasks]
    grip = demo.executed_actions[:, GRIPPER_DIM]
    return [(t, phases[t]) for t in range(replan, len(grip), replan)
            if phases[t] in PHASES and grip[t - 1] > 0 and (grip[t:t + replan] < 0).any()]


def tails(policy, obs: dict, samples: int, replan: int) -> list[tuple[float, bool]]:
    """Per sample whose first `replan` commands open: (open share of the rest of the chunk, whole chunk opens by
    majority)."""
    out = []
    for s in range(samples):
        policy.reset(seed=2000 + s)
        actions, _ = policy.act(obs)
        grip = np.asarray(actions)[:, GRIPPER_DIM]
        if (grip[:replan] < 0).any():
            out.append((float((grip[replan:] < 0).mean()), bool((grip < 0).mean() >= 0.5)))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("hdf5", type=Path, nargs="+")
    parser.add_argument("--checkpoint", default="libero-spatial")
    parser.add_argument("--samples", type=int, default=8, help="noise seeds per frame")
    parser.add_argument("--noise-scale", type=noise_scale_arg, default=None, metavar="S",
                        help="the policy's sampling noise (default: the checkpoint's declaration; 1 repeats the "
                             "log's runs, made before libero-spatial declared one)")
    parser.add_argument("--replan", type=int, default=3, help="actions the rollout executed per policy call")
    parser.add_argument("--json", type=Path, help="write the per-phase summary here")
    args = parser.parse_args()
    from oxygen_gym import MultiTaskPolicy
    from oxygen_gym.envs.protocols import get_libero_protocol

    policy = MultiTaskPolicy.from_pretrained(args.checkpoint, robot="libero", tasks=[], seed=0,
                                             image_resize=get_libero_protocol("openpi").image_resize,
                                             noise_scale=args.noise_scale)
    rows: dict[str, list[tuple[float, bool]]] = {p: [] for p in PHASES}
    for path in args.hdf5:
        for demo in read_demos(path):
            for t, p in opening_frames(demo, args.replan):
                rows[p] += tails(policy, recorded_obs(demo, t), args.samples, args.replan)
    summary = {}
    for p, r in rows.items():
        if r:
            tail = np.array([x[0] for x in r])
            summary[p] = {"opening_samples": len(r), "tail_open_share_mean": round(float(tail.mean()), 3),
                          "tail_open_share_quartiles": [round(float(q), 3) for q in np.quantile(tail, [.25, .5, .75])],
                          "whole_chunk_majority_opens": round(float(np.mean([x[1] for x in r])), 3)}
    print(json.dumps(summary, indent=1))
    if args.json:
        args.json.write_text(json.dumps(summary, indent=1))


if __name__ == "__main__":
    main()
