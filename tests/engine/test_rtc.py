"""Real-time chunking (engine/rtc.py) through every family's denoise loop: the reference's weights, exactness when
it has nothing to do, the pull towards the previous chunk, the VJP against finite differences, per-row batches."""
import math

import numpy as np
import pytest
import torch

from oxygen_gym import MultiTaskPolicy, RTCConfig
from oxygen_gym.engine.rtc import Guidance, guidance_weight, guided_velocity, prefix_weights
from policy_obs import make_obs

FAMILIES = ["tiny", "xr0-tiny"]


def test_prefix_weights_match_the_reference_docstring():
    # real-time-chunking-kinetix src/model.py get_prefix_weights: start=2, end=6, total=10, linear
    w = prefix_weights(2, 6, 10, "linear")
    assert torch.allclose(w, torch.tensor([1, 1, 0.8, 0.6, 0.4, 0.2, 0, 0, 0, 0]), atol=1e-6)
    assert prefix_weights(2, 6, 10, "zeros").tolist() == [1, 1, 0, 0, 0, 0, 0, 0, 0, 0]
    assert prefix_weights(2, 6, 10, "ones").tolist() == [1, 1, 1, 1, 1, 1, 0, 0, 0, 0]
    exp = prefix_weights(2, 6, 10, "exp")
    lin = prefix_weights(2, 6, 10, "linear")
    assert torch.allclose(exp, lin * torch.expm1(lin) / (math.e - 1))
    assert prefix_weights(8, 6, 10, "zeros").tolist() == [1] * 6 + [0] * 4  # end wins over start
    assert prefix_weights(0, 0, 10, "ones").tolist() == [0] * 10


def test_guidance_weight_is_beta_at_noise_and_the_paper_formula_after():
    beta = torch.tensor([5.0, 100.0])
    assert guidance_weight(0.0, beta).tolist() == [5.0, 100.0]
    tau = 0.5  # c = 1, inv_r2 = (0.25 + 0.25) / 0.25 = 2
    assert guidance_weight(tau, beta).tolist() == [2.0, 2.0]


def test_guided_velocity_is_the_vjp_and_cheap_is_the_plain_error():
    torch.manual_seed(0)
    m = torch.randn(6, 6) / 3

    def u(x):
        return torch.tanh(x @ m)

    x = torch.randn(2, 3, 6)
    g = Guidance(torch.randn(2, 3, 6), torch.rand(2, 3, 6), torch.tensor([5.0, 5.0]), "guided")
    tau = 0.3
    w = guidance_weight(tau, g.beta)[:, None, None]
    out = guided_velocity(u, x, tau, g)
    err = g.weights * (g.target - (x + (1 - tau) * u(x)))
    jac = torch.autograd.functional.jacobian(lambda z: z + (1 - tau) * u(z), x)  # [2,3,6, 2,3,6]
    vjp = torch.einsum("abc,abcdef->def", err, jac)
    assert torch.allclose(out, u(x) + w * vjp, atol=1e-6)
    cheap = guided_velocity(u, x, tau, Guidance(g.target, g.weights, g.beta, "cheap"))
    assert torch.allclose(cheap, u(x) + w * err, atol=1e-6)


def _policy(name, **rtc):
    return MultiTaskPolicy.from_pretrained(name, robot="libero", rtc=RTCConfig(**rtc) if rtc else None)


def _act(policy, obs, **kw):
    policy.reset()
    return policy.act(obs, **kw)[0]


@pytest.mark.parametrize("name", FAMILIES)
@pytest.mark.parametrize("method", ["guided", "cheap"])
def test_zero_delay_and_zero_weights_equal_plain_denoising_exactly(name, method):
    obs = make_obs("libero", np.random.default_rng(0))
    p = _policy(name, schedule="zeros", method=method)
    plain = _act(p, obs)
    prev = np.random.default_rng(1).normal(size=(10, 7)).astype(np.float32)
    assert np.array_equal(_act(p, obs, prev_actions=prev, inference_delay=0), plain)
    assert np.array_equal(_act(p, obs, prev_actions=prev[:0], inference_delay=3), plain)  # nothing to attend to


@pytest.mark.parametrize("name", FAMILIES)
@pytest.mark.parametrize("method", ["guided", "cheap"])
def test_the_delayed_prefix_is_pulled_to_the_previous_chunk(name, method):
    """With d = 4 the first 4 actions move to the previous chunk's (measured residual 0.1-5% of the plain gap on
    tiny / xr0-tiny, bound 10%); with a `zeros` schedule the actions after the horizon stay close to plain."""
    obs = make_obs("libero", np.random.default_rng(0))
    p = _policy(name, schedule="zeros", method=method, max_guidance_weight=10.0)
    plain = _act(p, obs)
    prev = plain + 0.5
    guided = _act(p, obs, prev_actions=prev, inference_delay=4)
    gap = np.abs(plain - prev)[:4].mean()
    assert np.abs(guided - prev)[:4].mean() < 0.1 * gap
    # weights on the wrong end of the chunk would pull the tail instead of the head
    assert np.abs(guided - prev)[6:].mean() > 0.5 * gap


