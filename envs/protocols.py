"""LIBERO evaluation protocols: the numbers two reference evaluations use, kept in one place so the env, the eval
CLI and users read the same values (each preset's `source` names the upstream code its numbers come from).

openpi (`examples/libero/main.py`) and lerobot (`lerobot-eval`) disagree on the step limits, the replan interval, the
render size and the seed, so both are offered as presets. Both give the policy `max_steps` actions after the wait:
openpi counts its wait steps in its step counter `t` but loops while `t < max_steps + wait`; lerobot waits inside
`reset()` and counts only policy steps.
"""
from __future__ import annotations

from dataclasses import dataclass
from types import MappingProxyType
from typing import Mapping

from oxygen_gym.policies.robots.libero_robot import STILL_ACTION

# The no-op LIBERO action both references step while objects settle after a reset: zero motion, gripper open (the
# robot's still action, policies/robots/libero_robot.py, where holding starts too).
LIBERO_WAIT_ACTION: tuple[float, ...] = STILL_ACTION

LIBERO_SUITES: tuple[str, ...] = ("libero_spatial", "libero_object", "libero_goal", "libero_10", "libero_90")


@dataclass(frozen=True)
class LiberoProtocol:
    """One reference evaluation's settings for LIBERO."""

    name: str
    replan: int  # actions of each predicted chunk executed before the policy is called again
    wait_steps: int  # no-op steps after reset while objects settle
    wait_counted: bool  # whether the reference counts wait steps in its step counter (see module docstring)
    max_steps: Mapping[str, int]  # policy steps allowed per suite
    render_size: int  # square camera resolution the reference renders at
    policy_image_size: int | None  # size the reference resizes (with padding) to before the model; None = model's own
    seed: int
    episodes_per_task: int = 50
    success_from: str = "done"  # "done" (env's done flag) or "check_success"; identical in LIBERO, recorded for reports
    source: str = ""
    # lerobot-eval executes every action the policy returns (select_action's queue of n_action_steps); openpi's client
    # executes `replan` of the chunk
    replan_from_policy: bool = False
    image_resize: str = "pil"  # how the reference resizes camera images for the model (prompt.preprocess_image)

    def max_steps_for(self, suite: str) -> int:
        """Policy step limit for `suite`; suites derived from a standard one (e.g. LIBERO-PRO's
        `libero_spatial_with_mug`) inherit its limit."""
        if suite in self.max_steps:
            return self.max_steps[suite]
        for base in sorted(self.max_steps, key=len, reverse=True):
            if suite.startswith(base + "_"):
                return self.max_steps[base]
        raise ValueError(
            f"suite {suite!r} has no step limit in protocol {self.name!r} "
            f"(known: {', '.join(self.max_steps)}); pass max_steps=N explicitly"
        )

    def to_dict(self) -> dict:
        """JSON-friendly copy for result files."""
        return {
            "name": self.name, "replan": self.replan, "wait_steps": self.wait_steps, "wait_counted": self.wait_counted,
            "max_steps": dict(self.max_steps), "render_size": self.render_size,
            "policy_image_size": self.policy_image_size, "seed": self.seed,
            "episodes_per_task": self.episodes_per_task, "success_from": self.success_from, "source": self.source,
            "replan_from_policy": self.replan_from_policy, "image_resize": self.image_resize,
        }


def _frozen(d: dict[str, int]) -> Mapping[str, int]:
    return MappingProxyType(dict(d))


LIBERO_PROTOCOLS: Mapping[str, LiberoProtocol] = MappingProxyType({
    "openpi": LiberoProtocol(
        name="openpi", replan=5, wait_steps=10, wait_counted=True,
        max_steps=_frozen({"libero_spatial": 220, "libero_object": 280, "libero_goal": 300, "libero_10": 520,
                           "libero_90": 400}),
        render_size=256, policy_image_size=224, seed=7, success_from="done",
        source="openpi examples/libero/main.py",
    ),
    "lerobot": LiberoProtocol(
        name="lerobot", replan=10, wait_steps=10, wait_counted=False,
        max_steps=_frozen({"libero_spatial": 280, "libero_object": 280, "libero_goal": 300, "libero_10": 520,
                           "libero_90": 400}),
        render_size=360, policy_image_size=None, seed=1000, success_from="check_success",
        source="lerobot lerobot-eval (envs/libero.py)", replan_from_policy=True, image_resize="torch",
    ),
})


def check_replan(value: object) -> int:
    """A `--replan` override (eval and collection): actions of each chunk executed per policy call, an int >= 1."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"--replan must be an integer >= 1 (actions executed per policy call), got {value!r}")
    return value


def get_libero_protocol(protocol: str | LiberoProtocol) -> LiberoProtocol:
    """Resolve a preset name (or pass a custom LiberoProtocol through)."""
    if isinstance(protocol, LiberoProtocol):
        return protocol
    if not isinstance(protocol, str) or protocol not in LIBERO_PROTOCOLS:
        raise ValueError(f"protocol must be one of {sorted(LIBERO_PROTOCOLS)} or a LiberoProtocol, got {protocol!r}")
    return LIBERO_PROTOCOLS[protocol]


@dataclass(frozen=True)
class SimProtocol:
    """Closed-loop settings for the ALOHA and DROID-style envs, taken from openpi's own clients: the ALOHA sim example
    replans every 10 actions within gym-aloha's 300-step limit; the DROID client replans every 8 of 15 actions."""

    name: str
    replan: int
    max_steps: int
    render_size: int
    seed: int = 0
    source: str = ""

    def to_dict(self) -> dict:
        return {"name": self.name, "replan": self.replan, "max_steps": self.max_steps,
                "render_size": self.render_size, "seed": self.seed, "source": self.source}


ALOHA_PROTOCOL = SimProtocol(name="aloha", replan=10, max_steps=300, render_size=224,
                             source="openpi examples/aloha_sim (action_horizon=10), gym-aloha max_episode_steps=300")
DROID_PROTOCOL = SimProtocol(name="droid", replan=8, max_steps=300, render_size=224,
                             source="openpi examples/droid (open_loop_horizon=8); step limit ours (20 s at 15 Hz)")
