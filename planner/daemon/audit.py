"""The audit log: every mutating API call, refused or not, in the state database before it is answered.

One row per call in the ``audit`` table (:mod:`planner.daemon.store`): when, who (the token's
name, or ``-`` when none was valid), from which address, method, path, the job it named, the
status. Written with group commit (one transaction per batch of concurrent calls, like telemetry,
:mod:`planner.daemon.ingest`): the HTTP answer is held until its row is committed, so a client
that saw an answer can find the call in the log. Read with ``GET /v1/audit`` (admin scope) or
``sqlite3 STATE 'SELECT * FROM audit'``.
"""

from __future__ import annotations

import asyncio
import logging
import queue
import threading
from dataclasses import dataclass
from typing import Any, Optional

log = logging.getLogger("planner.daemon.audit")


@dataclass
class AuditEntry:
    at: float
    identity: str
    client: str
    method: str
    path: str
    status: int
    job: Optional[str] = None


class AuditLog:
    def __init__(self, store, max_batch: int = 1024) -> None:
        self.store, self.max_batch = store, max_batch
        self._q: "queue.SimpleQueue[Optional[tuple[AuditEntry, Any, Any]]]" = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._run, name="audit-writer", daemon=True)
        self._thread.start()

    async def record(self, entry: AuditEntry) -> None:
        loop = asyncio.get_running_loop()
        fut = loop.create_future()
        self._q.put((entry, loop, fut))
        await fut

    def close(self) -> None:
        self._q.put(None)
        self._thread.join(timeout=10)

    def _run(self) -> None:
        while True:
            first = self._q.get()
            if first is None:
                return
            batch = [first]
            while len(batch) < self.max_batch:
                try:
                    nxt = self._q.get_nowait()
                except queue.Empty:
                    break
                if nxt is None:
                    self._q.put(None)
                    break
                batch.append(nxt)
            err: Optional[BaseException] = None
            try:
                self.store.add_audit([e for e, _, _ in batch])
            except Exception as exc:  # noqa: BLE001 - every waiting request must get an answer
                log.exception("audit batch of %d failed", len(batch))
                err = exc
            for _, loop, fut in batch:
                loop.call_soon_threadsafe(_resolve, fut, err)


def _resolve(fut: asyncio.Future, err: Optional[BaseException]) -> None:
    if fut.done():
        return
    if err is not None:
        fut.set_exception(err)
    else:
        fut.set_result(None)
