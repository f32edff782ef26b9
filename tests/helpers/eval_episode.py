"""One short evaluation episode through the CLI, for tests of an eval option: its record and its config.json."""
from __future__ import annotations

import json
from pathlib import Path

import pytest


def run_one_episode(out: Path, *flags: str, max_steps: int = 4, checkpoint: str = "tiny") -> tuple[dict, dict]:
    """`oxygen-gym eval libero` on official init state 0 of libero_spatial task 0, fast reset and render, `max_steps`
    steps, with `flags`; the episode's record (checked ok) and the run's config.json."""
    pytest.importorskip("libero")
    from oxygen_gym.cli import main

    argv = ["eval", "libero", "--suite", "libero_spatial", "--tasks", "0", "--init-states", "0", "--max-steps",
            str(max_steps), "--checkpoint", checkpoint, *flags, "--out", str(out), "--no-progress", "--fast-reset",
            "--fast-render"]
    assert main(argv) in (0, 1)
    (record,) = [json.loads(line) for line in (out / "episodes.jsonl").read_text().splitlines()]
    assert record["status"] == "ok" and record["steps"] == max_steps
    return record, json.loads((out / "config.json").read_text())
