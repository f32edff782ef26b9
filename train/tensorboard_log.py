"""Training metrics as TensorBoard scalars in the run folder (OUT/tensorboard/), beside log.jsonl and loss.png, so
a run can be watched with `tensorboard --logdir OUT` like any other PyTorch run."""
from __future__ import annotations

import math
from pathlib import Path

TENSORBOARD_DIR = "tensorboard"


class TensorBoardLog:
    """One SummaryWriter per run invocation. A resumed run starts at `step`: TensorBoard drops the events an
    earlier invocation wrote past it (purge_step), so a run killed between checkpoints shows one curve."""

    def __init__(self, out: Path, step: int) -> None:
        try:
            from torch.utils.tensorboard import SummaryWriter
        except ImportError as e:
            raise ValueError(f"training logs to TensorBoard and needs the tensorboard package ({e}); "
                             "pip install 'oxygen-gym[train]'") from None
        self.writer = SummaryWriter(log_dir=str(Path(out) / TENSORBOARD_DIR), purge_step=step or None)

    def scalars(self, step: int, values: dict, prefix: str = "") -> None:
        """Every finite number of `values` (nested dicts flattened to a/b/c tags) at `step`."""
        for key, value in values.items():
            tag = f"{prefix}{key}"
            if isinstance(value, dict):
                self.scalars(step, value, tag + "/")
            elif isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value):
                self.writer.add_scalar(tag, value, step)
        self.writer.flush()

    def close(self) -> None:
        self.writer.close()
