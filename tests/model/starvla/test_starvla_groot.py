"""The StarVLA `groot` head against lerobot 0.4.4's GR00T N1.5 action head (`FlowmatchingActionHead`), built from
the same tiny dims with its weights copied across strictly: the backbone features (vlln + self-attention), the
velocity at every Euler step and the sampled chunk. Then the head on the model: it reads the last layer's output of
the one prefill *before* the final norm, as StarVLA's QwenGR00T reads `hidden_states[-1]` under its pinned
transformers 4.57.0 (a head reading the normed state fails here)."""
from __future__ import annotations

import pytest
import torch

from oxygen_gym.model.starvla import build_starvla
from oxygen_gym.model.starvla.flow_dit import time_bucket
from oxygen_gym.model.xr0.xr0_prefix import XR0PrefixInputs

lerobot_groot = pytest.importorskip("lerobot_groot")

# CPU fp32, one thread; ~5x the error measured, relative to the reference's largest magnitude (the random weights
# at 0.3 make velocities of ~70).
FEAT_TOL = 1e-6  # backbone features: measured 0
VEL_TOL = 3e-6  # velocity per step: measured 5.1e-7
CHUNK_TOL = 3e-6  # sampled chunk (and the head on the model vs over the prefill taps): below 5e-7


def rel(got: torch.Tensor, want: torch.Tensor) -> float:
    return float((got - want).abs().max() / want.abs().max())


def _lerobot_head(model):
    try:
        mod = lerobot_groot.groot_action_head_module()
    except ImportError as e:  # pragma: no cover - the extra is not installed
        pytest.skip(f"lerobot 0.4.4's GR00T head is not importable: {e}")
    c = model.config
    d = c.groot
    cfg = mod.FlowmatchingActionHeadConfig(
        add_pos_embed=True, model_dtype="float32", input_embedding_dim=d.width, backbone_embedding_dim=c.backbone_width,
        hidden_size=d.hidden, max_seq_len=d.max_seq_len, action_dim=c.action_dim, action_horizon=d.horizon,
        num_inference_timesteps=d.num_steps, max_num_embodiments=d.num_embodiments, max_state_dim=d.max_state_dim,
        num_target_vision_tokens=d.future_tokens, num_timestep_buckets=d.timestep_buckets, use_vlln=True,
        tune_projector=True, tune_diffusion_model=True,
        diffusion_model_cfg=dict(
            num_attention_heads=d.heads, attention_head_dim=d.head_dim, output_dim=d.hidden, num_layers=d.depth,
            dropout=0.2, final_dropout=True, interleave_self_attention=True, norm_type="ada_norm",
            positional_embeddings=None, cross_attention_dim=c.backbone_width,
        ),
        vl_self_attention_cfg=dict(num_attention_heads=c.backbone_width // d.vl_head_dim,
                                   attention_head_dim=d.vl_head_dim, num_layers=d.vl_layers, dropout=0.2,
                                   final_dropout=True, positional_embeddings=None),
    )
    ref = mod.FlowmatchingActionHead(cfg).eval()
    ours = model.heads["groot"]
    with torch.no_grad():  # random everything (LayerNorm affines too, so a skipped one shows)
        g = torch.Generator().manual_seed(3)
        for p in ours.parameters():
            p.copy_(torch.randn(p.shape, generator=g) * 0.3)
    ref.load_state_dict(ours.state_dict(), strict=True)
    return ref, mod


@pytest.fixture(scope="module")
def pair():
    model = build_starvla("starvla-tiny", seed=0, heads=["groot"])
    ref, mod = _lerobot_head(model)
    return model, ref, mod


def _inputs(model, seed=0, rows=2, length=11):
    g = torch.Generator().manual_seed(seed)
    c = model.config
    vl = torch.randn(rows, length, c.backbone_width, generator=g)
    state = torch.zeros(rows, 1, c.groot.max_state_dim)
    state[:, :, : c.state_dim] = torch.randn(rows, 1, c.state_dim, generator=g)
    noise = torch.randn(rows, c.groot.horizon, c.action_dim, generator=g)
    return vl, state, noise


def test_backbone_features_match_lerobot(pair):
    model, ref, _ = pair
    vl, _, _ = _inputs(model)
    with torch.no_grad():
        want = ref.vl_self_attention(ref.vlln(vl))
    got = model.heads["groot"].backbone_features(vl, None)
    assert rel(got, want) <= FEAT_TOL, rel(got, want)


