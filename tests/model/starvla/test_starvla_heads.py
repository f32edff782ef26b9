"""The StarVLA `pi` (PI_v3) and `oft` heads against StarVLA's own head modules (commit 0ed0aad), run once into
tests/fixtures/starvla_heads/reference.pt by tools/starvla_reference.py (command and commit in its `meta`), with
their weights loaded strictly; then both heads on the model against transformers' Qwen3-VL: `pi` block i reads
backbone layer i of the same prefill, `oft` equals the regressor over transformers' `hidden_states[-1]` (the last layer, un-normed in 4.57) at
query tokens appended to the prompt, and its queries leave the prefix KV bit-identical."""
from __future__ import annotations

from pathlib import Path

import pytest
import torch

from oxygen_gym.model.starvla import build_starvla
from oxygen_gym.model.starvla.flow_dit import time_bucket
from oxygen_gym.model.xr0.xr0_prefix import XR0PrefixInputs

FIXTURE = Path(__file__).resolve().parents[2] / "fixtures" / "starvla_heads" / "reference.pt"

# CPU fp32, one thread; relative to the reference's largest magnitude, ~5x what was measured.
VEL_TOL = 8e-6  # PI velocity per step vs StarVLA's modules: measured 1.7e-6
CHUNK_TOL = 8e-6  # PI chunk vs StarVLA's predict_action: below the velocity's
OFT_TOL = 1e-6  # OFT actions vs StarVLA's L1RegressionActionHead: measured 0
MODEL_TOL = 3e-6  # heads on the model vs over transformers' hidden states: measured 4.7e-8 (pi), 5.3e-7 (oft)


def rel(got: torch.Tensor, want: torch.Tensor) -> float:
    return float((got - want).abs().max() / want.abs().max())


@pytest.fixture(scope="module")
def ref():
    return torch.load(FIXTURE, weights_only=False)


def test_fixture_records_its_source(ref):
    assert ref["meta"]["starvla_commit"].startswith("0ed0aad")
    assert "tools/starvla_reference.py" in ref["meta"]["command"]


def _pi_head(ref):
    head = build_starvla("starvla-tiny", heads=["pi"]).heads["pi"]
    state = {**ref["pi"]["head"], **{f"project_layers.{k}": v for k, v in ref["pi"]["project_layers"].items()}}
    head.load_state_dict(state, strict=True)
    return head


def test_pi_velocity_per_step_and_chunk_match_starvla(ref):
    r = ref["pi"]
    head = _pi_head(ref)
    extras = head.taps(r["layer_hidden"])
    mask = r["mask"]
    lengths = mask.sum(1)
    kvs = [(extras["pi_k"][:, i], extras["pi_v"][:, i]) for i in range(extras["pi_k"].shape[1])]
    steps = len(r["velocities"])
    for step, (x, want) in enumerate(zip(r["xs"], r["velocities"])):
        t = torch.full((x.shape[0],), time_bucket(step, steps, 1000))
        got = head.velocity(x, t, kvs, mask)
        assert rel(got, want) <= VEL_TOL, f"step {step}: {rel(got, want)}"
    chunk = head.sample(extras, lengths, r["noise"], steps)
    assert rel(chunk, r["chunk"]) <= CHUNK_TOL, rel(chunk, r["chunk"])
    static = head.sample(extras, lengths, r["noise"], steps, static=True)
    assert rel(static, r["chunk"]) <= CHUNK_TOL


def test_oft_regressor_matches_starvla(ref):
    r = ref["oft"]
    head = build_starvla("starvla-tiny", heads=["oft"]).heads["oft"]
    head.load_state_dict(r["head"], strict=True)
    assert rel(head.regress(r["hidden"]), r["actions"]) <= OFT_TOL


# ---------------------------------------------------------------- the heads on the model
@pytest.fixture(scope="module")
def hf_model():
    """starvla-tiny (pi + oft) and transformers' Qwen3-VL with its backbone weights."""
    from transformers import Qwen3VLForConditionalGeneration

    model = build_starvla("starvla-tiny", seed=3, heads=["pi", "oft"])
    with torch.no_grad():  # a final norm of ones would be undone by the regressor's own LayerNorm: give it a shape
        model.vlm.model.language_model.norm.weight.copy_(torch.linspace(0.2, 2.0, model.config.backbone_width))
    cfg = model.config.qwen3vl_config()
    cfg._attn_implementation = "eager"
    hf = Qwen3VLForConditionalGeneration(cfg).eval()
    hf.load_state_dict(model.vlm.state_dict(), strict=True)
    return model, hf


