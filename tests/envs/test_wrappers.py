"""Wrappers, VideoRecorder and run_episode on the real ALOHA sim (the cheapest of the three to step), driven by a
scripted joint-space controller that also narrates its own state."""
import json
import time
from dataclasses import dataclass

import numpy as np
import pytest

gym = pytest.importorskip("gymnasium")
pytest.importorskip("gym_aloha")
imageio = pytest.importorskip("imageio.v2")

import oxygen_gym.envs  # noqa: E402,F401
from oxygen_gym.envs import (  # noqa: E402
    ActionChunkPlayer, NarrationRecorder, PolicyCall, StepTimer, VideoRecorder, notify_policy_call, run_episode,
)
from oxygen_gym.envs.video import PANEL_BG  # noqa: E402

try:
    from oxygen_gym.policies.language import LanguageUpdate
except ImportError:  # policies not there yet: the same fields, which is all the wrappers read
    @dataclass(frozen=True)
    class LanguageUpdate:
        request_id: int
        task: str
        frame: int
        new_token_ids: tuple
        new_text: str
        text: str
        done: bool

SIZE = 48


class JointReachPolicy:
    """Scripted ALOHA controller: each call plans a straight joint-space path from the measured state towards a fixed
    target pose, opening both grippers. It narrates the left gripper's measured opening, two words per call, so one
    narration spans several calls, and it times itself as a policy does (perf_counter around its own work)."""

    def __init__(self, horizon: int = 20, words_per_call: int = 2, report_latency: bool = True):
        self.horizon, self.words_per_call, self.report_latency = horizon, words_per_call, report_latency
        self.target = None
        self.reset()

    def reset(self):
        self.frame, self.next_id, self.open_requests = 0, 0, []
        self.last_frame = None

    def act(self, obs):
        t0 = time.perf_counter()
        state = obs["state"].astype(np.float64)
        if self.target is None:
            self.target = state.copy()
            self.target[[1, 8]] -= 0.3  # lift both shoulders
        self.target[[6, 13]] = 1.0
        ramp = np.linspace(1.0 / self.horizon, 1.0, self.horizon)[:, None]
        actions = (state + ramp * (self.target - state)).astype(np.float32)

        words = f"left gripper opening is {state[6]:.2f}".split()
        self.open_requests.append({"id": self.next_id, "frame": self.frame, "words": words, "said": 0})
        self.next_id += 1
        updates = []
        for req in list(self.open_requests):
            new = req["words"][req["said"]: req["said"] + self.words_per_call]
            req["said"] += len(new)
            done = req["said"] >= len(req["words"])
            text = " ".join(req["words"][: req["said"]])
            updates.append(LanguageUpdate(req["id"], "narrate", req["frame"], tuple(range(len(new))),
                                          " ".join(new), text, done))
            if done:
                self.open_requests.remove(req)
        ms = (time.perf_counter() - t0) * 1e3
        if self.report_latency:
            tokens = sum(len(u.new_token_ids) for u in updates)
            self.last_frame = {"frame_ms": ms, "stage_ms": {"manager": ms}, "tokens": tokens,
                               "batch_size": len(updates)}
        self.frame += 1
        return actions, updates


class RecordActions(gym.Wrapper):
    """Keeps every action that reached the env."""

    def __init__(self, env):
        super().__init__(env)
        self.actions = []

    def step(self, action):
        self.actions.append(np.array(action))
        return self.env.step(action)


@pytest.fixture(scope="module")
def aloha():
    env = gym.make("oxygen_gym/ALOHA-v0", task="transfer_cube", camera_size=SIZE, fast_render=True)
    yield env
    env.close()


