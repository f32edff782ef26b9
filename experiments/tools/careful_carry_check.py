"""Would a slower arm while the gripper is closed keep the rim pinch? A closed-loop experiment.

The state expert's pinch slips far less when it lifts slowly (experiments/libero-spatial-log.md, "A slower first lift"), and the
policy's drops come with the pinch already slipping ("A latched open"). Here the driving policy's translation
commands (LIBERO's OSC_POSE deltas, dims 0-2) are scaled by `--scale` at every step whose own gripper command closes
(> 0, robosuite's Panda gripper moves on the sign), i.e. while grasping and carrying; the approach and the release
run as the policy asked. With `--up-only` only upward commands (dim 2 > 0) are scaled: a slower lift, as the
expert's `--lift-speed`, with the carry across and the lowering over the plate at the policy's own speed; that is
policies/slow_lift.py `SlowLift`, eval's `--lift-scale`. The fresh-scene check of experiments/libero-spatial-log.md otherwise
(`oxygen-gym collect libero ... --dagger CHECKPOINT --dagger-beta 0`: the policy alone, eval's openpi loop, full
render). One worker in this process, so the patched driver holds; run several ranges side by side, each with its own
`--out`. Not in CI, not a feature.

    python experiments/tools/careful_carry_check.py --checkpoint libero-spatial --scale 0.5 --replan 3 --fresh-scenes 1000-1025 --out data/fc-carry05-1000-1025
"""
from __future__ import annotations

import argparse
import json

import numpy as np
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "options"))  # slow_lift.py left the package
from gripper_vote_check import add_noise_scale_argument, fresh_check_config  # noqa: E402

from slow_lift import SlowLift  # noqa: E402
from oxygen_gym.train.collect import collector
from oxygen_gym.train.collect.dagger import policy_for
from oxygen_gym.train.open_loop import GRIPPER_DIM


class SlowWhileClosed:
    """A policy whose translation commands are scaled by `scale` wherever its gripper command closes."""

    def __init__(self, policy, scale: float) -> None:
        self.policy, self.scale = policy, scale

    def reset(self, seed: int | None = None) -> None:
        self.policy.reset(seed=seed)

    def act(self, obs: dict):
        actions, updates = self.policy.act(obs)
        chunk = np.array(actions, copy=True)
        chunk[chunk[:, GRIPPER_DIM] > 0, :3] *= self.scale
        return chunk, updates


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--checkpoint", required=True)
    parser.add_argument("--fresh-scenes", required=True)
    parser.add_argument("--scale", type=float, required=True, help="factor on dims 0-2 while the gripper closes")
    parser.add_argument("--up-only", action="store_true", help="scale only upward commands (dim 2 > 0)")
    parser.add_argument("--replan", type=int, default=None, help="actions run per policy call (default: protocol's 5)")
    parser.add_argument("--out", required=True)
    add_noise_scale_argument(parser)
    args = parser.parse_args()
    if not 0 < args.scale <= 1:
        parser.error(f"--scale must be in (0, 1], got {args.scale}")
    wrap = (lambda p: SlowLift(p, scale=args.scale)) if args.up_only else (lambda p: SlowWhileClosed(p, args.scale))
    collector.policy_for = lambda checkpoint, protocol, noise_scale=1.0: wrap(policy_for(checkpoint, protocol, noise_scale))
    cfg = fresh_check_config(args.checkpoint, args.fresh_scenes, args.replan, args.noise_scale)
    print(json.dumps(collector.collect(cfg, args.out, progress=True)))


if __name__ == "__main__":
    main()
