"""What an evaluation run is: the fields that decide its results, the episode selection, and how it is executed.

Only the result-deciding fields (`RESULT_FIELDS`) must agree between a resumed run and the folder it resumes, and
between the shards that `oxygen-gym eval merge` combines; device, video and worker settings may differ per machine.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, field, replace
from typing import TYPE_CHECKING, Any

from oxygen_gym.engine.modes import USER_MODES
from oxygen_gym.policies.task_args import TASK_PROMPTS, parse_decode_budget, parse_language_task  # noqa: F401 - used by the eval CLI
from oxygen_gym.policies.checkpoints.overrides import ConventionOverrides

if TYPE_CHECKING:
    from oxygen_gym.policies.policy_config import PolicyConfig

PROTOCOLS = ("openpi", "lerobot")
MODES = USER_MODES  # oxygen_gym/engine/modes.py: the one definition
VIDEO_POLICIES = ("all", "failures", "none")
EXECUTIONS = ("sync", "async", "rtc")  # --execution: sync blocking, async (with --handover), async with RTC
HANDOVERS = ("switch", "blend")  # --handover for --execution async
DTYPES = ("float32", "bfloat16", "float16")  # torch dtype names

# The ConventionOverrides fields an evaluation records, under their own names (EvalConfig has a field for each); the
# image resize follows --protocol, and a hub revision, StarVLA's backbone folder and head subset are no eval options.
CONVENTION_FIELDS = tuple(n for n in ConventionOverrides.names()
                          if n not in ("image_resize", "revision", "vlm_config", "heads"))

# The tokenizer is a path on this machine, not result-deciding: the other conventions are.
RESULT_FIELDS = ("env", "checkpoint", "robot", "mode", "decode_budget", "target_action_hz", "language_tasks", "protocol",
                 "max_steps", "fast_render", "dtype", "fast_reset", *(n for n in CONVENTION_FIELDS if n != "tokenizer"),
                 "noise_scale", "replan", "ensemble", "live", "execution", "handover", "queue_threshold")
# A folder written before live control has none of the live fields: they compare equal to a run without --live.
LIVE_DEFAULTS = {"live": None, "execution": None, "handover": None, "queue_threshold": None}
# Every result field a folder written before it existed lacks, with the value such a run had.
ABSENT_DEFAULTS = {**LIVE_DEFAULTS, "env": "libero", "noise_scale": 1.0, "replan": None, "ensemble": None}
# Result fields of options measured no better and taken out of the package (experiments/options/): a folder run with
# one on cannot be resumed or merged by today's code, which would run without it.
REMOVED_FIELDS = {"open_confirm": "--open-confirm (the gripper open latch)", "lift_scale": "--lift-scale (the slow lift)"}


def refuse_removed_options(recorded: dict, where: str) -> None:
    """A folder's recorded config that turned on a removed option (REMOVED_FIELDS): its episodes are not comparable."""
    from .results import ResultsError

    used = [flag for key, flag in REMOVED_FIELDS.items() if recorded.get(key) is not None]
    if used:
        raise ResultsError(f"{where} was run with {', '.join(used)}, an option taken out of the package (kept in "
                           "experiments/options/ with its measurements); its episodes cannot be resumed or merged with "
                           "a run without it; choose a new --out")


