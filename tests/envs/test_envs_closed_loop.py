"""The main job in small: the built-in `tiny` policy drives LIBERO closed-loop through run_episode and an annotated
video comes out (two policy calls; the model is random-initialised, so only the plumbing is judged)."""
import json

import numpy as np
import pytest

gym = pytest.importorskip("gymnasium")
pytest.importorskip("libero")
imageio = pytest.importorskip("imageio.v2")

import oxygen_gym.envs  # noqa: E402,F401
from oxygen_gym.envs import run_episode  # noqa: E402
from oxygen_gym.envs.video import PANEL_BG  # noqa: E402

try:
    from oxygen_gym.policies import LanguageTask, MultiTaskPolicy
except ImportError as e:  # pragma: no cover - only while policies/ is being written
    MultiTaskPolicy = None
    _why = f"oxygen_gym.policies.MultiTaskPolicy is not importable yet ({e})"

SIZE = 64


@pytest.mark.skipif(MultiTaskPolicy is None, reason=globals().get("_why", ""))
def test_tiny_policy_closed_loop_writes_an_annotated_video(tmp_path):
    policy = MultiTaskPolicy.from_pretrained(
        "tiny", robot="libero",
        tasks=[LanguageTask("narrate", prompt="Describe what the robot is doing.", max_new_tokens=8)],
        decode_budget=2,
    )
    env = gym.make("oxygen_gym/LIBERO-v0", suite="libero_spatial", task_id=0, camera_size=SIZE, fast_render=True,
                   fast_reset=True)
    try:
        result = run_episode(env, policy, max_steps=10, video_dir=tmp_path, init_state=0)
    finally:
        env.close()
        if hasattr(policy, "close"):
            policy.close()

    replan = 5  # openpi preset
    assert result.steps == 10 and result.calls == 2 and result.replan == replan
    assert result.latency_source == "policy"
    assert result.latencies_ms[-1] == pytest.approx(policy.last_frame["frame_ms"])
    assert result.tokens > 0 and result.tokens_per_s > 0 and result.action_hz > 0
    assert {"prefill", "denoise", "decode"} <= set(result.stage_ms)
    assert result.narration and all(n["task"] == "narrate" for n in result.narration)
    assert result.narration[0]["frame"] == 0 and result.narration[0]["start_step"] == 0
    json.dumps(result.to_dict())

    assert result.video_path.endswith("libero_spatial_task0_seed7_ep0_failure.mp4")
    with imageio.get_reader(result.video_path, format="FFMPEG") as reader:
        frames = [f for f in reader]
    assert len(frames) == result.steps + 1  # the reset observation, then one frame per control step
    width = -(-2 * SIZE // 16) * 16
    assert frames[0].shape[1] == width and frames[0].shape[0] > SIZE and frames[0].shape[0] % 16 == 0
    panel = frames[0][SIZE:].astype(int)
    assert (np.abs(panel - np.array(PANEL_BG)).max(axis=-1) > 100).mean() > 0.01  # the overlay's text is there
    # later frames show the policy's timing, absent from the reset frame: the panel changes
    assert np.abs(frames[-1][SIZE:].astype(int) - panel).mean() > 0.5
