"""The simulators an evaluation can run, as plug-ins of one episode loop (eval/libero/eval_loop.py, worker.py).

A plug-in says what is particular to a sim: its episode set (suites, tasks, init states), how to build the env of an
episode, its protocols (step limit, replan interval, seed, image resize) and the robot convention its policy uses.
Everything else (records, resume, shards, Ray, summary, plots, videos, progress) is the same loop for every sim, so an
ALOHA or DROID record has exactly the fields of a LIBERO one.

The plug-in interface is eval/sim_plugin.py; `libero` is eval/libero/libero_sim.py; `aloha` and `droid` (envs/aloha.py, envs/droid.py, openpi's client settings
in envs/protocols.py) are `GymSim`s here: a suite named after the sim, tasks indexed in the env's task table, and
episode i starting from the env's placement i (`reset(seed, options={"init_state": i})`).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .sim_plugin import SimPlugin


@dataclass(frozen=True)
class GymSim(SimPlugin):
    """A sim whose env takes `task`, `max_steps`, `fast_render` and whose episode i is reset option `init_state=i`
    (ALOHA-v0, DROID-v0); its one protocol is the `SimProtocol` of envs/protocols.py."""

    name: str
    title: str
    robot: str
    env_id: str
    module: str  # the env's module, holding TASKS (task name -> ...) and the protocol constant below
    protocol_attr: str
    episodes: int = 50  # per task, as LIBERO's protocols and lerobot-eval's default

    @property
    def protocols(self) -> tuple[str, ...]:  # type: ignore[override]
        return (self.name,)

    def _protocol(self):
        import oxygen_gym.envs.protocols as protocols

        return getattr(protocols, self.protocol_attr)

    def task_names(self) -> list[str]:
        import importlib

        return list(importlib.import_module(self.module).TASKS)

    def parse_tasks(self, text: str | None) -> list[int] | None:
        """`--tasks`: None or 'all' = every task; else names or indices of the env's task table, comma separated."""
        if text is None or str(text).strip() == "all":
            return None
        names = self.task_names()
        ids: list[int] = []
        for part in (p.strip() for p in str(text).split(",")):
            if not part:
                continue
            if part in names:
                ids.append(names.index(part))
            elif part.isdigit() and int(part) < len(names):
                ids.append(int(part))
            else:
                raise ValueError(f"--tasks: {part!r} is not a {self.title} task; expected names or indices of "
                                 + ", ".join(f"{i}={n}" for i, n in enumerate(names)))
        if not ids:
            raise ValueError(f"--tasks: empty; expected e.g. {names[0]} or 0")
        if len(set(ids)) != len(ids):
            raise ValueError(f"--tasks: {text!r} names a task twice")
        return sorted(ids)

    def default_seed(self, protocol: str) -> int:
        return self._protocol().seed

    def default_episodes(self, protocol: str) -> int:
        return self.episodes

    def episode_set(self, suites, tasks, episodes, seeds, init_states=None, fresh_scenes=None):
        from .libero.episode_set import EpisodeSpec

        if list(suites) != [self.name]:
            raise ValueError(f"suites: a {self.title} evaluation has the one suite {self.name!r}, got {list(suites)}")
        if fresh_scenes is not None:
            raise ValueError(f"--fresh-scenes: LIBERO only; a {self.title} episode i starts from placement i")
        n_tasks = len(self.task_names())
        task_ids = list(range(n_tasks)) if tasks is None else sorted(tasks)
        bad = [t for t in task_ids if not 0 <= int(t) < n_tasks]
        if bad:
            raise ValueError(f"--tasks: task id(s) {bad} out of range; {self.title} has tasks 0..{n_tasks - 1}")
        if init_states is not None:
            chosen = sorted(init_states)
            if not chosen or min(chosen) < 0:
                raise ValueError(f"--init-states: {init_states!r}; expected placement indices >= 0")
        else:
            if isinstance(episodes, bool) or not isinstance(episodes, int) or episodes < 1:
                raise ValueError(f"--episodes: {episodes!r}; expected a positive number of episodes per task")
            chosen = list(range(episodes))
        return [EpisodeSpec(self.name, t, seed, e) for t in task_ids for seed in seeds for e in chosen]

    def env_key(self, spec, config) -> tuple:
        return (spec.suite, spec.task_id)

    def make_env(self, spec, config):
        import gymnasium as gym

        import oxygen_gym.envs  # noqa: F401  (registers the env ids)

        limit = self._protocol().max_steps
        if config.max_steps is not None:
            limit = min(limit, config.max_steps)
        return gym.make(self.env_id, task=self.task_names()[spec.task_id], max_steps=limit,
                        fast_render=config.fast_render)

    def protocol_replan(self, protocol: str, policy: Any) -> int:
        return self._protocol().replan


SIMS: dict[str, Any] = {
    "aloha": GymSim(name="aloha", title="ALOHA", robot="aloha", env_id="oxygen_gym/ALOHA-v0",
                    module="oxygen_gym.envs.aloha", protocol_attr="ALOHA_PROTOCOL"),
    "droid": GymSim(name="droid", title="DROID", robot="droid", env_id="oxygen_gym/DROID-v0",
                    module="oxygen_gym.envs.droid", protocol_attr="DROID_PROTOCOL"),
}
SIM_NAMES = ("libero", *SIMS)


def get_sim(name: str) -> SimPlugin:
    """The plug-in of sim `name` (libero, aloha, droid)."""
    if name == "libero":
        from .libero.libero_sim import LIBERO

        return LIBERO
    if name not in SIMS:
        raise ValueError(f"env: unknown simulator {name!r}; expected one of {', '.join(SIM_NAMES)}")
    return SIMS[name]
