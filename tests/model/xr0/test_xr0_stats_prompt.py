"""XR0 per-robot statistics (preprocessor_config.json) and the prompt texts / chat messages."""
import json

import pytest
import torch

from oxygen_gym.model.xr0 import xr0_prompt as P
from oxygen_gym.model.xr0.xr0_stats import load_stats, robot_types, stats_from_preprocessor

PRE = {
    "action_config": {
        "libero": {"mean": [[0.1, -0.2, 0.0, 0.0]] * 3, "std": [[0.5, 2.0, 1e-7, 0.0]] * 3},
        "aloha": {"mean": [1.0, 2.0, 3.0, 0.0], "std": [1.0, 1.0, 1.0, 0.0]},
    },
}


def test_stats_round_trip_and_mask(tmp_path):
    (tmp_path / "preprocessor_config.json").write_text(json.dumps(PRE))
    s = load_stats(tmp_path, "libero")
    assert robot_types(PRE) == ["libero", "aloha"]
    assert s.action_mean.shape == (3, 4)  # per step, broadcast over [B, H, A]
    a = torch.randn(2, 3, 4)
    n = s.normalize_actions(a)
    assert torch.allclose(n[..., 0], (a[..., 0] - 0.1) / (0.5 + 1e-6))
    assert torch.allclose(s.unnormalize_actions(n), a, atol=1e-6)
    assert s.action_dim_mask.tolist() == [True, True, False, False]
    assert s.active_action_dims == 2
    assert torch.equal(s.normalize_state(a), a)  # the published recipe feeds the raw state
    assert stats_from_preprocessor(PRE, "aloha").active_action_dims == 3


def test_unknown_robot_type_names_the_available():
    with pytest.raises(KeyError, match=r"'droid'.*\['aloha', 'libero'\]"):
        stats_from_preprocessor(PRE, "droid")


def test_state_stats_when_present():
    pre = {**PRE, "state_config": {"aloha": {"mean": [1.0, 1.0], "std": [2.0, 2.0]}}}
    s = stats_from_preprocessor(pre, "aloha")
    assert torch.allclose(s.normalize_state(torch.tensor([3.0, 1.0])), torch.tensor([1.0, 0.0]), atol=1e-5)


def test_action_prompt_text():
    text = P.action_prompt("  pick up the cup ", ["base", "wrist_left"])
    # the literal string of the CALVIN eval script (two views)
    assert text == (
        "<|im_start|>user\nThe following observations are captured from multiple views.\n# Base View\n"
        "<|vision_start|><|image_pad|><|vision_end|>\n# Left-Wrist View\n<|vision_start|><|image_pad|><|vision_end|>\n"
        "Generate robot actions for the task:\npick up the cup /no_cot<|im_end|>\n<|im_start|>assistant\n"
        "<cot></cot><|im_end|>\n"
    )


def test_messages_for_a_processor():
    imgs = ["img0", "img1", "img2"]
    m = P.action_messages("stack", ["base", "wrist_left", "wrist_right"], imgs)
    assert [x["role"] for x in m] == ["user", "assistant"]
    images = [x for x in m[0]["content"] if x["type"] == "image"]
    assert [x["image"] for x in images] == imgs
    assert m[0]["content"][-1]["text"].endswith("stack /no_cot")
    assert m[1]["content"] == [{"type": "text", "text": "<cot></cot>"}]
    assert "# Right-Wrist View\n" in [x.get("text") for x in m[0]["content"]]
    assert P.view_title("side_cam") == "Side Cam"


def test_cot_mode_prompt():
    text = P.cot_prompt("stack", ["base"])
    assert text.endswith("stack /cot<|im_end|>\n<|im_start|>assistant\n<cot>")
    assert "<cot></cot>" not in text
    assert P.COT_STOP == ("</cot>", "<|im_end|>")
    assert [x["role"] for x in P.cot_messages("stack", ["base"])] == ["user"]
