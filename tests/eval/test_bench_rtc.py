"""`oxygen-gym bench rtc` and `bench action-latency`: they run, write their table and JSON, and (rtc) keep finished models on a rerun."""
import json

from oxygen_gym.cli import main


def test_bench_rtc_writes_and_resumes(tmp_path, capsys):
    out = tmp_path / "rtc"
    assert main(["bench", "rtc", "--models", "tiny", "--repeats", "1", "--threads", "1", "--out", str(out)]) == 0
    first = json.loads((out / "results.json").read_text())
    (row,) = first["models"]
    assert row["model"] == "tiny" and row["num_steps"] == 10
    for m in ("plain", "cheap", "guided"):
        assert row[m]["step_ms_p50"] > 0
    assert row["plain"]["ratio_to_plain_p50"] == 1.0
    assert "| tiny | 10 |" in (out / "results.md").read_text()
    assert main(["bench", "rtc", "--models", "tiny", "--repeats", "1", "--out", str(out)]) == 0
    assert "already measured, kept" in capsys.readouterr().out
    assert json.loads((out / "results.json").read_text())["models"] == first["models"]


def test_bench_action_latency_reports_both_paths_of_the_same_frames(tmp_path):
    out = tmp_path / "al"
    argv = ["bench", "action-latency", "--model", "tiny", "--N", "4", "--k", "2", "--frames", "2", "--threads", "1",
            "--out", str(out)]
    assert main(argv) == 0
    rows = {r["mode"]: r for r in json.loads((out / "results.json").read_text())["modes"]}
    assert set(rows) == {"isolated", "oxygen"}
    for r in rows.values():  # the actions are handed out inside the frame, so never after its end
        assert 0 < r["actions_ms_p50"] <= r["frame_ms_p50"] and r["hidden_gain_p50"] >= 1.0
    assert rows["oxygen"]["paper_thor_ms"] == {"frame": 393.0, "actions": 198.0}
