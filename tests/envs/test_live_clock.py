"""The live clock on a real MuJoCo env (Reacher-v5, dt 0.02 s): the sim advances by exactly the counted steps, a
slow policy loses ceil(latency / dt) steps per call, holding follows each env's definition, and latency specs parse."""
import json
import math

import numpy as np
import pytest

gym = pytest.importorskip("gymnasium")
pytest.importorskip("mujoco")

from live_fakes import ActionLog, ChunkPolicy, reacher  # noqa: E402

from oxygen_gym.envs.live_clock import LiveClock, control_dt_of  # noqa: E402
from oxygen_gym.envs.live_episode import run_live_episode  # noqa: E402
from oxygen_gym.policies.live_latency import ModelLatency, parse_latency, steps_for  # noqa: E402

DT = 0.02


def test_steps_for_is_ceil_with_whole_steps_exact():
    assert [steps_for(ms, DT) for ms in (0, 1, 19.99, 20, 20.01, 100, 100 + 1e-12, 100.001, 101)] == [0, 1, 1, 1, 2, 5, 5, 6, 6]
    assert steps_for(100, 0.05) == 2 and steps_for(0.1 + 0.2, 0.0001) == 3  # float rounding of whole steps
    with pytest.raises(ValueError, match="latency"):
        steps_for(-1, DT)


@pytest.mark.parametrize("ms", [0, 20, 30, 100, 101])
def test_sync_clock_loses_exactly_the_counted_steps(ms):
    """sync (blocking), replan 4: every call holds ceil(ms / dt) steps, then plays 4 actions from index 0; the sim's
    own time advances one dt per step, held or not."""
    env = ActionLog(reacher())
    policy = ChunkPolicy(horizon=8)
    steps = 40
    result = run_live_episode(env, policy, latency=f"fixed:{ms}", execution="sync", replan=4, max_steps=steps, seed=0)
    d = math.ceil(ms / 20 - 1e-9)
    period = d + 4
    expected_held = [(s % period) < d for s in range(steps)]
    live_steps = result.live
    assert live_steps["steps"] == steps and env.unwrapped.data.time == pytest.approx(steps * DT)
    assert live_steps["held_steps"] == sum(expected_held)
    assert all(c["delay_steps"] == d and c["clock_steps"] == d and c["held_steps"] == d
               for c in live_steps["calls"] if c["handover_step"] is not None)
    # what the simulator got: holds (repeat of the last command; zeros before any) and chunk actions 0..3 in order
    for s, a in enumerate(env.actions):
        if expected_held[s]:
            prev = env.actions[s - 1] if s else np.zeros(2, np.float32)
            np.testing.assert_array_equal(a, prev)
        else:
            call, index = policy.identity[a.tobytes()]
            assert (call, index) == (s // period, s % period - d)
    assert result.calls == math.ceil(steps / period)


def test_clock_records_every_step_in_info():
    env = LiveClock(reacher())
    assert env.control_dt == DT == control_dt_of(env)
    env.reset(seed=0)
    env.note(chunk=3, index=2, delay_steps=5)
    _, _, _, _, info = env.step(np.full(2, 0.5, np.float32))
    assert info["live"] == {"chunk": 3, "index": 2, "delay_steps": 5, "step": 0, "held": False}
    _, _, _, _, info = env.step(None)
    assert info["live"] == {"step": 1, "held": True} and env.held_steps == 1
    np.testing.assert_array_equal(env.hold_action(), np.full(2, 0.5, np.float32))
    assert env.unwrapped.data.time == pytest.approx(2 * DT)


def test_slow_policy_measured_loses_steps_as_its_wall_time_predicts():
    """A policy that sleeps 70 ms then 110 ms per call: with `measured`, each call's delay is ceil(its wall time /
    dt) (4 or 6 at 20 ms), the robot holds exactly that long in sync, and the sim is paced to the wall clock."""
    env = ActionLog(reacher())
    policy = ChunkPolicy(horizon=6, sleep_s=[0.07, 0.11])
    result = run_live_episode(env, policy, latency="measured", execution="sync", replan=3, max_steps=30, seed=0)
    calls = [c for c in result.live["calls"] if c["handover_step"] is not None]
    assert len(calls) >= 3
    for c in calls:
        assert c["delay_steps"] == steps_for(c["wall_actions_ms"], DT) == c["clock_steps"]
        assert c["held_steps"] == c["delay_steps"]
    assert [c["delay_steps"] >= (4 if i % 2 == 0 else 6) for i, c in enumerate(calls)] == [True] * len(calls)
    assert result.live["held_steps"] == sum(c["held_steps"] for c in result.live["calls"])


def test_hold_is_each_envs_own():
    """LIBERO and DROID: zero motion, last gripper; ALOHA: last command. Checked on the methods the clock calls."""
    from oxygen_gym.envs.aloha import AlohaEnv
    from oxygen_gym.envs.droid import DroidEnv
    from oxygen_gym.envs.libero import LiberoEnv

    last = np.arange(1, 8, dtype=np.float32)
    np.testing.assert_array_equal(LiberoEnv.hold_action(None, last), [0, 0, 0, 0, 0, 0, 7])
    np.testing.assert_array_equal(LiberoEnv.hold_action(None, None), [0, 0, 0, 0, 0, 0, -1])
    np.testing.assert_array_equal(DroidEnv.hold_action(type("E", (), {"action_dim": 8})(), np.arange(8.0)),
                                  [0] * 7 + [7])
    np.testing.assert_array_equal(AlohaEnv.hold_action(None, np.arange(14.0)), np.arange(14.0))
    assert LiberoEnv.control_dt == 0.05 and AlohaEnv.control_dt == 0.02 and DroidEnv.control_dt == pytest.approx(1 / 15)


def test_latency_specs_parse_and_name_the_flag(tmp_path):
    assert parse_latency("measured").name == "measured"
    assert parse_latency("fixed:50").ms == 50.0
    costs = tmp_path / "costs.json"
    costs.write_text(json.dumps({"prefill_ms": 30, "denoise_step_ms": 2, "denoise_steps": 10, "decode_step_ms": 10,
                                 "rtc_denoise_step_ms": 5}))
    model = parse_latency(f"model:{costs}")
    assert isinstance(model, ModelLatency)
    assert model.costs.actions_ms(rtc=False) == 50 and model.costs.actions_ms(rtc=True) == 80
    bench = tmp_path / "results.json"
    bench.write_text(json.dumps({"points": [{"mode": "oxygen", "N": 30, "k": 5, "S": 10, "workload": "fixed",
                                             "stage_ms": {"prefill": 40, "denoise": 20, "decode": 50, "manager": 1},
                                             "other_ms": 1, "decode_steps_per_frame": 5}]}))
    point = parse_latency(f"model:{bench}@fixed|oxygen|N=30|k=5|S=10").costs
    assert (point.prefill_ms, point.denoise_step_ms, point.decode_step_ms, point.overhead_ms) == (40, 2, 10, 2)
    for bad, match in [("fast", "--live"), ("fixed:abc", "--live fixed:MS"), ("fixed:-3", "--live fixed:MS"),
                       (f"model:{tmp_path}/none.json", "no such file"), (f"model:{bench}", "@KEY"),
                       (f"model:{bench}@isolated", "0 points match")]:
        with pytest.raises(ValueError, match=match):
            parse_latency(bad)
    costs.write_text(json.dumps({"prefill_ms": 30}))
    with pytest.raises(ValueError, match="denoise_step_ms"):
        parse_latency(f"model:{costs}")
