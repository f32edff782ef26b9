"""XR0 behind the engine: the DiT over the engine's slot KV equals the same DiT over transformers' past_key_values
for a real processor-built prompt; the slot row is left bit-identical by denoising; several robots prefilled and
denoised in one batch equal each robot alone; the runner's shape-static (CUDA-graph) bodies equal the eager calls;
bad backbone inputs fail naming the field.

Every prefill here lands in a pool row that is not row 0, in a pool filled with random values first, so a model that
reads the wrong row, or past a row's length in the static (full-capacity) form, gives other numbers.
"""
from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch

from oxygen_gym.engine import runner as runner_module
from oxygen_gym.engine.batch import BatchScheduler
from oxygen_gym.engine.kv_cache import KVCache
from oxygen_gym.engine.frame import FrameInput
from oxygen_gym.engine.request import Request
from oxygen_gym.engine.runner import ModelRunner
from oxygen_gym.engine.scheduler import FrameScheduler
from oxygen_gym.engine.slots import SlotPool
from oxygen_gym.model.qwen3_vl.qwen_tokenizer import QwenTokenizer, builtin_qwen_tokenizer
from oxygen_gym.model.xr0.xr0_config import XR0Config
from oxygen_gym.model.xr0.xr0_model import XR0Model, build_xr0
from oxygen_gym.model.xr0.xr0_prefix import XR0PrefixInputs
from oxygen_gym.policies import normalize
from oxygen_gym.policies.robots import get_robot
from oxygen_gym.policies.families.xr0.xr0_io import XR0IO

# Tolerances (CPU, fp32, one thread; torch 2.13, transformers 4.57.6): ~5x the max abs error measured.
KV_TOL = 2e-5  # our slot K/V vs transformers' past_key_values: measured 3.7e-6
VEL_TOL = 1e-6  # velocity_from_cache eager / static vs velocity(past_key_values): measured 1.6e-7 / 2.1e-7
ACT_TOL = 1.5e-6  # denoise_head eager / static vs an Euler loop over velocity(past_key_values): measured 2.4e-7
BATCH_ACT_TOL = 1.5e-6  # 3 robots batched (prefill_rows 3 / 1) vs each alone: measured 2.4e-7 / 2.4e-7
STATIC_ACT_TOL = 1.5e-6  # the runner's static denoise (graph path, and the body alone) vs eager: measured 2.4e-7
STATIC_LOGITS_TOL = 1e-5  # the runner's static decode body (bucket 4, 3 live rows) vs eager: measured 1.7e-6

INSTRUCTIONS = ["pick up the red block", "open the top drawer of the cabinet and put the bowl inside it", "stack"]
ROW = 2  # the pool row a single frame is prefilled into (not row 0)


def _io(model: XR0Model, robot: str = "libero") -> XR0IO:
    spec = get_robot(robot)
    return XR0IO(model, QwenTokenizer(builtin_qwen_tokenizer()), robot=spec, camera_slots=None,
                 state_normalizer=normalize.Normalizer("IDENTITY"))


def _prefix(io: XR0IO, seed: int, instruction: str = INSTRUCTIONS[0], size=(96, 128)) -> XR0PrefixInputs:
    rng = np.random.default_rng(seed)
    images = {cam: rng.integers(0, 256, (*size, 3), dtype=np.uint8) for cam in io.robot.cameras}
    state = rng.uniform(-0.5, 0.5, io.robot.state_dim).astype(np.float32)
    return io.prefix_inputs(images, state, instruction)


def _pool(model: XR0Model, num_slots: int, capacity: int, scratch_rows: int = 1, seed: int = 0) -> SlotPool:
    """A pool whose every entry starts as random garbage (what earlier frames leave behind)."""
    kv = model.kv_layout
    pool = SlotPool(num_slots, capacity, layers=kv.layers, kv_heads=kv.kv_heads, head_dim=kv.head_dim,
                    scratch_rows=scratch_rows)
    g = torch.Generator().manual_seed(seed)
    pool.cache.k.copy_(torch.randn(pool.cache.k.shape, generator=g) * 5)
    pool.cache.v.copy_(torch.randn(pool.cache.v.shape, generator=g) * 5)
    return pool


def _noise(config: XR0Config, seed: int, rows: int = 1) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.randn(rows, config.horizon, config.action_dim, generator=g)


