"""Telemetry ingest with group commit: many concurrent posts, one SQLite transaction per batch.

The HTTP handler validates a snapshot (pydantic, in the event loop: tens of microseconds), hands
it to the writer thread and awaits the outcome; the writer takes whatever is queued (up to
``max_batch``), checks every snapshot's job state and inserts the accepted ones in **one**
transaction, then resolves each waiting request: 202 only once its row is committed, 404/409 with
the reason otherwise. So a burst of posts costs one commit rather than one each, the event loop
never blocks on the database (the loop's cycle may hold the write lock for a while), and nothing
is acknowledged that is not stored.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from typing import Any

from planner.daemon.groupcommit import GroupCommit
from planner.daemon.lifecycle import JobState
from planner.daemon.store import Conflict, NotFound, Store

log = logging.getLogger("planner.daemon.ingest")

ACCEPTING = (JobState.ADMITTED.value, JobState.RUNNING.value)


@dataclass
class _Item:
    job: str
    time_s: float
    iteration: int
    body: str


class TelemetryIngest:
    def __init__(self, store: Store, metrics: Any = None, max_batch: int = 1024) -> None:
        self.store, self.metrics = store, metrics
        self.batches = 0
        self._writer: GroupCommit[_Item] = GroupCommit("telemetry", self._write, log, max_batch)

    async def submit(self, snap) -> int:
        """Store one validated ``TelemetrySnapshot``; its row id once committed (raises NotFound / Conflict)."""
        return await self._writer.submit(_Item(snap.job, snap.time_s, snap.iteration, snap.model_dump_json()))

    def close(self) -> None:
        self._writer.close()

    def _write(self, batch: list[_Item]) -> list[Any]:
        wall = time.time()
        names = sorted({i.job for i in batch})
        out: list[Any] = []
        with self.store.tx() as c:
            states = {r["name"]: r["state"] for r in c.execute(
                f"SELECT name, state FROM jobs WHERE name IN ({','.join('?' * len(names))})", names)}
            for i in batch:
                st = states.get(i.job)
                if st is None:
                    out.append(NotFound(f"no job named '{i.job}'", "job", "post telemetry only for jobs submitted to this daemon"))
                    self._count_rejected("unknown-job")
                elif st not in ACCEPTING:
                    out.append(Conflict(f"job '{i.job}' is {st}; telemetry is accepted only for admitted or running jobs", "job"))
                    self._count_rejected("not-placed")
                else:
                    cur = c.execute("INSERT INTO telemetry(job, received_wall, time_s, iteration, body) VALUES (?,?,?,?,?)",
                                    (i.job, wall, i.time_s, i.iteration, i.body))
                    assert cur.lastrowid is not None  # an INSERT's row id
                    out.append(cur.lastrowid)
        self.batches += 1
        if self.metrics is not None:
            n = sum(1 for o in out if isinstance(o, int))
            if n:
                self.metrics.telemetry.inc(n)
        return out

    def _count_rejected(self, reason: str) -> None:
        if self.metrics is not None:
            self.metrics.telemetry_rejected.labels(reason).inc()

