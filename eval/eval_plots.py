"""An evaluation's figures, from its episode records alone (episodes.jsonl): written beside summary.md by `oxygen-gym
eval` and `eval merge` (and rewritten on every resume), so a run is read at a glance, not only as text.

- `success.png`: success per task (rows) and init state or fresh scene (columns), the share of seeds that succeeded;
- `latency.png`: the distribution of policy-call latency (`frame_ms`), with p50 / p90 / p99;
- `time_split.png`: where an episode's wall time went (run_episode's `time_s`: reset, physics, render, policy, other),
  per task and overall;
- `narration.png`: narration (and memory) accuracy against the policy call within the episode, when it was scored.

Each function draws one PNG into `folder` and returns its name, or raises `Skip` when the records hold nothing for it.
"""
from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Iterable
from pathlib import Path

from .bench.plots import Skip, _save, plt

SUCCESS_PNG = "success.png"
LATENCY_PNG = "latency.png"
TIME_SPLIT_PNG = "time_split.png"
NARRATION_PNG = "narration.png"
# run_episode's parts (envs/episode.py), in the order they happen; anything else an episode records is appended
TIME_PARTS = ("reset", "physics", "render", "policy", "other")
PART_COLORS = {"reset": "#9467bd", "physics": "#1f77b4", "render": "#ff7f0e", "policy": "#d62728", "other": "#c7c7c7"}


def _ok(records: Iterable[dict]) -> list[dict]:
    return [r for r in records if r.get("status") == "ok"]


def _task_label(suite: str, task_id: int) -> str:
    return f"{suite} task {task_id}"


def _start(r: dict) -> tuple[str, int]:
    """The start of an episode: official init state or fresh scene (both can be in one merged folder)."""
    return ("scene", int(r["scene"])) if r.get("scene") is not None else ("init", int(r["init_state"]))


