"""Perturbed expert demonstrations: recovery data without a trained policy to drive.

DART-style noise (Laskey et al., 2017) only works while the expert's plan stays valid: `PickPlaceExpert` walks its
own phase sequence, so its noise is kept small (1.5 cm) and a perturbed episode that fails is dropped. A policy's
real errors are larger: it overshoots the bowl by centimetres, closes the gripper beside the rim, lets the bowl go in
transit (experiments/libero-spatial-log.md, failure counts of DAgger rounds 1 and 2). Here `StatePickPlaceExpert`,
whose phase is read from the sim state each step, drives and labels, and whole chunks of its actions are replaced by such
errors: a push of several centimetres in a random direction, or the gripper command flipped (a premature close
beside the bowl, an opening while carrying). Every visited state is stored with the expert's action for it, so the
data holds the approach to the bowl, the errors, and the expert's recovery from each.
"""
from __future__ import annotations

import numpy as np

PUSH_UNITS = (0.5, 1.0)  # magnitude of a push, action units per step (1 = 5 cm of OSC target offset)
PUSH_STEPS = (3, 8)  # length of one perturbation, steps (inclusive)
FLIP_SHARE = 0.35  # share of perturbations that also flip the gripper command


def check_rate(rate: float) -> None:
    if not 0.0 <= rate < 1.0:
        raise ValueError(f"--perturb must be in [0, 1) (the chance that a chunk starts a perturbation), got {rate}")


class PerturbingActor:
    """Executes the expert's `label` with DART noise, except that each chunk of `replan` steps starts, with
    probability `rate`, a perturbation of PUSH_STEPS steps: a constant push in a random direction, with the gripper
    command flipped in FLIP_SHARE of them. All randomness comes from `rng` (seeded by the episode's key)."""

    def __init__(self, rate: float, replan: int, noise_std: float, rng: np.random.Generator) -> None:
        check_rate(rate)
        self.rate, self.replan, self.noise_std, self.rng = rate, replan, noise_std, rng
        self.step = 0
        self.push: np.ndarray | None = None  # the running perturbation's position action
        self.flip = False
        self.left = 0  # steps of the running perturbation still to execute
        self.perturbed_steps = 0
        self.perturbations = 0

    def _start(self) -> None:
        direction = self.rng.normal(size=3)
        direction /= max(float(np.linalg.norm(direction)), 1e-9)
        self.push = (direction * self.rng.uniform(*PUSH_UNITS)).astype(np.float32)
        self.flip = bool(self.rng.random() < FLIP_SHARE)
        self.left = int(self.rng.integers(PUSH_STEPS[0], PUSH_STEPS[1] + 1))
        self.perturbations += 1

    def __call__(self, obs: dict, label: np.ndarray) -> np.ndarray:
        """The action to execute at this step, given the expert's `label` for the same state (`obs` unused: the
        same call as dagger.MixedActor)."""
        if self.left == 0 and self.step % self.replan == 0 and self.rng.random() < self.rate:
            self._start()
        self.step += 1
        executed = np.asarray(label, np.float32).copy()
        if self.left > 0:
            self.left -= 1
            self.perturbed_steps += 1
            executed[:3] = self.push
            if self.flip:
                executed[6] = -executed[6]
            return executed
        executed[:3] = np.clip(executed[:3] + self.rng.normal(0.0, self.noise_std, 3), -1, 1)
        return executed
