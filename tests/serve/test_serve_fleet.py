"""`oxygen-gym serve --ray`: the server as Ray Serve replicas (serve/fleet/), on a local Ray with the tiny model.

Two replicas of two robot seats each. Through Ray Serve's own HTTP proxy and request router: openpi's client gets
the same actions and language as the same robot served alone by one process; robots spread by free seats and each
robot's frames all run on the replica it connected to (its replica id and session in the metadata, its frame count
in that replica's /stats entry); the key, Host and Origin checks and the 503 of a full fleet hold at the Ray ingress.
A replica killed mid-run (slow): Serve's proxy closes its robots' sockets with 1012 naming the replica and the
language requests they lost (fleet/proxy_close.py; fast test of the middleware below), openpi's client raises it, our
client reconnects (RemotePolicy's retries) and goes on, the others never notice, and no KV slot stays taken on the
survivors. Scaling, draining and adapters: test_serve_fleet_scaling.py.
"""
import functools
import http.client
import json
import socket
import time
import urllib.error
import urllib.request

import numpy as np
import pytest

pytest.importorskip("ray.serve")
pytest.importorskip("openpi_client")
import ray  # noqa: E402
from openpi_client.websocket_client_policy import WebsocketClientPolicy  # noqa: E402
from websockets.exceptions import InvalidStatus  # noqa: E402
from websockets.sync.client import connect  # noqa: E402

from oxygen_gym import LanguageTask, MultiTaskPolicy  # noqa: E402
from oxygen_gym.eval.bench.serve_load import openpi_observation  # noqa: E402
from oxygen_gym.serve.fleet.router import load_of, rank  # noqa: E402
from oxygen_gym.serve.server import ServeConfig  # noqa: E402

KEY = "fleet-test-key-0123"
AUTH = {"Authorization": f"Api-Key {KEY}"}
TASKS = [LanguageTask("narrate", "Describe what the robot is doing.", max_new_tokens=5)]
ROBOTS, STEPS, ACTION_ATOL = 4, 2, 1e-5  # tolerance of tests/serve/test_serve_equivalence.py


def _factory():
    return functools.partial(MultiTaskPolicy.from_pretrained, "tiny", robot="libero", tasks=TASKS, decode_budget=2,
                             seed=0, mode="oxygen", num_slots=1)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def fleet():
    from oxygen_gym.serve.fleet.app import FleetOptions, start_fleet

    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    try:
        f = start_fleet(_factory(), ServeConfig(port=_free_port(), max_robots=2, window_ms=50, api_key=KEY),
                        FleetOptions(replicas=2, replica_cpus=0.5, threads=1, stats_push_s=0.5,
                                     routing_stats_period_s=0.5, drain_timeout_s=5))
        yield f
        f.stop()
    finally:
        from ray import serve

        serve.shutdown()
        ray.shutdown()


def _stats(fleet, headers=AUTH) -> dict:
    req = urllib.request.Request(f"http://127.0.0.1:{fleet.port}/stats", headers=headers)
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    with opener.open(req, timeout=30) as r:
        return json.loads(r.read())


def _wait_stats(fleet, ok, timeout_s=30.0) -> dict:
    """/stats until `ok(stats)` (other replicas' entries are up to one stats push old)."""
    deadline = time.monotonic() + timeout_s
    while True:
        stats = _stats(fleet)
        if ok(stats) or time.monotonic() > deadline:
            return stats
        time.sleep(0.3)


def _status(fleet, path="/", **headers) -> int:
    try:
        with connect(f"ws://127.0.0.1:{fleet.port}{path}", additional_headers=headers, proxy=None, open_timeout=30):
            return 101
    except InvalidStatus as e:
        return e.response.status_code


