"""One shared `Policy` and per-robot `PolicySession`s (policies/policy.py, policies/policy_session.py): two sessions of
one policy give each robot exactly what two separate policies with the same seeds give, and one session's state
(frame counter, seed, request ids, text streams, stats) never leaks into another's."""
import numpy as np
import pytest

from oxygen_gym import LanguageTask, MultiTaskPolicy
from oxygen_gym.engine.scheduler import FrameScheduler
from oxygen_gym.engine.slots import SlotPool
from oxygen_gym.policies.policy_session import PolicySession
from policy_obs import make_obs

TASKS = (
    LanguageTask("narrate", "Describe what the robot is doing.", max_new_tokens=5),
    LanguageTask("plan", "What should the robot do next?", max_new_tokens=3, every=2, temperature=0.8),
)
STEPS = 5


def _updates(updates):
    return [(u.request_id, u.task, u.frame, u.new_token_ids, u.new_text, u.done) for u in updates]


def _run(act, observations, reset_at=None, reset_seed=None, reset=None):
    out = []
    for s, o in enumerate(observations):
        if s == reset_at:
            reset(reset_seed)
        a, u = act(o)
        out.append((a, _updates(u)))
    return out


@pytest.fixture(scope="module")
def observations():
    return {r: [make_obs("libero", np.random.default_rng(100 * r + s)) for s in range(STEPS)] for r in (0, 1)}


def test_two_sessions_of_one_policy_are_two_separate_policies(observations):
    seeds = {0: 1, 1: 2}
    alone = {}
    for r in (0, 1):  # robot 1 starts a new episode with seed 7 at step 3
        with MultiTaskPolicy.from_pretrained("tiny", tasks=TASKS, decode_budget=2, seed=0, num_slots=8) as p:
            p.reset(seed=seeds[r])  # the same weights (a built-in's are drawn from the seed it was built with)
            alone[r] = _run(p.act, observations[r], reset_at=3 if r else None, reset_seed=7, reset=p.reset)
    with MultiTaskPolicy.from_pretrained("tiny", tasks=TASKS, decode_budget=2, seed=0, num_slots=8) as built:
        shared = built  # a MultiTaskPolicy is a Policy: its model and conventions, shared
        sessions = {r: shared.new_session(FrameScheduler(shared.model, SlotPool(**shared.pool_args), "oxygen"),
                                          seed=seeds[r]) for r in (0, 1)}
        assert all(isinstance(s, PolicySession) for s in sessions.values())
        got = {0: [], 1: []}
        for s in range(STEPS):  # interleaved, robot 1 first
            for r in (1, 0):
                if r == 1 and s == 3:
                    sessions[1].reset(7)
                a, u = sessions[r].act(observations[r][s])
                got[r].append((a, _updates(u)))
        for r in (0, 1):
            for step, ((want_a, want_u), (got_a, got_u)) in enumerate(zip(alone[r], got[r])):
                np.testing.assert_array_equal(got_a, want_a, err_msg=f"robot {r} step {step}")
                assert got_u == want_u, (r, step)
        # robot 1's reset restarted its own counter and ids stream only
        assert sessions[0].frame == STEPS and sessions[1].frame == STEPS - 3
        assert sessions[0].seed == 1 and sessions[1].seed == 7
        assert sessions[0].stats()["frames"] == STEPS and sessions[1].stats()["frames"] == STEPS
        assert sessions[0].last_frame["frame"] == STEPS - 1 and sessions[1].last_frame["frame"] == 1
        assert not shared.pool_built  # each session ran on the engine it was given


def test_a_policy_and_its_session_share_the_model_not_the_state():
    with MultiTaskPolicy.from_pretrained("tiny", tasks=TASKS[:1], decode_budget=2, seed=5, num_slots=8) as p:
        obs = make_obs("libero", np.random.default_rng(0))
        p.act(obs)
        other = p.session(FrameScheduler(p.model, SlotPool(**p.pool_args), "oxygen"))
        assert other.model is p.model and other.io is p.io and other.tasks is p.tasks and other.seed == 5
        assert other.budget is not p.budget  # its own decode budget state
        a, u = other.act(obs)
        assert other.frame == 1 and p.frame == 1 and [x.request_id for x in u] == [0]
        p.reset(seed=9)
        assert other.seed == 5 and other.frame == 1 and p.seed == 9
        with pytest.raises(AttributeError, match="no attribute 'pool'"):
            other.pool  # the session holds no pool: only the shared policy's read-only members pass through
