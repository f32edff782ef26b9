"""What the generic evaluation loop asks of a simulator (eval/sims.py registers them): the plug-in interface, and the
run settings a plug-in reads, as a protocol, so the plug-ins depend on what they read, not on the eval config that
chooses among them (eval/libero/eval_config.py)."""
from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    import gymnasium as gym

    from .libero.episode_set import EpisodeSpec


class EvalSettings(Protocol):
    """The run settings a sim plug-in reads (an EvalConfig has them all)."""

    suites: Sequence[str]
    tasks: Sequence[int] | None
    episodes: int
    seeds: Sequence[int]
    init_states: Sequence[int] | None
    fresh_scenes: Sequence[int] | None
    protocol: str
    max_steps: int | None
    fast_render: bool
    fast_reset: bool
    rebuild_sim: bool
    render_every_step: bool


class SimPlugin:
    """What the generic loop asks of a simulator. Subclasses fill in every method."""

    name: str  # the sim's name on the command line and in config.json's `env`
    title: str  # how reports name it
    robot: str  # the policy's robot convention (policies/robots/<robot>_robot.py)
    protocols: tuple[str, ...]  # the protocol presets it accepts; the first is the default

    def check_protocol(self, protocol: str) -> None:
        if protocol not in self.protocols:
            raise ValueError(f"--protocol: {protocol!r} is not a {self.title} protocol; expected one of "
                             f"{', '.join(self.protocols)}")

    def default_seed(self, protocol: str) -> int:
        raise NotImplementedError

    def default_episodes(self, protocol: str) -> int:
        raise NotImplementedError

    def episode_set(self, suites: Sequence[str], tasks: Sequence[int] | None, episodes: int, seeds: Sequence[int],
                    init_states: Sequence[int] | None = None,
                    fresh_scenes: Sequence[int] | None = None) -> list[EpisodeSpec]:
        """Every episode of the selection, in one canonical order (a pure function of it: shards split it alone)."""
        raise NotImplementedError

    def check_selection(self, config: EvalSettings) -> None:
        """A ValueError naming the flag when the config's selection is not one of this sim's."""
        self.episode_set(config.suites, config.tasks, config.episodes, config.seeds, config.init_states,
                         config.fresh_scenes)

    def env_key(self, spec: EpisodeSpec, config: EvalSettings) -> tuple:
        """Episodes with the same key share one env (a LIBERO sim takes ~10 s to build)."""
        raise NotImplementedError

    def make_env(self, spec: EpisodeSpec, config: EvalSettings) -> gym.Env:
        raise NotImplementedError

    def protocol_replan(self, protocol: str, policy: Any) -> int:
        """Actions executed per policy call when neither --replan nor the checkpoint says (`policy`: the built one,
        for protocols that execute all it returns)."""
        raise NotImplementedError

    def image_resize(self, protocol: str) -> str | None:
        """How the protocol's reference resizes camera images for the model (None: the checkpoint's own)."""
        return None
