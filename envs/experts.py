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


RIM_RADIUS = float(np.linalg.norm(BOWL_RIM[:2]))  # metres from a bowl's centre to the grasp point on its wall
LIFT_CLEARANCE = 0.10  # metres the grasp point rises above its resting height before carrying (at least LIFT_HEIGHT)


def container_region(libero_env, obj: str) -> str | None:
    """The fixture region the object starts inside (BDDL `(In obj region)`, e.g. the cabinet's open top drawer), or
    None for an object that starts on something."""
    for pred, *args in libero_env.parsed_problem.get("initial_state", []):
        if pred.lower() == "in" and len(args) == 2 and args[0] == obj:
            return args[1]
    return None


def grasp_offset(libero_env, obj: str) -> np.ndarray:
    """Where to grasp `obj`, relative to its centre. On a table, cookie box, ramekin, stove or cabinet top: BOWL_RIM
    (the wall on the +y side, fingers closing along y). Inside a drawer the wall is 1.6 cm from the drawer's front
    and back (measured on libero_spatial task 4), too close for the outer finger, and ~4 cm from its sides, so the rim
    is taken on a side: along the region's local x axis (the drawer's width), the sign with the larger world y."""
    region = container_region(libero_env, obj)
    if region is None:
        return BOWL_RIM.copy()
    model, data = libero_env.sim.model, libero_env.sim.data
    body = model.site_bodyid[model.site_name2id(region)]  # the drawer's body (the region site's own frame is not)
    width = data.body_xmat[body].reshape(3, 3)[:, 0].copy()
    width[2] = 0.0
    norm = float(np.linalg.norm(width))
    if norm < 1e-6:
        raise ValueError(f"the body of region {region!r} ({obj!r} starts in it) has a vertical x axis; no horizontal "
                         "grasp direction")
    width /= norm
    if width[1] < 0:
        width = -width
    return np.array([*(RIM_RADIUS * width[:2]), BOWL_RIM[2]])


def upright_axis(rotation: np.ndarray) -> np.ndarray:
    """The object's body-frame axis (a signed unit axis) that points up while it stands, from its 3x3 world
    orientation at rest: the one nearest world z, so a small tilt at the start (a bowl still settling into the
    drawer) is not taken as its upright."""
    up_row = np.asarray(rotation, np.float64).reshape(3, 3)[2]  # world z of each body axis
    axis = np.zeros(3)
    i = int(np.argmax(np.abs(up_row)))
    axis[i] = np.sign(up_row[i])
    return axis


def tilted_rim(rim: np.ndarray, rotation: np.ndarray, up: np.ndarray) -> np.ndarray:
    """The grasp point's offset from the object's centre, the object tilted: `rim` (its offset while the object
    stands) turned by the smallest rotation taking world z onto the object's up axis (`rotation`, its 3x3 world
    orientation, applied to `up`, see `upright_axis`). A bowl pinched by its wall tilts in the pinch as it is lifted
    (libero_spatial task 4, fresh scene 1: 25 degrees in 5 steps, the eef then 3.9 cm from the upright grasp point and
    1.3 cm from the tilted one), and the fingers stay on the same point of its wall, so a tilted but held bowl still
    counts as held. Its turn about its own axis is left out: a bowl is round, its wall the same at every angle."""
    u = np.asarray(rotation, np.float64).reshape(3, 3) @ np.asarray(up, np.float64)
    u = u / np.linalg.norm(u)
    rim = np.asarray(rim, np.float64)
    if u[2] < -1.0 + 1e-9:  # upside down: half a turn about the horizontal axis along the grasp direction
        return np.array([rim[0], rim[1], -rim[2]])
    v = np.array([-u[1], u[0], 0.0])  # world z x u: the tilt's axis, its length the sine of the tilt
    k = np.array([[0.0, -v[2], v[1]], [v[2], 0.0, -v[0]], [-v[1], v[0], 0.0]])
    return (np.eye(3) + k + k @ k / (1.0 + u[2])) @ rim


def lift_height(rest_z: float, rim: np.ndarray) -> float:
    """World z to lift the grasp point to before carrying: LIFT_HEIGHT (clear of everything on the table), or
    LIFT_CLEARANCE above the object's resting grasp point when it rests higher (in the drawer, on the cabinet)."""
    return max(LIFT_HEIGHT, rest_z + float(rim[2]) + LIFT_CLEARANCE)


def pick_place_goal(libero_env) -> tuple[str, str]:
    """(object, target) of a single `on` goal, from the task's parsed BDDL problem, or ValueError."""
    goal = libero_env.parsed_problem["goal_state"]
    if len(goal) != 1 or goal[0][0].lower() != "on":
        raise ValueError(f"the pick-and-place expert handles one ('on', object, target) goal; this task has {goal}")
    _, obj, target = goal[0]
    return obj, target


class SubtaskLabeller:
    """What the robot is doing now, from sim state only: reach -> grasp -> carry -> place -> release.

    Built at the start of an episode. Its resting height is the lowest the object has been seen while not held (a
    bowl drawn above the drawer may still be dropping into it when the episode starts), to tell 'lifted' from
    'resting'. The grasp point is `grasp_offset`'s (the drawer's bowl is grasped on a side wall); else BOWL_RIM,
    turned with the object's tilt (`tilted_rim`: a bowl tilted in the pinch is still held).
    """

    GRASP_RADIUS = 0.035  # gripper this close to the grasp point counts as at the object
    LIFTED = 0.02  # object this far above its resting height is off the table
    OVER_TARGET = 0.04  # horizontal distance to the target below which carrying becomes placing

    def __init__(self, libero_env) -> None:
        self.sim = libero_env
        self.obj, self.target = pick_place_goal(libero_env)
        self.subtasks = Subtasks.for_goal(self.obj, self.target)
        self.rest_z = float(self.position(self.obj)[2])
        self.rim = grasp_offset(libero_env, self.obj)
        self.up = upright_axis(self.rotation(self.obj))

    def position(self, name: str) -> np.ndarray:
        return self.sim.sim.data.body_xpos[self.sim.obj_body_id[name]].copy()

    def rotation(self, name: str) -> np.ndarray:
        return self.sim.sim.data.body_xmat[self.sim.obj_body_id[name]].reshape(3, 3).copy()

    def __call__(self, eef: np.ndarray, gripper_qpos: np.ndarray) -> str:
        obj, target = self.position(self.obj), self.position(self.target)
        rim = tilted_rim(self.rim, self.rotation(self.obj), self.up)
        at_object = np.linalg.norm(eef[:3] - (obj + rim)) < self.GRASP_RADIUS
        closed = float(gripper_qpos[0] - gripper_qpos[1]) < 0.06  # finger opening (open ~0.08, on a bowl wall ~0.03)
        held = closed and at_object
        if not held:  # resting height: the lowest seen while not held (see the class docstring)
            self.rest_z = min(self.rest_z, float(obj[2]))
        near_target = np.linalg.norm((obj - target)[:2]) < self.OVER_TARGET
        rest_z = min(self.rest_z, float(target[2])) if near_target else self.rest_z  # over the plate: on the plate
        lifted = obj[2] > rest_z + self.LIFTED
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
