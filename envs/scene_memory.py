"""The memory task's labels: "What did the robot do last?", answered from sim state only, like the subtask
labeller (envs/experts.py), so it labels demonstrations and scores any policy's rollout.

The answer is the subtask before the one `SubtaskLabeller` gives now, in the task's order (reach -> grasp -> carry
-> place -> release), and "" (nothing yet) while the robot is still reaching. For libero_spatial task 0:

    now reaching          -> ""                               now carrying  -> "grasp the black bowl"
    now grasping          -> "reach for the black bowl"       now placing   -> "carry the bowl to the plate"
    now releasing         -> "place the bowl on the plate"

Why the answers are subtask sentences and not a scene description ("on the table", "in the gripper"): a LoRA over
the backbone's projections leaves the tied LM head frozen, so it can only emit tokens the base model learned to
emit. The shipped `libero-spatial` was trained from scratch on narration alone, and only its 20 narration tokens
are reachable: with the best-aligned final hidden state, a token outside them gets p ~ 0.002, against p ~ 1.0 for
' the' or ' plate' (measured; experiments/libero-spatial-log.md, "The memory adapter"). The question about the
past keeps the task a memory task the base model cannot answer alone (its narration names the current step).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .experts import SubtaskLabeller, Subtasks

QUESTION = "What did the robot do last?"
NOTHING_YET = ""  # the answer before the first subtask is done: the request ends at once (EOS)


@dataclass(frozen=True)
class MemoryAnswers:
    """The question and its answers for one pick-and-place goal: '' then each subtask but the last."""

    question: str
    answers: tuple[str, ...]

    @staticmethod
    def for_goal(obj: str, target: str) -> "MemoryAnswers":
        return MemoryAnswers(question=QUESTION, answers=(NOTHING_YET, *Subtasks.for_goal(obj, target).all()[:-1]))

    def all(self) -> tuple[str, ...]:
        return self.answers


class MemoryLabeller:
    """What the robot did last, in words; built at the start of an episode (the subtask labeller records the
    object's resting height then)."""

    def __init__(self, libero_env) -> None:
        self.subtask = SubtaskLabeller(libero_env)
        self.order = self.subtask.subtasks.all()
        self.answers = MemoryAnswers.for_goal(self.subtask.obj, self.subtask.target)

    @property
    def question(self) -> str:
        return self.answers.question

    def __call__(self, eef: np.ndarray, gripper_qpos: np.ndarray) -> str:
        return self.answers.answers[self.order.index(self.subtask(eef, gripper_qpos))]
