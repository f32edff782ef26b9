"""How failed episodes failed, read off the sim-state subtask labels of the frames the policy saw.

A success rate alone does not say what to fix: a policy that never reaches the object needs other data than one
that lifts it and lets go in transit. Each labelled episode record holds `subtask_labels`, one sentence per policy
frame from `SubtaskLabeller` (envs/experts.py), whose sentences begin with the phase's verb: reach, grasp, carry,
place, release. From that sequence alone this counts, over the failed episodes, the furthest phase reached and the
phase the episode ended in, and, over every episode, two ways of losing a lifted object: dropped in transit (a carry
frame followed by a reach or grasp one) and set down beside the target (a place frame, held low over the target,
followed by a reach or grasp one: the object rests on the table short of LIBERO's goal, or was let go there and
rolled off the target's 4 cm).
"""
from __future__ import annotations

from collections import Counter
from collections.abc import Iterable

PHASES = ("reach", "grasp", "carry", "place", "release")
ON_THE_TABLE = ("reach", "grasp")  # the object is not held up (off the target: there it is "release")


def phase(label: str) -> str | None:
    """The phase of a `SubtaskLabeller` sentence ("carry the bowl to the plate" -> "carry"), None for other text."""
    verb = label.split(" ", 1)[0].lower() if label else ""
    return verb if verb in PHASES else None


def losses_of_hold(phases: list[str | None], held: str) -> list[int]:
    """The indices at which a `held` frame ("carry": in transit, "place": low over the target) is followed by one
    whose object rests on the table (reach or grasp): where the object was lost. experiments/tools/rollout_drops.py uses the
    indices on per-step labels to look at the gripper commands before each."""
    return [i for i in range(1, len(phases)) if phases[i - 1] == held and phases[i] in ON_THE_TABLE]


def dropped_in_transit(phases: list[str]) -> bool:
    """The object was carried and then was no longer held up, away from the target."""
    return bool(losses_of_hold(phases, "carry"))


def set_down_beside_target(phases: list[str]) -> bool:
    """The object was held low over the target and then rested on the table without LIBERO's goal holding."""
    return bool(losses_of_hold(phases, "place"))


def failure_modes(records: Iterable[dict]) -> dict | None:
    """Counts over the episodes that ran and carry subtask labels (None when none do, e.g. a task without a
    pick-and-place goal): `failed`, `furthest` and `ended` phase of the failed ones, episodes that `dropped_in_transit`
    or `set_down_beside_target` among the failed and the succeeded ones, and the steps the successes took."""
    labelled = []
    for r in records:
        phases = [p for p in (phase(x) for x in r.get("subtask_labels") or []) if p]
        if r.get("status") == "ok" and phases:
            labelled.append((r, phases))
    if not labelled:
        return None
    failed = [(r, ps) for r, ps in labelled if not r["success"]]
    succeeded = [(r, ps) for r, ps in labelled if r["success"]]
    furthest = Counter(max(ps, key=PHASES.index) for _, ps in failed)
    ended = Counter(ps[-1] for _, ps in failed)
    return {
        "episodes": len(labelled),
        "failed": len(failed),
        "furthest": {p: furthest[p] for p in PHASES},
        "ended": {p: ended[p] for p in PHASES},
        **{name: {"failed": sum(test(ps) for _, ps in failed), "succeeded": sum(test(ps) for _, ps in succeeded)}
           for name, test in (("dropped_in_transit", dropped_in_transit),
                              ("set_down_beside_target", set_down_beside_target))},
        "success_steps": sorted(int(r["steps"]) for r, _ in succeeded),
    }


def render_failure_modes(modes: dict) -> str:
    """One paragraph for summary.md."""
    def by_phase(counts: dict) -> str:
        return ", ".join(f"{p} {counts[p]}" for p in PHASES)

    drop, beside = modes["dropped_in_transit"], modes["set_down_beside_target"]
    succeeded = modes["episodes"] - modes["failed"]
    text = (f"Failures ({modes['failed']} of {modes['episodes']} labelled episodes; sim-state labels of the frames the "
            f"policy saw, eval/libero/failure_modes.py): furthest phase {by_phase(modes['furthest'])}; ended in "
            f"{by_phase(modes['ended'])}. {drop['failed']} dropped the object in transit and {beside['failed']} set it "
            f"down beside the target at least once (of the {succeeded} successes, {drop['succeeded']} and "
            f"{beside['succeeded']}, and recovered).")
    steps = modes["success_steps"]
    if steps:
        text += f" Successes took {steps[0]}-{steps[-1]} steps (median {steps[len(steps) // 2]})."
    return text
