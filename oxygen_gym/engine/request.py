"""One language request's state, and the table of live requests with the paper's interface:
persist (admit into a slot), fetch (the contiguous decode batch), update (append sampled tokens), evict."""
from __future__ import annotations

from dataclasses import dataclass, field

import torch

from .slots import SlotPool


@dataclass
class Request:
    """A language request: the frame's prefix, then `prompt_ids` (the task prompt), then generated tokens.

    The cache holds everything except `pending`, the token the next decode step feeds (the prompt's last token
    before the first step, then the latest sampled one). `length` is where the next token's K/V goes (its cache
    index); `position` is what RoPE sees for it. Both advance by one per token, from the prefix's own values
    (`PrefixState.lengths` and `.next_positions`), which differ for M-RoPE backbones.
    """

    request_id: int
    task: str
    frame: int
    prompt_ids: list[int]
    max_new_tokens: int
    eos_id: int
    temperature: float = 0.0
    seed: int = 0  # of this request's sampling generator (temperature > 0)
    session: int = 0  # the robot (server connection) whose frame started it; one policy is session 0
    adapter: int = 0  # the model's LoRA adapter slot for its prompt and generated tokens (0: the base weights)
    slot: int = -1
    prefix_len: int = 0
    length: int = 0  # cache positions written for this request
    position: int = 0  # RoPE position of the next token fed
    pending: int = -1
    generated: list[int] = field(default_factory=list)
    done: bool = False
    finish_reason: str | None = None

    _generator: torch.Generator | None = field(default=None, repr=False, compare=False)

    @property
    def generator(self) -> torch.Generator:
        if self._generator is None:
            self._generator = torch.Generator().manual_seed(self.seed)
        return self._generator

    def __getstate__(self) -> dict:  # generators do not pickle (parallel mode ships requests to workers)
        state = dict(self.__dict__)
        state["_generator"] = None
        return state

    @property
    def remaining(self) -> int:
        return self.max_new_tokens - len(self.generated)

    def append(self, token: int) -> None:
        self.generated.append(token)
        self.length += 1  # the fed token is now in the cache
        self.position += 1
        self.pending = token
        if token == self.eos_id:
            self.done, self.finish_reason = True, "stop"
        elif self.remaining <= 0:
            self.done, self.finish_reason = True, "length"


@dataclass
class DecodeBatch:
    """Inputs of one decode step over slots [0, size): a view of the pool, no copies."""

    requests: list[Request]
    last_tokens: torch.Tensor
    cache_index: torch.Tensor  # where each row's fed token is stored
    positions: torch.Tensor  # its RoPE position
    adapters: torch.Tensor | None = None  # each row's adapter slot; None when every row decodes with the base

    @property
    def size(self) -> int:
        return len(self.requests)


class RequestTable:
    """Live requests indexed by slot. Keeps `requests[i].slot == i` for every active slot."""

    def __init__(self, pool: SlotPool) -> None:
        self.pool = pool
        self.by_slot: list[Request] = []

    def __len__(self) -> int:
        return len(self.by_slot)

    def persist(self, request: Request) -> int:
        """Give `request` the next slot; the caller then writes its KV there. Each robot numbers its own requests from
        0, so a slot's owner is the pair (session, request id)."""
        request.slot = self.pool.allocate((request.session, request.request_id))
        self.by_slot.append(request)
        return request.slot

    def fetch(self, device: torch.device | str, size: int | None = None) -> DecodeBatch:
        """The decode batch of slots [0, size) (default: every active slot)."""
        reqs = self.by_slot if size is None else self.by_slot[:size]
        tokens = torch.tensor([r.pending for r in reqs], dtype=torch.long, device=device)
        index = torch.tensor([r.length for r in reqs], dtype=torch.long, device=device)
        positions = torch.tensor([r.position for r in reqs], dtype=torch.long, device=device)
        adapters = None
        if any(r.adapter for r in reqs):
            adapters = torch.tensor([r.adapter for r in reqs], dtype=torch.long, device=device)
        return DecodeBatch(list(reqs), tokens, index, positions, adapters)

    def update(self, batch: DecodeBatch, tokens: list[int]) -> None:
        for r, t in zip(batch.requests, tokens, strict=True):
            r.append(t)
            self.pool.lengths[r.slot] = r.length

    def move_to_front(self, requests: list[Request]) -> None:
        """Reorder slots so that `requests` hold [0, len(requests)), keeping their relative order: a decode step for
        some robots' requests then reads one contiguous view. Each move swaps two slots' KV (pool.swap)."""
        wanted = {id(r) for r in requests}
        front = 0
        for pos in range(len(self.by_slot)):
            r = self.by_slot[pos]
            if id(r) not in wanted:
                continue
            if pos != front:
                other = self.by_slot[front]
                self.pool.swap(front, pos)
                self.by_slot[front], self.by_slot[pos] = r, other
                r.slot, other.slot = front, pos
            front += 1
        if front != len(requests):
            raise ValueError(f"move_to_front: {len(requests) - front} of the requests are not in the table")

    def evict(self, request: Request) -> None:
        """Free a request's slot; the last active request moves into the hole (its KV with it)."""
        slot = request.slot
        moved = self.pool.free(slot)
        last = self.by_slot.pop()
        if moved is not None:
            self.by_slot[slot] = last
            last.slot = slot
        request.slot = -1

    def evict_finished(self) -> list[Request]:
        finished = [r for r in self.by_slot if r.done]
        for r in finished:
            self.evict(r)
        return finished

    def clear(self) -> None:
        self.by_slot.clear()
        self.pool.reset()