def test_velocity_per_step_and_sampled_chunk_match_lerobot(pair):
    from transformers.feature_extraction_utils import BatchFeature

    model, ref, _ = pair
    head = model.heads["groot"]
    c = model.config
    vl, state, noise = _inputs(model, seed=1)
    mask = torch.ones(vl.shape[:2], dtype=torch.bool)
    extras = head.taps(vl, mask)
    extras["state"] = state[:, 0]
    lengths = torch.full((vl.shape[0],), vl.shape[1])
    ids = torch.full((vl.shape[0],), c.groot.embodiment_id)
    with torch.no_grad():  # lerobot's get_action loop, one step at a time, recording its velocity
        feats = ref.vl_self_attention(ref.vlln(vl))
        sf = ref.state_encoder(state, ids)
        x, xs, want_v = noise.clone(), [], []
        for step in range(c.groot.num_steps):
            t = torch.full((vl.shape[0],), time_bucket(step, c.groot.num_steps, 1000))
            af = ref.action_encoder(x, t, ids) + ref.position_embedding(torch.arange(x.shape[1]))[None]
            sa = torch.cat([sf, ref.future_tokens.weight[None].expand(vl.shape[0], -1, -1), af], 1)
            v = ref.action_decoder(ref.model(hidden_states=sa, encoder_hidden_states=feats, timestep=t), ids)[:, -x.shape[1]:]
            xs.append(x.clone())
            want_v.append(v)
            x = x + v / c.groot.num_steps
        torch.manual_seed(11)
        torch.randn(noise.shape)  # get_action draws its own noise: replay the same draw
        torch.manual_seed(11)
        chunk = ref.get_action(BatchFeature({"backbone_features": vl}),
                               BatchFeature({"state": state, "embodiment_id": ids}))["action_pred"]
        torch.manual_seed(11)
        drawn = torch.randn(noise.shape)
    kvs = [(extras["groot_k"][:, i], extras["groot_v"][:, i]) for i in range(extras["groot_k"].shape[1])]
    tokens = head.state_features(extras["state"])
    for step, (xi, vi) in enumerate(zip(xs, want_v)):
        t = torch.full((vl.shape[0],), time_bucket(step, c.groot.num_steps, 1000))
        got = head.velocity(xi, t, tokens, kvs, mask)
        assert rel(got, vi) <= VEL_TOL, f"step {step}: {rel(got, vi)}"
    got_chunk = head.sample(extras, lengths, drawn, c.groot.num_steps)
    assert rel(got_chunk, chunk) <= CHUNK_TOL, rel(got_chunk, chunk)
    assert (got_chunk - noise).abs().max() > 1e-2  # the loop moved the noise


def test_groot_on_the_model_reads_the_last_layer_before_the_final_norm():
    """denoise_head over the prefill == the head over transformers' `hidden_states[-1]` (the last layer's output,
    un-normed in 4.57); the normed final state gives other actions."""
    model = build_starvla("starvla-tiny", seed=2, heads=["groot"])
    with torch.no_grad():  # a final norm of ones is undone by vlln's LayerNorm: give it a shape
        model.vlm.model.language_model.norm.weight.copy_(torch.linspace(0.2, 2.0, model.config.backbone_width))
    c = model.config
    g = torch.Generator().manual_seed(5)
    ids = torch.randint(10, 250, (1, 17), generator=g)
    state = torch.randn(1, c.state_dim, generator=g)
    inputs = XR0PrefixInputs(ids, torch.tensor([17]), None, None, state)
    cache = model.new_cache(1, model.max_prefix_length() + 8)
    pre_state = model.prefill_frame(cache, inputs)
    noise = torch.randn(1, c.groot.horizon, c.action_dim, generator=g)
    got = model.denoise_head("groot", cache, pre_state, noise, c.groot.num_steps)
    pre = model.vlm.prefill(model.new_cache(1, 32), ids, output_hidden_states=True)
    head = model.heads["groot"]
    mask = torch.ones(1, 17, dtype=torch.bool)
    padded_state = torch.zeros(1, c.groot.max_state_dim)
    padded_state[:, : c.state_dim] = state
    want = head.sample({**head.taps(pre.hidden_states[-1], mask), "state": padded_state}, torch.tensor([17]), noise,
                       c.groot.num_steps)
    normed = head.sample({**head.taps(pre.hidden, mask), "state": padded_state}, torch.tensor([17]), noise,
                         c.groot.num_steps)
    assert rel(got, want) <= CHUNK_TOL, rel(got, want)
    assert (normed - want).abs().max() > 1e-3
