"""Test helpers for XR0: a tiny transformers Qwen3-VL prefill, and an independent reference of the DiT written the
way the published code does it (explicit [prefix | tril/triu] mask, repeat_kv + cat of the cache, SDPA, the
3-axis M-RoPE from transformers' Qwen3VLTextRotaryEmbedding). Shares no code with oxygen_gym.model.xr0 beyond
reading the expert's parameters."""
from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from oxygen_gym.engine.kv_cache import KVCache


def tiny_backbone(config, seed: int = 0):
    from transformers import Qwen3VLForConditionalGeneration

    torch.manual_seed(seed)
    hf = config.qwen3vl_config()
    hf._attn_implementation = "eager"
    return Qwen3VLForConditionalGeneration(hf).eval()


def prefill(model, config, text_lengths: list[int], seed: int = 1):
    """Rows of [text, image (4 tokens), text of text_lengths[b]], right-padded. Returns (past k list, v list,
    attention_mask [B, T], next_pos [B] = max M-RoPE position + 1, position_ids [3, B, T])."""
    g = torch.Generator().manual_seed(seed)
    bb = config.backbone
    vc = bb["vision_config"]
    grid = torch.tensor([[1, 4, 4]])
    n_img = 16 // vc["spatial_merge_size"] ** 2
    rows, b = [], len(text_lengths)
    for n in text_lengths:
        text = torch.randint(1, 200, (n,), generator=g).tolist()
        rows.append([3, 4, bb["vision_start_token_id"]] + [bb["image_token_id"]] * n_img + [bb["vision_end_token_id"]] + text)
    t = max(map(len, rows))
    ids = torch.tensor([r + [0] * (t - len(r)) for r in rows])
    am = torch.tensor([[1] * len(r) + [0] * (t - len(r)) for r in rows])
    pix = torch.randn(16 * b, 3 * vc["temporal_patch_size"] * vc["patch_size"] ** 2, generator=g)
    grids = grid.repeat(b, 1)
    with torch.no_grad():
        out = model(input_ids=ids, attention_mask=am, pixel_values=pix, image_grid_thw=grids, use_cache=True)
        pos, _ = model.model.get_rope_index(ids, grids, None, am)
    ks = [layer.keys for layer in out.past_key_values.layers]
    vs = [layer.values for layer in out.past_key_values.layers]
    next_pos = pos.amax(dim=(0, 2)) + 1
    return ks, vs, am.bool(), next_pos, pos


def to_cache(ks, vs, valid, capacity: int, fill: float = 50.0) -> KVCache:
    """The engine's layout: row b's valid entries compacted at [0, len), garbage after (must be masked)."""
    layers, (b, kh, _, d) = len(ks), ks[0].shape
    cache = KVCache.empty(layers, b, kh, capacity, d)
    cache.k.normal_(0, fill)
    cache.v.normal_(0, fill)
    for i in range(layers):
        for r in range(b):
            idx = valid[r].nonzero()[:, 0]
            cache.k[i, r, :, : len(idx)] = ks[i][r][:, idx]
            cache.v[i, r, :, : len(idx)] = vs[i][r][:, idx]
    return cache


# ---------------------------------------------------------------- the reference DiT (XR0.py's structure)
def _rms(x, w, eps=1e-6):
    xf = x.float()
    return w * (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)).to(x.dtype)


def _rotate_half(x):
    h = x.shape[-1] // 2
    return torch.cat((-x[..., h:], x[..., :h]), dim=-1)


def reference_mask(valid, state_len: int, horizon: int, window):
    """XR0.py `_build_model`: tril(ss), zeros(sa), ones(as), tril(aa) * triu(aa, -window); joined after the prefix
    attention mask. window None: modeling_mibot.py's plain tril."""
    s, a = state_len + 1, horizon
    ss = torch.tril(torch.ones(s, s))
    sa = torch.zeros(s, a)
    as_ = torch.ones(a, s)
    aa = torch.tril(torch.ones(a, a))
    if window is not None:
        aa = aa * torch.triu(torch.ones(a, a), diagonal=-window)
    dit = torch.cat([torch.cat([ss, sa], 1), torch.cat([as_, aa], 1)], 0)
    b, q = valid.shape[0], s + a
    return torch.cat([valid[:, None, :].expand(b, q, -1).float(), dit[None].expand(b, q, q)], -1)[:, None].bool()


