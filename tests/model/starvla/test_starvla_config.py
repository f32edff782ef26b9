"""StarVLA built-ins: their dims (starvla-4b is checked as a config only, never built), head subsets, the taps'
memory per head, and the errors a bad config raises."""
import pytest

from oxygen_gym.model.starvla import StarVLAConfig, build_starvla
from oxygen_gym.policies.model_io import builtin_names


def test_builtins_are_registered_with_every_head():
    assert {"starvla-tiny", "starvla-small", "starvla-4b"} <= set(builtin_names())
    for name in ("starvla-tiny", "starvla-small", "starvla-4b"):
        assert StarVLAConfig.named(name).heads == ("pi", "groot", "oft")


def test_4b_has_qwen3_vl_4b_and_the_published_head_dims():
    c = StarVLAConfig.named("starvla-4b")
    t = c.text_config
    assert (t["hidden_size"], t["num_hidden_layers"], t["num_key_value_heads"], t["head_dim"]) == (2560, 36, 8, 128)
    assert (c.pi.width, c.pi.head_dim, c.pi.horizon, c.pi.num_steps, c.pi.interleave_self_attention) == (1024, 64, 16, 4, False)
    assert (c.groot.width, c.groot.heads, c.groot.depth, c.groot.horizon, c.groot.num_steps) == (768, 12, 16, 8, 4)
    assert c.oft.horizon == 8


def test_heads_subset_and_tap_memory():
    model = build_starvla("starvla-tiny", heads=["groot", "pi"])
    assert list(model.action_heads) == ["groot", "pi"]
    taps = model.tap_bytes(100)
    c = model.config
    assert taps["pi"] == c.backbone_layers * c.backbone_width * 100 * 4  # every layer's hidden state
    assert taps["groot"] == c.backbone_width * 100 * 4 + c.groot.max_state_dim * 4  # the last one and the state
    with pytest.raises(ValueError, match=r"heads: unknown action head\(s\) \['fast'\]"):
        build_starvla("starvla-tiny", heads=["fast"])
    with pytest.raises(ValueError, match="heads: expected a non-empty subset"):
        StarVLAConfig.named("starvla-tiny").with_heads(["pi", "pi"])
