"""Several action experts on one prefill (docs/api.md "Action heads"): every head reads the frame's one prefix, with
its own noise (seeded by seed, frame and head name), horizon and steps.

`multi-tiny` is `tiny` plus two experts ("fast": horizon 10, 4 steps; "long": horizon 50, 6 steps) registered after
tiny's parameters, so its backbone and first expert are tiny's own for the same seed. On CPU every mode runs the
same kernels on the same shapes for a head, and the measured difference between modes is exactly 0, so the
tolerance is 0."""
import numpy as np
import pytest
import torch

from oxygen_gym import LanguageTask, MultiTaskPolicy
from oxygen_gym.engine.frame import FrameInput
from policy_obs import make_obs
from text_checks import same_text as _same_text

TASKS = [
    LanguageTask("narrate", "Describe what the robot is doing.", max_new_tokens=7),
    LanguageTask("plan", "What should the robot do next?", max_new_tokens=4, every=2),
]
HEAD_SETS = [["actions"], ["actions", "fast"], ["actions", "fast", "long"], ["long", "fast"]]


def _run(model="multi-tiny", mode="oxygen", heads=None, robot="aloha", frames=5, k=2, tasks=TASKS, seed=0):
    """Actions per frame (a dict per frame, or an array for one head) and, per request, (text so far, done)."""
    rng = np.random.default_rng(7)
    acts, texts = [], {}
    with MultiTaskPolicy.from_pretrained(
        model, robot=robot, tasks=tasks, decode_budget=k, mode=mode, seed=seed, num_slots=4, heads=heads
    ) as policy:
        for _ in range(frames):
            a, updates = policy.act(make_obs(robot, rng))
            acts.append(a)
            texts.update({u.request_id: (u.text, u.done) for u in updates})
    return acts, texts


@pytest.fixture(scope="module")
def oxygen_all_heads():
    return _run()


def test_a_multi_head_policy_returns_every_head_by_name(oxygen_all_heads):
    acts, texts = oxygen_all_heads
    with MultiTaskPolicy.from_pretrained("multi-tiny", robot="aloha") as policy:
        assert policy.action_heads == ["actions", "fast", "long"]
    for a in acts:
        assert list(a) == ["actions", "fast", "long"]
        # aloha's horizon is 50; "fast" denoises its own 10
        assert a["actions"].shape == (50, 14) and a["long"].shape == (50, 14) and a["fast"].shape == (10, 14)
        assert all(x.dtype == np.float32 and np.isfinite(x).all() for x in a.values())
    # the heads are different experts with different noise: their actions differ
    assert not np.allclose(acts[0]["actions"], acts[0]["long"], atol=1e-3)
    assert len(texts) >= 5 and sum(done for _, done in texts.values()) >= 4


@pytest.mark.parametrize("mode", ["isolated", "shared"])
def test_every_head_is_equal_across_modes(oxygen_all_heads, mode):
    ref_acts, ref_texts = oxygen_all_heads
    acts, texts = _run(mode=mode)
    _same_text(texts, ref_texts)
    for f, (a, b) in enumerate(zip(acts, ref_acts)):
        for h in b:
            np.testing.assert_array_equal(a[h], b[h], err_msg=f"{mode} frame {f} head {h}")


@pytest.mark.parametrize("heads", HEAD_SETS[1:], ids=["+".join(h) for h in HEAD_SETS[1:]])
def test_a_head_run_alone_equals_the_same_head_fanned_out(oxygen_all_heads, heads):
    """A subset keeps each head's actions (noise by name, not by place) and the text (language is unchanged by how
    many heads share the prefix)."""
    ref_acts, ref_texts = oxygen_all_heads
    acts, texts = _run(heads=heads)
    _same_text(texts, ref_texts)
    for f, (a, b) in enumerate(zip(acts, ref_acts)):
        assert list(a) == heads
        for h in heads:
            np.testing.assert_array_equal(a[h], b[h], err_msg=f"frame {f} head {h}")
    alone = {h: _run(heads=[h], tasks=[], frames=2)[0] for h in heads}
    for h in heads:
        for f in range(2):
            np.testing.assert_array_equal(alone[h][f], ref_acts[f][h], err_msg=f"{h} alone, frame {f}")


