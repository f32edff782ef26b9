"""`oxygen-gym bench serve --hostile` (issue 25) runs end to end on the tiny model: results.json has its fields, the robot
got every answer, and the attackers were refused (error replies, refused handshakes, closes by the server)."""
import json
import subprocess
import sys

import pytest

pytest.importorskip("websockets")


def test_hostile_bench_smoke(tmp_path):
    out = tmp_path / "hostile"
    cmd = [sys.executable, "-m", "oxygen_gym.cli", "bench", "serve", "--hostile", "--model", "tiny", "--calls", "6",
           "--rounds", "2", "--warmup", "1", "--max-new-tokens", "3", "--decode-budget", "2", "--max-seconds", "60",
           "--out", str(out)]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=150)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    res = json.loads((out / "results.json").read_text())
    assert "hostile / alone" in (out / "results.md").read_text()
    rob = res["robot"]
    assert rob["errors"] == [], rob["errors"]
    for phase in ("alone", "hostile"):
        assert rob[phase]["calls"] == 6 and rob[phase]["latency_ms_p99"] >= rob[phase]["latency_ms_p50"] > 0
    assert set(rob["hostile_over_alone"]) == {"p50", "p99"}
    assert [p["phase"] for p in res["phases"]] == ["alone", "hostile", "hostile", "alone"]  # rounds alternate
    refused = res["refused"]
    assert set(refused) == {"oversized", "junk", "idle", "storm"}
    assert refused["oversized"]["error_replies"] > 0 and refused["oversized"]["closed_by_server"] > 0  # 1009
    assert refused["junk"]["error_replies"] > 0
    for kind in ("oversized", "junk"):
        assert refused[kind]["binary_replies"] == 0 and refused[kind]["internal_errors"] == 0, refused[kind]
    assert res["attacks"]["storm"]["resets"] > 0 and res["attacks"]["idle"]["connected"] > 0
    assert sum(f["error_replies"] + f["refused_handshakes"] for f in refused.values()) > 0
    assert res["server"]["healthz_ok"] is True and res["server"]["alive"] is True
    assert all(p["sessions_left"] == 0 for p in res["phases"])  # every attacker's session was freed
