"""One benchmark run, top to bottom: build the model and inputs, measure decode scaling per kernel path, run every
group of points interleaved, then the soak; after each group, rewrite results.json and results.md (the stage costs
and ideal times are re-estimated from everything measured so far)."""
from __future__ import annotations

import datetime as dt
import json
import math
import os
import platform
import time
from pathlib import Path

import numpy as np
import torch
from tqdm import tqdm

from oxygen_gym.engine.cpu_allocator import tune_allocator
from oxygen_gym.model import cpu_kernels
from oxygen_gym.policies.checkpoints import ConventionOverrides
from oxygen_gym.policies.model_io import family_of_builtin
from oxygen_gym.policies.robots import get_robot

from . import bench_report, calibrate, ideal, metrics, plots, soak, targets
from .sweep_config import BenchConfig
from .energy import open_meter
from .records import K_MODES, FrameRecord, Point
from .point_runner import Engines, PointRun, run_interleaved
from .workloads import Arrivals, make_observations, peak_in_flight

ENV_KEYS = ("OMP_WAIT_POLICY", "OMP_NUM_THREADS", "MKL_NUM_THREADS", "GOMP_SPINCOUNT", "CUDA_VISIBLE_DEVICES")
DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


def build_builtin_model(name: str, robot: str, seed: int, device: torch.device, dtype: torch.dtype | None):
    """(model, tokenizer) of a built-in model of any family, as `from_pretrained(name)` builds it."""
    from oxygen_gym.model.pi05.init import default_dtype

    family = family_of_builtin(name)
    model, tokenizer, _ = family.build_builtin(
        name, get_robot(robot), device, dtype or default_dtype(device), ConventionOverrides(), seed
    )
    return model, tokenizer


def plan_groups(cfg: BenchConfig) -> list[list[Point]]:
    """Groups of points run interleaved. Main S: every workload x N x mode x k (non-fixed workloads at the largest
    N only). Further S values: isolated and oxygen at the largest N (the heatmap's extra columns)."""
    s0, n_max = cfg.S[0], max(cfg.N)
    groups: list[list[Point]] = []
    for e in cfg.heads:  # each expert count is its own sweep (paper Table 4: E experts on one prefill)
        for spec in cfg.workloads:
            arr = Arrivals.parse(spec)
            ns = cfg.N if arr.kind == "fixed" else [n_max] if arr.varies_n else [arr.max_length(n_max)]
            for n in ns:
                groups.append([Point(m, n, k, s0, spec, e) for m in cfg.modes for k in (cfg.k if m in K_MODES else [None])])
        for s in cfg.S[1:]:
            pts = [Point(m, n_max, k, s, "fixed", e) for m in ("isolated", "oxygen") if m in cfg.modes
                   for k in (cfg.k if m in K_MODES else [None])]
            if pts:
                groups.append(pts)
    return groups


def warmup_frames(cfg: BenchConfig, point: Point, arr: Arrivals) -> int:
    """Enough frames for oxygen's batch to fill (a request lives ceil(N/k) frames), plus two; two for the modes
    whose requests finish within their own frame (upper_bound drops each after k tokens)."""
    if cfg.warmup is not None:
        return cfg.warmup
    if point.mode == "oxygen":
        return math.ceil(arr.max_length(point.N) / point.k) + 2
    return 2


def num_slots(point: Point, arr: Arrivals, warmup: int, frames: int, seed: int) -> int:
    if point.mode == "isolated":
        return 1
    k = point.k if point.mode == "oxygen" else None  # upper_bound drops each request after its first frame
    return peak_in_flight(arr, point.N, k, range(-warmup, frames), seed)


def machine() -> str:
    name = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            name = next(line.split(":", 1)[1].strip() for line in f if line.startswith("model name"))
    except (OSError, StopIteration):
        pass
    out = f"{name}, {os.cpu_count()} cores"
    if torch.cuda.is_available():
        out += f", {torch.cuda.get_device_name()}"
    return out


