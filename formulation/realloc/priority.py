"""Request priority for multi-turn rollouts: the rollout router's queue policy.

DynaRL orders waiting requests by *(tool calls completed, reusable cached prefix length)*, both
descending: a late turn of a multi-turn request has the most cached context to lose if it waits
until its prefix is evicted, and finishing it frees its whole trajectory. Pure priority can
starve fresh requests, so an *age bound* is added: a request that has waited ``max_wait_s`` or
longer is overdue, and overdue requests are served before all others, oldest first. Hence:

* no request is served while an older overdue request waits (the bound is enforced at every pop);
* so a request waits at most ``max_wait_s`` plus the time to serve the overdue requests that
  arrived before it (with one pop every ``d`` seconds, at most ``max_wait_s + k d`` for ``k``
  older overdue requests).

``FifoQueue`` (arrival order) is the comparison baseline. Both queues are O(log n) per operation
(two heaps with lazy deletion) and deterministic (ties broken by arrival sequence number).
"""

from __future__ import annotations

import heapq
import itertools
from dataclasses import dataclass, field
from typing import Any, Iterator, Optional


@dataclass
class QueuedRequest:
    request_id: str
    enqueued_s: float  # when it (re-)entered the queue: a new turn re-enters after its tool call
    tool_calls_done: int = 0
    cached_prefix_tokens: int = 0
    payload: Any = None
    seq: int = field(default=0, compare=False)


class PriorityQueue:
    """(tool calls done, cached prefix) priority with an age bound; FIFO among overdue requests."""

    def __init__(self, max_wait_s: float = 30.0) -> None:
        if max_wait_s <= 0:
            raise ValueError("max_wait_s must be positive")
        self.max_wait_s = max_wait_s
        self._prio: list = []
        self._fifo: list = []
        self._live: dict[str, QueuedRequest] = {}
        self._seq = itertools.count()

    def __len__(self) -> int:
        return len(self._live)

    def __contains__(self, request_id: str) -> bool:
        return request_id in self._live

    def push(self, req: QueuedRequest) -> None:
        if req.request_id in self._live:
            raise KeyError(f"request {req.request_id!r} is already queued")
        req.seq = next(self._seq)
        self._live[req.request_id] = req
        heapq.heappush(self._prio, (-req.tool_calls_done, -req.cached_prefix_tokens, req.seq, req.request_id))
        heapq.heappush(self._fifo, (req.enqueued_s, req.seq, req.request_id))

    def remove(self, request_id: str) -> Optional[QueuedRequest]:
        """Drop a request (aborted, or moved to another engine); lazy in the heaps."""
        return self._live.pop(request_id, None)

    def _clean(self, heap: list, id_index: int) -> None:
        while heap and (heap[0][id_index] not in self._live or self._live[heap[0][id_index]].seq != heap[0][id_index - 1]):
            heapq.heappop(heap)

    def peek(self, now_s: float) -> Optional[QueuedRequest]:
        self._clean(self._fifo, 2)
        if self._fifo and now_s - self._fifo[0][0] >= self.max_wait_s:
            return self._live[self._fifo[0][2]]
        self._clean(self._prio, 3)
        return self._live[self._prio[0][3]] if self._prio else None

    def pop(self, now_s: float) -> Optional[QueuedRequest]:
        req = self.peek(now_s)
        if req is not None:
            del self._live[req.request_id]
        return req

    def overdue(self, now_s: float) -> int:
        return sum(1 for r in self._live.values() if now_s - r.enqueued_s >= self.max_wait_s)

    def __iter__(self) -> Iterator[QueuedRequest]:
        return iter(list(self._live.values()))


class FifoQueue:
    """Arrival order (the baseline)."""

    def __init__(self) -> None:
        self._heap: list = []
        self._live: dict[str, QueuedRequest] = {}
        self._seq = itertools.count()

    def __len__(self) -> int:
        return len(self._live)

    def __contains__(self, request_id: str) -> bool:
        return request_id in self._live

    def push(self, req: QueuedRequest) -> None:
        if req.request_id in self._live:
            raise KeyError(f"request {req.request_id!r} is already queued")
        req.seq = next(self._seq)
        self._live[req.request_id] = req
        heapq.heappush(self._heap, (req.enqueued_s, req.seq, req.request_id))

    def remove(self, request_id: str) -> Optional[QueuedRequest]:
        return self._live.pop(request_id, None)

    def peek(self, now_s: float) -> Optional[QueuedRequest]:
        while self._heap and (self._heap[0][2] not in self._live or self._live[self._heap[0][2]].seq != self._heap[0][1]):
            heapq.heappop(self._heap)
        return self._live[self._heap[0][2]] if self._heap else None

    def pop(self, now_s: float) -> Optional[QueuedRequest]:
        req = self.peek(now_s)
        if req is not None:
            del self._live[req.request_id]
        return req

    def __iter__(self) -> Iterator[QueuedRequest]:
        return iter(list(self._live.values()))


def make_queue(policy: str, max_wait_s: float = 30.0):
    if policy == "priority":
        return PriorityQueue(max_wait_s)
    if policy == "fifo":
        return FifoQueue()
    raise ValueError(f"unknown queue policy {policy!r}: use 'priority' or 'fifo'")