# ---------------------------------------------------------------- 1. the DiT over slot KV == over past_key_values
@pytest.fixture(scope="module")
def hf_pair():
    """transformers' Qwen3-VL (eager attention) and our XR0Model holding its backbone weights."""
    from transformers import Qwen3VLForConditionalGeneration

    config = XR0Config.named("xr0-tiny")
    torch.manual_seed(0)
    hf_config = config.qwen3vl_config()
    hf_config._attn_implementation = "eager"
    hf = Qwen3VLForConditionalGeneration(hf_config).eval()
    model = build_xr0(config, seed=4)
    model.vlm.load_state_dict(hf.state_dict())
    with torch.no_grad():  # default norms are ones: perturb so a norm mix-up in the DiT would show
        for name, p in model.expert.named_parameters():
            if name.endswith("norm.weight"):
                p.add_(0.3 * torch.randn_like(p))
    model.clear_caches()
    return hf, model


@pytest.fixture(scope="module")
def both_prefills(hf_pair):
    hf, model = hf_pair
    io = _io(model)
    inputs = _prefix(io, seed=1, instruction=INSTRUCTIONS[1])
    length = int(inputs.lengths[0])
    pool = _pool(model, num_slots=3, capacity=length + 23)
    garbage = (pool.cache.k.clone(), pool.cache.v.clone())
    state = model.prefill_frame(pool.view(ROW, ROW + 1), inputs)
    with torch.no_grad():
        out = hf(input_ids=inputs.input_ids, pixel_values=inputs.pixel_values, image_grid_thw=inputs.image_grid_thw,
                 use_cache=True)
        pos, _ = hf.model.get_rope_index(inputs.input_ids, inputs.image_grid_thw, None, None)
    ks = [layer.keys for layer in out.past_key_values.layers]
    vs = [layer.values for layer in out.past_key_values.layers]
    return dict(model=model, inputs=inputs, length=length, pool=pool, state=state, ks=ks, vs=vs,
                hf_next=pos.amax(dim=(0, 2)) + 1, garbage=garbage)


def test_processor_prompt_has_images_and_fewer_positions_than_tokens(both_prefills):
    """The prompt really is multimodal: two camera images, so M-RoPE's next position is below the token count."""
    s = both_prefills
    grid = s["inputs"].image_grid_thw
    assert grid is not None and grid.shape[0] == 2
    assert int(s["hf_next"][0]) < s["length"]


def test_prefill_into_a_slot_row_equals_transformers_kv_and_next_position(both_prefills):
    """Our prefill writes transformers' K/V into pool row ROW at [0, length), its next position is transformers'
    get_rope_index max + 1 (not the length), and no other row or position of the pool is touched."""
    s = both_prefills
    pool, n = s["pool"], s["length"]
    assert s["state"].next_positions.tolist() == s["hf_next"].tolist()
    assert s["state"].lengths.tolist() == [n]
    err = 0.0
    for i, (k, v) in enumerate(zip(s["ks"], s["vs"], strict=True)):
        err = max(err, (pool.cache.k[i, ROW, :, :n] - k[0]).abs().max().item(),
                  (pool.cache.v[i, ROW, :, :n] - v[0]).abs().max().item())
    assert err < KV_TOL, err
    k0, v0 = s["garbage"]
    others = [r for r in range(pool.cache.num_rows) if r != ROW]
    assert torch.equal(pool.cache.k[:, others], k0[:, others]) and torch.equal(pool.cache.v[:, others], v0[:, others])
    assert torch.equal(pool.cache.k[:, ROW, :, :, n:], k0[:, ROW, :, :, n:])


@pytest.mark.parametrize("static", [False, True], ids=["eager", "static"])
def test_velocity_from_slot_kv_equals_velocity_from_past_key_values(both_prefills, static):
    s = both_prefills
    model, c = s["model"], s["model"].config
    g = torch.Generator().manual_seed(7)
    x_t = torch.randn(1, c.horizon, c.action_dim, generator=g)
    state = s["inputs"].state
    view = s["pool"].view(ROW, ROW + 1)
    ps = s["state"]
    err = 0.0
    for t in (0.0, 0.3, 0.9):
        tt = torch.tensor([t])
        ref = model.expert.velocity(s["ks"], s["vs"], torch.ones(1, s["length"], dtype=torch.bool), s["hf_next"],
                                    x_t, tt, state)
        got = model.expert.velocity_from_cache(view, ps.lengths, ps.next_positions, x_t, tt, state, static=static)
        err = max(err, (got - ref).abs().max().item())
        assert ref.abs().max() > 0.1
    assert err < VEL_TOL, err