def _prompt(model, seed: int, length: int = 15):
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(10, 250, (1, length), generator=g)
    return XR0PrefixInputs(ids, torch.tensor([length]), None, None, torch.zeros(1, model.config.state_dim)), g


def test_pi_block_i_reads_backbone_layer_i_of_the_prefill(hf_model):
    model, hf = hf_model
    inputs, g = _prompt(model, 1)
    cache = model.new_cache(1, model.max_prefix_length() + 8)
    state = model.prefill_frame(cache, inputs)
    c = model.config.pi
    noise = torch.randn(1, c.horizon, model.config.action_dim, generator=g)
    got = model.denoise_head("pi", cache, state, noise, c.num_steps)
    with torch.no_grad():
        out = hf(input_ids=inputs.input_ids, output_hidden_states=True)
    head = model.heads["pi"]
    length = torch.tensor([inputs.input_ids.shape[1]])
    want = head.sample(head.taps(list(out.hidden_states[1:])), length, noise, c.num_steps)  # hidden_states[-depth:]
    shifted = head.sample(head.taps(list(out.hidden_states[:-1])), length, noise, c.num_steps)
    assert rel(got, want) <= MODEL_TOL, rel(got, want)
    assert rel(shifted, want) > 1e-3  # reading the neighbouring layer changes the actions


def test_oft_queries_continue_the_prompt_and_leave_the_prefix_intact(hf_model):
    model, hf = hf_model
    inputs, _ = _prompt(model, 2)
    n = inputs.input_ids.shape[1]
    h = model.config.oft.horizon
    cache = model.new_cache(1, model.max_prefix_length() + 8)
    state = model.prefill_frame(cache, inputs)
    prefix_k, prefix_v = cache.k[:, :, :, :n].clone(), cache.v[:, :, :, :n].clone()
    got = model.denoise_head("oft", cache, state, torch.zeros(1, h, model.config.action_dim), 1)
    assert torch.equal(cache.k[:, :, :, :n], prefix_k) and torch.equal(cache.v[:, :, :, :n], prefix_v)
    static = model.denoise_head("oft", cache, state, torch.zeros(1, h, model.config.action_dim), 1, static=True)
    queries = model.heads["oft"].query_tokens(1, h, "cpu")
    with torch.no_grad():
        out = hf(input_ids=torch.cat([inputs.input_ids, queries], 1), output_hidden_states=True)
        last = out.hidden_states[-1][:, -h:]  # what StarVLA's QwenOFT reads: the last layer, un-normed in 4.57
    want = model.heads["oft"].regress(last)
    assert rel(got, want) <= MODEL_TOL, rel(got, want)
    assert rel(static, want) <= MODEL_TOL
    with pytest.raises(ValueError, match="head 'oft' regresses its chunk in one pass"):
        from oxygen_gym.engine.rtc import Guidance

        g = Guidance.unguided(1, h, model.config.action_dim, "cheap")
        model.denoise_head("oft", cache, state, torch.zeros(1, h, model.config.action_dim), 1, guidance=g)


@pytest.mark.parametrize("head", ["pi", "groot"])
def test_flow_heads_static_form_equals_eager_over_the_padded_taps(head):
    """The graph form (`static=True`) projects the taps over all max_prefix_length() padded positions, masked; the
    eager one over the prefix only: same chunk (a bug reading the padding unmasked, or another layer, breaks it)."""
    model = build_starvla("starvla-tiny", seed=3)
    inputs, _ = _prompt(model, 2)
    cache = model.new_cache(1, model.max_prefix_length() + 8)
    state = model.prefill_frame(cache, inputs)
    h = model.action_heads[head].horizon
    noise = torch.randn(1, h, model.config.action_dim, generator=torch.Generator().manual_seed(1))
    eager = model.denoise_head(head, cache, state, noise, 3)
    static = model.denoise_head(head, cache, state, noise, 3, static=True)
    assert rel(static, eager) <= MODEL_TOL, rel(static, eager)
