"""How long a policy call takes on the live clock: `measured` (this call's wall time), `fixed:MS`, or `model:FILE`
(recorded stage costs, so a GPU's timing replays on a CPU and a run is reproducible off the machine that made it).

A call has two moments: its actions are ready (`actions_ms`: the heads finished; with the decode hidden behind
execution this is before the frame's language decode, the OxyGen paper's Sec. 4.7) and the policy is free again
(`busy_ms`: the whole frame). The robot may switch to the new chunk at the first, the next call may start at the
second. Control steps that pass during `ms` are `steps_for(ms, dt) = ceil(ms / dt)`.
"""
from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

FLAG = "--live"


def steps_for(ms: float, control_dt: float) -> int:
    """Control steps that pass while a call of `ms` milliseconds is in flight: ceil(ms / dt). A latency that is a
    whole number of steps up to float rounding (100 ms at 20 Hz) counts as that number, not one more."""
    if ms < 0:
        raise ValueError(f"latency must be >= 0 ms, got {ms}")
    return max(0, math.ceil(ms / (control_dt * 1e3) - 1e-9))


@dataclass(frozen=True)
class CallTiming:
    """A finished call on the clock: when its actions were ready and when the policy was free again."""

    actions_ms: float
    busy_ms: float


@dataclass(frozen=True)
class CallWall:
    """What the wall clock saw of a call (ms from submit), and the policy's own record of the frame (last_frame)."""

    actions_ms: float
    total_ms: float
    frame: dict | None = None


class FixedLatency:
    """Every call takes `ms`, actions and all (the decode is not modelled)."""

    simulated = True

    def __init__(self, ms: float):
        if not isinstance(ms, (int, float)) or not math.isfinite(ms) or ms < 0:
            raise ValueError(f"{FLAG} fixed:MS: MS must be a number >= 0, got {ms!r}")
        self.ms = float(ms)
        self.name = f"fixed:{ms:g}"

    def predict_actions_ms(self, rtc: bool, decode_hidden: bool) -> float | None:
        return self.ms

    def timing(self, wall: CallWall, rtc: bool, decode_hidden: bool) -> CallTiming:
        return CallTiming(self.ms, self.ms)

    def describe(self) -> dict:
        return {"source": "fixed", "ms": self.ms}


class MeasuredLatency:
    """The call's own wall time on this machine: the clock paces the sim to it (see AsyncPolicy)."""

    simulated = False
    name = "measured"

    def predict_actions_ms(self, rtc: bool, decode_hidden: bool) -> float | None:
        return None

    def timing(self, wall: CallWall, rtc: bool, decode_hidden: bool) -> CallTiming:
        return CallTiming(wall.actions_ms, wall.total_ms)

    def describe(self) -> dict:
        return {"source": "measured"}


COST_FIELDS = {  # field: what it is (the small JSON `model:FILE` reads; ms unless said)
    "prefill_ms": "one prefill of the observation (images + prompt)",
    "denoise_step_ms": "one denoise step of the action head",
    "denoise_steps": "denoise steps per chunk (an int)",
    "decode_step_ms": "one language decode step (a batch of every request in flight)",
    "rtc_denoise_step_ms": "one RTC-guided denoise step (optional; default denoise_step_ms)",
    "overhead_ms": "per call outside the stages: scheduling, transfers (optional; default 0)",
}


@dataclass(frozen=True)
class StageCosts:
    prefill_ms: float
    denoise_step_ms: float
    denoise_steps: int
    decode_step_ms: float
    rtc_denoise_step_ms: float | None = None
    overhead_ms: float = 0.0
    source: str = ""

    def actions_ms(self, rtc: bool) -> float:
        step = self.rtc_denoise_step_ms if rtc and self.rtc_denoise_step_ms is not None else self.denoise_step_ms
        return self.overhead_ms + self.prefill_ms + self.denoise_steps * step


class ModelLatency:
    """Replays recorded stage costs: actions ready after overhead + prefill + S denoise steps (RTC-guided steps cost
    `rtc_denoise_step_ms`), free after the frame's decode steps too (as many as the policy's frame record counts).
    Without the decode hidden, the actions wait for the decode as well."""

    simulated = True

    def __init__(self, costs: StageCosts, name: str = "model"):
        self.costs, self.name = costs, name

    def predict_actions_ms(self, rtc: bool, decode_hidden: bool) -> float | None:
        # known before the call only when the decode is not in front of the actions (see timing)
        return self.costs.actions_ms(rtc) if decode_hidden else None

    def timing(self, wall: CallWall, rtc: bool, decode_hidden: bool) -> CallTiming:
        frame = wall.frame or {}
        decode_steps = len(frame.get("batch_sizes") or [])
        actions = self.costs.actions_ms(rtc)
        busy = actions + decode_steps * self.costs.decode_step_ms
        return CallTiming(actions if decode_hidden else busy, busy)

    def describe(self) -> dict:
        return {"source": "model", "name": self.name, **{k: v for k, v in vars(self.costs).items()}}


