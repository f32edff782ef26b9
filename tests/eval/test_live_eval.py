"""`oxygen-gym eval libero --live ...`: the flags parse, bad values name their flag, and a short live episode of the
`tiny` built-in runs on the real LIBERO sim with its delays recorded per episode and in the summary."""
import json

import pytest

from oxygen_gym.cli import main
from oxygen_gym.eval.libero.eval_command import add_arguments, config_from_args


def parse(*argv):
    import argparse

    parser = argparse.ArgumentParser()
    add_arguments(parser)
    return config_from_args(parser.parse_args(["libero", *argv]))


def test_live_flags_parse_into_run_settings():
    assert parse().live is None and parse().live_settings() is None
    assert parse("--live", "fixed:100").live_settings() == {"latency": "fixed:100", "execution": "sync",
                                                             "handover": "switch", "threshold": None}
    cfg = parse("--live", "measured", "--execution", "async", "--handover", "blend", "--queue-threshold", "3")
    assert cfg.live_settings() == {"latency": "measured", "execution": "async", "handover": "blend", "threshold": 3}
    assert parse("--live", "fixed:0", "--execution", "rtc").live_settings()["handover"] == "rtc"
    assert {"live", "execution", "handover", "queue_threshold"} <= set(parse().result_fields())


@pytest.mark.parametrize("argv, flag", [
    (["--live", "soon"], "--live"),
    (["--live", "fixed:x"], "--live"),
    (["--live", "model:/no/such.json"], "--live"),
    (["--execution", "async"], "--execution"),
    (["--live", "fixed:10", "--execution", "later"], "--execution"),
    (["--live", "fixed:10", "--execution", "async", "--handover", "merge"], "--handover"),
    (["--live", "fixed:10", "--handover", "blend"], "--handover"),
    (["--live", "fixed:10", "--queue-threshold", "2"], "--queue-threshold"),
    (["--live", "fixed:10", "--execution", "async", "--queue-threshold", "-1"], "--queue-threshold"),
])
def test_bad_live_arguments_name_the_flag(argv, flag, capsys, tmp_path):
    assert main(["eval", "libero", "--out", str(tmp_path / "x"), *argv]) == 2
    err = capsys.readouterr().err
    assert "error" in err and flag in err and "Traceback" not in err
    assert not (tmp_path / "x").exists()


def test_folders_without_live_fields_resume_as_synchronous_runs(tmp_path):
    from oxygen_gym.eval.libero.eval_loop import check_resumable
    from oxygen_gym.eval.libero.results import ResultsError, ResultsFolder

    cfg = parse("--out", str(tmp_path), "--episodes", "1")
    old = {k: v for k, v in cfg.to_dict().items() if k not in ("live", "execution", "handover", "queue_threshold")}
    (tmp_path / "config.json").write_text(json.dumps(old))
    with ResultsFolder(tmp_path) as folder:
        check_resumable(folder, cfg)
        with pytest.raises(ResultsError, match="live"):
            check_resumable(folder, parse("--out", str(tmp_path), "--live", "fixed:50"))


@pytest.mark.slow
@pytest.mark.parametrize("execution", [["--execution", "async", "--handover", "blend"], ["--execution", "rtc"]])
def test_short_live_episode_runs_and_is_recorded(execution, tmp_path):
    import inspect

    from oxygen_gym import MultiTaskPolicy

    pytest.importorskip("libero")
    if "rtc" in execution and "prev_actions" not in inspect.signature(MultiTaskPolicy.act).parameters:
        pytest.skip("MultiTaskPolicy.act has no RTC arguments in this checkout")
    out = tmp_path / "run"
    argv = ["eval", "libero", "--suite", "libero_spatial", "--tasks", "0", "--episodes", "1", "--max-steps", "12",
            "--checkpoint", "tiny", "--out", str(out), "--no-progress", "--fast-reset", "--fast-render",
            "--live", "fixed:100", *execution]
    assert main(argv) == 0
    rec = json.loads((out / "episodes.jsonl").read_text().splitlines()[0])
    live = rec["live"]
    assert rec["status"] == "ok" and live["steps"] == rec["steps"] == 12
    assert live["execution"] == "async" and live["handover"] == execution[-1] and live["control_dt"] == 0.05
    assert live["calls"][0]["delay_steps"] == 2 and live["held_steps"] >= 2  # 100 ms at 20 Hz, dry at the start
    summary = json.loads((out / "summary.json").read_text())
    assert summary["live"]["steps"] == 12 and summary["live"]["held_steps"] == live["held_steps"]
    assert "Live clock" in (out / "summary.md").read_text()
