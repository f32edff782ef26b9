"""`oxygen-gym bench adapters`: it runs, writes its table and JSON, keeps finished counts on a rerun, and the three
ways it times compute the same thing (the mixed batch's logits equal one pass per adapter with it merged)."""
import json

from oxygen_gym.cli import main
from oxygen_gym.eval.bench.adapter_cost import groups_of


def test_bench_adapters_writes_resumes_and_compares_equal_work(tmp_path, capsys):
    out = tmp_path / "adapters"
    argv = ["bench", "adapters", "--model", "tiny", "--rows", "5", "--adapters", "0,2", "--rank", "4", "--repeats", "2",
            "--threads", "1", "--out", str(out)]
    assert main(argv) == 0
    first = json.loads((out / "results.json").read_text())
    rows = {r["adapters"]: r for r in first["results"]}
    assert set(rows) == {0, 2}
    assert [g["rows"] for g in rows[2]["groups"]] == [2, 2, 1]
    for r in rows.values():
        assert r["base_ms_p50"] > 0 and r["mixed_ms_p50"] > 0 and r["per_adapter_ms_p50"] > 0
        # measured 1.0e-6 and 1.2e-6 (tiny, 2 and 4 adapters; float32 matmuls of other batch shapes): ~10x
        assert r["max_logit_diff_mixed_vs_per_adapter"] < 1e-5, r
    assert rows[2]["max_logit_diff_mixed_vs_base"] > 1e-3, "the adapters change nothing: the bench is blind"
    assert "| 2 | 2+2+1 |" in (out / "results.md").read_text()
    assert main(argv) == 0
    assert "already measured, kept" in capsys.readouterr().out
    assert json.loads((out / "results.json").read_text())["results"] == first["results"]


def test_rows_spread_round_robin_into_contiguous_groups():
    assert groups_of(8, 0) == [(0, 0, 8)]
    assert groups_of(8, 3) == [(0, 0, 2), (1, 2, 4), (2, 4, 6), (3, 6, 8)]
    assert groups_of(3, 4) == [(0, 0, 1), (1, 1, 2), (2, 2, 3)]
