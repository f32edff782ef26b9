"""How a policy runs, as one frozen record: the options `MultiTaskPolicy.from_pretrained` and its constructor take,
which the eval, serve, bench and demo commands build once and pass along instead of re-declaring them.

Why one record: each option is validated in one place (here), with an error naming the field, and a command that
embeds the record cannot drift from what `from_pretrained` accepts. The checks that need the built model (heads
against its heads, `replan_steps` against the actions act() returns, a per-dimension `noise_scale` against each head's
dims) are here too, run by the policy once the model is known. Importing this module does not import torch, so the
command-line parsers stay fast.
"""
from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from oxygen_gym.engine.modes import ALL_MODES

from .checkpoints.overrides import ConventionOverrides, OverrideError
from .language import LanguageTask
from .robots import RobotSpec, get_robot

if TYPE_CHECKING:
    import torch

    from oxygen_gym.core.guidance import RTCConfig
    from oxygen_gym.model.noise_rule import NoiseScale

POLICY_MODES = ALL_MODES  # engine/modes.py: one definition
DTYPE_NAMES = ("float32", "bfloat16", "float16")


@dataclass(frozen=True)
class PolicyConfig:
    """Every option of a policy that is not its model: where and how it runs, what it answers, and the checkpoint
    conventions imposed on its folder (`conventions`; None fields there = the checkpoint's own). docs/api.md section 1
    has each field's meaning; `from_pretrained`'s keyword of the same name sets it."""

    robot: str | RobotSpec = "libero"
    tasks: tuple[LanguageTask, ...] = ()
    decode_budget: int | str = 5
    target_action_hz: float | None = None
    language_deadline_s: float | None = None
    mode: str = "oxygen"
    seed: int = 0
    device: Any = "cpu"  # "cpu", "cuda", "cuda:N" or a torch.device
    dtype: Any = None  # a torch.dtype or one of DTYPE_NAMES; None: float32 on CPU, bfloat16 on CUDA
    # None: the checkpoint's declared `noise_scale`, else 1 (policies/checkpoints/noise_scale.py)
    noise_scale: NoiseScale | None = None
    replan_steps: int | None = None  # 1..the actions act() returns; None: the checkpoint's declaration, else unsaid
    rtc: RTCConfig | None = None  # None: RTCConfig()
    heads: tuple[str, ...] | None = None  # the action heads act() runs (a StarVLA folder loads only these); None: all
    adapters: Mapping[str, Any] | tuple[str, ...] | None = None  # {name: PEFT folder} or the checkpoint's own names
    merge_adapters: tuple[Any, ...] | None = None  # PEFT folders merged into the weights first
    num_steps: int | None = None  # denoise steps of every head; None: each head's own
    num_slots: int | None = None  # KV slots; None: as many as the device's memory allows (engine/slots.py)
    chunk: int | None = None  # actions denoised; None: the checkpoint's chunk, else action_horizon
    conventions: ConventionOverrides = field(default_factory=ConventionOverrides)

    def __post_init__(self) -> None:
        _check(self)

    # ------------------------------------------------------------------ building and changing one
    @classmethod
    def names(cls) -> tuple[str, ...]:
        """The record's own field names (the convention overrides are `conventions`' fields)."""
        return tuple(f.name for f in dataclasses.fields(cls))

    @classmethod
    def option_names(cls) -> tuple[str, ...]:
        """Every keyword `from_kwargs` takes: the record's fields, and the convention overrides' fields by name."""
        return tuple(n for n in cls.names() if n != "conventions") + tuple(
            n for n in ConventionOverrides.names() if n not in cls.names()
        )

    @classmethod
    def from_kwargs(cls, **kwargs: Any) -> PolicyConfig:
        """From `from_pretrained`-style keywords: the record's fields and the convention overrides by name
        (`tokenizer=`, `norm_stats=`, ...). An unknown name is a TypeError, as in a function call."""
        return cls().replace(**kwargs)

    def replace(self, **changes: Any) -> PolicyConfig:
        """A copy with `changes` applied (record fields or convention names), validated like the constructor."""
        unknown = sorted(set(changes) - set(self.option_names()) - {"conventions"})
        if unknown:
            raise TypeError(f"unknown policy option(s) {unknown}; expected some of {self.option_names()}")
        own = {k: v for k, v in changes.items() if k in self.names()}
        conv = {k: v for k, v in changes.items() if k not in self.names()}
        conventions = own.pop("conventions", self.conventions)
        if conv:
            if not isinstance(conventions, ConventionOverrides):
                raise ValueError(f"conventions: expected a ConventionOverrides, got {type(conventions).__name__}")
            try:
                conventions = conventions.replace(**conv)
            except OverrideError as e:
                raise ValueError(str(e)) from None
        return dataclasses.replace(self, conventions=conventions, **own)

    # ------------------------------------------------------------------ what it resolves to
    def robot_spec(self) -> RobotSpec:
        return self.robot if isinstance(self.robot, RobotSpec) else get_robot(self.robot)

    def torch_device(self) -> torch.device:
        import torch

        return torch.device(self.device)

    def torch_dtype(self) -> torch.dtype | None:
        """`dtype` as a torch dtype (None stays None: the device's default)."""
        import torch

        return getattr(torch, self.dtype) if isinstance(self.dtype, str) else self.dtype

    def execution_kwargs(self) -> dict[str, Any]:
        """The fields a command line reports and records (plain values: robot name, tasks as dicts)."""
        out = {n: getattr(self, n) for n in self.names() if n not in ("conventions", "robot", "tasks", "rtc")}
        out["robot"] = self.robot_spec().name
        out["tasks"] = [dataclasses.asdict(t) for t in self.tasks]
        out["rtc"] = None if self.rtc is None else dataclasses.asdict(self.rtc)
        out["dtype"] = None if self.dtype is None else str(self.dtype).removeprefix("torch.")
        out["device"] = str(self.device)
        return out


