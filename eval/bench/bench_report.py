"""results.md: the run's configuration, stage costs, every point beside its ideal time, the targets, the soak."""
from __future__ import annotations


def _f(x, nd: int = 1, pct: bool = False) -> str:
    if x is None or (isinstance(x, float) and x != x):
        return "-"
    if pct:
        return f"{100 * x:.{nd}f}%"
    return f"{x:.{nd}f}"


def _mb(x) -> str:
    return "-" if x is None else f"{x / 2**20:.0f}"


def markdown(results: dict) -> str:
    cfg = results["config"]
    lines = [
        "# oxygen-gym bench",
        "",
        f"`{cfg['command']}`",
        "",
        f"- model `{cfg['model']}` ({cfg['model_params'] / 1e6:.1f} M parameters), robot `{cfg['robot']}` "
        f"({cfg['cameras']} cameras, horizon {cfg['horizon']}, prefix {cfg['prefix_tokens']} tokens), "
        f"device `{cfg['device']}` {cfg['dtype']}, {cfg['threads']} threads",
        f"- kernel path `{cfg['kernel_path']}`, CUDA graphs {'on' if cfg['cuda_graphs'] else 'off'}; "
        f"{cfg['frames']} measured frames per point after warm-up; points interleaved {cfg['chunk']} frames at a time",
        f"- machine: {cfg['machine']}; load average before {cfg['load_before']}, after {cfg.get('load_after', '-')}",
        f"- torch {cfg['torch']}, {cfg['started']}, wall {_f(cfg.get('wall_s'), 0)} s",
        "",
    ]
    groups = results.get("stage_costs_by_group") or {}
    if groups:
        ss = sorted({s for c in groups.values() for s in c["D_ms"]}, key=int)
        # batch sizes of the fixed-workload groups (arrival patterns add many more; results.json has them all)
        bs = sorted({b for g, c in groups.items() if g.startswith("fixed") for b in c["d_ms"]}, key=int)
        lines += [
            "## Stage costs (medians per group of interleaved points)",
            "",
            "| group | P | " + " | ".join(f"D (S={s})" for s in ss) + " | " + " | ".join(f"d({b})" for b in bs) + " |",
            "|" + " --- |" * (2 + len(ss) + len(bs)),
        ]
        for g, c in groups.items():
            d = " | ".join(
                f"{_f(c['d_ms'][b])} ({_f(c['d_ratio_to_d1'].get(b), 2)}x)" if b in c["d_ms"] else "-" for b in bs
            )
            lines.append(f"| {g} | {_f(c['P_ms'])} | " + " | ".join(_f(c["D_ms"].get(s)) for s in ss) + f" | {d} |")
        lines += [
            "",
            "ms; d(B) = one decode step at batch B, with d(B)/d(1). Each point's ideal time uses its group's costs "
            "(ideal.py); points of a group ran interleaved, so they share the machine's load.",
            "",
        ]
    cuda = any("energy_j_per_request" in p for p in results["points"])
    experts = any(p.get("E", 1) != 1 for p in results["points"])  # a --heads sweep: an E column
    head = [
        "workload", "mode", "N", "k", "S", *(["E"] if experts else []), "T p50 ms", "T p99 ms", "ideal ms", "formula", "eff", "action Hz", "tok/s",
        "batch", "speedup", "prefill", "denoise", "decode", "manager", "mgr %", "held MB",
    ]
    peak = any(p.get("peak_memory_bytes") for p in results["points"])  # measured on CUDA only (metrics.py)
    if peak:
        head += ["peak MB"]
    if cuda:
        head += ["W", "J/request"]
    lines += ["## Points", "", "| " + " | ".join(head) + " |", "|" + " --- |" * len(head)]
    for p in results["points"]:
        if "frame_ms_mean" not in p:
            lines.append(f"| {p['workload']} | {p['mode']} | {p['N']} | {p['k'] or '-'} | {p['S']} | error: "
                         f"{(p.get('error') or 'no frames').strip().splitlines()[-1]} |")
            continue
        s = p["stage_ms"]
        row = [
            p["workload"], p["mode"], p["N"], p["k"] or "-", p["S"], *([p.get("E", 1)] if experts else []), _f(p["frame_ms_p50"]), _f(p["frame_ms_p99"]),
            _f(p.get("ideal_frame_ms")), p.get("ideal_formula", ""), _f(p.get("efficiency"), 3), _f(p["action_hz"], 2),
            _f(p["language_tokens_per_s"], 1), _f(p["mean_batch_size"], 1), _f(p.get("speedup_vs_isolated"), 2),
            _f(s["prefill"]), _f(s["denoise"]), _f(s["decode"]), _f(s["manager"], 2), _f(p["manager_share"], 2, pct=True),
            _mb(p.get("held_memory_bytes")),
        ]
        if peak:
            row += [_mb(p.get("peak_memory_bytes"))]
        if cuda:
            row += [_f(p.get("avg_power_w"), 0), _f(p.get("energy_j_per_request"), 2)]
        lines.append("| " + " | ".join(str(x) for x in row) + " |")
    lines += [
        "",
        "T = frame latency; speedup = isolated mean T / this mean T (same N, S, workload); eff = ideal / T p50; "
        "stage columns are mean ms per frame (parallel: summed over both workers).",
        "",
    ]
    unmeasured = [p for p in results["points"] if p.get("energy_note")]
    if unmeasured:
        lines += [f"Energy of {len(unmeasured)} point(s) {unmeasured[0]['energy_note']}.", ""]
    if experts:
        lines += expert_table(results["points"])
    targets = results.get("targets") or []
    if targets:
        lines += ["## Targets", "", "| target | value | needs | met | note |", "| --- | --- | --- | --- | --- |"]
        for t in targets:
            met = {True: "yes", False: "**no**", None: "not measured"}[t["met"]]
            lines.append(f"| {t['name']} | {_f(t['value'], 3)} | {t['op']} {t['threshold']} | {met} | {t['note']} |")
        lines.append("")
    cal = results.get("decode_scaling")
    if cal:
        bs = cal["batches"]
        lines += [
            "## Decode step vs batch size, per kernel path (model.decode_step alone)",
            "",
            "| path | " + " | ".join(f"B={b}" for b in bs) + " |",
            "|" + " --- |" * (1 + len(bs)),
        ]
        for path, ms in cal["ms"].items():
            ratio = cal["ratio_to_d1"][path]
            lines.append(f"| {path} | " + " | ".join(f"{_f(ms[str(b)])} ({_f(ratio[str(b)], 2)}x)" for b in bs) + " |")
        lines += ["", f"The run used `{cfg['kernel_path']}`.", ""]
    soak = results.get("soak")
    if soak and soak.get("summary"):
        s = soak["summary"]
        lines += [
            "## Soak (D.3)",
            "",
            f"{s['frames']} frames of `oxygen` (k={s['k']}, {s['slots']} slots) under fluctuating arrivals; peak active "
            f"{s['peak_active']}, requests queued for a slot {s['queued_requests']}.",
            "",
            f"- frame latency: first full cycles {_f(s['latency_first_ms'])} ms, last {_f(s['latency_last_ms'])} ms, "
            f"drift {_f(s['latency_drift'], 2, pct=True)}",
            f"- memory: tensors {_mb(s['memory_first_bytes'])} -> {_mb(s['memory_last_bytes'])} MB, RSS "
            f"{_mb(s['rss_first_bytes'])} -> {_mb(s['rss_last_bytes'])} MB (growth {_f(s['rss_growth_mb'], 1)} MB)",
            "",
        ]
    plots = results.get("plots") or {}
    if plots:
        lines += ["## Plots", ""]
        for name, info in plots.items():
            lines.append(f"- `{info['file']}`" if info.get("file") else f"- {name}: not drawn ({info.get('skipped')})")
        lines.append("")
    return "\n".join(lines)


