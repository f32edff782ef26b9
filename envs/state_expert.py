"""A pick-and-place expert whose every action is a function of the sim state alone, so it can label any state a
policy visits (DAgger), not only the states of its own trajectory.

`PickPlaceExpert` (experts.py) walks a phase sequence of its own (it lifts after 8 closing steps whether or not the
bowl is held), so off its path it gives wrong labels: after a policy overshoots or misses a grasp, it keeps carrying
an empty gripper. Here the phase is read from the state each step, with the same predicates `SubtaskLabeller`
scores narration with: a missed grasp opens and approaches again, a dropped bowl is picked up again.
"""
from __future__ import annotations

import numpy as np

from .experts import (BOWL_RIM, LIFT_HEIGHT, OSC_POS_SCALE, SubtaskLabeller, grasp_offset, lift_height, pick_place_goal,
                      tilted_rim, upright_axis)

APPROACH = np.array([0.0, 0.0, 0.12])  # above the grasp point, as PickPlaceExpert approaches
# World z the approach point never rises above. Over the wooden cabinet (libero_spatial task 9) the grasp point is
# ~1.16 m high and APPROACH put the hand at ~1.28 m: above the cabinet's middle the Panda's elbow is then nearly
# straight (joint 4 within 0.2 rad of its limit), the OSC cannot move the hand back toward the base, and an overshoot
# of ~2 cm past the grasp point was never corrected ("above" and "down" alternated to the step limit: 16 of 50 fresh
# scenes, every one with the bowl at x 0.007-0.041 m; `docs/libero-suite.md`). 6 cm above that grasp point the arm is
# bent enough. The table and drawer approaches (at most ~1.21 m) are below the ceiling and unchanged.
APPROACH_CEILING = 1.22
OVER = np.array([0.0, 0.0, 0.15])  # above the target to carry to
LOWER = np.array([0.0, 0.0, 0.06])  # above the target to open at (default; `place_height` sets its height)
REACHED = 0.015  # metres: at a waypoint
ALIGNED = 0.02  # metres: horizontally over the grasp point, so descending is safe
CLOSED = 0.06  # finger opening below which the gripper counts as closed (SubtaskLabeller's threshold)
SETTLE_STEPS = 12  # steps of closing at the grasp point before lifting (the fingers pinch the wall ~10 steps in)
ON_TABLE = 0.10  # metres above its resting height below which the object is still low (not yet carried high)
OPEN_GAP = 0.07  # finger opening above which an opening gripper counts as open again (fully open ~0.078)
AT_REST = 0.02  # m/s: an object moving slower than this has come to rest (a released bowl lands in ~0.2 s)
SLOW_LIFT_UNTIL = 0.05  # metres above its resting height: how high the object rises at a capped `lift_speed`
OSC_ROT_SCALE = 0.5  # radians per rotation action unit (robots[0].controller.output_max[3:])
YAW_ALIGNED = np.deg2rad(5.0)  # finger axis within this of the grasp direction: descending is safe
ON_XY = 0.03  # metres: LIBERO's `On` holds only with the object's centre this near the target's (check_ontop)


def approach_point(grasp: np.ndarray) -> np.ndarray:
    """Where the hand waits above the grasp point before descending: APPROACH above it, but no higher than
    APPROACH_CEILING (and never below the grasp point)."""
    point = grasp + APPROACH
    point[2] = max(float(grasp[2]), min(float(point[2]), APPROACH_CEILING))
    return point


def lowering_waypoint(target: np.ndarray, place_height: float | None = None, rim: np.ndarray = BOWL_RIM) -> np.ndarray:
    """Where the eef lowers a held object to over the target: `place_height` metres above the grasp height the object
    would have resting where the target is (None: LOWER's 6 cm, from which the released bowl falls onto the plate;
    0: the bowl is set down on the plate, and LIBERO's `On` holds on contact, before any release)."""
    return target + rim + (LOWER if place_height is None else np.array([0.0, 0.0, place_height]))


