"""The deterministic episode set of an evaluation and its `--shard i/n` partition.

An episode is identified by (suite, task_id, seed, episode); its init state is the episode index (openpi's protocol).
A fresh-scene episode (`--fresh-scenes`) instead starts from scene `scene` drawn from LIBERO's placement initializer,
seeded as collection seeds that scene (envs/libero_scenes.fresh_scene_seed); its episode index is the scene index.
The set is a pure function of the selection, so any launcher (SLURM arrays, several machines, Ray) can split it
without talking to the others, and an episode's result never depends on which process ran it.
"""
from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass
from functools import total_ordering

# The four LIBERO suites the pi0.5 paper reports, in its table order; `all` means these.
SUITES: tuple[str, ...] = ("libero_spatial", "libero_object", "libero_goal", "libero_10")
TASKS_PER_SUITE = 10
INIT_STATES_PER_TASK = 50  # LIBERO ships 50 fixed init states per task

_ALIASES = {"spatial": "libero_spatial", "object": "libero_object", "goal": "libero_goal", "10": "libero_10",
            "long": "libero_10"}


@total_ordering
@dataclass(frozen=True)
class EpisodeSpec:
    """One closed-loop episode to run: what a worker needs to know, nothing more. `scene` None: official init state
    `episode`; else fresh scene `scene` (and `episode == scene`)."""

    suite: str
    task_id: int
    seed: int
    episode: int
    scene: int | None = None

    @property
    def init_state(self) -> int | None:
        """The start the env resets to: episode i starts from init state i (LIBERO's official ones, 0..49; ALOHA's
        and DROID's placement i, any i >= 0); None on a fresh scene."""
        return self.episode if self.scene is None else None

    @property
    def scene_seed(self) -> int | None:
        """The placement sampler's seed, the same as collection's for this (suite, task, scene)."""
        from oxygen_gym.envs.libero_scenes import fresh_scene_seed

        return None if self.scene is None else fresh_scene_seed(self.suite, self.task_id, self.scene)

    @property
    def reset_options(self) -> dict:
        """The env's reset options that start this episode's scene."""
        if self.scene is None:
            return {"init_state": self.init_state}
        return {"scene_seed": self.scene_seed}

    @property
    def key(self) -> tuple:
        """Official episodes keep their 4-tuple (old result files resume unchanged); a scene adds its index."""
        if self.scene is not None:
            return (self.suite, self.task_id, self.seed, self.episode, self.scene)
        return (self.suite, self.task_id, self.seed, self.episode)

    def __lt__(self, other: EpisodeSpec) -> bool:
        if not isinstance(other, EpisodeSpec):
            return NotImplemented
        return self.key < other.key

    def to_dict(self) -> dict:
        d = {**asdict(self), "init_state": self.init_state}
        if self.scene is None:
            del d["scene"]  # an official episode's record is what it was before fresh scenes
        else:
            d["scene_seed"] = self.scene_seed
        return d

    @classmethod
    def from_record(cls, record: dict) -> EpisodeSpec:
        scene = record.get("scene")
        return cls(str(record["suite"]), int(record["task_id"]), int(record["seed"]), int(record["episode"]),
                   None if scene is None else int(scene))


def record_key(record: dict) -> tuple:
    """The episode key of a results record (same tuple as `EpisodeSpec.key`)."""
    return EpisodeSpec.from_record(record).key


def parse_suites(text: str | Sequence[str]) -> list[str]:
    """`libero_spatial`, `spatial,object`, `all`, or a list of those -> canonical suite names in table order."""
    items = [text] if isinstance(text, str) else list(text)
    names: list[str] = []
    for item in items:
        for part in str(item).split(","):
            part = part.strip()
            if not part:
                continue
            if part == "all":
                names.extend(SUITES)
                continue
            name = _ALIASES.get(part, part)
            if name not in SUITES:
                raise ValueError(f"--suite: unknown suite {part!r}; expected one of {', '.join(SUITES)} or 'all' "
                                 f"(short forms: {', '.join(_ALIASES)})")
            names.append(name)
    if not names:
        raise ValueError("--suite: no suite given; expected e.g. libero_spatial or all")
    return [s for s in SUITES if s in names]


def _parse_int_list(text: str, field: str) -> list[int]:
    """`0,1,5-7` -> [0, 1, 5, 6, 7]."""
    values: list[int] = []
    for part in str(text).split(","):
        part = part.strip()
        if not part:
            continue
        try:
            if "-" in part[1:]:
                lo, hi = (int(x) for x in part.split("-", 1))
                if hi < lo:
                    raise ValueError
                values.extend(range(lo, hi + 1))
            else:
                values.append(int(part))
        except ValueError:
            raise ValueError(f"{field}: cannot read {part!r}; expected integers like 0,1,2 "
                             f"or a range like 0-9") from None
    if not values:
        raise ValueError(f"{field}: empty; expected integers like 0,1,2 or a range like 0-9")
    if len(set(values)) != len(values):
        raise ValueError(f"{field}: {text!r} lists a value twice")
    return values


