"""`oxygen-gym inspect RUN_FOLDER` on a StarVLA run (the family hook's `inspect`): each head with what it reads,
its horizon and steps, the backbone and where its config came from, the statistics' formula; errors name the fix."""
import argparse

import pytest

from oxygen_gym.policies import inspect_command as report
from starvla_layout import write_run


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    return write_run(tmp_path_factory.mktemp("starvla_i"))


def _inspect(argv, capsys) -> tuple[int, str, str]:
    parser = argparse.ArgumentParser()
    report.add_arguments(parser)
    rc = report.run(parser.parse_args(argv))
    out = capsys.readouterr()
    return rc, out.out, out.err


def test_inspect_shows_each_head_what_it_reads_horizon_and_steps(run, capsys):
    _, root, vlm = run
    rc, out, _ = _inspect([str(root), "--vlm-config", str(vlm), "--prompt", "stack the cups"], capsys)
    assert rc == 0, out
    lines = out.splitlines()
    assert "family:     starvla (framework action_heads; weights steps_1000_pytorch_model.safetensors)" in lines
    assert "heads:      ['pi', 'groot', 'oft'] of the run's ['pi', 'groot', 'oft']" in lines
    pi, groot, oft = (next(line for line in lines if line.startswith(f"  {h} ")) for h in ("pi    ", "groot ", "oft   "))
    assert "block i cross-attends to backbone layer i's output (all 3)" in pi and "horizon 6, 3 Euler steps" in pi
    assert "over the last layer's output before the final norm" in groot and "horizon 5, 3 Euler steps" in groot
    assert "4 query tokens" in oft and "horizon 4, 1 pass" in oft
    assert f"config from vlm_config= {vlm}" in out
    assert "min_max of unnorm_key 'franka' (7 dims)" in out and "binary dims (mask False) [6]" in out
    assert "chunk:      pi predicts its horizon; act() returns 6" in lines
    assert "stack the cups [STATE]" in out
    w = lines.index("warnings:")
    assert "action normalisation mode not recorded" in lines[w + 1] and len(lines) == w + 2  # the guesses close the report


def test_inspect_a_subset_and_the_errors(run, capsys):
    _, root, vlm = run
    rc, _, err = _inspect([str(root)], capsys)
    assert rc == 2 and "was not found offline; looked in:" in err and "Pass vlm_config=" in err
    rc, out, _ = _inspect([str(root), "--vlm-config", str(vlm), "--norm-stats", "identity"], capsys)
    assert rc == 0 and "heads:      ['pi', 'groot', 'oft']" in out and "warnings:   none" in out.splitlines()


def test_serve_flags_build_a_starvla_policy_with_a_head_subset(run):
    """serve's --heads and the checkpoint flags (--vlm-config) reach from_pretrained once each."""
    from oxygen_gym.serve.serve_command import add_arguments, build_policy

    _, root, vlm = run
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    args = parser.parse_args(["--checkpoint", str(root), "--vlm-config", str(vlm), "--heads", "oft"])
    policy = build_policy(args)
    try:
        assert policy.action_heads == ["oft"] and list(policy.model.heads) == ["oft"]
    finally:
        policy.close()
