"""`oxygen-gym eval merge`: combine the results folders of shards (or of separate runs) into one.

Refuses to merge when the folders were produced with different result-deciding settings (checkpoint, mode, decode
budget, language tasks, protocol, step cap) or when an episode appears in more than one place: a merged result must
be one evaluation, each episode counted once.
"""
from __future__ import annotations

import json
import os
from collections.abc import Sequence
from pathlib import Path

from .eval_config import ABSENT_DEFAULTS, RESULT_FIELDS, refuse_removed_options
from .episode_set import record_key
from .results import CONFIG_FILE, EPISODES_FILE, ResultsError, ResultsFolder, read_records
from .summary import write_summary


def _load_config(folder: Path) -> dict:
    path = folder / CONFIG_FILE
    if not path.exists():
        raise ResultsError(f"merge: {folder} has no {CONFIG_FILE}; is it an oxygen-gym eval --out folder?")
    return json.loads(path.read_text())


def expected_episode_count(config: dict) -> int:
    """Size of the whole (unsharded) episode set a config selects (its sim's plug-in builds it, eval/sims.py)."""
    from ..sims import get_sim

    return len(get_sim(config.get("env") or "libero").episode_set(
        config["suites"], config.get("tasks"), int(config["episodes"]), [int(s) for s in config["seeds"]],
        config.get("init_states"), config.get("fresh_scenes")))


def merge_folders(inputs: Sequence[str | Path], out: str | Path) -> dict:
    """Merge `inputs` into `out` (a new or empty folder); returns the merged summary."""
    if len(inputs) < 1:
        raise ValueError("merge: give at least one results folder to merge")
    folders = [Path(p) for p in inputs]
    out = Path(out)
    if any(f.resolve() == out.resolve() for f in folders):
        raise ValueError(f"merge: --out {out} is also an input; merge into a new folder")
    if (out / EPISODES_FILE).exists() and read_records(out / EPISODES_FILE):
        raise ResultsError(f"merge: --out {out} already holds episodes; merge into a new folder")

    configs = [_load_config(f) for f in folders]
    ref = configs[0]
    for folder, cfg in zip(folders, configs, strict=True):
        refuse_removed_options(cfg, f"merge: {folder}")
    for folder, cfg in zip(folders[1:], configs[1:], strict=True):
        diffs = [k for k in RESULT_FIELDS if cfg.get(k, ABSENT_DEFAULTS.get(k)) != ref.get(k, ABSENT_DEFAULTS.get(k))]
        if diffs:
            detail = "; ".join(f"{k}: {ref.get(k)!r} in {folders[0]} vs {cfg.get(k)!r} in {folder}" for k in diffs)
            raise ResultsError(f"merge: config mismatch, these are not parts of one evaluation: {detail}")

    owner: dict[tuple, Path] = {}
    merged: list[dict] = []
    for folder in folders:
        for rec in read_records(folder / EPISODES_FILE):
            key = record_key(rec)
            if key in owner:
                raise ResultsError(f"merge: episode {key} is recorded in both {owner[key]} and {folder}; "
                                   f"refusing to count it twice")
            owner[key] = folder
            if rec.get("video"):  # stored relative to its own folder: point it from the merged one
                rec = {**rec, "video": os.path.relpath(folder / rec["video"], out)}
            merged.append(rec)

    selection = ("suites", "tasks", "episodes", "seeds", "init_states", "fresh_scenes")
    same_selection = all({k: c.get(k) for k in selection} == {k: ref.get(k) for k in selection} for c in configs)
    expected = expected_episode_count(ref) if same_selection else None
    merged_config = {**ref, "shard": [0, 1], "out": str(out), "merged_from": [str(f) for f in folders]}
    if not same_selection:
        merged_config.update(suites=sorted({s for c in configs for s in c["suites"]}), tasks=None, episodes=None,
                             seeds=sorted({s for c in configs for s in c["seeds"]}),
                             init_states=sorted({i for c in configs for i in c.get("init_states") or []}) or None,
                             fresh_scenes=sorted({k for c in configs for k in c.get("fresh_scenes") or []}) or None)
    from ..eval_plots import write_plots

    with ResultsFolder(out) as dest:
        dest.write_config(merged_config)
        dest.extend(sorted(merged, key=record_key))
        summary = write_summary(out, dest.records, merged_config, expected, plots=write_plots(out, dest.records))
    return summary
