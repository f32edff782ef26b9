"""`oxygen-gym inspect CHECKPOINT [--robot libero]`: what the policy will feed a checkpoint, before a long eval.

Prints the family, dims, parameter count and dtypes, camera -> slot mapping, normalisation per feature, chunk and
execute lengths, an example prompt exactly as tokenised, the tokenizer found, and every guess. Reads file headers
and JSON only: no weights are loaded.
"""
from __future__ import annotations

import argparse
import sys
from collections import Counter
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from .names import checkpoint_arg
from .overrides import ConventionOverrides

if TYPE_CHECKING:
    from .resolve import Conventions

RESIZE_NAMES = {"pil": "PIL bilinear on uint8 (openpi's client)", "torch": "torch bilinear, no antialias (lerobot)"}
RETURNS = {"openpi": "the whole chunk (openpi; its LIBERO client executes replan_steps=5)",
           "openpi-training": "the whole chunk (openpi)", "ours": "n_action_steps (ours)"}


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


def _header(weights: Path) -> tuple[int, int, Counter]:
    from safetensors import safe_open

    params, dtypes = 0, Counter()
    with safe_open(str(weights), framework="pt", device="cpu") as f:
        keys = list(f.keys())
        for k in keys:
            s = f.get_slice(k)
            params += int(np.prod(s.get_shape()))
            dtypes[s.get_dtype()] += 1
    return len(keys), params, dtypes


def report(conv: Conventions, prompt: str) -> str:
    """The inspect text for resolved conventions."""
    from oxygen_gym.model.pi05.prompt import prompt_text, tokenize_prompt

    c, robot = conv.config, conv.robot
    n_keys, params, dtypes = _header(conv.root / "model.safetensors")
    g = lambda d: f"width {d.width} x {d.depth} layers (mlp {d.mlp_dim}, {d.num_heads} heads / {d.num_kv_heads} KV, head_dim {d.head_dim})"  # noqa: E731
    lines = [
        f"checkpoint: {conv.root}",
        f"family:     {conv.family}",
        f"weights:    {n_keys} tensors, {params:,} parameters, dtypes " + ", ".join(f"{d} x {n}" for d, n in sorted(dtypes.items())),
        f"backbone:   {g(c.vlm)}",
        f"expert:     {g(c.expert)}",
        f"vision:     width {c.vision.width} x {c.vision.depth} layers, patch {c.vision.patch_size} at {c.vision.image_size} px; "
        f"vocab {c.vocab_size}; action dim {c.action_dim}",
        f"robot:      {robot.name} (state {robot.state_dim}, action {robot.action_dim})",
        "cameras (robot camera -> checkpoint image slot):",
        *[f"  {cam:<12} -> {slot}" for cam, slot in conv.camera_slots.items()],
        f"  masked slots: {', '.join(conv.masked_slots) or 'none'}",
        f"image resize: {RESIZE_NAMES[conv.image_resize]}",
        f"normalisation (statistics: {conv.stats_source}):",
        f"  state:   {conv.state_norm.describe() if c.discrete_state else 'not used (no state in the prompt)'}",
        f"  actions: {conv.action_norm.describe()}",
        f"chunk:      {c.action_horizon} actions denoised; act() returns {conv.n_actions} "
        f"({RETURNS.get(conv.family, 'n_action_steps (lerobot select_action queue)')})",
        f"executes:   {_replan_text(conv.root)}",
        f"samples:    {_noise_text(conv.root)}",
        f"language:   {_tasks_text(conv.root)}",
    ]
    pad = "zero-padded to %d before binning" % c.state_pad_to if c.state_pad_to else "unpadded"
    lines.append(f"prompt:     {'state bins in the prompt (' + pad + ')' if c.discrete_state else 'no state (pi0 form)'}"
                 f"; max {c.max_token_len} tokens")
    state = np.zeros(robot.state_dim, np.float32)
    norm = conv.state_norm.normalize(robot.state_to_model(state)) if c.discrete_state else None
    text = prompt_text(prompt, norm, c.state_pad_to) if c.discrete_state else prompt_text(prompt) + "\n"
    tokens, mask = tokenize_prompt(conv.tokenizer, prompt, norm, c.max_token_len, c.discrete_state, c.state_pad_to)
    ids = tokens[mask].tolist()
    lines += [
        f"example prompt (robot state all zeros): {text!r}",
        f"  {len(ids)} tokens: {ids}",
        f"tokenizer:  {conv.tokenizer_source}",
        "warnings:" if conv.warnings else "warnings:   none",
        *[f"  - {w}" for w in conv.warnings],
    ]
    return "\n".join(lines)


def inspect_text(checkpoint, robot, overrides: ConventionOverrides, prompt: str) -> str:
    """The inspect text of any family's checkpoint: its family is told from the folder (or `overrides.family`) by
    the registry (policies/model_io.py), whose `inspect` hook prints it."""
    from ..model_io import checkpoint_family
    from ..robots import RobotSpec, get_robot
    from .resolve import checkpoint_root

    robot = robot if isinstance(robot, RobotSpec) else get_robot(robot)
    root = checkpoint_root(checkpoint, overrides.revision)
    return checkpoint_family(root, overrides.family).inspect(root, robot, overrides, prompt)


def run(args: argparse.Namespace) -> int:
    from ..model_io import builtin_names

    from .adapter_report import adapter_lines, parse_adapter_args
    from .resolve import checkpoint_root

    merge = [Path(p) for p in getattr(args, "merge_adapter", None) or ()]
    if args.checkpoint in builtin_names():
        from ..builtin_report import builtin_report

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


def _noise_text(root) -> str:
    """The action head's starting noise: the checkpoint's declared noise_scale, or the reference sampler's."""
    from .noise_scale import KEY, declared_noise_scale

    declared = declared_noise_scale(root)
    if declared is None:
        return "from unit noise (the reference sampler); --noise-scale S overrides"
    shown = list(declared) if isinstance(declared, tuple) else declared
    return (f"from noise times {shown} (config.json {KEY}; per action dim where a list, 1 past it; eval's default, "
            "--noise-scale S overrides)")


def _tasks_text(root) -> str:
    """The language tasks the checkpoint declares it was trained to answer (config.json language_tasks), if any."""
    from .language_tasks import KEY, declared_language_tasks

    tasks = declared_language_tasks(root)
    if not tasks:
        return "no declared tasks (--task NAME=PROMPT sets one)"
    shown = "; ".join(f"{t.name} {t.prompt!r} ({t.max_new_tokens} tokens"
                      f"{', adapter ' + t.adapter if t.adapter else ''})" for t in tasks)
    return f"{shown} (config.json {KEY}; serve's default for --task NAME)"


def _replan_text(root) -> str:
    """What an evaluation executes of each chunk: the checkpoint's declared replan_steps, or the protocol's."""
    from .replan_steps import KEY, declared_replan_steps

    declared = declared_replan_steps(root)
    if declared is None:
        return "the eval protocol's interval (openpi 5; lerobot all returned); --replan N overrides"
    return f"{declared} actions per policy call (config.json {KEY}; eval's default, --replan N overrides)"