def _euler_over_past_key_values(model, ks, vs, length, next_pos, noise, state, steps):
    valid = torch.ones(noise.shape[0], length, dtype=torch.bool)
    x = noise.clone()
    for i in range(steps):
        t = torch.full((noise.shape[0],), i / steps)
        x = x + model.expert.velocity(ks, vs, valid, next_pos, x, t, state) / steps
    return x


@pytest.mark.parametrize("static", [False, True], ids=["eager", "static"])
def test_denoise_head_equals_euler_over_past_key_values(both_prefills, static):
    """The engine's denoise (eager, and the full-capacity masked form graphs capture) is transformers' KV +
    the DiT's Euler loop; and it leaves the slot row bit-identical (language decodes from it afterwards)."""
    s = both_prefills
    model, c = s["model"], s["model"].config
    noise = _noise(c, 8)
    ref = _euler_over_past_key_values(model, s["ks"], s["vs"], s["length"], s["hf_next"], noise, s["inputs"].state,
                                      c.num_steps)
    # a private copy of the pool, fresh garbage past the prefix (what this test checks is not left by another test)
    n = s["length"]
    cache = KVCache(s["pool"].cache.k.clone(), s["pool"].cache.v.clone())
    g = torch.Generator().manual_seed(int(static))
    cache.k[:, :, :, n:] = torch.randn(cache.k[:, :, :, n:].shape, generator=g) * 5
    cache.v[:, :, :, n:] = torch.randn(cache.v[:, :, :, n:].shape, generator=g) * 5
    before = (cache.k.clone(), cache.v.clone())
    got = model.denoise_head("actions", cache.rows(ROW, ROW + 1), s["state"], noise, c.num_steps, static=static)
    assert torch.equal(cache.k, before[0]) and torch.equal(cache.v, before[1]), "the DiT wrote the cache"
    err = (got - ref).abs().max().item()
    assert err < ACT_TOL, err
    assert (ref - noise).abs().max() > 0.1  # the flow moved the noise


# ---------------------------------------------------------------- shared model for the engine-level tests
@pytest.fixture(scope="module")
def xr0():
    return build_xr0("xr0-tiny", seed=3)


@pytest.fixture(scope="module")
def io(xr0):
    return _io(xr0)


def _requests(session: int, frame: int, first_id: int, n: int, seed: int) -> list[Request]:
    rng = np.random.default_rng(seed)
    return [Request(first_id + i, f"task{i}", frame, rng.integers(3, 250, int(rng.integers(2, 6))).tolist(),
                    max_new_tokens=int(rng.choice([3, 6, 9])), eos_id=10_000, session=session) for i in range(n)]


# ---------------------------------------------------------------- 3. batched robots == each robot alone
def _robot_frames(io, robot: int, frames: int):
    """(prefix, noise, requests) per frame of one robot: its own instruction (prompt length) and images."""
    out = []
    for f in range(frames):
        prefix = _prefix(io, seed=100 * robot + f, instruction=INSTRUCTIONS[robot])
        out.append((prefix, _noise(io.model.config, 1000 * robot + f), (f, 10 * robot + f)))
    return out


def _alone(model, io, robot: int, frames: int, k: int):
    pool = _pool(model, num_slots=8, capacity=model.max_prefix_length() + 40)
    sched = FrameScheduler(model, pool, "oxygen")
    tokens, actions, rid = {}, [], 0
    for f, (prefix, noise, (fr, seed)) in enumerate(_robot_frames(io, robot, frames)):
        reqs = _requests(0, fr, rid, 2 if f % 2 == 0 else 1, seed)
        rid += len(reqs)
        res = sched.run(FrameInput(f, prefix, noise, reqs), k)
        actions.append(res.actions)
        for r, new in res.advanced:
            tokens.setdefault(r.request_id, []).extend(new)
    return tokens, actions