# ---------------------------------------------------------------------- the checks, one per option
def _check(c: PolicyConfig) -> None:
    """Values no model can use fail here, naming the field; lists become tuples (the record is read-only)."""
    put = lambda name, value: object.__setattr__(c, name, value)  # noqa: E731 - a frozen record's own fields
    if not isinstance(c.robot, RobotSpec):
        if not isinstance(c.robot, str):
            raise ValueError(f"robot: expected a robot name or a RobotSpec, got {type(c.robot).__name__}")
        get_robot(c.robot)  # "robot: unknown robot ..."
    put("tasks", check_tasks(c.tasks, "tasks"))
    check_decode_budget(c.decode_budget, c.target_action_hz, c.language_deadline_s)
    check_mode(c.mode)
    if isinstance(c.seed, bool) or not isinstance(c.seed, (int, np.integer)):
        raise ValueError(f"seed: expected an int, got {c.seed!r}")
    put("seed", int(c.seed))
    _check_device(c.device)
    if c.dtype is not None:
        _check_dtype(c.dtype)
    if c.noise_scale is not None:
        from oxygen_gym.model.noise_rule import check_noise_scale

        put("noise_scale", check_noise_scale(c.noise_scale))
    if c.rtc is not None:
        from oxygen_gym.core.guidance import RTCConfig

        if not isinstance(c.rtc, RTCConfig):
            raise ValueError(f"rtc: expected an RTCConfig, got {type(c.rtc).__name__}")
    if c.heads is not None:
        put("heads", check_heads_given(c.heads))
    if c.adapters is not None:
        if isinstance(c.adapters, Mapping):
            put("adapters", dict(c.adapters))
        elif isinstance(c.adapters, Iterable) and not isinstance(c.adapters, (str, bytes)):
            put("adapters", tuple(c.adapters))
        else:
            raise ValueError(f"adapters: expected {{name: PEFT folder}} or a list of the checkpoint's adapter names, "
                             f"got {type(c.adapters).__name__}")
    if c.merge_adapters is not None:
        if isinstance(c.merge_adapters, (str, bytes)) or not isinstance(c.merge_adapters, Iterable):
            raise ValueError(f"merge_adapters: expected a list of PEFT folders, got {type(c.merge_adapters).__name__}")
        put("merge_adapters", tuple(c.merge_adapters))
    for name in ("num_steps", "chunk"):
        value = getattr(c, name)
        if value is not None and (isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1):
            raise ValueError(f"{name}: expected an int >= 1 or None, got {value!r}")
    check_num_slots(c.num_slots)
    if not isinstance(c.conventions, ConventionOverrides):
        raise ValueError(f"conventions: expected a ConventionOverrides, got {type(c.conventions).__name__}")
    if c.conventions.heads is not None:
        raise ValueError("conventions.heads: set PolicyConfig.heads (the heads act() runs; a StarVLA folder loads "
                         "only these)")


def check_mode(mode: object) -> str:
    if mode not in POLICY_MODES:
        raise ValueError(f"mode: unknown mode {mode!r}; expected one of {POLICY_MODES}")
    return mode  # type: ignore[return-value]


