"""`oxygen-gym inspect CHECKPOINT [--robot libero]`: what the policy will feed a checkpoint, before a long eval.

The command for every family: a built-in name is reported by policies/builtin_report.py (random weights, built
here), a folder by its family's `inspect` hook (pi0.5's: checkpoints/report.py), found through the registry. It sits
above the families and the registry, so no checkpoint module imports either. Reads file headers and JSON only for a
folder: no weights are loaded.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from .checkpoints.names import checkpoint_arg
from .checkpoints.overrides import ConventionOverrides


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("checkpoint", type=checkpoint_arg,
                        help="a checkpoint folder or hub id, the shipped trained model (libero-spatial), or a built-in "
                             "model with random weights (tiny, small, pi05, xr0-tiny, ...)")
    parser.add_argument("--robot", default="libero", help="libero, droid or aloha (default libero)")
    ConventionOverrides.add_arguments(parser)
    parser.add_argument("--prompt", default="pick up the black bowl and place it on the plate",
                        help="instruction for the example prompt")
    parser.add_argument("--adapter", action="append", metavar="NAME=PATH",
                        help="a per-task LoRA adapter (PEFT folder) to check; repeatable")
    parser.add_argument("--merge-adapter", action="append", metavar="PATH",
                        help="a whole-model LoRA adapter merged into the weights at load; repeatable")


def inspect_text(checkpoint, robot, overrides: ConventionOverrides, prompt: str) -> str:
    """The inspect text of any family's checkpoint: its family is told from the folder (or `overrides.family`) by
    the registry (policies/model_io.py), whose `inspect` hook prints it."""
    from .model_io import checkpoint_family
    from .robots import RobotSpec, get_robot
    from .checkpoints.resolve import checkpoint_root

    robot = robot if isinstance(robot, RobotSpec) else get_robot(robot)
    root = checkpoint_root(checkpoint, overrides.revision)
    return checkpoint_family(root, overrides.family).inspect(root, robot, overrides, prompt)


def run(args: argparse.Namespace) -> int:
    from .model_io import builtin_names

    from .checkpoints.adapter_report import adapter_lines, parse_adapter_args
    from .checkpoints.resolve import checkpoint_root

    merge = [Path(p) for p in getattr(args, "merge_adapter", None) or ()]
    if args.checkpoint in builtin_names():
        from .builtin_report import builtin_report

        try:
            extra = adapter_lines(None, parse_adapter_args(getattr(args, "adapter", None)), merge)
        except (ValueError, FileNotFoundError) as e:
            print(f"oxygen-gym inspect: error: {e}", file=sys.stderr)
            return 2
        print("\n".join([builtin_report(args.checkpoint, args.robot, args.prompt), *extra]))
        return 0
    try:
        overrides = ConventionOverrides.from_args(args)
        text = inspect_text(args.checkpoint, args.robot, overrides, args.prompt)
        root = checkpoint_root(args.checkpoint, overrides.revision)
        text = _before_warnings(text, adapter_lines(root, parse_adapter_args(getattr(args, "adapter", None)), merge))
    except (ValueError, FileNotFoundError, KeyError) as e:
        print(f"oxygen-gym inspect: error: {e}", file=sys.stderr)
        return 2
    print(text)
    return 0


def _before_warnings(text: str, lines: list[str]) -> str:
    """`lines` inserted before the report's closing `warnings:` section (the guesses stay last, where users look)."""
    rows = text.split("\n")
    at = next((i for i in range(len(rows) - 1, -1, -1) if rows[i].startswith("warnings:")), len(rows))
    return "\n".join(rows[:at] + lines + rows[at:])
