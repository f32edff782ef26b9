"""Which training rows a batch draws: uniformly over every row, or with `--data-mix` a set share of each batch from
each collection of `--data`. DAgger rounds add rollouts of states off the expert's path; drawn uniformly, the
expert's own demonstrations shrink to a minority with each round and the grasp they teach is lost (issue 22's
rounds 3 and 4, experiments/libero-spatial-log.md). A mix keeps their share fixed however much is aggregated."""
from __future__ import annotations

from collections.abc import Sequence

import torch


def parse_mix(text: str) -> tuple[float, ...]:
    """`--data-mix 2,1` -> (2.0, 1.0): one non-negative weight per collection, normalised to shares when drawing."""
    try:
        mix = tuple(float(w) for w in text.split(","))
    except ValueError:
        raise ValueError(f"--data-mix: expected comma-separated numbers (one per --data collection), got {text!r}") from None
    check_mix(mix)
    return mix


def check_mix(mix: Sequence[float]) -> None:
    if any(not w >= 0 for w in mix) or (mix and sum(mix) <= 0):
        raise ValueError(f"--data-mix: weights must be >= 0 with a positive sum, got {list(mix)}")


class RowSampler:
    """Draws the row indices of each batch. `collection_rows[i]`: how many training rows collection i has, in the
    order the rows are stored (collection by collection)."""

    def __init__(self, collection_rows: Sequence[int], mix: Sequence[float] = ()) -> None:
        self.rows = int(sum(collection_rows))
        self.weights: torch.Tensor | None = None
        if not mix:
            return
        check_mix(mix)
        if len(mix) != len(collection_rows):
            raise ValueError(f"--data-mix has {len(mix)} weights but --data names {len(collection_rows)} collections")
        empty = [i for i, (w, n) in enumerate(zip(mix, collection_rows)) if w > 0 and n == 0]
        if empty:
            raise ValueError(f"--data-mix: collection(s) {empty} have a weight but no training rows "
                             "(all their scenes are in --val-scenes?)")
        share = torch.tensor([float(w) for w in mix], dtype=torch.float64)
        share /= share.sum()
        self.weights = torch.cat([torch.full((n,), float(s) / n if n else 0.0, dtype=torch.float64)
                                  for s, n in zip(share, collection_rows)])

    def draw(self, batch_size: int, generator: torch.Generator) -> torch.Tensor:
        if self.weights is None:  # uniform: the draw every run before --data-mix made (resumes stay identical)
            return torch.randint(0, self.rows, (batch_size,), generator=generator)
        return torch.multinomial(self.weights, batch_size, replacement=True, generator=generator)
