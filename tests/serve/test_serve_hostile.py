"""`oxygen-gym bench serve --hostile` (issues 25, 55) runs end to end on the tiny model with every attack kind: results.json
has its fields, the robot got every answer under each kind, and the attackers were refused (error replies, refused
handshakes, closes by the server): no bomb, junk or oversized message got a binary reply or an internal error, the
squatters were closed, and the server still answers /healthz."""
import json
import subprocess
import sys

import pytest

pytest.importorskip("websockets")

from oxygen_gym.eval.bench.serve_hostile import KINDS, container_bombs, violations  # noqa: E402


def test_hostile_bench_smoke(tmp_path):
    out = tmp_path / "hostile"
    cmd = [sys.executable, "-m", "oxygen_gym.cli", "bench", "serve", "--hostile", "--model", "tiny", "--calls", "2",
           "--rounds", "1", "--warmup", "1", "--max-new-tokens", "3", "--decode-budget", "2", "--max-seconds", "150",
           "--call-timeout", "30", "--out", str(out)]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=280)
    res = json.loads((out / "results.json").read_text())
    assert res["violations"] == [], res["violations"]
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    assert "hostile (all kinds) / alone" in (out / "results.md").read_text()
    rob = res["robot"]
    assert rob["errors"] == [], rob["errors"]
    assert rob["alone"]["calls"] == 2 * len(KINDS) and rob["hostile"]["calls"] == 2 * len(KINDS)
    assert [p["phase"] for p in res["phases"]] == [p for k in KINDS for p in ("alone", k)]  # alone before each kind
    refused, pa, attacks = res["refused"], res["per_attack"], res["attacks"]
    assert set(refused) == set(pa) == set(KINDS)
    for kind in KINDS:
        s = pa[kind]["robot"]
        assert s["calls"] == 2 and s["latency_ms_p99"] >= s["latency_ms_p50"] > 0, (kind, s)
        assert pa[kind]["healthz"]["polls"] > 0 and pa[kind]["healthz"]["failures"] == 0, (kind, pa[kind]["healthz"])
        assert pa[kind]["messages"] > 0, kind
        assert refused[kind]["internal_errors"] == 0, (kind, refused[kind])
        if kind != "stats_spam":
            assert refused[kind]["binary_replies"] == 0, (kind, refused[kind])
    for kind in ("oversized", "junk", "shape_bomb", "container_bomb", "squatter", "stats_spam"):
        assert refused[kind]["error_replies"] > 0, (kind, attacks[kind])  # each bad message named in a text reply
    assert refused["oversized"]["closed_by_server"] > 0  # 1009
    assert attacks["storm"]["resets"] > 0 and attacks["idle"]["connected"] > 0
    sq = pa["squatter"]
    assert sq["squatters"] > 0 and sq["squatters_closed"] == sq["squatters"] and sq["squatters_open_at_end"] == 0, sq
    assert sq["robot_connect_refused_503"] > 0  # they did fill the server before the server closed them
    assert attacks["stats_spam"].get("binary_replies", 0) > 0  # the first stats answers are acknowledgements
    assert "server_cpu_ms_per_message" in pa["container_bomb"]
    assert res["server"]["healthz_ok"] is True and res["server"]["alive"] is True
    assert all(p["sessions_left"] == 0 for p in res["phases"])  # every attacker's session was freed


def test_container_bombs_are_what_they_claim():
    """The bombs are valid msgpack of the announced shape, just under the size asked for (else they would test the
    size cap, not the decoder)."""
    import msgpack

    maps, arrays, keys = container_bombs(60_000)
    for bomb in (maps, arrays, keys):
        assert 59_990 <= len(bomb) <= 60_000
    assert msgpack.unpackb(maps) == [{}] * (60_000 - 5)
    assert msgpack.unpackb(arrays) == [[]] * (60_000 - 5)
    assert msgpack.unpackb(keys, strict_map_key=False) == dict.fromkeys(range((60_000 - 5) // 6))


def test_violations_name_what_went_wrong():
    """A bomb that got a binary reply, a squatter the server never closed, a dead server: each is a violation; a stats
    acknowledgement is not."""
    res = {"robot": {"errors": []}, "attacks": {"shape_bomb": {}, "stats_spam": {}},
           "refused": {"shape_bomb": {"binary_replies": 1, "internal_errors": 0},
                       "stats_spam": {"binary_replies": 50, "internal_errors": 0}},
           "per_attack": {"squatter": {"squatters": 3, "squatters_open_at_end": 2}},
           "server": {"alive": False, "healthz_ok": False}}
    v = violations(res)
    assert len(v) == 3 and v[0].startswith("shape_bomb: 1 binary") and v[1].startswith("squatter: 2 of 3"), v
    assert v[2].startswith("server:"), v
