"""Measured phase times from a job's telemetry stream (for backends that do not report them).

A snapshot's ``time_s`` counts from the start of the job's current ``iteration``. Per iteration
the timer remembers the first ``time_s`` at which every generation component (rollout, tool
agent) reported ``progress == 1`` -- the end of the rollout phase -- and the last ``time_s`` seen.
When the job reports a later iteration the previous one is complete: its rollout time is the
first, its training (log-probs, update, weight sync) the rest. The figures are as fine as the
snapshot interval; an iteration whose rollout end was never seen yields no sample.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from planner.daemon.ports import IterationSample

GENERATION = ("rollout", "tool_agent")


@dataclass
class _Track:
    iteration: int
    rollout_end: Optional[float] = None
    last_time: float = 0.0


class PhaseTimer:
    def __init__(self, state: dict | None = None) -> None:
        self.tracks: dict[str, _Track] = {}
        for job, d in (state or {}).items():
            self.tracks[job] = _Track(int(d["iteration"]), d.get("rollout_end"), float(d.get("last_time", 0.0)))

    def feed(self, snapshot) -> Optional[IterationSample]:
        """One validated ``TelemetrySnapshot``; the sample of the iteration it completes, if any."""
        job, it, t = snapshot.job, snapshot.iteration, snapshot.time_s
        tr = self.tracks.get(job)
        out = None
        if tr is None or it < tr.iteration:
            tr = self.tracks[job] = _Track(it)
        elif it > tr.iteration:
            if tr.rollout_end is not None and tr.last_time > tr.rollout_end:
                out = IterationSample(job, tr.iteration, tr.rollout_end, tr.last_time - tr.rollout_end, tr.last_time)
            tr = self.tracks[job] = _Track(it)
        gen = [c for c in snapshot.components if c.kind in GENERATION]
        if gen and tr.rollout_end is None and all(c.progress >= 1.0 for c in gen):
            tr.rollout_end = t
        tr.last_time = max(tr.last_time, t)
        return out

    def forget(self, job: str) -> None:
        self.tracks.pop(job, None)

    def state(self) -> dict:
        return {j: {"iteration": t.iteration, "rollout_end": t.rollout_end, "last_time": t.last_time} for j, t in self.tracks.items()}
