"""The `oxygen-gym inspect` text of an XR0 checkpoint (report.py's layout for pi0.5): family, dims, weights as the
headers list them, the robot_type and its statistics, cameras -> views, chunk and actions returned, the example
prompt exactly as tokenised, the tokenizer found, and every guess. No weight is read."""
from __future__ import annotations

from collections import Counter
from types import SimpleNamespace

import numpy as np

from oxygen_gym.model.xr0 import xr0_prompt
from oxygen_gym.policies.checkpoints.report import closing_lines

from .xr0_resolve import XR0Conventions


def xr0_report(conv: XR0Conventions, prompt: str) -> str:
    c, robot, d = conv.config, conv.robot, conv.config.dit
    t = c.text_config
    v = c.backbone["vision_config"]
    params = sum(int(np.prod(h.shape)) for h in conv.headers.values())
    dtypes = Counter(h.dtype for h in conv.headers.values())
    shards = sorted({h.shard for h in conv.headers.values()})
    mask = conv.dim_mask
    stats = (f"robot_type {conv.robot_type!r} of {conv.robot_types}" if conv.robot_type is not None
             else "none (identity)")
    text, ids, prefix = _example_prompt(conv, prompt)
    lines = [
        f"checkpoint: {conv.root}",
        f"family:     {conv.family}",
        f"weights:    {len(conv.headers)} tensors in {len(shards)} shard(s), {params:,} parameters, dtypes "
        + ", ".join(f"{k} x {n}" for k, n in sorted(dtypes.items())),
        f"backbone:   Qwen3-VL, width {t['hidden_size']} x {t['num_hidden_layers']} layers ({t['num_attention_heads']} "
        f"heads / {t['num_key_value_heads']} KV, head_dim {c.backbone_head_dim}); vision width {v['hidden_size']} x "
        f"{v['depth']} layers, patch {v['patch_size']}; vocab {t['vocab_size']}",
        f"expert:     DiT width {d.width} x {d.depth} layers reading the last {c.read_layers} backbone layers' KV; "
        f"{c.num_steps} steps; window {c.window}, position gap {c.position_gap}",
        f"robot:      {robot.name} (state {robot.state_dim}, action {robot.action_dim}); model state {c.state_dim}, "
        f"action {c.action_dim}",
        "cameras (robot camera -> XR0 view, in prompt order):",
        *[f"  {cam:<12} -> {view}" for cam, view in conv.camera_slots.items()],
        f"images:     padded to {c.image_size} px squares (PIL), at most {c.max_images}",
        f"normalisation (statistics: {conv.stats_source}; {stats}):",
        f"  state:   " + (f"raw, zero-padded to {c.state_dim} (the published recipe: normalize_state=False)"
                          if conv.state_norm.mode == "IDENTITY" else conv.state_norm.describe()),
        f"  actions: {conv.action_norm.describe()}",
        f"  active action dims (model.dim_mask): "
        + ("all" if mask is None else f"{[i for i, m in enumerate(mask) if m]}"),
        f"chunk:      {c.horizon} actions denoised; act() returns {conv.n_actions}",
        f"example prompt (action mode): {text!r}",
        f"  {len(ids)} text tokens: {ids}",
        f"  {prefix} prefix tokens with each image pad expanded to its {c.tokens_per_image} patch tokens "
        f"(the slots hold {c.max_prefix_length()})",
        *closing_lines(conv),
    ]
    return "\n".join(lines)


def _example_prompt(conv: XR0Conventions, prompt: str) -> tuple[str, list[int], int]:
    """(text, its token ids, prefix length) as the policy's IO renders them: the tokenizer's own chat template
    through Qwen's processor (policies/families/xr0/xr0_io.py), with one blank image per view."""
    from oxygen_gym.policies.qwen_vl_processor import make_processor

    views = list(conv.camera_slots.values())
    processor = make_processor(SimpleNamespace(config=conv.config), conv.tokenizer)
    text = processor.apply_chat_template(xr0_prompt.action_messages(prompt, views), tokenize=False,
                                         add_generation_prompt=False)
    side = conv.config.image_size
    frames = [np.zeros((side, side, 3), np.uint8) for _ in views]
    out = processor(images=frames or None, text=[text], return_tensors="pt")
    return text, conv.tokenizer.encode(text), int(out["input_ids"].shape[1])
