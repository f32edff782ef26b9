"""What a training run records at each checkpoint beyond the loss: open-loop action error on a fixed set of
training rows and on the held-out validation scenes (open_loop.py), one JSON line per checkpoint in monitor.jsonl,
and a snapshot of the exported model, so a checkpoint can be chosen afterwards on the validation scenes (open loop
here, closed loop with `oxygen-gym eval libero --checkpoint RUN/snapshots/step_N --fresh-scenes ...`)."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

from tqdm import tqdm

from .dataset import DemoDataset
from .open_loop import fixed_rows, open_loop_metrics

MONITOR_FILE = "monitor.jsonl"
SNAPSHOT_DIR = "snapshots"


class CheckpointMonitor:
    def __init__(self, out: Path, dataset: DemoDataset, val_demos: list, model_config, tokenizer, cfg,
                 progress: bool = True) -> None:
        self.out, self.dataset, self.cfg, self.progress = out, dataset, cfg, progress
        self.val = (DemoDataset(val_demos, model_config, tokenizer, cfg.narrate_prompt, dataset.norm_stats,
                                progress=progress, cut_chunks=cfg.cut_chunks) if val_demos else None)
        self.train_rows = fixed_rows(len(dataset), cfg.monitor_rows)
        self.val_rows = fixed_rows(len(self.val), cfg.monitor_rows) if self.val is not None else None
        self.val_demos = len(val_demos)

    def describe(self) -> dict:
        """training.json's `validation`: the held-out scenes and how much of them is scored."""
        return {"scenes": list(self.cfg.val_scenes), "demos": self.val_demos,
                "steps": 0 if self.val is None else len(self.val), "monitor_rows": self.cfg.monitor_rows}

    def _logged_steps(self) -> set[int]:
        path = self.out / MONITOR_FILE
        if not path.is_file():
            return set()
        steps = set()
        for line in path.read_text().splitlines():
            try:
                steps.add(int(json.loads(line)["step"]))
            except (json.JSONDecodeError, KeyError):
                continue  # a line torn by a killed run is scored again
        return steps

    def record(self, weights, step: int, exported: Path) -> dict | None:
        """Score `weights` (the exported ones) and keep a snapshot; a step already recorded is left as it is."""
        if step in self._logged_steps():
            return None
        rec: dict = {"step": step, "train": open_loop_metrics(weights, self.dataset, self.train_rows)}
        if self.val is not None:
            rec["val"] = open_loop_metrics(weights, self.val, self.val_rows)
        if self.cfg.snapshots:
            target = self.out / SNAPSHOT_DIR / f"step_{step}"
            shutil.rmtree(target, ignore_errors=True)
            shutil.copytree(exported, target)
        with open(self.out / MONITOR_FILE, "a") as f:
            f.write(json.dumps(rec) + "\n")
        if self.progress:
            val = rec.get("val", {})
            tqdm.write(f"step {step}: open-loop mse (first 5) train {rec['train']['mse_exec']:.4f}"
                       + (f" val {val['mse_exec']:.4f}, gripper agree val {val['gripper_agree']:.3f}" if val else ""))
        return rec


def best_step(out: Path, split: str = "val", metric: str = "mse_exec") -> int | None:
    """The recorded step with the lowest `metric` on `split` (None when nothing is recorded)."""
    path = Path(out) / MONITOR_FILE
    if not path.is_file():
        return None
    recs = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    recs = [r for r in recs if split in r]
    return min(recs, key=lambda r: r[split][metric])["step"] if recs else None
