"""`oxygen-gym bench`: functional checks only (speed is judged from the benchmark's output, never from a timed test).

A 20-frame sweep on `tiny` must write every file and plot with the expected fields; the workloads, the ideal-time
model and the option checks must say what they mean; the CPU kernel path and the CUDA-graph bodies must not change
what the engine computes."""
from __future__ import annotations

import argparse
import json
import math

import numpy as np
import pytest
import torch

from engine_workloads import make_workload, run_workload
from oxygen_gym.engine.model_api import PrefixState
from oxygen_gym.engine.runner import ModelRunner, decode_buckets
from oxygen_gym.engine.slots import SlotPool
from oxygen_gym.eval.bench import bench_command as cli
from oxygen_gym.eval.bench.sweep_config import BenchConfig, BenchConfigError
from oxygen_gym.eval.bench.ideal import estimate, point_ideal
from oxygen_gym.eval.bench.records import ALL_MODES, FrameRecord, Point
from oxygen_gym.eval.bench.point_runner import pool_args
from oxygen_gym.eval.bench.sweep import run_bench
from oxygen_gym.eval.bench.workloads import Arrivals, WorkloadError, make_observations, peak_in_flight
from oxygen_gym.model import cpu_kernels
from oxygen_gym.model.pi05.init import build_model

API_FIELDS = (
    "mode", "N", "k", "S", "frames", "frame_ms_mean", "frame_ms_p50", "frame_ms_p99", "action_hz",
    "language_tokens_per_s", "mean_batch_size", "stage_ms", "manager_share", "ideal_frame_ms", "peak_memory_bytes",
)
PLOTS = ("frontier", "speedup_heatmap", "ablation", "stage_breakdown", "manager_overhead", "soak", "decode_scaling", "workloads")


@pytest.fixture(scope="module")
def tiny():
    return build_model("tiny", seed=3)


# ---------------------------------------------------------------------------------------------- the whole run
@pytest.fixture(scope="module")
def sweep(tmp_path_factory):
    out = tmp_path_factory.mktemp("bench")
    cfg = BenchConfig(
        out=out, model="tiny", robot="libero", threads=1, modes=ALL_MODES, N=(2, 6), k=(1, 3), S=(10, 5),
        workloads=("fixed", "mixed:2/6"), frames=20, chunk=5, soak_frames=40, soak_slots=6, observations=3,
        command="pytest",
    )
    return out, run_bench(cfg)


def test_sweep_writes_every_file_and_plot(sweep, tiny):
    out, results = sweep
    weights = sum(t.numel() * t.element_size() for t in tiny.parameters())
    on_disk = json.loads((out / "results.json").read_text())
    assert on_disk["config"]["model"] == "tiny" and on_disk["config"]["kernel_path"] in ("eager", "onednn")
    assert {p["mode"] for p in on_disk["points"]} == set(ALL_MODES)
    for p in on_disk["points"]:
        assert "error" not in p, p.get("error")
        for field in API_FIELDS:
            assert field in p, f"point {p['mode']} N={p['N']} k={p['k']} lacks {field}"
        assert p["frames"] == 20
        assert set(p["stage_ms"]) == {"prefill", "denoise", "decode", "manager"}
        assert p["ideal_frame_ms"] > 0
        # CPU: memory is the computed held bytes (at least the weights); no peak is claimed, since none is measured
        assert p["held_memory_bytes"] > weights and p["peak_memory_bytes"] is None
        assert p["peak_memory_method"].startswith("not measured")
    for name in PLOTS:
        info = on_disk["plots"][name]
        assert "file" in info, f"{name} was not drawn: {info}"
        png = out / info["file"]
        assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    md = (out / "results.md").read_text()
    assert "| isolated |" in md and "## Targets" in md and "## Soak" in md
    frames = [json.loads(line) for line in (out / "frames.jsonl").read_text().splitlines()]
    assert len(frames) == sum(p["frames"] + p["warmup_frames"] for p in on_disk["points"])
    # every point's timing figures are those of its own measured frames in frames.jsonl (warm-up excluded)
    for p in on_disk["points"]:
        key = f"{p['workload']}|{p['mode']}|N={p['N']}|k={p['k'] if p['k'] is not None else '-'}|S={p['S']}"
        ms = np.array([f["frame_ms"] for f in frames if f["point"] == key and not f["warmup"]])
        assert len(ms) == p["frames"] == 20, key
        assert p["frame_ms_mean"] == pytest.approx(ms.mean(), rel=1e-9)
        assert p["frame_ms_p50"] == pytest.approx(np.median(ms), rel=1e-9)
        assert p["frame_ms_p99"] == pytest.approx(np.percentile(ms, 99), rel=1e-9)
        assert p["action_hz"] == pytest.approx(on_disk["config"]["horizon"] * 1e3 / ms.mean(), rel=1e-9)
    assert on_disk["soak"]["summary"]["frames"] > 0 and on_disk["soak"]["summary"]["peak_active"] == 6
    assert {t["name"] for t in on_disk["targets"]} >= {"efficiency oxygen, N=30, k=5", "shared / isolated, N=5"}
    assert "eager" in on_disk["decode_scaling"]["ms"]