def test_seat_ranking_prefers_free_seats_then_free_kv_slots():
    loads = [load_of("a", {"robots": 1, "max_robots": 2, "free_kv_slots": 9}, None),
             load_of("b", {"robots": 0, "max_robots": 2, "free_kv_slots": 1}, None),
             load_of("c", {"robots": 0, "max_robots": 2, "free_kv_slots": 5}, None),
             load_of("d", {}, 2, max_robots=2)]  # no report yet, but 2 requests in flight there: 2 robots
    assert [x.replica for x in rank(loads)] == ["c", "b", "a", "d"]
    # what the router placed since the last report counts on top of it, and the live count beats a stale report
    assert load_of("e", {"robots": 1, "max_robots": 2}, None, placed_since=1).free_seats == 0
    assert load_of("f", {"robots": 0, "max_robots": 2}, 2).free_seats == 0


@pytest.mark.slow  # a local Ray, Serve and two replicas take 60-90 s to start on a shared 2-core machine
def test_fleet_openpi_robots_equal_alone_spread_pinned_and_guarded(fleet):
    # the ingress keeps the single server's checks
    assert urllib.request.urlopen(f"http://127.0.0.1:{fleet.port}/healthz", timeout=30).read() == b"OK\n"
    with pytest.raises(urllib.error.HTTPError) as e:
        _stats(fleet, headers={})
    assert e.value.code == 401
    assert _status(fleet) == 401
    assert _status(fleet, Origin="https://evil.example", **AUTH) == 403
    conn = http.client.HTTPConnection("127.0.0.1", fleet.port, timeout=30)  # DNS rebinding: a name that is not loopback
    conn.putrequest("GET", "/stats", skip_host=True)
    conn.putheader("Host", "evil.example")
    conn.putheader(*next(iter(AUTH.items())))
    conn.endheaders()
    assert conn.getresponse().status == 403
    conn.close()

    rng = np.random.default_rng(7)
    obs = [[openpi_observation("libero", rng, f"put bowl {r} on the plate") for _ in range(STEPS)] for r in range(ROBOTS)]
    clients = [WebsocketClientPolicy("127.0.0.1", fleet.port, api_key=KEY) for _ in range(ROBOTS)]
    try:
        meta = [c.get_server_metadata() for c in clients]
        where = [(m["replica"], m["session"]) for m in meta]
        replicas = sorted({r for r, _ in where})
        assert len(replicas) == 2 and sorted(r for r, _ in where) == sorted(replicas * 2), where  # 2 robots each
        # the fleet is full: one more robot gets the single server's 503 with Retry-After
        with pytest.raises(InvalidStatus) as full:
            connect(f"ws://127.0.0.1:{fleet.port}", additional_headers=AUTH, proxy=None, open_timeout=30)
        assert full.value.response.status_code == 503 and full.value.response.headers["Retry-After"] == "5"

        got = [[c.infer(obs[r][s]) for s in range(STEPS)] for r, c in enumerate(clients)]
        stats = _wait_stats(fleet, lambda st: st["totals"]["robot_frames"] == ROBOTS * STEPS)
    finally:
        for c in clients:
            c._ws.close()
    assert stats["fleet"]["replicas"] == 2 and stats["sessions"] == ROBOTS
    by_replica = {x["replica"]: x for x in stats["replicas"]}
    for rid, sid in where:  # every frame of a robot ran on the replica that accepted it
        assert by_replica[rid]["session_frames"][str(sid)] == STEPS
    assert sum(x["totals"]["robot_frames"] for x in stats["replicas"]) == ROBOTS * STEPS

    from oxygen_gym.serve.observations import to_policy_obs

    for r in range(ROBOTS):  # the same robot served alone by one process
        with MultiTaskPolicy.from_pretrained("tiny", robot="libero", tasks=TASKS, decode_budget=2, seed=0,
                                             num_slots=16) as alone:
            for s in range(STEPS):
                want, updates = alone.act(to_policy_obs(obs[r][s], alone.robot, None))
                np.testing.assert_allclose(got[r][s]["actions"], want, atol=ACTION_ATOL, err_msg=f"robot {r} step {s}")
                assert [(u["request_id"], u["new_token_ids"], u["done"]) for u in got[r][s]["language"]] == \
                    [(u.request_id, list(u.new_token_ids), u.done) for u in updates]


