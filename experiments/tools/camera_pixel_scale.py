"""How many model-image pixels one centimetre at the task's target (the plate) spans in each LIBERO camera: the scale that says what a
random shift of N pixels (train --shift) means in the scene, next to LIBERO's 3 cm `On` tolerance.

    python experiments/tools/camera_pixel_scale.py --init-state 0 --model-size 96

Projects the target's position (the `on` goal's target, envs/experts.py `pick_place_goal`) and points 1 cm from it
along world x and y through each camera (robosuite's camera_utils, at the env's render size, eval's default), then
scales to the model's image size (a square render resized to `--model-size`)."""
from __future__ import annotations

import argparse

import numpy as np


def pixels_per_cm(sim, camera: str, point: np.ndarray, render_size: int, model_size: int) -> tuple[float, float]:
    """Model pixels per centimetre along world x and y at `point`, seen from `camera` rendered at `render_size`."""
    from robosuite.utils.camera_utils import get_camera_transform_matrix, project_points_from_world_to_camera

    matrix = get_camera_transform_matrix(sim, camera, render_size, render_size)
    points = np.stack([point, point + [0.01, 0.0, 0.0], point + [0.0, 0.01, 0.0]])
    pixels = project_points_from_world_to_camera(points, matrix, render_size, render_size).astype(float)
    spans = np.linalg.norm(pixels[1:] - pixels[0], axis=1) * model_size / render_size
    return float(spans[0]), float(spans[1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--suite", default="libero_spatial")
    parser.add_argument("--task", type=int, default=0)
    parser.add_argument("--init-state", type=int, default=0)
    parser.add_argument("--model-size", type=int, default=96)
    args = parser.parse_args()
    from oxygen_gym.envs.experts import pick_place_goal
    from oxygen_gym.envs.libero import _CAMERAS, LiberoEnv

    env = LiberoEnv(suite=args.suite, task_id=args.task)
    env.reset(options={"init_state": args.init_state})
    libero_env = env.libero_env.env  # the robosuite task env under LIBERO's wrapper, as SubtaskLabeller takes it
    _, target = pick_place_goal(libero_env)  # ValueError names the goal for tasks that are not one pick-and-place
    position = libero_env.sim.data.body_xpos[libero_env.obj_body_id[target]].copy()
    height, width = env.camera_size
    if height != width:
        raise SystemExit(f"expected square renders, this env renders {height}x{width}")
    print(f"target {target!r} at {np.round(position, 3).tolist()} (init state {args.init_state}, {height} px renders)")
    for view, image_key in _CAMERAS.items():
        camera = image_key.removesuffix("_image")
        x, y = pixels_per_cm(libero_env.sim, camera, position, height, args.model_size)
        print(f"{view} ({camera}): {x:.2f} px/cm along world x, {y:.2f} px/cm along world y ({args.model_size} px image)")
    env.close()


if __name__ == "__main__":
    main()