def at_release_point(eef: np.ndarray, obj: np.ndarray, target: np.ndarray, release_xy: float | None = None,
                     place_height: float | None = None, rim: np.ndarray = BOWL_RIM) -> bool:
    """Low enough over the target to open. Default (`release_xy` None): the eef within REACHED of its lowering
    waypoint in 3-D. With `release_xy` (metres): the eef at the waypoint's height (within REACHED) and the held
    object within `release_xy` of the target horizontally, so a bowl a few centimetres off the plate's centre is let
    go (LIBERO's `On` needs contact, not centring) instead of being corrected to a centimetre a 96 px image can't
    resolve."""
    waypoint = lowering_waypoint(target, place_height, rim)
    if release_xy is None:
        return bool(np.linalg.norm(eef - waypoint) < REACHED)
    return bool(abs(eef[2] - waypoint[2]) < REACHED and np.linalg.norm((obj - target)[:2]) < release_xy)


def state_phase(eef: np.ndarray, finger_gap: float, obj: np.ndarray, target: np.ndarray, rest_z: float,
                closing_steps: int = SETTLE_STEPS, missed_target: bool = False,
                release_xy: float | None = None, place_height: float | None = None, rim: np.ndarray = BOWL_RIM,
                lift_z: float = LIFT_HEIGHT, aligned: bool = True) -> str:
    """The phase a state is in: above, down, close, open, lift, over, lower, release or retreat. `closing_steps`: how
    many steps in a row the gripper has been commanded closed (a grip is firm only after SETTLE_STEPS).
    `missed_target`: the object rests near the target but the task's own goal check fails (set down beside the
    plate or on its rim), so it is picked up and placed again instead of being left there. `release_xy` and
    `place_height`: see `at_release_point` and `lowering_waypoint`. `rim`: the grasp point relative to the object
    (experts.grasp_offset); `lift_z`: the height a grasped object is lifted to (experts.lift_height); `aligned`: the
    fingers point along the grasp direction (they are turned above the object before descending).

    A held object over the target is placed by where it hangs from the eef (`eef - obj`), not by `rim`: a bowl tilted
    or slid in the pinch hangs off its grasp point, and its centre is what must land on the plate. Once the release
    has begun (the gripper commanded open on the last step: `closing_steps` 0) it goes on at the lowering height while
    the object is within ON_XY of the target, even if opening nudged it past `release_xy`; closing again there was
    libero_spatial task 6's failure (13 opens, each a step of release, then closing on a bowl 2.6 cm off the plate,
    to the step limit). Farther off (a gripper flipped open by a perturbation), it is lowered and held again."""
    grasp = obj + rim
    at_object = np.linalg.norm(eef - grasp) < SubtaskLabeller.GRASP_RADIUS
    over_target = np.linalg.norm((obj - target)[:2]) < SubtaskLabeller.OVER_TARGET
    if over_target:  # over the plate it rests on the plate: a bowl from the drawer is not "low" at drawer height
        rest_z = min(rest_z, float(target[2]))
    lifted = obj[2] > rest_z + SubtaskLabeller.LIFTED
    if at_object and finger_gap < OPEN_GAP and not lifted and closing_steps < SETTLE_STEPS:
        return "close"  # closing on the object: let the fingers settle before lifting
    if at_object and finger_gap < CLOSED:  # holding the object (closed on it, fingers settled)
        if over_target:
            hanging = eef - obj
            releasing = (closing_steps == 0 and np.linalg.norm((obj - target)[:2]) < ON_XY
                         and eef[2] < lowering_waypoint(target, place_height, hanging)[2] + REACHED)
            return "release" if releasing or at_release_point(eef, obj, target, release_xy, place_height,
                                                              hanging) else "lower"
        if eef[2] < lift_z - 0.05 and obj[2] < rest_z + ON_TABLE:
            return "lift"
        return "over"
    if over_target and obj[2] < rest_z + ON_TABLE and not missed_target:
        return "retreat"  # the object is on the target (or still landing there): let go and move away
    if np.linalg.norm(eef - grasp) < REACHED:
        return "close"  # at the grasp point
    if finger_gap < OPEN_GAP:
        return "open"  # (half) closed but not holding: a missed or lost grasp; open before approaching again
    if aligned and np.linalg.norm((eef - grasp)[:2]) < ALIGNED and eef[2] < approach_point(grasp)[2] + REACHED:
        return "down"
    return "above"


