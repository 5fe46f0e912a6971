"""Group commit: many concurrent requests, one database transaction per batch.

A request's coroutine hands its item to :meth:`GroupCommit.submit` and awaits the outcome; one
writer thread takes whatever is queued (up to ``max_batch`` items), calls ``write(batch)`` once
(one transaction) and resolves every waiting request in its own event loop with its outcome: the
value ``write`` returned for it, or the exception it returned for it (raised in the request), or,
when ``write`` raised, that exception for the whole batch. So a burst costs one commit rather
than one each, the event loop never blocks on the database, and nothing is answered before it is
stored. Used by the telemetry ingest (:mod:`planner.daemon.ingest`) and the audit log
(:mod:`planner.daemon.audit`).
"""

from __future__ import annotations

import asyncio
import logging
import queue
import threading
from typing import Any, Callable, Generic, Optional, TypeVar

T = TypeVar("T")


class GroupCommit(Generic[T]):
    """``write(batch)`` returns one outcome per item, in order (an exception instance: that item fails)."""

    def __init__(self, name: str, write: Callable[[list[T]], list[Any]], log: logging.Logger, max_batch: int = 1024) -> None:
        self.name, self.write, self.log, self.max_batch = name, write, log, max_batch
        self._q: "queue.SimpleQueue[Optional[tuple[T, asyncio.AbstractEventLoop, asyncio.Future]]]" = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._run, name=f"{name}-writer", daemon=True)
        self._thread.start()

    async def submit(self, item: T) -> Any:
        """The item's outcome once its batch is committed (raises the exception ``write`` gave it)."""
        loop = asyncio.get_running_loop()
        fut = loop.create_future()
        self._q.put((item, loop, fut))
        return await fut

    def close(self) -> None:
        """Write what is queued, then stop the writer (waits at most 10 s)."""
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
            try:
                outcomes = self.write([item for item, _, _ in batch])
            except Exception as exc:  # noqa: BLE001 - every waiting request must get an answer
                from planner.daemon.sqlitedb import is_locked

                if is_locked(exc):  # (another process holds the state file: the requests are answered 503)
                    self.log.warning("%s batch of %d not written: %s", self.name, len(batch), exc)
                else:
                    self.log.exception("%s batch of %d failed", self.name, len(batch))
                outcomes = [exc] * len(batch)
            for (_, loop, fut), out in zip(batch, outcomes):
                loop.call_soon_threadsafe(_resolve, fut, out)


def _resolve(fut: asyncio.Future, out: Any) -> None:
    if fut.done():
        return
    if isinstance(out, BaseException):
        fut.set_exception(out)
    else:
        fut.set_result(out)