def _point(results, **match):
    found = [p for p in results["points"] if all(p.get(k) == v for k, v in match.items())]
    assert len(found) == 1, match
    return found[0]


def test_sweep_measures_what_each_mode_does(sweep):
    _, results = sweep
    iso = _point(results, mode="isolated", N=6, S=10, workload="fixed")
    ox1 = _point(results, mode="oxygen", N=6, k=1, S=10, workload="fixed")
    ox3 = _point(results, mode="oxygen", N=6, k=3, S=10, workload="fixed")
    ub = _point(results, mode="upper_bound", N=6, k=3, S=10, workload="fixed")
    # steady state of one request per frame: a batch of N/k, k steps per frame, N tokens per frame
    assert ox1["mean_batch_size"] == 6 and ox1["decode_steps_per_frame"] == 1
    assert ox3["mean_batch_size"] == 2 and ox3["decode_steps_per_frame"] == 3
    assert iso["mean_batch_size"] == 1 and iso["decode_steps_per_frame"] == 6
    for p in (iso, ox1, ox3):
        assert p["tokens"] == 6 * 20
        assert math.isclose(p["language_tokens_per_s"] * p["frame_ms_mean"] / 1e3, 6, rel_tol=1e-6)
    assert ub["tokens"] == 3 * 20 and ub["mean_batch_size"] == 1
    assert iso["speedup_vs_isolated"] == 1.0
    assert ox1["speedup_vs_isolated"] == pytest.approx(iso["frame_ms_mean"] / ox1["frame_ms_mean"])  # against its own N
    # the ideal model is the paper's closed form at the group's own stage costs
    c = results["stage_costs_by_group"]["fixed N=6 S=10"]
    d = {int(b): v for b, v in c["d_ms"].items()}
    assert iso["ideal_frame_ms"] == pytest.approx(2 * c["P_ms"] + c["D_ms"]["10"] + 6 * d[1])
    assert ox1["ideal_frame_ms"] == pytest.approx(c["P_ms"] + c["D_ms"]["10"] + d[6])
    assert ox3["ideal_frame_ms"] == pytest.approx(c["P_ms"] + c["D_ms"]["10"] + 3 * d[2])
    # held KV: oxygen k=1 keeps N/k = 6 requests' slots, k=3 keeps 2, isolated 1 (all of one size at one N)
    slot = ox3["held_memory_bytes"] - iso["held_memory_bytes"]
    assert slot > 0 and ox1["held_memory_bytes"] - iso["held_memory_bytes"] == 5 * slot
    # every request of the mixed workload is either 2 or 6 tokens long
    mixed = _point(results, mode="shared", workload="mixed:2/6")
    assert 2 * 20 <= mixed["tokens"] <= 6 * 20


