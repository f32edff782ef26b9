"""Next-token choice per row: greedy, or temperature sampling from each request's own seeded generator
(so a request's tokens do not depend on which other requests share its batch)."""
from __future__ import annotations

import torch

from .request import Request


def choose_tokens(logits: torch.Tensor, requests: list[Request]) -> list[int]:
    greedy = logits.argmax(-1)
    if all(r.temperature <= 0 for r in requests):
        return greedy.tolist()
    out = greedy.tolist()
    for i, r in enumerate(requests):
        if r.temperature > 0:
            probs = torch.softmax(logits[i].float().cpu() / r.temperature, dim=-1)
            out[i] = int(torch.multinomial(probs, 1, generator=r.generator))
    return out
