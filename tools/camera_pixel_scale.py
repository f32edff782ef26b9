"""How many model-image pixels one centimetre at the plate spans in each LIBERO camera: the scale that says what a
random shift of N pixels (train --shift) means in the scene, next to LIBERO's 3 cm `On` tolerance.

    python tools/camera_pixel_scale.py --init-state 0 --model-size 96

Projects the plate's position and points 1 cm from it along world x and y through each camera (robosuite's
camera_utils on the 256 px render eval uses), then scales to the model's image size (a square render resized to
`--model-size`, so the factor is model_size / 256)."""
from __future__ import annotations

import argparse

import numpy as np

RENDER_SIZE = 256


def pixels_per_cm(sim, camera: str, point: np.ndarray, model_size: int) -> tuple[float, float]:
    """Model pixels per centimetre along world x and y at `point`, seen from `camera`."""
    from robosuite.utils.camera_utils import get_camera_transform_matrix, project_points_from_world_to_camera

    matrix = get_camera_transform_matrix(sim, camera, RENDER_SIZE, RENDER_SIZE)
    points = np.stack([point, point + [0.01, 0.0, 0.0], point + [0.0, 0.01, 0.0]])
    pixels = project_points_from_world_to_camera(points, matrix, RENDER_SIZE, RENDER_SIZE).astype(float)
    spans = np.linalg.norm(pixels[1:] - pixels[0], axis=1) * model_size / RENDER_SIZE
    return float(spans[0]), float(spans[1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--suite", default="libero_spatial")
    parser.add_argument("--task", type=int, default=0)
    parser.add_argument("--init-state", type=int, default=0)
    parser.add_argument("--model-size", type=int, default=96)
    args = parser.parse_args()
    from oxygen_gym.envs.libero import _CAMERAS, LiberoEnv

    env = LiberoEnv(suite=args.suite, task_id=args.task)
    env.reset(options={"init_state": args.init_state})
    sim = env.libero_env.sim
    plates = [sim.model.body_id2name(i) for i in range(sim.model.nbody) if "plate" in sim.model.body_id2name(i)]
    if not plates:
        raise SystemExit(f"task {args.task} of {args.suite} has no body named like 'plate'")
    plate = sim.data.body_xpos[sim.model.body_name2id(plates[0])].copy()
    print(f"plate body {plates[0]!r} at {np.round(plate, 3).tolist()} (init state {args.init_state})")
    for view, image_key in _CAMERAS.items():
        camera = image_key.removesuffix("_image")
        x, y = pixels_per_cm(sim, camera, plate, args.model_size)
        print(f"{view} ({camera}): {x:.2f} px/cm along world x, {y:.2f} px/cm along world y ({args.model_size} px image)")
    env.close()


if __name__ == "__main__":
    main()