@pytest.mark.slow
def test_a_killed_replica_s_robots_get_1012_reconnect_and_the_others_never_notice(fleet):
    from websockets.exceptions import ConnectionClosedError

    from oxygen_gym.serve.client import RemotePolicy
    from policy_obs import make_obs

    rng = np.random.default_rng(3)
    openpi = WebsocketClientPolicy("127.0.0.1", fleet.port, api_key=KEY)  # first: a replica of its own for now
    robots = [RemotePolicy(fleet.uri, api_key=KEY, timeout_s=120, reconnects=80, backoff_s=0.5, max_backoff_s=2.0)
              for _ in range(ROBOTS - 1)]
    try:
        openpi.infer(openpi_observation("libero", rng, "put the bowl on the plate"))
        for r in robots:
            r.act(make_obs("libero", rng))
        victim = openpi.get_server_metadata()["replica"]
        names = [a["name"] for a in ray.util.list_named_actors(all_namespaces=True)
                 if a["name"].startswith("SERVE_REPLICA::") and a["name"].endswith(victim)]
        assert len(names) == 1, names
        ray.kill(ray.get_actor(names[0], namespace="serve"), no_restart=True)
        # openpi's client: an error naming the close code and what was lost, which its loop can act on
        with pytest.raises(ConnectionClosedError) as closed:
            openpi.infer(openpi_observation("libero", rng, "put the bowl on the plate"))
        assert closed.value.rcvd.code == 1012
        assert closed.value.rcvd.reason.startswith(f"replica {victim} gone: ")
        for _ in range(3):
            for r in robots:
                actions, _ = r.act(make_obs("libero", rng))
                assert actions.shape[0] > 0
        moved = [r for r in robots if r.reconnects]
        stayed = [r for r in robots if not r.reconnects]
        assert len(moved) == 1 and len(stayed) == 2, [(r.reconnects, r.metadata["replica"]) for r in robots]
        assert all(r.metadata["replica"] != victim for r in robots)
        for r in moved:  # the proxy's close: the replica and the narrate request the dead session had in flight
            n = len(r.lost_requests)
            assert n >= 1 and r.last_close == (1012, f"replica {victim} gone: {n} unfinished language request"
                                                     f"{'' if n == 1 else 's'} dropped; reconnect")
        assert all(r.last_close is None for r in stayed)
    finally:
        openpi._ws.close()
        for r in robots:
            r.close()
    stats = _wait_stats(fleet, lambda st: st["sessions"] == 0 and st["requests_in_flight"] == 0
                        and victim not in {x["replica"] for x in st["replicas"]}, timeout_s=60)
    assert victim not in {x["replica"] for x in stats["replicas"]}
    for x in stats["replicas"]:  # the survivors (and the replacement) hold no KV slot of the robots that left
        assert (x["sessions"], x["pool_active"], x["requests_in_flight"]) == (0, 0, 0), x


def test_the_cluster_plan_seats_what_one_measured_replica_served_within_the_period():
    """The plan counts the most robots one replica served with every robot's p99 inside the time between calls,
    times the fleet's replicas; points of other replica counts or of the single server do not count."""
    from oxygen_gym.eval.bench.serve_fleet_bench import cluster_plan, markdown

    def point(server, replicas, robots, p99):
        return {"server": server, "replicas": replicas, "robots": robots, "latency_ms_p99_worst_robot": p99}

    points = [point("fleet", 1, 2, 180.0), point("fleet", 1, 4, 240.0), point("fleet", 1, 8, 400.0),
              point("single", 1, 8, 100.0), point("fleet", 2, 8, 200.0)]
    plan = cluster_plan(points, 16, 250.0)
    assert (plan["robots_per_replica"], plan["robots"], plan["bounded_by_measurement"]) == (4, 64, False)
    assert cluster_plan(points, 16, 500.0)["bounded_by_measurement"] is True
    assert cluster_plan(points, 16, 100.0)["robots"] == 0
    cfg = {"command": "x", "model": "tiny", "robot": "libero", "window_ms": 50, "threads": 1, "machine": "m",
           "load_before": [0, 0, 0]}
    assert "16 replicas like the one measured seats 4 robot(s) each" in markdown({"config": cfg, "points": [],
                                                                                   "plan": plan})


