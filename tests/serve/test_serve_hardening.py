"""`oxygen-gym serve` as a hostile network would meet it (issue 25), through the real `openpi-client` where a robot
would use it: the API key, a full server's refusal, browser Origins and foreign Host names, oversized prompts,
malformed fields, idle sessions (closed after --idle-timeout-s, never holding the batching window), a disconnected
robot's queued frame (dropped unrun) and what the websocket stats show. One server for most tests, loopback only,
stopping by itself (--max-seconds).
"""
import asyncio
import http.client
import re
import socket
import subprocess
import sys
import time

import numpy as np
import pytest

pytest.importorskip("openpi_client")
from openpi_client import msgpack_numpy  # noqa: E402
from openpi_client.websocket_client_policy import WebsocketClientPolicy  # noqa: E402
from websockets.exceptions import ConnectionClosed, InvalidStatus  # noqa: E402
from websockets.sync.client import connect  # noqa: E402

from oxygen_gym.eval.bench.serve_load import http_stats, openpi_observation, start_server  # noqa: E402

KEY = "test-key-0123456789"
IDLE_S = 4.0
WINDOW_MS = 3000  # long, so that waiting for an idle session (or a gone robot's frame running) would show
AUTH = {"Authorization": f"Api-Key {KEY}"}
PATH = re.compile(r"(/[\w.+-]+){2,}|\w:\\|File \"|\.py\b")


@pytest.fixture(scope="module")
def server():
    s = start_server("hardening", [
        "--checkpoint", "tiny", "--robot", "libero", "--max-new-tokens", "3", "--decode-budget", "2", "--max-robots", "2",
        "--api-key", KEY, "--idle-timeout-s", str(IDLE_S), "--window-ms", str(WINDOW_MS), "--allow-origin", "http://dash.lab",
    ], threads=1, max_seconds=240, startup_s=180)
    yield s
    s.stop()


def _client(server) -> WebsocketClientPolicy:
    return WebsocketClientPolicy("127.0.0.1", server.port, api_key=KEY)


def _raw(server, **kw):
    ws = connect(server.uri, compression=None, max_size=None, open_timeout=60, proxy=None, additional_headers=AUTH, **kw)
    return ws, msgpack_numpy.unpackb(ws.recv(timeout=60))


def _obs(seed=0, prompt="put the bowl on the plate"):
    return openpi_observation("libero", np.random.default_rng(seed), prompt)


def _stats(server) -> dict:
    return http_stats(server.uri, KEY)


