"""Real-time chunking through the server: a request's `prev_actions` / `inference_delay` give the local RTC chunk;
robots with different delays batched together each get what they get alone; the server estimates a delay a robot
does not send; malformed fields are named and the connection stays usable."""
import math
import threading

import numpy as np
import pytest
import torch

from oxygen_gym import MultiTaskPolicy, RTCConfig
from oxygen_gym.eval.bench.serve_load import start_server
from oxygen_gym.serve.batch_loop import SessionEngine, session_policy
from oxygen_gym.serve.client import RemotePolicy, ServerError
from oxygen_gym.serve.server import PolicyServer, ServeConfig
from policy_obs import make_obs

ACTION_ATOL = 1e-5  # batched vs alone, as tests/serve/test_serve_equivalence.py (RTC rows: tests/engine/test_rtc.py measures)
RTC = RTCConfig(method="guided", schedule="exp")


def _policy(**kw):
    return MultiTaskPolicy.from_pretrained("tiny", robot="libero", decode_budget=2, seed=0, rtc=RTC, **kw)


def _prev(robot: int, step: int, n: int = 8) -> np.ndarray:
    return np.random.default_rng(100 * robot + step).normal(size=(n, 7)).astype(np.float32)


# robot -> its delay (None: plain requests, as openpi-client sends)
DELAYS = {0: 1, 1: 4, 2: None}
STEPS = 3


def _call(policy, robot, step, obs):
    d = DELAYS[robot]
    if d is None or step == 0:
        return policy.act(obs)[0]
    return policy.act(obs, prev_actions=_prev(robot, step), inference_delay=d)[0]


def test_robots_with_different_delays_batched_get_what_they_get_alone():
    obs = {r: [make_obs("libero", np.random.default_rng(10 * r + s)) for s in range(STEPS)] for r in DELAYS}
    alone = {}
    for r in DELAYS:
        with _policy(num_slots=4) as p:
            alone[r] = [_call(p, r, s, obs[r][s]) for s in range(STEPS)]
    server = PolicyServer(_policy(num_slots=1), ServeConfig(max_robots=3, window_ms=300))
    sessions = {}
    for r in DELAYS:
        server.engine.register(r)
        sessions[r] = session_policy(server.template, SessionEngine(server.engine, r))
    got = {r: [] for r in DELAYS}
    errors = []

    def run(r, s):
        try:
            got[r].append(_call(sessions[r], r, s, obs[r][s]))
        except Exception as e:  # noqa: BLE001 - re-raised below
            errors.append(e)

    for s in range(STEPS):
        threads = [threading.Thread(target=run, args=(r, s)) for r in DELAYS]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=120)
        assert not errors, errors
    robots_per_batch = [b["robots"] for b in server.engine.batches]
    for r in DELAYS:
        server.engine.unregister(r).result(timeout=60)
    server.close()
    assert max(robots_per_batch) >= 2, f"frames never met in a batch: {robots_per_batch}"
    for r in DELAYS:
        for s in range(STEPS):
            torch.testing.assert_close(got[r][s], alone[r][s], atol=ACTION_ATOL, rtol=1e-5,
                                       msg=lambda m: f"robot {r} step {s}: {m}")
    with _policy(num_slots=4) as plain:  # robot 1's frame 1 without RTC: the guidance did change it
        plain.act(obs[1][0])
        assert not np.allclose(alone[1][1], plain.act(obs[1][1])[0], atol=1e-3)


@pytest.fixture(scope="module")
def server():
    srv = start_server("rtc", ["--checkpoint", "tiny", "--robot", "libero", "--no-language", "--rtc-schedule", "exp"],
                       threads=1, max_seconds=240, startup_s=180)
    yield srv
    srv.stop()


def test_a_remote_rtc_request_gets_the_local_rtc_chunk(server):
    rng = np.random.default_rng(0)
    observations = [make_obs("libero", rng) for _ in range(3)]
    with RemotePolicy(server.uri) as remote, _policy(num_slots=1, tasks=()) as local:
        assert remote.action_heads == ["actions"] and remote.horizon == 10
        for step, obs in enumerate(observations):
            kw = {} if step == 0 else {"prev_actions": _prev(0, step), "inference_delay": 2 + step}
            want, _ = local.act(obs, **kw)
            got, updates = remote.act(obs, **kw)
            np.testing.assert_allclose(got, want, atol=ACTION_ATOL, err_msg=f"step {step}")
            assert updates == []
            if kw:
                assert remote.last_reply["rtc"] == {"inference_delay": 2 + step, "estimated": False}
            else:
                assert "rtc" not in remote.last_reply


def test_the_server_estimates_a_delay_the_robot_does_not_send(server):
    """ceil(max reply latency of the robot's calls after its first / 50 ms at LIBERO's 20 Hz), none before."""
    rng = np.random.default_rng(1)
    with RemotePolicy(server.uri) as remote:
        latencies, delays = [], []
        for step in range(4):
            remote.act(make_obs("libero", rng), prev_actions=_prev(0, step))
            rtc = remote.last_reply["rtc"]
            assert rtc["estimated"] is True
            delays.append(rtc["inference_delay"])
            latencies.append(remote.last_reply["server_timing"]["infer_ms"])
        assert delays[:2] == [0, 0]  # the first call is the cold start: left out
        for step in (2, 3):
            assert delays[step] == min(10, math.ceil(max(latencies[1:step]) / 50.0))


@pytest.mark.parametrize("fields, named", [
    ({"prev_actions": np.zeros((10, 6), np.float32)}, r"prev_actions: expected shape \(n, 7\)"),
    ({"prev_actions": np.full((10, 7), np.nan, np.float32)}, "prev_actions: holds NaN"),
    ({"prev_actions": np.zeros((10, 7), np.float32), "inference_delay": 11}, r"inference_delay: expected an int in \[0, 10\]"),
    ({"prev_actions": np.zeros((10, 7), np.float32), "inference_delay": "2"}, "inference_delay: expected an int"),
    ({"inference_delay": 2}, "inference_delay: given without prev_actions"),
    ({"prev_actions": {"fast": np.zeros((10, 7), np.float32)}}, r"prev_actions: unknown action head\(s\) \['fast'\]"),
])
def test_malformed_rtc_fields_are_named_and_the_connection_stays_open(server, fields, named):
    obs = make_obs("libero", np.random.default_rng(2))
    with RemotePolicy(server.uri) as remote:
        with pytest.raises(ServerError, match=f"bad message: {named}"):
            remote._call({**obs, **fields})
        actions, _ = remote.act(obs)  # the same connection still serves
        assert actions.shape == (10, 7)


def test_the_remote_policy_connects_and_closes_without_deprecation_warnings(server):
    """websockets >= 16 warns on a connect() not entered as a context manager (a user's loop saw it on every run)."""
    import warnings

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with RemotePolicy(server.uri) as remote:
            remote.act(make_obs("libero", np.random.default_rng(2)))
    assert not [w for w in caught if issubclass(w.category, DeprecationWarning)], [str(w.message) for w in caught]
