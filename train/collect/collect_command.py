"""`oxygen-gym collect libero`: scripted demonstrations with subtask labels, in LIBERO's HDF5 layout."""
from __future__ import annotations

import argparse
import sys
import json

from oxygen_gym.policies.action_noise import noise_scale_arg



def parse_range(text: str, name: str) -> tuple[int, ...]:
    """'0-29' or '0,3,5-7' -> the ints; a clear error naming the flag otherwise."""
    out: list[int] = []
    try:
        for part in str(text).split(","):
            if "-" in part:
                a, b = part.split("-")
                out.extend(range(int(a), int(b) + 1))
            elif part.strip():
                out.append(int(part))
    except ValueError:
        raise ValueError(f"{name} must look like '0-29' or '0,3,5-7', got {text!r}") from None
    if not out or min(out) < 0:
        raise ValueError(f"{name} must name at least one non-negative index, got {text!r}")
    return tuple(dict.fromkeys(out))


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("benchmark", choices=["libero"], help="the simulator to collect in")
    parser.add_argument("--suite", default="libero_spatial")
    parser.add_argument("--tasks", default="0", help="task ids, e.g. 0 or 0-9")
    parser.add_argument("--init-states", default=None, help="official init state indices, e.g. 0-29 (the default "
                        "unless --fresh-scenes)")
    parser.add_argument("--fresh-scenes", default=None,
                        help="fresh scene indices, e.g. 0-199: scenes drawn from LIBERO's placement distribution, "
                             "seeded per scene, so every official init state stays held out")
    parser.add_argument("--variants", type=int, default=2, help="episodes per init state: 1 clean + the rest with injected noise")
    parser.add_argument("--noise-std", type=float, default=0.3, help="injected position-action noise (action units, 1 = 5 cm)")
    parser.add_argument("--protocol", default="openpi", choices=["openpi", "lerobot"])
    parser.add_argument("--camera-size", type=int, default=None, help="render size (default: the protocol's)")
    parser.add_argument("--no-fast-render", action="store_true", help="antialiased rendering (about 2x slower)")
    parser.add_argument("--image-every", type=int, default=1, metavar="N",
                        help="render the cameras and store their images at every N-th step only (0, N, 2N, ...); the "
                             "other steps run physics alone (a render is most of a step's time) and train no row. "
                             "Default 1: every step")
    parser.add_argument("--image-size", type=int, default=None, metavar="PX",
                        help="store images resized with pad to PX square, as the policy resizes them (e.g. 96 for the "
                             "compact config): the model's input exactly, at a seventh of the disk and memory of 256 "
                             "px. Default: as rendered")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--out", required=True, help="folder for the HDF5 files, dataset.json and attempts.jsonl")
    parser.add_argument("--dagger", default=None, metavar="CHECKPOINT",
                        help="DAgger rollouts instead of expert demos: this policy drives (a chunk at a time) and the "
                             "state expert labels every visited state; demos are kept whether or not they succeed")
    parser.add_argument("--dagger-beta", type=float, default=0.3,
                        help="with --dagger: probability that a chunk is executed by the expert (default 0.3)")
    parser.add_argument("--dagger-noise-scale", type=noise_scale_arg, default=None, metavar="S",
                        help="with --dagger: scale of the driving policy's sampling noise (1 = the reference sampler, "
                             "0 = deterministic), or one per action dim, comma separated; default: the checkpoint's "
                             "config.json noise_scale, else 1")
    parser.add_argument("--dagger-ensemble", type=float, default=None, metavar="DECAY",
                        help="with --dagger and --dagger-beta 0: execute the temporal ensemble of the driving policy's "
                             "overlapping chunks, weights exp(-DECAY * i), i = 0 the oldest (ACT uses 0.01, < 0 favours newer; "
                             "policies/temporal_ensemble.py)")
    parser.add_argument("--perturb", type=float, default=0.0, metavar="RATE",
                        help="perturbed demos: the state expert drives and labels; in variants > 0 each chunk starts, "
                             "with this probability, a push of several cm or a flipped gripper command it must "
                             "recover from (train/collect/perturb.py); failed demos are kept")
    parser.add_argument("--max-settle-cm", type=float, default=None, metavar="CM",
                        help="with --fresh-scenes: skip a scene in which an object moved more than this while it "
                             "settled after LIBERO's draw (its objects were drawn interpenetrating; the bowl can end up "
                             "on the stove); recorded in attempts.jsonl with the reason")
    parser.add_argument("--release-xy-cm", type=float, default=None, metavar="CM",
                        help="with --perturb or --dagger: the state expert opens once the bowl is within CM of the "
                             "target horizontally at its lowering height (default: its eef within 1.5 cm of the "
                             "lowering waypoint)")
    parser.add_argument("--lift-speed", type=float, default=None, metavar="FRAC",
                        help="with --perturb or --dagger: the state expert lifts the grasped bowl's first 5 cm at most "
                             "this fraction of its full step, so its rim pinch holds (default: full speed)")
    parser.add_argument("--place-height-cm", type=float, default=None, metavar="CM",
                        help="with --perturb or --dagger: the state expert lowers the held bowl to CM above its "
                             "resting grasp height over the target before opening; 0 sets it down on the plate, which "
                             "LIBERO counts as placed on contact (default: 6, from where the released bowl falls)")
    parser.add_argument("--replan", type=int, default=None, metavar="N",
                        help="with --perturb or --dagger: actions of each chunk executed before the driver is asked "
                             "again (default: the protocol's, openpi 5)")
    parser.add_argument("--format", default="hdf5", choices=("hdf5", "lerobot"), dest="data_format",
                        help="hdf5 (default): LIBERO's HDF5 layout only; lerobot: also a LeRobotDataset (v3.0, images "
                             "in parquet) in OUT/lerobot, rebuilt from the HDF5 files when the run ends (the HDF5 files "
                             "stay the resumable record: sim states for --relabel)")
    parser.add_argument("--report", action="store_true",
                        help="collect nothing: print what the collection in --out did per task (expert success on kept "
                             "scenes, rejected scenes, steps, worker time) from its attempts.jsonl "
                             "(train/collect/attempt_report.py)")
    parser.add_argument("--relabel", action="store_true",
                        help="collect nothing: recompute the subtask and memory labels of the demos in --out from "
                             "their recorded sim states (train/collect/relabel.py)")


