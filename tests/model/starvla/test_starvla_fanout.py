"""StarVLA's heads fanned out from one prefill (E = 2, 3, 4 experts counting language): every head and the text are
the same in `isolated` (a prefill per head and per request), `shared` and `oxygen`; a head run alone equals the same
head fanned out; adding OFT (whose queries run through the backbone past the prefix) changes neither the other heads
nor the language requests. Tolerance 0: on a CPU every mode runs the same kernels on the same shapes (measured 0)."""
import numpy as np
import pytest

from oxygen_gym import LanguageTask, MultiTaskPolicy
from policy_obs import make_obs

TASKS = [
    LanguageTask("narrate", "Describe what the robot is doing.", max_new_tokens=6),
    LanguageTask("plan", "What should the robot do next?", max_new_tokens=4, every=2),
]
HEAD_SETS = {2: ["pi"], 3: ["pi", "groot"], 4: ["pi", "groot", "oft"]}


def _run(mode="oxygen", heads=None, frames=4, tasks=TASKS):
    rng = np.random.default_rng(3)
    acts, texts = [], {}
    with MultiTaskPolicy.from_pretrained("starvla-tiny", robot="libero", tasks=tasks, decode_budget=2, mode=mode,
                                         seed=0, num_slots=4, heads=heads) as policy:
        for _ in range(frames):
            a, updates = policy.act(make_obs("libero", rng))
            acts.append(a if isinstance(a, dict) else {policy.action_heads[0]: a})
            texts.update({u.request_id: (u.text, u.done) for u in updates})
    return acts, texts


def _same_text(texts: dict, ref: dict) -> None:
    common = set(texts) & set(ref)
    assert len(common) >= max(len(texts), len(ref)) - 2 and common
    for rid in common:
        (text, done), (ref_text, ref_done) = texts[rid], ref[rid]
        if done and ref_done:
            assert text == ref_text, f"request {rid}"
        else:
            short, long = sorted((text, ref_text), key=len)
            assert long.startswith(short), f"request {rid}: {text!r} vs {ref_text!r}"


@pytest.fixture(scope="module")
def all_heads():
    return _run()


@pytest.mark.parametrize("mode", ["isolated", "shared"])
def test_four_experts_equal_across_modes(all_heads, mode):
    ref_acts, ref_texts = all_heads
    acts, texts = _run(mode=mode)
    _same_text(texts, ref_texts)
    for f, (a, b) in enumerate(zip(acts, ref_acts)):
        assert list(a) == ["pi", "groot", "oft"]
        for h in b:
            np.testing.assert_array_equal(a[h], b[h], err_msg=f"{mode} frame {f} head {h}")


@pytest.mark.parametrize("experts", [2, 3])
def test_fewer_experts_keep_each_head_and_the_text(all_heads, experts):
    """E = 2 (pi + language) and E = 3 (pi, groot + language) equal the same heads of E = 4: neither the other heads
    nor OFT's queries past the prefix change a head or a language request."""
    ref_acts, ref_texts = all_heads
    heads = HEAD_SETS[experts]
    for mode in ("oxygen", "isolated"):
        acts, texts = _run(mode=mode, heads=heads, frames=3)
        _same_text(texts, ref_texts)
        for f, (a, b) in enumerate(zip(acts, ref_acts)):
            assert list(a) == heads
            for h in heads:
                np.testing.assert_array_equal(a[h], b[h], err_msg=f"E={experts} {mode} frame {f} head {h}")


@pytest.mark.parametrize("head", ["pi", "groot", "oft"])
def test_a_head_alone_equals_the_head_fanned_out(all_heads, head):
    ref_acts, _ = all_heads
    acts, _ = _run(heads=[head], tasks=[], frames=2)
    for f in range(2):
        np.testing.assert_array_equal(acts[f][head], ref_acts[f][head], err_msg=f"{head} alone, frame {f}")


def test_heads_differ_and_bad_head_names_fail():
    acts, _ = _run(frames=1, tasks=[])
    a = acts[0]
    assert a["pi"].shape == (10, 7) and a["groot"].shape == (5, 7) and a["oft"].shape == (4, 7)
    assert not np.allclose(a["pi"][:4], a["oft"], atol=1e-3)
    with pytest.raises(ValueError, match=r"heads: unknown action head\(s\) \['actions'\]"):
        MultiTaskPolicy.from_pretrained("starvla-tiny", robot="libero", heads=["pi", "actions"])


@pytest.mark.parametrize("head", ["pi", "groot"])
def test_a_model_holding_one_head_equals_that_head_of_the_full_model(all_heads, head):
    """The prefill keeps every layer when pi is there and only the last one otherwise: groot's tap is the same
    last layer either way, pi's the same layers (a `heads=` checkpoint load builds such a model)."""
    from oxygen_gym.model.qwen3_vl.qwen_tokenizer import QwenTokenizer, builtin_qwen_tokenizer
    from oxygen_gym.model.starvla.starvla_model import build_starvla

    ref_acts, _ = all_heads
    model = build_starvla("starvla-tiny", seed=0, heads=[head])
    rng = np.random.default_rng(3)
    horizon = ref_acts[0][head].shape[0]  # groot denoises its own horizon beside pi; alone it is asked for that
    with MultiTaskPolicy(model, QwenTokenizer(builtin_qwen_tokenizer()), robot="libero", seed=0, num_slots=4,
                         action_horizon=horizon) as policy:
        for f in range(2):
            a, _ = policy.act(make_obs("libero", rng))
            np.testing.assert_array_equal(a, ref_acts[f][head], err_msg=f"{head} alone in the model, frame {f}")
