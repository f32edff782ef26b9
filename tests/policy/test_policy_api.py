"""MultiTaskPolicy's public contract (docs/api.md): shapes, the language update stream, modes, input validation."""
import numpy as np
import pytest

from oxygen_gym import LanguageTask, LanguageUpdate, MultiTaskPolicy
from policy_obs import make_obs

EXPECTED = {"libero": (10, 7), "droid": (15, 8), "aloha": (50, 14)}


def _policy(robot="libero", mode="oxygen", k=2, tasks=None, **kw):
    tasks = tasks if tasks is not None else [LanguageTask("narrate", "Describe what the robot is doing.", max_new_tokens=5)]
    return MultiTaskPolicy.from_pretrained("tiny", robot=robot, tasks=tasks, decode_budget=k, mode=mode, seed=0, num_slots=8, **kw)


@pytest.mark.parametrize("robot", ["libero", "droid", "aloha"])
def test_act_shapes_and_update_stream(robot):
    rng = np.random.default_rng(0)
    with _policy(robot) as policy:
        seen: dict[int, list[LanguageUpdate]] = {}
        for _ in range(6):
            actions, updates = policy.act(make_obs(robot, rng))
            assert actions.shape == EXPECTED[robot] and actions.dtype == np.float32
            assert np.all(np.isfinite(actions))
            for u in updates:
                assert isinstance(u, LanguageUpdate) and u.task == "narrate"
                seen.setdefault(u.request_id, []).append(u)
        assert sorted(seen) == list(range(len(seen)))  # ids unique and increasing
        finished = [ups for ups in seen.values() if ups[-1].done]
        assert finished, "no request finished in 6 frames with 5 tokens and k=2"
        for ups in finished:
            assert sum(len(u.new_token_ids) for u in ups) <= 5
            assert "".join(u.new_text for u in ups) == ups[-1].text
            assert all(not u.done for u in ups[:-1])
            assert ups[0].frame == ups[0].request_id  # one request per frame, started at its frame
        s = policy.stats()
        for key in ("frames", "action_hz", "language_tokens_per_s", "mean_batch_size", "frame_ms", "prefill", "denoise", "decode", "manager", "peak_memory_bytes"):
            assert key in s
        assert s["frames"] == 6 and s["frame_ms"]["p50"] > 0 and s["mean_batch_size"] >= 1
        # measured (the process's peak RSS on CPU) holds at least the computed weights + KV pool
        assert s["peak_memory_bytes"] >= s["held_memory_bytes"] > 0
        assert policy.last_frame["frame_ms"] > 0


def test_aloha_optional_camera_and_conversions_roundtrip():
    from oxygen_gym.policies.robots.aloha_robot import _gripper_from_angular, aloha_actions_from_pi, aloha_state_to_pi

    state = np.linspace(-0.4, 0.4, 14).astype(np.float32)
    state[[6, 13]] = [0.3, 0.7]
    pi = aloha_state_to_pi(state)
    assert np.allclose(pi[[1, 2, 8, 9]], -state[[1, 2, 8, 9]])  # openpi's joint flips
    acts = np.tile(pi, (3, 1))
    back = aloha_actions_from_pi(acts)
    assert np.allclose(back[:, [1, 2]], state[[1, 2]])
    assert np.allclose(back[:, 6], _gripper_from_angular(pi[6]))
    rng = np.random.default_rng(1)
    with _policy("aloha", tasks=[]) as policy:
        obs = make_obs("aloha", rng)
        obs["images"]["low"] = obs["images"]["high"]  # optional camera: accepted, ignored
        actions, updates = policy.act(obs)
        assert actions.shape == (50, 14) and updates == []


@pytest.fixture(scope="module")
def reference_run():
    return _run_mode("isolated")


def _run_mode(mode: str, frames: int = 6):
    rng = np.random.default_rng(7)
    tasks = [LanguageTask("narrate", "Describe the scene.", max_new_tokens=6),
             LanguageTask("plan", "Next step:", max_new_tokens=3, every=2)]
    texts, tokens, actions = {}, {}, []
    with _policy(mode=mode, k=2, tasks=tasks) as policy:
        for f in range(frames + 4):
            obs = make_obs("libero", rng if f < frames else np.random.default_rng(99))
            a, updates = policy.act(obs)
            actions.append(a)
            for u in updates:
                tokens.setdefault(u.request_id, []).extend(u.new_token_ids)
                if u.done:
                    texts[u.request_id] = u.text
    return texts, tokens, actions


@pytest.mark.parametrize("mode", ["shared", "oxygen", "parallel"])
def test_all_modes_same_actions_and_text(reference_run, mode):
    ref_texts, ref_tokens, ref_actions = reference_run
    texts, tokens, actions = _run_mode(mode)
    assert len(ref_texts) >= 8
    assert len({t for seq in ref_tokens.values() for t in seq}) > 5, "degenerate model output: the check would be vacuous"
    # every request of the first frames finished in both; later ones may still be in flight (oxygen)
    assert set(range(8)) <= set(texts)
    for rid, text in texts.items():
        assert text == ref_texts[rid]
    for rid, seq in tokens.items():
        assert seq == ref_tokens[rid][: len(seq)]
    for a, b in zip(actions, ref_actions):
        np.testing.assert_array_equal(a, b)  # measured: bit-identical in every mode (same kernels and shapes)


def test_same_seed_same_noise_different_seed_differs():
    rng = np.random.default_rng(3)
    obs = make_obs("libero", rng)
    with _policy(tasks=[]) as p1, _policy(tasks=[]) as p2:
        a1, _ = p1.act(obs)
        a2, _ = p2.act(obs)
        np.testing.assert_array_equal(a1, a2)
        b1, _ = p1.act(obs)  # frame 1 draws new noise
        assert not np.allclose(a1, b1)


def test_temperature_sampling_is_seeded_and_mode_independent():
    def run(mode):
        rng = np.random.default_rng(5)
        tasks = [LanguageTask("narrate", "Say something.", max_new_tokens=6, temperature=1.0)]
        out = {}
        with _policy(mode=mode, k=3, tasks=tasks) as p:
            for _ in range(5):
                for u in p.act(make_obs("libero", rng))[1]:
                    out.setdefault(u.request_id, []).extend(u.new_token_ids)
        return out

    a, b = run("oxygen"), run("isolated")  # oxygen's last requests are still in flight: compare prefixes
    assert sum(len(a[r]) == 6 for r in a) >= 3
    for rid, seq in a.items():
        assert seq == b[rid][: len(seq)]
    assert len({t for seq in a.values() for t in seq}) > 3
