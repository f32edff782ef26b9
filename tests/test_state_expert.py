"""The state expert (envs/state_expert.py) reads its phase from the sim state, so it can label states off its own
path (DAgger): every phase from hand-placed poses, and on LIBERO it finishes the task after a policy-like
overshoot with the gripper closed and after the bowl is dropped mid-lift."""
from __future__ import annotations

import numpy as np
import pytest

from oxygen_gym.envs.experts import BOWL_RIM, LIFT_HEIGHT
from oxygen_gym.envs.state_expert import SETTLE_STEPS, phase_action, state_phase

OBJ = np.array([0.0, 0.2, 0.90])
TARGET = np.array([0.1, 0.0, 0.90])
GRASP = OBJ + BOWL_RIM
OPEN, SHUT = 0.078, 0.004  # finger gaps: fully open, pinching a bowl's wall


@pytest.mark.parametrize("eef, gap, obj, closing, phase", [
    (GRASP + [0.2, 0.0, 0.2], OPEN, OBJ, 0, "above"),
    (GRASP + [0.005, 0.0, 0.08], OPEN, OBJ, 0, "down"),
    (GRASP + [0.005, 0.0, 0.0], OPEN, OBJ, 0, "close"),
    (GRASP + [0.01, 0.0, 0.0], 0.03, OBJ, SETTLE_STEPS - 1, "close"),  # fingers still settling
    (GRASP, SHUT, OBJ, SETTLE_STEPS, "lift"),
    (GRASP + [0.0, 0.0, 0.2], SHUT, OBJ + [0.0, 0.0, 0.2], SETTLE_STEPS + 5, "over"),
    (TARGET + BOWL_RIM + [0.0, 0.0, 0.15], SHUT, TARGET + [0.0, 0.0, 0.15], 40, "lower"),
    (TARGET + BOWL_RIM + [0.0, 0.0, 0.06], SHUT, TARGET + [0.0, 0.0, 0.06], 50, "release"),
    (TARGET + BOWL_RIM + [0.0, 0.0, 0.06], OPEN, TARGET + [0.0, 0.0, 0.02], 0, "retreat"),
    (GRASP + [0.0, 0.0, 0.12], SHUT, OBJ, 20, "open"),  # lifted an empty gripper: a missed grasp
    (GRASP + [0.0, -0.2, 0.1], 0.05, OBJ, 0, "open"),  # half closed far from the bowl
])
def test_the_phase_is_read_from_the_state(eef, gap, obj, closing, phase):
    assert state_phase(np.asarray(eef), gap, np.asarray(obj), TARGET, rest_z=OBJ[2], closing_steps=closing) == phase


def test_a_bowl_left_beside_the_target_is_picked_up_again_not_retreated_from():
    """Near the plate (within OVER_TARGET) but off it: LIBERO's `On` needs 3 cm. Only while the goal check holds, or
    the bowl is still landing, does the expert retreat."""
    beside = TARGET + [0.0, 0.035, 0.0]
    eef = beside + BOWL_RIM + [0.0, 0.0, 0.06]
    assert state_phase(eef, OPEN, beside, TARGET, rest_z=OBJ[2], closing_steps=0) == "retreat"
    assert state_phase(eef, OPEN, beside, TARGET, rest_z=OBJ[2], closing_steps=0, missed_target=True) == "down"
    at_rim = beside + BOWL_RIM
    assert state_phase(at_rim, OPEN, beside, TARGET, rest_z=OBJ[2], closing_steps=0, missed_target=True) == "close"


def test_phase_actions_head_for_their_waypoint_and_command_the_gripper():
    eef = GRASP + [0.0, 0.0, 0.3]
    down = phase_action("down", eef, OBJ, TARGET)
    assert down[2] == -1.0 and down[6] == -1.0 and np.allclose(down[3:6], 0)
    lift = phase_action("lift", GRASP, OBJ, TARGET)
    assert lift[2] == 1.0 and lift[6] == 1.0 and np.allclose(lift[:2], 0)
    assert phase_action("lift", np.array([0, 0, LIFT_HEIGHT]), OBJ, TARGET)[2] == 0.0


