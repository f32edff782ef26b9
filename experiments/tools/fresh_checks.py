"""Side-by-side outcomes of closed-loop fresh-scene checks (`oxygen-gym collect libero ... --dagger MODEL
--dagger-beta 0 --fresh-scenes A-B --out FOLDER`): per scene, which models solved it, and per model the kept count
and successes. A scene whose draw was thrown (an object moved more than the collection's `--max-settle-cm` while
settling, the collector's own rejection rule) counts for nobody. The paired columns say on how many scenes both ran
the first model won and lost against each other one: with one rollout per scene those are the numbers to read, not
the totals alone. Not in CI: an analysis tool whose numbers are in experiments/libero-spatial-log.md.

    python experiments/tools/fresh_checks.py shipped=data/fresh-check-shipped,data/fresh-check2-shipped lift05=data/fresh-check-lift05,...
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path


def outcomes(folders: list[Path]) -> dict[int, bool | None]:
    """scene -> success, or None for a thrown draw, over one model's check folders."""
    out: dict[int, bool | None] = {}
    for folder in folders:
        config = json.loads((folder / "dataset.json").read_text())["config"]
        limit = config.get("max_settle_m")
        for line in (folder / "attempts.jsonl").read_text().splitlines():
            record = json.loads(line)
            thrown = limit is not None and record.get("settle_moved_m", 0.0) > limit
            out[int(record["scene"])] = None if thrown else bool(record["success"])
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("models", nargs="+", help="NAME=FOLDER[,FOLDER...]")
    ap.add_argument("--json", type=Path, help="write the per-model summary here too")
    args = ap.parse_args()
    models = {}
    for spec in args.models:
        name, _, folders = spec.partition("=")
        if not folders:
            ap.error(f"model {spec!r}: expected NAME=FOLDER[,FOLDER...]")
        models[name] = outcomes([Path(f) for f in folders.split(",")])
    names = list(models)
    scenes = sorted(set().union(*models.values()))
    print("scene " + " ".join(f"{n:>8}" for n in names))
    for scene in scenes:
        cells = ["-" if scene not in models[n] else {None: "thrown", True: "S", False: "."}[models[n][scene]]
                 for n in names]
        print(f"{scene:5d} " + " ".join(f"{c:>8}" for c in cells))
    first = models[names[0]]
    summary = {}
    for name in names:
        runs = {s: ok for s, ok in models[name].items() if ok is not None}
        summary[name] = {"kept": len(runs), "succeeded": sum(runs.values())}
        line = f"{name}: {summary[name]['succeeded']} of {summary[name]['kept']} kept scenes"
        if name != names[0]:
            both = [s for s in runs if first.get(s) is not None]
            summary[name].update({"paired_scenes": len(both), "first_only": sum(first[s] and not runs[s] for s in both),
                                  "this_only": sum(runs[s] and not first[s] for s in both)})
            line += (f"; on the {len(both)} scenes both ran: {names[0]} alone solved {summary[name]['first_only']}, "
                     f"{name} alone {summary[name]['this_only']}")
        print(line)
    if args.json:
        args.json.write_text(json.dumps(summary, indent=1))


if __name__ == "__main__":
    main()
