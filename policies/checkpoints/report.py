"""pi0.5's `oxygen-gym inspect` text (policies/inspect_command.py): what the policy will feed a checkpoint.

Prints the family, dims, parameter count and dtypes, camera -> slot mapping, normalisation per feature, chunk and
execute lengths, an example prompt exactly as tokenised, the tokenizer found, and every guess. Reads file headers
and JSON only: no weights are loaded.
"""
from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np


if TYPE_CHECKING:
    from .resolve import Conventions

RESIZE_NAMES = {"pil": "PIL bilinear on uint8 (openpi's client)", "torch": "torch bilinear, no antialias (lerobot)"}
RETURNS = {"openpi": "the whole chunk (openpi; its LIBERO client executes replan_steps=5)",
           "openpi-training": "the whole chunk (openpi)", "ours": "n_action_steps (ours)"}


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
        *closing_lines(conv),
    ]
    return "\n".join(lines)


def closing_lines(conv) -> list[str]:
    """Every family's inspect report ends alike: where the tokenizer came from, then every guess, last (where users
    look, and where inspect_command puts adapter lines before)."""
    return [f"tokenizer:  {conv.tokenizer_source}", "warnings:" if conv.warnings else "warnings:   none",
            *[f"  - {w}" for w in conv.warnings]]


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