def reference_position_ids(prefix_pos, b, state_len, horizon, gap):
    q = 1 + state_len + horizon
    pos = torch.arange(q).view(1, 1, -1).repeat(3, b, 1) + prefix_pos.max(dim=-1)[0][..., None] + 1
    pos[:, :, -horizon:] += gap
    return pos


def reference_velocity(expert, ks, vs, valid, prefix_pos, x_t, t, state, text_config):
    from transformers import Qwen3VLTextConfig
    from transformers.models.qwen3_vl.modeling_qwen3_vl import Qwen3VLTextRotaryEmbedding

    c = expert.config
    b, horizon, _ = x_t.shape
    rot = Qwen3VLTextRotaryEmbedding(Qwen3VLTextConfig(**text_config))
    pos = reference_position_ids(prefix_pos, b, c.state_len, horizon, c.position_gap)
    cos, sin = rot(x_t, pos)
    mask = reference_mask(valid, c.state_len, horizon, c.window)
    sd = {k: v for k, v in expert.state_dict().items()}

    # t_embedder(t * 1000) -> t_projector -> [B, 6, W]
    half = c.freq_dim // 2
    freqs = torch.exp(-math.log(10000) * torch.arange(half, dtype=torch.float32) / half)
    args = (t * 1000)[:, None].float() * freqs[None]
    temb = torch.cat([torch.cos(args), torch.sin(args)], -1)
    temb = F.linear(F.silu(F.linear(temb, sd["t_embedder.mlp.0.weight"])), sd["t_embedder.mlp.2.weight"])
    temb = F.linear(temb, sd["t_projector.layers.0.weight"], sd["t_projector.layers.0.bias"]).view(b, 6, -1)

    def proj(name, x):
        return F.linear(F.gelu(F.linear(x, sd[f"{name}.layers.0.weight"]), approximate="tanh"), sd[f"{name}.layers.2.weight"])

    st = state[:, None] if state.dim() == 2 else state
    h = torch.cat([sd["sink.weight"][None].repeat(b, 1, 1), proj("state_projector", st), proj("action_projector", x_t)], 1)
    heads, hd = c.dit.heads, c.dit.head_dim
    start = len(ks) - c.dit.depth
    for i in range(c.dit.depth):
        p = f"dit.layers.{i}."
        s1, c1, g1, s2, c2, g2 = (sd[p + "adaln_table"][None] + temb).chunk(6, dim=1)
        res = h
        x = _rms(h, sd[p + "input_layernorm.weight"]) * (1 + c1) + s1
        q_, k_, v_ = F.linear(x, sd[p + "attn.qkv_proj.weight"], sd[p + "attn.qkv_proj.bias"]).view(b, -1, 3, heads, hd).unbind(2)
        q_ = _rms(q_, sd[p + "attn.q_norm.weight"]).transpose(1, 2)
        k_ = _rms(k_, sd[p + "attn.k_norm.weight"]).transpose(1, 2)
        v_ = v_.transpose(1, 2)
        cs, sn = cos[:, None], sin[:, None]
        q_, k_ = q_ * cs + _rotate_half(q_) * sn, k_ * cs + _rotate_half(k_) * sn
        rep = heads // ks[start + i].shape[1]
        kc = torch.cat([ks[start + i].repeat_interleave(rep, 1), k_], -2)
        vc = torch.cat([vs[start + i].repeat_interleave(rep, 1), v_], -2)
        o = F.scaled_dot_product_attention(q_, kc, vc, attn_mask=mask).transpose(1, 2).reshape(b, -1, heads * hd)
        h = _rms(res + g1 * F.linear(o, sd[p + "attn.o_proj.weight"]), sd[p + "middle_layernorm.weight"])
        res = h
        x = _rms(h, sd[p + "post_layernorm.weight"]) * (1 + c2) + s2
        x = F.linear(F.silu(F.linear(x, sd[p + "mlp.gate_proj.weight"])) * F.linear(x, sd[p + "mlp.up_proj.weight"]), sd[p + "mlp.down_proj.weight"])
        h = _rms(res + g2 * x, sd[p + "final_layernorm.weight"])
    return proj("action_output_layer", h[:, -horizon:])


def reference_sample(expert, ks, vs, valid, prefix_pos, noise, state, text_config, num_steps):
    """XR0.py `_flow_generate`: t = step / n, z += v * dt."""
    z = noise.clone()
    for step in range(num_steps):
        t = torch.ones(z.shape[0]) * step / num_steps
        z = z + reference_velocity(expert, ks, vs, valid, prefix_pos, z, t, state, text_config) / num_steps
    return z
