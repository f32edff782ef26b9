"""What a checkpoint declares for its own execution reaches whatever runs it, and an explicit argument always wins:
config.json `replan_steps` becomes `MultiTaskPolicy.replan_steps`, which `envs.run_episode` executes per policy call
and the server's metadata says; config.json `language_tasks` becomes `MultiTaskPolicy.declared_tasks`, which
`oxygen-gym serve` narrates with. And `act()` takes the images the server takes (float in [0, 1], CHW), by one rule.

The episodes run on the real ALOHA sim (the cheapest to step), driven by tiny checkpoints declaring 2 and 4;
tests/policy/test_replan_steps.py covers eval's and the demo's reading of the same declaration."""
from __future__ import annotations

import argparse
import json
from collections import Counter

import numpy as np
import pytest

from oxygen_gym import LanguageTask, MultiTaskPolicy
from oxygen_gym.model import CheckpointError, build_model, save_pretrained
from oxygen_gym.policies.checkpoints.language_tasks import declared_language_tasks
from oxygen_gym.policies.inputs import ObservationError, image_uint8_hwc
from oxygen_gym.serve.observations import to_policy_obs

from declared_checkpoints import STATS, declared_and_plain, identity_stats
from policy_obs import make_obs

STEPS = 8
NARRATE = {"name": "narrate", "prompt": "What is the robot doing?", "max_new_tokens": 7}
GENERIC = ("Describe what the robot is doing.", 30)  # serve's narrate preset (policies/task_args.py)


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory):
    """Tiny ALOHA checkpoints (10 actions per call): declaring replan_steps 2 and a narration task, declaring
    replan_steps 4, and declaring nothing."""
    stats = identity_stats(14, 14)
    two, plain = declared_and_plain(tmp_path_factory.mktemp("two"), stats, replan_steps=2, language_tasks=[NARRATE])
    four, _ = declared_and_plain(tmp_path_factory.mktemp("four"), stats, replan_steps=4)
    return {2: two, 4: four, None: plain}


def _policy(path, **kw) -> MultiTaskPolicy:
    return MultiTaskPolicy.from_pretrained(path, robot="aloha", num_slots=2, **kw)


def test_the_policy_carries_the_declaration_and_an_argument_wins(checkpoints):
    for declared, path in checkpoints.items():
        with _policy(path) as p:
            assert p.replan_steps == declared and p.horizon == 10
            assert p.session(p.engine).replan_steps == declared  # a server's robot sessions carry it too
    with _policy(checkpoints[2], replan_steps=3) as p:
        assert p.replan_steps == 3
    with _policy(checkpoints[None], replan_steps=10) as p:
        assert p.replan_steps == 10
    with MultiTaskPolicy.from_pretrained("tiny", robot="libero", replan_steps=5) as p:
        assert p.replan_steps == 5 and p.declared_tasks == ()
    with MultiTaskPolicy.from_pretrained("tiny", robot="libero") as p:
        assert p.replan_steps is None
    for bad in (0, 11, True, 2.0, "2"):
        with pytest.raises(ValueError, match=r"replan_steps must be an int in 1\.\.10 \(the actions act\(\) returns"):
            _policy(checkpoints[2], replan_steps=bad)


def test_a_declaration_beyond_what_the_policy_returns_is_a_clear_error(checkpoints):
    with pytest.raises(CheckpointError, match=r"config.json: 'replan_steps' is 4 but this policy returns 3 actions "
                                              r"per call; pass replan_steps="):
        _policy(checkpoints[4], action_horizon=3)
    with _policy(checkpoints[4], action_horizon=3, replan_steps=3) as p:
        assert p.replan_steps == 3 and p.horizon == 3


