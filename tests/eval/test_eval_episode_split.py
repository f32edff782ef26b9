"""The summary's episode split: per part of an episode's wall time (reset, physics, render, policy, other), the
median over episodes, in summary.json and the printed summary.md, for any sim's records."""
import pytest

from oxygen_gym.eval.libero.summary import render_markdown, summarize


def _record(ep: int, suite: str, split: dict, wall: float, frames: int | None, cpu: float) -> dict:
    return {"suite": suite, "task_id": 0, "seed": 7, "episode": ep, "init_state": ep, "status": "ok", "success": True,
            "time_s": split, "wall_s": wall, "frames_rendered": frames, "cpu_s": cpu}


# three episodes whose means differ from their medians in every part: a median is not a mean here
SPLITS = [
    ({"reset": 20.0, "physics": 2.0, "render": 8.0, "policy": 3.0, "other": 0.1}, 33.1, 88, 30.0),
    ({"reset": 1.0, "physics": 3.0, "render": 6.0, "policy": 2.0, "other": 0.3}, 12.3, 60, 11.0),
    ({"reset": 1.5, "physics": 9.0, "render": 7.0, "policy": 8.0, "other": 0.2}, 25.7, 72, 20.0),
]


@pytest.mark.parametrize("suite", ["libero_spatial", "aloha", "droid"])
def test_each_part_is_the_median_over_episodes(suite):
    records = [_record(i, suite, *s) for i, s in enumerate(SPLITS)]
    records.append({"suite": suite, "task_id": 0, "seed": 7, "episode": 9, "status": "error", "error": "boom"})
    split = summarize(records)["speed"]["episode_split_s"]
    assert list(split)[:5] == ["reset", "physics", "render", "policy", "other"]
    assert {k: split[k]["p50"] for k in ("reset", "physics", "render", "policy", "other")} == {
        "reset": 1.5, "physics": 3.0, "render": 7.0, "policy": 3.0, "other": 0.2}
    assert split["reset"]["mean"] == pytest.approx(22.5 / 3)
    assert split["wall"]["p50"] == 25.7 and split["cpu"]["p50"] == 20.0
    assert split["frames_rendered"]["p50"] == 72 and split["reset"]["n"] == 3  # the error is not an episode


def test_the_printed_summary_shows_the_medians():
    md = render_markdown(summarize([_record(i, "aloha", *s) for i, s in enumerate(SPLITS)],
                                   {"env": "aloha", "checkpoint": "tiny"}))
    head = "| episode split, s | reset | physics | render | policy | other | wall | CPU | images rendered |"
    assert head in md
    assert "| **median** | 1.5 | 3.0 | 7.0 | 3.0 | 0.2 | 25.7 | 20.0 | 72 |" in md
    assert "| mean | 7.5 | 4.7 | 7.0 | 4.3 | 0.2 | 23.7 | 20.3 | 73 |" in md
    assert "(3 episodes" in md


def test_records_without_a_split_give_none_and_no_table():
    rec = _record(0, "libero_spatial", {}, 10.0, None, 5.0)
    summary = summarize([rec])
    assert summary["speed"]["episode_split_s"] is None
    assert "episode split" not in render_markdown(summary)


def test_an_env_that_does_not_count_frames_shows_none_for_them():
    split_only = {"reset": 1.0, "physics": 2.0, "render": 0.0, "policy": 1.0, "other": 0.0}
    s = summarize([_record(0, "aloha", split_only, 4.0, None, 3.0)])
    assert s["speed"]["episode_split_s"]["frames_rendered"] is None
    assert "| **median** | 1.0 | 2.0 | 0.0 | 1.0 | 0.0 | 4.0 | 3.0 | n/a |" in render_markdown(s)
