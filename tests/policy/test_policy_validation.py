"""Every bad input raises a ValueError naming the field, and a bad observation leaves in-flight requests intact:
the next good call continues them exactly as if the bad call never happened."""
import numpy as np
import pytest

from oxygen_gym import LanguageTask, MultiTaskPolicy
from policy_obs import make_obs


def _policy(**kw):
    args = dict(robot="libero", tasks=[LanguageTask("narrate", "Describe the scene.", max_new_tokens=6)], decode_budget=2, num_slots=4)
    args.update(kw)
    return MultiTaskPolicy.from_pretrained("tiny", **args)


def _bad_observations(good):
    def with_(**changes):
        obs = {"images": dict(good["images"]), "state": good["state"].copy(), "prompt": good["prompt"]}
        for k, v in changes.items():
            if k.startswith("img_"):
                obs["images"][k[4:]] = v
            elif v is _DROP:
                del obs[k]
            else:
                obs[k] = v
        return obs

    missing_cam = with_()
    del missing_cam["images"]["wrist"]
    yield "missing camera", missing_cam, r"missing camera\(s\) \['wrist'\]"
    yield "extra camera", with_(img_top=good["images"]["base"]), r"unknown camera\(s\) \['top'\]"
    yield "image shape", with_(img_base=np.zeros((64, 64), np.uint8)), r"obs\['images'\]\['base'\]: expected shape \(H, W, 3\) or \(3, H, W\)"
    yield "image dtype", with_(img_wrist=np.zeros((64, 64, 3), np.int16)), r"obs\['images'\]\['wrist'\]: expected dtype uint8 \(or float in \[0, 1\]\)"
    yield "float image range", with_(img_wrist=np.full((64, 64, 3), 1.5, np.float32)), r"obs\['images'\]\['wrist'\]: float images must hold values in \[0, 1\]"
    yield "nan state", with_(state=np.array([np.nan] + [0.0] * 7, np.float32)), r"obs\['state'\]: holds NaN or inf"
    yield "huge state", with_(state=np.array([1e20] + [0.0] * 7, np.float32)), r"obs\['state'\]: a value of magnitude 1e\+20, outside"
    yield "state length", with_(state=np.zeros(7, np.float32)), r"obs\['state'\] must have shape \(8,\)"
    yield "state dtype", with_(state=np.zeros(8, np.int64)), r"obs\['state'\] must be a float"
    yield "empty prompt", with_(prompt="  "), r"obs\['prompt'\] must be a non-empty str"
    yield "long prompt", with_(prompt="pick up the bowl " * 80), r"obs\['prompt'\].*max_token_len=200"
    yield "no state", with_(state=_DROP), r"obs\['state'\] is missing"


_DROP = object()


def test_bad_observations_raise_and_in_flight_requests_survive():
    rng = np.random.default_rng(0)
    good = [make_obs("libero", rng) for _ in range(4)]
    cases = list(_bad_observations(good[1]))
    # This prompt's requests run to their 6-token budget on the tiny model (no EOS), so a bad call that shortened
    # an in-flight request's budget, or lengthened it, would change where request 0 stops.
    task = LanguageTask("narrate", "Narrate what the robot does.", max_new_tokens=6)
    # Reference: the same good observations with no bad calls in between.
    with _policy(tasks=[task]) as ref:
        ref_out = [ref.act(o) for o in good]
        eos = ref.tokenizer.eos_id
    with _policy(tasks=[task]) as policy:
        out = [policy.act(good[0])]
        assert [r.request_id for r in policy.engine.in_flight()] == [0]  # request 0 is mid-way when the bad calls come
        for name, bad, pattern in cases:
            with pytest.raises(ValueError, match=pattern):
                policy.act(bad)
        out += [policy.act(o) for o in good[1:]]
    for (a, ua), (b, ub) in zip(out, ref_out):
        np.testing.assert_array_equal(a, b)
        assert ua == ub
    first = [u for _, ups in ref_out for u in ups if u.request_id == 0]
    tokens = [t for u in first for t in u.new_token_ids]
    assert first[-1].done and len(tokens) == 6 and eos not in tokens  # the budget binds (no EOS came)


@pytest.mark.parametrize(
    "kwargs,pattern",
    [
        (dict(robot="spot"), r"robot: unknown robot 'spot'"),
        (dict(mode="turbo"), r"mode: unknown mode 'turbo'"),
        (dict(decode_budget=0), r"decode_budget must be a positive int or 'auto'"),
        (dict(decode_budget=-3), r"decode_budget must be a positive int"),
        (dict(decode_budget="fast"), r"decode_budget must be a positive int or 'auto'"),
        (dict(decode_budget="auto"), r"target_action_hz must be > 0"),
        (dict(decode_budget="auto", target_action_hz=10, language_deadline_s=-1), r"language_deadline_s must be > 0"),
    ],
)
def test_bad_policy_arguments(kwargs, pattern):
    with pytest.raises(ValueError, match=pattern):
        _policy(**kwargs)


@pytest.mark.parametrize(
    "kwargs,pattern",
    [
        (dict(max_new_tokens=0), r"max_new_tokens must be a positive int"),
        (dict(max_new_tokens=-2), r"max_new_tokens must be a positive int"),
        (dict(prompt=""), r"prompt must be a non-empty string"),
        (dict(every=0), r"every must be a positive int"),
        (dict(temperature=-1.0), r"temperature must be >= 0"),
    ],
)
def test_bad_language_tasks(kwargs, pattern):
    args = dict(name="narrate", prompt="Describe.", max_new_tokens=5)
    args.update(kwargs)
    with pytest.raises(ValueError, match=pattern):
        LanguageTask(**args)


def test_bad_model_name_or_checkpoint(tmp_path):
    with pytest.raises((ValueError, FileNotFoundError), match="model.safetensors|config.json|not found|does not exist"):
        MultiTaskPolicy.from_pretrained(str(tmp_path), robot="libero")
