"""Issue 55: a session stays only by doing valid work, bad input is refused by name, and no reply (nor any `act()`
return) ever carries a non-finite action. One real server on loopback (stopping by itself) for the session tests;
the NaN guard in process, on a policy whose weights are poisoned.
"""
import asyncio
import http.client
import socket
import time

import numpy as np
import pytest

pytest.importorskip("openpi_client")
from openpi_client import msgpack_numpy  # noqa: E402
from websockets.exceptions import ConnectionClosed  # noqa: E402
from websockets.sync.client import connect  # noqa: E402

from oxygen_gym.eval.bench.serve_load import openpi_observation, start_server  # noqa: E402

IDLE_S = 3.0
MAX_INVALID = 5


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    log = tmp_path_factory.mktemp("serve-safety") / "server.log"
    s = start_server("safety", [
        "--checkpoint", "tiny", "--robot", "libero", "--no-language", "--max-robots", "2",
        "--idle-timeout-s", str(IDLE_S), "--max-invalid-messages", str(MAX_INVALID), "--window-ms", "0",
        "--max-prompt-tokens", "2000",  # so a long prompt reaches the model's own token check
    ], threads=1, max_seconds=240, startup_s=180, log_file=log)
    s.log_path = log
    yield s
    s.stop()


def _raw(server):
    ws = connect(server.uri, compression=None, max_size=None, open_timeout=60, proxy=None)
    ws.recv(timeout=60)  # metadata
    return ws


def _obs(seed=0, **change):
    obs = openpi_observation("libero", np.random.default_rng(seed), "put the bowl on the plate")
    obs.update(change)
    return obs


def _ask(ws, obs) -> str | dict:
    ws.send(msgpack_numpy.packb(obs))
    reply = ws.recv(timeout=60)
    return reply if isinstance(reply, str) else msgpack_numpy.unpackb(reply)


def test_junk_does_not_keep_a_session_past_the_idle_timeout(server):
    """Two squatters sending one invalid byte well inside the timeout (the attack that held every slot) are closed
    as idle, and the robot they kept out gets in."""
    squatters = [_raw(server) for _ in range(2)]
    t0 = time.monotonic()
    closed = []
    while len(closed) < 2 and time.monotonic() - t0 < IDLE_S + 20:
        for ws in squatters:
            if ws in closed:
                continue
            try:
                ws.send(b"\xc1")  # never valid msgpack
                assert "bad message" in ws.recv(timeout=10)
            except ConnectionClosed:
                closed.append(ws)
        time.sleep(IDLE_S / 4)
    assert len(closed) == 2, "junk kept the sessions alive past --idle-timeout-s"
    assert all(ws.close_code == 1000 and "idle" in ws.close_reason for ws in squatters)
    assert time.monotonic() - t0 < IDLE_S + 5
    robot = _raw(server)
    assert _ask(robot, _obs())["actions"].shape == (10, 7)
    robot.close()


def test_frames_keep_a_session_and_controls_do_not(server):
    ws = _raw(server)
    t0 = time.monotonic()
    while time.monotonic() - t0 < 1.5 * IDLE_S:  # frames past the timeout: the session stays
        assert isinstance(_ask(ws, _obs()), dict)
        time.sleep(IDLE_S / 4)
    with pytest.raises(ConnectionClosed):
        while True:  # episode controls only: closed as idle
            ws.send(msgpack_numpy.packb({"__ctrl__": "episode_end"}))
            ws.recv(timeout=IDLE_S + 10)
            time.sleep(IDLE_S / 4)
    assert ws.close_code == 1000 and "idle" in ws.close_reason


def test_invalid_messages_in_a_row_close_the_connection(server):
    ws = _raw(server)
    for _ in range(MAX_INVALID - 1):
        assert "bad message" in _ask(ws, {"nonsense": 1})
    assert isinstance(_ask(ws, _obs()), dict)  # a valid frame resets the count
    for _ in range(MAX_INVALID):
        ws.send(msgpack_numpy.packb({"nonsense": 1}))
        ws.recv(timeout=30)
    with pytest.raises(ConnectionClosed):
        ws.recv(timeout=30)
    assert ws.close_code == 1008 and "invalid messages" in ws.close_reason


def test_refused_messages_in_a_row_are_read_at_a_trickle(server):
    """From the second refusal in a row the server waits before reading the session's next message (0.05 s, then 0.1,
    0.2, ...): four refusals and a frame take at least 0.35 s however fast the machine; the schedule resets on a frame."""
    from oxygen_gym.serve.server import refused_wait

    assert [refused_wait(n) for n in range(1, 7)] == [0.0, 0.05, 0.1, 0.2, 0.4, 0.5]
    ws = _raw(server)
    t0 = time.monotonic()
    for _ in range(MAX_INVALID - 1):
        assert "bad message" in _ask(ws, {"nonsense": 1})
    assert isinstance(_ask(ws, _obs()), dict)
    assert time.monotonic() - t0 >= 0.05 + 0.1 + 0.2
    assert "bad message" in _ask(ws, {"nonsense": 1})  # counted from one again: the frame reset it
    assert isinstance(_ask(ws, _obs()), dict)
    ws.close()