@pytest.mark.slow
def test_the_state_expert_recovers_from_states_off_its_path():
    import gymnasium as gym

    import oxygen_gym.envs  # noqa: F401
    from oxygen_gym.envs.state_expert import StatePickPlaceExpert

    env = gym.make("oxygen_gym/LIBERO-v0", suite="libero_spatial", task_id=0, camera_size=64, fast_render=True,
                   fast_reset=True)
    try:
        for push, drop in ((40, False), (0, True)):
            obs, _ = env.reset(seed=7, options={"init_state": 0})
            expert = StatePickPlaceExpert(env.unwrapped.libero_env.env)
            phases, dropped, done, t = [], 0, False, 0
            while not done:
                action = expert(obs["state"])
                if t < push:  # the overshoot seen in closed loop: drive sideways, gripper closed
                    action = np.array([0, 1, 0, 0, 0, 0, 1], np.float32)
                elif drop and expert.phase == "over" and dropped < 6:  # open the gripper mid-carry
                    action[6], dropped = -1.0, dropped + 1
                phases.append(expert.phase)
                obs, _, terminated, truncated, info = env.step(action)
                done, t = terminated or truncated, t + 1
            assert info["is_success"], (push, drop, info["step"])
            if drop:
                assert dropped == 6 and phases.count("close") > SETTLE_STEPS + 1, "the bowl was not grasped again"
        _set_down_beside_the_plate_then_expert(env)
    finally:
        env.close()


def _set_down_beside_the_plate_then_expert(env) -> None:
    """A policy-like miss: carry the bowl to 2.5 cm beside the plate's centre and let go there. The bowl comes to
    rest ~3.8 cm off (LIBERO's `On` needs 3 cm): the expert must pick it up and place it again (it used to retreat
    and hover until the step limit)."""
    from oxygen_gym.envs.experts import OSC_POS_SCALE
    from oxygen_gym.envs.state_expert import StatePickPlaceExpert

    obs, _ = env.reset(seed=7, options={"init_state": 0})
    expert = StatePickPlaceExpert(env.unwrapped.libero_env.env)
    forcing, opened, phases, done = False, None, [], False
    while not done:
        action = expert(obs["state"])
        forcing = forcing or (expert.phase == "over" and opened is None)
        if forcing and (opened is None or opened < 12):
            waypoint = expert._pos(expert.target) + BOWL_RIM + [0.0, 0.025, 0.05]
            action[:3] = np.clip((waypoint - obs["state"][:3]) / OSC_POS_SCALE, -1, 1)
            if opened is None and np.linalg.norm(waypoint - obs["state"][:3]) < 0.01:
                opened = 0
            if opened is not None:
                action[6], opened = -1.0, opened + 1
        else:
            phases.append(expert.phase)
        obs, _, terminated, truncated, info = env.step(action)
        done = terminated or truncated
    assert opened == 12, "the bowl was not carried to beside the plate and let go"
    assert info["is_success"], f"not placed again: the expert's phases after the miss ended {phases[-5:]}"
    assert phases.count("close") > SETTLE_STEPS, "placed without a second grasp: the miss did not happen"


def test_a_release_tolerance_lets_go_of_a_bowl_off_the_plates_centre_at_the_lowering_height():
    """`release_xy`: the bowl within that of the plate horizontally and the eef at its lowering height open the
    gripper; the default waits for the eef at its waypoint within 1.5 cm, and neither opens high above the plate."""
    off = TARGET + [0.02, 0.0, 0.06]  # the held bowl 2 cm off the plate's centre
    low = off + BOWL_RIM  # eef at the lowering height above it
    assert state_phase(low, SHUT, off, TARGET, rest_z=OBJ[2], closing_steps=50) == "lower"
    assert state_phase(low, SHUT, off, TARGET, rest_z=OBJ[2], closing_steps=50, release_xy=0.025) == "release"
    assert state_phase(low, SHUT, off, TARGET, rest_z=OBJ[2], closing_steps=50, release_xy=0.015) == "lower"
    high = low + [0.0, 0.0, 0.05]
    assert state_phase(high, SHUT, off + [0.0, 0.0, 0.05], TARGET, rest_z=OBJ[2], closing_steps=50,
                       release_xy=0.025) == "lower"


