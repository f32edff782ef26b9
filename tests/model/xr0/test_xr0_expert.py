"""The XR0 action expert against transformers' Qwen3-VL prefill: the reference-style path over past_key_values, the
engine-cache path (eager and static), and an independent reference of the published DiT (masks, positions, layers,
time grid)."""
import dataclasses

import pytest
import torch

from oxygen_gym.model.xr0.action_expert import XR0ActionExpert
from oxygen_gym.model.xr0.xr0_config import DiTDims, XR0Config
from xr0_reference import prefill, reference_sample, reference_velocity, tiny_backbone, to_cache

TEXT_LENGTHS = [9, 3, 6]  # three rows, right-padded to the longest


def _expert(config: XR0Config, seed: int = 2) -> XR0ActionExpert:
    torch.manual_seed(seed)
    expert = XR0ActionExpert(config)
    with torch.no_grad():
        for name, p in expert.named_parameters():
            if name.endswith("norm.weight"):  # ones by default: perturb so a norm mix-up shows
                p.add_(0.3 * torch.randn_like(p))
    return expert


@pytest.fixture(scope="module")
def setup():
    config = XR0Config.named("xr0-tiny")
    model = tiny_backbone(config)
    ks, vs, valid, next_pos, pos = prefill(model, config, TEXT_LENGTHS)
    expert = _expert(config)
    g = torch.Generator().manual_seed(3)
    b = len(TEXT_LENGTHS)
    x_t = torch.randn(b, config.horizon, config.action_dim, generator=g)
    state = torch.randn(b, config.state_dim, generator=g)
    t = torch.tensor([0.0, 0.4, 0.8])
    return dict(config=config, ks=ks, vs=vs, valid=valid, next_pos=next_pos, pos=pos, expert=expert, x_t=x_t,
                state=state, t=t)


def test_prefix_positions_from_transformers(setup):
    # the prompt ends in text: every M-RoPE axis has the same maximum, so one next position per row
    per_axis = setup["pos"].amax(dim=2)
    assert torch.equal(per_axis[0], per_axis[1]) and torch.equal(per_axis[0], per_axis[2])
    assert setup["valid"].sum(1).tolist() != [setup["valid"].shape[1]] * 3  # rows really are padded


@pytest.mark.parametrize("static", [False, True])
def test_cache_path_equals_past_key_values_path(setup, static):
    s = setup
    ref = s["expert"].velocity(s["ks"], s["vs"], s["valid"], s["next_pos"], s["x_t"], s["t"], s["state"])
    lengths = s["valid"].sum(1)
    cache = to_cache(s["ks"], s["vs"], s["valid"], capacity=s["valid"].shape[1] + 7)
    got = s["expert"].velocity_from_cache(cache, lengths, s["next_pos"], s["x_t"], s["t"], s["state"], static=static)
    err = (got - ref).abs().max().item()
    # measured 0.0 (eager) / 2.4e-7 (static, full-capacity read) in fp32 on CPU; |v| ~ 0.95
    assert err < 1e-6, err
    assert ref.abs().max() > 0.1


def test_velocity_matches_independent_reference(setup):
    s = setup
    c = s["config"]
    ref = reference_velocity(s["expert"], s["ks"], s["vs"], s["valid"], s["pos"], s["x_t"], s["t"], s["state"],
                             c.text_config)
    got = s["expert"].velocity(s["ks"], s["vs"], s["valid"], s["next_pos"], s["x_t"], s["t"], s["state"])
    err = (got - ref).abs().max().item()
    # measured 2.4e-7 in fp32 (SDPA over cat([repeat_kv(cache), own]) vs our split-logit softmax); |v| ~ 0.95
    assert err < 1e-6, err


def test_deployed_form_no_window_no_gap(setup):
    """modeling_mibot.py's inference form: plain causal over the DiT tokens, no position gap."""
    s = setup
    c = dataclasses.replace(s["config"], window=None, position_gap=0)
    expert = XR0ActionExpert(c)
    expert.load_state_dict(s["expert"].state_dict())
    ref = reference_velocity(expert, s["ks"], s["vs"], s["valid"], s["pos"], s["x_t"], s["t"], s["state"],
                             c.text_config)
    got = expert.velocity(s["ks"], s["vs"], s["valid"], s["next_pos"], s["x_t"], s["t"], s["state"])
    assert (got - ref).abs().max().item() < 1e-6
    other = s["expert"].velocity(s["ks"], s["vs"], s["valid"], s["next_pos"], s["x_t"], s["t"], s["state"])
    assert (got - other).abs().max().item() > 1e-3  # the two forms really differ


