"""The apply journal (SQLite): each step's intent before acting, its outcome after.

Tables: ``applies`` (one row per apply: plan digest, backend, status, the ordered steps as
JSON), ``steps`` (per step: status ``intent`` / ``done`` / ``failed`` / ``compensated``, attempt
count, outcome JSON, times) and ``lock`` (one holder at a time: a second apply against the same
journal is refused while the first one's process lives).

A crashed apply leaves a ``running`` row. Applying the same plan again resumes it: steps marked
``done`` are skipped, a step left at ``intent`` is reconciled against the cluster before it is
retried (every step is idempotent by worker id and ledger ownership). Applying a different plan
while one is unfinished is refused with the way out (finish it, or roll it back).
"""

from __future__ import annotations

import json
import os
import sqlite3
from urllib.parse import quote
import time
from pathlib import Path
from typing import Any, Optional

from estimators.errors import Problem, UserError
from estimators.host import create_private, pid_gone

from executor.steps import STEP_TRANSITIONS, Step, check_transition

MAX_STEPS_JSON = 64 << 20  # the steps of one apply as JSON (65,536 workers' steps fit in a few MB)

SCHEMA = """
CREATE TABLE IF NOT EXISTS applies(
  id INTEGER PRIMARY KEY AUTOINCREMENT, plan_digest TEXT NOT NULL, plan_name TEXT, backend TEXT,
  status TEXT NOT NULL, started REAL, ended REAL, steps_json TEXT NOT NULL, message TEXT DEFAULT '');
CREATE TABLE IF NOT EXISTS steps(
  apply_id INTEGER NOT NULL, seq INTEGER NOT NULL, step_id TEXT NOT NULL, unit TEXT NOT NULL, kind TEXT NOT NULL,
  status TEXT NOT NULL, attempts INTEGER NOT NULL DEFAULT 0, intent_at REAL, outcome_at REAL, outcome_json TEXT,
  PRIMARY KEY(apply_id, seq));
CREATE TABLE IF NOT EXISTS lock(id INTEGER PRIMARY KEY CHECK (id = 1), holder TEXT, pid INTEGER, since REAL);
"""


class Fenced(BaseException):
    """This controller may no longer act: a newer holder (a higher fence, e.g. the daemon lease epoch
    that replaced it) took the journal or the cluster over. A BaseException: no step handler or
    rollback catches it; nothing more is written or done."""


def _pid_alive(pid: int) -> bool:
    """The lock holder's process lives (one rule with the daemon's lease: a zombie is dead, :func:`estimators.host.pid_gone`)."""
    return not pid_gone(pid)


def _check_file(p: Path) -> None:
    """The journal is a regular file (or a new one in an existing or creatable folder)."""
    import stat

    try:
        st = os.stat(p)
    except FileNotFoundError:
        if p.parent.exists() and not p.parent.is_dir():
            raise UserError(Problem("journal", f"{p.parent} is not a folder", "pass --journal FOLDER/journal.db")) from None
        return
    except OSError as exc:
        raise UserError(Problem("journal", f"cannot open {p}: {exc.strerror or exc}", "pass --journal FILE.db")) from None
    if not stat.S_ISREG(st.st_mode):
        what = "a directory" if stat.S_ISDIR(st.st_mode) else "not a regular file"
        raise UserError(Problem("journal", f"{p} is {what}", "pass --journal FILE.db: a journal file (created when missing)"))


TABLES = {"applies": "table", "steps": "table", "lock": "table"}


def _fix(path) -> str:
    return (f"move it aside (mv {path} {path}.bad); then 'planner apply --rollback' settles the cluster from what it shows "
            "(without a journal), and 'planner status' says what runs")


