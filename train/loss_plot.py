"""The loss curve of a training run (log.jsonl -> PNG)."""
from __future__ import annotations

import json
from pathlib import Path


def plot_losses(log: Path, png: Path) -> None:
    if not Path(log).is_file():
        return
    recs = [json.loads(line) for line in Path(log).read_text().splitlines() if line.strip()]
    if not recs:
        return
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4))
    steps = [r["step"] for r in recs]
    ax.plot(steps, [r["action"] for r in recs], label="action (flow matching MSE)")
    ax.plot(steps, [r["language"] for r in recs], label="language (token cross-entropy)")
    ax.set_yscale("log")
    ax.set_xlabel("step")
    ax.set_ylabel("loss")
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(png, dpi=100)
    plt.close(fig)