def _batched(model, io, frames: int, k: int, prefill_rows: int):
    pool = _pool(model, num_slots=24, capacity=model.max_prefix_length() + 40, scratch_rows=3)
    sched = BatchScheduler(model, pool, prefill_rows=prefill_rows)
    streams = [_robot_frames(io, r, frames) for r in range(3)]
    tokens, actions, rids = {}, {0: [], 1: [], 2: []}, [0, 0, 0]
    for f in range(frames):
        batch = []
        for s in range(3):
            prefix, noise, (fr, seed) = streams[s][f]
            reqs = _requests(s, fr, rids[s], 2 if f % 2 == 0 else 1, seed)
            rids[s] += len(reqs)
            batch.append(FrameInput(f, prefix, noise, reqs, session=s))
        for s, res in enumerate(sched.run_batch(batch, k)):
            actions[s].append(res.actions)
            for r, new in res.advanced:
                tokens.setdefault((s, r.request_id), []).extend(new)
    return tokens, actions


@pytest.fixture(scope="module")
def alone_runs(xr0, io):
    return [_alone(xr0, io, r, frames=3, k=2) for r in range(3)]


@pytest.mark.parametrize("prefill_rows", [3, 1], ids=["one-prefill-batch", "row-by-row"])
def test_batched_robots_equal_each_robot_alone(xr0, io, alone_runs, prefill_rows):
    """Three robots with different prompt lengths and images, prefilled (`prefill_rows=3`: one batch of right-padded
    rows, the images of all three in one pixel_values) and denoised together: each robot's actions and tokens are
    its own lone run's."""
    lengths = {int(_prefix(io, 0, INSTRUCTIONS[r]).lengths[0]) for r in range(3)}
    assert len(lengths) == 3  # really different prompt lengths
    tokens, actions = _batched(xr0, io, frames=3, k=2, prefill_rows=prefill_rows)
    err = 0.0
    for s in range(3):
        ref_tokens, ref_actions = alone_runs[s]
        mine = {rid: t for (ss, rid), t in tokens.items() if ss == s}
        assert mine == ref_tokens, f"robot {s}"
        assert len({t for seq in mine.values() for t in seq}) >= 4  # not one token repeated
        for a, b in zip(actions[s], ref_actions, strict=True):
            err = max(err, (a - b).abs().max().item())
    assert err < BATCH_ACT_TOL, err
    # robots' actions differ from each other (the check would be vacuous if the images were ignored)
    assert (actions[0][0] - actions[1][0]).abs().max() > 1e-3


# ---------------------------------------------------------------- 4. the runner's graph path on a CPU


def _scheduler_run(model, io, mode: str, frames: int, k: int):
    pool = _pool(model, num_slots=6, capacity=model.max_prefix_length() + 40)
    sched = FrameScheduler(model, pool, mode)
    tokens, actions, sizes, rid = {}, [], [], 0
    for f in range(frames):
        prefix = _prefix(io, seed=50 + f, instruction=INSTRUCTIONS[f % 3])
        reqs = _requests(0, f, rid, [3, 0, 2, 1][f % 4], seed=60 + f)
        rid += len(reqs)
        res = sched.run(FrameInput(f, prefix, _noise(model.config, 70 + f), reqs), k)
        actions.append(res.actions)
        sizes += res.stats.batch_sizes
        for r, new in res.advanced:
            tokens.setdefault(r.request_id, []).extend(new)
    return tokens, actions, sizes, sched


@pytest.mark.parametrize("mode", ["isolated", "shared", "oxygen"])
def test_graph_path_gives_the_eager_tokens_and_actions(xr0, io, mode, graphs_on_cpu):
    """Static decode (padded to a bucket) and static denoise (prefix copied to the staging row, whose stale tail
    must be masked) through the scheduler give the eager run's tokens, and its actions to float tolerance."""
    graph_tokens, graph_actions, sizes, sched = _scheduler_run(xr0, io, mode, frames=5, k=2)
    assert sched.runner.graphs and graphs_on_cpu["replayed"] > 0
    if mode == "oxygen":
        assert any(b not in sched.runner.buckets for b in sizes), sizes  # some steps were padded to a bucket
    with pytest.MonkeyPatch.context() as m:
        m.setattr(runner_module, "use_cuda_graphs", lambda flag, device: False)
        eager_tokens, eager_actions, _, _ = _scheduler_run(xr0, io, mode, frames=5, k=2)
    assert graph_tokens == eager_tokens
    assert len({t for seq in eager_tokens.values() for t in seq}) >= 4
    err = max((a - b).abs().max().item() for a, b in zip(graph_actions, eager_actions, strict=True))
    assert err < STATIC_ACT_TOL, err