def test_stats_controls_are_rate_limited(server):
    ws = _raw(server)
    replies = [_ask(ws, {"__ctrl__": "stats"}) for _ in range(8)]
    answered = [r for r in replies if isinstance(r, dict)]
    refused = [r for r in replies if isinstance(r, str)]
    assert 1 <= len(answered) <= 6 and refused, replies
    assert all("too often" in r for r in refused)
    ws.close()


@pytest.mark.parametrize("prev, delay", [(1e20, None), (1e19, 5), (np.inf, None)])
def test_out_of_range_prev_actions_are_refused_by_name(server, prev, delay):
    ws = _raw(server)
    change = {"prev_actions": np.full((10, 7), prev, np.float32)}
    if delay is not None:
        change["inference_delay"] = delay
    reply = _ask(ws, _obs(**change))
    assert isinstance(reply, str) and reply.startswith("oxygen-gym serve: bad message: prev_actions"), reply
    ws.close()


def test_elongated_images_and_long_prompts_get_short_named_errors(server):
    ws = _raw(server)
    reply = _ask(ws, _obs(**{"observation/image": np.zeros((8, 259200 // 8 * 8, 3), np.uint8)}))
    assert isinstance(reply, str) and "observation/image" in reply and "elongated" in reply, reply
    prompt = "pick up the black bowl " * 43  # 946 characters: passes --max-prompt-tokens 2000, not the model's limit
    reply = _ask(ws, _obs(prompt=prompt))
    assert isinstance(reply, str) and "max_token_len" in reply, reply
    echoed = max((len(run) for run in reply.split("'")), default=0)
    assert echoed <= 200, f"{echoed} characters of the prompt echoed: {reply}"
    ws.close()


@pytest.mark.parametrize("header", ["Host", "Authorization", "Origin"])
def test_a_duplicated_security_header_is_a_400_without_a_traceback(server, header):
    before = server.log_path.read_text()
    sock = socket.create_connection(("127.0.0.1", server.port), timeout=30)
    value = {"Host": "127.0.0.1", "Authorization": "Api-Key x", "Origin": "http://a.example"}[header]
    extra = "" if header == "Host" else "Host: 127.0.0.1\r\n"
    sock.sendall((f"GET / HTTP/1.1\r\n{extra}{header}: {value}\r\n{header}: {value}\r\nUpgrade: websocket\r\n"
                  "Connection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n"
                  "Sec-WebSocket-Version: 13\r\n\r\n").encode())
    response = http.client.HTTPResponse(sock)
    response.begin()
    assert response.status == 400 and f"duplicate {header}" in response.read().decode()
    sock.close()
    time.sleep(0.3)
    added = server.log_path.read_text()[len(before):]
    about_it = [line for line in added.splitlines() if "duplicate" in line or "handshake" in line.lower()]
    assert "Traceback" not in added and len(about_it) == 1, added  # was HTTP 500 and ~1.1 KB of traceback


def _poisoned_policy():
    """`tiny` with one NaN in the action expert's output projection: every action comes out NaN."""
    import torch

    from oxygen_gym import MultiTaskPolicy

    policy = MultiTaskPolicy.from_pretrained("tiny", robot="libero", num_slots=2)
    name, weight = next((n, p) for n, p in policy.model.named_parameters() if "action_out" in n and n.endswith("weight"))
    with torch.no_grad():
        weight[0, 0] = float("nan")
    return policy


def test_act_withholds_non_finite_actions_and_stays_usable():
    from oxygen_gym.policies.numeric_range import NonFiniteActionsError

    seen = []
    with _poisoned_policy() as policy:
        obs = {"images": {"base": np.zeros((64, 64, 3), np.uint8), "wrist": np.zeros((64, 64, 3), np.uint8)},
               "state": np.zeros(8, np.float32), "prompt": "put the bowl on the plate"}
        for _ in range(2):  # the frame completes and the next one runs
            with pytest.raises(NonFiniteActionsError, match="not finite"):
                policy.act(obs, on_actions=seen.append)
        assert seen == [] and policy.frame == 2


def test_the_server_never_replies_with_non_finite_actions():
    from oxygen_gym.serve import wire
    from oxygen_gym.serve.batch_loop import SessionEngine, session_policy
    from oxygen_gym.serve.server import _TokenBucket, PolicyServer, ServeConfig

    server = PolicyServer(_poisoned_policy(), ServeConfig(max_robots=1))
    try:
        server.engine.register(0)
        policy = session_policy(server.template, SessionEngine(server.engine, 0))
        reply, kind = asyncio.run(server._reply(0, policy, wire.packb(_obs()), None, _TokenBucket(2, 5)))
    finally:
        server.close()
    assert isinstance(reply, str) and "not finite" in reply and kind == "failed", reply


def test_memory_freed_after_a_large_message_is_given_back(server):
    """serve/memory.py: after a message of 1 MB or more the server trims the allocator (off the event loop)."""
    from oxygen_gym.eval.bench.serve_load import http_stats

    ws = _raw(server)
    big = _obs(**{"observation/image": np.zeros((720, 720, 3), np.uint8)})  # ~1.5 MB on the wire
    assert isinstance(_ask(ws, big), dict)
    deadline = time.monotonic() + 15
    while http_stats(server.uri, None)["totals"]["memory_trims"] == 0 and time.monotonic() < deadline:
        time.sleep(0.2)
    assert http_stats(server.uri, None)["totals"]["memory_trims"] >= 1
    ws.close()