def expert_table(points: list[dict]) -> list[str]:
    """Paper Table 4's view of a --heads sweep: per expert count E, isolated (a prefill per expert) against oxygen
    and shared (one prefill for all), and the prefill time one frame saves: (prefills isolated ran - 1) x P."""
    lines = [
        "## Action experts on one prefill (paper Table 4)",
        "",
        "| E | N | k | isolated ms | shared ms | oxygen ms | speedup (oxygen) | ideal speedup | prefill saved ms/frame |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    measured = [p for p in points if "frame_ms_mean" in p and p["workload"] == "fixed"]
    keys = sorted({(p.get("E", 1), p["N"], p["k"]) for p in measured if p["mode"] == "oxygen"})
    for e, n, k in keys:
        def pick(mode, kk=None):
            return next((p for p in measured if p["mode"] == mode and p.get("E", 1) == e and p["N"] == n and p["k"] == kk), None)

        iso, sh, ox = pick("isolated"), pick("shared"), pick("oxygen", k)
        saved = None
        if ox and ox.get("ideal_terms_ms", {}).get("P") is not None:
            saved = e * ox["ideal_terms_ms"]["P"]  # isolated's per-expert prefills that sharing folds into one
        lines.append(
            f"| {e} | {n} | {k} | {_f(iso and iso['frame_ms_mean'])} | {_f(sh and sh['frame_ms_mean'])} | "
            f"{_f(ox['frame_ms_mean'])} | {_f(ox.get('speedup_vs_isolated'), 2)} | {_f(ox.get('ideal_speedup_vs_isolated'), 2)} | "
            f"{_f(saved)} |"
        )
    lines += ["", "Mean frame ms; speedup = isolated / oxygen at the same E, N. Prefill saved: E x P (isolated runs "
              "E + 1 prefills per frame, oxygen one: E expert prefills and the request's own fold into it).", ""]
    return lines
