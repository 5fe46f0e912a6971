"""The coordinator's durable state: a SQLite file and a checkpoint directory in ``state_dir``.

The coordinator (:mod:`executor.workers.coordinator`) is the one place where leases, the request
ledger and reboot checkpoints live. On Ray it is an actor that may die; with a ``state_dir`` it
writes every change here before the call that made it returns, and a restarted coordinator
(Ray restarts the actor, ``max_restarts=-1``) loads it back, so nothing is lost:

* ``coordinator.sqlite`` (WAL; ``synchronous=NORMAL`` by default: a killed process loses nothing
  that was committed; ``FULL`` also survives a power loss, at one fsync per change):

  - ``kv(name, json)``: the epoch counter and the leases (written in the same transaction, so a
    restarted coordinator never grants an epoch twice: fencing holds across the restart), the
    worker registry, active sets, generations, dead nodes, parked components, placement groups;
  - ``requests(id, json)``: the request ledger, one row per request (owner, partial output, done),
    in submission order;
  - ``events(seq, kind, json)``: append-only records (refused side effects, trainer commits,
    illegal transitions).

* ``checkpoints/<key>/``: one directory per checkpoint key. The payload (``blob.rlps``: the
  object as typed JSON with every tensor as raw bytes, :mod:`executor.safestate`, so it loads bit
  for bit and a crafted file can never run code) is written and fsynced first; the commit marker ``COMMITTED`` (the payload's SHA-256) is
  written last, by an atomic rename. A directory without a marker is a write that a crash
  interrupted: it is ignored and removed on load, so a checkpoint is either wholly there or
  absent. A directory *with* its marker whose payload is missing, does not match the marker's
  SHA-256 or does not load was committed whole and damaged since (the disk, a hand edit): it may be
  a parked component's only copy, so it is never removed; the load is refused (``DamagedState``
  naming the directory, exit 2 in the commands) until it is restored or moved aside (before, it was
  deleted in silence and the component's state was gone). On a real cluster ``state_dir`` is a shared directory (NFS, a mounted bucket) that the
  node the coordinator restarts on can read.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import sqlite3
from pathlib import Path
from typing import Any, Iterable
from urllib.parse import quote, unquote

SCHEMA = """
CREATE TABLE IF NOT EXISTS kv(name TEXT PRIMARY KEY, json TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS requests(id TEXT PRIMARY KEY, json TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS events(seq INTEGER PRIMARY KEY AUTOINCREMENT, kind TEXT NOT NULL, json TEXT NOT NULL);
"""
MARKER = "COMMITTED"
PAYLOAD = "blob.rlps"
FIX = ("restore the folder from a copy, or move it aside (a coordinator then starts empty and adopts none of the running "
       "workers: stop them with 'ray stop' and apply again)")


class DamagedState(ValueError):
    """The saved state cannot be read (not a SQLite file, a damaged record): refused whole, never
    half-loaded. ``what`` names the file and the record, ``fix`` the way out."""

    def __init__(self, what: str, fix: str = FIX) -> None:
        super().__init__(f"{what}. Fix: {fix}")
        self.what, self.fix = what, fix

    def __reduce__(self):  # (crosses process boundaries: Ray pickles it with its two fields)
        return (DamagedState, (self.what, self.fix))


class CoordinatorStore:
    def __init__(self, directory: str | Path, *, synchronous: str = "NORMAL") -> None:
        if synchronous not in ("FULL", "NORMAL"):
            raise ValueError(f"synchronous must be FULL or NORMAL, got {synchronous!r}")
        self.dir = Path(directory)
        self.ckpt_dir = self.dir / "checkpoints"
        self.path = self.dir / "coordinator.sqlite"
        try:
            self.ckpt_dir.mkdir(parents=True, exist_ok=True)
            self.db = sqlite3.connect(str(self.path), timeout=30, isolation_level=None, check_same_thread=False)
        except (OSError, sqlite3.Error) as exc:
            raise DamagedState(f"the coordinator's state folder {self.dir} cannot be used ({type(exc).__name__}: {exc})",
                               "set RL_PLANNER_RAY_STATE_DIR (or RayBackend's state_dir) to a folder the coordinator's "
                               "node can create and write (on a real cluster, one every node reaches)") from None
        try:
            self.db.execute("PRAGMA journal_mode=WAL")
            self.db.execute(f"PRAGMA synchronous={synchronous}")
            self.db.executescript(SCHEMA)
        except sqlite3.DatabaseError as exc:
            self.db.close()
            raise DamagedState(f"the coordinator's state {self.path} is not a usable SQLite file ({exc})") from None

    def close(self) -> None:
        self.db.close()

    # ------------------------------------------------------------------ tables
    def load(self) -> dict:
        """Everything saved: ``{"kv": {name: value}, "requests": {id: record}, "events": {kind: [records]}}``."""
        try:
            kv = {n: self._json("kv", n, j) for n, j in self.db.execute("SELECT name, json FROM kv")}
            reqs = {i: self._json("requests", i, j, dict) for i, j in self.db.execute("SELECT id, json FROM requests ORDER BY rowid")}
            events: dict[str, list] = {}
            for seq, kind, j in self.db.execute("SELECT seq, kind, json FROM events ORDER BY seq"):
                events.setdefault(kind, []).append(self._json("events", seq, j, dict))
        except sqlite3.DatabaseError as exc:
            raise DamagedState(f"the coordinator's state {self.path} cannot be read ({exc})") from None
        return {"kv": kv, "requests": reqs, "events": events}

    def _json(self, table: str, key: Any, text: Any, kind: type = object) -> Any:
        """One record's value; a damaged one (not JSON, or not the kind of value the table holds) is
        refused with the table and key that hold it."""
        try:
            value = json.loads(text)
        except (TypeError, ValueError) as exc:
            raise DamagedState(f"the coordinator's state {self.path}: {table} record {key!r} is damaged ({exc})") from None
        if not isinstance(value, kind):
            raise DamagedState(f"the coordinator's state {self.path}: {table} record {key!r} holds a {type(value).__name__}, "
                               f"not a {kind.__name__}")
        return value

    def write(self, kv: dict[str, Any] | None = None, requests: Iterable[dict] = (),
              events: Iterable[tuple[str, Any]] = ()) -> None:
        """One transaction: upsert ``kv`` entries and request records, append events."""
        reqs = list(requests)
        evs = list(events)
        if not kv and not reqs and not evs:
            return
        self.db.execute("BEGIN IMMEDIATE")
        try:
            if kv:
                self.db.executemany("INSERT OR REPLACE INTO kv(name, json) VALUES (?, ?)",
                                    [(n, json.dumps(v, default=str)) for n, v in kv.items()])
            if reqs:
                self.db.executemany("INSERT INTO requests(id, json) VALUES (?, ?) "
                                    "ON CONFLICT(id) DO UPDATE SET json = excluded.json",
                                    [(r["id"], json.dumps(r, default=str)) for r in reqs])
            if evs:
                self.db.executemany("INSERT INTO events(kind, json) VALUES (?, ?)",
                                    [(k, json.dumps(v, default=str)) for k, v in evs])
            self.db.execute("COMMIT")
        except BaseException:
            self.db.execute("ROLLBACK")
            raise

    # ------------------------------------------------------------------ checkpoints
    def _path(self, key: str) -> Path:
        return self.ckpt_dir / quote(key, safe="")

    def put_checkpoint(self, key: str, blob: Any) -> None:
        """Payload first (fsynced), the commit marker last (atomic rename, then the directory fsynced)."""
        from executor import safestate

        d = self._path(key)
        if d.exists():
            shutil.rmtree(d)  # a rewrite (a resumed save): the old marker goes first, so no mix is ever valid
        d.mkdir(parents=True)
        data = safestate.dumps(blob)  # typed JSON + raw tensor bytes: loads bit for bit and can never run code
        _write_synced(d / PAYLOAD, data)
        tmp = d / (MARKER + ".tmp")
        _write_synced(tmp, json.dumps({"key": key, "sha256": hashlib.sha256(data).hexdigest(), "bytes": len(data)}).encode())
        os.replace(tmp, d / MARKER)
        _fsync_dir(d)

    def load_checkpoints(self) -> dict[str, Any]:
        """Every committed checkpoint; an uncommitted directory (no marker: an interrupted write) is
        removed, a committed one that no longer loads refused (module docstring)."""
        from executor import safestate

        out = {}
        for d in sorted(self.ckpt_dir.iterdir()) if self.ckpt_dir.exists() else []:
            marker = d / MARKER
            if not marker.is_file():  # an interrupted write
                if d.is_dir():
                    shutil.rmtree(d, ignore_errors=True)
                else:
                    d.unlink(missing_ok=True)
                continue
            try:
                meta = json.loads(marker.read_text())
                data = (d / PAYLOAD).read_bytes()
                if not isinstance(meta, dict) or hashlib.sha256(data).hexdigest() != meta.get("sha256"):
                    raise ValueError("its payload does not match its commit marker")
                blob = safestate.loads(data)
            except (OSError, ValueError, KeyError, safestate.BadState) as exc:
                raise DamagedState(f"the coordinator's checkpoint {d} ({unquote(d.name)!r}) was committed and is damaged "
                                   f"({type(exc).__name__}: {exc})",
                                   f"restore that folder from a copy; or, to give up that saved state, move it out of "
                                   f"{self.ckpt_dir}") from None
            out[unquote(d.name)] = blob
        return out

    def drop_checkpoint(self, key: str) -> None:
        d = self._path(key)
        marker = d / MARKER
        if marker.exists():
            marker.unlink()  # uncommitted first: a crash mid-removal leaves nothing that loads
        shutil.rmtree(d, ignore_errors=True)


def _write_synced(path: Path, data: bytes) -> None:
    with open(path, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())


def _fsync_dir(path: Path) -> None:
    try:
        fd = os.open(str(path), os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
