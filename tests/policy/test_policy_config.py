"""The policy's options as one record (policies/policy_config.py): each bad field is an error naming it, the record
and the keywords build the same policy, and eval and serve hand `from_pretrained` that same record."""
import dataclasses

import numpy as np
import pytest

from oxygen_gym import LanguageTask, MultiTaskPolicy, RTCConfig
from oxygen_gym.policies.checkpoints.overrides import ConventionOverrides
from oxygen_gym.policies.policy_config import PolicyConfig
from policy_obs import make_obs

NARRATE = LanguageTask("narrate", "Describe what the robot is doing.", max_new_tokens=6)


@pytest.mark.parametrize("field, value, named", [
    ("robot", "spot", "robot: unknown robot 'spot'"),
    ("robot", 3, "robot: expected a robot name or a RobotSpec"),
    ("tasks", ["narrate"], "tasks must be LanguageTask objects"),
    ("tasks", [NARRATE, NARRATE], "tasks: names must be unique"),
    ("decode_budget", 0, "decode_budget must be a positive int or 'auto'"),
    ("decode_budget", "fast", "decode_budget must be a positive int or 'auto'"),
    ("mode", "turbo", "mode: unknown mode 'turbo'"),
    ("seed", 1.5, "seed: expected an int"),
    ("device", "gpu0", "device: expected 'cpu', 'cuda' or 'cuda:N'"),
    ("dtype", "float64", "dtype: expected one of"),
    ("noise_scale", -1.0, "noise_scale must be a number >= 0"),
    ("rtc", {"method": "cheap"}, "rtc: expected an RTCConfig"),
    ("heads", "actions", "heads: expected a non-empty list of head names"),
    ("adapters", 7, "adapters: expected"),
    ("merge_adapters", "lora", "merge_adapters: expected a list"),
    ("num_steps", 0, "num_steps: expected an int >= 1"),
    ("chunk", True, "chunk: expected an int >= 1"),
    ("num_slots", 0, "num_slots must be >= 1"),
    ("conventions", {"tokenizer": "x"}, "conventions: expected a ConventionOverrides"),
    ("conventions", ConventionOverrides(heads=("actions",)), "conventions.heads: set PolicyConfig.heads"),
])
def test_a_bad_field_is_an_error_naming_it(field, value, named):
    with pytest.raises(ValueError, match=named.replace("(", r"\(").replace(")", r"\)")):
        PolicyConfig(**{field: value})
    if field != "conventions":  # from_pretrained's keyword of the same name goes through the same check
        with pytest.raises(ValueError, match=named.replace("(", r"\(").replace(")", r"\)")):
            MultiTaskPolicy.from_pretrained("tiny", **{field: value})


def test_auto_budget_and_convention_fields_are_checked_by_name():
    with pytest.raises(ValueError, match="target_action_hz must be > 0 with decode_budget='auto'"):
        PolicyConfig(decode_budget="auto")
    with pytest.raises(ValueError, match="language_deadline_s must be > 0"):
        PolicyConfig(decode_budget="auto", target_action_hz=10.0, language_deadline_s=0)
    with pytest.raises(ValueError, match="action_horizon must be a positive int"):
        PolicyConfig.from_kwargs(action_horizon=0)
    with pytest.raises(TypeError, match=r"unknown policy option\(s\) \['horizon'\]"):
        PolicyConfig.from_kwargs(horizon=5)
    with pytest.raises(TypeError, match="unknown policy option"):
        MultiTaskPolicy.from_pretrained("tiny", horizon=5)


def test_the_record_and_the_keywords_build_the_same_policy():
    kw = dict(robot="libero", tasks=[NARRATE], decode_budget=2, seed=3, noise_scale=0.5, num_slots=4,
              rtc=RTCConfig(method="cheap"), action_horizon=6)
    config = PolicyConfig.from_kwargs(**kw)
    assert config.tasks == (NARRATE,) and config.conventions.action_horizon == 6
    obs = [make_obs("libero", np.random.default_rng(s)) for s in range(3)]
    with MultiTaskPolicy.from_pretrained("tiny", **kw) as a, MultiTaskPolicy.from_pretrained("tiny", config=config) as b:
        assert a.config == b.config == config.replace(robot=a.robot)
        assert a.horizon == b.horizon == 6 and a.noise_scale == b.noise_scale == 0.5
        for o in obs:
            (x, u), (y, v) = a.act(o), b.act(o)
            np.testing.assert_array_equal(x, y)
            assert [w.new_token_ids for w in u] == [w.new_token_ids for w in v]
    # keywords given beside a record override its fields
    with MultiTaskPolicy.from_pretrained("tiny", config=config, seed=4, num_slots=2) as c:
        assert c.seed == 4 and c.config.num_slots == 2 and c.config.decode_budget == 2


def test_eval_and_serve_hand_from_pretrained_one_record():
    from oxygen_gym.eval.libero.eval_config import EvalConfig
    from oxygen_gym.serve.serve_command import add_arguments, policy_config

    tasks = [{"name": "narrate", "prompt": "What is the robot doing?", "max_new_tokens": 12, "every": 1}]
    ev = EvalConfig(checkpoint="tiny", mode="shared", decode_budget=3, language_tasks=tasks, noise_scale=0.0,
                    dtype="float32", discrete_state=True)
    got = ev.policy_config()
    assert got == PolicyConfig(robot="libero", tasks=(LanguageTask(**tasks[0]),), decode_budget=3, mode="shared",
                               dtype="float32", noise_scale=0.0, seed=0, conventions=ev.overrides())
    assert got.conventions.discrete_state is True and got.conventions.image_resize == "pil"  # openpi's resize
    with pytest.raises(ValueError, match="mode"):
        EvalConfig(checkpoint="tiny", mode="turbo")

    import argparse

    parser = argparse.ArgumentParser()
    add_arguments(parser)
    args = parser.parse_args(["--checkpoint", "tiny", "--task", "narrate", "--max-new-tokens", "5", "--decode-budget",
                              "4", "--seed", "2", "--heads", "actions", "--rtc-method", "cheap", "--discrete-state"])
    cfg = policy_config(args)
    assert (cfg.mode, cfg.decode_budget, cfg.seed, cfg.heads, cfg.num_slots) == ("oxygen", 4, 2, ("actions",), 1)
    assert cfg.rtc == RTCConfig(method="cheap") and cfg.conventions.discrete_state is True
    assert [t.max_new_tokens for t in cfg.tasks] == [5]
    assert dataclasses.replace(cfg) == cfg  # a plain frozen record: comparable, copyable