def _run_middleware(events: list, client_disconnects: bool = False) -> list[dict]:
    """Run `ReplicaLossClose` around an ASGI app that sends `events` (ASGI messages) and returns; what the robot's
    side got."""
    import asyncio

    from oxygen_gym.serve.fleet.proxy_close import ReplicaLossClose

    sent: list[dict] = []

    async def inner(scope, receive, send):
        for message in events:
            if message == "receive":
                await receive()
            else:
                await send(message)

    async def receive():
        return {"type": "websocket.disconnect", "code": 1000} if client_disconnects else {"type": "websocket.receive", "bytes": b"x"}

    async def send(message):
        sent.append(message)

    asyncio.run(ReplicaLossClose(inner)({"type": "websocket"}, receive, send))
    return sent


def _frame_reply(*updates) -> dict:
    from oxygen_gym.serve import wire

    language = [{"request_id": r, "task": "narrate", "frame": 0, "new_token_ids": [1], "new_text": "a", "text": "a",
                 "done": done} for r, done in updates]
    return {"type": "websocket.send", "bytes": wire.packb({"actions": np.zeros((2, 7), np.float32), "language": language})}


def test_the_proxy_closes_a_lost_replica_s_robots_with_1012_and_what_they_lost():
    """The proxy middleware: after an accept, a call that ends with no close from either side (the replica died)
    gets 1012 naming the replica and the language requests unfinished in the replies it relayed; a replica's own
    close, a robot that left, and plain HTTP pass untouched."""
    from oxygen_gym.serve import wire
    from oxygen_gym.serve.fleet.proxy_close import loss_reason

    accept = {"type": "websocket.accept"}
    metadata = {"type": "websocket.send", "bytes": wire.packb({"server": "oxygen-gym", "replica": "r7", "session": 0})}
    sent = _run_middleware([accept, metadata, _frame_reply((1, False), (2, False)), _frame_reply((1, True), (3, False))])
    assert sent[-1] == {"type": "websocket.close", "code": 1012,
                        "reason": "replica r7 gone: 2 unfinished language requests dropped; reconnect"}
    reset = {"type": "websocket.send", "bytes": wire.packb({"__ack__": "reset"})}
    assert _run_middleware([accept, metadata, _frame_reply((1, False)), reset])[-1]["reason"].startswith(
        "replica r7 gone: 0 unfinished")  # a reset drops the session's requests on purpose
    own_close = {"type": "websocket.close", "code": 1001, "reason": "stopping"}
    assert _run_middleware([accept, metadata, own_close]) == [accept, metadata, own_close]
    assert _run_middleware([accept, "receive"], client_disconnects=True) == [accept]
    assert _run_middleware([]) == []  # never accepted: Serve's own HTTP answer stands
    assert len(loss_reason("x" * 200, 10**6).encode()) <= 123


def test_autoscaling_options_reach_serve_and_bad_values_name_their_flag():
    from oxygen_gym.serve.fleet.app import FleetOptions, deployment_options

    cfg = ServeConfig(max_robots=4)
    fixed = deployment_options(cfg, FleetOptions(replicas=3, drain_timeout_s=42).check(4))
    assert fixed["num_replicas"] == 3 and "autoscaling_config" not in fixed
    assert fixed["graceful_shutdown_timeout_s"] == 42
    auto = deployment_options(cfg, FleetOptions(replicas=1, max_replicas=5, scale_up_delay_s=2, scale_down_delay_s=7).check(4))
    assert "num_replicas" not in auto
    assert auto["autoscaling_config"] == {"min_replicas": 1, "initial_replicas": 1, "max_replicas": 5,
                                          "target_ongoing_requests": 2.0, "upscale_delay_s": 2, "downscale_delay_s": 7,
                                          "look_back_period_s": 30.0}
    for bad, flag in [(dict(max_replicas=1, replicas=2), "--max-replicas"), (dict(robots_per_replica=9), "--robots-per-replica"),
                      (dict(scale_down_delay_s=-1), "--scale-down-delay-s"), (dict(drain_timeout_s=-1), "--drain-timeout-s")]:
        with pytest.raises(ValueError, match=flag):
            FleetOptions(**bad).check(4)
