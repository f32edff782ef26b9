"""`oxygen-gym collect --report`: per-task expert success on kept scenes, from the attempt log alone."""
from __future__ import annotations

import json

import pytest

from oxygen_gym.train.collect.attempt_report import attempt_records, attempt_report, format_report
from oxygen_gym.train.collect.collect_command import add_arguments, run


def _record(task: int, scene: int, variant: int, success: bool, rejected: str | None = None) -> dict:
    r = {"episode": f"s/task{task}/scene{scene}/v{variant}", "task_id": task, "scene": scene, "variant": variant,
         "success": success, "steps": 0 if rejected else 100, "seconds": 0.0 if rejected else 30.0}
    return {**r, "rejected": rejected} if rejected else r


def test_the_report_counts_clean_and_perturbed_successes_on_kept_scenes_per_task(tmp_path, capsys):
    records = [_record(0, 0, 0, True), _record(0, 0, 1, False), _record(0, 1, 0, False, "thrown"),
               _record(3, 0, 0, False), _record(3, 0, 1, True)]
    (tmp_path / "attempts.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records) + '{"torn')
    report = attempt_report(attempt_records(tmp_path))
    assert list(report) == [0, 3, "all"]
    assert report[0] == {"attempts": 3, "rejected": 1, "clean": 1, "clean_ok": 1, "perturbed": 1, "perturbed_ok": 0,
                         "steps": 200, "seconds": 60.0}
    assert (report[3]["clean_ok"], report[3]["perturbed_ok"]) == (0, 1)
    assert (report["all"]["attempts"], report["all"]["clean"], report["all"]["clean_ok"]) == (5, 2, 1)
    assert "| 0 | 3 | 1 | 1/1 (100%) | 0/1 (0%) | 200 | 1.0 |" in format_report(report)
    import argparse

    parser = argparse.ArgumentParser()
    add_arguments(parser)
    assert run(parser.parse_args(["libero", "--report", "--out", str(tmp_path)])) == 0
    printed = capsys.readouterr().out
    assert "| **all** | 5 | 1 | 1/2 (50%) | 1/2 (50%) | 400 | 2.0 |" in printed
    assert printed.startswith("Driven by the state expert;")  # no manifest here
    (tmp_path / "dataset.json").write_text(json.dumps({"config": {"dagger_checkpoint": "libero-spatial",
                                                                  "dagger_beta": 0.0}}))
    assert run(parser.parse_args(["libero", "--report", "--out", str(tmp_path)])) == 0
    assert capsys.readouterr().out.startswith("Driven by policy libero-spatial (expert chunks with probability 0.0);")


def test_a_folder_without_an_attempt_log_is_a_clear_error(tmp_path):
    with pytest.raises(ValueError, match="no attempts.jsonl"):
        attempt_records(tmp_path)
