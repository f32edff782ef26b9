"""Where a LIBERO scene's movable objects are, and how far a scene is from each of the task's official init states.

Fresh scenes (`reset(options={"scene_seed": s})`) come from the same placement initializer that LIBERO's official
init states were drawn from, so "none of them is an official state" is a claim to check, not to assume: an init
state is a flattened MuJoCo state (time, qpos, qvel), and every movable object has a free joint in qpos.

LIBERO places an object that starts on or in a fixture's region (the bowl on the cabinet, on the stove, in the top
drawer) at the fixture's sampled pose plus the region site's world position (regions/base_region_sampler.py,
`SiteRegionRandomSampler.sample`): right only while the fixture still sits at the pose it was built with, as after a
hard reset. A soft reset keeps the previous draw's fixture poses, so without `reset_fixture_poses` such an object is
put ~25 cm from its region and falls to the table or the floor.
"""
from __future__ import annotations

import zlib

import numpy as np

# Two scenes whose every movable object lies within this distance of its counterpart are the same scene.
SAME_SCENE_M = 1e-3


def fresh_scene_seed(suite: str, task_id: int, scene: int) -> int:
    """numpy seed of LIBERO's placement sampler for fresh scene `scene` of a task: the one rule that collection
    (`oxygen-gym collect --fresh-scenes`) and evaluation (`oxygen-gym eval libero --fresh-scenes`) share, so scene k
    of a task is the same scene in both."""
    parts = [zlib.crc32(b"fresh-scene"), zlib.crc32(suite.encode()), int(task_id), int(scene)]
    return int(np.random.SeedSequence(parts).generate_state(1)[0])


def reset_fixture_poses(robosuite_env) -> None:
    """Put every fixture's root body back at the pose its XML gives it (MJCF defaults: origin, identity), where a
    freshly built model has it, so a soft reset's draw is the hard reset's draw (see the module docstring)."""
    from robosuite.utils.mjcf_utils import string_to_array

    model = robosuite_env.sim.model
    for name, fixture in robosuite_env.fixtures_dict.items():
        body = fixture.get_obj()
        other = sorted({"euler", "axisangle", "xyaxes", "zaxis"} & set(body.attrib))
        if other:
            raise ValueError(f"fixture {name!r}: its root body's orientation is given as {other}; only 'quat' is read")
        index = model.body_name2id(fixture.root_body)
        model.body_pos[index] = string_to_array(body.get("pos", "0 0 0"))
        model.body_quat[index] = string_to_array(body.get("quat", "1 0 0 0"))


def object_qpos_slices(robosuite_env) -> dict[str, slice]:
    """Movable object name -> the slice of qpos holding its free joint's position (x, y, z)."""
    model = robosuite_env.sim.model
    out = {}
    for name, obj in sorted(robosuite_env.objects_dict.items()):
        if not obj.joints:
            continue
        start, _ = model.get_joint_qpos_addr(obj.joints[-1])
        out[name] = slice(start, start + 3)
    return out


def object_positions(qpos: np.ndarray, slices: dict[str, slice]) -> np.ndarray:
    """(n_objects, 3) positions, in the order of `slices`."""
    return np.stack([np.asarray(qpos[s], np.float64) for s in slices.values()])


def scene_positions(robosuite_env) -> np.ndarray:
    """The movable objects' positions in the sim right now."""
    return object_positions(robosuite_env.sim.data.qpos, object_qpos_slices(robosuite_env))


def official_positions(robosuite_env, init_states) -> np.ndarray:
    """(n_states, n_objects, 3): the movable objects' positions in each official init state."""
    nq = robosuite_env.sim.model.nq
    slices = object_qpos_slices(robosuite_env)
    states = np.asarray(init_states, np.float64)
    if states.ndim != 2 or states.shape[1] < 1 + nq:
        raise ValueError(f"init_states must be flattened MuJoCo states of length >= {1 + nq}, got {states.shape}")
    return np.stack([object_positions(s[1:1 + nq], slices) for s in states])


def distance_to_official(positions: np.ndarray, official: np.ndarray) -> tuple[int, float]:
    """(index, metres) of the official init state nearest to `positions`, scene distance = the largest distance of
    any one object from its counterpart (two scenes are the same when it is below SAME_SCENE_M)."""
    per_state = np.linalg.norm(official - positions[None], axis=-1).max(axis=-1)
    i = int(np.argmin(per_state))
    return i, float(per_state[i])


def settle_displacement(drawn: np.ndarray, settled: np.ndarray) -> tuple[int, float]:
    """(index, metres) of the movable object that moved farthest horizontally between LIBERO's draw and the end of
    the protocol's settling steps. LIBERO's placement sampler checks overlaps with a radius per object, not the
    meshes, so some draws interpenetrate (the bowl drawn into the plate's rim) and physics pushes the objects apart
    while the scene settles: by up to 25 cm, the bowl onto the stove, in fresh scenes of libero_spatial task 0."""
    moved = np.linalg.norm((np.asarray(settled) - np.asarray(drawn))[:, :2], axis=-1)
    i = int(np.argmax(moved))
    return i, float(moved[i])
