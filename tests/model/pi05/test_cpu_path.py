"""The CPU path's shortcuts compute what the plain path computes: q/k/v as one matmul (model/fused_linear.py), the
action-only prefill that skips the backbone's last attention and MLP, and grouped attention's head mapping
(model/layers.py). Their speed is measured by `python -m oxygen_gym.eval.bench.lerobot_ratio`, not here."""
import math

import torch
import torch.nn.functional as F
from torch import nn

from oxygen_gym.model import build_model
from oxygen_gym.model.fused_linear import fused_linear
from oxygen_gym.model.layers import grouped_attention, linear


def three_linears(seed: int, bias: bool) -> tuple[nn.Module, list[nn.Linear]]:
    torch.manual_seed(seed)
    owner = nn.Module()
    owner.a, owner.b, owner.c = nn.Linear(16, 24, bias=bias), nn.Linear(16, 8, bias=bias), nn.Linear(16, 8, bias=bias)
    owner.requires_grad_(False)
    return owner, [owner.a, owner.b, owner.c]


def separate(x, layers):
    return torch.cat([linear(x, l) for l in layers], -1)


def test_fused_linear_is_the_separate_linears_and_follows_weight_edits():
    """Equal up to the GEMM's summation order (bit for bit at the models' own shapes, not promised at any shape)."""
    for bias in (False, True):
        owner, layers = three_linears(0, bias)
        x = torch.randn(2, 5, 16)
        with torch.inference_mode():
            assert torch.allclose(fused_linear(x, owner, layers), separate(x, layers), rtol=1e-6, atol=1e-6)
            with torch.no_grad():  # a checkpoint load / cast edits the weights in place: no stale concatenation
                layers[1].weight.mul_(3.0)
            assert torch.allclose(fused_linear(x, owner, layers), separate(x, layers), rtol=1e-6, atol=1e-6)


def test_fused_linear_joins_weights_only_on_cpu():
    """Off the CPU the separate calls run and no joined copy of the weights is kept (meta tensors stand in for a
    device here: no GPU on this machine)."""
    from oxygen_gym.model import fused_linear as module

    owner, layers = three_linears(2, bias=False)
    with torch.inference_mode():
        fused_linear(torch.randn(3, 16), owner, layers)
        assert owner in module._FUSED
        meta_owner, meta_layers = three_linears(3, bias=False)
        meta_owner.to("meta")
        out = fused_linear(torch.empty(3, 16, device="meta"), meta_owner, meta_layers)
    assert out.shape == (3, 40) and meta_owner not in module._FUSED


def test_fused_linear_keeps_autograd_to_each_weight():
    owner, layers = three_linears(1, bias=True)
    owner.requires_grad_(True)
    x = torch.randn(3, 16)
    fused_linear(x, owner, layers).square().sum().backward()
    expected = [torch.autograd.grad(linear(x, l).square().sum(), l.weight)[0] for l in layers]
    for layer, grad in zip(layers, expected, strict=True):
        assert layer.weight.grad is not None and torch.allclose(layer.weight.grad, grad)


def test_action_only_prefill_writes_the_same_cache():
    """`hidden=False` (what sample_actions and the engine's prefill run) caches every layer's K/V bit for bit as the
    full prefill does; two rows of different lengths, so the padded-key mask is in play."""
    model = build_model("tiny", seed=3)
    gen = torch.Generator().manual_seed(3)
    c = model.config
    images = [torch.rand(2, 3, 224, 224, generator=gen) * 2 - 1 for _ in range(2)]
    masks = [torch.ones(2, dtype=torch.bool), torch.tensor([True, False])]
    tokens = torch.randint(4, c.vocab_size, (2, 30), generator=gen)
    token_masks = torch.ones(2, 30, dtype=torch.bool)
    token_masks[1, 12:] = False
    prefix = model.embed_prefix(images, masks, tokens, token_masks)
    full, short = (model.new_cache(2, prefix.max_len) for _ in range(2))
    assert model.prefill(full, prefix) is not None
    assert model.prefill(short, prefix, hidden=False) is None
    assert torch.equal(full.k, short.k) and torch.equal(full.v, short.v)


def test_grouped_attention_maps_query_heads_to_their_kv_head():
    """Against explicit softmax attention with KV head j // (H/K) repeated for query head j: several query tokens (heads
    kept apart) and one (heads folded), with a mask."""
    gen = torch.Generator().manual_seed(0)
    b, h, kh, d, tk = 2, 8, 2, 16, 20
    k, v = torch.randn(b, kh, tk, d, generator=gen), torch.randn(b, kh, tk, d, generator=gen)
    for tq in (1, 7):
        q = torch.randn(b, h, tq, d, generator=gen)
        mask = torch.rand(b, tq, tk, generator=gen) > 0.4
        mask[..., 0] = True
        kr, vr = k.repeat_interleave(h // kh, dim=1), v.repeat_interleave(h // kh, dim=1)
        logits = (q @ kr.transpose(-1, -2)) / math.sqrt(d)
        ref = F.softmax(logits.masked_fill(~mask[:, None], float("-inf")), -1) @ vr
        ref = ref.transpose(1, 2).reshape(b, tq, h * d)
        assert torch.allclose(grouped_attention(q, k, v, mask), ref, atol=1e-5), f"tq={tq}"
