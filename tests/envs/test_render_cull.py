"""Culling the geoms a camera cannot see (envs/render_cull.py, LiberoEnv's default) leaves every image the policy reads
byte-identical to robosuite's own render (`cull_geoms=False`): both cameras, at the protocol's 256 px, after the
reset and after every step of a seeded episode of large random actions (the wrist camera sweeps the scene). The
default run renders each state both ways in one env (libero_spatial task 4); the slow one steps a culling and a
robosuite env side by side and compares the observations themselves (tasks 4 and 0)."""
from __future__ import annotations

import mujoco
import numpy as np
import pytest

from oxygen_gym.envs.libero import LiberoEnv
from oxygen_gym.envs.render_cull import culled_geoms

STEPS = 6


def _culled(env: LiberoEnv, camera: str) -> int:
    """How many geoms the culled render leaves out for `camera` in the current state."""
    sim = env.libero_env.sim
    ctx = sim._render_context_offscreen
    ctx.cam.type, ctx.cam.fixedcamid = mujoco.mjtCamera.mjCAMERA_FIXED, sim.model.camera_name2id(camera)
    return len(culled_geoms(sim.model._model, sim.data._data, ctx.vopt, ctx.pert, ctx.cam, ctx.scn, 256, 256))


def test_each_state_renders_the_same_bytes_culled_or_not():
    env = LiberoEnv("libero_spatial", 4, protocol="openpi")
    try:
        env.reset(seed=7, options={"init_state": 1})
        sim = env.libero_env.sim
        culling = sim._render_context_offscreen.render.__self__  # the CullingRender LiberoEnv installed
        actions = np.random.default_rng(4).uniform(-1, 1, (STEPS, 7)).astype(np.float32)
        culled = []
        for i in range(STEPS + 1):
            for cam in ("agentview", "robot0_eye_in_hand"):
                images = []
                for enabled in (False, True):
                    culling.enabled = enabled
                    images.append(sim.render(camera_name=cam, width=256, height=256))
                assert np.array_equal(*images), f"state {i}, {cam}"
            culled.append({cam: _culled(env, cam) for cam in ("agentview", "robot0_eye_in_hand")})
            if i < STEPS:
                env.step(actions[i])
    finally:
        env.close()
    assert all(c["robot0_eye_in_hand"] > 0 for c in culled)  # the comparison is of culled renders
    assert any(c["agentview"] > 0 for c in culled)


def test_images_drawn_without_the_mirrored_pass_are_the_same_bytes():
    """With the stove's reflecting base out of a camera's view, the mirrored pass is skipped (render_cull.py
    `reflection_unseen`): the wrist camera over most of a task-0 episode. The state expert drives, and every few
    steps both cameras render with and without culling."""
    from oxygen_gym.envs.state_expert import StatePickPlaceExpert

    env = LiberoEnv("libero_spatial", 0, protocol="openpi", render_on_request=True)
    try:
        obs, _ = env.reset(seed=7, options={"init_state": 0})
        sim = env.libero_env.sim
        culling = sim._render_context_offscreen.render.__self__
        expert = StatePickPlaceExpert(env.libero_env.env, 0.025, 0.5, None)
        skipped = {}
        for step in range(60):
            if step % 6 == 0:
                for cam in ("agentview", "robot0_eye_in_hand"):
                    images, before = [], culling.mirror_skips
                    for enabled in (False, True):
                        culling.enabled = enabled
                        images.append(sim.render(camera_name=cam, width=256, height=256))
                    skipped[step, cam] = culling.mirror_skips > before
                    assert np.array_equal(*images), f"step {step}, {cam}"
            obs, _, terminated, truncated, _ = env.step(expert(obs["state"]))
            assert not (terminated or truncated)
    finally:
        env.close()
    wrist = [v for (_, cam), v in skipped.items() if cam == "robot0_eye_in_hand"]
    assert sum(wrist) >= len(wrist) // 2, skipped  # the comparison covers skipped mirrored passes
    assert not any(v for (_, cam), v in skipped.items() if cam == "agentview")  # the agent view sees the stove


@pytest.mark.slow
@pytest.mark.parametrize("task", [4, 0])
def test_observations_are_byte_identical_to_robosuites_render(task):
    envs = [LiberoEnv("libero_spatial", task, protocol="openpi", cull_geoms=cull) for cull in (False, True)]
    try:
        first = [e.reset(seed=7, options={"init_state": 1})[0] for e in envs]
        observations = [first]
        culled = []
        actions = np.random.default_rng(task).uniform(-1, 1, (STEPS, 7)).astype(np.float32)
        for a in actions:
            observations.append([e.step(a)[0] for e in envs])
            culled.append({cam: _culled(envs[1], cam) for cam in ("agentview", "robot0_eye_in_hand")})
        for i, (ref, got) in enumerate(observations):
            for cam in ("base", "wrist"):
                assert ref["images"][cam].shape == (256, 256, 3)
                assert np.array_equal(ref["images"][cam], got["images"][cam]), f"step {i}, {cam} camera"
            np.testing.assert_array_equal(ref["state"], got["state"])
    finally:
        for e in envs:
            e.close()
    # the comparison is of culled renders: each camera left geoms out at some step (the wrist camera at every one)
    assert all(c["robot0_eye_in_hand"] > 0 for c in culled)
    assert any(c["agentview"] > 0 for c in culled)