def test_collect_checks_the_release_tolerance():
    from oxygen_gym.train.collect.collector import CollectConfig

    with pytest.raises(ValueError, match="--release-xy-cm must be in"):
        CollectConfig(init_states=(), fresh_scenes=(0,), perturb_rate=0.15, release_xy_m=0.05)
    with pytest.raises(ValueError, match="give --perturb or --dagger"):
        CollectConfig(init_states=(), fresh_scenes=(0,), release_xy_m=0.02)
    cfg = CollectConfig(init_states=(), fresh_scenes=(0,), perturb_rate=0.15, release_xy_m=0.025)
    assert cfg.to_json()["release_xy_m"] == 0.025


def test_a_place_height_of_zero_lowers_the_held_bowl_onto_the_plate_before_opening():
    """`place_height` 0: the bowl held 6 cm over the plate (where the default opens) is still lowered, towards the
    grasp height it would rest at on the plate, and only there is it let go."""
    high = TARGET + [0.0, 0.0, 0.06]  # the held bowl where the default expert lets go
    assert state_phase(high + BOWL_RIM, SHUT, high, TARGET, rest_z=OBJ[2], closing_steps=50) == "release"
    assert state_phase(high + BOWL_RIM, SHUT, high, TARGET, rest_z=OBJ[2], closing_steps=50,
                       place_height=0.0) == "lower"
    down = phase_action("lower", high + BOWL_RIM, high, TARGET, place_height=0.0)
    assert down[2] < 0 and down[6] > 0  # still lowering, still closed
    assert phase_action("lower", high + BOWL_RIM, high, TARGET)[2] == 0.0  # the default is at its waypoint
    on_plate = TARGET + [0.0, 0.0, 0.005]
    assert state_phase(on_plate + BOWL_RIM, SHUT, on_plate, TARGET, rest_z=OBJ[2], closing_steps=50,
                       place_height=0.0) == "release"


def test_collect_checks_the_place_height():
    from oxygen_gym.train.collect.collector import CollectConfig

    for bad in (-0.01, 0.15):
        with pytest.raises(ValueError, match="--place-height-cm must be in"):
            CollectConfig(init_states=(), fresh_scenes=(0,), perturb_rate=0.15, place_height_m=bad)
    with pytest.raises(ValueError, match="give --perturb or --dagger"):
        CollectConfig(init_states=(), fresh_scenes=(0,), place_height_m=0.0)
    assert CollectConfig(init_states=(), fresh_scenes=(0,), perturb_rate=0.15,
                         place_height_m=0.0).to_json()["place_height_m"] == 0.0


def test_a_lift_speed_caps_only_the_first_centimetres_of_a_lift():
    from oxygen_gym.envs.state_expert import SLOW_LIFT_UNTIL, cap_first_lift

    lift = phase_action("lift", GRASP, OBJ, TARGET)
    assert lift[2] == 1.0
    capped = cap_first_lift(lift, "lift", OBJ[2] + 0.01, OBJ[2], 0.3)
    assert capped[2] == pytest.approx(0.3) and np.array_equal(np.delete(capped, 2), np.delete(lift, 2))
    assert lift[2] == 1.0  # the expert's action is not changed in place
    assert cap_first_lift(lift, "lift", OBJ[2] + SLOW_LIFT_UNTIL + 0.001, OBJ[2], 0.3)[2] == 1.0  # high enough
    assert cap_first_lift(lift, "lift", OBJ[2] + 0.01, OBJ[2], None)[2] == 1.0  # default: full speed
    over = phase_action("over", GRASP, OBJ, TARGET)
    assert np.array_equal(cap_first_lift(over, "over", OBJ[2] + 0.01, OBJ[2], 0.3), over)  # lifts only