def parse_tasks(text: str | None) -> list[int] | None:
    """`--tasks`: None or 'all' = every task of each suite; else ids in 0..9."""
    if text is None or str(text).strip() == "all":
        return None
    ids = _parse_int_list(text, "--tasks")
    bad = [t for t in ids if not 0 <= t < TASKS_PER_SUITE]
    if bad:
        raise ValueError(f"--tasks: task id(s) {bad} out of range; "
                         f"each LIBERO suite has tasks 0..{TASKS_PER_SUITE - 1}")
    return sorted(ids)


def parse_seeds(text: str) -> list[int]:
    """`--seeds 7` or `--seeds 7,8,9` (several seeds give seed-level confidence intervals)."""
    seeds = _parse_int_list(text, "--seeds")
    if any(s < 0 for s in seeds):
        raise ValueError(f"--seeds: seeds must be >= 0, got {seeds}")
    return seeds


def check_episodes(n: int) -> int:
    if not 1 <= n <= INIT_STATES_PER_TASK:
        raise ValueError(f"--episodes: {n} per task is out of range; expected 1..{INIT_STATES_PER_TASK} "
                         f"(episode i starts from LIBERO's init state i)")
    return n


def build_episode_set(suites: Iterable[str], tasks: Sequence[int] | None, episodes: int,
                      seeds: Sequence[int], init_states: Sequence[int] | None = None,
                      fresh_scenes: Sequence[int] | None = None) -> list[EpisodeSpec]:
    """Every (suite, task, seed, episode) of the selection, in one canonical order. Episode i starts from init
    state i; `init_states` selects those episodes (e.g. held-out 30-49) instead of the first `episodes`;
    `fresh_scenes` runs those fresh scenes instead of any official init state."""
    task_ids = list(range(TASKS_PER_SUITE)) if tasks is None else sorted(tasks)
    names = parse_suites(list(suites))
    if fresh_scenes is not None:
        if init_states is not None:
            raise ValueError("--fresh-scenes and --init-states: give one (fresh scenes or official init states)")
        return [EpisodeSpec(suite, t, seed, k, scene=k)
                for suite in names for t in task_ids for seed in seeds for k in sorted(fresh_scenes)]
    check_episodes(episodes)
    chosen = sorted(init_states) if init_states is not None else range(episodes)
    return [EpisodeSpec(suite, t, seed, e) for suite in names for t in task_ids for seed in seeds for e in chosen]


def parse_init_states(text: str | None) -> list[int] | None:
    """`--init-states 30-49` or `0,5,30-34` -> sorted indices in 0..49; None -> None (the first --episodes)."""
    if text is None:
        return None
    out: set[int] = set()
    for part in str(text).split(","):
        try:
            if "-" in part:
                a, b = (int(x) for x in part.split("-"))
                out.update(range(a, b + 1))
            else:
                out.add(int(part))
        except ValueError:
            raise ValueError(f"--init-states: {text!r}; expected indices like 30-49 or 0,5,30-34") from None
    if not out or min(out) < 0 or max(out) >= INIT_STATES_PER_TASK:
        raise ValueError(f"--init-states: {text!r}; expected indices in 0..{INIT_STATES_PER_TASK - 1}")
    return sorted(out)


def parse_fresh_scenes(text: str | None) -> list[int] | None:
    """`--fresh-scenes 1000-1019` or `0,5,1000-1004` -> sorted scene indices (>= 0); None -> None."""
    if text is None:
        return None
    scenes = _parse_int_list(text, "--fresh-scenes")
    if min(scenes) < 0:
        raise ValueError(f"--fresh-scenes: {text!r}; scene indices must be >= 0")
    return sorted(scenes)


def parse_shard(text: str | None) -> tuple[int, int]:
    """`--shard i/n` -> (i, n) with 0 <= i < n; None -> (0, 1)."""
    if text is None:
        return (0, 1)
    try:
        i_text, n_text = str(text).split("/")
        i, n = int(i_text), int(n_text)
    except ValueError:
        raise ValueError(f"--shard: cannot read {text!r}; expected i/n such as 0/4") from None
    if n < 1 or not 0 <= i < n:
        raise ValueError(f"--shard: {text!r} is out of range; expected 0 <= i < n, e.g. 0/4 .. 3/4")
    return (i, n)


def shard(specs: Sequence[EpisodeSpec], index: int, count: int) -> list[EpisodeSpec]:
    """Shard `index` of `count`: every count-th episode of the canonical order, starting at `index`.

    Round-robin rather than contiguous blocks so each shard gets a similar mix of suites (libero_10 episodes are
    2-3x longer than libero_spatial ones) and so similar wall time."""
    if count < 1 or not 0 <= index < count:
        raise ValueError(f"shard {index}/{count}: expected 0 <= index < count")
    return [s for j, s in enumerate(sorted(specs)) if j % count == index]
