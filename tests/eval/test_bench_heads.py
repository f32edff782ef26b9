"""`oxygen-gym bench --heads`: a sweep over how many action experts fan out from each prefill (paper Table 4), and
the XR0 family through the same bench. Checks what each point ran (prefills, denoise per expert, the ideal closed
form for E experts), not how fast it ran."""
import json

import pytest

from oxygen_gym.eval.bench.ideal import expert_formula
from oxygen_gym.eval.bench.sweep import plan_groups, run_bench
from oxygen_gym.eval.bench.sweep_config import BenchConfig, BenchConfigError


@pytest.fixture(scope="module")
def heads_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("bench-heads")
    cfg = BenchConfig(out=out, model="multi-tiny", threads=1, modes=("isolated", "shared", "oxygen"), N=(4,), k=(2,),
                      S=(4,), heads=(1, 3), frames=4, calibrate=False, plots=False, observations=2, command="pytest")
    return out, run_bench(cfg)


def _point(results, **match):
    found = [p for p in results["points"] if all(p.get(k) == v for k, v in match.items())]
    assert len(found) == 1, match
    return found[0]


def test_each_expert_count_is_its_own_sweep(heads_run):
    out, results = heads_run
    assert {(p["mode"], p["E"]) for p in results["points"]} == {(m, e) for m in ("isolated", "shared", "oxygen") for e in (1, 3)}
    assert all("error" not in p for p in results["points"]), [p.get("error") for p in results["points"]]
    frames = [json.loads(line) for line in (out / "frames.jsonl").read_text().splitlines()]
    by_point = {}
    for f in frames:
        if not f["warmup"]:
            by_point.setdefault(f["point"], []).append(f)
    # isolated runs a prefill per expert and one per request; the sharing modes one for everything
    assert {f["prefills"] for f in by_point["fixed|isolated|N=4|k=-|S=4|E=3"]} == {4}
    assert {f["prefills"] for f in by_point["fixed|isolated|N=4|k=-|S=4"]} == {2}
    assert {f["prefills"] for f in by_point["fixed|oxygen|N=4|k=2|S=4|E=3"]} == {1}
    md = (out / "results.md").read_text()
    assert "## Action experts on one prefill (paper Table 4)" in md and "| E |" in md


def test_the_ideal_frame_counts_a_denoise_per_expert(heads_run):
    _, results = heads_run
    e3 = _point(results, mode="isolated", E=3)
    ox3 = _point(results, mode="oxygen", E=3)
    assert e3["ideal_formula"] == "4P + 3D + N d(1)" and ox3["ideal_formula"] == "P + 3D + k d(N/k)"
    terms = ox3["ideal_terms_ms"]
    d2 = terms["d(2)"]
    assert ox3["ideal_frame_ms"] == pytest.approx(terms["P"] + 3 * terms["D"] + 2 * d2)
    assert expert_formula("shared", 1) == "P + D + N d(1)"


def test_heads_beyond_the_models_are_a_clear_error(tmp_path):
    cfg = BenchConfig(out=tmp_path, model="tiny", threads=1, modes=("oxygen",), N=(2,), k=(1,), S=(2,), heads=(2,),
                      frames=1, calibrate=False, plots=False)
    with pytest.raises(ValueError, match=r"--heads: tiny has 1 action head\(s\), 2 asked"):
        run_bench(cfg)
    with pytest.raises(BenchConfigError, match="--heads must be a list of integers >= 1"):
        BenchConfig(out=tmp_path, heads=(0,)).check()
    assert [g[0].E for g in plan_groups(BenchConfig(out=tmp_path, N=(2,), heads=(1, 2)).check())] == [1, 2]


def test_xr0_runs_through_the_bench(tmp_path):
    cfg = BenchConfig(out=tmp_path, model="xr0-tiny", threads=1, modes=("isolated", "oxygen"), N=(3,), k=(3,), S=(2,),
                      frames=3, calibrate=False, plots=False, observations=2, command="pytest")
    results = run_bench(cfg)
    assert results["config"]["action_heads"] == ["actions"] and results["config"]["model_dims"]["horizon"] == 30
    for p in results["points"]:
        assert "error" not in p, p.get("error")
        assert p["tokens"] == 3 * 3 and p["ideal_frame_ms"] > 0


def test_starvla_heads_sweep_and_its_figure(tmp_path):
    """`--preset starvla-cpu`'s sweep on starvla-tiny: pi, groot, oft as E = 1..3 (the paper's E = 2..4), each expert
    count drawn against its ideal-time model in plots/experts.png."""
    from oxygen_gym.eval.bench.sweep_config import PRESETS

    assert PRESETS["starvla-cpu"]["heads"] == (1, 2, 3) and PRESETS["starvla-cpu"]["model"] == "starvla-small"
    cfg = BenchConfig(out=tmp_path, model="starvla-tiny", threads=1, modes=("isolated", "oxygen"), N=(3,), k=(3,),
                      S=(3,), heads=(1, 3), frames=2, calibrate=False, observations=2, command="pytest")
    results = run_bench(cfg)
    assert all("error" not in p for p in results["points"]), [p.get("error") for p in results["points"]]
    assert results["config"]["action_heads"] == ["pi", "groot", "oft"]
    frames = [json.loads(line) for line in (tmp_path / "frames.jsonl").read_text().splitlines()]
    iso = {f["prefills"] for f in frames if f["point"] == "fixed|isolated|N=3|k=-|S=3|E=3" and not f["warmup"]}
    assert iso == {4}
    assert results["plots"]["experts"] == {"file": "plots/experts.png"}
    assert (tmp_path / "plots" / "experts.png").read_bytes()[:4] == b"\x89PNG"
