"""The `oxygen-gym inspect` text of a StarVLA run folder (xr0_report.py's layout): the framework and weight file, the
backbone and where its config came from, each head with what it reads of the backbone, its horizon and steps, the
statistics and their formula, cameras, chunk, the example prompt as tokenised, and every guess. No weight is read."""
from __future__ import annotations

from types import SimpleNamespace

import numpy as np

from oxygen_gym.model.starvla import starvla_prompt
from oxygen_gym.policies.checkpoints.report import closing_lines

from .starvla_resolve import StarVLAConventions


def head_lines(conv: StarVLAConventions) -> list[str]:
    """One line per kept head: what it reads, horizon, steps (dims from the resolved config)."""
    c = conv.config
    layers = c.backbone_layers
    reads = {
        "pi": (f"QwenPI_v3 layer-wise DiT {c.pi.width} wide: block i cross-attends to backbone layer i's output "
               f"(all {layers}) through its own LayerNorm + Linear; horizon {c.pi.horizon}, {c.pi.num_steps} Euler steps"),
        "groot": (f"GR00T N1.5 DiT {c.groot.width} wide x {c.groot.depth} (cross / self alternating) over the last "
                  f"layer's output before the final norm, {c.groot.vl_layers} vl self-attention layer(s), state "
                  f"zero-padded to {c.groot.max_state_dim}, embodiment {c.groot.embodiment_id}; horizon "
                  f"{c.groot.horizon}, {c.groot.num_steps} Euler steps"),
        "oft": (f"QwenOFT: {c.oft.horizon} query tokens (id {c.oft.query_token}) through the backbone after the "
                f"prompt, MLP-ResNet on their last-layer states; horizon {c.oft.horizon}, 1 pass (no flow steps)"),
    }
    return [f"  {h:<6} {reads[h]}" for h in c.heads]


def starvla_report(conv: StarVLAConventions, prompt: str) -> str:
    c, robot, run = conv.config, conv.robot, conv.run
    t, v = c.text_config, c.backbone["vision_config"]
    params = sum(int(np.prod(s)) for s in conv.shapes.values())
    text, ids, prefix = _example_prompt(conv, prompt)
    stats = (f"unnorm_key {conv.unnorm_key!r} of {conv.unnorm_keys}" if conv.unnorm_key is not None
             else "none (identity)")
    dropped = [h for h in run.heads if h not in c.heads]
    lines = [
        f"checkpoint: {conv.root}",
        f"family:     {conv.family} (framework {run.framework}; weights {run.weights.name})",
        f"weights:    {len(conv.shapes)} tensors, {params:,} parameters",
        f"backbone:   Qwen3-VL {run.base_vlm!r}, width {t['hidden_size']} x {t['num_hidden_layers']} layers "
        f"({t['num_attention_heads']} heads / {t['num_key_value_heads']} KV); vision width {v['hidden_size']} x "
        f"{v['depth']} layers; config from {conv.vlm_source}",
        f"heads:      {list(c.heads)} of the run's {list(run.heads)}" + (f" ({dropped} not loaded)" if dropped else ""),
        *head_lines(conv),
        f"robot:      {robot.name} (state {robot.state_dim}, action {robot.action_dim}); model action {c.action_dim}",
        "cameras (robot camera -> view, in prompt order):",
        *[f"  {cam:<12} -> {view}" for cam, view in conv.camera_slots.items()],
        f"images:     padded to {c.image_size} px squares (PIL), at most {c.max_images}",
        f"normalisation (statistics: {conv.stats_source}; {stats}):",
        "  state:   raw, binned into the prompt over [-1, 1] (256 bins)",
        f"  actions: {conv.action_norm.describe()}",
        f"chunk:      {c.heads[0]} predicts its horizon; act() returns {conv.n_actions}",
        f"example prompt: {text!r}",
        f"  {len(ids)} text tokens; {prefix} prefix tokens with each image's {c.tokens_per_image} patch tokens "
        f"(the slots hold {c.max_prefix_length()})",
        *closing_lines(conv),
    ]
    return "\n".join(lines)


def _example_prompt(conv: StarVLAConventions, prompt: str) -> tuple[str, list[int], int]:
    """As the policy's IO renders it (policies/families/starvla/starvla_io.py), with blank images and a zero state."""
    from oxygen_gym.policies.qwen_vl_processor import make_processor

    c = conv.config
    processor = make_processor(SimpleNamespace(config=c), conv.tokenizer)
    instruction = starvla_prompt.instruction_with_state(prompt, np.zeros(conv.robot.state_dim, np.float32), c.state_bins)
    n = len(conv.camera_slots)
    text = processor.apply_chat_template(starvla_prompt.messages(instruction, None, n), tokenize=False,
                                         add_generation_prompt=True)
    frames = [np.zeros((c.image_size, c.image_size, 3), np.uint8) for _ in range(n)]
    out = processor(images=frames or None, text=[text], return_tensors="pt")
    return text, conv.tokenizer.encode(text), int(out["input_ids"].shape[1])
