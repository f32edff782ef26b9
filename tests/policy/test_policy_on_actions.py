"""`act(on_actions=...)`: actions handed out as soon as the heads finish, before the frame's language decode steps
(the OxyGen paper's Sec. 4.7), and the obs-to-actions latency reported apart from the frame time."""
import numpy as np
import pytest

from oxygen_gym import LanguageTask, MultiTaskPolicy
from policy_obs import make_obs

TASKS = [LanguageTask("narrate", "What is the robot doing?", 12)]


@pytest.mark.parametrize("mode", ["oxygen", "shared", "isolated"])
def test_actions_are_handed_out_before_the_frames_decode_steps(mode):
    p = MultiTaskPolicy.from_pretrained("tiny", robot="libero", tasks=TASKS, decode_budget=4, mode=mode)
    rng = np.random.default_rng(0)
    seen = []

    def on_actions(actions):
        # the request from earlier frames has not advanced yet this frame
        seen.append((actions.copy(), {r.request_id: len(r.generated) for r in p.engine.in_flight()}))

    for frame in range(3):
        before = {r.request_id: len(r.generated) for r in p.engine.in_flight()}
        actions, _ = p.act(make_obs("libero", rng), on_actions=on_actions)
        assert len(seen) == frame + 1  # exactly once per call
        assert np.array_equal(seen[-1][0], actions)
        assert {i: seen[-1][1][i] for i in before} == before
    if mode == "oxygen":  # a request spans frames here: its tokens at the callback are last frame's
        assert seen[1][1][0] == 4
    stats = p.stats()["obs_to_actions_ms"]
    assert stats["window"] == 3 and 0 < stats["p50"] <= p.stats()["frame_ms"]["p99"] * 10


def test_parallel_mode_hands_out_actions_too():
    with MultiTaskPolicy.from_pretrained("tiny", robot="libero", tasks=TASKS, mode="parallel") as p:
        got = []
        actions, _ = p.act(make_obs("libero", np.random.default_rng(0)), on_actions=got.append)
        assert len(got) == 1 and np.array_equal(got[0], actions)
