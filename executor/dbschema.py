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
         (frozenset({"world", "workers"}), "a simulated cluster's state file", "--sim-state"))


def verify(conn: sqlite3.Connection, path: str | Path, expected: dict[str, str], field: str, fix: str, what: str = "SQLite file") -> None:
    """``expected``: name -> 'table' | 'index'. SQLite's own objects (``sqlite_*``) are allowed."""
    try:
        rows = conn.execute("SELECT type, name FROM sqlite_master").fetchall()
    except sqlite3.DatabaseError as exc:
        raise UserError(Problem(field, f"{path} is not a usable {what} ({exc})", fix)) from None
    tables = {name for kind, name in rows if kind == "table" and isinstance(name, str) and not name.startswith("sqlite_")}
    for names, desc, flag in KNOWN:
        if tables == names and names != set(expected) and all(kind in ("table", "index") for kind, _ in rows):
            raise UserError(Problem(field, f"{path} is {desc} (what 'planner apply {flag}' takes), not the {what} expected "
                                           "here; it was not opened",
                                    f"pass it as {flag}, and give the {what} a path of its own (this file was left as it was)"))
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