def _init_states(args: argparse.Namespace) -> tuple[int, ...]:
    if args.fresh_scenes and args.init_states:
        raise ValueError("give --init-states or --fresh-scenes, not both")
    if args.fresh_scenes:
        return ()
    return parse_range(args.init_states or "0-29", "--init-states")


def run(args: argparse.Namespace) -> int:
    if args.report:
        from .attempt_report import attempt_records, attempt_report, driver, format_report

        try:
            print(format_report(attempt_report(attempt_records(args.out)), driver(args.out)))
        except ValueError as e:
            print(f"oxygen-gym collect: {e}", file=sys.stderr)
            return 2
        return 0
    if args.relabel:
        from .relabel import relabel

        print(json.dumps(relabel(args.out)))
        return _export(args)
    from .collector import CollectConfig, collect  # the simulator: here, so `oxygen-gym collect --help` stays fast

    try:
        cfg = CollectConfig(
            suite=args.suite, tasks=parse_range(args.tasks, "--tasks"),
            init_states=_init_states(args),
            fresh_scenes=parse_range(args.fresh_scenes, "--fresh-scenes") if args.fresh_scenes else (),
            variants=args.variants,
            noise_std=args.noise_std, protocol=args.protocol, camera_size=args.camera_size,
            fast_render=not args.no_fast_render, image_every=args.image_every, image_size=args.image_size,
            workers=args.workers,
            dagger_checkpoint=args.dagger, dagger_beta=args.dagger_beta, dagger_noise_scale=args.dagger_noise_scale,
            dagger_ensemble=args.dagger_ensemble,
            perturb_rate=args.perturb,
            max_settle_m=None if args.max_settle_cm is None else args.max_settle_cm / 100,
            release_xy_m=None if args.release_xy_cm is None else args.release_xy_cm / 100,
            lift_speed=args.lift_speed, replan=args.replan,
            place_height_m=None if args.place_height_cm is None else args.place_height_cm / 100,
        )
        if cfg.variants < 1 or cfg.workers < 1 or cfg.noise_std < 0:
            raise ValueError("--variants and --workers must be >= 1 and --noise-std >= 0")
        counts = collect(cfg, args.out)
    except ValueError as e:
        print(f"oxygen-gym collect: {e}", file=sys.stderr)
        return 2
    print(json.dumps(counts))
    return _export(args)


def _export(args: argparse.Namespace) -> int:
    """With --format lerobot: the collection's demos as a LeRobotDataset in OUT/lerobot (replaced whole, so it
    always holds exactly the HDF5 files' demos and labels)."""
    if getattr(args, "data_format", "hdf5") != "lerobot":
        return 0
    from pathlib import Path

    from ..lerobot_format import LEROBOT_DIR, export_lerobot

    try:
        result = export_lerobot(args.out, Path(args.out) / LEROBOT_DIR)
    except ValueError as e:
        print(f"oxygen-gym collect --format lerobot: {e}", file=sys.stderr)
        return 2
    print(json.dumps({"lerobot": result}))
    return 0
