"""`summary.json` and `summary.md` from the episode records of a results folder.

Success is counted over episodes that ran (status ok); episodes that raised (status error) are listed and counted
apart, since a simulator crash says nothing about the policy. With several seeds, each seed's success rate over its
episodes is one sample, and the interval is the Student-t 95% CI over those samples (the paper's Table 2 statistic);
the overall seed-level rate is the mean of that seed's suite rates, as the paper averages suites.
"""
from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable
from pathlib import Path

from .episode_set import SUITES
from .failure_modes import failure_modes, render_failure_modes
from .results import write_json_atomic, write_text_atomic
from .summary_stats import percentiles, t_interval

SUMMARY_JSON = "summary.json"
SUMMARY_MD = "summary.md"
TIME_PARTS = ("reset", "physics", "render", "policy", "other")  # run_episode's split of an episode (envs/episode.py)


def _rate_block(ok: list[dict], seed_rates: dict[int, float]) -> dict:
    successes = sum(bool(r["success"]) for r in ok)
    block = {
        "episodes": len(ok),
        "successes": successes,
        "success_rate": successes / len(ok) if ok else None,
        "seed_success_rates": {str(s): v for s, v in sorted(seed_rates.items())},
    }
    if seed_rates:
        ci = t_interval(list(seed_rates.values()))
        block.update(seed_mean=ci.mean, ci95=[ci.low, ci.high] if ci.low is not None else None,
                     ci95_half_width=ci.half_width, seeds=ci.n)
    return block


def _task_block(t_ok: list[dict]) -> dict:
    """One task's success (with the Student-t interval over its seeds' rates) and its narration and memory
    accuracy: suite results are reported per task, and a suite mean can hide a task the policy never solves."""
    block = _rate_block(t_ok, _seed_rates(t_ok))
    block["narration"], block["memory"] = _narration(t_ok), _narration(t_ok, "memory_accuracy")
    return block


def _seed_rates(ok: list[dict]) -> dict[int, float]:
    by_seed: dict[int, list[bool]] = defaultdict(list)
    for r in ok:
        by_seed[int(r["seed"])].append(bool(r["success"]))
    return {s: sum(v) / len(v) for s, v in by_seed.items()}


def _speed(ok: list[dict]) -> dict:
    frame_ms = [x for r in ok for x in (r.get("frame_ms") or [])]
    stages: dict[str, list[float]] = defaultdict(list)
    for r in ok:
        for name, ms in (r.get("stage_ms") or {}).items():
            if ms is not None:
                stages[name].append(float(ms))
    return {
        "action_hz": percentiles([r.get("action_hz") for r in ok]),
        "language_tokens_per_s": percentiles([r.get("language_tokens_per_s") for r in ok]),
        "frame_ms": percentiles(frame_ms, qs=(50, 90, 99)),
        "stage_ms": {k: sum(v) / len(v) for k, v in sorted(stages.items())},
        "episode_wall_s": percentiles([r.get("wall_s") for r in ok]),
        "episode_split_s": _episode_split(ok),
    }


def _episode_split(ok: list[dict]) -> dict | None:
    """Where an episode's wall time goes (run_episode's `time_s`: reset, physics, render, policy, other), as
    percentiles over episodes of each part's seconds, beside the episode's wall time, camera images rendered and CPU
    seconds. The median is the headline: one slow first episode (the sim build) moves a mean, not a median.
    None when no episode recorded a split (a live run)."""
    split = [r for r in ok if r.get("time_s")]
    if not split:
        return None
    parts = list(TIME_PARTS) + sorted({k for r in split for k in r["time_s"]} - set(TIME_PARTS))
    out: dict = {part: percentiles([r["time_s"].get(part) for r in split]) for part in parts}
    out["wall"] = percentiles([r.get("wall_s") for r in split])
    frames = [r.get("frames_rendered") for r in split if r.get("frames_rendered") is not None]
    out["frames_rendered"] = percentiles(frames) if frames else None
    out["cpu"] = percentiles([r.get("cpu_s") for r in split])
    return out


