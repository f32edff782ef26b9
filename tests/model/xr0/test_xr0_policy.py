"""xr0-tiny through MultiTaskPolicy: every execution mode gives the same actions and text from the same seed and
observations (sharing the prefill and batching language across frames change nothing), and bad observations or
arguments fail naming the field."""
from __future__ import annotations

import numpy as np
import pytest

from oxygen_gym import LanguageTask, MultiTaskPolicy
from oxygen_gym.policies.inputs import ObservationError
from oxygen_gym.policies.robots import RobotSpec
from policy_obs import make_obs
from text_checks import same_text as _same_text

# Actions across modes, measured max abs difference on CPU: exactly 0 for isolated / shared / oxygen k = 1, 3 (the
# action path runs the same kernels on the same shapes: one prefill of one row, the DiT over it), and 0 for parallel
# (the same scheduler code in a worker process). Tolerance 0, as for pi0.5.
TASKS = [
    LanguageTask("narrate", "Describe what the robot is doing.", max_new_tokens=6),
    LanguageTask("plan", "What should the robot do next?", max_new_tokens=4, every=2),
]
PROMPTS = ["put the bowl on the plate", "open the drawer", "pick up the black bowl next to the cookie box"]
FRAMES = 4


def _run(mode: str, k: int = 2, frames: int = FRAMES, robot: str = "libero"):
    """Actions per frame, per request (text so far, done), and per request its token ids."""
    rng = np.random.default_rng(11)
    acts, texts, ids = [], {}, {}
    with MultiTaskPolicy.from_pretrained(
        "xr0-tiny", robot=robot, tasks=TASKS, decode_budget=k, mode=mode, seed=5, num_slots=4
    ) as policy:
        for f in range(frames):
            a, updates = policy.act(make_obs(robot, rng, prompt=PROMPTS[f % 3]))
            acts.append(a)
            for u in updates:
                texts[u.request_id] = (u.text, u.done)
                ids.setdefault(u.request_id, []).extend(u.new_token_ids)
    return acts, texts, ids


@pytest.fixture(scope="module")
def isolated():
    return _run("isolated")


def test_isolated_text_is_not_degenerate(isolated):
    """The equivalence checks below are only meaningful if the random model's text varies."""
    acts, texts, ids = isolated
    assert len({t for seq in ids.values() for t in seq}) >= 6, ids
    assert len(texts) >= 5 and sum(done for _, done in texts.values()) >= 4
    assert len({t for t, _ in texts.values()}) >= 3  # different frames' observations give different text
    assert all(a.shape == (10, 7) and a.dtype == np.float32 and np.isfinite(a).all() for a in acts)
    assert not np.allclose(acts[0], acts[1], atol=1e-3)  # actions follow the observation


@pytest.mark.parametrize("mode,k", [("shared", 2), ("oxygen", 1), ("oxygen", 3), ("parallel", 2)])
def test_every_mode_gives_isolated_actions_and_text(isolated, mode, k):
    ref_acts, ref_texts, ref_ids = isolated
    acts, texts, ids = _run(mode, k=k)
    _same_text(texts, ref_texts)
    # token ids too: the byte-level text maps distinct invalid bytes to the same replacement character
    for rid in set(ids) & set(ref_ids):
        n = min(len(ids[rid]), len(ref_ids[rid]))
        assert ids[rid][:n] == ref_ids[rid][:n], f"request {rid}"
        if texts[rid][1] and ref_texts[rid][1]:
            assert ids[rid] == ref_ids[rid], f"request {rid}"
    assert sum(done for _, done in texts.values()) >= 1
    for f, (a, b) in enumerate(zip(acts, ref_acts, strict=True)):
        np.testing.assert_array_equal(a, b, err_msg=f"{mode} k={k} frame {f}")


# ---------------------------------------------------------------- bad inputs name the field
@pytest.fixture(scope="module")
def policy():
    with MultiTaskPolicy.from_pretrained("xr0-tiny", robot="libero", tasks=TASKS[:1], num_slots=2) as p:
        yield p


def test_missing_and_extra_cameras_name_images(policy):
    obs = make_obs("libero", np.random.default_rng(0))
    missing = {**obs, "images": {"base": obs["images"]["base"]}}
    with pytest.raises(ObservationError, match=r"obs\['images'\] is missing camera\(s\) \['wrist'\]"):
        policy.act(missing)
    extra = {**obs, "images": {**obs["images"], "top": obs["images"]["base"]}}
    with pytest.raises(ObservationError, match=r"obs\['images'\] has unknown camera\(s\) \['top'\]"):
        policy.act(extra)
    assert policy.frame == 0  # nothing ran


def test_too_long_instruction_names_prompt_and_the_limit(policy):
    obs = make_obs("libero", np.random.default_rng(0), prompt="pick up the bowl " * 200)
    limit = policy.model.config.max_prompt_tokens
    with pytest.raises(ObservationError, match=rf"obs\['prompt'\]: the prompt takes \d+ text tokens .* hold {limit}"):
        policy.act(obs)
    policy.act(make_obs("libero", np.random.default_rng(0)))  # a normal observation still runs afterwards


def test_state_wider_than_the_dit_names_state():
    """A robot whose state has more dims than xr0-tiny's DiT state width (16)."""
    wide = RobotSpec("wide", {"base": "base", "wrist": "wrist_left"}, (), 20, 7, 10)
    with MultiTaskPolicy.from_pretrained("xr0-tiny", robot=wide, num_slots=1) as p:
        rng = np.random.default_rng(0)
        obs = make_obs("libero", rng)
        obs["state"] = rng.uniform(-1, 1, 20).astype(np.float32)
        with pytest.raises(ObservationError, match=r"obs\['state'\]: 20 dims, the model's DiT takes 16"):
            p.act(obs)


def test_unknown_head_names_heads():
    with pytest.raises(ValueError, match=r"heads: unknown action head\(s\) \['nope'\]"):
        MultiTaskPolicy.from_pretrained("xr0-tiny", heads=["nope"])


def test_the_model_pickles_for_parallel_workers():
    """`parallel` ships the model to worker processes: it must pickle (the vision tower's activations were
    lambdas, which do not) and come back with the same weights."""
    import pickle

    import torch

    from oxygen_gym.model.xr0.xr0_model import build_xr0

    model = build_xr0("xr0-tiny", seed=1)
    back = pickle.loads(pickle.dumps(model))
    for (name, a), (_, b) in zip(model.state_dict().items(), back.state_dict().items(), strict=True):
        assert torch.equal(a, b), name