def test_guided_vjp_through_the_expert_equals_finite_differences():
    """One Euler step at tau = 0, where the denoised estimate x1(x) is the plain one-step result: the guided step
    minus the plain step is beta * J^T e, checked against central differences of x1 along random directions r
    (<J^T e, r> = <e, J r>). Measured relative error ~1e-3 (fp32 differences at eps 1e-2); bound 2e-2."""
    p = _policy("tiny", method="guided", schedule="ones", max_guidance_weight=1.0)
    model = p.model
    obs = make_obs("libero", np.random.default_rng(0))
    cache = model.new_cache(1, p.pool.capacity)
    state = model.prefill_frame(cache, p.model_inputs(obs))
    noise = torch.randn(1, 10, model.config.action_dim, generator=torch.Generator().manual_seed(3))

    def x1(x):  # the one-step result: x + u(x) with u = -v (pi0.5's t = 1 -> 0)
        return model.denoise_head("actions", cache, state, x, 1)

    target = torch.randn(noise.shape, generator=torch.Generator().manual_seed(4))
    weights = torch.zeros_like(noise)
    weights[:, :6, :7] = 1.0
    g = Guidance(target, weights, torch.tensor([1.0]), "guided")
    jte = model.denoise_head("actions", cache, state, noise, 1, guidance=g) - x1(noise)
    e = weights * (target - x1(noise))
    gen = torch.Generator().manual_seed(5)
    for _ in range(4):
        r = torch.randn(noise.shape, generator=gen)
        eps = 1e-2
        jr = (x1(noise + eps * r) - x1(noise - eps * r)) / (2 * eps)
        lhs, rhs = float((jte * r).sum()), float((e * jr).sum())
        assert abs(lhs - rhs) < 2e-2 * max(abs(rhs), 1e-3), (lhs, rhs)
    cheap = model.denoise_head("actions", cache, state, noise, 1, guidance=Guidance(target, weights, g.beta, "cheap"))
    assert torch.allclose(cheap - x1(noise), e, atol=1e-5)  # cheap: the plain error, no Jacobian
    assert not torch.allclose(cheap, jte + x1(noise), atol=1e-3)  # ... which differs from the VJP here


@pytest.mark.parametrize("name", FAMILIES)
def test_rows_with_different_delays_in_one_batch_equal_each_row_alone(name):
    """Batched vs alone differ by matmul rounding only: measured 2e-6 plain and up to 1.6e-5 guided (beta 5
    amplifies it over 10 steps) on tiny, 2.4e-7 on xr0-tiny; bound 5e-5."""
    p = _policy(name, method="guided", schedule="exp")
    model = p.model
    rng = np.random.default_rng(0)
    inputs = [p.model_inputs(make_obs("libero", rng)) for _ in range(2)]
    cache = model.new_cache(2, p.pool.capacity)
    state = model.prefill_frame(cache, model.batch_prefix_inputs(inputs))
    alone_caches = [model.new_cache(1, p.pool.capacity) for _ in inputs]
    alone_states = [model.prefill_frame(c, x) for c, x in zip(alone_caches, inputs)]
    heads = model.action_heads["actions"]
    noise = torch.randn(2, 10, heads.action_dim, generator=torch.Generator().manual_seed(1))
    parts = []
    for d, n in [(2, 10), (5, 7)]:
        prev = rng.normal(size=(n, 7)).astype(np.float32)
        parts.append(p._guidance(prev, d)["actions"])
    batched = model.denoise_head("actions", cache, state, noise, heads.num_steps,
                                 guidance=Guidance.cat(parts, 10, heads.action_dim))
    for i in range(2):
        alone = model.denoise_head("actions", alone_caches[i], alone_states[i], noise[i : i + 1], heads.num_steps,
                                   guidance=parts[i])
        assert torch.allclose(batched[i : i + 1], alone, atol=5e-5), float((batched[i : i + 1] - alone).abs().max())
    plain_row = Guidance.cat([parts[0], None], 10, heads.action_dim)  # a row without guidance is plain in a batch
    mixed = model.denoise_head("actions", cache, state, noise, heads.num_steps, guidance=plain_row)
    plain = model.denoise_head("actions", cache, state, noise, heads.num_steps)
    assert torch.allclose(mixed[1], plain[1], atol=1e-6)


def test_guided_denoise_leaves_the_prefix_kv_and_the_language_untouched():
    from oxygen_gym import LanguageTask

    obs = make_obs("libero", np.random.default_rng(0))
    tasks = [LanguageTask("narrate", "What is the robot doing?", 6)]
    outs = []
    for prev in (None, np.ones((10, 7), np.float32)):
        p = MultiTaskPolicy.from_pretrained("tiny", robot="libero", tasks=tasks, decode_budget=6)
        _, updates = p.act(obs, prev_actions=prev, inference_delay=3)
        n = p.model.prefix_length(p.model_inputs(obs))  # the frame's prefill went to slot 0 (its request's)
        outs.append(([u.text for u in updates], p.pool.cache.k[:, 0, :, :n].clone()))
    assert outs[0][0] == outs[1][0]
    assert torch.equal(outs[0][1], outs[1][1])


def test_bad_rtc_inputs_name_the_field():
    p = _policy("tiny")
    obs = make_obs("libero", np.random.default_rng(0))
    with pytest.raises(ValueError, match=r"prev_actions: expected shape \(n, 7\)"):
        p.act(obs, prev_actions=np.zeros((10, 6)))
    with pytest.raises(ValueError, match="prev_actions: holds NaN"):
        p.act(obs, prev_actions=np.full((10, 7), np.nan))
    with pytest.raises(ValueError, match=r"inference_delay: expected an int in \[0, 10\]"):
        p.act(obs, prev_actions=np.zeros((10, 7)), inference_delay=11)
    with pytest.raises(ValueError, match="rtc.schedule"):
        RTCConfig(schedule="cosine")
    with pytest.raises(ValueError, match="rtc.method"):
        RTCConfig(method="exact")
    with pytest.raises(ValueError, match="rtc.max_guidance_weight"):
        RTCConfig(max_guidance_weight=float("inf"))
