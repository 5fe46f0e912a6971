"""One SQLite file shared by threads: a connection per thread, write transactions, DDL.

WAL journal and ``synchronous=NORMAL`` (a committed transaction survives the process being
killed; only an OS crash can lose the last ones, never corrupt the file), a busy timeout so
writers wait for each other instead of failing, ``BEGIN IMMEDIATE`` so a transaction takes the
write lock up front (no read-to-write upgrade deadlocks).

The busy timeout is :data:`BUSY_TIMEOUT_S` (``$RL_PLANNER_SQLITE_BUSY_S``, 0.1-3600, replaces it: the
tests of a locked state file use a second). Past it a statement fails with "database is locked"
(:func:`is_locked`): another process held the file's write lock all that time (an ``sqlite3`` shell
in a transaction, a backup tool); the daemon answers such requests 503 and retries its own writes.
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
import threading
from pathlib import Path
from typing import Iterator

from estimators.host import create_private

BUSY_TIMEOUT_S = 30.0


def busy_timeout_s() -> float:
    """:data:`BUSY_TIMEOUT_S`, or ``$RL_PLANNER_SQLITE_BUSY_S`` when it is a number in [0.1, 3600] (any other value is ignored)."""
    try:
        v = float(os.environ.get("RL_PLANNER_SQLITE_BUSY_S", ""))
    except ValueError:
        return BUSY_TIMEOUT_S
    return v if 0.1 <= v <= 3600.0 else BUSY_TIMEOUT_S


def is_locked(exc: BaseException) -> bool:
    """Is ``exc`` SQLite's "database is locked" (busy): another connection held the lock past the busy timeout?"""
    if not isinstance(exc, sqlite3.OperationalError):
        return False
    code = getattr(exc, "sqlite_errorcode", None)  # Python 3.11+
    if code is not None:
        return code & 0xFF in (5, 6)  # SQLITE_BUSY, SQLITE_LOCKED
    return "locked" in str(exc)


def is_unwritable(exc: BaseException) -> bool:
    """Is ``exc`` SQLite's refusal to write or open the file or its -wal/-shm (permissions, read-only file system)?"""
    if not isinstance(exc, sqlite3.OperationalError):
        return False
    code = getattr(exc, "sqlite_errorcode", None)
    if code is not None:
        return code & 0xFF in (8, 14)  # SQLITE_READONLY, SQLITE_CANTOPEN
    return "readonly" in str(exc) or "unable to open" in str(exc)


class SQLiteFile:
    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self._local = threading.local()
        self._all: list[sqlite3.Connection] = []
        self._lock = threading.Lock()

    def conn(self) -> sqlite3.Connection:
        c = getattr(self._local, "conn", None)
        if c is None:
            create_private(self.path)  # the state (and the WAL and shm files SQLite makes with its mode) stays private
            busy = busy_timeout_s()
            c = sqlite3.connect(self.path, timeout=busy, isolation_level=None, check_same_thread=False)
            c.row_factory = sqlite3.Row
            c.execute("PRAGMA journal_mode=WAL")
            c.execute("PRAGMA synchronous=NORMAL")
            c.execute(f"PRAGMA busy_timeout={int(busy * 1000)}")
            self._local.conn = c
            with self._lock:
                self._all.append(c)
        return c

    def set_busy_timeout(self, seconds: float) -> None:
        """The busy timeout of this thread's connection (the heartbeat waits less than a lease's life)."""
        self.conn().execute(f"PRAGMA busy_timeout={max(1, int(seconds * 1000))}")

    @contextlib.contextmanager
    def tx(self) -> Iterator[sqlite3.Connection]:
        """One write transaction, committed on success and rolled back on any exception."""
        c = self.conn()
        c.execute("BEGIN IMMEDIATE")
        try:
            yield c
        except BaseException:
            c.execute("ROLLBACK")
            raise
        else:
            c.execute("COMMIT")

    def run_ddl(self, c: sqlite3.Connection, ddl: str) -> None:
        """Statement by statement inside the caller's transaction (``executescript`` would commit on its own)."""
        for stmt in ddl.split(";"):
            if stmt.strip():
                c.execute(stmt)

    def close(self) -> None:
        with self._lock:
            for c in self._all:
                with contextlib.suppress(Exception):
                    c.close()
            self._all.clear()
        self._local = threading.local()
