"""`oxygen-gym bench rtc` runs, writes its table and JSON as each model finishes, and keeps them on a rerun."""
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