# ---------------------------------------------------------------------------------------------- pieces
def test_arrival_specs():
    assert Arrivals.parse("fixed").at(3, 30, 0) == [30]
    assert Arrivals.parse("fixed:2").at(-4, 5, 0) == [5, 5]
    assert [len(Arrivals.parse("uniform:0.5").at(m, 5, 0)) for m in range(6)] == [0, 1, 0, 1, 0, 1]
    poisson = Arrivals.parse("poisson:2")
    counts = [len(poisson.at(m, 5, 1)) for m in range(2000)]
    assert abs(np.mean(counts) - 2.0) < 0.15
    assert counts[:50] == [len(poisson.at(m, 5, 1)) for m in range(50)]  # a function of (seed, m) alone
    mixed = Arrivals.parse("mixed:5/30:0.25")
    lengths = [mixed.at(m, 99, 0)[0] for m in range(2000)]
    assert set(lengths) == {5, 30} and abs(np.mean(np.array(lengths) == 5) - 0.25) < 0.05
    soak = Arrivals.parse("soak")
    assert max(len(soak.at(m, 0, 0)) for m in range(17)) == 5 and soak.max_length(0) == 90
    assert peak_in_flight(Arrivals.parse("fixed"), 30, 5, range(-8, 20), 0) == 6
    assert peak_in_flight(Arrivals.parse("fixed"), 30, 1, range(-32, 20), 0) == 30
    assert peak_in_flight(Arrivals.parse("fixed:3"), 30, None, range(0, 5), 0) == 3
    for bad in ("poisson", "uniform:-1", "mixed:5", "fixed:1.5", "burst:3"):
        with pytest.raises(WorkloadError, match="workload"):
            Arrivals.parse(bad)


@pytest.mark.parametrize("robot,cameras", [("libero", 2), ("droid", 2), ("aloha", 3)])
def test_observations_have_each_robots_shape(tiny, robot, cameras):
    obs = make_observations(tiny, robot, count=2, seed=1)
    patches = tiny.config.vision.num_patches
    for prefix, length in zip(obs.prefixes, obs.prefix_lengths):
        assert [bool(m.all()) for m in prefix.image_masks] == [True] * cameras + [False] * (3 - cameras)
        assert all(img.shape == (1, 3, 224, 224) and -1 <= img.min() and img.max() <= 1 for img in prefix.images)
        assert length == cameras * patches + int(prefix.token_masks.sum())
    frame = obs.frame_input(-3, [7, 7], first_id=10)
    assert [r.request_id for r in frame.new_requests] == [10, 11]
    assert all(r.max_new_tokens == 7 and r.eos_id == -1 for r in frame.new_requests)
    assert torch.equal(frame.noise, obs.noise(-3)) and not torch.equal(obs.noise(0), obs.noise(1))


def _record(prefills, batches, prefill, denoise, decode, warmup=False):
    stage = {"prefill": prefill, "denoise": denoise, "decode": decode, "manager": 0.1}
    return FrameRecord(0, warmup, prefill + denoise + decode + 0.1, stage, batches, sum(batches), 1, prefills, False, 1, 0)


def test_ideal_model_uses_the_runs_own_stage_costs():
    P, D, d1, d6 = 100.0, 40.0, 5.0, 8.0
    iso = Point("isolated", 30, None, 10)
    ox = Point("oxygen", 30, 5, 10)
    runs = [
        (iso, [_record(2, [1] * 30, 2 * P, D, 30 * d1) for _ in range(5)] + [_record(2, [1] * 30, 999, 999, 999, warmup=True)]),
        (ox, [_record(1, [6] * 5, P, D, 5 * d6) for _ in range(5)]),
        (Point("parallel", 30, None, 10), [_record(2, [1] * 30, 7777, 7777, 7777)]),  # other threads: not pooled
    ]
    costs = estimate(runs)
    assert (costs.prefill, costs.denoise[10], costs.decode) == (P, D, {1: d1, 6: d6})
    assert costs.ratio(6) == pytest.approx(d6 / d1) and costs.ratio(3) is None
    assert costs.d(3) == (pytest.approx(d1 + (d6 - d1) * 2 / 5), False)  # interpolated, and says so
    assert point_ideal(iso, runs[0][1], costs)["ideal_frame_ms"] == pytest.approx(2 * P + D + 30 * d1)
    got = point_ideal(ox, runs[1][1], costs)
    assert got["ideal_frame_ms"] == pytest.approx(P + D + 5 * d6) and got["ideal_formula"] == "P + D + k d(N/k)"


