"""`oxygen-gym inspect` on an XR0 folder (the family hook's `inspect`), and XR0's action normaliser on its own."""
import argparse
import ast
import shutil

import numpy as np
import pytest

from oxygen_gym.policies import inspect_command as report
from oxygen_gym.policies.families.xr0.xr0_norm import XR0ActionNormalizer
from xr0_layout import write_xr0


@pytest.fixture(scope="module")
def root(tmp_path_factory):
    return write_xr0(tmp_path_factory.mktemp("xr0i") / "ckpt")[1]


def _inspect(argv, capsys) -> tuple[int, str, str]:
    parser = argparse.ArgumentParser()
    report.add_arguments(parser)
    rc = report.run(parser.parse_args(argv))
    out = capsys.readouterr()
    return rc, out.out, out.err


def test_inspect_lists_what_was_resolved_and_every_guess(root, capsys):
    rc, out, _ = _inspect([str(root), "--asset-id", "franka", "--prompt", "stack the cups"], capsys)
    assert rc == 0
    lines = out.splitlines()
    assert "family:     xr0" in lines
    assert any(line.startswith("weights:    122 tensors in ") and "F32 x 122" in line for line in lines)
    assert "  base         -> base" in lines and "  wrist        -> wrist_left" in lines
    assert "robot_type 'franka' of ['libero', 'franka']" in out
    assert "  actions: MEAN_STD of robot_type 'franka', per dim (16), a * (std + 1e-06) + mean (XR0)" in out
    assert "  active action dims (model.dim_mask): [0, 1, 2, 3, 4, 5, 6]" in lines
    assert "chunk:      30 actions denoised; act() returns 10" in lines
    assert "stack the cups /no_cot<|im_end|>" in out and "# Left-Wrist View" in out
    assert f"tokenizer:  {root} (its own)" in lines
    assert lines[-2:] == ["warnings:", lines[-1]] and "pass action_horizon= to set it" in lines[-1]


def test_inspect_errors_and_no_guesses(root, capsys):
    rc, _, err = _inspect([str(root)], capsys)
    assert rc == 2 and "several robot types ['libero', 'franka']; pass asset_id=" in err
    rc, out, _ = _inspect([str(root), "--asset-id", "libero", "--action-horizon", "8"], capsys)
    assert rc == 0 and out.splitlines()[-1] == "warnings:   none" and "act() returns 8" in out


def test_inspect_still_reports_pi05(lerobot_fixture_dir, capsys):
    rc, out, _ = _inspect([str(lerobot_fixture_dir / "checkpoint"), "--norm-stats", "identity"], capsys)
    assert rc == 0 and "family:     lerobot" in out


def test_inspect_names_a_missing_key(root, tmp_path, capsys):
    import json

    from oxygen_gym.model.xr0.xr0_checkpoint import INDEX

    copy = shutil.copytree(root, tmp_path / "c")
    index = json.loads((copy / INDEX).read_text())
    del index["weight_map"]["sink.weight"]
    (copy / INDEX).write_text(json.dumps(index))
    rc, _, err = _inspect([str(copy), "--asset-id", "libero"], capsys)
    assert rc == 2 and "sink.weight" in err


def test_normaliser_formula_and_cut():
    mean = np.arange(6.0).reshape(2, 3)
    std = np.full((2, 3), 2.0)
    n = XR0ActionNormalizer(mean, std, "r")
    a = np.ones((2, 2))
    np.testing.assert_allclose(n.unnormalize(a), (2.0 + 1e-6) + mean[:, :2], rtol=1e-7)
    np.testing.assert_allclose(n.normalize(n.unnormalize(a)), a, rtol=1e-6)
    with pytest.raises(ValueError, match="3 steps but the 'r' statistics have 2"):
        n.unnormalize(np.ones((3, 2)))
    flat = XR0ActionNormalizer(np.zeros(3), np.array([1.0, 0.0, 1e-6]), "r")
    assert flat.active.tolist() == [True, False, False] and flat.steps is None
    np.testing.assert_allclose(flat.unnormalize(np.ones((4, 3))), np.tile([1 + 1e-6, 1e-6, 2e-6], (4, 1)), rtol=1e-6)


def test_inspect_a_builtin_of_each_family_names_its_heads_layout_and_prefix(capsys):
    """`oxygen-gym inspect NAME` for built-ins: heads with their horizons and steps, the KV layout, and the prefix an
    example observation becomes (as many positions as the policy's own prefill writes); the 4.7 B `xr0` is not built."""
    from oxygen_gym.policies.builtin_report import builtin_report

    multi = builtin_report("multi-tiny", "aloha", "fold the towel")
    assert "family pi05" in multi and "fast: 10, 4, 32" in multi and "long: 50, 6, 32" in multi
    assert "KV layout: 2 layers x 1 KV heads x head_dim 32" in multi
    xr0 = builtin_report("xr0-tiny", "libero", "pick up the bowl")
    assert "family xr0" in xr0 and "actions: 30, 5, 16" in xr0 and "<|vision_start|>" in xr0
    positions = int(xr0.split("example prefix (robot state all zeros): ")[1].split(" ")[0])
    text = xr0.split("  text: ")[1]
    assert text.count("<|image_pad|>") == 2 * 4  # two cameras, 64 px: a 2x2 merged grid each
    # byte-level built-in tokenizer: one position per byte of text outside the special tokens, one per special token
    specials = ["<|im_start|>", "<|im_end|>", "<|vision_start|>", "<|vision_end|>", "<|image_pad|>"]
    plain = ast.literal_eval(text)  # the report prints the prefix's repr
    n_special = sum(plain.count(t) for t in specials)
    for t in specials:
        plain = plain.replace(t, "")
    assert positions == n_special + len(plain.encode())
    big = builtin_report("xr0", "libero", "pick up the bowl")
    assert "4716.3 M parameters" in big and "example prefix: skipped" in big
