"""The paper's figures, from results.json alone. Each function draws one PNG into `folder` and returns its file name,
or raises `Skip` saying which points the run lacks."""
from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

from .metrics import find  # noqa: E402

MODE_COLORS = {"isolated": "#7f7f7f", "parallel": "#bcbd22", "shared": "#1f77b4", "oxygen": "#d62728", "upper_bound": "#2ca02c"}
STAGE_COLORS = {"prefill": "#1f77b4", "denoise": "#ff7f0e", "decode": "#2ca02c", "manager": "#d62728", "other": "#c7c7c7"}


class Skip(Exception):
    """The run has no data for this figure."""


def _fixed(results: dict) -> list[dict]:
    s0 = results["config"]["S"][0]
    return [p for p in results["points"] if p["workload"] == "fixed" and p["S"] == s0 and "frame_ms_mean" in p]


def _reference(points: list[dict]) -> tuple[int, int | None]:
    """N=30 and k=5 when the run has them (the paper's headline point), else the largest N and the middle k."""
    ns = sorted({p["N"] for p in points})
    ks = sorted({p["k"] for p in points if p["k"] is not None})
    if not ns:
        raise Skip("no measured fixed-workload points")
    n = 30 if 30 in ns else ns[-1]
    k = (5 if 5 in ks else ks[len(ks) // 2]) if ks else None
    return n, k


def _save(fig, folder: Path, name: str) -> str:
    fig.tight_layout()
    fig.savefig(folder / name, dpi=120)
    plt.close(fig)
    return name


def frontier(results: dict, folder: Path) -> str:
    """Fig. 4: action rate against language throughput, one series per mode (labels N/k)."""
    points = _fixed(results)
    if not points:
        raise Skip("no measured fixed-workload points")
    fig, ax = plt.subplots(figsize=(7, 5))
    for mode in dict.fromkeys(p["mode"] for p in points):
        mine = sorted((p for p in points if p["mode"] == mode), key=lambda p: p["language_tokens_per_s"])
        x = [p["language_tokens_per_s"] for p in mine]
        y = [p["action_hz"] for p in mine]
        ax.scatter(x, y, color=MODE_COLORS.get(mode), label=mode, zorder=3)
        front, best = [], -1.0
        for p in sorted(mine, key=lambda p: -p["language_tokens_per_s"]):
            if p["action_hz"] > best:
                front.append(p)
                best = p["action_hz"]
        front.sort(key=lambda p: p["language_tokens_per_s"])
        ax.plot([p["language_tokens_per_s"] for p in front], [p["action_hz"] for p in front], color=MODE_COLORS.get(mode), alpha=0.6)
        for p in mine:
            label = f"N{p['N']}" + (f"/k{p['k']}" if p["k"] else "")
            ax.annotate(label, (p["language_tokens_per_s"], p["action_hz"]), fontsize=6, xytext=(3, 2), textcoords="offset points")
    ax.set_xlabel("language tokens / s")
    ax.set_ylabel("action rate (Hz, horizon / mean frame time)")
    ax.set_title(f"Action rate vs language throughput ({results['config']['model']}, {results['config']['robot']})")
    ax.grid(alpha=0.3)
    ax.legend()
    return _save(fig, folder, "frontier.png")


def speedup_heatmap(results: dict, folder: Path) -> str:
    """Fig. 5: oxygen's speedup over isolated at the largest N, over k x S."""
    pts = [p for p in results["points"] if p["workload"] == "fixed" and p["mode"] == "oxygen" and p.get("speedup_vs_isolated")]
    if not pts:
        raise Skip("no oxygen point with an isolated baseline")
    n = 30 if any(p["N"] == 30 for p in pts) else max(p["N"] for p in pts)
    pts = [p for p in pts if p["N"] == n]
    ks = sorted({p["k"] for p in pts})
    ss = sorted({p["S"] for p in pts})
    grid = np.full((len(ks), len(ss)), np.nan)
    for p in pts:
        grid[ks.index(p["k"]), ss.index(p["S"])] = p["speedup_vs_isolated"]
    fig, ax = plt.subplots(figsize=(1.6 + 1.4 * len(ss), 1.4 + 0.8 * len(ks)))
    im = ax.imshow(grid, cmap="viridis", aspect="auto")
    for i in range(len(ks)):
        for j in range(len(ss)):
            if not np.isnan(grid[i, j]):
                ax.text(j, i, f"{grid[i, j]:.2f}x", ha="center", va="center", color="w", fontsize=10)
    ax.set_xticks(range(len(ss)), [f"S={s}" for s in ss])
    ax.set_yticks(range(len(ks)), [f"k={k}" for k in ks])
    ax.set_title(f"oxygen speedup over isolated, N={n}")
    fig.colorbar(im, ax=ax)
    return _save(fig, folder, "speedup_heatmap.png")


def ablation(results: dict, folder: Path) -> str:
    """Fig. 6: isolated -> shared -> oxygen -> upper bound at the reference N and k."""
    points = _fixed(results)
    n, k = _reference(points)
    bars = []
    for mode in ("isolated", "shared", "oxygen", "upper_bound"):
        p = find(points, mode=mode, N=n, k=k if mode in ("oxygen", "upper_bound") else None)
        if p:
            bars.append((mode, p))
    if len(bars) < 2:
        raise Skip(f"fewer than two of isolated/shared/oxygen/upper_bound at N={n}, k={k}")
    fig, ax = plt.subplots(figsize=(6.5, 4))
    names = [m for m, _ in bars]
    ms = [p["frame_ms_mean"] for _, p in bars]
    ideal = [p.get("ideal_frame_ms") or np.nan for _, p in bars]
    ax.bar(names, ms, color=[MODE_COLORS[m] for m in names], label="measured")
    ax.scatter(names, ideal, marker="_", s=900, color="k", label="ideal", zorder=3)
    for i, (_, p) in enumerate(bars):
        sp = p.get("speedup_vs_isolated")
        ax.text(i, ms[i], f"{ms[i]:.0f} ms\n{sp:.2f}x" if sp else f"{ms[i]:.0f} ms", ha="center", va="bottom", fontsize=8)
    ax.set_ylabel("mean frame time (ms)")
    ax.set_title(f"Ablation, N={n}, k={k}")
    ax.set_ylim(0, max(ms) * 1.25)
    ax.legend()
    return _save(fig, folder, "ablation.png")


def stage_breakdown(results: dict, folder: Path) -> str:
    """Table 6: where each mode's frame goes, at the reference N and k."""
    points = _fixed(results)
    n, k = _reference(points)
    rows = []
    for mode in ("isolated", "parallel", "shared", "oxygen", "upper_bound"):
        p = find(points, mode=mode, N=n, k=k if mode in ("oxygen", "upper_bound") else None)
        if p:
            rows.append((mode, p))
    if not rows:
        raise Skip(f"no points at N={n}")
    fig, ax = plt.subplots(figsize=(7.5, 0.7 * len(rows) + 1.5))
    for i, (mode, p) in enumerate(rows):
        left = 0.0
        parts = dict(p["stage_ms"])
        parts["other"] = max(p.get("other_ms") or 0.0, 0.0)
        for stage, ms in parts.items():
            ax.barh(i, ms, left=left, color=STAGE_COLORS[stage], label=stage if i == 0 else None)
            left += ms
        ax.text(left, i, f" {p['frame_ms_mean']:.0f} ms", va="center", fontsize=8)
    ax.set_yticks(range(len(rows)), [m for m, _ in rows])
    ax.invert_yaxis()
    ax.set_xlabel("mean ms per frame (parallel: both workers' stages summed)")
    ax.set_title(f"Stage breakdown, N={n}, k={k}")
    ax.legend(ncol=5, fontsize=8, loc="lower right")
    return _save(fig, folder, "stage_breakdown.png")


def manager_overhead(results: dict, folder: Path) -> str:
    """Table 7: the manager's share of the frame against the decode batch size (oxygen points)."""
    pts = sorted((p for p in _fixed(results) if p["mode"] == "oxygen"), key=lambda p: p["mean_batch_size"])
    if not pts:
        raise Skip("no oxygen points")
    fig, ax = plt.subplots(figsize=(6.5, 4))
    b = [p["mean_batch_size"] for p in pts]
    share = [100 * p["manager_share"] for p in pts]
    ax.plot(b, share, "o-", color=MODE_COLORS["oxygen"])
    for p, x, y in zip(pts, b, share):
        ax.annotate(f"{p['stage_ms']['manager']:.2f} ms", (x, y), fontsize=7, xytext=(3, 3), textcoords="offset points")
    for ref in (6, 30):
        ax.axvline(ref, color="k", alpha=0.2, ls="--")
    ax.axhline(1.0, color="r", alpha=0.3, ls=":", label="1% target")
    ax.set_xlabel("mean decode batch size")
    ax.set_ylabel("manager share of frame (%)")
    ax.set_title("Manager overhead (paper: 1.2% at batch 6, 6.6% at batch 30)")
    ax.legend()
    ax.grid(alpha=0.3)
    return _save(fig, folder, "manager_overhead.png")


def soak(results: dict, folder: Path) -> str:
    """Fig. 12: memory and latency over a long fluctuating run."""
    s = results.get("soak")
    if not s or not s.get("series"):
        raise Skip("no soak run (--soak-frames)")
    ser = s["series"]
    f = np.array(ser["frame"])
    fig, (a1, a2) = plt.subplots(2, 1, figsize=(8, 6), sharex=True)
    ms = np.array(ser["frame_ms"])
    a1.plot(f, ms, lw=0.4, alpha=0.5, color="#d62728", label="frame")
    w = min(119, len(ms))
    if w > 1:
        roll = np.convolve(ms, np.ones(w) / w, mode="valid")
        a1.plot(f[w - 1 :], roll, color="k", lw=1.2, label=f"mean over {w} frames")
    a1.set_ylabel("frame latency (ms)")
    a1.legend(fontsize=8)
    a1b = a1.twinx()
    a1b.plot(f, ser["active"], color="#1f77b4", lw=0.5, alpha=0.5)
    a1b.set_ylabel("active requests", color="#1f77b4")
    a2.plot(f, np.array(ser["memory_bytes"]) / 2**20, label="engine tensors")
    a2.plot(f, np.array(ser["rss_bytes"]) / 2**20, label="process RSS")
    a2.set_ylabel("MB")
    a2.set_xlabel("frame")
    a2.legend(fontsize=8)
    a1.set_title(f"Soak: {len(f)} frames, fluctuating load")
    return _save(fig, folder, "soak.png")


def decode_scaling(results: dict, folder: Path) -> str:
    """d(B)/d(1) per kernel path, beside the run's own scheduler-measured d(B)."""
    cal = results.get("decode_scaling")
    costs = results.get("stage_costs") or {}
    if not cal and not costs.get("d_ratio_to_d1"):
        raise Skip("no decode-step measurements")
    fig, ax = plt.subplots(figsize=(6.5, 4))
    if cal:
        for path, ratio in cal["ratio_to_d1"].items():
            ax.plot([int(b) for b in ratio], list(ratio.values()), "o-", label=f"decode_step, {path}")
    run = {int(b): r for b, r in (costs.get("d_ratio_to_d1") or {}).items() if r is not None}
    if run:
        ax.plot(list(run), list(run.values()), "ks", label=f"scheduler stage costs ({results['config']['kernel_path']})")
    ax.plot([1, 32], [1, 1], color="k", alpha=0.2, ls="--", label="free batching")
    ax.set_xlabel("batch size B")
    ax.set_ylabel("d(B) / d(1)")
    ax.set_title("Decode step cost vs batch size")
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3)
    return _save(fig, folder, "decode_scaling.png")


def workloads(results: dict, folder: Path) -> str:
    """Fig. 7: each arrival pattern / length mix, per mode: action rate and language throughput."""
    pts = [p for p in results["points"] if "frame_ms_mean" in p and p["S"] == results["config"]["S"][0]]
    kinds = list(dict.fromkeys(p["workload"] for p in pts))
    if len(kinds) < 2:
        raise Skip("one workload only (--workloads fixed,poisson:1,mixed:5/30 ...)")
    n_max = max(p["N"] for p in pts if p["workload"] == "fixed") if any(p["workload"] == "fixed" for p in pts) else None
    series = {}
    for p in pts:
        if p["workload"] == "fixed" and p["N"] != n_max:
            continue
        label = p["mode"] + (f" k={p['k']}" if p["k"] else "")
        series.setdefault(label, {})[p["workload"]] = p
    fig, (a1, a2) = plt.subplots(1, 2, figsize=(11, 4.6))
    width = 0.8 / max(len(series), 1)
    ks = sorted({p["k"] for p in pts if p["k"]})
    for i, (label, by) in enumerate(series.items()):
        x = np.arange(len(kinds)) + i * width
        mode = label.split()[0]
        k = next(iter(by.values()))["k"]
        alpha = 1.0 - 0.6 * (ks.index(k) / max(len(ks) - 1, 1)) if k else 1.0  # lighter = larger k
        style = dict(color=MODE_COLORS.get(mode), alpha=alpha, edgecolor="k", linewidth=0.3)
        a1.bar(x, [by[w]["action_hz"] if w in by else 0 for w in kinds], width, label=label, **style)
        a2.bar(x, [by[w]["language_tokens_per_s"] if w in by else 0 for w in kinds], width, **style)
    for a, name in ((a1, "action rate (Hz)"), (a2, "language tokens / s")):
        a.set_xticks(np.arange(len(kinds)) + 0.4 - width / 2, kinds, fontsize=8)
        a.set_ylabel(name)
    fig.legend(loc="lower center", ncol=min(len(series), 6), fontsize=7, frameon=False)
    fig.subplots_adjust(bottom=0.25)
    fig.suptitle(f"Workloads at N={n_max} (mixed: its own lengths): arrival patterns and short/long mixes")
    fig.savefig(folder / "workloads.png", dpi=120, bbox_inches="tight")
    plt.close(fig)
    return "workloads.png"


def experts(results: dict, folder: Path) -> str:
    """Paper Table 4: speedup over isolated against the number of action experts E on one prefill, per N (oxygen
    solid, shared dotted), each with its ideal-time model dashed beside it."""
    points = [p for p in results["points"] if p["workload"] == "fixed" and "frame_ms_mean" in p]
    es = sorted({p.get("E", 1) for p in points})
    if len(es) < 2:
        raise Skip("one expert count only (--heads 1,2,3 sweeps E)")
    fig, ax = plt.subplots(figsize=(6.5, 4))
    colors = plt.cm.viridis(np.linspace(0, 0.85, len({p["N"] for p in points})))
    for color, n in zip(colors, sorted({p["N"] for p in points})):
        for mode, style in (("oxygen", "-o"), ("shared", ":s")):
            row = [next((p for p in points if p["mode"] == mode and p["N"] == n and p.get("E", 1) == e), None) for e in es]
            meas = [p.get("speedup_vs_isolated") if p else np.nan for p in row]
            ideal = [p.get("ideal_speedup_vs_isolated") if p else np.nan for p in row]
            ax.plot(es, [np.nan if v is None else v for v in meas], style, color=color, label=f"{mode} N={n}")
            if mode == "oxygen":
                ax.plot(es, [np.nan if v is None else v for v in ideal], "--", color=color, alpha=0.6)
    ax.axhline(1.0, color=MODE_COLORS["isolated"], lw=0.8)
    ax.set_xticks(es)
    ax.set_xlabel("action experts on one prefill (paper's E = this + 1, counting language)")
    ax.set_ylabel("speedup over isolated (dashed: ideal)")
    ax.set_title("Several action experts on one prefill (paper Table 4)")
    ax.legend(fontsize=7, ncol=2)
    return _save(fig, folder, "experts.png")


ALL = {
    "frontier": frontier,
    "experts": experts,
    "speedup_heatmap": speedup_heatmap,
    "ablation": ablation,
    "stage_breakdown": stage_breakdown,
    "manager_overhead": manager_overhead,
    "soak": soak,
    "decode_scaling": decode_scaling,
    "workloads": workloads,
}


def draw_all(results: dict, folder: Path) -> dict[str, dict]:
    """Draw every figure the run has data for; {name: {"file": ...} or {"skipped": why}}."""
    folder.mkdir(parents=True, exist_ok=True)
    out = {}
    for name, fn in ALL.items():
        try:
            out[name] = {"file": str(Path(folder.name) / fn(results, folder))}
        except Skip as e:
            out[name] = {"skipped": str(e)}
    return out
