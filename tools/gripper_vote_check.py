"""Would a vote over several noise samples keep the gripper closed through the carry? A closed-loop experiment.

The fresh-scene check of docs/libero-spatial.md (`oxygen-gym collect libero ... --dagger CHECKPOINT --dagger-beta
0`: the policy alone, eval's openpi loop, full render), with the driving policy asked `--samples` times per frame
(different noise seeds, the first the rollout's own): the arm follows the first sample, the gripper command is the
mean of the samples' (its sign is the majority's). One worker in this process, so the patched driver holds; run
several ranges side by side, each with its own `--out`. Not in CI, not a feature: it measured worse (the card says
why).

    python tools/gripper_vote_check.py --checkpoint libero-spatial --fresh-scenes 1000-1012 --out data/vote-a
"""
from __future__ import annotations

import argparse
import json

import numpy as np

from oxygen_gym.train.collect import collector
from oxygen_gym.train.collect.collect_command import parse_range
from oxygen_gym.train.collect.dagger import policy_for
from oxygen_gym.train.open_loop import GRIPPER_DIM


class GripperVote:
    """A policy whose gripper command is the mean over `samples` noise seeds of the same frame's chunk."""

    def __init__(self, policy, samples: int) -> None:
        self.policy, self.samples = policy, samples

    def reset(self, seed: int | None = None) -> None:
        self.policy.reset(seed=seed)

    def act(self, obs: dict):
        p = self.policy
        frame, seed = p.frame, p.seed
        chunks = []
        for s in range(self.samples):
            p.seed, p.frame = seed + 7919 * s, frame  # sample 0 is exactly what the policy alone would return
            actions, _ = p.act(obs)
            chunks.append(np.asarray(actions, np.float32))
        p.seed, p.frame = seed, frame + 1
        stacked = np.stack(chunks)
        out = stacked[0].copy()
        out[:, GRIPPER_DIM] = stacked[:, :, GRIPPER_DIM].mean(0)
        return out, []


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--checkpoint", required=True)
    parser.add_argument("--fresh-scenes", required=True)
    parser.add_argument("--samples", type=int, default=8)
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    if args.samples < 1:
        parser.error(f"--samples must be >= 1, got {args.samples}")
    collector.policy_for = lambda checkpoint, protocol, noise_scale=1.0: GripperVote(
        policy_for(checkpoint, protocol, noise_scale), args.samples)
    cfg = collector.CollectConfig(suite="libero_spatial", tasks=(0,), init_states=(),
                                  fresh_scenes=parse_range(args.fresh_scenes, "--fresh-scenes"), variants=1,
                                  fast_render=False, workers=1, dagger_checkpoint=args.checkpoint, dagger_beta=0.0,
                                  max_settle_m=0.05)
    print(json.dumps(collector.collect(cfg, args.out, progress=True)))


if __name__ == "__main__":
    main()
