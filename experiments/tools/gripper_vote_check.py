"""Would a vote over several noise samples keep the gripper closed through the carry? A closed-loop experiment.

The fresh-scene check of experiments/libero-spatial-log.md (`oxygen-gym collect libero ... --dagger CHECKPOINT --dagger-beta
0`: the policy alone, eval's openpi loop, full render), with the driving policy asked `--samples` times per frame
(different noise seeds, the first the rollout's own): the arm follows the first sample, the gripper command is the
mean of the samples' (its sign is the majority's), or with `--open-votes K` the mean of the opening samples where at
least K of them command open (robosuite opens on a negative command) and of the closing ones elsewhere. One worker
in this process, so the patched driver holds; run several ranges side by side, each with its own `--out`. Not in CI,
not a feature: both measured no better (experiments/libero-spatial-log.md says why).

    python experiments/tools/gripper_vote_check.py --checkpoint libero-spatial --fresh-scenes 1000-1012 --out data/vote-a
    python experiments/tools/gripper_vote_check.py --checkpoint libero-spatial --replan 3 --open-votes 3 --fresh-scenes 1000-1012 --out data/vote3-a
"""
from __future__ import annotations

import argparse
import json

import numpy as np

from oxygen_gym.policies.action_noise import noise_scale_arg
from oxygen_gym.train.collect import collector
from oxygen_gym.train.collect.collect_command import parse_range
from oxygen_gym.train.collect.dagger import policy_for
from oxygen_gym.train.open_loop import GRIPPER_DIM


class GripperVote:
    """A policy whose gripper command is voted by `samples` noise seeds of the same frame's chunk: their mean, or
    with `open_votes` K the opening samples' mean where at least K open (the closing samples' elsewhere)."""

    def __init__(self, policy, samples: int, open_votes: int | None = None) -> None:
        self.policy, self.samples, self.open_votes = policy, samples, open_votes

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
        gripper = stacked[:, :, GRIPPER_DIM]  # (samples, steps)
        if self.open_votes is None:
            out[:, GRIPPER_DIM] = gripper.mean(0)
            return out, []
        opening = gripper < 0
        votes = opening.sum(0)
        open_mean = np.where(opening, gripper, 0).sum(0) / np.maximum(votes, 1)
        close_mean = np.where(opening, 0, gripper).sum(0) / np.maximum(self.samples - votes, 1)
        out[:, GRIPPER_DIM] = np.where(votes >= self.open_votes, open_mean, close_mean)
        return out, []


def fresh_check_config(checkpoint: str, fresh_scenes: str, replan: int | None,
                       noise_scale: float | tuple[float, ...] | None = None) -> collector.CollectConfig:
    """The fresh-scene check of experiments/libero-spatial-log.md as a collection: `checkpoint` drives alone (DAgger, beta 0) on
    libero_spatial task 0's `fresh_scenes`, one variant, full render, draws that threw an object > 5 cm skipped, one
    worker in this process (so a patched `collector.policy_for` holds). `noise_scale`: the driver's sampling noise
    (None: the checkpoint's declared one; the log's runs of these tools predate libero-spatial's declaration, so
    `1` repeats them)."""
    return collector.CollectConfig(suite="libero_spatial", tasks=(0,), init_states=(),
                                   fresh_scenes=parse_range(fresh_scenes, "--fresh-scenes"), variants=1,
                                   fast_render=False, workers=1, dagger_checkpoint=checkpoint, dagger_beta=0.0,
                                   dagger_noise_scale=noise_scale, max_settle_m=0.05, replan=replan)


def add_noise_scale_argument(parser: argparse.ArgumentParser) -> None:
    """`--noise-scale` of the fresh-scene check tools (see `fresh_check_config`)."""
    parser.add_argument("--noise-scale", type=noise_scale_arg, default=None, metavar="S",
                        help="the driving policy's sampling noise (default: the checkpoint's declaration; 1 repeats "
                             "the log's runs, made before libero-spatial declared one)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--checkpoint", required=True)
    parser.add_argument("--fresh-scenes", required=True)
    parser.add_argument("--samples", type=int, default=8)
    parser.add_argument("--open-votes", type=int, default=None,
                        help="open where at least this many samples command open (default: the mean's sign)")
    parser.add_argument("--replan", type=int, default=None, help="actions run per policy call (default: protocol's 5)")
    parser.add_argument("--out", required=True)
    add_noise_scale_argument(parser)
    args = parser.parse_args()
    if args.samples < 1:
        parser.error(f"--samples must be >= 1, got {args.samples}")
    if args.open_votes is not None and not 1 <= args.open_votes <= args.samples:
        parser.error(f"--open-votes must be between 1 and --samples ({args.samples}), got {args.open_votes}")
    collector.policy_for = lambda checkpoint, protocol, noise_scale=1.0: GripperVote(
        policy_for(checkpoint, protocol, noise_scale), args.samples, args.open_votes)
    cfg = fresh_check_config(args.checkpoint, args.fresh_scenes, args.replan, args.noise_scale)
    print(json.dumps(collector.collect(cfg, args.out, progress=True)))


if __name__ == "__main__":
    main()
