"""Injected clocks: the loop never reads the time itself.

* :class:`WallClock`: seconds of the Unix epoch; a cycle waits for the wall clock.
* :class:`VirtualClock`: seconds of a simulated run; every cycle advances it by the period
  without waiting (a trace of days replays in seconds). Its time is part of the daemon's state
  (the store persists it with each cycle), so a restarted daemon continues where the last
  committed cycle left off.
* :class:`ManualClock`: a test sets or advances it.

``wait_until(t, stop)`` returns early (False) when ``stop`` is set: SIGTERM never waits out a
period.
"""

from __future__ import annotations

import threading
import time
from typing import Protocol


class Clock(Protocol):
    kind: str

    def now(self) -> float: ...

    def wait_until(self, t: float, stop: threading.Event) -> bool: ...

    def advance_to(self, t: float) -> None: ...


class WallClock:
    kind = "wall"

    def now(self) -> float:
        return time.time()

    def wait_until(self, t: float, stop: threading.Event) -> bool:
        delay = t - time.time()
        if delay > 0:
            return not stop.wait(delay)
        return not stop.is_set()

    def advance_to(self, t: float) -> None:  # the wall clock advances itself
        pass


class VirtualClock:
    """Simulated seconds; ``wall_s_per_cycle`` optionally paces the replay for people watching."""

    kind = "virtual"

    def __init__(self, start_s: float = 0.0, wall_s_per_cycle: float = 0.0) -> None:
        self._t = float(start_s)
        self.wall_s_per_cycle = wall_s_per_cycle

    def now(self) -> float:
        return self._t

    def wait_until(self, t: float, stop: threading.Event) -> bool:
        if self.wall_s_per_cycle > 0 and stop.wait(self.wall_s_per_cycle):
            return False
        if stop.is_set():
            return False
        self._t = max(self._t, float(t))
        return True

    def advance_to(self, t: float) -> None:
        self._t = max(self._t, float(t))


class ManualClock(VirtualClock):
    kind = "manual"

    def set(self, t: float) -> None:
        self._t = float(t)
