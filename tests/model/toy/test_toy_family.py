"""A fifth model family added as a folder plus one registration (tests/helpers/families/toy_family.py: a toy
Mixture-of-Transformers with one action expert, random weights) runs end to end: `act()`, the engine's modes, an
evaluation episode and the server, with no product file naming it.

Tolerances are the suite's: on CPU the modes run the same kernels on the same shapes, so actions agree exactly across
modes and by hand (tests/engine/test_engine_equivalence.py); the server matches a lone act() to 1e-5
(tests/serve/test_serve_equivalence.py)."""
import asyncio
import json
import threading

import numpy as np
import pytest
import torch

from families.toy_family import NAME, ToyIO, registered
from families.toy_mot_model import ToyMoTModel
from oxygen_gym import LanguageTask, MultiTaskPolicy
from policy_obs import make_obs

SHAPES = {"libero": (10, 7), "droid": (15, 8), "aloha": (50, 14)}
TASKS = [
    LanguageTask("narrate", "Describe what the robot is doing.", max_new_tokens=6),
    LanguageTask("plan", "What should the robot do next?", max_new_tokens=4, every=2),
]
SERVE_ATOL = 1e-5  # as tests/serve/test_serve_equivalence.py


@pytest.fixture(scope="module", autouse=True)
def toy_family():
    with registered() as family:
        yield family


def _run(mode="oxygen", robot="aloha", frames=4, tasks=TASKS, k=2, seed=0):
    """Actions per frame and, per request, (token ids so far, done)."""
    rng = np.random.default_rng(11)
    acts, texts = [], {}
    with MultiTaskPolicy.from_pretrained(NAME, robot=robot, tasks=tasks, decode_budget=k, mode=mode, seed=seed,
                                         num_slots=4) as policy:
        for _ in range(frames):
            a, updates = policy.act(make_obs(robot, rng))
            acts.append(a)
            for u in updates:
                ids, _ = texts.get(u.request_id, ((), False))
                texts[u.request_id] = (ids + u.new_token_ids, u.done)
    return acts, texts


@pytest.fixture(scope="module")
def isolated():
    return _run("isolated")


def test_the_registry_finds_the_toy_family_by_name_and_by_class():
    from oxygen_gym.policies.model_io import builtin_names, family_of_builtin

    assert NAME in builtin_names() and family_of_builtin(NAME).model_class is ToyMoTModel
    with MultiTaskPolicy.from_pretrained(NAME, robot="libero") as policy:
        assert isinstance(policy.model, ToyMoTModel) and isinstance(policy.io, ToyIO)
        assert policy.action_heads == ["actions"]
        params = sum(p.numel() for p in policy.model.parameters())
        assert 5_000 < params < 20_000, params  # a real (if small) model: embeddings, two transformers, an encoder


@pytest.mark.parametrize("robot", ["aloha", "libero", "droid"])
def test_act_returns_the_robots_actions_and_language(robot):
    acts, texts = _run(robot=robot, frames=4)
    for a in acts:
        assert a.shape == SHAPES[robot] and a.dtype == np.float32 and np.isfinite(a).all()
    # a model, not a constant: each observation gives other actions, and the chunk varies along its horizon
    assert not np.allclose(acts[0], acts[1], atol=1e-3) and acts[0].std(axis=0).max() > 1e-2
    # narrate every frame, plan every other: 6 requests; k=2 finishes narrate's 6 tokens by the third frame
    assert len(texts) == 6 and sum(done for _, done in texts.values()) >= 2
    assert all(ids for ids, _ in texts.values())


def test_language_updates_stream_text_that_depends_on_the_observation():
    with MultiTaskPolicy.from_pretrained(NAME, robot="aloha", tasks=TASKS[:1], decode_budget=6, mode="shared") as p:
        rng = np.random.default_rng(3)
        outs = [p.act(make_obs("aloha", rng))[1] for _ in range(4)]
    for updates in outs:
        (u,) = updates
        assert u.task == "narrate" and u.done and 1 <= len(u.new_token_ids) <= 6  # shared: decoded to completion
        assert u.text == p.io.decode([t for t in u.new_token_ids if t != p.io.eos_id])  # the byte tokenizer's text
    assert len({u[0].new_token_ids for u in outs}) > 1, "greedy text ignores the observation"