def test_energy_that_never_ticked_is_no_reading_not_zero_joules():
    """NVML's energy counter ticks at its own period (seen on an H200: a 5-frame point read 0 J): all-zero frames
    leave the energy fields out and say why; any tick keeps the sum."""
    from oxygen_gym.eval.bench.ideal import StageCosts
    from oxygen_gym.eval.bench.metrics import point_metrics

    costs = StageCosts(prefill=1.0, denoise={10: 1.0}, decode={1: 1.0})
    point = Point("shared", 2, None, 10)

    def metrics(joules):
        records = [_record(1, [1], 1.0, 1.0, 1.0) for _ in joules]
        for r, j in zip(records, joules):
            r.energy_j = j
        return point_metrics(point, records, horizon=10, held_bytes=0, costs=costs)

    still = metrics([0.0, 0.0, 0.0])
    assert "energy_j" not in still and "avg_power_w" not in still and "did not advance" in still["energy_note"]
    ticked = metrics([0.0, 0.6, 0.0])
    assert ticked["energy_j"] == pytest.approx(0.6) and "energy_note" not in ticked


def test_bad_options_are_clear_errors(tmp_path, capsys):
    parser = argparse.ArgumentParser()
    cli.add_arguments(parser)
    for argv, needle in (
        (["--N", "0,5"], "--N"),
        (["--modes", "oxygen,turbo"], "--modes"),
        (["--model", "huge"], "--model"),
        (["--workloads", "burst:2"], "--workloads"),
        (["--workloads", "soak"], "--soak-frames"),
        (["--cuda-graphs", "on"], "--cuda-graphs"),
        (["--frames", "0"], "--frames"),
    ):
        args = parser.parse_args(["--out", str(tmp_path), *argv])
        with pytest.raises(BenchConfigError, match=needle):
            cli.config_from_args(args, argv)
        assert cli.run(args) == 2
        assert needle.lstrip("-").split("-")[0] in capsys.readouterr().err
    with pytest.raises(SystemExit):
        parser.parse_args(["--out", str(tmp_path), "--N", "five"])


def test_presets_apply_under_explicit_options(tmp_path):
    parser = argparse.ArgumentParser()
    cli.add_arguments(parser)
    cfg = cli.config_from_args(parser.parse_args(["--out", str(tmp_path), "--preset", "gpu", "--device", "cpu", "--frames", "3"]))
    assert (cfg.model, cfg.N, cfg.k, cfg.modes) == ("pi05", (5, 30), (1, 5), ("isolated", "shared", "oxygen"))
    assert cfg.device == "cpu" and cfg.frames == 3 and cfg.preset == "gpu"


