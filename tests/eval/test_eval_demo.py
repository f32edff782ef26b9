"""`oxygen-gym demo` end to end with a short step cap: video, episode.json, report.md, the random-weights note."""
import json
from pathlib import Path

import pytest
from oxygen_gym.cli import main

pytestmark = pytest.mark.filterwarnings("ignore")


def test_demo_writes_video_episode_and_report(tmp_path, capsys):
    out = tmp_path / "demo"
    assert main(["demo", "--checkpoint", "tiny", "--max-steps", "10", "--fast-reset", "--out", str(out)]) == 0
    captured = capsys.readouterr()
    assert "RANDOM weights" in captured.err and "--checkpoint PATH" in captured.err

    record = json.loads((out / "episode.json").read_text())
    assert (record["suite"], record["task_id"], record["init_state"], record["seed"]) == ("libero_spatial", 0, 0, 7)
    assert record["status"] == "ok" and record["steps"] == 10
    assert record["narration"] and record["narration"][0]["task"] == "narrate"
    video = Path(record["video"])
    assert video.parent == out and video.stat().st_size > 0

    report = (out / "report.md").read_text()
    assert "RANDOM weights" in report
    for field in ("success", "steps", "action Hz", "language tokens/s", "Per-stage ms", "prefill", "decode"):
        assert field in report, field
    for path in (video, out / "episode.json", out / "report.md"):
        assert str(path.resolve()) in captured.out  # the demo says where its files are


@pytest.mark.parametrize("collect, fast_render, fast_reset", [
    ({"fast_render": True, "fast_reset": True}, True, True),                               # one collection
    ([{"fast_render": False, "fast_reset": True}, {"fast_render": False, "fast_reset": True}], False, True),
    ([{"fast_render": True, "fast_reset": True}, {"fast_render": False, "fast_reset": False}], False, False),
])
def test_demo_renders_and_resets_as_every_collection_of_the_data_did(tmp_path, collect, fast_render, fast_reset):
    """A model trained on several collections (`train --data A,B`) records a list of collect configs."""
    import argparse

    from oxygen_gym.eval import demo

    (tmp_path / "training.json").write_text(json.dumps({"data": {"collect": collect}, "language_tasks": [
        {"name": "narrate", "prompt": "What is the robot doing?", "max_new_tokens": 12}]}))
    parser = argparse.ArgumentParser()
    demo.add_arguments(parser)
    args = parser.parse_args(["--checkpoint", str(tmp_path)])
    assert set(demo._trained_defaults(args)) == {"narrate"}
    assert (args.fast_render, args.fast_reset, args.init_state) == (fast_render, fast_reset, 0)