def test_declared_tasks_are_read_back(checkpoints, capsys):
    from oxygen_gym.cli import main

    with _policy(checkpoints[2]) as p:
        assert p.declared_tasks == (LanguageTask("narrate", "What is the robot doing?", 7),)
        assert p.tasks == []  # declared, not run unless asked for
    assert main(["inspect", str(checkpoints[2]), "--robot", "aloha"]) == 0
    out = capsys.readouterr().out
    assert "language:   narrate 'What is the robot doing?' (7 tokens) (config.json language_tasks" in out
    for path in (checkpoints[4], checkpoints[None], "tiny"):
        assert declared_language_tasks(path) == ()
    # the shipped model declares its narration and its memory adapter's task, with the adapter it needs
    with MultiTaskPolicy.from_pretrained("libero-spatial", robot="libero") as p:
        assert p.replan_steps == 3
        assert p.declared_tasks == (LanguageTask("narrate", "What is the robot doing?", 12),
                                    LanguageTask("memory", "What did the robot do last?", 12, adapter="memory"))
        declared = p.declared_tasks
    with MultiTaskPolicy.from_pretrained("libero-spatial", robot="libero", tasks=declared, adapters=["memory"]) as p:
        assert [t.name for t in p.tasks] == ["narrate", "memory"]


def test_the_trainer_declares_the_task_it_trained(tmp_path):
    from oxygen_gym.train.trainer import TrainConfig, export

    cfg = TrainConfig(data="unused", out=str(tmp_path), narrate_prompt="What now?", narrate_max_new_tokens=9)
    folder = export(build_model("tiny", seed=0), tmp_path, STATS, cfg, step=0, dataset_info={}, seconds=0.0)
    assert declared_language_tasks(folder) == (LanguageTask("narrate", "What now?", 9),)
    training = json.loads((folder / "training.json").read_text())["language_tasks"]
    assert training == [{"name": "narrate", "prompt": "What now?", "max_new_tokens": 9}]  # as before


def test_bad_language_task_declarations_are_clear_errors(tmp_path):
    model = build_model("tiny", seed=0)
    ok = dict(NARRATE)
    for bad, message in (
        ("narrate", r"language_tasks must be a list of language tasks"),
        ([{"name": "narrate", "prompt": "What?"}], r"language_tasks\[0\] is missing \['max_new_tokens'\]"),
        ([{**ok, "max_new_tokens": 0}], r"language_tasks\[0\]\.max_new_tokens must be an int >= 1"),
        ([ok, {**ok, "prompt": " "}], r"language_tasks\[1\]\.prompt must be a non-empty string"),
        ([{**ok, "colour": "red"}], r"language_tasks\[0\] has unknown field\(s\) \['colour'\]"),
        ([ok, ok], r"language_tasks: task names must be unique"),
    ):
        with pytest.raises(ValueError, match=message):
            save_pretrained(model, tmp_path / "bad", STATS, language_tasks=bad)
    # LanguageTask objects are written as the same plain maps
    written = save_pretrained(model, tmp_path / "objects", STATS, language_tasks=[
        LanguageTask("narrate", "What is the robot doing?", 7), LanguageTask("plan", "Next?", 5, every=2)])
    assert json.loads((written / "config.json").read_text())["language_tasks"] == [
        NARRATE, {"name": "plan", "prompt": "Next?", "max_new_tokens": 5, "every": 2}]

    folder = tmp_path / "edited"
    folder.mkdir()
    cfg = json.loads((written / "config.json").read_text())
    for tasks, message in (
        ({"narrate": ok}, r"config.json: 'language_tasks' must be a list"),
        ([{**ok, "max_new_tokens": "12"}], r"config.json: 'language_tasks'\[0\]\.max_new_tokens must be an int"),
        ([{**ok, "adapter": "memory"}], r"config.json: 'language_tasks'\[0\] \('narrate'\) is answered through "
                                        r"adapter 'memory', but .*adapters/memory is not there"),
    ):
        (folder / "config.json").write_text(json.dumps({**cfg, "language_tasks": tasks}))
        with pytest.raises(CheckpointError, match=message):
            declared_language_tasks(folder)
        with pytest.raises(CheckpointError, match=message):  # before any weight is read
            MultiTaskPolicy.from_pretrained(folder)


# ---------------------------------------------------------------------------------------------- run_episode
gym = pytest.importorskip("gymnasium")