@dataclass
class EvalConfig:
    # decide the results
    env: str = "libero"  # the simulator, a plug-in of eval/sims.py: libero, aloha, droid
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
    # the action heads' starting noise, one number or one per action dim (policies/action_noise.py; 1 = reference
    # sampler); None: the checkpoint's declared `noise_scale`, else 1 (resolved before it is recorded)
    noise_scale: float | tuple[float, ...] | None = None
    # actions of each chunk executed per policy call (openpi's client `replan_steps`); None: the protocol's
    replan: int | None = None
    # execute the temporal ensemble of overlapping chunks with this decay (policies/temporal_ensemble.py); None: off
    ensemble: float | None = None
    # live control (None: today's synchronous loop, the sim waits for the policy)
    live: str | None = None  # measured | fixed:MS | model:FILE[@POINT]
    execution: str | None = None  # with live: sync (default), async, rtc
    handover: str | None = None  # with execution async: switch (default) or blend
    queue_threshold: int | None = None  # async/rtc: actions left when the next chunk is requested (default H - replan)
    # the episode selection
    suites: list[str] = field(default_factory=lambda: ["libero_spatial"])
    tasks: list[int] | None = None
    episodes: int = 50
    init_states: list[int] | None = None  # episodes (= init states) to run instead of the first `episodes`
    # fresh scenes (collection's scene indices, same seed rule) to run instead of any official init state
    fresh_scenes: list[int] | None = None
    seeds: list[int] = field(default_factory=lambda: [7])
    shard: tuple[int, int] = (0, 1)
    # how it is executed
    device: str = "cpu"
    # torch threads per process; None: the placement rule (engine/placement.py) for the processes sharing this machine
    threads: int | None = None
    video: str = "none"  # all | failures | none | N (first N episodes of each task)
    # render both cameras at every control step, as before render_on_request (same images, slower: for timing)
    render_every_step: bool = False
    # rebuild LIBERO's simulation every episode as its hard reset does; off: envs/libero_reset.py gives the same
    # episodes byte for byte without the rebuild (tests/envs/test_libero_reset_exact.py), so not a result field
    rebuild_sim: bool = False
    # eval rollouts kept as training data (train/collect/rollouts.py): none | hdf5 | lerobot; not a result field
    save_rollouts: str = "none"
    out: str = "runs/eval"

    def __post_init__(self) -> None:
        validate(self)

    def overrides(self) -> ConventionOverrides:
        """from_pretrained's checkpoint-convention overrides for this run, with the protocol's image resize."""
        from ..sims import get_sim

        return ConventionOverrides(**{n: getattr(self, n) for n in CONVENTION_FIELDS},
                                   image_resize=get_sim(self.env).image_resize(self.protocol))

    def policy_config(self) -> PolicyConfig:
        """The policy this run evaluates, as the one record `from_pretrained` takes (policies/policy_config.py):
        its tasks (with their adapters, the checkpoint's own), budget, mode, device, noise scale and conventions.
        seed 0: a built-in model's weights are the same everywhere (episode seeds drive the sim)."""
        from oxygen_gym.policies.language import LanguageTask
        from oxygen_gym.policies.policy_config import PolicyConfig

        adapters = sorted({t["adapter"] for t in self.language_tasks if t.get("adapter")}) or None
        return PolicyConfig(
            robot=self.robot, tasks=tuple(LanguageTask(**t) for t in self.language_tasks), adapters=adapters,
            decode_budget=self.decode_budget, target_action_hz=self.target_action_hz, mode=self.mode,
            device=self.device, dtype=self.dtype, seed=0,
            noise_scale=self.noise_scale,  # None (the demo; run_eval resolves it first): the checkpoint's
            conventions=self.overrides(),
        )

    def result_fields(self) -> dict[str, Any]:
        return {k: _plain(getattr(self, k)) for k in RESULT_FIELDS}

    def live_settings(self) -> dict | None:
        """run_live_episode's keywords for this run (None without --live)."""
        if self.live is None:
            return None
        execution = self.execution or "sync"
        return {"latency": self.live, "execution": "sync" if execution == "sync" else "async",
                "handover": "rtc" if execution == "rtc" else (self.handover or "switch"),
                "threshold": self.queue_threshold}

    def to_dict(self) -> dict[str, Any]:
        return _plain(asdict(self))

    @classmethod
    def from_dict(cls, d: dict) -> EvalConfig:
        known = {k: v for k, v in d.items() if k in cls.__dataclass_fields__}
        if "shard" in known:
            known["shard"] = tuple(known["shard"])
        return cls(**known)

    def video_wanted(self, episode: int, scene: int | None = None) -> bool:
        """Whether to record episode `episode` of a task (for `failures` the file is dropped after a success); with
        `--video N` a fresh scene is recorded when it is among the first N selected scenes."""
        if self.video == "none":
            return False
        if self.video in ("all", "failures"):
            return True
        if scene is not None:
            scenes = sorted(self.fresh_scenes or [])
            return scene in scenes and scenes.index(scene) < int(self.video)
        return episode < int(self.video)


def with_declared_replan(config: EvalConfig) -> EvalConfig:
    """`config` with the checkpoint's own `replan_steps` (policies/checkpoints/replan_steps.py) where no --replan
    was given, so the interval an evaluation ran with is recorded, compared on resume and merge, and reported."""
    if config.replan is not None:
        return config
    from oxygen_gym.policies.checkpoints.replan_steps import declared_replan_steps

    declared = declared_replan_steps(config.checkpoint)
    return config if declared is None else replace(config, replan=declared)