def success_grid(records: Iterable[dict], folder: Path) -> str:
    """Success rate over seeds per (task, start): green solved by every seed, red by none, grey not run."""
    import numpy as np

    ok = _ok(records)
    if not ok:
        raise Skip("no episode ran")
    cells: dict[tuple, list[bool]] = defaultdict(list)
    for r in ok:
        cells[((r["suite"], int(r["task_id"])), _start(r))].append(bool(r["success"]))
    rows = sorted({k[0] for k in cells})
    cols = sorted({k[1] for k in cells})
    grid = np.full((len(rows), len(cols)), np.nan)
    for (row, col), outcomes in cells.items():
        grid[rows.index(row), cols.index(col)] = sum(outcomes) / len(outcomes)
    fig, ax = plt.subplots(figsize=(min(max(7.0, 3.5 + 0.32 * len(cols)), 24), 1.8 + 0.4 * len(rows)))
    cmap = plt.get_cmap("RdYlGn").with_extremes(bad="#dddddd")
    im = ax.imshow(np.ma.masked_invalid(grid), cmap=cmap, vmin=0, vmax=1, aspect="auto", interpolation="nearest")
    if len(cols) <= 30:
        for i in range(len(rows)):
            for j in range(len(cols)):
                if not np.isnan(grid[i, j]):
                    ax.text(j, i, f"{grid[i, j]:.0%}", ha="center", va="center", fontsize=6)
    step = max(1, len(cols) // 25)
    ax.set_xticks(range(0, len(cols), step), [("s" if kind == "scene" else "") + str(v)
                                              for kind, v in cols[::step]], fontsize=7)
    rates = [np.nanmean(grid[i]) for i in range(len(rows))]
    ax.set_yticks(range(len(rows)), [f"{_task_label(*row)} ({rate:.0%})" for row, rate in zip(rows, rates, strict=True)],
                  fontsize=8)
    kinds = {kind for kind, _ in cols}
    ax.set_xlabel("init state" if kinds == {"init"} else "fresh scene (s)" if kinds == {"scene"}
                  else "init state / fresh scene (s)")
    seeds = sorted({int(r["seed"]) for r in ok})
    ax.set_title(f"Success per task and start ({len(ok)} episodes, seeds {', '.join(map(str, seeds))})", fontsize=10)
    fig.colorbar(im, ax=ax, fraction=0.03, pad=0.02, label="success over seeds")
    return _save(fig, folder, SUCCESS_PNG)


def latency_histogram(records: Iterable[dict], folder: Path) -> str:
    """Every policy call's latency (as the policy measured it, else wall clock around act())."""
    import numpy as np

    ms = np.array([x for r in _ok(records) for x in (r.get("frame_ms") or []) if x is not None], dtype=float)
    if ms.size == 0:
        raise Skip("no policy call was timed")
    fig, ax = plt.subplots(figsize=(7, 4))
    ax.hist(ms, bins=min(60, max(10, ms.size // 4)), color="#1f77b4", alpha=0.8)
    for q, style in ((50, "-"), (90, "--"), (99, ":")):
        v = float(np.percentile(ms, q))
        ax.axvline(v, color="k", linestyle=style, linewidth=1, label=f"p{q} {v:.1f} ms")
    ax.set_xlabel("policy-call latency (ms)")
    ax.set_ylabel("calls")
    ax.set_title(f"Policy-call latency ({ms.size} calls)")
    ax.legend()
    return _save(fig, folder, LATENCY_PNG)


def time_split(records: Iterable[dict], folder: Path) -> str:
    """Mean seconds per episode in each part of its wall time, one bar per task and one for all."""
    ok = [r for r in _ok(records) if r.get("time_s")]
    if not ok:
        raise Skip("no episode recorded its time split")
    parts = list(TIME_PARTS) + sorted({k for r in ok for k in r["time_s"]} - set(TIME_PARTS))
    groups: dict[str, list[dict]] = defaultdict(list)
    for r in sorted(ok, key=lambda r: (r["suite"], int(r["task_id"]))):
        groups[_task_label(r["suite"], int(r["task_id"]))].append(r)
    if len(groups) > 1:
        groups["all"] = ok
    labels = list(groups)
    fig, ax = plt.subplots(figsize=(9, 1.6 + 0.45 * len(labels)))
    left = [0.0] * len(labels)
    for part in parts:
        means = [sum(float(r["time_s"].get(part) or 0.0) for r in groups[g]) / len(groups[g]) for g in labels]
        ax.barh(labels, means, left=left, color=PART_COLORS.get(part), label=part)
        left = [a + b for a, b in zip(left, means, strict=True)]
    ax.invert_yaxis()
    ax.set_xlabel("mean seconds per episode")
    ax.set_title("Where an episode's wall time goes")
    ax.legend(fontsize=8, loc="center left", bbox_to_anchor=(1.01, 0.5), frameon=False)
    return _save(fig, folder, TIME_SPLIT_PNG)


def narration_over_time(records: Iterable[dict], folder: Path) -> str:
    """Accuracy of each scored language task at policy call i, over the episodes that reached call i."""
    from .libero.narration import frame_correctness

    ok = _ok(records)
    series = {}
    for task, labels_key in (("narrate", "subtask_labels"), ("memory", "memory_labels")):
        by_call: dict[int, list[bool]] = defaultdict(list)
        for r in ok:
            per_frame = frame_correctness(r.get("narration") or [], r.get(labels_key) or [], task)
            for i, c in enumerate(per_frame or []):
                if c is not None:
                    by_call[i].append(c)
        if by_call:
            series[task] = by_call
    if not series:
        raise Skip("no narration was scored (no language task, or the env gives no subtask labels)")
    fig, ax = plt.subplots(figsize=(7, 4))
    for task, by_call in series.items():
        calls = sorted(by_call)
        total = sum(len(v) for v in by_call.values())
        acc = sum(sum(v) for v in by_call.values()) / total
        ax.plot(calls, [sum(by_call[i]) / len(by_call[i]) for i in calls], marker=".",
                label=f"{task}: {acc:.0%} of {total} labelled calls")
    ax.set_ylim(-0.05, 1.05)
    ax.set_xlabel("policy call within the episode")
    ax.set_ylabel("accuracy (episodes that reached the call)")
    ax.set_title("Language accuracy over the episode (labels from sim state)")
    ax.grid(alpha=0.3)
    ax.legend()
    return _save(fig, folder, NARRATION_PNG)


PLOTS: tuple[Callable[[list[dict], Path], str], ...] = (success_grid, latency_histogram, time_split,
                                                         narration_over_time)
PLOT_FILES = (SUCCESS_PNG, LATENCY_PNG, TIME_SPLIT_PNG, NARRATION_PNG)


def write_plots(out: str | Path, records: Iterable[dict]) -> list[str]:
    """Every figure the records have data for, as PNGs in `out`; returns their names. A figure the records cannot
    fill is not written, and an older copy of it (from records since replaced) is removed."""
    out = Path(out)
    records = list(records)
    written = []
    for plot, name in zip(PLOTS, PLOT_FILES, strict=True):
        try:
            written.append(plot(records, out))
        except Skip:
            (out / name).unlink(missing_ok=True)
    return written