@pytest.fixture(scope="module")
def aloha():
    pytest.importorskip("gym_aloha")
    import oxygen_gym.envs  # noqa: F401 - registers the env ids

    env = gym.make("oxygen_gym/ALOHA-v0", task="transfer_cube", camera_size=48, fast_render=True)
    yield env
    env.close()


class StepLog(gym.Wrapper):
    """The real env, recording before each step how many times the policy had been asked (its frame counter)."""

    def __init__(self, env, policy: MultiTaskPolicy) -> None:
        super().__init__(env)
        self.policy, self.calls_before = policy, []

    def step(self, action):
        self.calls_before.append(self.policy.frame)
        return self.env.step(action)


def _executed(env, policy: MultiTaskPolicy, **kw) -> tuple[int, list[int]]:
    """(the episode's replan, the actions executed after each policy call) over STEPS control steps."""
    from oxygen_gym.envs import run_episode

    log = StepLog(env, policy)
    result = run_episode(log, policy, max_steps=STEPS, seed=0, **kw)
    per_call = Counter(log.calls_before)
    assert result.steps == STEPS == len(log.calls_before) and result.calls == len(per_call)
    return result.replan, [per_call[k] for k in sorted(per_call)]


def test_run_episode_executes_the_declared_actions_per_call(checkpoints, aloha):
    for declared in (2, 4):
        with _policy(checkpoints[declared]) as policy:
            assert _executed(aloha, policy) == (declared, [declared] * (STEPS // declared))
    with _policy(checkpoints[2]) as policy:
        assert _executed(aloha, policy, replan=3) == (3, [3, 3, 2])  # the caller's replan wins
    with _policy(checkpoints[4], replan_steps=1) as policy:  # so does from_pretrained's
        assert _executed(aloha, policy) == (1, [1] * STEPS)


def test_a_live_episode_executes_the_declared_actions_per_call(checkpoints, aloha):
    from oxygen_gym.envs.live_episode import run_live_episode

    for declared in (2, 4):
        with _policy(checkpoints[declared]) as policy:
            assert run_live_episode(aloha, policy, max_steps=STEPS, seed=0).replan == declared
    with _policy(checkpoints[2]) as policy:
        assert run_live_episode(aloha, policy, max_steps=STEPS, seed=0, replan=3).replan == 3  # the caller's wins
    with _policy(checkpoints[None]) as policy:
        assert run_live_episode(aloha, policy, max_steps=STEPS, seed=0).replan == 10  # ALOHA's protocol interval


def test_without_a_declaration_the_protocol_decides(checkpoints, aloha):
    with _policy(checkpoints[None]) as policy:
        assert _executed(aloha, policy) == (10, [STEPS])  # ALOHA's protocol replan is 10 (envs/protocols.py)


# ---------------------------------------------------------------------------------------------- the server
def _template(*argv: str) -> MultiTaskPolicy:
    from oxygen_gym.serve.serve_command import add_arguments, build_policy

    parser = argparse.ArgumentParser()
    add_arguments(parser)
    return build_policy(parser.parse_args(["--robot", "aloha", *argv]))


def _tasks(policy: MultiTaskPolicy) -> list[tuple]:
    return [(t.name, t.prompt, t.max_new_tokens, t.adapter) for t in policy.tasks]


def test_serve_narrates_with_the_declared_task_unless_told_otherwise(checkpoints):
    two, plain = str(checkpoints[2]), str(checkpoints[None])
    assert _tasks(_template("--checkpoint", two)) == [("narrate", NARRATE["prompt"], 7, None)]
    assert _tasks(_template("--checkpoint", two, "--task", "narrate")) == [("narrate", NARRATE["prompt"], 7, None)]
    assert _tasks(_template("--checkpoint", two, "--max-new-tokens", "3")) == [("narrate", NARRATE["prompt"], 3, None)]
    assert _tasks(_template("--checkpoint", two, "--task", "narrate=Say it.")) == [("narrate", "Say it.", 30, None)]
    assert _tasks(_template("--checkpoint", two, "--task", "plan")) == [
        ("plan", "What should the robot do next?", 30, None)]
    assert _tasks(_template("--checkpoint", plain)) == [("narrate", *GENERIC, None)]
    assert _tasks(_template("--checkpoint", "tiny", "--max-new-tokens", "4")) == [("narrate", GENERIC[0], 4, None)]


def test_serve_loads_the_adapter_a_declared_task_needs():
    template = _template("--checkpoint", "libero-spatial", "--robot", "libero", "--task", "memory")
    assert _tasks(template) == [("memory", "What did the robot do last?", 12, "memory")]
    assert template.adapters.names == ["memory"]


def test_server_metadata_says_the_declared_replan(checkpoints):
    from oxygen_gym.serve.server import PolicyServer, ServeConfig

    for path, want in ((checkpoints[None], None), (checkpoints[4], 4)):
        server = PolicyServer(_policy(path, mode="oxygen"), ServeConfig(max_robots=1))
        try:
            assert server.metadata(0)["replan_steps"] == want
        finally:
            server.close()


@pytest.mark.timeout(300)
def test_a_real_server_sends_the_declared_replan_and_narration_task(checkpoints):
    pytest.importorskip("openpi_client")
    from openpi_client.websocket_client_policy import WebsocketClientPolicy

    from oxygen_gym.eval.bench.serve_load import openpi_observation, start_server

    server = start_server("declared", ["--checkpoint", str(checkpoints[2]), "--robot", "aloha", "--decode-budget", "2",
                                       "--max-robots", "1"], threads=1, max_seconds=240, startup_s=180)
    try:
        client = WebsocketClientPolicy("127.0.0.1", server.port)
        meta = client.get_server_metadata()
        assert meta["replan_steps"] == 2 and meta["action_horizon"] == 10
        assert meta["tasks"] == [{**NARRATE, "every": 1}]
        out = client.infer(openpi_observation("aloha", np.random.default_rng(0), "fold the towel"))
        assert out["actions"].shape == (10, 14) and [u["task"] for u in out["language"]] == ["narrate"]
        client._ws.close()
    finally:
        server.stop()


# ---------------------------------------------------------------------------------------------- images
def test_act_takes_float_and_chw_images_as_the_server_does():
    obs = make_obs("libero", np.random.default_rng(0))
    u8 = obs["images"]
    # float images whose openpi conversion, (255 * x).astype(uint8), gives back exactly the uint8 ones
    as_float = {c: np.minimum((img.astype(np.float32) + 0.5) / 255, np.float32(1)) for c, img in u8.items()}
    for c, img in as_float.items():
        np.testing.assert_array_equal((255 * img).astype(np.uint8), u8[c])
    chw = lambda images: {c: np.ascontiguousarray(img.transpose(2, 0, 1)) for c, img in images.items()}  # noqa: E731
    variants = {"float": as_float, "chw": chw(u8), "float chw": chw(as_float)}
    with MultiTaskPolicy.from_pretrained("tiny", robot="libero", num_slots=2) as policy:
        want, _ = policy.act(obs)
        for name, images in variants.items():
            policy.reset()  # frame 0 again: the same noise
            got, _ = policy.act({**obs, "images": images})
            np.testing.assert_array_equal(got, want, err_msg=name)
        with pytest.raises(ObservationError, match=r"obs\['images'\]\['base'\]: float images must hold values in "
                                                   r"\[0, 1\]"):
            policy.act({**obs, "images": {**u8, "base": as_float["base"] * 2}})
    # the server converts by the same rule
    sent = {"observation/image": chw(as_float)["base"], "observation/wrist_image": u8["wrist"],
            "observation/state": obs["state"], "prompt": obs["prompt"]}
    served = to_policy_obs(sent, policy.robot)
    for c in u8:
        np.testing.assert_array_equal(served["images"][c], u8[c])
        np.testing.assert_array_equal(image_uint8_hwc(variants["float chw"][c], c), u8[c])