def _held_out_split(ok: list[dict]) -> dict | None:
    """Success on init states (or fresh scenes) a trained checkpoint never saw vs on its training ones (None: not a
    trained model)."""
    marked = [r for r in ok if r.get("held_out") is not None]
    if not marked:
        return None
    kinds = {r.get("scene") is None for r in marked}  # official init states, fresh scenes, or both
    out: dict = {"starts": "init states and scenes" if len(kinds) == 2 else "init states" if True in kinds else "scenes"}
    for name, flag in (("held_out", True), ("training", False)):
        rs = [r for r in marked if r["held_out"] is flag]
        out[name] = {"episodes": len(rs), "successes": sum(bool(r["success"]) for r in rs),
                     "success_rate": sum(bool(r["success"]) for r in rs) / len(rs) if rs else None}
    return out


def _narration(ok: list[dict], key: str = "narration_accuracy") -> dict | None:
    """Narration (or, key="memory_accuracy", memory-answer) accuracy pooled over every labelled frame of every
    episode (eval/libero/narration.py)."""
    accs = [r[key] for r in ok if r.get(key)]
    if not accs:
        return None
    frames = sum(a["frames"] for a in accs)
    correct = sum(a["correct"] for a in accs)
    return {"frames": frames, "correct": correct, "accuracy": correct / frames if frames else None,
            "episodes": len(accs)}


def _live(ok: list[dict]) -> dict | None:
    """Live-clock totals over episodes (run_live_episode's per-episode `live` block), None for a synchronous run."""
    lives = [r["live"] for r in ok if r.get("live")]
    if not lives:
        return None
    first = lives[0]
    delays = [d for lv in lives for d in lv.get("delay_steps") or []]
    steps = sum(lv["steps"] for lv in lives)
    held = sum(lv["held_steps"] for lv in lives)
    return {
        "latency": first.get("latency"), "execution": first.get("execution"), "handover": first.get("handover"),
        "control_dt": first.get("control_dt"), "decode_hidden": first.get("decode_hidden"), "episodes": len(lives),
        "steps": steps, "held_steps": held, "held_share": held / steps if steps else None,
        "stale_actions": sum(lv.get("stale_actions", 0) for lv in lives),
        "delay_steps": percentiles(delays, qs=(50, 90, 99)) if delays else None,
    }


def summarize(records: Iterable[dict], config: dict | None = None, expected: int | None = None) -> dict:
    """The summary of a set of episode records (any order). `expected`: episodes the selection holds, if known."""
    records = list(records)
    ok = [r for r in records if r.get("status") == "ok"]
    errors = [r for r in records if r.get("status") != "ok"]
    suites = [s for s in SUITES if any(r["suite"] == s for r in records)]
    suites += sorted({r["suite"] for r in records} - set(suites))

    per_suite = {}
    suite_seed_rates: dict[str, dict[int, float]] = {}
    for suite in suites:
        s_ok = [r for r in ok if r["suite"] == suite]
        suite_seed_rates[suite] = _seed_rates(s_ok)
        block = _rate_block(s_ok, suite_seed_rates[suite])
        block["errors"] = sum(r["suite"] == suite for r in errors)
        block["tasks"] = {str(t): _task_block([r for r in s_ok if int(r["task_id"]) == t])
                          for t in sorted({int(r["task_id"]) for r in s_ok})}
        per_suite[suite] = block

    # a seed's overall rate: mean of its suite rates, over the suites where that seed has episodes
    seeds = sorted({s for rates in suite_seed_rates.values() for s in rates})
    overall_seed_rates = {}
    for seed in seeds:
        vals = [rates[seed] for rates in suite_seed_rates.values() if seed in rates]
        overall_seed_rates[seed] = sum(vals) / len(vals)
    overall = _rate_block(ok, overall_seed_rates)
    overall["errors"] = len(errors)

    return {
        "config": config,
        "episodes": {"recorded": len(records), "ok": len(ok), "error": len(errors), "expected": expected},
        "overall": overall,
        "held_out": _held_out_split(ok),
        "narration": _narration(ok),
        "memory": _narration(ok, "memory_accuracy"),
        "failure_modes": failure_modes(ok),
        "live": _live(ok),
        "suites": per_suite,
        "speed": _speed(ok),
        "errors": [{"suite": r["suite"], "task_id": r["task_id"], "seed": r["seed"], "episode": r["episode"],
                    **({"scene": r["scene"]} if r.get("scene") is not None else {}), "error": r.get("error")}
                   for r in errors],
    }