# ---------------------------------------------------------------------------------------------- kernel paths
@pytest.mark.skipif(not cpu_kernels.available(), reason="torch built without oneDNN")
def test_onednn_path_matches_f_linear_and_keeps_modes_equivalent():
    model = build_model("tiny", seed=3)
    assert cpu_kernels.set_path(model, "onednn") == "onednn" and cpu_kernels.path_of(model) == "onednn"
    layer = model.vlm.layers[0].mlp.gate_proj
    gen = torch.Generator().manual_seed(0)
    for rows in (1, 2, 6, 64, 65):
        x = torch.randn(rows, layer.in_features, generator=gen)
        # measured max abs difference 1.2e-6 (a different summation order; tools/measure_test_errors.py kernels); ~4x
        torch.testing.assert_close(cpu_kernels.packed_linear(x, layer), torch.nn.functional.linear(x, layer.weight), atol=5e-6, rtol=0)
    for seed, k in ((11, 1), (13, 5)):
        workload = make_workload(seed, frames=14, max_tasks=3)
        ref_tokens, ref_actions, _ = run_workload(model, "isolated", workload, k=k)
        for mode in ("shared", "oxygen"):
            tokens, actions, _ = run_workload(model, mode, workload, k=k)
            assert tokens == ref_tokens, f"{mode} generated different text than isolated on the onednn path"
            for a, b in zip(actions, ref_actions):
                torch.testing.assert_close(a, b, atol=0, rtol=0)  # measured: bit-identical (same kernels, shapes)
    cpu_kernels.set_path(model, "eager")
    assert cpu_kernels.path_of(model) == "eager" and cpu_kernels.packed_bytes(model) == 0


def test_static_shape_bodies_of_the_cuda_graphs_match_eager(tiny):
    """What the runner captures are the model's own calls in shape-static form (full-capacity attention under a
    cache-index mask, padding rows, the action tokens at the staging row's end); run eagerly on the CPU through the
    runner's static calls, they must compute what the eager model does."""
    assert decode_buckets(30) == [1, 2, 4, 8, 16, 30] and decode_buckets(1) == [1]
    obs = make_observations(tiny, "libero", count=5, seed=2)
    pool = SlotPool(**pool_args(tiny, 8, obs.capacity(12)))
    runner = ModelRunner(tiny, pool, cuda_graphs=False)
    lengths = []
    for s, p in enumerate(obs.prefixes):
        lengths.append(int(runner.prefill(s, 1, p).lengths[0]))
        pool.lengths[s] = lengths[-1]
    pool.active = 5
    noise = obs.noise(0)
    state = PrefixState(torch.tensor([lengths[3]]), torch.tensor([lengths[3]]))
    eager = tiny.denoise_head("actions", pool.view(3, 4), state, noise, 10)
    pool.copy(3, pool.scratch, lengths[3])  # what the runner does before a replay: the prefix into the staging row
    body = runner.denoise_body("actions", 10, state, noise)
    body.load([noise, *state.tensors()])
    # measured max abs differences (tools/measure_test_errors.py kernels): denoise 1.7e-6, decode 1.0e-6; ~3x, ~2x
    torch.testing.assert_close(body.run(), eager, atol=5e-6, rtol=0)
    tokens, positions = torch.tensor([5, 6, 7, 8, 9]), torch.tensor(lengths)
    saved = pool.cache.k.clone(), pool.cache.v.clone()
    step = runner.decode_body(8)  # batch 5 padded to the bucket of 8
    pad = torch.zeros(3, dtype=torch.long)
    step.load([torch.cat([tokens, pad]), torch.cat([positions, pad]), torch.cat([positions, pad])])
    logits = step.run()[:5].clone()
    pool.cache.k.copy_(saved[0])
    pool.cache.v.copy_(saved[1])
    torch.testing.assert_close(logits, tiny.decode_step(pool.view(0, 5), tokens, positions), atol=2e-6, rtol=0)


