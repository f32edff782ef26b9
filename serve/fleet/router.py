"""Where a new robot goes: the replica with the most free robot seats, then the most free KV slots.

Ray Serve's HTTP proxy sends every request, websocket handshakes included, through the deployment's request router
(`RequestRouterConfig(request_router_class=...)`); a websocket is one request for its whole life, so the replica
chosen at the handshake is the replica the robot stays on (its session, KV slots and language requests live there).
`SeatRouter.choose_replicas` ranks the replicas; Serve then takes the first rank whose replica is under
`max_ongoing_requests`.

Each replica's `record_routing_stats` (called by Serve's controller every `request_routing_stats_period_s`) reports
its robots, its seats (--max-robots), its free KV slots and when it measured them. A report is up to a period old,
so the router also counts the connections it placed itself since then (and Serve's queue-length count where it keeps
one): robots that connected a moment ago count at once, and a burst of connections spreads instead of piling onto
the replica that looked emptiest at the last report. Short HTTP requests (/healthz, /stats) count too until the next
report: it errs toward spreading.
"""
from __future__ import annotations

import time
from collections import defaultdict, deque
from dataclasses import dataclass

from ray.serve.request_router import PendingRequest, RequestRouter, RunningReplica


@dataclass(frozen=True)
class ReplicaLoad:
    """What the ranking knows of one replica."""

    replica: str
    robots: int  # the larger of the replica's last report and the router's live count
    max_robots: int
    free_kv_slots: int

    @property
    def free_seats(self) -> int:
        return self.max_robots - self.robots


def rank(loads: list[ReplicaLoad]) -> list[ReplicaLoad]:
    """Most free seats first; ties: most free KV slots, then fewest robots, then the replica id (a stable order)."""
    return sorted(loads, key=lambda x: (-x.free_seats, -x.free_kv_slots, x.robots, x.replica))


def load_of(replica_id: str, routing_stats: dict | None, in_flight: int | None, placed_since: int = 0,
            max_robots: int = 1) -> ReplicaLoad:
    """A replica's load: its last report (possibly none yet) plus the connections placed there since, or Serve's
    live count of its requests when that is higher. `max_robots`: the seats to assume before a first report."""
    stats = routing_stats or {}
    robots = max(int(stats.get("robots", 0)) + placed_since, int(in_flight or 0))
    return ReplicaLoad(replica_id, robots, int(stats.get("max_robots", max_robots)), int(stats.get("free_kv_slots", 0)))


REPORT_GRACE_S = 0.5  # a placement this long before a report may not show in it yet (the handshake takes time)
FORGET_S = 60.0


class SeatRouter(RequestRouter):
    """Ray Serve request router of the fleet: one rank per replica, in `rank` order."""

    def initialize_state(self, max_robots: int = 1, **kwargs) -> None:
        """`RequestRouterConfig.request_router_kwargs`: the replicas' --max-robots (seats before a first report)."""
        self.max_robots = max_robots
        self._placed: dict[str, deque[float]] = defaultdict(deque)  # replica -> when this router placed requests

    def _placed_since(self, replica: str, since: float, now: float) -> int:
        times = self._placed[replica]
        while times and times[0] < now - FORGET_S:
            times.popleft()
        return sum(t >= since for t in times)

    async def choose_replicas(
        self, candidate_replicas: list[RunningReplica], pending_request: PendingRequest | None = None,
    ) -> list[list[RunningReplica]]:
        if not hasattr(self, "_placed"):  # Serve calls initialize_state only when kwargs are configured
            self.initialize_state()
        now = time.time()
        by_id = {r.replica_id.unique_id: r for r in candidate_replicas}
        loads = []
        for rid, r in by_id.items():
            stats = r.routing_stats or {}
            since = float(stats.get("at", 0.0)) - REPORT_GRACE_S
            loads.append(load_of(rid, stats, self.replica_queue_len_cache.get(r.replica_id),
                                 self._placed_since(rid, since, now), self.max_robots))
        ranked = rank(loads)
        if ranked:
            self._placed[ranked[0].replica].append(now)  # the first rank takes it unless its queue is full
        return [[by_id[x.replica]] for x in ranked]
