"""One SQLite file shared by threads: a connection per thread, write transactions, DDL.

WAL journal and ``synchronous=NORMAL`` (a committed transaction survives the process being
killed; only an OS crash can lose the last ones, never corrupt the file), a busy timeout so
writers wait for each other instead of failing, ``BEGIN IMMEDIATE`` so a transaction takes the
write lock up front (no read-to-write upgrade deadlocks).
"""

from __future__ import annotations

import contextlib
import sqlite3
import threading
from pathlib import Path
from typing import Iterator

from estimators.host import create_private


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
            c = sqlite3.connect(self.path, timeout=30.0, isolation_level=None, check_same_thread=False)
            c.row_factory = sqlite3.Row
            c.execute("PRAGMA journal_mode=WAL")
            c.execute("PRAGMA synchronous=NORMAL")
            c.execute("PRAGMA busy_timeout=30000")
            self._local.conn = c
            with self._lock:
                self._all.append(c)
        return c

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
