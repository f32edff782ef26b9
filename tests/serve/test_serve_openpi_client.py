"""`oxygen-gym serve` against the real `openpi-client` package (PyPI), server in a subprocess on a free loopback port.

Servers bind 127.0.0.1 only, stop by themselves after --max-seconds, and run one torch thread (the clients share the
two cores). Robustness: malformed, oversized and wrong-shape messages get an error naming the field and the server
(and, where the protocol allows, the connection) keeps serving; an abrupt disconnect mid-request frees its slots.
"""
import json
import time
import urllib.request

import numpy as np
import pytest

pytest.importorskip("openpi_client")
from openpi_client import msgpack_numpy  # noqa: E402
from openpi_client.websocket_client_policy import WebsocketClientPolicy  # noqa: E402
from websockets.sync.client import connect  # noqa: E402
from websockets.exceptions import InvalidStatus  # noqa: E402

from oxygen_gym.eval.bench.serve_load import openpi_observation, start_server  # noqa: E402

SHAPES = {"libero": (10, 7), "droid": (15, 8), "aloha": (50, 14)}
MAX_NEW_TOKENS = 5


def _server(robot: str, *extra: str):
    args = ["--checkpoint", "tiny", "--robot", robot, "--max-new-tokens", str(MAX_NEW_TOKENS), "--decode-budget", "2", *extra]
    return start_server(robot, args, threads=1, max_seconds=240, startup_s=180)


@pytest.fixture(scope="module")
def libero():
    server = _server("libero", "--max-robots", "2", "--max-message-mb", "1")
    yield server
    server.stop()


def _stats(server) -> dict:
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))  # loopback: never through a proxy
    with opener.open(f"http://127.0.0.1:{server.port}/stats", timeout=30) as r:
        return json.loads(r.read())


def _raw(server):
    ws = connect(server.uri, compression=None, max_size=None, open_timeout=60, proxy=None)
    return ws, msgpack_numpy.unpackb(ws.recv(timeout=60))


def _wait_idle(server, timeout_s=60.0) -> dict:
    deadline = time.monotonic() + timeout_s
    while True:
        s = _stats(server)
        if s["sessions"] == 0 and s["pool_active"] == 0 and s["requests_in_flight"] == 0:
            return s
        if time.monotonic() > deadline:
            return s
        time.sleep(0.2)


def test_openpi_client_libero_actions_and_language(libero):
    client = WebsocketClientPolicy("127.0.0.1", libero.port)
    meta = client.get_server_metadata()
    assert meta["robot"] == "libero" and meta["action_horizon"] == 10 and meta["action_dim"] == 7
    assert [t["name"] for t in meta["tasks"]] == ["narrate"]
    rng = np.random.default_rng(0)
    by_request: dict[int, list[dict]] = {}
    for call in range(5):
        out = client.infer(openpi_observation("libero", rng, "put the bowl on the plate"))
        assert out["actions"].shape == SHAPES["libero"] and out["actions"].dtype == np.float32
        assert np.all(np.isfinite(out["actions"]))
        assert out["frame"] == call and out["server_timing"]["infer_ms"] > 0
        if call:
            assert out["server_timing"]["prev_total_ms"] > 0  # as openpi's server reports it
        for u in out["language"]:
            by_request.setdefault(u["request_id"], []).append(u)
    assert sorted(by_request) == list(range(len(by_request))) and len(by_request) == 5  # one request per frame
    finished = [ups for ups in by_request.values() if ups[-1]["done"]]
    assert finished, "no request finished (5 tokens at k=2 take 3 frames)"
    for ups in finished:
        assert sum(len(u["new_token_ids"]) for u in ups) <= MAX_NEW_TOKENS
        assert "".join(u["new_text"] for u in ups) == ups[-1]["text"]
    client._ws.close()


@pytest.mark.parametrize("model, heads", [("multi-tiny", ["actions", "fast", "long"]), ("xr0-tiny", ["actions"])])
def test_the_server_returns_the_first_head_as_actions_and_every_head_by_name(model, heads):
    """openpi-client reads `actions` unchanged (the first head's chunk); `heads` carries each head under its name;
    both equal a local policy's first frame (any family: pi0.5 with three experts, Xiaomi-Robotics-0)."""
    from oxygen_gym import MultiTaskPolicy
    from oxygen_gym.serve.observations import to_policy_obs

    server = start_server("aloha", ["--checkpoint", model, "--robot", "aloha", "--max-robots", "1", "--max-new-tokens", "3"],
                          threads=1, max_seconds=240, startup_s=180)
    try:
        client = WebsocketClientPolicy("127.0.0.1", server.port)
        assert client.get_server_metadata()["action_heads"] == heads
        obs = openpi_observation("aloha", np.random.default_rng(3), "fold the towel")
        out = client.infer(obs)
        client._ws.close()
    finally:
        server.stop()
    assert sorted(out["heads"]) == sorted(heads)
    assert out["heads"][heads[0]].shape == SHAPES["aloha"]
    if "fast" in heads:
        assert out["heads"]["fast"].shape == (10, 14)
    np.testing.assert_array_equal(out["actions"], out["heads"][heads[0]])
    with MultiTaskPolicy.from_pretrained(model, robot="aloha", num_slots=2) as local:  # frame 0 of seed 0, as the server's
        want, _ = local.act(to_policy_obs(obs, local.robot, "do something"))
    want = want if isinstance(want, dict) else {heads[0]: want}
    for h, a in want.items():
        np.testing.assert_allclose(out["heads"][h], a, atol=1e-5, err_msg=h)


