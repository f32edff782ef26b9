"""The success-vs-latency table, JSON and plot of `oxygen-gym bench live` (from the points' eval summaries)."""
from __future__ import annotations

from pathlib import Path

from oxygen_gym.eval.libero.results import write_json_atomic, write_text_atomic


def _row(summary: dict) -> dict:
    o, ep, live = summary["overall"], summary["episodes"], summary.get("live") or {}
    delay = live.get("delay_steps") or {}
    return {"episodes": o["episodes"], "successes": o["successes"], "success_rate": o["success_rate"],
            "errors": ep["error"], "held_share": live.get("held_share"), "stale_actions": live.get("stale_actions"),
            "delay_steps_p50": delay.get("p50"), "delay_steps_mean": delay.get("mean"),
            "errors_seen": sorted({e["error"] for e in summary.get("errors", []) if e.get("error")})[:3]}


def _cell(row: dict | None) -> str:
    if row is None:
        return "-"
    if not row["episodes"]:
        return f"err ({row['errors']})"
    held = f", held {100 * row['held_share']:.0f}%" if row["held_share"] is not None else ""
    return f"{100 * row['success_rate']:.0f}% ({row['successes']}/{row['episodes']}{held})"


def write_live_report(out: str | Path, summaries: dict, strategies: list[str], latencies: list[str],
                      args: dict) -> dict:
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    rows = {f"{s}@{lat}": _row(summ) for (s, lat), summ in summaries.items()}
    result = {"config": {k: v for k, v in args.items() if not callable(v)}, "strategies": strategies,
              "latencies": latencies, "points": rows,
              "points_ok": bool(rows) and all(r["episodes"] > 0 for r in rows.values())}
    write_json_atomic(out / "results.json", result)
    lines = ["# Success rate against latency (live clock)", "",
             f"checkpoint `{args.get('checkpoint')}`, suite `{args.get('suite')}`, tasks `{args.get('tasks')}`, init "
             f"states `{args.get('init_states')}`, seeds `{args.get('seeds')}`, max steps "
             f"`{args.get('max_steps') or 'protocol'}`, mode `{args.get('mode')}`, device `{args.get('device')}`", "",
             "| strategy | " + " | ".join(f"{lat} ms" if lat != "measured" else lat for lat in latencies) + " |",
             "| --- |" + " --- |" * len(latencies)]
    for s in strategies:
        lines.append(f"| {s} | " + " | ".join(_cell(rows.get(f"{s}@{lat}")) for lat in latencies) + " |")
    errors = sorted({e for r in rows.values() for e in r["errors_seen"]})
    if errors:
        lines += ["", "Errors seen: " + "; ".join(errors)]
    write_text_atomic(out / "results.md", "\n".join(lines) + "\n")
    _plot(out / "success_vs_latency.png", rows, strategies, latencies)
    return result


def _plot(path: Path, rows: dict, strategies: list[str], latencies: list[str]) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fixed = [lat for lat in latencies if lat != "measured"]
    fig, ax = plt.subplots(figsize=(6, 4))
    for s in strategies:
        xs = [float(lat) for lat in fixed if rows.get(f"{s}@{lat}", {}).get("episodes")]
        ys = [100 * rows[f"{s}@{lat}"]["success_rate"] for lat in fixed if rows.get(f"{s}@{lat}", {}).get("episodes")]
        line = ax.plot(xs, ys, marker="o", label=s)[0]
        m = rows.get(f"{s}@measured")
        if m and m["episodes"]:
            ax.axhline(100 * m["success_rate"], color=line.get_color(), linestyle=":", linewidth=1)
    ax.set_xlabel("policy latency (ms; dotted: measured)")
    ax.set_ylabel("success rate (%)")
    ax.set_ylim(-5, 105)
    ax.legend()
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