def _number(d: dict, key: str, where: str, required: bool = True, integer: bool = False) -> Any:
    if key not in d or d[key] is None:
        if required:
            raise ValueError(f"{FLAG} model:{where}: missing {key!r} ({COST_FIELDS[key]}); expected the fields "
                             f"{', '.join(COST_FIELDS)}")
        return None
    v = d[key]
    ok = isinstance(v, int) if integer else isinstance(v, (int, float))
    if isinstance(v, bool) or not ok or not math.isfinite(v) or v < 0 or (integer and v < 1):
        kind = "an int >= 1" if integer else "a number >= 0"
        raise ValueError(f"{FLAG} model:{where}: {key!r} must be {kind}, got {v!r}")
    return v


def costs_from_dict(d: dict, where: str) -> StageCosts:
    return StageCosts(
        prefill_ms=float(_number(d, "prefill_ms", where)), denoise_step_ms=float(_number(d, "denoise_step_ms", where)),
        denoise_steps=int(_number(d, "denoise_steps", where, integer=True)),
        decode_step_ms=float(_number(d, "decode_step_ms", where)),
        rtc_denoise_step_ms=_number(d, "rtc_denoise_step_ms", where, required=False),
        overhead_ms=float(_number(d, "overhead_ms", where, required=False) or 0.0), source=str(d.get("source", where)),
    )


def costs_from_bench_point(point: dict, where: str) -> StageCosts:
    """Stage costs of one point of an `oxygen-gym bench` results.json (its per-stage means per frame)."""
    stage = point.get("stage_ms") or {}
    steps = point.get("S")
    decode_steps = point.get("decode_steps_per_frame") or 0
    if not stage or not steps:
        raise ValueError(f"{FLAG} model:{where}: the bench point has no stage_ms / S to take costs from")
    return StageCosts(
        prefill_ms=float(stage.get("prefill", 0.0)), denoise_step_ms=float(stage.get("denoise", 0.0)) / int(steps),
        denoise_steps=int(steps),
        decode_step_ms=float(stage.get("decode", 0.0)) / decode_steps if decode_steps else 0.0,
        overhead_ms=float(stage.get("manager", 0.0)) + float(point.get("other_ms") or 0.0),
        source=f"{where} point {point.get('group')} {point.get('mode')}",
    )


def load_latency_model(spec: str) -> ModelLatency:
    """`FILE` (the small JSON of COST_FIELDS) or `FILE@KEY` (a bench results.json point: KEY as in `Point.key`, e.g.
    `fixed|oxygen|N=30|k=5|S=10`, or its mode if that is unique)."""
    path, _, key = spec.partition("@")
    p = Path(path)
    if not p.is_file():
        raise ValueError(f"{FLAG} model:{spec}: no such file {path!r}")
    try:
        data = json.loads(p.read_text())
    except json.JSONDecodeError as e:
        raise ValueError(f"{FLAG} model:{spec}: not JSON ({e})") from None
    if not isinstance(data, dict):
        raise ValueError(f"{FLAG} model:{spec}: expected a JSON object")
    if "points" not in data:
        if key:
            raise ValueError(f"{FLAG} model:{spec}: @KEY selects a bench results.json point; {path} is not one")
        return ModelLatency(costs_from_dict(data, path), name=spec)
    points = data["points"]
    if not key:
        raise ValueError(f"{FLAG} model:{spec}: a bench results.json needs @KEY naming its point, e.g. "
                         f"{path}@{_point_key(points[0]) if points else 'fixed|oxygen|N=30|k=5|S=10'}")
    chosen = [pt for pt in points if _point_key(pt) == key] or [pt for pt in points if pt.get("mode") == key]
    if len(chosen) != 1:
        raise ValueError(f"{FLAG} model:{spec}: {len(chosen)} points match {key!r}; known: "
                         f"{', '.join(_point_key(pt) for pt in points[:12])}")
    return ModelLatency(costs_from_bench_point(chosen[0], spec), name=spec)


def _point_key(pt: dict) -> str:
    k = "-" if pt.get("k") is None else pt.get("k")
    e = f"|E={pt['E']}" if pt.get("E", 1) != 1 else ""
    return f"{pt.get('workload', 'fixed')}|{pt.get('mode')}|N={pt.get('N')}|k={k}|S={pt.get('S')}{e}"


def parse_latency(text: str) -> FixedLatency | MeasuredLatency | ModelLatency:
    """`measured`, `fixed:MS` or `model:FILE[@KEY]`; ValueError naming --live otherwise."""
    text = str(text).strip()
    if text == "measured":
        return MeasuredLatency()
    kind, sep, arg = text.partition(":")
    if sep and kind == "fixed":
        try:
            ms = float(arg)
        except ValueError:
            raise ValueError(f"{FLAG} fixed:MS: MS must be a number of milliseconds, got {arg!r}") from None
        return FixedLatency(ms)
    if sep and kind == "model" and arg:
        return load_latency_model(arg)
    raise ValueError(f"{FLAG}: {text!r} not understood; expected measured, fixed:MS (e.g. fixed:100) or "
                     f"model:FILE (stage costs JSON, or a bench results.json@POINT)")
