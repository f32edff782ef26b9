"""What an evaluation run is: the fields that decide its results, the episode selection, and how it is executed.

Only the result-deciding fields (`RESULT_FIELDS`) must agree between a resumed run and the folder it resumes, and
between the shards that `oxygen-gym eval merge` combines; device, video and worker settings may differ per machine.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from oxygen_gym.policies.checkpoints.overrides import ConventionOverrides

PROTOCOLS = ("openpi", "lerobot")
MODES = ("oxygen", "shared", "isolated", "parallel")
VIDEO_POLICIES = ("all", "failures", "none")
DTYPES = ("float32", "bfloat16", "float16")  # torch dtype names

# Prompts for the language tasks a user can name with `--task NAME` (`--task NAME=PROMPT` sets any prompt).
TASK_PROMPTS = {
    "narrate": "Describe what the robot is doing.",
    "plan": "What should the robot do next?",
    "memory": "What has the robot done so far?",
}

# The ConventionOverrides fields an evaluation records, under their own names (EvalConfig has a field for each); the
# image resize follows --protocol, and a hub revision is no eval option.
CONVENTION_FIELDS = tuple(n for n in ConventionOverrides.names() if n not in ("image_resize", "revision"))

# The tokenizer is a path on this machine, not result-deciding: the other conventions are.
RESULT_FIELDS = ("checkpoint", "robot", "mode", "decode_budget", "target_action_hz", "language_tasks", "protocol",
                 "max_steps", "fast_render", "dtype", "fast_reset", *(n for n in CONVENTION_FIELDS if n != "tokenizer"))


@dataclass
class EvalConfig:
    # decide the results
    checkpoint: str = "tiny"
    robot: str = "libero"
    mode: str = "oxygen"
    decode_budget: int | str = 5
    target_action_hz: float | None = None
    language_tasks: list[dict] = field(default_factory=list)  # [{name, prompt, max_new_tokens, every}]
    protocol: str = "openpi"
    max_steps: int | None = None  # cap per episode on top of the protocol's limit (smoke runs)
    fast_render: bool = False  # no antialiasing: ~2x faster software rendering, slightly different images
    dtype: str | None = None
    fast_reset: bool = False  # LIBERO soft reset: ~10x faster, not bit-identical to the references' hard reset
    # checkpoint conventions (CONVENTION_FIELDS; None = the checkpoint's own, see `oxygen-gym inspect`)
    norm_stats: str | None = None
    asset_id: str | None = None
    camera_map: dict | None = None
    discrete_state: bool | None = None
    action_horizon: int | None = None
    family: str | None = None
    tokenizer: str | None = None  # a path on this machine: not result-deciding
    # the episode selection
    suites: list[str] = field(default_factory=lambda: ["libero_spatial"])
    tasks: list[int] | None = None
    episodes: int = 50
    init_states: list[int] | None = None  # episodes (= init states) to run instead of the first `episodes`
    seeds: list[int] = field(default_factory=lambda: [7])
    shard: tuple[int, int] = (0, 1)
    # how it is executed
    device: str = "cpu"
    video: str = "none"  # all | failures | none | N (first N episodes of each task)
    out: str = "runs/eval"

    def __post_init__(self) -> None:
        validate(self)

    def overrides(self) -> ConventionOverrides:
        """from_pretrained's checkpoint-convention overrides for this run, with the protocol's image resize."""
        from oxygen_gym.envs.protocols import get_libero_protocol

        return ConventionOverrides(**{n: getattr(self, n) for n in CONVENTION_FIELDS},
                                   image_resize=get_libero_protocol(self.protocol).image_resize)

    def result_fields(self) -> dict[str, Any]:
        return {k: _plain(getattr(self, k)) for k in RESULT_FIELDS}

    def to_dict(self) -> dict[str, Any]:
        return _plain(asdict(self))

    @classmethod
    def from_dict(cls, d: dict) -> EvalConfig:
        known = {k: v for k, v in d.items() if k in cls.__dataclass_fields__}
        if "shard" in known:
            known["shard"] = tuple(known["shard"])
        return cls(**known)

    def video_wanted(self, episode: int) -> bool:
        """Whether to record episode `episode` of a task (for `failures` the file is dropped after a success)."""
        if self.video == "none":
            return False
        if self.video in ("all", "failures"):
            return True
        return episode < int(self.video)


def _plain(obj: Any) -> Any:
    if isinstance(obj, tuple):
        return [_plain(x) for x in obj]
    if isinstance(obj, list):
        return [_plain(x) for x in obj]
    if isinstance(obj, dict):
        return {k: _plain(v) for k, v in obj.items()}
    return obj


def parse_video(text: str) -> str:
    text = str(text).strip()
    if text in VIDEO_POLICIES:
        return text
    try:
        n = int(text)
    except ValueError:
        raise ValueError(f"--video: {text!r} not understood; expected all, failures, none, or a number of "
                         f"episodes to record per task") from None
    if n < 0:
        raise ValueError(f"--video: {n} is negative; expected a number of episodes per task >= 0")
    return "none" if n == 0 else str(n)


def parse_decode_budget(text: str | int) -> int | str:
    if str(text).strip() == "auto":
        return "auto"
    try:
        k = int(text)
    except ValueError:
        raise ValueError(f"--decode-budget: {text!r} not understood; expected a positive integer or 'auto'") from None
    if k < 1:
        raise ValueError(f"--decode-budget: {k}; expected a positive integer or 'auto'")
    return k


def parse_language_task(text: str, max_new_tokens: int, every: int = 1, trained: dict | None = None) -> dict:
    """`--task narrate` (a named preset, or the checkpoint's own task of that name: `trained`, from its
    training.json, wins, since a trained model answers only the prompt it was trained on) or `--task NAME=PROMPT`."""
    name, sep, prompt = str(text).partition("=")
    name = name.strip()
    if not name:
        raise ValueError(f"--task: {text!r} has no name; expected e.g. narrate or plan='What next?'")
    if not sep and trained and name in trained:
        prompt = trained[name]["prompt"]
    elif not sep:
        if name not in TASK_PROMPTS:
            raise ValueError(f"--task: unknown task {name!r}; named ones are {', '.join(TASK_PROMPTS)}, "
                             f"or give a prompt as NAME=PROMPT")
        prompt = TASK_PROMPTS[name]
    if not prompt.strip():
        raise ValueError(f"--task: {text!r} has an empty prompt")
    if max_new_tokens < 1:
        raise ValueError(f"--max-new-tokens: {max_new_tokens}; expected >= 1")
    return {"name": name, "prompt": prompt.strip(), "max_new_tokens": int(max_new_tokens), "every": int(every)}


def validate(cfg: EvalConfig) -> None:
    """Clear errors for values no run can use (the CLI parsers catch most earlier, this guards the API)."""
    if cfg.protocol not in PROTOCOLS:
        raise ValueError(f"--protocol: {cfg.protocol!r}; expected one of {', '.join(PROTOCOLS)}")
    if cfg.mode not in MODES:
        raise ValueError(f"--mode: {cfg.mode!r}; expected one of {', '.join(MODES)}")
    parse_decode_budget(cfg.decode_budget)
    if cfg.decode_budget == "auto" and not cfg.target_action_hz:
        raise ValueError("--decode-budget auto needs --target-action-hz (the action rate to hold)")
    if cfg.dtype is not None and cfg.dtype not in DTYPES:
        raise ValueError(f"--dtype: {cfg.dtype!r}; expected one of {', '.join(DTYPES)}")
    ConventionOverrides(**{n: getattr(cfg, n) for n in CONVENTION_FIELDS})
    if cfg.max_steps is not None and cfg.max_steps < 1:
        raise ValueError(f"--max-steps: {cfg.max_steps}; expected a positive number of env steps")
    parse_video(cfg.video)
    names = [t["name"] for t in cfg.language_tasks]
    if len(set(names)) != len(names):
        raise ValueError(f"--task: a task name is given twice: {names}")
    if not cfg.seeds:
        raise ValueError("--seeds: at least one seed is needed")