def test_adding_heads_changes_neither_the_first_head_nor_the_text(oxygen_all_heads):
    """multi-tiny's backbone and first expert are tiny's: a one-head tiny policy gives the same actions and text."""
    ref_acts, ref_texts = oxygen_all_heads
    acts, texts = _run(model="tiny")
    _same_text(texts, ref_texts)
    for f, (a, b) in enumerate(zip(acts, ref_acts)):
        assert isinstance(a, np.ndarray)  # one head: one array, as before
        np.testing.assert_array_equal(a, b["actions"], err_msg=f"frame {f}")


def test_parallel_mode_serves_every_head():
    ref, ref_texts = _run(mode="isolated", frames=2, robot="libero")
    acts, texts = _run(mode="parallel", frames=2, robot="libero")
    _same_text(texts, ref_texts)
    for a, b in zip(acts, ref):
        for h in b:
            np.testing.assert_allclose(a[h], b[h], atol=1e-6)


def test_bad_head_names_are_errors_naming_the_field():
    with pytest.raises(ValueError, match=r"heads: unknown action head\(s\) \['nope'\]"):
        MultiTaskPolicy.from_pretrained("multi-tiny", heads=["actions", "nope"])
    with pytest.raises(ValueError, match="heads: expected a non-empty list"):
        MultiTaskPolicy.from_pretrained("multi-tiny", heads="fast")
    with pytest.raises(ValueError, match="heads: names repeat"):
        MultiTaskPolicy.from_pretrained("multi-tiny", heads=["fast", "fast"])
    frame = FrameInput(0, None, {"actions": torch.zeros(1, 10, 32), "bogus": torch.zeros(1, 10, 32)})
    with pytest.raises(ValueError, match=r"unknown action head\(s\) \['bogus'\]"):
        frame.head_noise(["actions", "fast", "long"])


def test_head_noise_is_seeded_by_seed_frame_and_name():
    from oxygen_gym.policies.multitask import head_noise_seed

    with MultiTaskPolicy.from_pretrained("multi-tiny", robot="libero", heads=["long", "actions"]) as p:
        n0, n1 = p.frame_noise(0), p.frame_noise(1)
    with MultiTaskPolicy.from_pretrained("multi-tiny", robot="libero") as q:
        m0 = q.frame_noise(0)
    assert torch.equal(n0["long"], m0["long"]) and torch.equal(n0["actions"], m0["actions"])
    assert not torch.equal(n0["long"], n0["actions"]) and not torch.equal(n0["long"], n1["long"])
    assert head_noise_seed(0, 3, "fast") != head_noise_seed(1, 3, "fast")


def test_each_extra_head_is_its_own_expert_as_a_one_head_model():
    """multi-tiny's head "long" equals a one-head tiny whose expert is that head's weights (same noise, its 6 steps):
    the fan-out reads the shared prefix with the right expert, not the first one."""
    from oxygen_gym.engine.model_api import PrefixState
    from oxygen_gym.model.pi05.init import build_model
    from oxygen_gym.policies import normalize
    from oxygen_gym.policies.model_io import io_for
    from oxygen_gym.policies.robots import get_robot

    multi = build_model("multi-tiny", seed=5)
    alone = build_model("tiny", seed=9)
    parts = multi.extra_experts["long"].state_dict()
    alone.load_state_dict({**{k: v for k, v in multi.state_dict().items() if not k.startswith("extra_experts.")}, **parts})
    alone.clear_caches()
    robot = get_robot("libero")
    io = io_for(multi, MultiTaskPolicy.from_pretrained("tiny").tokenizer, robot=robot, camera_slots=dict(robot.cameras),
                state_normalizer=normalize.Normalizer("IDENTITY"))
    p = io.prefix_inputs(make_obs("libero", np.random.default_rng(1))["images"], np.zeros(8, np.float32), "pick it up")
    noise = torch.randn(1, 50, 32, generator=torch.Generator().manual_seed(4))
    cache = multi.new_cache(1, multi.max_prefix_length() + 50)
    state: PrefixState = multi.prefill_frame(cache, p)
    got = multi.denoise_head("long", cache, state, noise, 6)
    first = multi.denoise_head("actions", cache, state, noise, 6)
    want = alone.sample_actions(p.images, p.image_masks, p.tokens, p.token_masks, noise=noise, num_steps=6)
    torch.testing.assert_close(got, want, atol=1e-5, rtol=0)  # measured 0 (same kernels, same shapes)
    assert (got - first).abs().max() > 1e-2  # a different expert: different actions from the same noise
