"""Evaluation with real checkpoint layouts: the convention flags reach the policy, the presets execute what the
references execute (openpi: replan_steps of the chunk; lerobot: every action of n_action_steps), LIBERO resets are
hard by default with --fast-reset recorded, and the references' seeding gives reproducible scenes."""
import json

import numpy as np
import pytest
from checkpoint_layouts import feature_stats, tiny_model, write_lerobot

from oxygen_gym.cli import main


def test_convention_flags_reach_the_eval_config(tmp_path):
    import argparse

    from oxygen_gym.eval.libero.eval_command import add_arguments, config_from_args

    parser = argparse.ArgumentParser()
    add_arguments(parser)
    args = parser.parse_args(["libero", "--checkpoint", str(tmp_path), "--norm-stats", "identity", "--asset-id", "droid",
                              "--camera-map", "base=image,wrist=image2", "--no-discrete-state", "--action-horizon",
                              "16", "--family", "openpi", "--tokenizer", "/t/tokenizer.model"])
    cfg = config_from_args(args)
    assert (cfg.norm_stats, cfg.asset_id, cfg.discrete_state, cfg.action_horizon, cfg.family, cfg.tokenizer) == (
        "identity", "droid", False, 16, "openpi", "/t/tokenizer.model")
    assert cfg.camera_map == {"base": "image", "wrist": "image2"} and cfg.fast_reset is False
    assert "fast_reset" in cfg.result_fields() and "tokenizer" not in cfg.result_fields()
    with pytest.raises(ValueError, match="CAMERA=FEATURE"):
        config_from_args(parser.parse_args(["libero", "--camera-map", "base"]))


@pytest.mark.parametrize("protocol, replan, resize", [("openpi", 5, "pil"), ("lerobot", 10, "torch")])
def test_lerobot_checkpoint_runs_in_eval_with_the_protocols_replan(tmp_path, protocol, replan, resize):
    stats = {"observation.state": feature_stats(8, 1), "action": feature_stats(7, 2)}
    ck = write_lerobot(tmp_path / "ck", tiny_model(), "0.4.4", stats=stats, n_action_steps=10)
    out = tmp_path / "run"
    argv = ["eval", "libero", "--suite", "libero_spatial", "--tasks", "0", "--episodes", "1", "--max-steps", "12",
            "--checkpoint", str(ck), "--protocol", protocol, "--fast-reset", "--fast-render", "--out", str(out),
            "--no-progress"]
    with pytest.warns(UserWarning, match="lerobot version guessed"):
        assert main(argv) == 0
    rec = json.loads((out / "episodes.jsonl").read_text().splitlines()[0])
    assert rec["status"] == "ok", rec.get("error")
    assert rec["replan"] == replan and rec["calls"] == -(-12 // replan)
    from oxygen_gym.eval.libero.eval_config import EvalConfig
    from oxygen_gym.eval.libero.worker import EpisodeWorker

    worker = EpisodeWorker(EvalConfig(checkpoint=str(ck), protocol=protocol, fast_reset=True, out=str(out)))
    assert worker.convention_kwargs()["image_resize"] == resize


@pytest.mark.slow
def test_hard_reset_reproduces_the_references_seeding():
    """openpi: one seed per task, episode i is the (i+1)-th hard reset (replayed when run out of order); lerobot:
    seed + episode before each hard reset. ~2 minutes: each hard reset rebuilds the sim (3-7 s on 2 cores)."""
    import gymnasium as gym

    import oxygen_gym.envs  # noqa: F401

    env = gym.make("oxygen_gym/LIBERO-v0", suite="libero_spatial", task_id=0, camera_size=64, fast_render=True)
    try:
        in_order = [env.reset(seed=7, options={"init_state": i})[0]["images"]["base"].copy() for i in range(3)]
        obs, info = env.reset(seed=7, options={"init_state": 2})  # out of order: replays resets 0 and 1 first
        assert info["reset"] == "hard"
        np.testing.assert_array_equal(obs["images"]["base"], in_order[2])
        assert not np.array_equal(in_order[1], in_order[2])
    finally:
        env.close()
    env = gym.make("oxygen_gym/LIBERO-v0", suite="libero_spatial", task_id=0, camera_size=64, fast_render=True,
                   protocol="lerobot")
    try:
        a = env.reset(seed=1000, options={"init_state": 1})[0]["images"]["base"].copy()
        env.reset(seed=1000, options={"init_state": 0})
        b = env.reset(seed=1000, options={"init_state": 1})[0]["images"]["base"]
        np.testing.assert_array_equal(a, b)
    finally:
        env.close()
