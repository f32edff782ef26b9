"""Failure modes in the eval summary: read off the sim-state subtask labels of each episode's policy frames."""
from __future__ import annotations

from oxygen_gym.eval.libero.failure_modes import dropped_in_transit, failure_modes, phase, set_down_beside_target
from oxygen_gym.eval.libero.summary import render_markdown, summarize

REACH, GRASP = "reach for the black bowl", "grasp the black bowl"
CARRY, PLACE, RELEASE = "carry the bowl to the plate", "place the bowl on the plate", "release the bowl"


def rec(ep: int, success: bool, labels: list[str], steps: int = 100, status: str = "ok") -> dict:
    return {"suite": "libero_spatial", "task_id": 0, "seed": 7, "episode": ep, "init_state": ep, "status": status,
            "success": success, "steps": steps, "subtask_labels": labels}


def test_phase_is_the_labellers_verb_and_nothing_else():
    assert [phase(x) for x in (REACH, GRASP, CARRY, PLACE, RELEASE)] == ["reach", "grasp", "carry", "place", "release"]
    assert phase("nothing yet") is None and phase("") is None


def test_a_drop_in_transit_and_a_set_down_beside_the_target_are_told_apart():
    assert dropped_in_transit(["reach", "grasp", "carry", "carry", "grasp"])
    assert not set_down_beside_target(["reach", "grasp", "carry", "carry", "grasp"])
    assert set_down_beside_target(["reach", "grasp", "carry", "place", "place", "grasp"])
    assert not dropped_in_transit(["reach", "grasp", "carry", "place", "grasp"])
    assert not dropped_in_transit(["reach", "grasp", "reach", "grasp"])  # a missed grasp, never lifted
    both = ["reach", "grasp", "carry", "place", "reach", "grasp", "carry", "reach"]
    assert dropped_in_transit(both) and set_down_beside_target(both)
    let_go = ["reach", "grasp", "carry", "place", "release"]
    assert not dropped_in_transit(let_go) and not set_down_beside_target(let_go)


def test_failures_are_counted_by_furthest_and_last_phase_and_drops_over_all_episodes():
    records = [
        rec(0, True, [REACH, GRASP, CARRY, PLACE], steps=80),
        rec(1, True, [REACH, GRASP, CARRY, GRASP, CARRY, PLACE], steps=150),  # dropped once, recovered
        rec(2, False, [REACH, REACH, REACH]),
        rec(3, False, [REACH, GRASP, CARRY, PLACE, GRASP, CARRY, REACH]),  # set down beside, then dropped
        rec(4, False, [REACH, GRASP, CARRY, GRASP]),
        rec(5, False, [REACH, GRASP, CARRY, PLACE, RELEASE]),
        rec(6, False, [], status="ok"),  # no labels (a task without a pick-and-place goal): not counted
        rec(7, False, [REACH], status="error"),  # a simulator crash says nothing about the policy
    ]
    modes = failure_modes(records)
    assert modes["episodes"] == 6 and modes["failed"] == 4
    assert modes["furthest"] == {"reach": 1, "grasp": 0, "carry": 1, "place": 1, "release": 1}
    assert modes["ended"] == {"reach": 2, "grasp": 1, "carry": 0, "place": 0, "release": 1}
    assert modes["dropped_in_transit"] == {"failed": 2, "succeeded": 1}
    assert modes["set_down_beside_target"] == {"failed": 1, "succeeded": 0}
    assert modes["success_steps"] == [80, 150]


def test_the_summary_reports_failure_modes_only_where_episodes_are_labelled():
    labelled = summarize([rec(0, True, [REACH, CARRY, PLACE], steps=70), rec(1, False, [REACH, CARRY, GRASP])])
    text = render_markdown(labelled)
    assert ("furthest phase reach 0, grasp 0, carry 1, place 0, release 0; ended in reach 0, grasp 1, carry 0, place 0, "
            "release 0. 1 dropped the object in transit and 0 set it down beside the target at least once (of the 1 "
            "successes, 0 and 0, and recovered)") in text
    assert "Successes took 70-70 steps (median 70)" in text
    unlabelled = summarize([rec(0, True, [])])
    assert unlabelled["failure_modes"] is None and "Failures (" not in render_markdown(unlabelled)