@pytest.mark.parametrize("mode, graphs", [("shared", False), ("oxygen", False), ("oxygen", True)],
                         ids=["shared", "oxygen", "oxygen-static-bodies"])
def test_shared_kv_equals_isolated(isolated, mode, graphs, request):
    """One prefill shared by the action expert and every language request (and, in oxygen, decoding batched across
    frames) gives exactly the actions and tokens of a prefill per consumer. `oxygen-static-bodies`: the shape-static
    denoise and decode bodies a CUDA graph captures (run eagerly on the CPU), full-capacity reads under masks."""
    if graphs:
        calls = request.getfixturevalue("graphs_on_cpu")
    ref_acts, ref_texts = isolated
    acts, texts = _run(mode)
    for f, (a, b) in enumerate(zip(acts, ref_acts, strict=True)):
        if graphs:  # the static denoise body reads the full cache capacity under a mask: another summation order, so
            # not bit-exact on every CPU (measured max abs 7.7e-7 on an AVX-512 EPYC, 0 on the machines before); ~4x
            np.testing.assert_allclose(a, b, rtol=0, atol=3e-6, err_msg=f"{mode} frame {f}")
        else:
            np.testing.assert_array_equal(a, b, err_msg=f"{mode} frame {f}")
    assert sorted(texts) == sorted(ref_texts)
    for rid, (ids, done) in texts.items():
        ref_ids, ref_done = ref_texts[rid]
        if done:
            assert ids == ref_ids, f"request {rid}"
        else:  # oxygen leaves the last frames' requests in flight: what it has is where isolated's text starts
            assert ref_ids[: len(ids)] == ids, f"request {rid}"
    if graphs:
        assert calls["replayed"] > 0 and calls["captured"] > 0
    assert len({t for ids, _ in ref_texts.values() for t in ids}) > 3, "degenerate text: the comparison means little"


def test_act_is_the_model_run_by_hand():
    """act() hands out exactly what the model computes on the frame's noise (prefill into a private cache, the
    expert's denoise, the robot's action convention) and its first request decodes the model's greedy tokens."""
    obs = make_obs("aloha", np.random.default_rng(5))
    task = LanguageTask("narrate", "Describe what the robot is doing.", max_new_tokens=5)
    with MultiTaskPolicy.from_pretrained(NAME, robot="aloha", tasks=[task], decode_budget=5, mode="shared") as p:
        model, noise = p.model, p.frame_noise(0)["actions"]
        got, (update,) = p.act(obs)
        prefix = p.model_inputs(obs)
        cache = model.new_cache(1, model.max_prefix_length() + 64)
        state = model.prefill_frame(cache, prefix)
        raw = model.denoise_head("actions", cache, state, noise, model.action_heads["actions"].num_steps)
        want = p.robot.actions_from_model(raw[0, :50, :14].numpy()).astype(np.float32)
        np.testing.assert_array_equal(got, want)
        prompt = p.io.task_prompt_ids(task.prompt)
        n = state.host_lengths[0]
        model.extend(cache, torch.tensor([prompt[:-1]]), torch.tensor([n]))
        last, pos, tokens = prompt[-1], n + len(prompt) - 1, []
        for _ in range(task.max_new_tokens):
            last = int(model.decode_step(cache, torch.tensor([last]), torch.tensor([pos])).argmax(-1))
            tokens.append(last)
            pos += 1
            if last == p.io.eos_id:
                break
    assert update.new_token_ids == tuple(tokens)


