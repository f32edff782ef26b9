"""`oxygen-gym eval` / `demo` argument checking: bad input is one clear line naming the flag, exit status 2."""
import pytest
from oxygen_gym.cli import main


@pytest.mark.parametrize("argv, flag", [
    (["--suite", "libero_99"], "--suite"),
    (["--tasks", "10"], "--tasks"),
    (["--tasks", "0,x"], "--tasks"),
    (["--episodes", "0"], "--episodes"),
    (["--episodes", "51"], "--episodes"),
    (["--seeds", "7,7"], "--seeds"),
    (["--shard", "3/3"], "--shard"),
    (["--video", "some"], "--video"),
    (["--decode-budget", "0"], "--decode-budget"),
    (["--decode-budget", "auto"], "--target-action-hz"),
    (["--task", "sing"], "--task"),
    (["--max-steps", "0"], "--max-steps"),
    (["--workers", "2"], "--ray"),
])
def test_bad_eval_arguments_are_clear_errors(argv, flag, capsys, tmp_path):
    assert main(["eval", "libero", "--out", str(tmp_path / "x"), *argv]) == 2
    err = capsys.readouterr().err
    assert "error" in err and flag in err and "Traceback" not in err
    assert not (tmp_path / "x").exists()  # nothing was started


def test_unknown_protocol_and_mode_are_rejected_by_argparse(capsys):
    with pytest.raises(SystemExit):
        main(["eval", "libero", "--protocol", "nope"])
    with pytest.raises(SystemExit):
        main(["eval", "libero", "--mode", "fast"])


def test_merge_needs_inputs_and_out(capsys, tmp_path):
    assert main(["eval", "merge", str(tmp_path)]) == 2
    assert "--out" in capsys.readouterr().err
    assert main(["eval", "merge", "--out", str(tmp_path / "m")]) == 2
    assert "folders" in capsys.readouterr().err
    with pytest.raises(SystemExit) as stop:  # `eval libero` takes no folders: argparse refuses, one line
        main(["eval", "libero", "extra", "--out", str(tmp_path / "m")])
    assert stop.value.code == 2 and capsys.readouterr().err.count("\n") == 1


def test_demo_rejects_bad_ids(capsys, tmp_path):
    assert main(["demo", "--task-id", "12", "--out", str(tmp_path)]) == 2
    assert "--task-id" in capsys.readouterr().err
    assert main(["demo", "--init-state", "50", "--out", str(tmp_path)]) == 2
    assert "--init-state" in capsys.readouterr().err
