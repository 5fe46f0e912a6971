"""Only one daemon applies: a lease in the state file, with a fencing epoch.

The lease row names its holder (a random id), the holder's pid, host and listen address, when it
was taken and when it expires. A daemon takes it when there is none, when it has expired, or when
its holder is a process on this host that no longer exists (a daemon killed with SIGKILL: a
restart need not wait out the expiry). Taking it increments ``epoch``; renewing and every write a
holder makes after deciding check holder *and* epoch in the same transaction, so a daemon that
was paused past its expiry and lost the lease cannot apply afterwards ("fencing").

Expiry uses the wall clock whatever clock the loop runs on: it is about processes, not about the
simulated cluster.
"""

from __future__ import annotations

import datetime as _dt
import os
import socket
import sqlite3
import time
import uuid
from dataclasses import dataclass
from typing import Optional

from estimators.host import pid_gone
from planner.daemon.store import Store

LEASE_NAME = "applier"


@dataclass(frozen=True)
class Holder:
    holder: str
    pid: int
    host: str
    epoch: int
    acquired_at: float
    renewed_at: float
    expires_at: float
    listen: str

    @classmethod
    def from_row(cls, r: sqlite3.Row) -> "Holder":
        return cls(r["holder"], r["pid"], r["host"], r["epoch"], r["acquired_at"], r["renewed_at"], r["expires_at"], r["listen"])

    def describe(self, now: float | None = None) -> str:
        now = time.time() if now is None else now
        since = _dt.datetime.fromtimestamp(self.acquired_at, _dt.timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")
        at = f", serving {self.listen}" if self.listen else ""
        left = self.expires_at - now
        exp = f"expires in {left:.0f} s unless renewed" if left >= 0 else f"expired {-left:.0f} s ago"
        return f"pid {self.pid} on {self.host}{at}, holding since {since} (epoch {self.epoch}; {exp})"

    def as_dict(self) -> dict:
        return dict(self.__dict__)


_process_gone = pid_gone  # one liveness rule with the executor journal's lock: a zombie is gone


class Lease:
    def __init__(self, store: Store, ttl_s: float = 15.0, listen: str = "") -> None:
        self.store = store
        self.ttl_s = ttl_s
        self.listen = listen
        self.host = socket.gethostname()
        self.pid = os.getpid()
        self.id = f"{self.host}:{self.pid}:{uuid.uuid4().hex[:8]}"
        self.epoch: Optional[int] = None
        self.expires_at = 0.0  # wall time the lease lapses unless renewed (as this daemon last wrote it)

    @property
    def held(self) -> bool:
        return self.epoch is not None

    def holder(self) -> Optional[Holder]:
        row = self.store.conn().execute("SELECT * FROM lease WHERE name=?", (LEASE_NAME,)).fetchone()
        return Holder.from_row(row) if row else None

    def try_acquire(self, now: float | None = None) -> tuple[bool, Optional[Holder]]:
        """Take the lease if free; returns (taken, the holder now)."""
        now = time.time() if now is None else now
        with self.store.tx() as c:
            row = c.execute("SELECT * FROM lease WHERE name=?", (LEASE_NAME,)).fetchone()
            cur = Holder.from_row(row) if row else None
            free = (cur is None or cur.holder == self.id or cur.expires_at < now
                    or (cur.host == self.host and cur.pid != self.pid and _process_gone(cur.pid)))
            if not free:
                return False, cur
            epoch = (cur.epoch + 1) if cur else 1
            c.execute("INSERT INTO lease(name, holder, pid, host, epoch, acquired_at, renewed_at, expires_at, listen) "
                      "VALUES (?,?,?,?,?,?,?,?,?) ON CONFLICT(name) DO UPDATE SET holder=excluded.holder, pid=excluded.pid, "
                      "host=excluded.host, epoch=excluded.epoch, acquired_at=excluded.acquired_at, renewed_at=excluded.renewed_at, "
                      "expires_at=excluded.expires_at, listen=excluded.listen",
                      (LEASE_NAME, self.id, self.pid, self.host, epoch, now, now, now + self.ttl_s, self.listen))
            self.epoch = epoch
        self.expires_at = now + self.ttl_s
        return True, self.holder()

    def renew(self, now: float | None = None) -> bool:
        """Extend the lease; False (and not held any more) when another daemon took it."""
        if self.epoch is None:
            return False
        now = time.time() if now is None else now
        with self.store.tx() as c:
            n = c.execute("UPDATE lease SET renewed_at=?, expires_at=?, listen=? WHERE name=? AND holder=? AND epoch=?",
                          (now, now + self.ttl_s, self.listen, LEASE_NAME, self.id, self.epoch)).rowcount
        if n != 1:
            self.epoch = None
        else:
            self.expires_at = now + self.ttl_s
        return n == 1

    def verify(self, c: sqlite3.Connection) -> bool:
        """Inside a write transaction: is the lease still ours (holder and epoch)? The fencing check."""
        if self.epoch is None:
            return False
        row = c.execute("SELECT holder, epoch FROM lease WHERE name=?", (LEASE_NAME,)).fetchone()
        return bool(row) and row["holder"] == self.id and row["epoch"] == self.epoch

    def lost(self) -> Optional[str]:
        """Why this daemon may not act (the row names another holder or epoch), or None: the executor's
        fence, checked before every step and before its effect is saved."""
        if self.epoch is None:
            return "this daemon does not hold the applier lease"
        row = self.store.conn().execute("SELECT holder, epoch FROM lease WHERE name=?", (LEASE_NAME,)).fetchone()
        if row is None or row["holder"] != self.id or row["epoch"] != self.epoch:
            who = f"epoch {row['epoch']} of {row['holder']}" if row else "nobody"
            return f"the applier lease (epoch {self.epoch}) was taken over: it is {who} now"
        return None

    def release(self) -> None:
        if self.epoch is None:
            return
        with self.store.tx() as c:
            c.execute("DELETE FROM lease WHERE name=? AND holder=? AND epoch=?", (LEASE_NAME, self.id, self.epoch))
        self.epoch = None