def _load() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def _clean(x):
    """JSON without NaN/inf (strict parsers reject them)."""
    if isinstance(x, float) and not math.isfinite(x):
        return None
    if isinstance(x, dict):
        return {str(k): _clean(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_clean(v) for v in x]
    return x


class Bench:
    def __init__(self, cfg: BenchConfig) -> None:
        self.cfg = cfg.check()
        self.out = Path(cfg.out)
        self.out.mkdir(parents=True, exist_ok=True)
        self.runs: list[tuple[str, Point, list[FrameRecord], int, str | None]] = []  # (group, point, ...)
        self.results: dict = {}

    # ------------------------------------------------------------------ the run
    def run(self) -> dict:
        cfg = self.cfg
        start = time.perf_counter()
        torch.set_num_threads(cfg.threads)
        device = torch.device(cfg.device)
        dtype = DTYPES[cfg.dtype] if cfg.dtype else None
        model, tokenizer = build_builtin_model(cfg.model, cfg.robot, cfg.seed, device, dtype)
        allocator = device.type == "cpu" and tune_allocator()
        if device.type == "cpu":
            path = cpu_kernels.set_path(model, cfg.kernels)
        elif cfg.kernels == "onednn":
            raise ValueError("--kernels onednn is a CPU path; on CUDA use --cuda-graphs on|off")
        else:
            path = "eager"
        graphs = device.type == "cuda" and cfg.cuda_graphs is not False
        obs = make_observations(
            model, cfg.robot, count=cfg.observations, seed=cfg.seed, task_prompt=cfg.task_prompt, tokenizer=tokenizer
        )
        if max(cfg.heads) > len(model.action_heads):
            raise ValueError(f"--heads: {cfg.model} has {len(model.action_heads)} action head(s), {max(cfg.heads)} asked")
        meter, why_no_energy = open_meter(device)
        self.model, self.obs, self.meter = model, obs, meter
        self.results = {
            "config": {
                **cfg.to_json(),
                "model_params": sum(p.numel() for p in model.parameters()),
                "model_dims": model.config.to_json(),
                "action_heads": list(model.action_heads),
                "cameras": len(obs.robot.cameras),
                "horizon": obs.horizon,
                "prefix_tokens": int(np.median(obs.prefix_lengths)),
                "dtype": str(model.dtype).replace("torch.", ""),
                "kernel_path": path,
                "allocator_tuned": allocator,
                "env": {k: os.environ[k] for k in ENV_KEYS if k in os.environ},
                "cuda_graphs": graphs,
                "energy": meter.method if meter else why_no_energy,
                "machine": machine(),
                "torch": torch.__version__,
                "started": dt.datetime.now().isoformat(timespec="seconds"),
                "load_before": _load(),
            },
            "points": [],
        }
        groups = plan_groups(cfg)
        plan = [(g, [self._point_plan(p) for p in g]) for g in groups]
        total = sum(w + cfg.frames for _, pp in plan for _, w, _ in pp) + cfg.soak_frames
        if cfg.calibrate:
            batches = sorted({1, 2, 4, 6, 8, 16, 30} | {b for b in (32,) if b <= max(cfg.N)})
            self.results["decode_scaling"] = calibrate.decode_scaling(model, obs, batches, restore=path)
        max_len = max(Arrivals.parse(w).max_length(max(cfg.N)) for w in cfg.workloads)
        engines = Engines(
            model, threads=cfg.threads, cuda_graphs=cfg.cuda_graphs, parallel_capacity=obs.capacity(max_len), horizon=obs.horizon
        )
        try:
            with tqdm(total=total, desc="bench", unit="frame", dynamic_ncols=True) as bar:
                for group, pplan in plan:
                    label = f"{group[0].workload} N={group[0].N} S={group[0].S}" + (f" E={group[0].E}" if group[0].E != 1 else "")
                    bar.set_postfix_str(label)
                    runs = []
                    for point, warm, slots in pplan:
                        arr = Arrivals.parse(point.workload)
                        engine, held = engines.make(point, slots, obs.capacity(arr.max_length(point.N)))
                        runs.append(PointRun(point, engine, held, obs, arr, warmup=warm, frames=cfg.frames, seed=cfg.seed, meter=meter))
                    run_interleaved(runs, cfg.chunk, bar)
                    self.runs += [(label, r.point, r.records, r.held_bytes, r.error) for r in runs]
                    del runs
                    self._write(start)
                if cfg.soak_frames:
                    bar.set_postfix_str("soak")
                    self._soak(engines, bar)
        finally:
            engines.close()
            if meter:
                meter.close()
        self.results["config"]["load_after"] = _load()
        self._write(start, final=True)
        return self.results

    def _point_plan(self, point: Point) -> tuple[Point, int, int]:
        arr = Arrivals.parse(point.workload)
        warm = warmup_frames(self.cfg, point, arr)
        return point, warm, num_slots(point, arr, warm, self.cfg.frames, self.cfg.seed)

    def _soak(self, engines: Engines, bar) -> None:
        cfg = self.cfg
        point = Point("oxygen", 90, cfg.soak_k, cfg.S[0], "soak")
        arr = Arrivals.parse("soak")
        engine, held = engines.make(point, cfg.soak_slots, self.obs.capacity(arr.max_length(0)))
        warm = min(soak.CYCLE, cfg.soak_frames // 10)
        run = PointRun(point, engine, held, self.obs, arr, warmup=warm, frames=cfg.soak_frames - warm, seed=cfg.seed,
                       track_memory=True)
        run_interleaved([run], 50, bar)
        self.results["soak"] = {
            "summary": soak.summarize(run.records, k=cfg.soak_k, slots=cfg.soak_slots, total_queued=engine.total_queued),
            "series": soak.series(run.records),
            "error": run.error,
        }

    # ------------------------------------------------------------------ outputs
    def _write(self, start: float, final: bool = False) -> None:
        cfg = self.cfg
        pooled = ideal.estimate([(p, recs) for _, p, recs, _, _ in self.runs])
        labels = list(dict.fromkeys(g for g, *_ in self.runs))
        by_group = {g: ideal.estimate([(p, recs) for gg, p, recs, _, _ in self.runs if gg == g], pooled) for g in labels}
        points = [
            {**metrics.point_metrics(p, recs, horizon=self.obs.horizon, held_bytes=held, costs=by_group[g], error=err), "group": g}
            for g, p, recs, held, err in self.runs
        ]
        metrics.add_speedups(points)
        self.results["points"] = points
        self.results["stage_costs"] = pooled.to_json()
        self.results["stage_costs_by_group"] = {g: c.to_json() for g, c in by_group.items()}
        main = by_group.get(f"fixed N=30 S={cfg.S[0]}", pooled)
        device_type = torch.device(cfg.device).type
        self.results["targets"] = [t.to_json() for t in targets.evaluate(points, main, S=cfg.S[0], device_type=device_type)]
        self.results["config"]["wall_s"] = time.perf_counter() - start
        if final and cfg.plots:
            self.results["plots"] = plots.draw_all(self.results, self.out / "plots")
        with open(self.out / "results.json", "w") as f:
            json.dump(_clean(self.results), f, indent=1)
        (self.out / "results.md").write_text(bench_report.markdown(_clean(self.results)))
        if final:
            with open(self.out / "frames.jsonl", "w") as f:
                for _, p, recs, _, _ in self.runs:
                    for r in recs:
                        f.write(json.dumps(_clean({"point": p.key, **r.to_json()})) + "\n")


def run_bench(cfg: BenchConfig) -> dict:
    return Bench(cfg).run()


def render(out: Path) -> int:
    """Redraw plots/ and results.md from an existing results.json (after a change to the figures or the table)."""
    path = Path(out) / "results.json"
    if not path.is_file():
        print(f"oxygen-gym bench --render: no results.json in {out}", flush=True)
        return 2
    results = json.loads(path.read_text())
    results["plots"] = plots.draw_all(results, Path(out) / "plots")
    path.write_text(json.dumps(_clean(results), indent=1))
    (Path(out) / "results.md").write_text(bench_report.markdown(results))
    print((Path(out) / "results.md").read_text())
    return 0
