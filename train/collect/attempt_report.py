"""What a collection did, per task, from its attempt log (`oxygen-gym collect libero --report --out D`): how often
variant 0 (the clean expert, or with --dagger the driving policy) and the later variants (perturbed or noisy)
succeeded on the scenes it kept, how many scenes it rejected, and the time the episodes took. Read from
attempts.jsonl and dataset.json alone, so it works on a collection still running; with `--dagger CHECKPOINT
--dagger-beta 0` it is a closed-loop check of that policy on fresh scenes, per task."""
from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path

from .collector import ATTEMPTS, MANIFEST


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


def driver(out: str | Path) -> str:
    """Who drove the collection's episodes, from its manifest: the state expert, or a DAgger policy and its beta."""
    manifest = Path(out) / MANIFEST
    config = json.loads(manifest.read_text()).get("config", {}) if manifest.is_file() else {}
    if config.get("dagger_checkpoint"):
        return f"policy {config['dagger_checkpoint']} (expert chunks with probability {config.get('dagger_beta')})"
    return "the state expert" + (" (later variants perturbed)" if config.get("perturb_rate") else "")


def format_report(report: dict, driven_by: str = "the state expert") -> str:
    """The report as a markdown table."""
    def rate(ok: int, n: int) -> str:
        return f"{ok}/{n} ({100.0 * ok / n:.0f}%)" if n else "-"

    lines = [f"Driven by {driven_by}; success on kept scenes.", "",
             "| task | attempts | rejected scenes | variant 0 | variants 1+ | steps | worker min |",
             "| --- | --- | --- | --- | --- | --- | --- |"]
    for key, row in report.items():
        name = "**all**" if key == "all" else str(key)
        lines.append(f"| {name} | {row['attempts']} | {row['rejected']} | {rate(row['clean_ok'], row['clean'])} | "
                     f"{rate(row['perturbed_ok'], row['perturbed'])} | {row['steps']:,} | {row['seconds'] / 60:.1f} |")
    return "\n".join(lines)
