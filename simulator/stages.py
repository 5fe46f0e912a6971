"""Downstream stages of an iteration: log-prob inference, reward, training; and the GPU ledger.

* :class:`WorkStage` is a data-parallel GPU stage (reference / old-policy log-probs, critic values,
  the policy update). It processes samples first-in first-out at ``gpus x peak FLOP/s x MFU``:
  time scales inversely with its GPUs (data parallelism over micro-batches), which is the
  "static" (linear) throughput curve of DynaRL. Work per sample is FLOPs from
  :mod:`estimators.training`. A change of GPUs takes effect at a given time (the new ranks are
  ready); a pause (process-group rebuild at the switch) stops it meanwhile.
* :class:`RewardStage` runs outside the GPUs (a CPU pool without queueing): math rewards are
  rule-based checks (a fixed ``REWARD_RULE_S`` per sample, an assumption), code/agentic rewards
  run the tests in a sandbox (RollPacker's measured latencies).
* :class:`GpuLedger` records, per component, the GPUs held over time (piecewise constant; the
  owner of the stage writes it, since GPUs are held from a migration's start, before they work)
  and the GPU-seconds busy, for the metrics and the ownership plot.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from typing import Any, Callable, Optional

import numpy as np

from simulator.core import EventLoop, Handle

REWARD_RULE_S = 0.01  # rule-based math answer check per sample (assumption: a regex + sympy compare)


class GpuLedger:
    """GPUs held per component over time, and busy GPU-seconds."""

    def __init__(self) -> None:
        self.changes: dict[str, list[tuple[float, float]]] = {}  # component -> [(t, gpus held from t)]
        self.busy_gpu_s: dict[str, float] = {}

    def hold(self, component: str, t: float, gpus: float) -> None:
        ch = self.changes.setdefault(component, [])
        if ch and abs(ch[-1][0] - t) < 1e-12:
            ch[-1] = (t, float(gpus))
        else:
            ch.append((t, float(gpus)))

    def add_busy(self, component: str, gpu_s: float) -> None:
        self.busy_gpu_s[component] = self.busy_gpu_s.get(component, 0.0) + gpu_s

    def held_at(self, component: str, t: float) -> float:
        g = 0.0
        for tt, gg in self.changes.get(component, []):
            if tt <= t:
                g = gg
            else:
                break
        return g

    def held_gpu_s(self, component: str, t_end: float) -> float:
        ch = self.changes.get(component, [])
        tot = 0.0
        for i, (t, g) in enumerate(ch):
            t1 = ch[i + 1][0] if i + 1 < len(ch) else t_end
            tot += g * max(0.0, min(t1, t_end) - t)
        return tot

    def total_at(self, t: float) -> float:
        return sum(self.held_at(c, t) for c in self.changes)

    def series(self, t_end: float, points: int = 400) -> tuple[np.ndarray, dict[str, np.ndarray]]:
        ts = np.linspace(0.0, t_end, points)
        return ts, {c: np.array([self.held_at(c, t) for t in ts]) for c in self.changes}


@dataclass
class _Item:
    sample: Any
    work: float


class WorkStage:
    """A FIFO data-parallel GPU stage; ``on_done(sample)`` when a sample's work is done."""

    def __init__(self, loop: EventLoop, name: str, kind: str, gpus: int, flops_per_gpu_s: float,
                 on_done: Callable[[Any], None], ledger: GpuLedger, unit_gpus: int = 1) -> None:
        self.loop = loop
        self.name = name
        self.kind = kind
        self.gpus = gpus
        self.unit_gpus = unit_gpus
        self.flops_per_gpu_s = flops_per_gpu_s
        self.on_done = on_done
        self.ledger = ledger
        self.q: deque[_Item] = deque()
        self.t = loop.now
        self.paused_until = loop.now
        self._h: Optional[Handle] = None
        self.done_work = 0.0
        self.pushed_work = 0.0
        self._backlog = 0.0  # work queued, kept up to date (the decision function reads it every second)
        self.completed = 0
        self.busy_s = 0.0

    @property
    def rate(self) -> float:
        return self.gpus * self.flops_per_gpu_s

    def backlog_work(self) -> float:
        return max(0.0, self._backlog) if self.q else 0.0

    def backlog_s(self) -> float:
        return self.backlog_work() / self.rate if self.rate > 0 else float("inf") if self.q else 0.0

    def _sync(self, now: float) -> None:
        t0 = max(self.t, self.paused_until)
        if now > t0 and self.q and self.rate > 0:
            avail = (now - t0) * self.rate
            used_t = 0.0
            while self.q and avail > 1e-9:
                head = self.q[0]
                d = min(head.work, avail)
                head.work -= d
                avail -= d
                self.done_work += d
                self._backlog -= d
                used_t += d / self.rate
                if head.work <= 1e-6 * max(1.0, d):
                    break  # completion is delivered by the event
            self.busy_s += used_t
            self.ledger.add_busy(self.name, used_t * self.gpus)
        self.t = max(self.t, now)

    def _reschedule(self) -> None:
        if self._h is not None:
            self._h.cancel()
            self._h = None
        if not self.q or self.rate <= 0:
            return
        start = max(self.loop.now, self.paused_until)
        self._h = self.loop.at(start + self.q[0].work / self.rate, self._on_event)

    def _on_event(self) -> None:
        self._h = None
        now = self.loop.now
        self._sync(now)
        while self.q and self.q[0].work <= 1e-6 * max(1.0, self.rate):
            item = self.q.popleft()
            self._backlog -= item.work
            self.completed += 1
            self.on_done(item.sample)
        self._reschedule()

    def push(self, sample: Any, work: float) -> None:
        now = self.loop.now
        self._sync(now)
        self.q.append(_Item(sample, max(0.0, work)))
        self.pushed_work += work
        self._backlog += max(0.0, work)
        if len(self.q) == 1:
            self._reschedule()

    def set_gpus(self, gpus: int, pause_s: float = 0.0) -> None:
        """Change the stage's GPUs now (after a pause of ``pause_s`` with no progress)."""
        now = self.loop.now
        self._sync(now)
        self.gpus = gpus
        self.paused_until = max(self.paused_until, now + pause_s)
        self._reschedule()

    def finish_accounting(self, now: float) -> None:
        self._sync(now)


class RewardStage:
    """Per-sample reward latency on a CPU pool (no GPUs, no queueing)."""

    def __init__(self, loop: EventLoop, on_done: Callable[[Any], None], latency: Callable[[], float]) -> None:
        self.loop = loop
        self.on_done = on_done
        self.latency = latency
        self.in_flight = 0
        self.completed = 0

    def push(self, sample: Any) -> None:
        self.in_flight += 1
        self.loop.after(self.latency(), self._done, sample)

    def _done(self, sample: Any) -> None:
        self.in_flight -= 1
        self.completed += 1
        self.on_done(sample)
