"""Open-loop action error: how far the model's sampled chunk is from the expert's on recorded frames.

This is the underfitting check of issue 22. A model that is far from the expert on its own training frames underfits
(train longer, a larger model); one that is close on training frames and on frames of unseen scenes, yet fails in
closed loop, compounds small errors (recovery data, a shorter execution horizon). The trainer logs these numbers
for a fixed set of training rows and for the validation scenes at every checkpoint (val.jsonl), and
`oxygen-gym train open-loop` computes them for any checkpoint on any collection.

Errors are in the model's normalised action space (quantile-normalised to [-1, 1]), over the real action dims:
`mse_exec` over the first `execute` steps (what the openpi protocol executes of a chunk), `mse_chunk` over the whole
chunk, `flow` the flow-matching loss at a fixed noise and time (the training objective, comparable with log.jsonl),
`gripper_agree` the share of executed steps whose gripper command has the expert's sign, and `gripper_false_open`
the share of executed steps the expert keeps closed on which the model opens (how DAgger-trained policies drop the
bowl: train/chunk_cut.py).
"""
from __future__ import annotations

from collections import defaultdict

import torch

from oxygen_gym.policies.action_noise import check_noise_scale, noise_multiplier
from oxygen_gym.model.pi05.training import losses

from .dataset import DemoDataset

GRIPPER_DIM = 6  # LIBERO's 7-d action: 3 position, 3 rotation, gripper (-1 open, +1 close)


def fixed_rows(n_rows: int, count: int) -> torch.Tensor:
    """`count` rows spread evenly over a dataset of `n_rows` (all of them when it is smaller): the same rows at every
    checkpoint, so numbers logged over a run compare."""
    if count <= 0 or count >= n_rows:
        return torch.arange(n_rows)
    return torch.linspace(0, n_rows - 1, count).round().long().unique()


@torch.no_grad()
def open_loop_metrics(model, dataset: DemoDataset, rows: torch.Tensor, *, execute: int = 5, seed: int = 0,
                      batch_size: int = 64, num_steps: int | None = None,
                      noise_scale: float | tuple[float, ...] = 1.0) -> dict:
    """Mean open-loop errors over `rows` (see the module docstring), overall and per language label. `noise_scale`
    multiplies the sampling noise, as `MultiTaskPolicy(noise_scale=)` does (the flow-matching loss keeps unit noise)."""
    if execute < 1 or execute > model.config.action_horizon:
        raise ValueError(f"execute must be in [1, {model.config.action_horizon}], got {execute}")
    scale = noise_multiplier(check_noise_scale(noise_scale), model.config.action_dim)
    gen = torch.Generator().manual_seed(seed)
    sums: dict[str, float] = defaultdict(float)
    counts: dict[str, float] = defaultdict(float)
    per_label: dict[str, list[float]] = defaultdict(lambda: [0.0, 0.0])
    dims = dataset.action_dims
    for start in range(0, len(rows), batch_size):
        index = rows[start : start + batch_size]
        batch = dataset.batch(index).to(model.device)
        flow = losses(model, batch, gen, language_weight=0.0)["action"]
        sums["flow"] += float(flow) * len(index)
        counts["flow"] += len(index)
        noise = (torch.randn(batch.actions.shape, generator=gen) * scale).to(model.device)
        sampled = model.sample_actions(batch.images, batch.image_masks, batch.tokens, batch.token_masks, noise,
                                       num_steps).float()
        valid = batch.action_loss_mask[..., :dims].float()
        err = (sampled[..., :dims] - batch.actions[..., :dims]).pow(2) * valid
        exec_err, exec_valid = err[:, :execute].sum((1, 2)), valid[:, :execute].sum((1, 2))
        sums["mse_exec"] += float(exec_err.sum())
        counts["mse_exec"] += float(exec_valid.sum())
        sums["mse_chunk"] += float(err.sum())
        counts["mse_chunk"] += float(valid.sum())
        g_valid = valid[:, :execute, GRIPPER_DIM]
        agree = (torch.sign(sampled[:, :execute, GRIPPER_DIM]) == torch.sign(batch.actions[:, :execute, GRIPPER_DIM]))
        sums["gripper_agree"] += float((agree.float() * g_valid).sum())
        counts["gripper_agree"] += float(g_valid.sum())
        closed = (batch.actions[:, :execute, GRIPPER_DIM] > 0).float() * g_valid
        sums["gripper_false_open"] += float(((sampled[:, :execute, GRIPPER_DIM] < 0).float() * closed).sum())
        counts["gripper_false_open"] += float(closed.sum())
        for r, row in enumerate(index.tolist()):
            acc = per_label[dataset.targets[row]]
            acc[0] += float(exec_err[r])
            acc[1] += float(exec_valid[r])
    out = {k: round(sums[k] / max(counts[k], 1.0), 6)
           for k in ("flow", "mse_exec", "mse_chunk", "gripper_agree", "gripper_false_open")}
    out["rows"] = int(len(rows))
    out["mse_exec_by_label"] = {label: round(s / max(c, 1.0), 6) for label, (s, c) in sorted(per_label.items())}
    return out