def test_collect_checks_the_lift_speed():
    from oxygen_gym.train.collect.collector import CollectConfig

    for bad in (0.0, 1.0, 1.5):
        with pytest.raises(ValueError, match="--lift-speed must be in"):
            CollectConfig(init_states=(), fresh_scenes=(0,), perturb_rate=0.15, lift_speed=bad)
    with pytest.raises(ValueError, match="give --perturb or --dagger"):
        CollectConfig(init_states=(), fresh_scenes=(0,), lift_speed=0.3)
    assert CollectConfig(init_states=(), fresh_scenes=(0,), perturb_rate=0.15, lift_speed=0.3).to_json()["lift_speed"] == 0.3


def _eef_axis_angle(finger_yaw: float) -> np.ndarray:
    """The eef orientation (axis-angle, as in the policy state) of a gripper pointing down with its fingers (the eef
    frame's y axis) along `finger_yaw` about world z."""
    from robosuite.utils.transform_utils import mat2quat, quat2axisangle

    y = np.array([np.cos(finger_yaw), np.sin(finger_yaw), 0.0])
    z = np.array([0.0, 0.0, -1.0])
    return quat2axisangle(mat2quat(np.stack([np.cross(y, z), y, z], axis=1)))


def test_the_finger_turn_is_the_shortest_one_onto_the_grasp_direction():
    from oxygen_gym.envs.state_expert import finger_yaw_error

    down_y = _eef_axis_angle(-np.pi / 2)  # LIBERO's start: fingers along world y
    assert abs(finger_yaw_error(down_y, BOWL_RIM)) < 1e-6  # the table grasp needs no turn
    side = np.array([-0.908, 0.42, 0.0]) * 0.055  # a drawer's width axis (libero_spatial task 4, scene 0)
    assert finger_yaw_error(down_y, side) == pytest.approx(np.deg2rad(65.2), abs=np.deg2rad(0.5))
    assert finger_yaw_error(down_y, -side) == pytest.approx(finger_yaw_error(down_y, side))  # either finger leads
    assert finger_yaw_error(_eef_axis_angle(0.3), np.array([np.cos(0.1), np.sin(0.1), 0.0])) == pytest.approx(-0.2)


def test_a_drawer_grasp_turns_the_fingers_before_descending_and_lifts_clear_of_the_drawer():
    """Task 4's bowl rests in the drawer (rim at z 1.09-1.10, walls to ~1.12): grasped on a side wall, descended onto only
    once the fingers are turned, lifted to LIFT_CLEARANCE over its resting grasp point (the table rule's
    LIFT_HEIGHT - 5 cm is below the rim, so it used to skip the lift and drag the bowl through the drawer's wall),
    and carried at that height until over the plate."""
    from oxygen_gym.envs.experts import LIFT_CLEARANCE, lift_height

    rim = np.array([-0.908, 0.42, 0.0]) * 0.055 + [0.0, 0.0, 0.03]
    bowl = np.array([0.077, -0.153, 1.075])  # its rim at 1.105, as on the scene the table expert failed first
    grasp = bowl + rim
    lift_z = lift_height(bowl[2], rim)
    assert lift_z == pytest.approx(bowl[2] + 0.03 + LIFT_CLEARANCE) and lift_height(OBJ[2], BOWL_RIM) == LIFT_HEIGHT
    above = grasp + [0.005, 0.0, 0.1]
    assert state_phase(above, OPEN, bowl, TARGET, rest_z=bowl[2], rim=rim, lift_z=lift_z, aligned=False) == "above"
    assert state_phase(above, OPEN, bowl, TARGET, rest_z=bowl[2], rim=rim, lift_z=lift_z, aligned=True) == "down"
    held = dict(rest_z=bowl[2], closing_steps=SETTLE_STEPS, rim=rim)
    assert state_phase(grasp, SHUT, bowl, TARGET, **held, lift_z=lift_z) == "lift"
    assert state_phase(grasp, SHUT, bowl, TARGET, **held) == "over"  # the table rule: no lift out of the drawer
    carried = grasp + [0.0, 0.0, 0.1]
    over = phase_action("over", carried, bowl + [0.0, 0.0, 0.1], TARGET, rim=rim, lift_z=lift_z)
    assert over[2] >= 0.0 and over[1] > 0  # toward the plate, not down through the drawer's front
    assert phase_action("over", carried, bowl + [0.0, 0.0, 0.1], TARGET, rim=rim)[2] < 0  # the table rule descends
    turn = phase_action("above", above, bowl, TARGET, rim=rim, yaw_error=0.2)
    assert turn[5] == pytest.approx(0.4) and np.allclose(turn[3:5], 0)


