"""The rebuild-free reset (envs/libero_reset.py, LiberoEnv's default) against LIBERO's hard reset (`rebuild_sim=True`),
byte for byte: for the same init state, seed stream and actions, the same observations (both cameras, state), rewards,
terminated/truncated, info (success included), the same full MuJoCo model and data, contacts, and the same numpy
draws. The default run checks the openpi stream on one task; the slow ones two tasks (one whose scene also draws a
drawer's opening, which a hard reset's sampler list grows by), both protocols, out-of-order init states, a fresh
scene and a scripted episode to success."""
from __future__ import annotations

import hashlib

import numpy as np
import pytest

from oxygen_gym.envs.libero import LiberoEnv

SIZE = 64  # small renders: the comparison is of bytes, at any size
# MjData fields that belong to no episode: per-function timers (call counts, durations) and the sparse layout of
# efc_AR, which the Newton solver LIBERO's models use never computes (uninitialised memory: two hard-reset envs
# differ there too, measured).
NOT_EPISODE_STATE = frozenset({"timer", "efc_AR_rowadr", "efc_AR_rownnz"})


def _arrays(struct, skip=frozenset(), digest: bool = False) -> dict[str, tuple]:
    """Every numpy array a MuJoCo struct exposes, as (dtype, shape, bytes or their BLAKE2 digest)."""
    out = {}
    for name in dir(struct):
        if name.startswith("_") or name in skip:
            continue
        value = getattr(struct, name)
        if isinstance(value, np.ndarray):
            raw = np.ascontiguousarray(value)
            out[name] = (value.dtype.str, value.shape,
                         hashlib.blake2b(raw.data).digest() if digest else raw.tobytes())
    return out


def _sim_bytes(env: LiberoEnv, model: bool) -> dict[str, tuple]:
    """The simulation: its data (less NOT_EPISODE_STATE), active contacts, flattened state, and with `model` the
    whole model (~280 MB with its textures: digests, compared after resets and at an episode's end)."""
    sim = env.libero_env.sim
    data = sim.data._data
    out = {f"data.{k}": v for k, v in _arrays(data, NOT_EPISODE_STATE).items()}
    out.update({f"contact.{k}": v for k, v in _arrays(data.contact).items()})
    state = sim.get_state().flatten()
    out["state"] = (state.dtype.str, state.shape, state.tobytes())
    if model:
        out.update({f"model.{k}": v for k, v in _arrays(sim.model._model, digest=True).items()})
        for part in ("opt", "vis", "stat"):  # the options' scalars too, as MuJoCo prints them
            out[f"model.{part}"] = repr(getattr(sim.model._model, part))
    return out


def _assert_same_sim(hard: LiberoEnv, exact: LiberoEnv, where: str, model: bool = False) -> None:
    a, b = _sim_bytes(hard, model), _sim_bytes(exact, model)
    assert a.keys() == b.keys()
    differ = sorted(k for k in a if a[k] != b[k])
    assert not differ, f"{where}: the exact reset's simulation differs from the hard reset's in {differ}"


def _assert_same_obs(a: dict, b: dict, where: str) -> None:
    for cam in a["images"]:
        assert a["images"][cam].tobytes() == b["images"][cam].tobytes(), f"{where}: camera {cam!r} differs"
    assert a["state"].tobytes() == b["state"].tobytes(), f"{where}: state differs"
    assert a["prompt"] == b["prompt"]


def _same_episode(hard: LiberoEnv, exact: LiberoEnv, reset: dict, actions, expert: bool = False) -> dict:
    """Reset both envs alike, then step both with the same actions (or the scripted expert's, computed on the hard
    env), comparing everything after every call; returns the last info."""
    oa, ia = hard.reset(**reset)
    ob, ib = exact.reset(**reset)
    where = f"reset {reset}"
    _assert_same_obs(oa, ob, where)
    assert ia == ib, where
    _assert_same_sim(hard, exact, where, model=True)
    if hard._stream is not None:  # openpi: the numpy RNG state the reset stream continues from
        sa, sb = hard._stream[2], exact._stream[2]
        assert (sa[0], sa[1].tobytes(), *sa[2:]) == (sb[0], sb[1].tobytes(), *sb[2:]), f"{where}: RNG differs"
    policy = None
    if expert:
        from oxygen_gym.envs.experts import PickPlaceExpert

        policy = PickPlaceExpert(hard.libero_env.env)
    state, info = oa["state"], ia
    for t, action in enumerate(actions):
        if policy is not None:
            action = policy(state)
        ra, rb = hard.step(action), exact.step(action)
        where = f"reset {reset}, step {t + 1}"
        _assert_same_obs(ra[0], rb[0], where)
        assert ra[1:] == rb[1:], f"{where}: reward/terminated/truncated/info differ: {ra[1:]} vs {rb[1:]}"
        _assert_same_sim(hard, exact, where)
        state, info = ra[0]["state"], ra[4]
        if ra[2] or ra[3]:
            break
    _assert_same_sim(hard, exact, f"reset {reset}, end", model=True)
    return info


