"""Real-time chunking through the StarVLA flow heads (engine/rtc.py; their flow time is rtc.py's convention): zero
weights give exactly the plain chunk, a guided row is pulled to its target where weighted, a row with beta 0 in the
same batch is untouched; OFT refuses guidance naming the head (tests/model/starvla/test_starvla_heads.py)."""
import pytest
import torch

from oxygen_gym.engine.rtc import Guidance
from oxygen_gym.model.starvla import build_starvla
from oxygen_gym.model.xr0.xr0_prefix import XR0PrefixInputs


@pytest.fixture(scope="module")
def frame():
    m = build_starvla("starvla-tiny", seed=1, heads=["pi", "groot"])
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(10, 250, (2, 15), generator=g)
    inputs = XR0PrefixInputs(ids, torch.tensor([15, 11]), None, None, torch.randn(2, 8, generator=g))
    cache = m.new_cache(2, m.max_prefix_length() + 16)
    return m, cache, m.prefill_frame(cache, inputs)


@pytest.mark.parametrize("method", ["guided", "cheap"])
@pytest.mark.parametrize("head", ["pi", "groot"])
def test_guidance_per_row(frame, head, method):
    m, cache, state = frame
    a = m.action_heads[head]
    noise = torch.randn(2, a.horizon, a.action_dim, generator=torch.Generator().manual_seed(2))
    plain = m.denoise_head(head, cache, state, noise, a.num_steps)
    zero = m.denoise_head(head, cache, state, noise, a.num_steps,
                          guidance=Guidance.unguided(2, a.horizon, a.action_dim, method))
    assert torch.equal(zero, plain)
    target, weights = torch.zeros(2, a.horizon, a.action_dim), torch.zeros(2, a.horizon, a.action_dim)
    weights[:, :2] = 1
    got = m.denoise_head(head, cache, state, noise, a.num_steps,
                         guidance=Guidance(target, weights, torch.tensor([5.0, 0.0]), method))
    assert got[0, :2].abs().mean() < 0.1 * plain[0, :2].abs().mean()  # measured ~0.02x
    assert torch.equal(got[1], plain[1])