@pytest.mark.slow
@pytest.mark.timeout(1200)
@pytest.mark.parametrize("task", [*range(6), pytest.param(6, marks=pytest.mark.xfail(
    strict=True, reason="task 6 scene 0: released, grasped again, 13 opens, not solved (docs/libero-suite.md)")),
    *range(7, 10)])
def test_the_state_expert_solves_a_fresh_scene_of_every_libero_spatial_task(task):
    """Fresh scene 0 of each libero_spatial task (docs/libero-suite.md has the per-task rates): the clean state
    expert (2.5 cm release tolerance: at the default 1.5 cm it hovers over the plate to the step limit on tasks 2, 6
    and 8) succeeds; and the subtask labels of its episode (the narration target) start on reach, end on release, and
    first reach each of the five sentences in order (a re-grasp may go back)."""
    pytest.importorskip("libero")
    import gymnasium as gym

    import oxygen_gym.envs  # noqa: F401
    from oxygen_gym.envs.experts import SubtaskLabeller
    from oxygen_gym.envs.state_expert import StatePickPlaceExpert
    from oxygen_gym.train.collect import EpisodeKey

    env = gym.make("oxygen_gym/LIBERO-v0", suite="libero_spatial", task_id=task, camera_size=64, fast_render=True,
                   fast_reset=True)
    try:
        seed = EpisodeKey("libero_spatial", task, None, 0, scene=0).scene_seed()
        obs, _ = env.reset(seed=env.unwrapped.protocol.seed, options={"scene_seed": seed})
        sim = env.unwrapped.libero_env.env
        expert, labeller = StatePickPlaceExpert(sim, release_xy=0.025, lift_speed=0.5), SubtaskLabeller(sim)
        labels, done = [], False
        while not done:
            labels.append(labeller(obs["state"][:3], obs["state"][6:8]))
            obs, _, terminated, truncated, info = env.step(expert(obs["state"]))
            done = terminated or truncated
        labels.append(labeller(obs["state"][:3], obs["state"][6:8]))
    finally:
        env.close()
    assert info["is_success"], f"task {task}: not solved in {info['step']} steps"
    runs = [s for i, s in enumerate(labels) if i == 0 or s != labels[i - 1]]
    order = labeller.subtasks.all()
    assert runs[0] == order[0] and runs[-1] == order[-1], runs
    assert sorted(set(runs), key=runs.index) == list(order), runs


def test_a_bowl_from_the_drawer_let_go_over_the_plate_is_released_not_grasped_again():
    """Its resting height was the drawer's (~1.06), far above the plate: over the plate it rests on the plate, so a
    bowl opened on 6 cm up is high (released), not low in a half-open gripper (which read as closing on it again)."""
    rim = np.array([-0.908, 0.42, 0.0]) * 0.055 + [0.0, 0.0, 0.03]
    bowl = TARGET + [0.0, 0.0, 0.06]
    opening = dict(rest_z=1.063, closing_steps=0, rim=rim, lift_z=1.193)
    assert state_phase(bowl + rim, 0.05, bowl, TARGET, **opening) == "release"
    landed = TARGET + [0.0, 0.0, 0.01]
    assert state_phase(landed + rim + [0.0, 0.0, 0.05], OPEN, landed, TARGET, **opening) == "retreat"
