"""pi0.5's training objective, written beside the inference stages it must mirror (pi05.py).

One differentiable forward over a batch, built from the same pieces as inference:
- the prefix (images + prompt, bidirectional among valid tokens, padding compacted away) goes through the backbone,
  with the language continuation (a task prompt, then the target text and EOS) appended causally in the same pass:
  it attends to the whole valid prefix and to earlier continuation tokens, and the prefix never attends to it,
  exactly as `PI05Model.extend` continues a prefilled cache;
- the action tokens x_t at flow time t go through the action expert with adaRMS conditioned on t, attending to the
  valid prefix (never the continuation) and to each other, exactly as one step of `PI05Model.denoise`.

Flow matching (openpi `pi0.py` `compute_loss`, lerobot `modeling_pi05.py` `forward`): t ~ Beta(1.5, 1) * 0.999 +
0.001, x_t = t * noise + (1 - t) * actions, target velocity u = noise - actions; inference integrates t = 1 -> 0 with
x <- x + dt * v. Both losses train the backbone (no knowledge insulation: the model is trained from scratch).
tests/train/test_training.py proves the velocity equals the denoise step's and the language log-likelihood equals the
decode path's.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from ..layers import AdaRMSNorm, linear, rope_cos_sin
from .modeling import PI05Model, time_embedding


@dataclass
class TrainBatch:
    """Model-space inputs and targets of one batch (B rows)."""

    images: list[torch.Tensor]  # one per image slot: float [B, 3, S, S] in [-1, 1]
    image_masks: list[torch.Tensor]  # one per slot: bool [B]
    tokens: torch.Tensor  # int64 [B, L] prompt (BOS first), right-padded with 0
    token_masks: torch.Tensor  # bool [B, L]
    actions: torch.Tensor  # float [B, H, action_dim], normalised, padded dims zero
    action_loss_mask: torch.Tensor  # bool [B, H, action_dim]: which entries count (real dims, steps inside the episode)
    text: torch.Tensor  # int64 [B, T]: task prompt ids, then target ids and EOS, right-padded with 0
    text_loss_mask: torch.Tensor  # bool [B, T]: True where text[:, j] is a target predicted from position j - 1

    def to(self, device) -> "TrainBatch":
        move = lambda x: x.to(device)  # noqa: E731
        return TrainBatch([move(i) for i in self.images], [move(m) for m in self.image_masks], move(self.tokens),
                          move(self.token_masks), move(self.actions), move(self.action_loss_mask), move(self.text),
                          move(self.text_loss_mask))


def sample_time(batch: int, generator: torch.Generator | None = None, device=None) -> torch.Tensor:
    """Flow time per row: Beta(1.5, 1) scaled into [0.001, 1] (openpi `sample_beta(1.5, 1) * 0.999 + 0.001`).
    Drawn through the inverse CDF (Beta(1.5, 1) has CDF x^1.5) so a seeded generator makes it reproducible."""
    u = torch.rand(batch, generator=generator)
    return (u.pow(2.0 / 3.0) * 0.999 + 0.001).to(device)


def rtc_delays(batch: int, max_delay: int, generator: torch.Generator | None = None) -> torch.Tensor:
    """Training-time RTC's delay per row, in [0, max_delay], smaller delays likelier: weights exp(max_delay - d), as
    real-time-chunking-kinetix `src/model.py` `loss` draws its simulated delay."""
    w = torch.exp(torch.arange(max_delay, -1, -1, dtype=torch.float64))
    return torch.multinomial(w / w.sum(), batch, replacement=True, generator=generator)


def forward(
    model: PI05Model, batch: TrainBatch, noise: torch.Tensor, t: torch.Tensor, frozen: torch.Tensor | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """(velocity [B, H, action_dim] at x_t, next-token logits [B, T - 1, vocab] for text[:, 1:]).

    `frozen [B, H]` (training-time RTC, arXiv 2512.05964): those action tokens are the clean actions at flow time 0
    (an executed prefix), the others are noised at the row's `t`; each token's adaRMS follows its own time."""
    cfg = model.config
    prefix = model.embed_prefix_differentiable(batch.images, batch.image_masks, batch.tokens, batch.token_masks)
    b, p, width = prefix.embs.shape
    lengths = prefix.lengths
    text = batch.text
    n_text = text.shape[1]
    dev = text.device

    # ---- backbone: prefix (bidirectional) + continuation (causal), one pass
    text_embs = (model.embed_tokens(text) * math.sqrt(width)).to(model.dtype)
    x = torch.cat([prefix.embs, text_embs], dim=1)
    total = p + n_text
    pos = torch.cat([torch.arange(p, device=dev)[None].expand(b, p), lengths[:, None] + torch.arange(n_text, device=dev)[None]], 1)
    cos, sin = rope_cos_sin(pos, cfg.vlm.head_dim, cfg.rope_base)
    j = torch.arange(total, device=dev)
    prefix_key = j[None, None, :] < lengths[:, None, None]  # [B, 1, total]
    causal_text = (j[None, :] >= p) & (j[None, :] <= j[:, None])  # [total, total]: text keys, causally
    mask = prefix_key | causal_text[None]
    vlm_kv = []
    for layer in model.vlm.layers:
        k = x.new_zeros(b, cfg.vlm.num_kv_heads, total, cfg.vlm.head_dim)
        v = torch.zeros_like(k)
        x = layer(x, cos, sin, k, v, slice(0, total), total, mask)
        vlm_kv.append((k, v))
    hidden = model.vlm.norm(x)
    logits = model.lm_logits(hidden[:, p : total - 1])

    # ---- action expert: one denoise step at per-row time t
    horizon = noise.shape[1]
    if frozen is None:
        x_t = t[:, None, None] * noise + (1.0 - t[:, None, None]) * batch.actions
        emb = time_embedding(t, cfg.expert.width, cfg.min_period, cfg.max_period)
    else:
        t_tok = torch.where(frozen, torch.zeros((), device=dev), t[:, None].expand(b, horizon))
        x_t = t_tok[..., None] * noise + (1.0 - t_tok[..., None]) * batch.actions
        emb = time_embedding(t_tok.reshape(-1), cfg.expert.width, cfg.min_period, cfg.max_period).view(b, horizon, -1)
    cond = F.silu(linear(F.silu(linear(emb, model.time_mlp_in)), model.time_mlp_out))
    mods = model.expert.modulations(cond)
    apos = lengths[:, None] + torch.arange(horizon, device=dev)[None]
    acos, asin = rope_cos_sin(apos, cfg.expert.head_dim, cfg.rope_base)
    ja = torch.arange(p + horizon, device=dev)[None]
    amask = ((ja < lengths[:, None]) | (ja >= p))[:, None, :].expand(b, horizon, p + horizon)
    h = linear(x_t, model.action_in_proj).to(model.dtype)
    for i, layer in enumerate(model.expert.layers):
        k_prefix, v_prefix = vlm_kv[i]
        pad = k_prefix.new_zeros(b, cfg.expert.num_kv_heads, horizon, cfg.expert.head_dim)
        k = torch.cat([k_prefix[:, :, :p], pad], 2)
        v = torch.cat([v_prefix[:, :, :p], torch.zeros_like(pad)], 2)
        h = layer(h, acos, asin, k, v, slice(p, p + horizon), p + horizon, amask, mods[i])
    scale, shift, _ = mods[-1]
    velocity = linear(AdaRMSNorm.modulate(h, scale, shift).float(), model.action_out_proj)
    return velocity, logits


def losses(
    model: PI05Model, batch: TrainBatch, generator: torch.Generator | None = None, language_weight: float = 1.0,
    rtc_max_delay: int = 0, action_dim_weights: torch.Tensor | None = None,
) -> dict[str, torch.Tensor]:
    """`action` (flow-matching MSE over the real entries), `language` (mean token cross-entropy over the targets),
    and `loss` = action + language_weight * language. `rtc_max_delay` > 0: training-time RTC, each row's first d
    actions (d from `rtc_delays`) given clean at flow time 0 and left out of the action loss. `action_dim_weights`
    (one per action dim): a weighted mean over the real entries instead, e.g. to weigh the gripper's sign up."""
    b, horizon = batch.actions.shape[:2]
    noise = torch.randn(batch.actions.shape, generator=generator).to(batch.actions.device)
    t = sample_time(b, generator, batch.actions.device)
    frozen = None
    mask = batch.action_loss_mask
    if rtc_max_delay > 0:
        d = rtc_delays(b, min(rtc_max_delay, horizon - 1), generator).to(batch.actions.device)
        frozen = torch.arange(horizon, device=d.device)[None] < d[:, None]
        mask = mask & ~frozen[..., None]
    velocity, logits = forward(model, batch, noise, t, frozen)
    target = noise - batch.actions
    m = mask.float()
    if action_dim_weights is not None:
        m = m * action_dim_weights.to(m.device, m.dtype)
    action = ((velocity - target).pow(2) * m).sum() / m.sum().clamp(min=1)
    tm = batch.text_loss_mask[:, 1:]
    if bool(tm.any()):
        ce = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), batch.text[:, 1:].reshape(-1), reduction="none")
        language = (ce * tm.reshape(-1).float()).sum() / tm.sum()
    else:
        language = logits.sum() * 0.0
    return {"loss": action + language_weight * language, "action": action.detach(), "language": language.detach()}
