"""How often NVML's energy counter advances on this GPU, under a steady bf16 matmul load (3 s).

Why: `oxygen-gym bench` reads the counter around each frame (eval/bench/energy.py); frames shorter than its update
period read 0 J. On a lent H200 (2026-12-04) it advanced every ~100 ms, so a point's energy is read only from frames
that span ticks (eval/bench/metrics.py leaves all-zero points unmeasured, with a note). Needs CUDA and nvidia-ml-py:

    python3 tools/nvml_energy_probe.py OUT.json
"""
from __future__ import annotations

import json
import sys
import time


def probe(seconds: float = 3.0) -> dict:
    import pynvml
    import torch

    pynvml.nvmlInit()
    handle = pynvml.nvmlDeviceGetHandleByIndex(0)
    a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
    samples, t0 = [], time.perf_counter()
    while time.perf_counter() - t0 < seconds:
        a @ a
        torch.cuda.synchronize()
        samples.append((time.perf_counter() - t0, pynvml.nvmlDeviceGetTotalEnergyConsumption(handle),
                        pynvml.nvmlDeviceGetPowerUsage(handle)))
    changes = [t for (t, e, _), (_, e0, _) in zip(samples[1:], samples) if e != e0]
    gaps = sorted(b - a_ for a_, b in zip(changes, changes[1:]))
    power = sorted({p / 1e3 for _, _, p in samples})
    out = {"samples": len(samples), "sample_ms": 1e3 * seconds / len(samples), "counter_changes": len(changes),
           "update_period_ms": gaps[len(gaps) // 2] * 1e3 if gaps else None,
           "energy_j": (samples[-1][1] - samples[0][1]) / 1e3, "seconds": samples[-1][0] - samples[0][0],
           "power_w_readings": power[:5] + ["..."] + power[-5:]}
    out["avg_power_w_from_counter"] = out["energy_j"] / out["seconds"]
    return out


if __name__ == "__main__":
    result = probe()
    if len(sys.argv) > 1:
        with open(sys.argv[1], "w") as f:
            json.dump(result, f, indent=1)
    print(json.dumps(result))