def _random_actions(n: int, seed: int) -> np.ndarray:
    return np.random.default_rng(seed).uniform(-1.0, 1.0, size=(n, 7)).astype(np.float32)


@pytest.fixture
def pair(request):
    """(hard, exact) LiberoEnvs of one task and protocol: `request.param` = (task_id, protocol)."""
    task, protocol = request.param
    envs = [LiberoEnv("libero_spatial", task, protocol=protocol, camera_size=SIZE, rebuild_sim=rebuild)
            for rebuild in (True, False)]
    yield envs
    for env in envs:
        env.close()


@pytest.mark.parametrize("pair", [(4, "openpi")], indirect=True)
def test_the_exact_reset_gives_the_hard_resets_episodes_byte_for_byte(pair):
    """openpi's stream: init state 0 from the seed (the exact env compiles once), then init state 1 (the stream's
    next reset, without a rebuild), then a fresh scene as LIBERO's sampler draws it (no init state restored over it),
    a few steps each. Task 4, the demanding one: its scene draws a drawer's opening and puts objects on fixtures (the
    cabinet, the stove), whose poses the draw before moved in the model: only the fresh scene shows a model not
    restored (an official init state sets every object's pose afterwards)."""
    hard, exact = pair
    _same_episode(hard, exact, dict(seed=7, options={"init_state": 0}), _random_actions(2, 0))
    _same_episode(hard, exact, dict(options={"init_state": 1}), _random_actions(2, 1))
    _same_episode(hard, exact, dict(options={"scene_seed": 12345}), _random_actions(2, 2))
    # robosuite's own reset, as scripts that hold `libero_env` call it: nothing puts the fixtures back first here.
    # Each env's GL context current first, as LiberoEnv does: a hard reset frees its old context with
    # eglReleaseThread, which spoils whichever context is current then (measured: a kept one renders black after).
    from oxygen_gym.envs.rendering import make_robosuite_context_current

    saved, raw = np.random.get_state(), []
    try:
        for env in (hard, exact):
            make_robosuite_context_current(env.libero_env.sim)
            np.random.seed(3)
            raw.append(env.libero_env.reset())
    finally:
        np.random.set_state(saved)
    assert raw[0].keys() == raw[1].keys()
    differ = [k for k in raw[0] if np.asarray(raw[0][k]).tobytes() != np.asarray(raw[1][k]).tobytes()]
    assert not differ, f"robosuite reset: observations {differ} differ"
    _assert_same_sim(hard, exact, "robosuite reset", model=True)
    inner = exact.libero_env
    assert (inner.rebuilds, inner.reuses) == (1, 3), "the first reset compiles, the next three reuse"


def test_the_exact_reset_refuses_another_robosuite(monkeypatch):
    """It follows robosuite 1.4.0's reset line by line, so another version gets a clear error, not a silent drift."""
    import robosuite

    from oxygen_gym.envs.libero_reset import ExactResetEnv

    monkeypatch.setattr(robosuite, "__version__", "1.5.1")
    with pytest.raises(RuntimeError, match="robosuite 1.4.0.*found robosuite 1.5.1.*rebuild_sim=True"):
        ExactResetEnv(bddl_file_name="unused.bddl")
    monkeypatch.undo()
    with pytest.raises(ValueError, match="hard_reset must be True"):
        ExactResetEnv(bddl_file_name="unused.bddl", hard_reset=False)


@pytest.mark.slow
@pytest.mark.parametrize("pair", [(0, "openpi"), (0, "lerobot"), (4, "openpi"), (4, "lerobot")], indirect=True,
                         ids=["task0-openpi", "task0-lerobot", "task4-openpi", "task4-lerobot"])
def test_the_exact_reset_matches_over_states_protocols_and_fresh_scenes(pair):
    """Init states out of order (openpi replays its stream from the seed when going back), a fresh scene drawn by
    LIBERO's sampler (`scene_seed`), and an official state after it. Task 4's scene also draws its drawer's opening
    (an OpenCloseSampler, which each hard reset's `_load_model` appends to a list the next draws all use)."""
    hard, exact = pair
    _same_episode(hard, exact, dict(seed=7, options={"init_state": 3}), _random_actions(15, 2))
    _same_episode(hard, exact, dict(options={"init_state": 1}), _random_actions(15, 3))
    _same_episode(hard, exact, dict(options={"scene_seed": 12345}), _random_actions(15, 4))
    _same_episode(hard, exact, dict(seed=8, options={"init_state": 4}), _random_actions(15, 5))
    assert exact.libero_env.rebuilds == 1


@pytest.mark.slow
@pytest.mark.parametrize("pair", [(0, "openpi")], indirect=True)
def test_a_scripted_episode_succeeds_alike_after_either_reset(pair):
    """A full pick-and-place (grasp contacts, lift, place) to LIBERO's success, on the second episode of a stream."""
    hard, exact = pair
    _same_episode(hard, exact, dict(seed=7, options={"init_state": 0}), _random_actions(2, 6))
    info = _same_episode(hard, exact, dict(options={"init_state": 1}), range(220), expert=True)
    assert info["is_success"], "the expert solves init state 1 of task 0 (tests/envs/test_envs_libero.py)"