@pytest.mark.parametrize("static", [False, True])
def test_sample_matches_reference_euler(setup, static):
    s = setup
    c = s["config"]
    noise = s["x_t"]
    ref = reference_sample(s["expert"], s["ks"], s["vs"], s["valid"], s["pos"], noise, s["state"], c.text_config,
                           c.num_steps)
    cache = to_cache(s["ks"], s["vs"], s["valid"], capacity=s["valid"].shape[1] + 5)
    got = s["expert"].sample(cache, s["valid"].sum(1), s["next_pos"], noise, s["state"], c.num_steps, static=static)
    err = (got - ref).abs().max().item()
    # measured 2.4e-7 in fp32 after 5 steps (eager and static); |actions| ~ 3.6
    assert err < 2e-6, err


def test_sample_leaves_cache_untouched(setup):
    s = setup
    cache = to_cache(s["ks"], s["vs"], s["valid"], capacity=s["valid"].shape[1] + 5)
    k0, v0 = cache.k.clone(), cache.v.clone()
    s["expert"].sample(cache, s["valid"].sum(1), s["next_pos"], s["x_t"], s["state"], 2)
    assert torch.equal(cache.k, k0) and torch.equal(cache.v, v0)


def test_window_mask_shape():
    expert = XR0ActionExpert(XR0Config.named("xr0-tiny"))
    m = expert.own_mask(8)
    s = 2  # sink + one state token
    assert m[0].tolist() == [True] + [False] * 9  # sink sees only itself
    assert m[1, :2].all() and not m[1, 2:].any()  # state: sink and itself
    row = m[s + 6]  # action 6 sees sink, state and actions 2..6 (window 4)
    assert row[:s].all() and row[s + 2 : s + 7].all() and not row[s : s + 2].any() and not row[s + 7 :].any()


def test_config_validation():
    c = XR0Config.named("xr0-tiny")
    with pytest.raises(ValueError, match="kv_heads/head_dim"):
        dataclasses.replace(c, dit=DiTDims(depth=2, width=64, heads=4, kv_heads=4, head_dim=16, mlp_dim=256))
    with pytest.raises(ValueError, match="read_layers"):
        dataclasses.replace(c, read_layers=5)
    with pytest.raises(KeyError, match="xr0-tiny"):
        XR0Config.named("nope")
    assert XR0Config.from_dict(c.to_dict()) == c


def test_full_config_constructs():
    c = XR0Config.named("xr0")
    assert (c.backbone_layers, c.read_layers, c.first_read_layer, c.dit.width) == (36, 16, 20, 1024)
    with torch.device("meta"):
        expert = XR0ActionExpert(c)
    n = sum(p.numel() for p in expert.parameters())
    assert 200e6 < n < 400e6, n


def test_small_config_frame_is_fast():
    import time

    c = XR0Config.named("xr0-small")
    expert = XR0ActionExpert(c)
    from oxygen_gym.engine.kv_cache import KVCache

    t = c.text_config
    cache = KVCache.empty(c.backbone_layers, 1, t["num_key_value_heads"], 300, c.backbone_head_dim)
    cache.k.normal_()
    cache.v.normal_()
    noise = torch.randn(1, c.horizon, c.action_dim)
    start = time.perf_counter()
    out = expert.sample(cache, torch.tensor([280]), torch.tensor([200]), noise, torch.randn(1, c.state_dim))
    assert out.shape == noise.shape and torch.isfinite(out).all()
    assert time.perf_counter() - start < 1.0


def test_dim_mask_zeroes_padding_dims_before_the_projector(setup):
    s = setup
    args = (s["ks"], s["vs"], s["valid"], s["next_pos"])
    dim = s["x_t"].shape[-1]
    mask = torch.tensor([1.0] * 5 + [0.0] * (dim - 5))
    zeroed = s["x_t"] * mask
    masked = s["expert"].velocity(*args, s["x_t"], s["t"], s["state"], dim_mask=mask)
    assert torch.equal(masked, s["expert"].velocity(*args, zeroed, s["t"], s["state"]))
    per_row = s["expert"].velocity(*args, s["x_t"], s["t"], s["state"], dim_mask=mask.expand(3, dim))
    assert torch.equal(masked, per_row)
    assert (masked - s["expert"].velocity(*args, s["x_t"], s["t"], s["state"])).abs().max() > 1e-3