def _pct(x: float | None) -> str:
    return "n/a" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{100 * x:.1f}%"


def _ci(block: dict) -> str:
    if block.get("ci95"):
        return f"{100 * block['seed_mean']:.1f} ± {100 * block['ci95_half_width']:.1f}"
    return "n/a (needs ≥ 2 seeds)"


def _num(stats: dict | None, key: str, fmt: str = "{:.1f}") -> str:
    return "n/a" if not stats else fmt.format(stats[key])


def _title(env: str) -> str:
    from ..sims import get_sim

    try:
        return get_sim(env).title
    except ValueError:  # a folder of a sim this build does not know: still summarised
        return env


def render_task_table(suites: dict) -> str:
    """Per task: success, episodes, the seed mean with its 95% t-interval, narration and memory accuracy."""
    lines = ["| suite | task | success | episodes | seed mean ± 95% CI (t) | narration | memory |",
             "| --- | --- | --- | --- | --- | --- | --- |"]
    for suite, b in suites.items():
        for task, t in (b.get("tasks") or {}).items():
            acc = [_pct(t[k]["accuracy"]) if t.get(k) else "n/a" for k in ("narration", "memory")]
            lines.append(f"| {suite} | {task} | {_pct(t['success_rate'])} | {t['episodes']} | {_ci(t)} | {acc[0]} | "
                         f"{acc[1]} |")
    return "\n".join(lines)


def render_episode_split(split: dict) -> str:
    """The episode split as a table: one row per statistic, seconds per episode in each part."""
    parts = [k for k in split if k not in ("wall", "frames_rendered", "cpu") and split[k]]
    head = ["episode split, s"] + parts + ["wall", "CPU", "images rendered"]
    lines = ["| " + " | ".join(head) + " |", "|" + " --- |" * len(head)]
    for stat in ("p50", "p5", "p95", "mean"):
        row = [f"{split[k][stat]:.1f}" for k in parts]
        row += [_num(split.get("wall"), stat), _num(split.get("cpu"), stat),
                _num(split.get("frames_rendered"), stat, "{:.0f}")]
        lines.append(f"| {'**median**' if stat == 'p50' else stat} | " + " | ".join(row) + " |")
    n = split["wall"]["n"] if split.get("wall") else 0
    return (f"Where an episode's time went ({n} episodes; a part's median is over episodes, so the medians need not "
            "sum to the wall median):\n\n" + "\n".join(lines))


