"""Scripted LIBERO experts on privileged sim state, and the subtask labeller that narrates what is happening.

Experts see the simulator (object and target poses); the policy never does. They exist to demonstrate tasks
(`oxygen-gym collect`) and to label every step with its subtask in plain words built from the task's object names.
The labeller is a function of the sim state alone (not of the expert's internal phase), so the same labels can be
computed for any policy's rollout: that is how eval scores narration (eval/libero/narration.py).

Action convention (LIBERO OSC_POSE): 6 deltas + gripper; 1 unit of position = 5 cm (controller output_max 0.05,
robosuite `controllers/config/osc_pose.json`), gripper +1 closes, -1 opens (robosuite
`models/grippers/panda_gripper.py` `format_action`).
"""
from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np

OSC_POS_SCALE = 0.05  # metres per action unit (robots[0].controller.output_max[:3])
# Grasp point relative to a bowl's centre: the fingers straddle its wall (one inside, one outside).
BOWL_RIM = np.array([0.0, 0.055, 0.03])
LIFT_HEIGHT = 1.15  # world z to carry at: clear of every object on the LIBERO table (table top ~0.9)


def object_phrase(name: str) -> str:
    """Plain words for a LIBERO object id: 'akita_black_bowl_1' -> 'black bowl', 'plate_1' -> 'plate'."""
    words = [w for w in re.sub(r"_\d+$", "", name).split("_") if w]
    brands = {"akita", "glazed", "chefmate", "new", "flat", "porcelain", "kitchen"}
    while len(words) > 1 and words[0] in brands:
        words = words[1:]
    return " ".join(words)


def short_phrase(name: str) -> str:
    """The head noun alone, for the second mention in a sentence: 'black bowl' -> 'bowl'."""
    return object_phrase(name).split()[-1]


@dataclass(frozen=True)
class Subtasks:
    """The subtask sentences of one pick-and-place goal, in the order they happen."""

    reach: str
    grasp: str
    carry: str
    place: str
    release: str

    @staticmethod
    def for_goal(obj: str, target: str) -> "Subtasks":
        o, so, t = object_phrase(obj), short_phrase(obj), object_phrase(target)
        return Subtasks(
            reach=f"reach for the {o}", grasp=f"grasp the {o}", carry=f"carry the {so} to the {t}",
            place=f"place the {so} on the {t}", release=f"release the {so}",
        )

    def all(self) -> tuple[str, ...]:
        return (self.reach, self.grasp, self.carry, self.place, self.release)


def pick_place_goal(libero_env) -> tuple[str, str]:
    """(object, target) of a single `on` goal, from the task's parsed BDDL problem, or ValueError."""
    goal = libero_env.parsed_problem["goal_state"]
    if len(goal) != 1 or goal[0][0].lower() != "on":
        raise ValueError(f"the pick-and-place expert handles one ('on', object, target) goal; this task has {goal}")
    _, obj, target = goal[0]
    return obj, target


class SubtaskLabeller:
    """What the robot is doing now, from sim state only: reach -> grasp -> carry -> place -> release.

    Built at the start of an episode (it records the object's resting height, to tell 'lifted' from 'on the table').
    """

    GRASP_RADIUS = 0.035  # gripper this close to the grasp point counts as at the object
    LIFTED = 0.02  # object this far above its resting height is off the table
    OVER_TARGET = 0.04  # horizontal distance to the target below which carrying becomes placing

    def __init__(self, libero_env) -> None:
        self.sim = libero_env
        self.obj, self.target = pick_place_goal(libero_env)
        self.subtasks = Subtasks.for_goal(self.obj, self.target)
        self.rest_z = float(self.position(self.obj)[2])

    def position(self, name: str) -> np.ndarray:
        return self.sim.sim.data.body_xpos[self.sim.obj_body_id[name]].copy()

    def __call__(self, eef: np.ndarray, gripper_qpos: np.ndarray) -> str:
        obj, target = self.position(self.obj), self.position(self.target)
        at_object = np.linalg.norm(eef[:3] - (obj + BOWL_RIM)) < self.GRASP_RADIUS
        lifted = obj[2] > self.rest_z + self.LIFTED
        closed = float(gripper_qpos[0] - gripper_qpos[1]) < 0.06  # finger opening (open ~0.08, on a bowl wall ~0.03)
        near_target = np.linalg.norm((obj - target)[:2]) < self.OVER_TARGET
        held = closed and at_object
        if near_target and not held:
            return self.subtasks.release
        if held and lifted:
            return self.subtasks.place if near_target else self.subtasks.carry
        if at_object:
            return self.subtasks.grasp
        return self.subtasks.reach


class PickPlaceExpert:
    """Pick-and-place for "put <object> on <target>" goals: above the grasp point, down, close, lift, over the
    target, lower, open. Closed-loop on privileged poses, so it recovers from perturbed actions (used for DART-style
    noise injection at collection time)."""

    ORDER = ("above", "down", "close", "lift", "over", "lower", "release")
    REACHED = 0.015  # metres: a waypoint counts as reached

    def __init__(self, libero_env) -> None:
        self.sim = libero_env
        self.obj, self.target = pick_place_goal(libero_env)
        self.phase, self.closing = "above", 0

    def _pos(self, name: str) -> np.ndarray:
        return self.sim.sim.data.body_xpos[self.sim.obj_body_id[name]].copy()

    def __call__(self, state: np.ndarray) -> np.ndarray:
        """The next 7-d action from the policy state vector (eef pos first) and the sim's object poses."""
        eef, obj, target = np.asarray(state[:3], np.float64), self._pos(self.obj), self._pos(self.target)
        goal = {
            "above": obj + BOWL_RIM + [0, 0, 0.12], "down": obj + BOWL_RIM, "close": obj + BOWL_RIM,
            "lift": np.array([eef[0], eef[1], LIFT_HEIGHT]), "over": target + BOWL_RIM + [0, 0, 0.15],
            "lower": target + BOWL_RIM + [0, 0, 0.06], "release": eef,
        }[self.phase]
        grip = 1.0 if self.phase in ("close", "lift", "over", "lower") else -1.0
        err = goal - eef
        if self.phase in ("above", "down", "over", "lower") and np.linalg.norm(err) < self.REACHED:
            self.phase = self.ORDER[self.ORDER.index(self.phase) + 1]
        elif self.phase == "close":
            self.closing += 1
            self.phase = "lift" if self.closing > 8 else "close"
        elif self.phase == "lift" and eef[2] > LIFT_HEIGHT - 0.05:
            self.phase = "over"
        action = np.zeros(7, np.float32)
        action[:3] = np.clip(err / OSC_POS_SCALE, -1, 1)
        action[6] = grip
        return action
