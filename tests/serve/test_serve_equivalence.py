"""Serving many robots through one batched engine gives every robot what it gets served alone.

Three LIBERO robots act through server sessions (serve/batch_loop.py) sharing one BatchScheduler, from threads, so
their frames meet in batches; one robot sits out every other step, so batches also run without it while its language
requests are in flight. Each robot's actions must match a lone `MultiTaskPolicy.act` on its own observations to fp32
rounding (the mode-equivalence tolerance) and its language updates (ids, frames, tokens, done) must be identical,
including a sampled (temperature > 0) task and request ids that start at 0 per robot. The same holds with batching off
(one robot at a time).
"""
import threading

import numpy as np
import pytest
import torch

from oxygen_gym import LanguageTask, MultiTaskPolicy
from oxygen_gym.serve.batch_loop import SessionEngine, session_policy
from oxygen_gym.serve.server import PolicyServer, ServeConfig
from policy_obs import make_obs

ACTION_ATOL = 1e-5  # as tests/engine/test_engine_equivalence.py
ROBOTS, STEPS = 3, 8
TASKS = [
    LanguageTask("narrate", "Describe what the robot is doing.", max_new_tokens=7),
    LanguageTask("plan", "What should the robot do next?", max_new_tokens=4, every=2, temperature=0.8),
]


def _policy(**kw):
    return MultiTaskPolicy.from_pretrained("tiny", robot="libero", tasks=TASKS, decode_budget=2, seed=0, **kw)


def _acts(robot: int, step: int) -> bool:
    return robot != 2 or step % 2 == 0  # robot 2 skips odd steps


@pytest.fixture(scope="module")
def observations():
    return [[make_obs("libero", np.random.default_rng(1000 * r + s)) for s in range(STEPS)] for r in range(ROBOTS)]


def _updates(updates):
    return sorted((u.request_id, u.task, u.frame, u.new_token_ids, u.new_text, u.done) for u in updates)


@pytest.fixture(scope="module")
def alone(observations):
    out = []
    for r in range(ROBOTS):
        with _policy(num_slots=16) as p:
            out.append([(lambda a, u: (a, _updates(u)))(*p.act(o)) for s, o in enumerate(observations[r]) if _acts(r, s)])
    return out


def _serve(observations, batching: bool):
    server = PolicyServer(_policy(num_slots=1), ServeConfig(max_robots=ROBOTS, batching=batching, window_ms=300))
    sessions = []
    for r in range(ROBOTS):
        server.engine.register(r)
        sessions.append(session_policy(server.template, SessionEngine(server.engine, r)))
    got = [[] for _ in range(ROBOTS)]
    errors = []

    def act(r, s):
        try:
            a, u = sessions[r].act(observations[r][s])
            got[r].append((a, _updates(u)))
        except Exception as e:  # noqa: BLE001 - re-raised in the test thread
            errors.append(e)

    for s in range(STEPS):
        threads = [threading.Thread(target=act, args=(r, s)) for r in range(ROBOTS) if _acts(r, s)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=120)
        assert not errors, errors
    robots_per_batch = [b["robots"] for b in server.engine.batches]
    for r in range(ROBOTS):
        server.engine.unregister(r).result(timeout=60)
    occupancy = server.engine.snapshot()
    server.pool.check_invariants()
    server.close()
    return got, robots_per_batch, occupancy


@pytest.mark.parametrize("batching", [True, False], ids=["batched", "one-at-a-time"])
def test_each_robot_gets_what_it_gets_alone(observations, alone, batching):
    got, robots_per_batch, occupancy = _serve(observations, batching)
    if batching:
        assert max(robots_per_batch) >= 2, f"frames never met in a batch: {robots_per_batch}"
    else:
        assert set(robots_per_batch) == {1}
    texts = 0
    for r in range(ROBOTS):
        assert len(got[r]) == len(alone[r])
        for f, ((a, u), (ra, ru)) in enumerate(zip(got[r], alone[r])):
            torch.testing.assert_close(a, ra, atol=ACTION_ATOL, rtol=1e-5, msg=lambda m: f"robot {r} call {f}: {m}")
            assert u == ru, f"robot {r} call {f}: language updates differ"
            texts += sum(len(x[3]) for x in u)
    assert texts > 50, "too few tokens for the comparison to mean anything"
    assert occupancy["pool_active"] == 0 and occupancy["requests_in_flight"] == 0, occupancy