def phase_action(phase: str, eef: np.ndarray, obj: np.ndarray, target: np.ndarray,
                 place_height: float | None = None, rim: np.ndarray = BOWL_RIM, lift_z: float = LIFT_HEIGHT,
                 yaw_error: float = 0.0) -> np.ndarray:
    """The 7-d OSC action of a phase: a clipped step towards its waypoint, a turn of the fingers about z by
    `yaw_error` (radians; 0 on every table task), and the gripper command. Above LIFT_HEIGHT (`lift_z` raised for a
    bowl lifted out of the drawer or off the cabinet) the carry keeps that height until over the target, so the held
    bowl does not sweep through the drawer's front wall on a diagonal down to the plate. "lower" (a held object) puts
    the object's centre over the target, by where it hangs from the eef (see `state_phase`)."""
    grasp = obj + rim
    over = target + rim + OVER
    if lift_z > LIFT_HEIGHT:
        over[2] = max(over[2], lift_z)
    goal = {
        "above": approach_point(grasp), "down": grasp, "close": grasp, "open": eef,
        "lift": np.array([eef[0], eef[1], lift_z]), "over": over,
        "lower": lowering_waypoint(target, place_height, eef - obj), "release": eef,
        "retreat": np.array([eef[0], eef[1], lift_z]),
    }[phase]
    action = np.zeros(7, np.float32)
    action[:3] = np.clip((goal - eef) / OSC_POS_SCALE, -1, 1)
    action[5] = np.clip(yaw_error / OSC_ROT_SCALE, -1, 1)
    action[6] = 1.0 if phase in ("close", "lift", "over", "lower") else -1.0
    return action


def finger_yaw_error(eef_axis_angle: np.ndarray, rim: np.ndarray) -> float:
    """Radians to turn the gripper about world z so its fingers (the eef frame's y axis) close along the grasp
    direction `rim[:2]` (either sign: the fingers are symmetric), in [-pi/2, pi/2)."""
    from robosuite.utils.transform_utils import axisangle2quat, quat2mat

    fingers = quat2mat(axisangle2quat(np.asarray(eef_axis_angle, np.float64)))[:, 1]
    error = np.arctan2(rim[1], rim[0]) - np.arctan2(fingers[1], fingers[0])
    return float((error + np.pi / 2) % np.pi - np.pi / 2)


def cap_first_lift(action: np.ndarray, phase: str, obj_z: float, rest_z: float, lift_speed: float | None) -> np.ndarray:
    """With `lift_speed` (a fraction of the full upward step), the first SLOW_LIFT_UNTIL of a lift rises at most that
    fast. At full speed the rim pinch slips: the clean expert re-grasped on 12 of fresh scenes 20-49, on 3 at 0.3,
    which failed 2 more of them (docs/libero-spatial.md, "A slower first lift")."""
    if lift_speed is not None and phase == "lift" and obj_z < rest_z + SLOW_LIFT_UNTIL:
        action = action.copy()
        action[2] = min(action[2], lift_speed)
    return action


