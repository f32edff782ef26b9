"""A plain, uncached pi0.5 forward: the oracle for the cached, compacted, staged model.

One joint pass per layer over the whole padded sequence [prefix (cameras + prompt), text continuation, action
tokens]: each expert projects its own Q/K/V (backbone weights for prefix and text, expert weights with adaRMS for
actions), one 2D mask says who sees whom, and padding stays in place (never compacted). Everything runs in float64
from the model's weights, with nothing shared with the production code but the SigLIP tower (checked separately
against lerobot).
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import torch

EPS = 1e-6


@dataclass
class ReferenceOutput:
    prefix_hidden: torch.Tensor  # [B, Lp, W] final-normed, padded layout
    text_logits: torch.Tensor  # [B, T, vocab] at each continuation position (predicting the next token)
    velocity: torch.Tensor  # [B, H, action_dim]


def _rms(x: torch.Tensor) -> torch.Tensor:
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + EPS)


def _lin(x: torch.Tensor, layer) -> torch.Tensor:
    y = x @ layer.weight.double().T
    return y if layer.bias is None else y + layer.bias.double()


def _rope(x: torch.Tensor, pos: torch.Tensor, base: float) -> torch.Tensor:
    """x [B, heads, T, D], pos [B, T]: rotate the two halves of each head.

    The cos/sin tables are float32, as HF Gemma and lerobot build them (angle = position x inverse frequency in
    float32): at positions of several hundred the angle is ~3e-5 rad from exact, which belongs to the model's
    numerics, not to rounding."""
    d = x.shape[-1]
    inv = 1.0 / base ** (torch.arange(0, d, 2, dtype=torch.float32) / d)
    ang = pos.float()[:, None, :, None] * inv
    cos, sin = ang.cos().double(), ang.sin().double()
    x1, x2 = x[..., : d // 2], x[..., d // 2 :]
    return torch.cat([x1 * cos - x2 * sin, x2 * cos + x1 * sin], dim=-1)


def _mlp(x: torch.Tensor, mlp) -> torch.Tensor:
    gate = _lin(x, mlp.gate_proj)
    gelu = 0.5 * gate * (1 + torch.tanh(math.sqrt(2 / math.pi) * (gate + 0.044715 * gate**3)))
    return _lin(gelu * _lin(x, mlp.up_proj), mlp.down_proj)


def _time_condition(model, t: float, batch: int) -> torch.Tensor:
    c = model.config
    width = c.expert.width
    frac = torch.linspace(0.0, 1.0, width // 2, dtype=torch.float64)
    period = c.min_period * (c.max_period / c.min_period) ** frac
    ang = 2 * math.pi / period * t
    emb = torch.cat([ang.sin(), ang.cos()])[None].expand(batch, width)
    emb = emb.float().double()  # the model feeds the sin/cos embedding in fp32
    silu = torch.nn.functional.silu
    return silu(_lin(silu(_lin(emb, model.time_mlp_in)), model.time_mlp_out))


def joint_mask(prefix_valid: torch.Tensor, text_len: int, horizon: int) -> torch.Tensor:
    """[B, N, N] bool over [prefix, text, actions]: True = row may attend to column."""
    b, lp = prefix_valid.shape
    n = lp + text_len + horizon
    mask = torch.zeros(b, n, n, dtype=torch.bool)
    keys = prefix_valid[:, None, :]
    mask[:, :, :lp] = keys  # everyone sees the valid prefix (prefix bidirectional among valid tokens)
    t0, a0 = lp, lp + text_len
    mask[:, t0:a0, t0:a0] = torch.tril(torch.ones(text_len, text_len, dtype=torch.bool))  # text: causal
    mask[:, a0:, a0:] = True  # actions: each other
    return mask


@torch.no_grad()
def reference_forward(
    model,
    images: list[torch.Tensor],
    image_masks: list[torch.Tensor],
    tokens: torch.Tensor,
    token_masks: torch.Tensor,
    text: torch.Tensor,
    x_t: torch.Tensor,
    t: float,
) -> ReferenceOutput:
    c = model.config
    b = tokens.shape[0]
    n_img = c.vision.num_patches
    scale = math.sqrt(c.vlm.width)
    emb_w = model.embed_tokens.weight.double()
    img = [model.vision(im).double() for im in images]
    prefix = torch.cat([*img, emb_w[tokens] * scale], dim=1)
    prefix_valid = torch.cat([*(m.bool()[:, None].expand(b, n_img) for m in image_masks), token_masks.bool()], dim=1)
    lp, tl, h = prefix.shape[1], text.shape[1], x_t.shape[1]
    n_valid = prefix_valid.sum(1)

    pos_vlm = torch.cat([prefix_valid.long().cumsum(1) - 1, n_valid[:, None] + torch.arange(tl)], dim=1)
    pos_act = n_valid[:, None] + torch.arange(h)
    mask = joint_mask(prefix_valid, tl, h)
    cond = _time_condition(model, t, b)

    xv = torch.cat([prefix, emb_w[text] * scale], dim=1)  # backbone stream: prefix + text
    xa = _lin(x_t.double(), model.action_in_proj)  # expert stream: actions
    hd = c.vlm.head_dim
    for lv, la in zip(model.vlm.layers, model.expert.layers):
        s1, b1, g1 = _lin(cond, la.input_layernorm.dense)[:, None].chunk(3, -1)
        s2, b2, g2 = _lin(cond, la.post_attention_layernorm.dense)[:, None].chunk(3, -1)
        hv = _rms(xv) * (1 + lv.input_layernorm.weight.double())
        ha = _rms(xa) * (1 + s1) + b1
        qs, ks, vs = [], [], []
        for hid, layer, pos in ((hv, lv, pos_vlm), (ha, la, pos_act)):
            att = layer.self_attn
            split = lambda y: y.view(b, y.shape[1], -1, hd).transpose(1, 2)  # noqa: E731
            qs.append(_rope(split(_lin(hid, att.q_proj)), pos, c.rope_base))
            ks.append(_rope(split(_lin(hid, att.k_proj)), pos, c.rope_base))
            vs.append(split(_lin(hid, att.v_proj)))
        q, k, v = torch.cat(qs, 2), torch.cat(ks, 2), torch.cat(vs, 2)
        heads, kv_heads, n = q.shape[1], k.shape[1], q.shape[2]
        q = q.view(b, kv_heads, heads // kv_heads, n, hd) / math.sqrt(hd)  # query heads grouped by their KV head
        logits = q @ k[:, :, None].transpose(-1, -2)
        logits = logits.masked_fill(~mask[:, None, None], float("-inf"))
        out = (logits.softmax(-1) @ v[:, :, None]).view(b, heads, n, hd).transpose(1, 2).reshape(b, n, -1)
        nv = lp + tl
        xv = xv + _lin(out[:, :nv], lv.self_attn.o_proj)
        xa = xa + _lin(out[:, nv:], la.self_attn.o_proj) * g1
        xv = xv + _mlp(_rms(xv) * (1 + lv.post_attention_layernorm.weight.double()), lv.mlp)
        xa = xa + _mlp(_rms(xa) * (1 + s2) + b2, la.mlp) * g2
    hidden = _rms(xv) * (1 + model.vlm.norm.weight.double())
    sf, bf, _ = _lin(cond, model.expert.norm.dense)[:, None].chunk(3, -1)
    velocity = _lin(_rms(xa) * (1 + sf) + bf, model.action_out_proj)
    return ReferenceOutput(hidden[:, :lp], hidden[:, lp:] @ emb_w.T, velocity)


def reference_actions(model, images, image_masks, tokens, token_masks, noise: torch.Tensor, num_steps: int = 10):
    """Euler from t=1 to 0, every step a full uncached forward (the prefix recomputed each time)."""
    x = noise.double()
    empty = torch.zeros(tokens.shape[0], 0, dtype=torch.long)
    for step in range(num_steps):
        t = float(torch.tensor(1.0 - step / num_steps, dtype=torch.float32))  # the model's flow time is fp32
        v = reference_forward(model, images, image_masks, tokens, token_masks, empty, x, t).velocity
        x = x - v / num_steps
    return x
