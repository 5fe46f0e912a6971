"""The discrete-event core: a time-ordered event heap, cancellable handles and one seeded RNG.

Time is in seconds (float). Events are ``(time, sequence number, handle)``; the sequence number
breaks ties in scheduling order, so a run is deterministic for a given seed. A handle can be
cancelled (lazy deletion: cancelled events are skipped when popped), which is how an engine
replaces its "next completion" event after its running batch changes.

Nothing here advances time by token ticks: components compute, in closed form, when their next
state change happens and schedule exactly that (see :mod:`simulator.engine`).
"""

from __future__ import annotations

import heapq
import itertools
from contextlib import contextmanager
from typing import Any, Callable, Iterator, Optional

import numpy as np

#: a caller's wall-clock deadline for the runs of this process (:func:`watching`): ``stop()`` is asked
#: every STOP_EVERY events of :meth:`EventLoop.run` (a long rollout simulation runs for seconds), and
#: true raises :class:`PastDeadline`
STOP_EVERY = 2048
_watch: Optional[Callable[[], bool]] = None


class PastDeadline(Exception):
    """A simulation (or an estimate of several) stopped because the caller's deadline passed."""


@contextmanager
def watching(stop: Optional[Callable[[], bool]]) -> Iterator[None]:
    """Runs inside the block stop with :class:`PastDeadline` once ``stop()`` is true (None: never)."""
    global _watch
    before, _watch = _watch, stop
    try:
        yield
    finally:
        _watch = before


class Handle:
    """A scheduled callback; ``cancel()`` makes the loop skip it."""

    __slots__ = ("time", "fn", "args", "cancelled")

    def __init__(self, time: float, fn: Callable, args: tuple) -> None:
        self.time = time
        self.fn = fn
        self.args = args
        self.cancelled = False

    def cancel(self) -> None:
        self.cancelled = True


class EventLoop:
    """Min-heap of timed callbacks with a seeded ``numpy`` generator shared by the model."""

    def __init__(self, seed: int = 0) -> None:
        self.now = 0.0
        self.seed = seed
        self.rng = np.random.default_rng(seed)
        self._heap: list = []
        self._seq = itertools.count()
        self.events_run = 0
        self._stopped = False

    def at(self, time: float, fn: Callable, *args: Any) -> Handle:
        if time < self.now - 1e-9:
            raise ValueError(f"cannot schedule in the past: {time} < now {self.now}")
        h = Handle(max(time, self.now), fn, args)
        heapq.heappush(self._heap, (h.time, next(self._seq), h))
        return h

    def after(self, delay: float, fn: Callable, *args: Any) -> Handle:
        return self.at(self.now + max(0.0, delay), fn, *args)

    def stop(self) -> None:
        """End :meth:`run` after the current event."""
        self._stopped = True

    def run(self, until: Optional[float] = None, max_events: Optional[int] = None) -> float:
        """Run events in time order until none are left, ``until`` is reached, or :meth:`stop`."""
        self._stopped = False
        heap = self._heap
        n = 0
        watch = _watch
        while heap and not self._stopped:
            t, _, h = heap[0]
            if until is not None and t > until:
                self.now = until
                break
            heapq.heappop(heap)
            if h.cancelled:
                continue
            self.now = t
            h.fn(*h.args)
            n += 1
            if watch is not None and n % STOP_EVERY == 0 and watch():
                self.events_run += n
                raise PastDeadline(f"stopped at t={t:.3f}s of the simulation: the caller's deadline passed")
            if max_events is not None and n >= max_events:
                raise RuntimeError(f"event limit {max_events} reached at t={t:.3f}s: the model is not converging")
        self.events_run += n
        return self.now

    def pending(self) -> int:
        return sum(1 for _, _, h in self._heap if not h.cancelled)
