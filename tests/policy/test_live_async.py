"""AsyncPolicy on a real MuJoCo env: every executed action is traced back to (chunk, index) through what the simulator
was given. No action runs twice, each runs at the step it was planned for, switch and blend hand-overs match a
hand computation, rtc hands act() the queue the robot will still execute, and simulated latency is deterministic."""
import json

import numpy as np
import pytest

gym = pytest.importorskip("gymnasium")
pytest.importorskip("mujoco")

from live_fakes import ActionLog, ChunkPolicy, RtcChunkPolicy, reacher  # noqa: E402

from oxygen_gym.envs.episode import run_episode  # noqa: E402
from oxygen_gym.envs.live_episode import run_live_episode  # noqa: E402
from oxygen_gym.policies.async_policy import AsyncPolicy  # noqa: E402


def traced(env: ActionLog, policy: ChunkPolicy, live: dict) -> list:
    """Per step: (chunk, index) of the action the sim got, or None for a step the clock held (or an action no chunk
    holds, such as a blend)."""
    held = set(live["held_at"])
    return [None if s in held else policy.identity.get(a.tobytes()) for s, a in enumerate(env.actions)]


def check_alignment(trace: list, records: list[dict], execution: str) -> None:
    """Each chunk's actions ran once each, in order, at the step they were planned for."""
    seen = set()
    for step, item in enumerate(trace):
        if item is None:
            continue
        assert item not in seen, f"step {step}: {item} executed twice"
        seen.add(item)
        chunk, index = item
        rec = records[chunk]
        origin = rec["handover_step"] if execution == "sync" else rec["obs_step"]
        assert index == step - origin, f"step {step}: chunk {chunk} index {index}, planned for {origin + index}"
        # the newest chunk handed over by now is the one executing
        newest = max(r["index"] for r in records if r["handover_step"] is not None and r["handover_step"] <= step)
        assert chunk == newest, f"step {step}: chunk {chunk} ran after chunk {newest} took over"


@pytest.mark.parametrize("execution,ms", [("sync", 40), ("async", 40), ("async", 100), ("async", 150)])
def test_no_action_twice_none_skipped(execution, ms):
    env = ActionLog(reacher())
    policy = ChunkPolicy(horizon=8)
    result = run_live_episode(env, policy, latency=f"fixed:{ms}", execution=execution, replan=4, max_steps=60, seed=1)
    trace = traced(env, policy, result.live)
    records = result.live["calls"]
    check_alignment(trace, records, execution)
    # nothing skipped that should run: between hand-overs, the executing chunk plays every index in turn; a step
    # without an action happens only when the queue is dry (held), never while actions are queued
    for step, item in enumerate(trace):
        if item is None:
            assert any(r["obs_step"] <= step and (r["handover_step"] is None or step < r["handover_step"])
                       for r in records), f"step {step} held with no call in flight"
    held = sum(x is None for x in trace)
    assert held == result.live["held_steps"]
    if execution == "async" and ms <= 80:  # threshold 4 > delay: the queue never runs dry after the first chunk
        assert held == records[0]["delay_steps"]


def test_switch_matches_hand_computation():
    """horizon 6, threshold 3, 40 ms = 2 steps: calls at steps 0, 3, 6, ...; each takes over at index 2."""
    env = ActionLog(reacher())
    policy = ChunkPolicy(horizon=6)
    result = run_live_episode(env, policy, latency="fixed:40", execution="async", handover="switch", replan=3,
                              threshold=3, max_steps=11, seed=2)
    assert traced(env, policy, result.live) == [None, None, (0, 2), (0, 3), (0, 4), (1, 2), (1, 3), (1, 4), (2, 2), (2, 3), (2, 4)]


def test_blend_matches_hand_computation():
    """Same schedule; at each hand-over the one overlapping step gets 0.7 new + 0.3 old, the rest is the new chunk."""
    env = ActionLog(reacher())
    policy = ChunkPolicy(horizon=6)
    run_live_episode(env, policy, latency="fixed:40", execution="async", handover="blend", replan=3, threshold=3,
                     max_steps=11, seed=2)
    c = policy.chunks
    expected = [None, None, c[0][2], c[0][3], c[0][4], 0.7 * c[1][2] + 0.3 * c[0][5], c[1][3], c[1][4],
                0.7 * c[2][2] + 0.3 * c[1][5], c[2][3], c[2][4]]
    for step, (got, want) in enumerate(zip(env.actions, expected)):
        if want is not None:
            np.testing.assert_allclose(got, want, rtol=0, atol=1e-7, err_msg=f"step {step}")
    assert len(env.actions) == 11


def test_blend_weight_one_is_switch():
    logs = []
    for handover, w in (("switch", 0.7), ("blend", 1.0)):
        env = ActionLog(reacher())
        run_live_episode(env, ChunkPolicy(horizon=8), latency="fixed:60", execution="async", handover=handover,
                         blend_weight=w, replan=4, max_steps=30, seed=3)
        logs.append(np.stack(env.actions))
    np.testing.assert_array_equal(*logs)


