"""LIBERO as a plug-in of the generic evaluation loop (eval/sim_plugin.py, registered in eval/sims.py): its suites, tasks, official init states and
fresh scenes (episode_set.py), its two reference protocols (envs/protocols.py) and how an episode's env is built."""
from __future__ import annotations

from ..sim_plugin import SimPlugin
from .episode_set import build_episode_set


class LiberoSim(SimPlugin):
    name = "libero"
    title = "LIBERO"
    robot = "libero"
    protocols = ("openpi", "lerobot")

    def default_seed(self, protocol: str) -> int:
        from oxygen_gym.envs.protocols import get_libero_protocol

        return get_libero_protocol(protocol).seed

    def default_episodes(self, protocol: str) -> int:
        from oxygen_gym.envs.protocols import get_libero_protocol

        return get_libero_protocol(protocol).episodes_per_task

    def episode_set(self, suites, tasks, episodes, seeds, init_states=None, fresh_scenes=None):
        return build_episode_set(suites, tasks, episodes, seeds, init_states, fresh_scenes)

    def env_key(self, spec, config) -> tuple:
        return (spec.suite, spec.task_id, config.render_every_step)

    def make_env(self, spec, config):
        import gymnasium as gym

        import oxygen_gym.envs  # noqa: F401  (registers the env ids)
        from oxygen_gym.envs.protocols import get_libero_protocol

        limit = get_libero_protocol(config.protocol).max_steps_for(spec.suite)
        if config.max_steps is not None:
            limit = min(limit, config.max_steps)
        return gym.make("oxygen_gym/LIBERO-v0", suite=spec.suite, task_id=spec.task_id, protocol=config.protocol,
                        max_steps=limit, fast_render=config.fast_render, fast_reset=config.fast_reset,
                        rebuild_sim=config.rebuild_sim,
                        label_subtasks=True,
                        render_on_request=not config.render_every_step)  # only the frames used

    def protocol_replan(self, protocol: str, policy) -> int:
        """openpi's client executes `replan` of each chunk; lerobot-eval all that the policy returns."""
        from oxygen_gym.envs.protocols import get_libero_protocol

        p = get_libero_protocol(protocol)
        return int(policy.horizon) if p.replan_from_policy else p.replan

    def image_resize(self, protocol: str) -> str | None:
        from oxygen_gym.envs.protocols import get_libero_protocol

        return get_libero_protocol(protocol).image_resize


LIBERO = LiberoSim()