def render_markdown(summary: dict, plots: list[str] | None = None) -> str:
    cfg = summary.get("config") or {}
    ep = summary["episodes"]
    lines = [f"# {_title(cfg.get('env') or 'libero')} evaluation", ""]
    if cfg:
        lines += [f"checkpoint `{cfg.get('checkpoint')}`, mode `{cfg.get('mode')}`, decode budget "
                  f"`{cfg.get('decode_budget')}`, protocol `{cfg.get('protocol')}`, max steps "
                  f"`{cfg.get('max_steps') or 'protocol'}`, language tasks "
                  f"`{', '.join(t['name'] for t in cfg.get('language_tasks') or []) or 'none'}`, "
                  f"seeds `{cfg.get('seeds')}`, device `{cfg.get('device')}`", ""]
    expected = f" of {ep['expected']} expected" if ep.get("expected") else ""
    lines += [f"Episodes: {ep['recorded']} recorded{expected} ({ep['ok']} ran, {ep['error']} errors).", ""]
    lines += ["| suite | success | episodes | errors | seed mean ± 95% CI (t) |",
              "| --- | --- | --- | --- | --- |"]
    for suite, b in summary["suites"].items():
        lines.append(f"| {suite} | {_pct(b['success_rate'])} | {b['episodes']} | {b['errors']} | {_ci(b)} |")
    o = summary["overall"]
    lines.append(f"| **overall** | **{_pct(o['success_rate'])}** | {o['episodes']} | {o['errors']} | {_ci(o)} |")
    if any(len(b.get("tasks") or {}) > 1 for b in summary["suites"].values()):
        lines += ["", render_task_table(summary["suites"])]
    held = summary.get("held_out")
    if held:
        lines += ["", f"| {held.get('starts', 'init states')} | success | episodes |", "| --- | --- | --- |"]
        for name, label in (("held_out", "held out (never in the training data)"), ("training", "seen in training")):
            b = held[name]
            lines.append(f"| {label} | {_pct(b['success_rate'])} | {b['episodes']} |")
    narr = summary.get("narration")
    if narr:
        lines += ["", f"Narration names the current subtask on {_pct(narr['accuracy'])} of {narr['frames']} labelled "
                      f"frames ({narr['episodes']} episodes; labels from sim state, eval/libero/narration.py)."]
    mem = summary.get("memory")
    if mem:
        lines += ["", "The memory task answers its question (what the robot did last) correctly on "
                      f"{_pct(mem['accuracy'])} of "
                      f"{mem['frames']} labelled frames ({mem['episodes']} episodes; labels from sim state, "
                      "envs/scene_memory.py)."]
    modes = summary.get("failure_modes")
    if modes:
        lines += ["", render_failure_modes(modes)]
    live = summary.get("live")
    if live:
        lat = live["latency"] or {}
        d = live.get("delay_steps") or {}
        lines += ["", f"Live clock: latency `{lat.get('source')}` {lat.get('ms', lat.get('name', ''))}, execution "
                      f"`{live['execution']}`, hand-over `{live['handover']}`, control dt {live['control_dt']} s; "
                      f"delay per call p50 {d.get('p50', float('nan')):.1f} / p99 {d.get('p99', float('nan')):.1f} "
                      f"steps; {live['held_steps']} of {live['steps']} steps held ({_pct(live['held_share'])}), "
                      f"{live['stale_actions']} actions arrived stale."]
    sp = summary["speed"]
    lines += ["", "| speed | p5 | p50 | p95 | mean |", "| --- | --- | --- | --- | --- |"]
    for label, key in (("action Hz", "action_hz"), ("language tokens/s", "language_tokens_per_s"),
                       ("episode wall s", "episode_wall_s")):
        st = sp.get(key)
        lines.append(f"| {label} | {_num(st, 'p5')} | {_num(st, 'p50')} | {_num(st, 'p95')} | {_num(st, 'mean')} |")
    fm = sp.get("frame_ms")
    if fm:
        lines += ["", f"Frame latency: p50 {fm['p50']:.1f} ms, p90 {fm['p90']:.1f} ms, p99 {fm['p99']:.1f} ms "
                      f"over {fm['n']} frames."]
    split = sp.get("episode_split_s")
    if split:
        lines += ["", render_episode_split(split)]
    if sp.get("stage_ms"):
        lines += ["", "Mean per-stage ms per frame: " + ", ".join(f"{k} {v:.1f}" for k, v in sp["stage_ms"].items())
                  + "."]
    if summary["errors"]:
        lines += ["", "## Errors", ""]
        for e in summary["errors"][:20]:
            where = f"scene {e['scene']}" if e.get("scene") is not None else f"episode {e['episode']}"
            lines.append(f"- {e['suite']} task {e['task_id']} seed {e['seed']} {where}: {e['error']}")
        if len(summary["errors"]) > 20:
            lines.append(f"- ... and {len(summary['errors']) - 20} more (see episodes.jsonl)")
    if plots:
        lines += ["", "## Plots", ""] + [f"![{Path(p).stem}]({p})" for p in plots]
    return "\n".join(lines) + "\n"


def write_summary(out: str | Path, records: Iterable[dict], config: dict | None = None,
                  expected: int | None = None, plots: list[str] | None = None) -> dict:
    """summary.json and summary.md; `plots`: the figures beside them (eval/eval_plots.py), linked from summary.md."""
    out = Path(out)
    summary = summarize(records, config, expected)
    write_json_atomic(out / SUMMARY_JSON, summary)
    write_text_atomic(out / SUMMARY_MD, render_markdown(summary, plots))
    return summary