def test_zero_latency_live_equals_todays_loop():
    """fixed:0 sync is run_episode exactly, and async-switch at 0 ms with the sync cadence is the same again."""
    runs = []
    for live in (None, "sync", "async"):
        env = ActionLog(reacher())
        policy = ChunkPolicy(horizon=8)
        if live is None:
            run_episode(env, policy, replan=4, max_steps=30, seed=4)
        else:
            run_live_episode(env, policy, latency="fixed:0", execution=live, replan=4, max_steps=30, seed=4)
        runs.append(np.stack(env.actions))
    np.testing.assert_array_equal(runs[0], runs[1])
    np.testing.assert_array_equal(runs[0], runs[2])


def test_rtc_gets_the_queue_the_robot_still_executes():
    """prev_actions[j] is exactly what the sim executes j steps after the observation, for j < d, and d is the
    clock's ceil(latency / dt) (exact for a fixed latency)."""
    env = ActionLog(reacher())
    policy = RtcChunkPolicy(horizon=10)
    result = run_live_episode(env, policy, latency="fixed:60", execution="async", handover="rtc", replan=5,
                              max_steps=50, seed=5)
    records = result.live["calls"]
    assert policy.given[0]["prev_actions"] is None  # the first call has nothing queued
    for rec, given in zip(records[1:], policy.given[1:]):
        prev, d = given["prev_actions"], given["inference_delay"]
        assert d == 3 == rec["inference_delay"] and prev.shape == (rec["prev_len"], 2) and rec["prev_len"] == 5
        for j in range(d):
            if rec["obs_step"] + j < len(env.actions):
                np.testing.assert_array_equal(env.actions[rec["obs_step"] + j], prev[j])


@pytest.mark.parametrize("latency", ["fixed:70", "model"])
def test_simulated_latency_is_deterministic_whatever_the_thread_does(latency, tmp_path):
    """Two runs whose policy sleeps different real times give the same executed actions and records."""
    if latency == "model":
        path = tmp_path / "costs.json"
        path.write_text(json.dumps({"prefill_ms": 30, "denoise_step_ms": 2, "denoise_steps": 10,
                                    "decode_step_ms": 15}))
        latency = f"model:{path}"
    out = []
    for sleeps in ([0.0, 0.03], [0.04, 0.0]):
        env = ActionLog(reacher())
        policy = RtcChunkPolicy(horizon=8, sleep_s=sleeps, frame_decode_steps=2)
        result = run_live_episode(env, policy, latency=latency, execution="async", handover="rtc", replan=4,
                                  max_steps=40, seed=6)
        keep = ("obs_step", "handover_step", "delay_steps", "start_index", "free_step", "held_steps",
                "inference_delay", "actions_ms", "busy_ms")
        out.append((np.stack(env.actions), [{k: c[k] for k in keep} for c in result.live["calls"]]))
    np.testing.assert_array_equal(out[0][0], out[1][0])
    assert out[0][1] == out[1][1]


def test_model_latency_hides_the_decode_behind_execution(tmp_path):
    """Actions after prefill 30 + 10 x 2 ms = 50 ms (3 steps of 20 ms), the policy free after 2 decode steps x 15 ms
    more = 80 ms (4 steps). Without on_actions the chunk waits for the decode too (4 steps)."""
    path = tmp_path / "costs.json"
    path.write_text(json.dumps({"prefill_ms": 30, "denoise_step_ms": 2, "denoise_steps": 10, "decode_step_ms": 15}))
    for hide, delay in ((True, 3), (False, 4)):
        env = ActionLog(reacher())
        policy = RtcChunkPolicy(horizon=8, frame_decode_steps=2)
        result = run_live_episode(env, policy, latency=f"model:{path}", execution="async", handover="switch",
                                  replan=4, max_steps=30, seed=7, hide_decode=hide)
        calls = [c for c in result.live["calls"] if c["free_step"] is not None and c["handover_step"] is not None]
        assert result.live["decode_hidden"] is hide
        for c in calls:
            assert c["delay_steps"] == delay and c["busy_ms"] == 80 and c["free_step"] - c["obs_step"] >= 4


def test_bad_arguments_name_the_field():
    policy = ChunkPolicy()
    for kwargs, match in [({"execution": "later"}, "execution"), ({"handover": "merge"}, "handover"),
                          ({"control_dt": 0}, "control_dt"), ({"blend_weight": 2}, "blend_weight"),
                          ({"threshold": -1}, "threshold"), ({"handover": "rtc"}, "prev_actions"),
                          ({"latency": "soon"}, "--live")]:
        with pytest.raises(ValueError, match=match):
            AsyncPolicy(policy, **{"control_dt": 0.02, **kwargs})


def test_policy_errors_surface_in_the_control_loop():
    class Broken(ChunkPolicy):
        def act(self, obs):
            raise RuntimeError("camera unplugged")

    with AsyncPolicy(Broken(), control_dt=0.02, latency="fixed:20") as ap:
        with pytest.raises(RuntimeError, match="camera unplugged"):
            for _ in range(3):
                ap.next_action(np.zeros(3))