class Journal:
    def __init__(self, path: str | Path, *, synchronous: str = "FULL", readonly: bool = False) -> None:
        """``synchronous``: FULL (default: every intent and outcome reaches the disk before the step
        goes on, so even a power loss keeps the journal ahead of the cluster); NORMAL survives a
        killed process but not a power loss — enough where the cluster itself is a file written the
        same way (the daemon's simulated backend)."""
        if synchronous not in ("FULL", "NORMAL"):
            raise ValueError(f"synchronous must be FULL or NORMAL, got {synchronous!r}")
        self.path = Path(path)
        self._held: Optional[tuple[int, Optional[int]]] = None  # (pid, fence) while this object holds the lock
        if str(path) != ":memory:":
            _check_file(self.path)
            if not readonly:
                self.path.parent.mkdir(parents=True, exist_ok=True)
                create_private(self.path)
        from executor.dbschema import check_integrity, verify

        try:
            if readonly:  # read, never written (planner status): no schema made, no WAL switched on
                self.db = sqlite3.connect(f"file:{quote(str(self.path.resolve()))}?mode=ro", uri=True, timeout=30, isolation_level=None,
                                          check_same_thread=False)
            else:
                self.db = sqlite3.connect(str(path), timeout=30, isolation_level=None, check_same_thread=False)
            verify(self.db, path, TABLES, "journal", _fix(path), what="apply journal")
            if str(path) != ":memory:":
                check_integrity(self.db, path, "journal", _fix(path))
            if readonly:
                return
            self.db.execute("PRAGMA journal_mode=WAL")
            self.db.execute(f"PRAGMA synchronous={synchronous}")
            self.db.executescript(SCHEMA)
            if "fence" not in {r[1] for r in self.db.execute("PRAGMA table_info(lock)")}:
                self.db.execute("ALTER TABLE lock ADD COLUMN fence INTEGER")
        except sqlite3.DatabaseError as exc:
            raise UserError(Problem("journal", f"{path} is not a usable apply journal ({exc})", _fix(path))) from None

    def close(self) -> None:
        self.db.close()

    # ------------------------------------------------------------------ lock
    def acquire(self, holder: str, fence: Optional[int] = None) -> None:
        """Take the lock: free, held by a dead process, or (``fence``) held with a lower fence by a
        controller that was superseded (a frozen daemon whose lease a newer one took): that one is
        fenced out, every write it tries next raises :class:`Fenced`."""
        pid = os.getpid()
        with self._tx():
            row = self.db.execute("SELECT holder, pid, fence FROM lock WHERE id = 1").fetchone()
            if row and row[1] != pid and _pid_alive(row[1]):
                if not (fence is not None and row[2] is not None and row[2] < fence):
                    raise UserError(Problem("journal", f"another apply ({row[0]}, pid {row[1]}) holds {self.path}",
                                            "wait for it to finish; only one apply runs at a time per journal"))
            self.db.execute("INSERT OR REPLACE INTO lock(id, holder, pid, since, fence) VALUES (1, ?, ?, ?, ?)",
                            (holder, pid, time.time(), fence))
        self._held = (pid, fence)

    def check_held(self) -> None:
        """Raise :class:`Fenced` when another controller took the lock from this one."""
        if self._held is None:
            return
        row = self.db.execute("SELECT pid, fence FROM lock WHERE id = 1").fetchone()
        if row is None or (row[0], row[1]) != self._held:
            raise Fenced(f"the journal {self.path} was taken over by pid {row[0] if row else '-'} (fence {row[1] if row else '-'}); "
                         f"this controller (fence {self._held[1]}) stops without acting")

    def release(self) -> None:
        with self._tx():
            if self._held is not None:
                self.db.execute("DELETE FROM lock WHERE id = 1 AND pid = ? AND fence IS ?", self._held)
            else:
                self.db.execute("DELETE FROM lock WHERE id = 1 AND pid = ?", (os.getpid(),))
        self._held = None

    def _tx(self):
        db = self.db

        class _T:
            def __enter__(self_inner):
                db.execute("BEGIN IMMEDIATE")

            def __exit__(self_inner, et, ev, tb):
                db.execute("COMMIT" if et is None else "ROLLBACK")
                return False

        return _T()

    # ------------------------------------------------------------------ applies
    def _damaged(self, exc: BaseException) -> UserError:
        return UserError(Problem("journal", f"{self.path} is damaged: {type(exc).__name__}: {str(exc)[:200]}", _fix(self.path)))

    def unfinished(self) -> Optional[dict]:
        try:
            return self._unfinished()
        except (sqlite3.DatabaseError, ValueError, TypeError, KeyError, RecursionError, AttributeError) as exc:
            raise self._damaged(exc) from None

    def writer_tag(self, apply_id: int) -> str:
        """Who an apply is, as it marks the cluster it changes (``Coordinator.claim_writer``): this journal's
        file, the apply's id and its start (a journal made afresh at the same path restarts the ids)."""
        row = self.db.execute("SELECT started FROM applies WHERE id = ?", (apply_id,)).fetchone()
        return f"{self.path}#{apply_id}@{row[0] if row else 0!r}"

    def earlier_own(self, tag: str, apply_id: int) -> bool:
        """Whether ``tag`` (a cluster's writer mark) is an apply of this journal before ``apply_id``: the cluster
        as that one left it is the one ``apply_id`` started from (no other journal's apply changed it since)."""
        head, sep, _ = tag.rpartition("@")
        path, sep2, num = head.rpartition("#")
        if not (sep and sep2 and num.isdigit()) or path != str(self.path) or int(num) >= apply_id:
            return False
        return self.writer_tag(int(num)) == tag

    def _unfinished(self) -> Optional[dict]:
        row = self.db.execute("SELECT id, plan_digest, plan_name, backend, steps_json FROM applies WHERE status = 'running' "
                              "ORDER BY id DESC LIMIT 1").fetchone()
        if not row:
            return None
        if not isinstance(row[4], str) or len(row[4]) > MAX_STEPS_JSON:
            raise ValueError("the steps of the apply are not a JSON text of a sane size")
        steps = json.loads(row[4])
        if not isinstance(steps, list) or not all(isinstance(d, dict) for d in steps):
            raise ValueError("the steps of the apply are not a list of step records")
        return {"id": row[0], "plan_digest": row[1], "plan_name": row[2], "backend": row[3],
                "steps": [Step.from_dict(d) for d in steps]}

    def open_apply(self, digest: str, name: str, backend: str, steps: list[Step]) -> tuple[int, list[Step], bool]:
        """(apply id, steps, resumed). Resumes the unfinished apply of the same plan."""
        cur = self.unfinished()
        if cur is not None:
            if cur["plan_digest"] != digest:
                row = self.db.execute("SELECT holder, pid FROM lock WHERE id = 1").fetchone()
                if row and row[1] != os.getpid() and _pid_alive(row[1]):  # not interrupted: running (or stopped) now
                    raise UserError(Problem("journal", f"apply #{cur['id']} of plan {cur['plan_name']!r} is running ({row[0]}, "
                                                       f"pid {row[1]}) and holds {self.path}",
                                            "wait for it to finish; only one apply runs at a time per journal"))
                raise UserError(Problem("journal", f"apply #{cur['id']} of plan {cur['plan_name']!r} (digest {cur['plan_digest']}) "
                                        f"was interrupted and is not finished",
                                        "run 'planner apply' on that plan again to resume it, or 'planner apply --rollback' "
                                        "to undo its unfinished migration, before applying another plan"))
            return cur["id"], cur["steps"], True
        with self._tx():
            c = self.db.execute("INSERT INTO applies(plan_digest, plan_name, backend, status, started, steps_json) "
                                "VALUES (?, ?, ?, 'running', ?, ?)",
                                (digest, name, backend, time.time(), json.dumps([s.as_dict() for s in steps])))
            aid = c.lastrowid
            assert aid is not None  # an INSERT's row id
            self.db.executemany("INSERT INTO steps(apply_id, seq, step_id, unit, kind, status) VALUES (?, ?, ?, ?, ?, 'planned')",
                                [(aid, s.seq, s.id, s.unit, s.kind) for s in steps])
        return aid, steps, False

    def finish(self, apply_id: int, status: str, message: str = "") -> None:
        with self._tx():
            self.check_held()
            self.db.execute("UPDATE applies SET status = ?, ended = ?, message = ? WHERE id = ?",
                            (status, time.time(), message, apply_id))

    # ------------------------------------------------------------------ steps
    def status_of(self, apply_id: int) -> dict[int, tuple[str, Any]]:
        try:
            rows = self.db.execute("SELECT seq, status, outcome_json FROM steps WHERE apply_id = ?", (apply_id,)).fetchall()
            return {r[0]: (r[1], json.loads(r[2]) if r[2] else None) for r in rows}
        except (sqlite3.DatabaseError, ValueError, TypeError, RecursionError) as exc:
            raise self._damaged(exc) from None

    def _set(self, apply_id: int, step: Step, new: str, outcome: Any = None, field: str = "outcome_at") -> None:
        with self._tx():
            self.check_held()
            row = self.db.execute("SELECT status FROM steps WHERE apply_id = ? AND seq = ?", (apply_id, step.seq)).fetchone()
            check_transition(STEP_TRANSITIONS, f"step {step.id}", row[0], new)
            extra = ", attempts = attempts + 1" if new == "intent" else ""
            self.db.execute(f"UPDATE steps SET status = ?, {field} = ?, outcome_json = ?{extra} WHERE apply_id = ? AND seq = ?",
                            (new, time.time(), json.dumps(outcome, default=str) if outcome is not None else None,
                             apply_id, step.seq))

    def intent(self, apply_id: int, step: Step) -> None:
        self._set(apply_id, step, "intent", field="intent_at")

    def done(self, apply_id: int, step: Step, outcome: Any = None) -> None:
        self._set(apply_id, step, "done", outcome)

    def failed(self, apply_id: int, step: Step, why: str) -> None:
        self._set(apply_id, step, "failed", {"error": why})

    def compensated(self, apply_id: int, step: Step, note: str) -> None:
        self._set(apply_id, step, "compensated", {"compensation": note})

    def attempts(self, apply_id: int, seq: int) -> int:
        row = self.db.execute("SELECT attempts FROM steps WHERE apply_id = ? AND seq = ?", (apply_id, seq)).fetchone()
        return row[0] if row else 0

    def last_of(self, digest: str) -> Optional[dict]:
        """The newest apply of the plan ``digest`` (id, name, status, message), or None when none was journaled."""
        try:
            row = self.db.execute("SELECT id, plan_name, status, message FROM applies WHERE plan_digest = ? ORDER BY id DESC LIMIT 1",
                                  (digest,)).fetchone()
        except sqlite3.DatabaseError as exc:
            raise self._damaged(exc) from None
        return dict(zip(["id", "plan", "status", "message"], row)) if row else None

    # ------------------------------------------------------------------ epochs and history
    def history(self, limit: int = 10) -> list[dict]:
        try:
            return self._history(limit)
        except sqlite3.DatabaseError as exc:
            raise self._damaged(exc) from None

    def _history(self, limit: int) -> list[dict]:
        rows = self.db.execute("SELECT id, plan_name, plan_digest, backend, status, started, ended, message FROM applies "
                               "ORDER BY id DESC LIMIT ?", (limit,)).fetchall()
        keys = ["id", "plan", "digest", "backend", "status", "started", "ended", "message"]
        out = [dict(zip(keys, r)) for r in rows]
        lock = self.db.execute("SELECT pid FROM lock WHERE id = 1").fetchone()
        holder_lives = bool(lock) and isinstance(lock[0], int) and _pid_alive(lock[0])
        for h in out:  # 'running' with no live holder: its process was killed (resume or roll it back)
            h["interrupted"] = h["status"] == "running" and not holder_lives
        return out

    def step_rows(self, apply_id: int) -> list[dict]:
        try:
            return self._step_rows(apply_id)
        except (sqlite3.DatabaseError, ValueError, TypeError, RecursionError) as exc:
            raise self._damaged(exc) from None

    def _step_rows(self, apply_id: int) -> list[dict]:
        rows = self.db.execute("SELECT seq, step_id, kind, status, attempts, outcome_json FROM steps WHERE apply_id = ? ORDER BY seq",
                               (apply_id,)).fetchall()
        return [{"seq": r[0], "id": r[1], "kind": r[2], "status": r[3], "attempts": r[4],
                 "outcome": json.loads(r[5]) if r[5] else None} for r in rows]
