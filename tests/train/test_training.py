"""The training forward is the inference forward: same velocity as a denoise step, same token log-likelihoods as
prefill + extend. Random tiny weights, two rows of different prompt lengths, one with a masked camera."""
from __future__ import annotations

import torch

from oxygen_gym.model import PI05Config, build_model
from oxygen_gym.model.pi05.training import TrainBatch, forward, losses, sample_time

# Measured worst relative error over these cases (fp32): ~2e-7 on an AVX2 CPU, 2.1e-6 on an AVX-512 one (other
# kernels; the same with 1 and 2 threads); the limit is ~5x the larger. A wrong mask or time embedding costs > 1e-2.
RTOL = 1e-5


def _model():
    return build_model(PI05Config.named("tiny"), seed=3)


def _batch(model, seed=0, text_lengths=(9, 6)):
    g = torch.Generator().manual_seed(seed)
    cfg = model.config
    b, s = 2, cfg.vision.image_size
    images = [torch.rand(b, 3, s, s, generator=g) * 2 - 1 for _ in cfg.image_slots]
    masks = [torch.tensor([True, True]), torch.tensor([True, False]), torch.tensor([False, False])][: len(images)]
    tokens = torch.randint(4, cfg.vocab_size, (b, 12), generator=g)
    token_masks = torch.zeros(b, 12, dtype=torch.bool)
    token_masks[0, :12], token_masks[1, :7] = True, True
    tokens[~token_masks] = 0
    t_max = max(text_lengths)
    text = torch.randint(4, cfg.vocab_size, (b, t_max), generator=g)
    text_mask = torch.zeros(b, t_max, dtype=torch.bool)
    for r, n in enumerate(text_lengths):
        text[r, n:] = 0
        text_mask[r, 3:n] = True  # the first 3 ids are the task prompt
    actions = torch.randn(b, cfg.action_horizon, cfg.action_dim, generator=g)
    return TrainBatch(images, masks, tokens, token_masks, actions, torch.ones_like(actions, dtype=torch.bool), text, text_mask)


def _rel(a, b):
    return float((a - b).abs().max() / b.abs().max())


def test_velocity_at_t1_equals_the_first_denoise_step():
    model = _model()
    batch = _batch(model)
    noise = torch.randn(batch.actions.shape, generator=torch.Generator().manual_seed(1))
    x0 = model.sample_actions(batch.images, batch.image_masks, batch.tokens, batch.token_masks, noise=noise, num_steps=1)
    v_inference = noise - x0  # x0 = noise + dt * v with dt = -1
    with torch.no_grad():
        v_train, _ = forward(model, batch, noise, torch.ones(2))
    assert _rel(v_train, v_inference) < RTOL


def test_velocity_at_t_half_equals_the_second_denoise_step():
    model = _model()
    batch = _batch(model, seed=4)
    noise = torch.randn(batch.actions.shape, generator=torch.Generator().manual_seed(2))
    args = (batch.images, batch.image_masks, batch.tokens, batch.token_masks)
    x_half = model.sample_actions(*args, noise=noise, num_steps=1) * 0.5 + noise * 0.5  # x after one step of dt=-0.5
    x0 = model.sample_actions(*args, noise=noise, num_steps=2)
    v_half = (x_half - x0) / 0.5
    batch.actions = (x_half - 0.5 * noise) / 0.5  # so that x_t = t * noise + (1 - t) * actions = x_half at t = 0.5
    with torch.no_grad():
        v_train, _ = forward(model, batch, noise, torch.full((2,), 0.5))
    assert _rel(v_train, v_half) < RTOL


def test_language_logits_equal_prefill_then_extend():
    model = _model()
    batch = _batch(model, seed=5)
    prefix = model.embed_prefix(batch.images, batch.image_masks, batch.tokens, batch.token_masks)
    cache = model.new_cache(2, prefix.max_len + batch.text.shape[1])
    model.prefill(cache, prefix)
    hidden = model.extend(cache, batch.text[:, :-1], prefix.lengths)
    ref = model.lm_logits(hidden)
    with torch.no_grad():
        _, logits = forward(model, batch, torch.zeros_like(batch.actions), torch.ones(2))
    for r, n in enumerate((9, 6)):  # compare every real position of each row
        assert _rel(logits[r, : n - 1], ref[r, : n - 1]) < RTOL


def test_losses_are_finite_reproducible_and_train_both_experts():
    model = _model()
    model.requires_grad_(True)
    batch = _batch(model, seed=6)
    out = losses(model, batch, torch.Generator().manual_seed(0))
    again = losses(model, batch, torch.Generator().manual_seed(0))
    assert torch.equal(out["loss"], again["loss"]) and torch.isfinite(out["loss"])
    out["loss"].backward()
    for name in ("action_out_proj.weight", "expert.layers.0.mlp.up_proj.weight", "vlm.layers.0.mlp.up_proj.weight",
                 "embed_tokens.weight", "vision.patch_embedding.weight", "time_mlp_in.weight"):
        grad = dict(model.named_parameters())[name].grad
        assert grad is not None and float(grad.abs().sum()) > 0, name


def test_action_dim_weights_are_a_weighted_mean_over_the_real_entries():
    """Weights of one are the plain loss; a one-hot weight on the gripper dim is the loss of a batch whose mask keeps
    only that dim; `--gripper-weight` puts its weight there (train/trainer.py `gripper_weights`)."""
    from dataclasses import replace

    from oxygen_gym.train.trainer import gripper_weights

    model = _model()
    batch = _batch(model, seed=6)
    gen = lambda: torch.Generator().manual_seed(0)  # noqa: E731 - the same noise and flow times each call
    plain = losses(model, batch, gen())["action"]
    assert torch.equal(losses(model, batch, gen(), action_dim_weights=torch.ones(model.config.action_dim))["action"], plain)
    one_hot = torch.zeros(model.config.action_dim)
    one_hot[6] = 1.0
    only_gripper = torch.zeros_like(batch.action_loss_mask)
    only_gripper[..., 6] = True
    masked = losses(model, replace(batch, action_loss_mask=only_gripper), gen())["action"]
    assert torch.allclose(losses(model, batch, gen(), action_dim_weights=one_hot)["action"], masked, rtol=1e-6)
    assert not torch.allclose(masked, plain, rtol=1e-3)
    w = gripper_weights(model.config.action_dim, 5.0)
    assert gripper_weights(32, 1.0) is None and float(w[6]) == 5.0 and float(w.sum()) == model.config.action_dim + 4


def test_flow_time_follows_beta_1p5_1():
    t = sample_time(200_000, torch.Generator().manual_seed(0))
    assert float(t.min()) >= 0.001 and float(t.max()) <= 1.0
    # Beta(1.5, 1) has mean 0.6; scaled: 0.6 * 0.999 + 0.001. Standard error ~5e-4 at this sample size.
    assert abs(float(t.mean()) - (0.6 * 0.999 + 0.001)) < 3e-3
