"""`oxygen-gym serve --ray` scaling on a local Ray with the tiny model (slow: a fleet takes a minute or more to start
on a shared 2-core machine): autoscaling 1 -> 2 replicas when robots exceed the target and back to 1 once they leave,
with no live robot disturbed (a scale-down drains the replica Serve picks, which takes no new robot and stops once
its robot has left); a rolling restart drains too, and a robot that outstays the drain timeout gets 1012 and
reconnects to the new replica; every replica, the one added by scaling included, loads the per-task adapter.
"""
import functools
import os
import socket
import time

import numpy as np
import pytest

pytest.importorskip("ray.serve")
import ray  # noqa: E402

from lora_fixtures import write_random_adapter  # noqa: E402
from oxygen_gym import LanguageTask, MultiTaskPolicy  # noqa: E402
from oxygen_gym.serve.client import RemotePolicy  # noqa: E402
from oxygen_gym.serve.server import ServeConfig  # noqa: E402
from policy_obs import make_obs  # noqa: E402

TASKS = [LanguageTask("narrate", "Describe what the robot is doing.", max_new_tokens=5),
         LanguageTask("memory", "Where is the bowl?", max_new_tokens=5, adapter="memory")]
DRAIN_S = 20.0
# Serve's proxies and replicas report ongoing requests every 10 s unless told otherwise (fleet/app.py forwards these)
PUSH_ENV = {"RAY_SERVE_HANDLE_AUTOSCALING_METRIC_PUSH_INTERVAL_S": "0.5",
            "RAY_SERVE_REPLICA_AUTOSCALING_METRIC_PUSH_INTERVAL_S": "0.5"}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def scaling_fleet(tmp_path_factory):
    from oxygen_gym.serve.fleet.app import FleetOptions, ray_env_vars, start_fleet

    base = MultiTaskPolicy.from_pretrained("tiny", robot="libero", tasks=TASKS[:1], seed=0)
    folder, _ = write_random_adapter(tmp_path_factory.mktemp("adapters") / "memory", base.model,
                                     ("self_attn.q_proj", "self_attn.v_proj"), rank=4, alpha=8.0, seed=1)
    base.close()
    factory = functools.partial(MultiTaskPolicy.from_pretrained, "tiny", robot="libero", tasks=TASKS,
                                adapters={"memory": folder}, decode_budget=2, seed=0, mode="oxygen", num_slots=1)
    saved = {k: os.environ.get(k) for k in PUSH_ENV}
    os.environ.update(PUSH_ENV)
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, runtime_env={"env_vars": ray_env_vars()})
    try:
        f = start_fleet(factory, ServeConfig(port=_free_port(), max_robots=3, window_ms=50),
                        FleetOptions(replicas=1, max_replicas=2, robots_per_replica=1, scale_up_delay_s=1,
                                     scale_down_delay_s=3, scale_look_back_s=11, replica_cpus=0.5, threads=1,
                                     stats_push_s=0.5, routing_stats_period_s=0.5, drain_timeout_s=DRAIN_S))
        yield f
        f.stop()
    finally:
        from ray import serve

        serve.shutdown()
        ray.shutdown()
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def _states(fleet) -> dict[str, int]:
    """Serve's count of the fleet's replicas by state (RUNNING, STOPPING, ...)."""
    from ray import serve

    deployment = serve.status().applications[fleet.app_name].deployments["PolicyReplica"]
    return {getattr(k, "value", str(k)): v for k, v in deployment.replica_states.items()}


def _act_until(fleet, robots, done, timeout_s: float, rng) -> None:
    """Every robot acts (one frame each) until `done(replicas by state)`, at most `timeout_s`."""
    deadline = time.monotonic() + timeout_s
    while not done(states := _states(fleet)):
        assert time.monotonic() < deadline, f"timed out; replicas by state: {states}"
        for r in robots:
            actions, _ = r.act(make_obs("libero", rng))
            assert actions.shape[0] > 0
        time.sleep(0.3)


def _replica_stats(fleet) -> list[dict]:
    import json
    import urllib.request

    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    with opener.open(f"http://127.0.0.1:{fleet.port}/stats", timeout=30) as r:
        return json.loads(r.read())["replicas"]


@pytest.mark.slow
def test_autoscaling_adds_and_drains_replicas_without_moving_a_live_robot(scaling_fleet):
    fleet, rng = scaling_fleet, np.random.default_rng(5)

    def robot() -> RemotePolicy:
        return RemotePolicy(fleet.uri, timeout_s=120, reconnects=40, backoff_s=0.5, max_backoff_s=2.0)

    r1, r2 = robot(), robot()
    first = r1.metadata["replica"]
    assert r2.metadata["replica"] == first
    # 2 robots on 1 replica, over the target of 1 per replica: Serve adds the second (within the ceiling of 2)
    _act_until(fleet, [r1, r2], lambda st: st.get("RUNNING", 0) == 2, 300, rng)
    r3 = robot()
    second = r3.metadata["replica"]
    assert second != first  # the new replica has the most free seats
    assert {x["replica"]: x["adapters"] for x in _replica_stats(fleet)} == {first: ["memory"], second: ["memory"]}

    # r1 and r2 leave: 1 robot for 2 replicas, Serve removes one: the newest, where r3 is live. It drains: r3 goes on
    # undisturbed, and a new robot goes to the replica that stays
    r1.close()
    r2.close()
    _act_until(fleet, [r3], lambda st: st.get("STOPPING", 0) == 1, 120, rng)
    r4 = robot()
    assert r4.metadata["replica"] == first
    for _ in range(8):
        for r in (r3, r4):
            r.act(make_obs("libero", rng))
        time.sleep(0.5)
    assert _states(fleet) == {"RUNNING": 1, "STOPPING": 1}
    assert (r3.reconnects, r3.metadata["replica"], r3.last_close) == (0, second, None)
    left = time.monotonic()
    r3.close()
    _act_until(fleet, [r4], lambda st: st.get("STOPPING", 0) == 0, DRAIN_S, rng)
    assert time.monotonic() - left < DRAIN_S / 2  # it stopped because its robot left, not at the drain timeout
    assert (r1.reconnects, r2.reconnects, r4.reconnects) == (0, 0, 0)

    # a rolling restart drains the last replica; r4 outstays the drain timeout: 1012 naming what it lost, then the
    # new replica. What it lost: the requests since its reset (the ones before were dropped on purpose), counted
    # alike by the proxy and the client
    r4.reset()
    started = time.monotonic()
    fleet.restart()
    while not r4.reconnects:
        assert time.monotonic() - started < DRAIN_S + 120
        r4.act(make_obs("libero", rng))
        time.sleep(0.3)
    assert time.monotonic() - started >= DRAIN_S - 1
    code, reason = r4.last_close
    assert code == 1012 and reason == (f"replica {first} gone: {len(r4.lost_requests)} unfinished language "
                                       f"request{'' if len(r4.lost_requests) == 1 else 's'} dropped; reconnect")
    assert r4.metadata["replica"] not in (first, second)
    r4.close()