def test_action_chunk_player_plays_the_first_replan_actions(aloha):
    recorder = RecordActions(aloha)
    player = ActionChunkPlayer(recorder, replan=3)
    obs, _ = player.reset(seed=0)
    chunk = obs["state"] + np.linspace(0, 0.2, 5, dtype=np.float32)[:, None]
    obs, reward, terminated, truncated, info = player.step(chunk)
    assert info["chunk_steps"] == 3 and len(recorder.actions) == 3
    np.testing.assert_array_equal(np.stack(recorder.actions), chunk[:3])
    assert player.action_space.shape == (3, 14)

    player.step(chunk[:2])  # a shorter chunk plays whole
    assert len(recorder.actions) == 5
    with pytest.raises(ValueError, match="chunk"):
        player.step(chunk[0])
    with pytest.raises(ValueError, match="chunk"):
        player.step(chunk[:, :7])
    with pytest.raises(ValueError, match="replan"):
        ActionChunkPlayer(aloha, replan=0)


def test_action_chunk_player_stops_when_the_episode_ends():
    env = gym.make("oxygen_gym/ALOHA-v0", task="insertion", camera_size=SIZE, fast_render=True, max_steps=2)
    try:
        player = ActionChunkPlayer(env, replan=5)
        obs, _ = player.reset(seed=0)
        _, _, terminated, truncated, info = player.step(np.repeat(obs["state"][None], 5, axis=0))
        assert truncated and not terminated and info["chunk_steps"] == 2
    finally:
        env.close()


def test_step_timer_reports_the_policy_latency_env_time_and_rates(aloha):
    timer = StepTimer(aloha)
    obs, _ = timer.reset(seed=0)
    notify_policy_call(timer, PolicyCall(index=0, step=0, n_actions=4, latency_ms=40.0, tokens=6))
    infos = [timer.step(obs["state"])[4]["timing"] for _ in range(2)]
    assert infos[0]["policy_ms"] == 40.0 and infos[0]["action_hz"] == pytest.approx(100.0)
    assert infos[0]["tokens_per_s"] == pytest.approx(150.0)
    assert infos[0]["new_call"] and not infos[1]["new_call"]
    assert all(t["env_ms"] > 0 for t in infos)
    assert infos[1]["loop_hz"] == pytest.approx(1e3 / (infos[1]["env_ms"] + 10.0))
    assert [r["step"] for r in timer.records] == [1, 2]


def test_narration_recorder_keeps_each_request_with_the_steps_it_spans(aloha):
    narrator = NarrationRecorder(aloha)
    obs, _ = narrator.reset(seed=0)
    u = lambda rid, frame, text, done: LanguageUpdate(rid, "narrate", frame, (1,), text, text, done)  # noqa: E731
    notify_policy_call(narrator, PolicyCall(0, 0, 2, 1.0, updates=(u(0, 0, "the arm", False),)))
    narrator.step(obs["state"])
    _, _, _, _, info = narrator.step(obs["state"])
    assert info["narration"] == {"narrate": "the arm"}  # longest in flight
    updates = (u(0, 0, "the arm rises", True), u(1, 1, "it", False))
    notify_policy_call(narrator, PolicyCall(1, 2, 2, 1.0, updates=updates))
    _, _, _, _, info = narrator.step(obs["state"])
    assert info["narration"] == {"narrate": "the arm rises"}  # finished beats in flight
    first, second = narrator.narration()
    assert first == {"request_id": 0, "task": "narrate", "frame": 0, "start_step": 0, "end_step": 2, "last_frame": 1,
                     "text": "the arm rises", "done": True}
    assert second["start_step"] == 2 and second["frame"] == 1 and not second["done"]


def read_frames(path):
    with imageio.get_reader(str(path), format="FFMPEG") as reader:
        return [frame for frame in reader]  # not list(reader): its length is reported as infinite


def _panel_and_views(frame, camera_row_hw):
    h, w = camera_row_hw
    return frame[h:], frame[:h, :w]