class StatePickPlaceExpert:
    """Drop-in for PickPlaceExpert (same call: the policy state vector, privileged poses from the sim)."""

    def __init__(self, libero_env, release_xy: float | None = None, lift_speed: float | None = None,
                 place_height: float | None = None) -> None:
        """`release_xy`: horizontal tolerance (metres) of the held object over the target at which it opens
        (`at_release_point`; None: the eef within REACHED of its lowering waypoint). `lift_speed`: the cap on the
        first centimetres of a lift (`cap_first_lift`; None: full speed). `place_height`: the lowering waypoint's
        height over the target (`lowering_waypoint`; None: 6 cm)."""
        self.sim, self.release_xy, self.lift_speed = libero_env, release_xy, lift_speed
        self.place_height = place_height
        self.obj, self.target = pick_place_goal(libero_env)
        self.rest_z = float(self._pos(self.obj)[2])  # the lowest the object has been seen (see `__call__`)
        self.rim = grasp_offset(libero_env, self.obj)  # upright; turned with the object's tilt each step
        self.up = upright_axis(self._rotation(self.obj))
        # the fingers are turned only where the grasp is not BOWL_RIM's (the drawer), so table tasks act as before
        self.turns = not np.allclose(self.rim, BOWL_RIM)
        self.phase, self.closing, self._closing_before = "above", 0, 0

    def _pos(self, name: str) -> np.ndarray:
        return self.sim.sim.data.body_xpos[self.sim.obj_body_id[name]].copy()

    def _rotation(self, name: str) -> np.ndarray:
        return self.sim.sim.data.body_xmat[self.sim.obj_body_id[name]].reshape(3, 3).copy()

    def _missed_target(self) -> bool:
        """The object is at rest and LIBERO's goal predicate (the task's BDDL `On`) does not hold. Without this the
        expert retreated from a bowl set down within 4 cm of the plate but beside it, and hovered to the step limit."""
        body = self.sim.obj_body_id[self.obj]
        resting = np.linalg.norm(self.sim.sim.data.cvel[body][3:]) < AT_REST  # cvel: (angular, linear)
        return resting and not self.sim._check_success()

    def __call__(self, state: np.ndarray) -> np.ndarray:
        eef = np.asarray(state[:3], np.float64)
        gap = float(state[6] - state[7])
        obj, target = self._pos(self.obj), self._pos(self.target)
        rim = tilted_rim(self.rim, self._rotation(self.obj), self.up)  # a bowl tilted in the pinch is still held
        # a bowl drawn above the drawer may still be dropping into it when the episode starts: it rests at the lowest
        # it has been seen while not in the closed gripper (a held bowl lowered onto the plate is not resting)
        if not (gap < OPEN_GAP and np.linalg.norm(eef - (obj + rim)) < SubtaskLabeller.GRASP_RADIUS):
            self.rest_z = min(self.rest_z, float(obj[2]))
        lift_z = lift_height(self.rest_z, self.rim)
        yaw = finger_yaw_error(state[3:6], self.rim) if self.turns else 0.0
        where = dict(release_xy=self.release_xy, place_height=self.place_height, rim=rim, lift_z=lift_z,
                     aligned=abs(yaw) < YAW_ALIGNED)
        self.phase = state_phase(eef, gap, obj, target, self.rest_z, self.closing, **where)
        if self.phase == "retreat" and self._missed_target():  # the sim's goal check only where it can matter
            self.phase = state_phase(eef, gap, obj, target, self.rest_z, self.closing, missed_target=True, **where)
        self._closing_before = self.closing
        self.closing = self.closing + 1 if self.phase in ("close", "lift", "over", "lower") else 0  # gripping steps
        action = phase_action(self.phase, eef, obj, target, self.place_height, rim, lift_z, yaw)
        return cap_first_lift(action, self.phase, obj[2], self.rest_z, self.lift_speed)

    def executed(self, action: np.ndarray) -> None:
        """Count gripping steps from the action that ran, when it was not this expert's own (DAgger: the policy
        drove), so the settling count follows the gripper the sim saw."""
        self.closing = self._closing_before + 1 if float(action[6]) > 0 else 0
