"""What a collection did, per task, from its attempt log (`oxygen-gym collect libero --report --out D`): how often
the clean expert and the perturbed one succeeded on the scenes it kept, how many scenes it rejected and why, and
the time the episodes took. Read from attempts.jsonl alone, so it works on a collection still running."""
from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path

from .collector import ATTEMPTS


def attempt_records(out: str | Path) -> list[dict]:
    """Every attempt of the collection in `out`, in the order they finished (a line torn by a killed run skipped)."""
    log = Path(out) / ATTEMPTS
    if not log.is_file():
        raise ValueError(f"--out {out}: no {ATTEMPTS} (nothing collected there yet)")
    records = []
    for line in log.read_text().splitlines():
        try:
            records.append(json.loads(line))
        except json.JSONDecodeError:
            continue
    return records


def attempt_report(records: list[dict]) -> dict:
    """Per task (and over all): attempts, rejected scenes, clean and perturbed successes among the kept ones,
    steps, and summed episode seconds (worker time)."""
    rows: dict = defaultdict(lambda: {"attempts": 0, "rejected": 0, "clean": 0, "clean_ok": 0, "perturbed": 0,
                                       "perturbed_ok": 0, "steps": 0, "seconds": 0.0})
    for r in records:
        for key in (int(r["task_id"]), "all"):
            row = rows[key]
            row["attempts"] += 1
            row["seconds"] += float(r.get("seconds", 0.0))
            if r.get("rejected"):
                row["rejected"] += 1
                continue
            kind = "clean" if int(r.get("variant", 0)) == 0 else "perturbed"
            row[kind] += 1
            row[f"{kind}_ok"] += bool(r["success"])
            row["steps"] += int(r.get("steps", 0))
    return {key: dict(rows[key]) for key in sorted((k for k in rows if k != "all"), key=int) + ["all"] if key in rows}


def format_report(report: dict) -> str:
    """The report as a markdown table."""
    def rate(ok: int, n: int) -> str:
        return f"{ok}/{n} ({100.0 * ok / n:.0f}%)" if n else "-"

    lines = ["| task | attempts | rejected scenes | clean expert | perturbed | steps | worker min |",
             "| --- | --- | --- | --- | --- | --- | --- |"]
    for key, row in report.items():
        name = "**all**" if key == "all" else str(key)
        lines.append(f"| {name} | {row['attempts']} | {row['rejected']} | {rate(row['clean_ok'], row['clean'])} | "
                     f"{rate(row['perturbed_ok'], row['perturbed'])} | {row['steps']:,} | {row['seconds'] / 60:.1f} |")
    return "\n".join(lines)