@pytest.mark.parametrize("method", ["guided", "cheap"])
def test_real_time_chunking_guides_the_toy_expert(method):
    """`act(prev_actions=)` reaches the expert through the shared sampler's guidance: the first `inference_delay`
    actions land on the previous chunk (the guided method differentiates the toy's expert)."""
    from oxygen_gym import RTCConfig

    obs = make_obs("libero", np.random.default_rng(2))
    target = np.full((10, 7), 0.3, np.float32)
    with MultiTaskPolicy.from_pretrained(NAME, robot="libero", rtc=RTCConfig(method=method)) as p:
        plain, _ = p.act(obs)
        p.reset()  # frame 0 again: the same noise
        guided, _ = p.act(obs, prev_actions=target, inference_delay=4)
    assert np.isfinite(guided).all()
    far, near = np.abs(plain[:4] - target[:4]).mean(), np.abs(guided[:4] - target[:4]).mean()
    assert near < 0.25 * far, (near, far)  # measured about 0.03 and 0.02 of the unguided distance


def test_one_eval_episode_on_aloha_writes_a_record(tmp_path):
    pytest.importorskip("gym_aloha")
    from oxygen_gym.eval.libero.eval_config import EvalConfig
    from oxygen_gym.eval.libero.eval_loop import run_eval
    from oxygen_gym.eval.libero.results import read_records
    from oxygen_gym.eval.libero.worker import close_worker

    out = tmp_path / "toy"
    config = EvalConfig(
        env="aloha", checkpoint=NAME, robot="aloha", protocol="aloha", suites=["aloha"], tasks=[0], episodes=1,
        max_steps=3, fast_render=True, threads=1, out=str(out),
        language_tasks=[{"name": "narrate", "prompt": "Describe what the robot is doing.", "max_new_tokens": 4}],
    )
    try:
        run_eval(config, progress=False)
    finally:
        close_worker()
    (record,) = read_records(out / "episodes.jsonl")
    assert record["status"] == "ok", record.get("traceback")
    assert (record["suite"], record["task_id"], record["steps"], record["calls"]) == ("aloha", 0, 3, 1)
    assert record["narration"] and record["narration"][0]["task"] == "narrate"
    assert json.loads((out / "config.json").read_text())["checkpoint"] == NAME


def test_one_frame_through_the_server_equals_act():
    """An in-process server (a subprocess would not see a family registered here) over openpi's own client."""
    pytest.importorskip("openpi_client")
    from openpi_client.websocket_client_policy import WebsocketClientPolicy

    from oxygen_gym.eval.bench.serve_load import openpi_observation
    from oxygen_gym.serve.observations import to_policy_obs
    from oxygen_gym.serve.server import PolicyServer, ServeConfig

    def policy(num_slots):
        return MultiTaskPolicy.from_pretrained(NAME, robot="aloha", tasks=TASKS[:1], decode_budget=2, mode="oxygen",
                                               num_slots=num_slots)

    server = PolicyServer(policy(1), ServeConfig(port=0, max_robots=1))
    ready, failed = threading.Event(), []
    loop: dict = {}

    def serve():
        async def main():
            loop["loop"] = asyncio.get_running_loop()
            await server.serve(on_ready=lambda port: ready.set(), max_seconds=120)

        try:
            asyncio.run(main())
        except Exception as e:  # noqa: BLE001 - reported by the test thread
            failed.append(e)
            ready.set()

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    obs = openpi_observation("aloha", np.random.default_rng(3), "fold the towel")
    try:
        assert ready.wait(60) and not failed, failed
        client = WebsocketClientPolicy("127.0.0.1", server.port)
        meta = client.get_server_metadata()
        out = client.infer(obs)
        client._ws.close()
    finally:
        if "loop" in loop:
            loop["loop"].call_soon_threadsafe(server.stop)
        thread.join(timeout=60)
    assert (meta["action_heads"], meta["action_horizon"], meta["action_dim"]) == (["actions"], 50, 14)
    with policy(2) as local:  # frame 0 of seed 0, as the server's first frame for this robot
        want, updates = local.act(to_policy_obs(obs, local.robot))
    assert out["actions"].shape == (50, 14)
    np.testing.assert_allclose(out["actions"], want, atol=SERVE_ATOL, rtol=0)
    assert [tuple(u["new_token_ids"]) for u in out["language"]] == [u.new_token_ids for u in updates]
