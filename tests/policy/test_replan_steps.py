"""A checkpoint's declared execution horizon (config.json `replan_steps`): what eval and the demo execute of each
chunk unless `--replan` says otherwise, recorded among the result-deciding fields so a folder run with the protocol's
interval is never resumed or merged with one run with the checkpoint's."""
from __future__ import annotations

import json

import pytest

from oxygen_gym.eval.libero.eval_config import EvalConfig, with_declared_replan
from oxygen_gym.eval.libero.eval_loop import check_resumable
from oxygen_gym.eval.libero.results import ResultsError, ResultsFolder
from oxygen_gym.eval.libero.worker import EpisodeWorker
from oxygen_gym.model import CheckpointError, CheckpointNotFoundError, build_model, save_pretrained
from oxygen_gym.policies.checkpoints.replan_steps import declared_replan_steps

from declared_checkpoints import STATS, declared_and_plain


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory):
    """Two tiny checkpoints of our family (chunk 50): one declaring replan_steps 2, one declaring nothing."""
    return declared_and_plain(tmp_path_factory.mktemp("ckpt"), replan_steps=2)


def test_save_pretrained_declares_it_and_eval_runs_with_it(checkpoints):
    declared, plain = checkpoints
    assert json.loads((declared / "config.json").read_text())["replan_steps"] == 2
    assert declared_replan_steps(declared) == 2
    assert declared_replan_steps(plain) is None
    assert declared_replan_steps("tiny") is None  # a built-in model has no files

    assert with_declared_replan(EvalConfig(checkpoint=str(declared))).replan == 2
    assert with_declared_replan(EvalConfig(checkpoint=str(declared), replan=4)).replan == 4  # --replan wins
    assert with_declared_replan(EvalConfig(checkpoint=str(plain))).replan is None
    assert EpisodeWorker(EvalConfig(checkpoint=str(declared))).replan() == 2  # the demo's path (no run_eval)
    assert EpisodeWorker(EvalConfig(checkpoint=str(declared), replan=3)).replan() == 3
    assert EpisodeWorker(EvalConfig(checkpoint=str(plain))).replan() == 5  # openpi's replan_steps


def test_bad_declarations_are_clear_errors(checkpoints, tmp_path):
    declared, _ = checkpoints
    model = build_model("tiny", seed=0)
    for bad in (0, True, 11):
        with pytest.raises(ValueError, match="replan_steps must be an int in 1..10"):
            save_pretrained(model, tmp_path / "bad", STATS, n_action_steps=10, replan_steps=bad)
    folder = tmp_path / "edited"
    folder.mkdir()
    cfg = json.loads((declared / "config.json").read_text())
    for bad, message in ((0, "must be an integer >= 1"), ("2", "must be an integer >= 1"),
                         (12, "is 12 but the policy returns only n_action_steps=10")):
        (folder / "config.json").write_text(json.dumps({**cfg, "replan_steps": bad}))
        with pytest.raises(CheckpointError, match=f"config.json: 'replan_steps' {message}"):
            declared_replan_steps(folder)
    with pytest.raises(CheckpointNotFoundError):
        declared_replan_steps(tmp_path / "missing" / "folder")


def test_a_folder_run_with_the_protocols_interval_refuses_the_declared_one(checkpoints, tmp_path):
    declared, _ = checkpoints
    before = EvalConfig(checkpoint=str(declared), out=str(tmp_path))  # as run before the checkpoint declared it
    (tmp_path / "config.json").write_text(json.dumps(before.to_dict()))
    with ResultsFolder(tmp_path) as folder:
        check_resumable(folder, before)
        with pytest.raises(ResultsError, match="replan was None, now 2; replan None was the protocol's interval"):
            check_resumable(folder, with_declared_replan(before))


@pytest.mark.timeout(600)
def test_an_eval_episode_runs_the_checkpoints_interval(checkpoints, tmp_path):
    pytest.importorskip("libero")
    from oxygen_gym.cli import main

    declared, _ = checkpoints
    out = tmp_path / "run"
    argv = ["eval", "libero", "--suite", "libero_spatial", "--tasks", "0", "--init-states", "0", "--max-steps", "6",
            "--checkpoint", str(declared), "--out", str(out), "--no-progress", "--fast-reset", "--fast-render"]
    assert main(argv) in (0, 1)
    (record,) = [json.loads(line) for line in (out / "episodes.jsonl").read_text().splitlines()]
    assert record["status"] == "ok" and record["steps"] == 6
    assert (record["replan"], record["calls"]) == (2, 3)  # the protocol's 5 would have asked twice
    assert json.loads((out / "config.json").read_text())["replan"] == 2