def test_static_bodies_equal_eager_calls_with_partial_batches(xr0, io):
    """The runner's bodies run directly: the denoise body over the staging row (stale garbage past the copied prefix)
    equals eager denoise_head on the source row; the decode body of bucket 4 fed 3 live rows (one zeroed padding
    row) gives the eager logits of the 3 rows and writes their K/V as eager decode_step does."""
    model = xr0
    c = model.config
    pool = _pool(model, num_slots=4, capacity=model.max_prefix_length() + 30)
    runner = ModelRunner(model, pool, cuda_graphs=False)
    prefixes = [_prefix(io, seed=80 + i, instruction=INSTRUCTIONS[i]) for i in range(3)]
    states = []
    for row, p in enumerate(prefixes):
        st = runner.prefill(row, 1, p)
        pool.allocate(row)
        pool.lengths[row] = st.host_lengths[0]
        states.append(st)
    # denoise: source row 1 (not the staging row), body over the staging row after the runner's copy
    noise = _noise(c, 9)
    eager = model.denoise_head("actions", pool.view(1, 2), states[1], noise, c.num_steps)
    pool.copy(1, pool.scratch, pool.lengths[1])
    body = runner.denoise_body("actions", c.num_steps, states[1], noise)
    body.load([noise, *states[1].tensors()])
    static = body.run()
    err = (static - eager).abs().max().item()
    assert err < STATIC_ACT_TOL, err
    # decode: 3 live rows in bucket 4
    size = 3
    tokens = torch.tensor([5, 77, 200])
    index = torch.tensor([s.host_lengths[0] for s in states])
    positions = torch.cat([s.next_positions for s in states])
    snapshot = (pool.cache.k.clone(), pool.cache.v.clone())
    want = model.decode_step(pool.view(0, size), tokens, positions, index)
    want_k = pool.cache.k[:, :size].clone()
    pool.cache.k.copy_(snapshot[0])
    pool.cache.v.copy_(snapshot[1])
    step = runner.decode_body(4)
    step.load([tokens, index, positions])
    got = step.run()[:size]
    err = (got - want).abs().max().item()
    assert err < STATIC_LOGITS_TOL, err
    assert torch.equal(got.argmax(-1), want.argmax(-1))
    for r in range(size):  # the new token's K at its cache index, as eager wrote it
        i = int(index[r])
        torch.testing.assert_close(pool.cache.k[:, r, :, i], want_k[:, r, :, i], atol=1e-5, rtol=0)


# ---------------------------------------------------------------- 5. bad backbone / bundle inputs
def test_cat_of_rows_with_and_without_images_names_images(io):
    with_images = _prefix(io, 1)
    without = dataclasses.replace(with_images, pixel_values=None, image_grid_thw=None)
    with pytest.raises(ValueError, match=r"pixel_values / image_grid_thw are None in rows \[1\] only"):
        XR0PrefixInputs.cat([with_images, without])
    with pytest.raises(ValueError, match=r"pixel_values / image_grid_thw are None in rows \[0, 2\] only"):
        XR0PrefixInputs.cat([without, with_images, without])


def test_wrong_image_pad_count_names_image_grid_thw(xr0, io):
    p = _prefix(io, 1)
    pad = int(xr0.config.backbone["image_token_id"])
    ids = p.input_ids.clone()
    first = int((ids[0] == pad).nonzero()[0, 0])
    ids[0, first] = 3  # one image pad fewer than the grids need
    cache = xr0.new_cache(1, xr0.max_prefix_length())
    with pytest.raises(ValueError, match=r"input_ids hold \d+ image tokens .* image_grid_thw .* needs \d+"):
        xr0.prefill_frame(cache, dataclasses.replace(p, input_ids=ids))
    grid = p.image_grid_thw.clone()
    grid[0, 1] = 2  # a grid that disagrees with pixel_values
    with pytest.raises(ValueError, match="pixel_values has .* rows but image_grid_thw"):
        xr0.prefill_frame(cache, dataclasses.replace(p, image_grid_thw=grid))


def test_unknown_head_names_head(xr0, io):
    cache = xr0.new_cache(1, xr0.max_prefix_length())
    p = _prefix(io, 1)
    st = xr0.prefill_frame(cache, p)
    with pytest.raises(ValueError, match="head: XR0 has one action head 'actions', got 'nope'"):
        xr0.denoise_head("nope", cache, st, _noise(xr0.config, 1), 2)
