"""Telemetry ingest with group commit: many concurrent posts, one SQLite transaction per batch.

The HTTP handler validates a snapshot (pydantic, in the event loop: tens of microseconds), hands
it to the writer thread and awaits the outcome; the writer takes whatever is queued (up to
``max_batch``), checks every snapshot's job state and inserts the accepted ones in **one**
transaction, then resolves each waiting request: 202 only once its row is committed, 404/409 with
the reason otherwise. So a burst of posts costs one commit rather than one each, the event loop
never blocks on the database (the loop's cycle may hold the write lock for a while), and nothing
is acknowledged that is not stored.

A job's snapshots go forward in time: ``(iteration, time_s)`` (``time_s`` counts from the start of the
iteration) never goes back before the newest one accepted for that job (``jobs.telemetry_iteration``,
``jobs.telemetry_time_s``, updated in the same transaction). An older one (a delayed or replayed
post, a poster whose clock restarted) is refused with 409 naming the job, both instants and the
fix: before, it was stored and answered 202, and the loop's phase timer and donor detector then
started the older iteration over (a bogus iteration sample for the drift estimate) or skipped it
with a warning in the log. A snapshot of the same instant again (a retried post) is accepted.
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
            rows = c.execute(f"SELECT name, state, telemetry_iteration, telemetry_time_s FROM jobs "
                             f"WHERE name IN ({','.join('?' * len(names))})", names).fetchall()
            states = {r["name"]: r["state"] for r in rows}
            newest = {r["name"]: (r["telemetry_iteration"], r["telemetry_time_s"]) for r in rows if r["telemetry_iteration"] is not None}
            moved: set[str] = set()
            for i in batch:
                st = states.get(i.job)
                last = newest.get(i.job)
                if st is None:
                    out.append(NotFound(f"no job named '{i.job}'", "job", "post telemetry only for jobs submitted to this daemon"))
                    self._count_rejected("unknown-job")
                elif st not in ACCEPTING:
                    out.append(Conflict(f"job '{i.job}' is {st}; telemetry is accepted only for admitted or running jobs", "job"))
                    self._count_rejected("not-placed")
                elif last is not None and (i.iteration, i.time_s) < last:
                    out.append(_backwards(i, last))
                    self._count_rejected("out-of-order")
                else:
                    cur = c.execute("INSERT INTO telemetry(job, received_wall, time_s, iteration, body) VALUES (?,?,?,?,?)",
                                    (i.job, wall, i.time_s, i.iteration, i.body))
                    assert cur.lastrowid is not None  # an INSERT's row id
                    out.append(cur.lastrowid)
                    newest[i.job] = (i.iteration, i.time_s)
                    moved.add(i.job)
            for job in sorted(moved):
                c.execute("UPDATE jobs SET telemetry_iteration=?, telemetry_time_s=? WHERE name=?", (*newest[job], job))
        self.batches += 1
        if self.metrics is not None:
            n = sum(1 for o in out if isinstance(o, int))
            if n:
                self.metrics.telemetry.inc(n)
        return out

    def _count_rejected(self, reason: str) -> None:
        if self.metrics is not None:
            self.metrics.telemetry_rejected.labels(reason).inc()



def _backwards(item: _Item, last: tuple[int, float]) -> Conflict:
    """The 409 of a snapshot older than the newest one accepted for its job (``last``: iteration, time_s)."""
    it, t = last
    field = "iteration" if item.iteration < it else "time_s"
    return Conflict(f"telemetry of job '{item.job}' goes back in time: iteration {item.iteration} at time_s {item.time_s:g} is before "
                    f"the newest snapshot accepted for it (iteration {it} at time_s {t:g})", field,
                    "post a job's snapshots in time order: the iteration never decreases, and within one iteration time_s "
                    "(seconds since the iteration started) never decreases; a snapshot older than one already posted is not "
                    "needed: drop it")
