"""How many of a row's chunk labels its first frame can predict.

A row's target chunk is the expert's labels of the next `horizon` visited states. While the executed actions follow
the expert, those labels are the expert's own plan from the row's state. A DAgger rollout or a perturbed
demonstration leaves it: the policy (or a perturbation) opens the gripper while carrying, the bowl drops, and the
labels that follow are the expert's reaction ("open, reach again"). Kept as targets of the rows before the event,
they are a second mode of the chunk ("open a few steps from now") that a generative policy samples at the rate the
data dropped the bowl. Measured: cutting them lowered a DAgger-trained policy's false opens on validation frames, but
its closed-loop drops have another main cause (experiments/libero-spatial-log.md, "Chunk labels past a dropped
bowl"). So a chunk is cut:

- after the first step whose executed gripper command disagrees in sign with the expert's label (that step's label
  is still the expert's, at a state the row's frame predicts; the ones after react to the disagreement);
- before the first step at which the subtask label falls back to reaching from a holding phase (grasp, carry,
  place): a lost bowl, whatever caused it.
"""
from __future__ import annotations

import numpy as np

# The subtask labels' first words (envs/experts.py `Subtasks.for_goal`): holding phases, and the phase a lost
# object falls back to. Labels of any other form never cut a chunk.
REACH = "reach"
HOLDING = ("grasp", "carry", "place")


def _first_words(subtasks: list[str]) -> list[str]:
    return [s.split(" ", 1)[0] if s else "" for s in subtasks]


def predictable_chunk_lengths(actions: np.ndarray, executed: np.ndarray, subtasks: list[str],
                              horizon: int) -> np.ndarray:
    """Per step s, the number of labels actions[s : s + n] that stay targets (1 <= n <= min(horizon, T - s)).

    actions: (T, D) expert labels, the gripper command last; executed: (T, D) what ran; subtasks: T labels."""
    t_len = len(actions)
    if executed.shape != actions.shape or len(subtasks) != t_len:
        raise ValueError(f"actions {actions.shape}, executed_actions {executed.shape} and {len(subtasks)} subtask "
                         "labels must describe the same steps")
    disagree = (actions[:, -1] > 0) != (executed[:, -1] > 0)
    words = _first_words(subtasks)
    dropped = np.zeros(t_len, dtype=bool)
    dropped[1:] = [w == REACH and p in HOLDING for p, w in zip(words[:-1], words[1:])]
    lengths = np.empty(t_len, dtype=np.int64)
    next_cut = t_len  # index of the first step >= s+1 at which the chunk ends (exclusive bound)
    for s in range(t_len - 1, -1, -1):
        # a disagreement at s keeps s and cuts after; a drop at s+1 cuts s+1 onwards
        if s + 1 < t_len and dropped[s + 1]:
            next_cut = s + 1
        if disagree[s]:
            next_cut = s + 1
        lengths[s] = min(horizon, next_cut - s)
    return lengths
