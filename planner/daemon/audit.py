"""The audit log: every mutating API call, refused or not, in the state database before it is answered.

One row per call in the ``audit`` table (:mod:`planner.daemon.store`): when, who (the token's
name, or ``-`` when none was valid), from which address, method, path, the job it named, the
status. Written with group commit (one transaction per batch of concurrent calls, like telemetry,
:mod:`planner.daemon.groupcommit`): the HTTP answer is held until its row is committed, so a client
that saw an answer can find the call in the log. Read with ``GET /v1/audit`` (admin scope) or
``sqlite3 STATE 'SELECT * FROM audit'``.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Optional

from planner.daemon.groupcommit import GroupCommit

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
        self.store = store
        self._writer: GroupCommit[AuditEntry] = GroupCommit("audit", self._write, log, max_batch)

    async def record(self, entry: AuditEntry) -> None:
        """Returns once the entry's row is committed."""
        await self._writer.submit(entry)

    def close(self) -> None:
        self._writer.close()

    def _write(self, batch: list[AuditEntry]) -> list[None]:
        self.store.add_audit(batch)
        return [None] * len(batch)
