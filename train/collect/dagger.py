"""DAgger rollouts: a trained policy drives, the state expert labels every state the episode visits.

Behaviour cloning from expert demonstrations never sees the states a policy reaches after its own small errors (an
overshoot past the bowl, a drift off the table), so those errors compound in closed loop. Here each action chunk is
executed by the policy with probability 1 - beta and by the expert otherwise (the beta-mixture of Ross et al., 2011,
"A Reduction of Imitation Learning ... to No-Regret Online Learning"), and every visited state is stored with the
expert's action for it (`StatePickPlaceExpert`, whose phase is read from sim state, so its label is right off its own
path). The stored `actions` are the labels, `executed_actions` what ran; a demo is kept whether or not the episode
succeeded, since its labels are the expert's either way.
"""
from __future__ import annotations

import numpy as np

_POLICY: dict = {}


def check_beta(beta: float) -> None:
    if not 0.0 <= beta < 1.0:
        raise ValueError(f"--dagger-beta must be in [0, 1) (1 would be plain expert collection), got {beta}")


def policy_for(checkpoint: str, protocol: str, noise_scale: float = 1.0):
    """The driving policy of this worker process (a checkpoint folder or a built-in name), built once (actions
    only: no language tasks), sampling with `noise_scale` (policies/action_noise.py)."""
    if _POLICY.get("key") != (checkpoint, protocol, noise_scale):
        from oxygen_gym import MultiTaskPolicy
        from oxygen_gym.envs.protocols import get_libero_protocol

        _POLICY["policy"] = MultiTaskPolicy.from_pretrained(
            checkpoint, robot="libero", tasks=[], seed=0,
            image_resize=get_libero_protocol(protocol).image_resize,  # as eval feeds it (eval_config.overrides)
            noise_scale=noise_scale)
        _POLICY["key"] = (checkpoint, protocol, noise_scale)
    return _POLICY["policy"]


class MixedActor:
    """Chooses who executes each chunk of `replan` steps: the expert (probability beta) or the policy, whose chunk
    is asked for on the chunk's first observation, as eval's openpi loop asks (envs/episode.py run_episode)."""

    def __init__(self, policy, beta: float, replan: int, rng: np.random.Generator) -> None:
        self.policy, self.beta, self.replan, self.rng = policy, beta, replan, rng
        self.queue: list[np.ndarray | None] = []  # the chunk's actions still to run; None = the expert's label
        self.policy_steps = 0
        policy.reset(seed=int(rng.integers(2**31)))  # the policy's noise depends on the episode's key, not on order

    def __call__(self, obs: dict, label: np.ndarray) -> np.ndarray:
        """The action to execute at this step, given the expert's `label` for the same state."""
        if not self.queue:
            if self.rng.random() < self.beta:
                self.queue = [None] * self.replan
            else:
                actions, _ = self.policy.act(obs)
                if len(actions) < self.replan:
                    raise ValueError(f"the driving policy returned {len(actions)} actions but --replan is "
                                     f"{self.replan}; lower --replan")
                self.queue = [np.asarray(a, np.float32) for a in np.asarray(actions)[: self.replan]]
        action = self.queue.pop(0)
        if action is None:
            return label.copy()
        self.policy_steps += 1
        return action