@pytest.mark.parametrize("robot", ["aloha", "droid"])
def test_openpi_client_aloha_and_droid_keys(robot):
    server = _server(robot, "--max-robots", "1")
    try:
        client = WebsocketClientPolicy("127.0.0.1", server.port)
        assert client.get_server_metadata()["robot"] == robot
        rng = np.random.default_rng(1)
        for _ in range(2):
            out = client.infer(openpi_observation(robot, rng, "fold the towel"))
            assert out["actions"].shape == SHAPES[robot] and out["actions"].dtype == np.float32
            assert len(out["language"]) >= 1
        client._ws.close()
    finally:
        server.stop()


@pytest.mark.parametrize(
    "mutate, field",
    [
        (lambda o: o.update({"observation/image": np.zeros((224, 224, 4), np.uint8)}), "observation/image"),
        (lambda o: o.update({"observation/wrist_image": np.zeros((32, 32, 3), np.int64)}), "observation/wrist_image"),
        (lambda o: o.update({"observation/state": np.zeros(5)}), "observation/state"),
        (lambda o: o.update({"observation/state": "not numbers"}), "observation/state"),
        (lambda o: o.pop("observation/wrist_image"), "observation/wrist_image"),
        (lambda o: o.update({"prompt": 7}), "prompt"),
    ],
    ids=["image-shape", "image-dtype", "state-shape", "state-type", "missing-key", "prompt-type"],
)
def test_bad_observation_names_the_field_and_connection_survives(libero, mutate, field):
    client = WebsocketClientPolicy("127.0.0.1", libero.port)
    rng = np.random.default_rng(2)
    obs = openpi_observation("libero", rng, "stack the blocks")
    mutate(obs)
    with pytest.raises(RuntimeError, match=field):
        client.infer(obs)
    out = client.infer(openpi_observation("libero", rng, "stack the blocks"))  # same connection, still serving
    assert out["actions"].shape == SHAPES["libero"] and out["frame"] == 0  # the bad call started no frame
    client._ws.close()


def test_malformed_and_oversized_messages(libero):
    ws, _ = _raw(libero)
    ws.send(b"\xc1\x00garbage")  # not msgpack
    reply = ws.recv(timeout=60)
    assert isinstance(reply, str) and "not a msgpack message" in reply
    ws.send("a text frame")
    assert "expected a binary msgpack message" in ws.recv(timeout=60)
    ws.send(msgpack_numpy.packb({"__ctrl__": "bogus"}))
    assert "__ctrl__" in ws.recv(timeout=60)
    ws.send(b"\x00" * (2 * 2**20))  # over --max-message-mb 1: the protocol closes the connection (1009)
    with pytest.raises(Exception):
        ws.recv(timeout=60)
    assert ws.close_code == 1009
    client = WebsocketClientPolicy("127.0.0.1", libero.port)  # the server serves the next client
    assert client.infer(openpi_observation("libero", np.random.default_rng(3), "open the drawer"))["actions"].shape == (10, 7)
    client._ws.close()
    assert _wait_idle(libero)["sessions"] == 0


def test_abrupt_disconnect_mid_request_frees_slots(libero):
    ws, _ = _raw(libero)
    ws.send(msgpack_numpy.packb(openpi_observation("libero", np.random.default_rng(4), "close the drawer")))
    ws.socket.close()  # gone mid-request: no close frame, the reply has nowhere to go
    s = _wait_idle(libero)
    assert (s["sessions"], s["pool_active"], s["requests_in_flight"], s["requests_queued"]) == (0, 0, 0, 0), s
    client = WebsocketClientPolicy("127.0.0.1", libero.port)
    out = client.infer(openpi_observation("libero", np.random.default_rng(5), "close the drawer"))
    assert out["actions"].shape == (10, 7) and out["frame"] == 0
    client._ws.close()


def test_reset_control_and_max_robots(libero):
    a = WebsocketClientPolicy("127.0.0.1", libero.port)
    b = WebsocketClientPolicy("127.0.0.1", libero.port)
    rng = np.random.default_rng(6)
    for _ in range(2):
        a.infer(openpi_observation("libero", rng, "turn on the stove"))
    with pytest.raises(InvalidStatus) as refused:  # --max-robots 2: a third robot is refused in the handshake
        connect(libero.uri, compression=None, max_size=None, open_timeout=60, proxy=None)
    assert refused.value.response.status_code == 503 and "--max-robots" in refused.value.response.body.decode()
    a._ws.send(msgpack_numpy.packb({"__ctrl__": "reset"}))
    assert msgpack_numpy.unpackb(a._ws.recv(timeout=60)) == {"__ack__": "reset"}
    out = a.infer(openpi_observation("libero", rng, "turn on the stove"))
    assert out["frame"] == 0  # the robot's frame counter restarted
    a._ws.close()
    b._ws.close()
    assert _wait_idle(libero)["sessions"] == 0