def check_tasks(tasks: object, name: str) -> tuple[LanguageTask, ...]:
    """LanguageTask objects with unique names, as a tuple."""
    if isinstance(tasks, (str, bytes, LanguageTask)) or not isinstance(tasks, Iterable):
        raise ValueError(f"{name}: expected a list of LanguageTask, got {tasks!r}")
    tasks = tuple(tasks)
    for t in tasks:
        if not isinstance(t, LanguageTask):
            raise ValueError(f"{name} must be LanguageTask objects, got {type(t).__name__}")
    if len({t.name for t in tasks}) != len(tasks):
        raise ValueError(f"{name}: names must be unique, got {[t.name for t in tasks]}")
    return tasks


def check_decode_budget(decode_budget: object, target_action_hz: object, language_deadline_s: object) -> None:
    """The messages of engine/budget.py's budgets, before any model is built."""
    if decode_budget == "auto":
        if target_action_hz is None or not _positive(target_action_hz):
            raise ValueError(f"target_action_hz must be > 0 with decode_budget='auto', got {target_action_hz!r}")
        if language_deadline_s is not None and not _positive(language_deadline_s):
            raise ValueError(f"language_deadline_s must be > 0, got {language_deadline_s!r}")
        return
    if isinstance(decode_budget, bool) or not isinstance(decode_budget, (int, np.integer)) or decode_budget < 1:
        raise ValueError(f"decode_budget must be a positive int or 'auto', got {decode_budget!r}")


def _positive(x: object) -> bool:
    return isinstance(x, (int, float, np.integer, np.floating)) and not isinstance(x, bool) and math.isfinite(x) and x > 0


def _check_device(device: object) -> None:
    import torch

    if not isinstance(device, (str, torch.device)):
        raise ValueError(f"device: expected 'cpu', 'cuda' or 'cuda:N', got {type(device).__name__}")
    try:
        torch.device(device)
    except (RuntimeError, ValueError):
        raise ValueError(f"device: expected 'cpu', 'cuda' or 'cuda:N', got {device!r}") from None


def _check_dtype(dtype: object) -> None:
    if isinstance(dtype, str):
        if dtype not in DTYPE_NAMES:
            raise ValueError(f"dtype: expected one of {DTYPE_NAMES} or a torch.dtype, got {dtype!r}")
        return
    import torch

    if not isinstance(dtype, torch.dtype):
        raise ValueError(f"dtype: expected one of {DTYPE_NAMES} or a torch.dtype, got {type(dtype).__name__}")


def check_num_slots(num_slots: object) -> None:
    if num_slots is not None and (isinstance(num_slots, bool) or not isinstance(num_slots, (int, np.integer))
                                  or num_slots < 1):
        raise ValueError(f"num_slots must be >= 1, got {num_slots}")


def check_heads_given(heads: object) -> tuple[str, ...]:
    """A non-empty list of head names (checked against the model's by `select_heads`)."""
    if isinstance(heads, str) or not isinstance(heads, Iterable) or not list(heads):
        raise ValueError(f"heads: expected a non-empty list of head names, got {heads!r}")
    heads = tuple(heads)
    if not all(isinstance(h, str) for h in heads):
        raise ValueError(f"heads: expected a non-empty list of head names, got {list(heads)!r}")
    return heads


# ---------------------------------------------------------------------- the checks that need the model
def select_heads(model_heads: list[str], heads: object) -> list[str]:
    """`heads` (None: all) checked against the model's, kept in the order given."""
    if heads is None:
        return list(model_heads)
    if isinstance(heads, str) or not heads:
        raise ValueError(f"heads: expected a non-empty list of head names out of {model_heads}, got {heads!r}")
    heads = list(heads)  # type: ignore[arg-type]
    unknown = [h for h in heads if h not in model_heads]
    if unknown:
        raise ValueError(f"heads: unknown action head(s) {unknown}; this model has {model_heads}")
    if len(set(heads)) != len(heads):
        raise ValueError(f"heads: names repeat in {heads}")
    return heads


def check_replan_steps(value: object, horizon: int) -> int | None:
    """None, or the actions of each chunk to execute per call: an int in 1..horizon (act() returns `horizon`)."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or not 1 <= value <= horizon:
        raise ValueError(f"replan_steps must be an int in 1..{horizon} (the actions act() returns per call), "
                         f"got {value!r}")
    return int(value)