def test_run_episode_closes_the_loop_and_writes_an_annotated_video(aloha, tmp_path):
    policy = JointReachPolicy()
    result = run_episode(aloha, policy, max_steps=12, replan=5, video_dir=tmp_path, seed=0)
    assert result.steps == 12 and result.calls == 3 and result.replan == 5  # 5 + 5 + 2
    assert result.truncated and not result.success and result.latency_source == "policy"
    assert len(result.latencies_ms) == 3 and all(ms > 0 for ms in result.latencies_ms)
    assert result.tokens == 2 + (2 + 2) + (1 + 2 + 2) and result.env_ms_mean > 0  # five words, two per call
    texts = [n["text"] for n in result.narration]
    assert texts[0].startswith("left gripper opening is") and result.narration[0]["done"]
    assert result.narration[0]["start_step"] == 0 and result.narration[0]["end_step"] == 10
    json.dumps(result.to_dict())

    # the video: one frame per observation (reset + 12 steps), camera views side by side over the text panel
    path = result.video_path
    assert path is not None and path.endswith("aloha_transfer_cube_seed0_ep0_failure.mp4")
    frames = read_frames(path)
    assert len(frames) == 13
    width = -(-3 * SIZE // 16) * 16
    assert frames[0].shape[1] == width and frames[0].shape[0] % 16 == 0
    panel, views = _panel_and_views(frames[0], (SIZE, 3 * SIZE))
    blank = np.full_like(panel, PANEL_BG)
    assert (np.abs(panel.astype(int) - blank).max(axis=-1) > 100).mean() > 0.01  # text drawn on the panel
    obs, _ = aloha.reset(seed=0)
    expected = np.concatenate([obs["images"][c] for c in ("high", "left_wrist", "right_wrist")], axis=1)
    assert np.abs(views.astype(int) - expected).mean() < 12  # the cameras, through lossy H.264
    late_panel, _ = _panel_and_views(frames[-1], (SIZE, 3 * SIZE))
    assert np.abs(late_panel.astype(int) - panel).mean() > 0.5  # the overlay changes as the episode runs


def test_run_episode_times_a_policy_without_last_frame_by_wall_clock(aloha):
    policy = JointReachPolicy(report_latency=False)
    result = run_episode(aloha, policy, max_steps=4, replan=4, seed=1)
    assert result.latency_source == "wall" and result.calls == 1 and result.latencies_ms[0] > 0
    assert result.video_path is None and result.info["episode"] == 0 and result.info["seed"] == 1


def test_run_episode_passes_reset_options_and_a_video_name(aloha, tmp_path):
    result = run_episode(aloha, JointReachPolicy(), max_steps=3, replan=3, seed=2, init_state=5,
                         video_dir=tmp_path, video_name="shard0/run7")
    assert result.info["episode"] == 5 and result.episode_id == "aloha/transfer_cube/seed2/ep5"
    assert result.video_path.endswith("shard0_run7_failure.mp4") and len(read_frames(result.video_path)) == 4


def test_run_episode_rejects_bad_chunks(aloha):
    class Short(JointReachPolicy):
        def act(self, obs):
            actions, updates = super().act(obs)
            return actions[:2], updates

    with pytest.raises(ValueError, match="replan"):
        run_episode(aloha, Short(), max_steps=4, replan=4)

    class WrongDim(JointReachPolicy):
        def act(self, obs):
            actions, updates = super().act(obs)
            return actions[:, :7], updates

    with pytest.raises(ValueError, match=r"\(horizon, 14\)"):
        run_episode(aloha, WrongDim(), max_steps=4, replan=4)
    with pytest.raises(ValueError, match="max_steps"):
        run_episode(aloha, JointReachPolicy(), max_steps=0)


def test_video_is_named_by_outcome(aloha, tmp_path):
    """Close the left gripper on the cube (the ALOHA success test's recipe) under a VideoRecorder."""
    from test_envs_aloha import close_left_gripper_on_cube

    video = VideoRecorder(aloha, tmp_path, text_lines=3)
    close_left_gripper_on_cube(video)
    assert video.last_path.name == "aloha_transfer_cube_seed0_ep0_success.mp4"
    assert len(read_frames(video.last_path)) == video.frames_written
    assert not list(tmp_path.glob(".*.recording.mp4"))