def declared_language_tasks(checkpoint: str) -> list[dict]:
    """The language tasks the checkpoint declares (config.json `language_tasks`: what `MultiTaskPolicy.declared_tasks`
    holds once loaded), as config entries, read before any weight so they are recorded and compared on resume;
    [] for a checkpoint that declares none (every built-in model)."""
    from oxygen_gym.policies.checkpoints.language_tasks import declared_language_tasks as declared

    return [{"name": t.name, "prompt": t.prompt, "max_new_tokens": t.max_new_tokens, "every": t.every,
             **({"temperature": t.temperature} if t.temperature else {}),
             **({"adapter": t.adapter} if t.adapter else {})} for t in declared(checkpoint)]


def with_declared_noise_scale(config: EvalConfig) -> EvalConfig:
    """`config` with the noise scale its policy samples with where no --noise-scale was given: the checkpoint's
    own `noise_scale` (policies/checkpoints/noise_scale.py), else 1, so it is recorded, compared on resume and merge,
    and reported."""
    if config.noise_scale is not None:
        return config
    from oxygen_gym.policies.checkpoints.noise_scale import resolved_noise_scale

    return replace(config, noise_scale=resolved_noise_scale(config.checkpoint, None))


def with_declarations(config: EvalConfig) -> EvalConfig:
    """`config` with every setting the checkpoint may declare for its own evaluation resolved."""
    return with_declared_noise_scale(with_declared_replan(config))


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


def validate(cfg: EvalConfig) -> None:
    """Clear errors for values no run can use (the CLI parsers catch most earlier, this guards the API)."""
    from ..sims import get_sim

    sim = get_sim(cfg.env)
    sim.check_protocol(cfg.protocol)
    if cfg.robot != sim.robot:
        raise ValueError(f"robot: {cfg.robot!r} is not the {sim.title} robot; expected {sim.robot!r}")
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
    if cfg.fresh_scenes is not None:
        if cfg.init_states is not None:
            raise ValueError("--fresh-scenes and --init-states: give one (fresh scenes or official init states)")
        if not cfg.fresh_scenes or min(cfg.fresh_scenes) < 0:
            raise ValueError(f"--fresh-scenes: {cfg.fresh_scenes!r}; expected scene indices >= 0")
    from oxygen_gym.policies.action_noise import check_noise_scale

    if cfg.noise_scale is not None:
        cfg.noise_scale = check_noise_scale(cfg.noise_scale, "--noise-scale")
    if cfg.replan is not None:
        from oxygen_gym.envs.protocols import check_replan

        check_replan(cfg.replan)
    if cfg.ensemble is not None:
        from oxygen_gym.policies.temporal_ensemble import check_decay

        cfg.ensemble = check_decay(cfg.ensemble, "--ensemble")
        if cfg.live is not None:
            raise ValueError("--ensemble and --live: live execution merges chunks itself (--handover); give one")
    validate_live(cfg)
    cfg.policy_config()  # the policy's own checks (policies/policy_config.py), on the record the run will build


def validate_live(cfg: EvalConfig) -> None:
    from oxygen_gym.policies.live_latency import parse_latency

    if cfg.live is None:
        for name in ("execution", "handover", "queue_threshold"):
            if getattr(cfg, name) is not None:
                raise ValueError(f"--{name.replace('_', '-')} needs --live (measured, fixed:MS or model:FILE)")
        return
    parse_latency(cfg.live)
    if cfg.execution is not None and cfg.execution not in EXECUTIONS:
        raise ValueError(f"--execution: {cfg.execution!r}; expected one of {', '.join(EXECUTIONS)}")
    if cfg.handover is not None:
        if cfg.handover not in HANDOVERS:
            raise ValueError(f"--handover: {cfg.handover!r}; expected one of {', '.join(HANDOVERS)}")
        if cfg.execution != "async":
            raise ValueError(f"--handover {cfg.handover} needs --execution async (rtc hands over by itself, sync "
                             f"does not overlap chunks)")
    if cfg.queue_threshold is not None:
        if isinstance(cfg.queue_threshold, bool) or not isinstance(cfg.queue_threshold, int) or cfg.queue_threshold < 0:
            raise ValueError(f"--queue-threshold: {cfg.queue_threshold!r}; expected actions left (int >= 0)")
        if (cfg.execution or "sync") == "sync":
            raise ValueError("--queue-threshold needs --execution async or rtc (sync requests when the chunk ran)")
