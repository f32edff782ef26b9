"""`oxygen-gym train open-loop --checkpoint C --data D`: the open-loop action error of a trained checkpoint on a
collection's frames (open_loop.py): is a failing policy underfit, or does its closed loop compound small errors?"""
from __future__ import annotations

import argparse
import sys
import json
from pathlib import Path

from oxygen_gym.policies.action_noise import noise_scale_arg
from oxygen_gym.policies.checkpoints.names import checkpoint_arg


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--checkpoint", required=True, type=checkpoint_arg, help="a trained model folder, or a shipped name (libero-spatial)")
    parser.add_argument("--data", required=True, help="a collection folder (oxygen-gym collect) or one LIBERO HDF5 file")
    parser.add_argument("--scenes", default=None, metavar="RANGE",
                        help="only the demos of these scenes / init states (e.g. 60-69; default all)")
    parser.add_argument("--rows", type=int, default=512, help="frames scored, spread evenly over the data (0 = all)")
    parser.add_argument("--execute", type=int, default=5, help="steps of a chunk that count as executed (default 5)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--noise-scale", type=noise_scale_arg, default=None, metavar="S",
                        help="scale of the sampling noise (policies/action_noise.py; 1 = the reference sampler, 0 = "
                             "deterministic), or one per action dim, comma separated; default: the checkpoint's "
                             "config.json noise_scale, else 1")
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--json", default=None, help="also write the numbers to this JSON file")


def run(args: argparse.Namespace) -> int:
    import torch

    from oxygen_gym.model.norm_stats import load_norm_stats
    from oxygen_gym.model.pi05.loading import load_pretrained
    from oxygen_gym.model.tokenizer import tokenizer_for
    from oxygen_gym.model.trained import trained_model_dir
    from oxygen_gym.policies.checkpoints.noise_scale import resolved_noise_scale

    from .collect.collect_command import parse_range
    from .dataset import DemoDataset, load_demos
    from .open_loop import fixed_rows, open_loop_metrics
    from .trainer import NARRATE_PROMPT
    from .validation_split import select_scenes

    if args.threads:
        torch.set_num_threads(args.threads)
    try:
        folder = trained_model_dir(args.checkpoint) or Path(args.checkpoint)
        if not folder.is_dir():
            raise ValueError(f"--checkpoint {args.checkpoint}: not a folder nor a shipped model name")
        stats = load_norm_stats(folder)
        if stats is None:
            raise ValueError(f"--checkpoint {folder}: holds no normalisation statistics")
        demos = load_demos(args.data)
        if args.scenes:
            demos = select_scenes(demos, parse_range(args.scenes, "--scenes"), "--scenes")
        noise_scale = resolved_noise_scale(folder, args.noise_scale)
        model = load_pretrained(folder, device="cpu", dtype=torch.float32)
        tokenizer = tokenizer_for(model.config.vocab_size, str(folder))
        dataset = DemoDataset(demos, model.config, tokenizer, NARRATE_PROMPT, stats)
        result = open_loop_metrics(model, dataset, fixed_rows(len(dataset), args.rows), execute=args.execute,
                                   seed=args.seed, noise_scale=noise_scale)
    except ValueError as e:
        print(f"oxygen-gym train open-loop: {e}", file=sys.stderr)
        return 2
    result = {"checkpoint": str(args.checkpoint), "data": str(args.data), "scenes": args.scenes, "demos": len(demos),
              "execute": args.execute,
              "noise_scale": list(noise_scale) if isinstance(noise_scale, tuple) else noise_scale, **result}
    print(json.dumps(result, indent=1))
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=1))
    return 0
