"""A SQLite file is opened only with the schema this project made: no views, no triggers, no
table or index it did not create.

A crafted file can make a plain ``SELECT`` do anything SQLite can: a recursive VIEW named like
one of our tables (``world``) runs until memory is gone, a VIEW named ``applies`` hangs a query,
a TRIGGER fires on every save. :func:`verify` reads ``sqlite_master`` (which runs none of them)
and refuses the file before any other statement; :func:`check_integrity` runs SQLite's
``quick_check`` so that a scribbled page is found at open, not half-way through an apply.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

from estimators.errors import Problem, UserError


# The files ``planner apply`` writes, by their tables: one passed where the other is expected (the
# journal as --sim-state, or the other way round) is named as what it is, not as a foreign file to move away.
KNOWN = ((frozenset({"applies", "steps", "lock"}), "an apply journal", "--journal"),
         (frozenset({"world", "workers"}), "a simulated cluster's state file", "--sim-state"),
         (frozenset({"world", "workers", "coord"}), "a simulated cluster's state file", "--sim-state"))


# The replanning daemon's own files (``planner daemon --state STATE`` and its simulated cluster
# ``STATE.sim``), by tables they always hold: one passed to a command that reads the executor's files
# was called a foreign file to move away (the daemon's state with it); it is named as what it is.
DAEMON_FILES = ((frozenset({"jobs", "decisions", "plans", "lease"}), "a replanning daemon's state file (planner daemon --state)", ""),
                (frozenset({"sim_groups", "sim_jobs"}), "a replanning daemon's simulated cluster (its STATE.sim)", ".sim"))


def _daemon_file(path: str | Path, tables: set[str], expected: dict[str, str], what: str) -> Problem | None:
    for names, desc, suffix in DAEMON_FILES:
        if names <= tables and not names <= set(expected):
            p = str(path)
            state = p[: -len(suffix)] if suffix and p.endswith(suffix) else (p if not suffix else "STATE")
            return Problem("", f"{path} is {desc}, not the {what} expected here; it was not opened (and is left as it was: "
                               "do not move it)",
                           f"give {{field}} a file of its own, not one of the daemon's; to see what that daemon's executor runs: "
                           f"planner status --sim-state {state}.executor-sim --journal {state}.journal")
    return None


def verify(conn: sqlite3.Connection, path: str | Path, expected: dict[str, str], field: str, fix: str, what: str = "SQLite file") -> None:
    """``expected``: name -> 'table' | 'index'. SQLite's own objects (``sqlite_*``) are allowed."""
    try:
        rows = conn.execute("SELECT type, name FROM sqlite_master").fetchall()
    except sqlite3.DatabaseError as exc:
        raise UserError(Problem(field, f"{path} is not a usable {what} ({exc})", fix)) from None
    tables = {name for kind, name in rows if kind == "table" and isinstance(name, str) and not name.startswith("sqlite_")}
    for names, desc, flag in KNOWN:
        if tables == names and not names <= set(expected) and all(kind in ("table", "index") for kind, _ in rows):
            raise UserError(Problem(field, f"{path} is {desc} (what 'planner apply {flag}' takes), not the {what} expected "
                                           "here; it was not opened",
                                    f"pass it as {flag}, and give the {what} a path of its own (this file was left as it was)"))
    if all(kind in ("table", "index") for kind, _ in rows):
        daemon = _daemon_file(path, tables, expected, what)
        if daemon is not None:
            daemon.where, daemon.fix = field, daemon.fix.replace("{field}", field)
            raise UserError(daemon)
    for kind, name in rows:
        if isinstance(name, str) and name.startswith("sqlite_"):
            continue
        if kind in ("view", "trigger") or expected.get(name) != kind:
            raise UserError(Problem(field, f"{path} holds a {kind} {str(name)[:80]!r} that rl-planner did not create: it is not "
                                           "opened (a view or trigger would run on every read or write)", fix))


def check_integrity(conn: sqlite3.Connection, path: str | Path, field: str, fix: str) -> None:
    try:
        row = conn.execute("PRAGMA quick_check(1)").fetchone()
    except sqlite3.DatabaseError as exc:
        raise UserError(Problem(field, f"{path} is damaged ({exc})", fix)) from None
    if row is None or row[0] != "ok":
        raise UserError(Problem(field, f"{path} is damaged (SQLite's check: {str(row[0] if row else '')[:200]})", fix))