def _wait_sessions(server, n=0, timeout_s=30.0) -> dict:
    """Until `n` sessions are connected (and, for 0, their requests and slots are freed: that follows the count)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        s = _stats(server)
        if s["sessions"] == n and (n or (s["pool_active"], s["requests_in_flight"]) == (0, 0)):
            break
        time.sleep(0.1)
    return s


def _get(server, path, headers=None) -> tuple[int, str]:
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=30)
    conn.request("GET", path, headers=headers or {})
    r = conn.getresponse()
    return r.status, r.read().decode()


def test_api_key_through_openpi_client(server):
    for key in (None, "wrong-key-0123456789"):
        with pytest.raises(InvalidStatus, match="HTTP 401"):
            WebsocketClientPolicy("127.0.0.1", server.port, api_key=key)
    client = _client(server)
    assert client.infer(_obs())["actions"].shape == (10, 7)
    client._ws.close()
    assert _get(server, "/healthz") == (200, "OK\n")  # open: a load balancer's probe carries no key
    assert _get(server, "/stats")[0] == 401
    assert _get(server, "/stats", {"Authorization": "Api-Key nope"})[0] == 401
    assert _get(server, "/stats", AUTH)[0] == 200
    _wait_sessions(server)


def test_browser_origin_and_foreign_host_are_refused(server):
    with pytest.raises(InvalidStatus, match="HTTP 403"):
        _raw(server, origin="http://evil.example")
    ws, meta = _raw(server, origin="http://dash.lab")  # --allow-origin
    assert meta["robot"] == "libero"
    ws.close()
    assert _get(server, "/stats", {**AUTH, "Origin": "http://evil.example"})[0] == 403
    status, body = _get(server, "/stats", {**AUTH, "Host": "rebound.example:80"})  # DNS rebinding to 127.0.0.1
    assert status == 403 and "Host" in body
    _wait_sessions(server)


def test_full_server_refusal_is_a_clear_client_error(server):
    a, b = _client(server), _client(server)
    with pytest.raises(InvalidStatus, match="HTTP 503") as refused:
        _client(server)
    assert refused.value.response.headers["Retry-After"].isdigit()
    assert "--max-robots" in refused.value.response.body.decode()
    a._ws.close()
    b._ws.close()
    _wait_sessions(server)


def test_oversized_prompt_is_refused_fast_with_a_short_reply(server):
    client = _client(server)
    for prompt, what in (("x" * (6 * 2**20), "characters"), ("a b " * 240, "tokens")):
        t0 = time.perf_counter()
        with pytest.raises(RuntimeError) as err:
            client.infer(_obs(prompt=prompt))
        elapsed = time.perf_counter() - t0
        message = str(err.value)
        assert "prompt" in message and what in message and len(message) < 300, message[:500]
        assert elapsed < 3.0, f"{what}: {elapsed:.1f} s"
    assert client.infer(_obs())["frame"] == 0  # same connection, still serving; the refused calls ran no frame
    client._ws.close()
    _wait_sessions(server)


BAD = {
    "ragged-state": {"observation/state": [[1.0, 2.0], [3.0]]},
    "state-dict": {"observation/state": {"a": 1}},
    "tiny-image": {"observation/image": np.zeros((3, 3, 3), np.uint8)},
    "thin-image": {"observation/image": np.zeros((3, 224, 3), np.uint8)},
    "huge-image": {"observation/image": np.zeros((1200, 1800, 3), np.uint8)},
    "bool-image": {"observation/image": np.zeros((8, 8, 3), bool)},
    "prompt-map": {"prompt": {"nested": ["x" * 5000]}},
    "prompt-list": {"prompt": ["y" * 300] * 300},
    "images-junk": {"images": {7: b"x", "base": [[1]]}},
}


def test_error_replies_name_the_field_and_never_carry_a_traceback_or_path(server):
    ws, _ = _raw(server)
    messages = []
    for name, change in BAD.items():
        obs = _obs()
        obs.update(change)
        messages.append((name, msgpack_numpy.packb(obs)))
    for ctrl in (np.zeros(3), {"x": 1}, [1, 2], 7, None, "x" * 10_000):
        messages.append((f"ctrl-{type(ctrl).__name__}", msgpack_numpy.packb({"__ctrl__": ctrl})))
    messages.append(("not-a-map", msgpack_numpy.packb([1, 2, 3])))
    for i, (name, message) in enumerate(messages):
        if i and i % 4 == 0:  # a frame now and then, as a robot's would: it keeps the session past --idle-timeout-s
            ws.send(msgpack_numpy.packb(_obs()))  # and restarts the wait refused messages in a row earn
            assert msgpack_numpy.unpackb(ws.recv(timeout=60))["actions"].shape == (10, 7)
        ws.send(message)
        reply = ws.recv(timeout=60)
        assert isinstance(reply, str), name
        assert "Traceback" not in reply and not PATH.search(reply), f"{name}: {reply[:600]}"
        assert len(reply) < 450, f"{name}: {len(reply)} chars"
        assert "bad message" in reply, f"{name}: {reply[:300]}"
    ws.send(msgpack_numpy.packb(_obs()))  # the connection survived every one of them
    assert msgpack_numpy.unpackb(ws.recv(timeout=60))["actions"].shape == (10, 7)
    ws.close()
    _wait_sessions(server)


def test_stats_over_the_websocket_show_only_the_own_session(server):
    a, b = _client(server), _client(server)
    b.infer(_obs(1))
    a._ws.send(msgpack_numpy.packb({"__ctrl__": "stats"}))
    reply = msgpack_numpy.unpackb(a._ws.recv(timeout=60))
    assert set(reply) == {"__ack__", "session"}, sorted(reply)
    assert reply["session"]["frames"] == 0  # a's own figures, not b's frame
    assert "sessions_with_requests" not in str(reply)
    a._ws.close()
    b._ws.close()
    _wait_sessions(server)


def test_idle_sessions_never_hold_the_batching_window(server):
    silent, _ = _raw(server)  # connected, sends nothing
    client = _client(server)
    for seed in range(3):
        t0 = time.perf_counter()
        client.infer(_obs(seed))
        assert time.perf_counter() - t0 < WINDOW_MS / 2e3, "the frame waited for a silent session"
    client._ws.close()
    silent.close()
    _wait_sessions(server)


def test_a_gone_robots_queued_frame_is_dropped_unrun(server):
    active = _client(server)
    active.infer(_obs(2))  # now an active robot: the next batch waits up to the window for it
    before = _stats(server)["totals"]
    ws, _ = _raw(server)
    ws.send(msgpack_numpy.packb(_obs(3)))
    time.sleep(0.5)  # the frame is queued, waiting for the active robot's
    ws.socket.shutdown(socket.SHUT_RDWR)  # gone without a close frame (FIN now, whoever else holds the socket)
    ws.socket.close()
    deadline = time.monotonic() + 30
    while (after := _stats(server)["totals"])["frames_dropped"] == before["frames_dropped"] and time.monotonic() < deadline:
        time.sleep(0.1)
    time.sleep(WINDOW_MS / 1e3)  # had it not been dropped, it would have run by now
    after = _stats(server)["totals"]
    assert after["frames_dropped"] == before["frames_dropped"] + 1
    assert after["robot_frames"] == before["robot_frames"]
    active._ws.close()
    s = _wait_sessions(server)
    assert (s["pool_active"], s["requests_in_flight"]) == (0, 0), s


def test_idle_sessions_are_closed_and_a_waiting_robot_then_connects(server):
    squatters = [_raw(server)[0] for _ in range(2)]  # --max-robots 2, both silent
    with pytest.raises(InvalidStatus, match="HTTP 503"):
        _client(server)
    t0 = time.monotonic()
    for ws in squatters:
        with pytest.raises(ConnectionClosed):
            ws.recv(timeout=IDLE_S + 30)
        assert ws.close_code == 1000 and "idle" in ws.close_reason
    assert IDLE_S - 0.5 < time.monotonic() - t0 < IDLE_S + 20
    _wait_sessions(server)
    client = _client(server)  # the robot that was refused gets in
    assert client.infer(_obs())["actions"].shape == (10, 7)
    client._ws.close()


def test_a_non_loopback_host_without_a_key_refuses_to_start():
    cmd = [sys.executable, "-m", "oxygen_gym.cli", "serve", "--host", "0.0.0.0", "--port", "0", "--max-seconds", "1"]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=120, env={"PATH": "/usr/bin:/bin"})
    assert r.returncode == 2, r.stdout + r.stderr
    assert "--api-key" in r.stderr and "--insecure" in r.stderr and "beyond this machine" in r.stderr


def test_an_unexpected_error_is_answered_with_an_id_only(caplog):
    """In process: a policy that raises with a path in its message; the reply carries only an error id, the log the rest."""
    from oxygen_gym import MultiTaskPolicy
    from oxygen_gym.serve import wire
    from oxygen_gym.serve.batch_loop import SessionEngine, session_policy
    from oxygen_gym.serve.server import PolicyServer, ServeConfig, _TokenBucket

    server = PolicyServer(MultiTaskPolicy.from_pretrained("tiny", robot="libero", num_slots=1), ServeConfig(max_robots=1))
    try:
        policy = session_policy(server.template, SessionEngine(server.engine, 0))

        def act(obs):
            raise RuntimeError("boom in /srv/secret/oxygen/model.py line 7")

        policy.act = act
        with caplog.at_level("ERROR", logger="oxygen_gym.serve"):
            reply, kind = asyncio.run(server._reply(0, policy, wire.packb(_obs()), None, _TokenBucket(2, 5)))
    finally:
        server.close()
    m = re.fullmatch(r"oxygen-gym serve: internal error ([0-9a-f]{8}) \(.*\)", reply)
    assert m and "secret" not in reply and kind == "failed", reply
    assert m.group(1) in caplog.text and "boom in /srv/secret" in caplog.text