# ---------------------------------------------------------------------------------------------- GPU (skipped here)
@pytest.mark.gpu
def test_cuda_graph_decode_and_denoise_match_eager_on_gpu():
    model = build_model("tiny", seed=3, device="cuda", dtype=torch.float32)
    obs = make_observations(model, "libero", count=3, seed=2)
    pool = SlotPool(**pool_args(model, 8, obs.capacity(12)))
    graphs = ModelRunner(model, pool, cuda_graphs=True)
    lengths = []
    for s, p in enumerate(obs.prefixes):
        lengths.append(int(graphs.prefill(s, 1, p).lengths[0]))
        pool.lengths[s] = lengths[-1]
    pool.active = 3
    noise = obs.noise(0)
    for slot in (0, 2, 1):  # one capture, any slot
        n = torch.tensor([lengths[slot]], device="cuda")
        state = PrefixState(n, n.clone())
        want = model.denoise_head("actions", pool.view(slot, slot + 1), state, noise, 10)
        got = graphs.denoise("actions", slot, state, noise, 10)
        torch.testing.assert_close(got, want, atol=1e-4, rtol=1e-4)
    tokens = torch.tensor([5, 6, 7], device="cuda")
    for batch in (1, 3, 2):
        pool.active = batch  # a graph replays only over the whole active range
        positions = torch.tensor(lengths[:batch], device="cuda")
        saved = pool.cache.k.clone(), pool.cache.v.clone()
        got = graphs.decode_step(batch, tokens[:batch], positions, positions).clone()
        pool.cache.k.copy_(saved[0])
        pool.cache.v.copy_(saved[1])
        want = model.decode_step(pool.view(0, batch), tokens[:batch], positions)
        torch.testing.assert_close(got, want, atol=1e-3, rtol=1e-3)
        assert torch.equal(got.argmax(-1), want.argmax(-1))
    assert sorted(graphs._decode) == [1, 2, 4]


@pytest.mark.gpu
def test_cuda_graphs_capture_up_front_on_an_empty_pool():
    model = build_model("tiny", seed=3, device="cuda")
    pool = SlotPool(**pool_args(model, 6, 700))
    runner = ModelRunner(model, pool, cuda_graphs=True)
    runner.capture(num_steps=5, horizons={"actions": 10})
    assert sorted(runner._decode) == [1, 2, 4, 6] and list(runner._denoise) == [("actions", 5, 10)]
    pool.active = 1
    with pytest.raises(RuntimeError, match="empty pool"):
        runner.capture(num_steps=5, horizons={"actions": 10})


@pytest.mark.gpu
def test_modes_agree_with_cuda_graphs_on_gpu():
    from oxygen_gym.engine.scheduler import FrameScheduler

    model = build_model("tiny", seed=3, device="cuda", dtype=torch.float32)
    obs = make_observations(model, "libero", count=4, seed=5)
    lengths = [[3], [7, 2], [], [12], [5, 5, 1], [9], [], [4]]
    streams = {}
    for mode in ("isolated", "oxygen"):
        sched = FrameScheduler(model, SlotPool(**pool_args(model, 16, obs.capacity(12))), mode)
        assert sched.runner.graphs
        out: dict[int, list[int]] = {}
        next_id, f = 0, 0
        while f < len(lengths) or sched.in_flight():
            frame = obs.frame_input(f, lengths[f] if f < len(lengths) else [], next_id)
            next_id += len(frame.new_requests)
            for r, toks in sched.run(frame, 3).advanced:
                out.setdefault(r.request_id, []).extend(toks)
            f += 1
        streams[mode] = out
    assert streams["oxygen"] == streams["isolated"]
    assert all(len(streams["isolated"][i]) == n for i, n in enumerate(x for frame in lengths for x in frame))


@pytest.mark.gpu
def test_bench_smoke_on_gpu(tmp_path):
    cfg = BenchConfig(out=tmp_path, model="tiny", device="cuda", modes=("isolated", "shared", "oxygen"), N=(6,), k=(1, 3),
                      S=(10,), frames=5, soak_frames=20, soak_slots=6, observations=2)
    results = run_bench(cfg)
    assert results["config"]["cuda_graphs"] is True
    for p in results["points"]:
        assert "error" not in p, p.get("error")
        assert p["peak_memory_bytes"] > 0
        if results["config"]["energy"] == "energy_counter":  # measured, or said why not (a coarse counter)
            assert (p.get("energy_j_per_request", 0) > 0 and p["avg_power_w"] > 0) or "did not advance" in p["energy_note"]
