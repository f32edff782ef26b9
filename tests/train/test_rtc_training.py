"""Training-time RTC (arXiv 2512.05964): the clean action prefix at flow time 0 in training is what inference's
`trained` method feeds, token for token; without a delay it is plain denoising."""
import numpy as np
import pytest
import torch

from oxygen_gym import MultiTaskPolicy, RTCConfig
from oxygen_gym.engine.rtc import Guidance
from oxygen_gym.model.pi05.training import forward, losses, rtc_delays, sample_time
from policy_obs import make_obs
from test_training import RTOL, _batch, _model, _rel


def test_training_forward_with_a_clean_prefix_equals_the_trained_inference_step():
    model = _model()
    batch = _batch(model)
    b, h, a = batch.actions.shape
    noise = torch.randn(batch.actions.shape, generator=torch.Generator().manual_seed(1))
    frozen = torch.arange(h)[None] < torch.tensor([3, 1])[:, None]
    g = Guidance(batch.actions.clone(), torch.zeros(b, h, a), torch.zeros(b), "trained", frozen)
    args = (batch.images, batch.image_masks, batch.tokens, batch.token_masks)
    x0 = model.sample_actions(*args, noise=noise, num_steps=1, guidance=g)
    assert torch.equal(x0[frozen], batch.actions[frozen])  # the delayed actions come back as given
    x_in = torch.where(frozen[..., None], batch.actions, noise)
    v_inference = x_in - x0  # x0 = x + dt * v with dt = -1
    with torch.no_grad():
        v_train, _ = forward(model, batch, noise, torch.ones(b), frozen)
    assert _rel(v_train[~frozen], v_inference[~frozen]) < RTOL
    with torch.no_grad():  # the frozen tokens' time matters: conditioned at t = 1 instead, the velocity moves
        v_wrong, _ = forward(model, batch, noise, torch.ones(b))
    assert _rel(v_wrong[~frozen], v_inference[~frozen]) > 100 * RTOL


def test_trained_method_without_delay_is_plain_denoising():
    obs = make_obs("libero", np.random.default_rng(0))
    p = MultiTaskPolicy.from_pretrained("tiny", robot="libero", rtc=RTCConfig(method="trained"))
    plain = p.act(obs)[0]
    p.reset()
    assert np.array_equal(p.act(obs, prev_actions=np.ones((10, 7), np.float32), inference_delay=0)[0], plain)
    p.reset()
    prev = np.ones((10, 7), np.float32)
    got = p.act(obs, prev_actions=prev, inference_delay=4)[0]
    np.testing.assert_allclose(got[:4], prev[:4], atol=1e-6)  # fed clean, returned as given (identity normaliser)
    assert not np.allclose(got[4:], plain[4:], atol=1e-4)  # the rest now follows from that prefix


def test_trained_method_is_refused_by_a_head_not_trained_for_it():
    p = MultiTaskPolicy.from_pretrained("xr0-tiny", robot="libero", rtc=RTCConfig(method="trained"))
    with pytest.raises(ValueError, match="rtc.method 'trained' needs a head trained"):
        p.act(make_obs("libero", np.random.default_rng(0)), prev_actions=np.zeros((10, 7)), inference_delay=2)


def test_delays_and_the_loss_mask():
    d = rtc_delays(4000, 4, torch.Generator().manual_seed(0))
    counts = torch.bincount(d, minlength=5).tolist()
    assert min(d.tolist()) == 0 and max(d.tolist()) == 4 and counts == sorted(counts, reverse=True)
    model = _model()
    model.requires_grad_(True)
    batch = _batch(model)
    out = losses(model, batch, torch.Generator().manual_seed(3), rtc_max_delay=3)
    # the same draws in the same order: noise, flow time, delays; the loss skips the frozen prefix
    gen = torch.Generator().manual_seed(3)
    noise = torch.randn(batch.actions.shape, generator=gen)
    t = sample_time(2, gen)
    d = rtc_delays(2, 3, gen)
    frozen = torch.arange(batch.actions.shape[1])[None] < d[:, None]
    with torch.no_grad():
        v, _ = forward(model, batch, noise, t, frozen)
    m = (batch.action_loss_mask & ~frozen[..., None]).float()
    want = ((v - (noise - batch.actions)).pow(2) * m).sum() / m.sum()
    assert d.tolist() != [0, 0] and torch.allclose(out["action"], want, rtol=1e-6)
    out["loss"].backward()  # trains end to end
    assert float(model.action_out_proj.weight.grad.abs().sum()) > 0
