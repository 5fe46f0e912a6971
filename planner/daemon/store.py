"""The daemon's state in one SQLite file: jobs, their events, telemetry, plans, decisions, lease.

One writer of job *state*: the loop (the daemon that holds the applier lease). The HTTP API only
inserts submitted jobs, sets a cancel request on a job, and appends telemetry; the loop reads those
at the start of a cycle and acts on them. So an API call never races the loop on a job's state,
and a state change is always a legal move of :mod:`planner.daemon.lifecycle`, written together
with its event row in one transaction.

Durability and concurrency: :class:`planner.daemon.sqlitedb.SQLiteFile` (WAL, a connection per
thread, write transactions that take the lock up front).

Tables (``SCHEMA_VERSION`` is checked at open; another version is refused with a message):

=============  =======================================================================
meta           key → JSON: schema version, the cluster scenario and its digest, created_at
kv             key → JSON: loop state that must survive a restart (virtual clock, cycle
               number, telemetry cursor, estimator and rate-limit state)
jobs           one row per submitted job: spec (JobSpec JSON), state, times, last reason
job_events     every state change: from, to, when, why
telemetry      posted snapshots (validated ``TelemetrySnapshot`` JSON), pruned after use
plans          every target the loop decided: status applying | applied | recorded | failed
decisions      the decision log: cycle, triggers, outcome, gain, migration cost, reasons
lease          who may apply: holder, pid, host, epoch (fencing), expiry
audit          every mutating API call: when, token name, client address, method, path, job, status
realloc_ctx    per job, the latest reallocation context a running system posted (validated
               ``planner.instances.completion_io`` JSON text; one row per job, replaced by each post)
=============  =======================================================================

``jobs.submitted_by`` (the token that submitted a job through the API), ``jobs.telemetry_iteration``
and ``jobs.telemetry_time_s`` (the newest telemetry instant accepted for the job: later posts may not go
back before it, :mod:`planner.daemon.ingest`), ``jobs.prompt_tokens_from_trace`` (the spec's
``prompt_tokens`` is the mean of its ``prompt_lengths`` trace file, not the client's: read again from the
file, :func:`planner.daemon.datafiles.job_spec`), ``audit`` and ``realloc_ctx`` were added without a
version change: opening an older file adds them.
"""

from __future__ import annotations

import json
import sqlite3
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, Optional, TypedDict

from planner.daemon import lifecycle
from planner.daemon.lifecycle import JobState
from planner.daemon.sqlitedb import SQLiteFile
from planner.errors import UserError

SCHEMA_VERSION = 1

DDL = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS kv (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS jobs (
    name TEXT PRIMARY KEY,
    spec TEXT NOT NULL,
    state TEXT NOT NULL,
    submitted_at REAL NOT NULL,
    arrives_at REAL NOT NULL,
    admitted_at REAL,
    started_at REAL,
    ended_at REAL,
    slo_s REAL,
    reason TEXT NOT NULL DEFAULT '',
    cancel_requested_at REAL,
    seq INTEGER NOT NULL,
    iterations INTEGER NOT NULL DEFAULT 0,
    last_iteration_s REAL,
    slo_misses INTEGER NOT NULL DEFAULT 0
);
CREATE INDEX IF NOT EXISTS jobs_state ON jobs(state);
CREATE TABLE IF NOT EXISTS job_events (
    id INTEGER PRIMARY KEY,
    job TEXT NOT NULL,
    at REAL NOT NULL,
    from_state TEXT,
    to_state TEXT NOT NULL,
    reason TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS job_events_job ON job_events(job, id);
CREATE TABLE IF NOT EXISTS telemetry (
    id INTEGER PRIMARY KEY,
    job TEXT NOT NULL,
    received_wall REAL NOT NULL,
    time_s REAL NOT NULL,
    iteration INTEGER NOT NULL,
    body TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS plans (
    id INTEGER PRIMARY KEY,
    created_at REAL NOT NULL,
    cycle INTEGER NOT NULL,
    kind TEXT NOT NULL,
    status TEXT NOT NULL,
    cost_per_hour REAL NOT NULL,
    decision_id INTEGER,
    placement TEXT NOT NULL,
    doc TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS decisions (
    id INTEGER PRIMARY KEY,
    cycle INTEGER NOT NULL,
    at REAL NOT NULL,
    kind TEXT NOT NULL,
    triggers TEXT NOT NULL,
    outcome TEXT NOT NULL,
    jobs TEXT NOT NULL,
    cost_before REAL,
    cost_after REAL,
    gain_usd REAL,
    migration_usd REAL,
    solver TEXT NOT NULL,
    reasons TEXT NOT NULL,
    plan_id INTEGER,
    dry_run INTEGER NOT NULL
);
CREATE TABLE IF NOT EXISTS lease (
    name TEXT PRIMARY KEY,
    holder TEXT NOT NULL,
    pid INTEGER NOT NULL,
    host TEXT NOT NULL,
    epoch INTEGER NOT NULL,
    acquired_at REAL NOT NULL,
    renewed_at REAL NOT NULL,
    expires_at REAL NOT NULL,
    listen TEXT NOT NULL DEFAULT ''
);
CREATE TABLE IF NOT EXISTS audit (
    id INTEGER PRIMARY KEY,
    at REAL NOT NULL,
    identity TEXT NOT NULL,
    client TEXT NOT NULL,
    method TEXT NOT NULL,
    path TEXT NOT NULL,
    job TEXT,
    status INTEGER NOT NULL
);
CREATE TABLE IF NOT EXISTS realloc_ctx (
    job TEXT PRIMARY KEY,
    received_wall REAL NOT NULL,
    time_s REAL NOT NULL,
    iteration INTEGER NOT NULL,
    body TEXT NOT NULL
);
"""

PLAN_LIVE = ("applying", "applied", "recorded")
AUDIT_KEEP = 100_000  # audit rows kept (the newest)
AUDIT_PRUNE_EVERY = 1000  # rows between two prunings


def _schema_names() -> dict[str, str]:
    import re

    return {name: kind.lower() for kind, name in re.findall(r"CREATE (TABLE|INDEX) IF NOT EXISTS (\w+)", DDL)}


class StoreError(Exception):
    """A request the state refuses (the API maps these to 4xx)."""

    status = 400

    def __init__(self, message: str, where: str = "", fix: str = "") -> None:
        super().__init__(message)
        self.message, self.where, self.fix = message, where, fix


class NotFound(StoreError):
    status = 404


class Conflict(StoreError):
    status = 409


class TooMany(StoreError):
    status = 429


class StateFileError(Exception):
    """The state file cannot be used (wrong schema version, not a state file, unreadable); ``fix``: what
    to do when it is not "restore it from a copy" (a file locked by another process, or not writable)."""

    def __init__(self, message: str, fix: str = "") -> None:
        super().__init__(message)
        self.fix = fix


_KV_SHAPES: dict[str, tuple[Any, str]] = {}


def _no_constant(name: str) -> Any:
    """``json.loads``' hook for NaN and Infinity, which the daemon never writes (strict JSON)."""
    raise ValueError(f"{name} is not JSON")


def _kv_shapes() -> dict[str, tuple[Any, str]]:
    """key -> (a pydantic TypeAdapter, the type in words) of each kv value the daemon reads back
    (what :meth:`planner.daemon.cycle.Loop` and the API write; numbers strict: no text, no booleans)."""
    if _KV_SHAPES:
        return _KV_SHAPES
    from typing import Annotated

    from pydantic import BaseModel, ConfigDict, Field, TypeAdapter

    count = Annotated[int, Field(ge=0, strict=True)]
    number = Annotated[float, Field(strict=True)]

    class _Obj(BaseModel):
        model_config = ConfigDict(extra="allow")

    class Estimates(_Obj):
        ratios: dict[str, dict[str, list[number]]] = {}
        factor: dict[str, dict[str, number]] = {}
        errors: dict[str, list[number]] = {}

    class Track(_Obj):
        iteration: count
        rollout_end: Optional[number] = None
        last_time: number = 0.0

    class Bucket(_Obj):
        tokens: number = 0.0
        updated_at: number = 0.0

    class Standing(_Obj):
        iteration: count
        decision: Optional[count] = None
        due: Annotated[bool, Field(strict=True)] = False

    class Cluster(_Obj):  # (what GET /v1/cluster answers with: planner.daemon.api.ClusterView)
        at: number
        backend: Annotated[str, Field(strict=True)]
        nodes: list[dict[str, Any]]
        components: list[dict[str, Any]]
        parked: dict[str, Any] = {}
        ledger: dict[str, Any] = {}

    shapes: dict[str, tuple[Any, str]] = {
        "cycle": (count, "a whole number >= 0"), "telemetry_cursor": (count, "a whole number >= 0"),
        "cost_usd": (number, "a number"), "migration_usd": (number, "a number"),
        "realloc_at": (dict[str, number], "an object of job name -> clock seconds"),
        "realloc_standing": (dict[str, Standing], "an object of job name -> {iteration, decision, due}"),
        "sample_mark": (dict[str, count], "an object of job name -> iteration (a whole number)"),
        "estimates": (Optional[Estimates], "an object of ratios, factor and errors (or null)"),
        "phase_timer": (Optional[dict[str, Track]], "an object of job name -> {iteration, rollout_end, last_time} (or null)"),
        "move_budget": (Optional[Bucket], "an object {tokens, updated_at} (or null)"),
        "cluster": (Cluster, "an object of at, backend, nodes and components"),
        "revive_nodes": (dict[str, number], "an object of node name -> clock seconds"),
        **{k: (Optional[number], "a number or null") for k in ("last_cycle_at", "last_reopt_at", "clock_s", "reopt_blocked_until")},
    }
    _KV_SHAPES.update({k: (TypeAdapter(tp), words) for k, (tp, words) in shapes.items()})
    return _KV_SHAPES


def _open_error(path: Path, exc: sqlite3.DatabaseError) -> StateFileError:
    """What opening the state file met: a lock or a permission is said as such, with its fix (the file is
    fine); anything else is a file SQLite cannot use."""
    from planner.daemon.sqlitedb import busy_timeout_s, is_locked, is_unwritable

    if is_locked(exc):
        return StateFileError(f"the state file {path} stayed locked by another process for over {busy_timeout_s():.0f} s ({exc})",
                              "stop the process that holds it in a write transaction (an sqlite3 shell, a backup), then start again")
    if is_unwritable(exc):
        side = ", ".join(f"{path}{s}" for s in ("-wal", "-shm"))
        return StateFileError(f"the state file {path} or its folder or sidecar files ({side}) are not writable ({exc})",
                              "check their permissions: the daemon's user must read and write the file, its -wal and -shm, "
                              "and the folder (never delete a -wal file: it holds committed transactions)")
    return StateFileError(f"{path} is not a usable SQLite state file ({exc})")


@dataclass(frozen=True)
class JobRecord:
    name: str
    spec: dict
    state: JobState
    submitted_at: float
    arrives_at: float
    admitted_at: Optional[float]
    started_at: Optional[float]
    ended_at: Optional[float]
    slo_s: Optional[float]
    reason: str
    cancel_requested_at: Optional[float]
    seq: int
    iterations: int = 0
    last_iteration_s: Optional[float] = None
    slo_misses: int = 0
    prompt_tokens_from_trace: bool = False  # spec.rollout.prompt_tokens is its prompt_lengths trace's mean (datafiles.job_spec)
    #: the job's own report of its end (``POST /v1/jobs/{name}/end``): {"outcome": "completed" | "failed",
    #: "message": str, "at": the daemon's clock, "by": the token's name}; the next cycle acts on it
    end_report: Optional[dict] = None

    @classmethod
    def from_row(cls, r: sqlite3.Row) -> "JobRecord":
        end = r["end_report"] if "end_report" in r.keys() else None
        return cls(r["name"], json.loads(r["spec"]), JobState(r["state"]), r["submitted_at"], r["arrives_at"], r["admitted_at"],
                   r["started_at"], r["ended_at"], r["slo_s"], r["reason"], r["cancel_requested_at"], r["seq"], r["iterations"],
                   r["last_iteration_s"], r["slo_misses"], bool(r["prompt_tokens_from_trace"]), _end_report(end))

    def as_dict(self) -> dict:
        return {"name": self.name, "state": self.state.value, "submitted_at": self.submitted_at, "arrives_at": self.arrives_at,
                "admitted_at": self.admitted_at, "started_at": self.started_at, "ended_at": self.ended_at, "slo_s": self.slo_s,
                "reason": self.reason, "cancel_requested": self.cancel_requested_at is not None, "iterations": self.iterations,
                "last_iteration_s": self.last_iteration_s, "slo_misses": self.slo_misses, "spec": self.spec,
                "end_reported": None if self.end_report is None else {k: self.end_report[k] for k in ("outcome", "message", "at")}}


END_OUTCOMES = ("completed", "failed")


def _end_report(text: Optional[str]) -> Optional[dict]:
    """A stored end report (checked when the state file is opened, :meth:`Store.check_contents`)."""
    if text is None:
        return None
    d = json.loads(text)
    return d if isinstance(d, dict) and d.get("outcome") in END_OUTCOMES else None


@dataclass(frozen=True)
class PlanRecord:
    id: int
    created_at: float
    cycle: int
    kind: str
    status: str
    cost_per_hour: float
    decision_id: Optional[int]
    placement: dict
    doc: dict

    @classmethod
    def from_row(cls, r: sqlite3.Row) -> "PlanRecord":
        return cls(r["id"], r["created_at"], r["cycle"], r["kind"], r["status"], r["cost_per_hour"], r["decision_id"],
                   json.loads(r["placement"]), json.loads(r["doc"]))


DecisionKind = Literal["admit", "reject", "wait", "departure", "drift", "repair", "reoptimise", "realloc", "restore"]
"""What a decision is about (the ``kind`` of its row; ``GET /v1/decisions?kind=`` takes these only)."""


class _DecisionKeys(TypedDict):
    cycle: int
    at: float
    kind: DecisionKind
    outcome: str


class DecisionRow(_DecisionKeys, total=False):
    """One row of the ``decisions`` table as :meth:`Store.insert_decision` takes it (absent keys: empty / NULL)."""

    triggers: list[str]
    jobs: list[str]
    cost_before: Optional[float]
    cost_after: Optional[float]
    gain_usd: Optional[float]
    migration_usd: Optional[float]
    solver: dict[str, Any]
    reasons: list[str]
    plan_id: Optional[int]
    dry_run: bool


def _rowid(cur: sqlite3.Cursor) -> int:
    """The id of the row an INSERT just made (sqlite3 types ``lastrowid`` as optional: it is None only before any INSERT)."""
    if cur.lastrowid is None:
        raise RuntimeError("sqlite3 reported no row id after an INSERT")
    return int(cur.lastrowid)


def _dumps(obj: Any) -> str:
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), default=str)


class Store(SQLiteFile):
    """Thread-safe access to one state file (a connection per thread)."""

    def __init__(self, path: str | Path, audit_keep: int = AUDIT_KEEP) -> None:
        super().__init__(path)
        self.audit_keep = audit_keep
        from executor.dbschema import verify

        try:
            c = self.conn()
            c.execute("SELECT count(*) FROM sqlite_master").fetchone()  # (a lock or an unwritable -shm shows here, said as such)
            verify(c, self.path, _schema_names(), "--state", "pass another --state file (a new one is created)")
        except UserError as exc:
            raise StateFileError(exc.problems[0].message) from None
        except sqlite3.DatabaseError as exc:
            raise _open_error(self.path, exc) from None
        try:
            self._init_schema()
        except sqlite3.DatabaseError as exc:
            raise _open_error(self.path, exc) from None

    def _init_schema(self) -> None:
        with self.tx() as c:
            self.run_ddl(c, DDL)
            have = {r[1] for r in c.execute("PRAGMA table_info(jobs)")}
            for column, kind in (("submitted_by", "TEXT"), ("telemetry_iteration", "INTEGER"), ("telemetry_time_s", "REAL"),
                                 ("prompt_tokens_from_trace", "INTEGER NOT NULL DEFAULT 0"), ("end_report", "TEXT")):
                if column not in have:
                    c.execute(f"ALTER TABLE jobs ADD COLUMN {column} {kind}")
            row = c.execute("SELECT value FROM meta WHERE key='schema_version'").fetchone()
            if row is None:
                c.execute("INSERT INTO meta(key, value) VALUES ('schema_version', ?)", (_dumps(SCHEMA_VERSION),))
            elif json.loads(row["value"]) != SCHEMA_VERSION:
                raise StateFileError(f"{self.path} has state schema version {row['value']}, this rl-planner uses {SCHEMA_VERSION}; "
                                     "use a new --state file or the rl-planner release that wrote it")

    # ------------------------------------------------------------------ contents
    def check_contents(self) -> None:
        """What the daemon reads back from the state file, checked once when it opens it: the meta
        and kv values, every job's spec and state and every plan are strict JSON (no NaN), the cluster
        a scenario, and the specs of jobs still live valid job specs. A file edited by hand (or
        damaged) is refused here with what is wrong, not met as a traceback in every cycle
        (StateFileError). Nothing it holds is ever executed: every value is JSON text."""
        from pydantic import ValidationError

        from planner.daemon.lifecycle import JobState
        from planner.schema.scenario import JobSpec, Scenario

        from planner import safeload
        from planner.errors import UserError

        whole = safeload.with_limits(max_bytes=1 << 30)  # (a row's size is SQLite's: a plan of 20,000 jobs is tens of MB)

        def strict(text: Any, what: str) -> Any:  # (the readers' strict JSON: no NaN, each key once, depth bounded)
            try:
                return safeload.parse_json(text if isinstance(text, str) else "", what, limits=whole)
            except UserError as exc:
                raise StateFileError(f"{self.path}: {what} is not valid JSON ({exc.problems[0].message[:120]})") from None

        def valid(model, data: Any, what: str) -> None:
            try:
                model.model_validate(data)
            except ValidationError as exc:
                first = exc.errors()[0]
                where = ".".join(str(x) for x in first["loc"])
                raise StateFileError(f"{self.path}: {what} is not valid ({where}: {first['msg'][:160]})") from None

        c = self.conn()
        try:
            for table in ("meta", "kv"):
                for row in c.execute(f"SELECT key, value FROM {table}"):
                    value = strict(row["value"], f"its {table} value '{str(row['key'])[:80]}'")
                    if table == "meta" and row["key"] == "cluster":
                        valid(Scenario, value, "its cluster")
                    if table == "kv":
                        self._check_kv(row["key"], value)
            for row in c.execute("SELECT name, spec, state, end_report FROM jobs"):
                what = f"job '{str(row['name'])[:80]}'"
                spec = strict(row["spec"], f"the spec of {what}")
                if row["end_report"] is not None:
                    end = strict(row["end_report"], f"the end report of {what}")
                    if not (isinstance(end, dict) and end.get("outcome") in END_OUTCOMES and isinstance(end.get("message"), str)
                            and isinstance(end.get("at"), (int, float)) and not isinstance(end.get("at"), bool)):
                        raise StateFileError(f"{self.path}: the end report of {what} is not an object with outcome "
                                             f"({' or '.join(END_OUTCOMES)}), message and at; restore the file from a copy, or "
                                             f"clear it (UPDATE jobs SET end_report=NULL WHERE name=...)")
                try:
                    state = JobState(row["state"])
                except ValueError:
                    raise StateFileError(f"{self.path}: {what} is in no known state ({str(row['state'])[:40]!r})") from None
                if not state.terminal:
                    valid(JobSpec, spec, f"the spec of {what}")
            for row in c.execute("SELECT id, placement, doc FROM plans"):
                strict(row["placement"], f"plan {row['id']}'s placement")
                strict(row["doc"], f"plan {row['id']}'s document")
        except sqlite3.DatabaseError as exc:
            raise StateFileError(f"{self.path} is not a usable SQLite state file ({exc})") from None

    def _kv_fix(self, key: Any) -> str:
        """How to get past a kv value the daemon cannot use."""
        import shlex

        return (f"restore the state file from a copy, or delete that value (sqlite3 {shlex.quote(str(self.path))} "
                f"\"DELETE FROM kv WHERE key='{key}'\"; the daemon then starts it afresh)")

    def _check_kv(self, key: Any, value: Any) -> None:
        """A kv value the loop reads back is of the JSON type it wrote (``cycle: "abc"`` was an internal
        error in the first cycle); keys it does not know are left alone."""
        from pydantic import ValidationError

        shape = _kv_shapes().get(key) if isinstance(key, str) else None
        if shape is None:
            return
        adapter, expected = shape
        try:
            adapter.validate_python(value)
        except ValidationError as exc:
            first = exc.errors()[0]
            where = ".".join(str(x) for x in first["loc"])
            raise StateFileError(f"{self.path}: its kv value '{key}' is not {expected}"
                                 f" ({where + ': ' if where else ''}{first['msg'][:160]})", self._kv_fix(key)) from None

    # ------------------------------------------------------------------ meta / kv
    def get_meta(self, key: str, default: Any = None) -> Any:
        row = self.conn().execute("SELECT value FROM meta WHERE key=?", (key,)).fetchone()
        return json.loads(row["value"]) if row else default

    def set_meta(self, c: sqlite3.Connection, key: str, value: Any) -> None:
        c.execute("INSERT INTO meta(key, value) VALUES (?, ?) ON CONFLICT(key) DO UPDATE SET value=excluded.value", (key, _dumps(value)))

    def get_kv(self, key: str, default: Any = None, c: sqlite3.Connection | None = None) -> Any:
        """The value under ``key`` (``default`` when there is none), checked as :meth:`check_contents`
        checks it at open: the file may be edited while the daemon runs, or a standby takes over a file
        another daemon wrote since it opened it (StateFileError naming the key and the fix, not a
        TypeError in the loop or a 500 from the API)."""
        row = (c or self.conn()).execute("SELECT value FROM kv WHERE key=?", (key,)).fetchone()
        if row is None:
            return default
        try:
            value = json.loads(row["value"], parse_constant=_no_constant)
        except (TypeError, ValueError):
            raise StateFileError(f"{self.path}: its kv value '{key}' is not valid JSON", self._kv_fix(key)) from None
        self._check_kv(key, value)
        return value

    def set_kv(self, c: sqlite3.Connection, key: str, value: Any) -> None:
        c.execute("INSERT INTO kv(key, value) VALUES (?, ?) ON CONFLICT(key) DO UPDATE SET value=excluded.value", (key, _dumps(value)))

    # ------------------------------------------------------------------ jobs
    def submit_job(self, name: str, spec: dict, now: float, arrives_at: float, slo_s: float | None, *,
                   by: str | None = None, max_live: int | None = None, prompt_tokens_from_trace: bool = False) -> JobRecord:
        """Insert a pending job; ``by`` (a token's name) may have at most ``max_live`` live jobs (429 beyond);
        ``prompt_tokens_from_trace``: the spec's prompt_tokens is the mean of its prompt_lengths trace file."""
        with self.tx() as c:
            row = c.execute("SELECT state FROM jobs WHERE name=?", (name,)).fetchone()
            if row is not None:
                raise Conflict(f"a job named '{name}' already exists (state {row['state']})", "name",
                               "job names are unique for the life of the state file: choose another name")
            if by is not None and max_live is not None:
                live = [s.value for s in JobState if not s.terminal]
                n = c.execute(f"SELECT COUNT(*) FROM jobs WHERE submitted_by=? AND state IN ({','.join('?' * len(live))})",
                              (by, *live)).fetchone()[0]
                if n >= max_live:
                    raise TooMany(f"token '{by}' has {n} live jobs; the limit is {max_live}", "name",
                                  "wait for some to end or cancel them, or raise the daemon's --max-jobs-per-token")
            seq = c.execute("SELECT COALESCE(MAX(seq), 0) + 1 FROM jobs").fetchone()[0]
            c.execute("INSERT INTO jobs(name, spec, state, submitted_at, arrives_at, slo_s, reason, seq, submitted_by, "
                      "prompt_tokens_from_trace) VALUES (?,?,?,?,?,?,?,?,?,?)",
                      (name, _dumps(spec), JobState.PENDING.value, now, arrives_at, slo_s, "submitted", seq, by,
                       int(prompt_tokens_from_trace)))
            c.execute("INSERT INTO job_events(job, at, from_state, to_state, reason) VALUES (?,?,?,?,?)",
                      (name, now, None, JobState.PENDING.value, "submitted"))
        return self.get_job(name)

    def request_revive(self, node: str, now: float) -> None:
        """An operator's request that the loop return ``node`` to service (kv ``revive_nodes``; the loop
        takes it at its next cycle: :meth:`take_revive_requests`)."""
        with self.tx() as c:
            asked = self.get_kv("revive_nodes", {}, c)
            asked[node] = now
            self.set_kv(c, "revive_nodes", asked)

    def take_revive_requests(self) -> dict[str, float]:
        """The revive requests not yet taken (node -> when asked), removed as they are read."""
        with self.tx() as c:
            asked = self.get_kv("revive_nodes", {}, c)
            if asked:
                c.execute("DELETE FROM kv WHERE key='revive_nodes'")
        return asked

    def request_cancel(self, name: str, now: float) -> JobRecord:
        with self.tx() as c:
            row = c.execute("SELECT state, cancel_requested_at FROM jobs WHERE name=?", (name,)).fetchone()
            if row is None:
                raise NotFound(f"no job named '{name}'", "name", "list jobs with GET /v1/jobs")
            state = JobState(row["state"])
            if lifecycle.CANCEL_TARGET[state] is None:
                raise Conflict(f"job '{name}' is already {state.value}; only pending, admitted or running jobs can be cancelled", "name")
            if row["cancel_requested_at"] is None:
                c.execute("UPDATE jobs SET cancel_requested_at=? WHERE name=?", (now, name))
        return self.get_job(name)

    def report_end(self, name: str, outcome: str, message: str, now: float, by: Optional[str] = None) -> JobRecord:
        """The job's own report that it ended (its launcher or trainer: ``completed`` or ``failed``),
        kept until the next cycle moves it to that state and takes it out of the plan. Only a running
        job (or one being cancelled) can end: a pending or admitted one has not been confirmed running.
        The same report again is accepted (a retried post); another outcome after a first is refused."""
        if outcome not in END_OUTCOMES:
            raise Conflict(f"outcome '{outcome}' is not one of {', '.join(END_OUTCOMES)}", "outcome", "send completed or failed")
        with self.tx() as c:
            row = c.execute("SELECT state, end_report FROM jobs WHERE name=?", (name,)).fetchone()
            if row is None:
                raise NotFound(f"no job named '{name}'", "name", "list jobs with GET /v1/jobs")
            state = JobState(row["state"])
            if state.terminal:
                raise Conflict(f"job '{name}' is already {state.value}", "name", "a job ends once; nothing to report")
            if state not in (JobState.RUNNING, JobState.CANCELLING):
                raise Conflict(f"job '{name}' is {state.value}, not running: the executor has not confirmed it runs", "name",
                               "report its end once GET /v1/jobs/{name} says running; a job that never started is "
                               "cancelled with DELETE /v1/jobs/{name}".replace("{name}", name))
            before = _end_report(row["end_report"])
            if before is not None:
                if before["outcome"] != outcome:
                    raise Conflict(f"job '{name}' already reported that it {before['outcome']}", "outcome",
                                   "a job reports one end; the next cycle acts on the first")
                return self.get_job(name)
            c.execute("UPDATE jobs SET end_report=? WHERE name=?",
                      (_dumps({"outcome": outcome, "message": message, "at": now, "by": by}), name))
        return self.get_job(name)

    def get_job(self, name: str) -> JobRecord:
        row = self.conn().execute("SELECT * FROM jobs WHERE name=?", (name,)).fetchone()
        if row is None:
            raise NotFound(f"no job named '{name}'", "name", "list jobs with GET /v1/jobs")
        return JobRecord.from_row(row)

    def job_state(self, name: str) -> Optional[JobState]:
        row = self.conn().execute("SELECT state FROM jobs WHERE name=?", (name,)).fetchone()
        return JobState(row["state"]) if row else None

    def list_jobs(self, states: list[str] | None = None, limit: int = 1000, offset: int = 0,
                  c: sqlite3.Connection | None = None) -> list[JobRecord]:
        q, args = "SELECT * FROM jobs", list[Any]()
        if states:
            q += f" WHERE state IN ({','.join('?' * len(states))})"
            args += list(states)
        q += " ORDER BY seq LIMIT ? OFFSET ?"
        args += [limit, offset]
        return [JobRecord.from_row(r) for r in (c or self.conn()).execute(q, args)]

    def live_jobs(self, c: sqlite3.Connection | None = None) -> list[JobRecord]:
        """Every job that is not terminal, in submission order."""
        live = [s.value for s in JobState if not s.terminal]
        return self.list_jobs(live, limit=10**9, c=c)

    def slo_attainment(self) -> float:
        """Running jobs whose last measured iteration met their SLO, as a fraction (1.0 when no running job
        has measured one yet): ``planner_slo_attainment_ratio``, from the state."""
        r = self.conn().execute("SELECT COUNT(*) AS n, COALESCE(SUM(last_iteration_s <= slo_s * (1 + 1e-9)), 0) AS met FROM jobs "
                                "WHERE state=? AND slo_s IS NOT NULL AND last_iteration_s IS NOT NULL",
                                (JobState.RUNNING.value,)).fetchone()
        return r["met"] / r["n"] if r["n"] else 1.0

    def count_jobs(self) -> dict[str, int]:
        out = {s.value: 0 for s in JobState}
        for r in self.conn().execute("SELECT state, COUNT(*) AS n FROM jobs GROUP BY state"):
            out[r["state"]] = r["n"]
        return out

    def transition(self, c: sqlite3.Connection, name: str, to: JobState, reason: str, now: float) -> None:
        """A legal state change and its event row (inside the caller's transaction)."""
        row = c.execute("SELECT state FROM jobs WHERE name=?", (name,)).fetchone()
        if row is None:
            raise NotFound(f"no job named '{name}'")
        src = JobState(row["state"])
        lifecycle.check(name, src, to)
        sets = ["state=?", "reason=?"]
        args: list[Any] = [to.value, reason]
        if to is JobState.ADMITTED:
            sets.append("admitted_at=?")
            args.append(now)
        elif to is JobState.RUNNING:
            sets.append("started_at=COALESCE(started_at, ?)")
            args.append(now)
        elif to.terminal:
            sets.append("ended_at=?")
            args.append(now)
        c.execute(f"UPDATE jobs SET {', '.join(sets)} WHERE name=?", (*args, name))
        c.execute("INSERT INTO job_events(job, at, from_state, to_state, reason) VALUES (?,?,?,?,?)", (name, now, src.value, to.value, reason))

    def record_iterations(self, c: sqlite3.Connection, name: str, total: int, last_iteration_s: float, misses: int) -> None:
        """The job has completed ``total`` iterations; the newest took ``last_iteration_s``; ``misses`` more missed the SLO."""
        c.execute("UPDATE jobs SET iterations=MAX(iterations, ?), last_iteration_s=?, slo_misses=slo_misses+? WHERE name=?",
                  (total, last_iteration_s, misses, name))

    def set_job_reason(self, c: sqlite3.Connection, name: str, reason: str) -> None:
        c.execute("UPDATE jobs SET reason=? WHERE name=?", (reason, name))

    def job_events(self, name: str) -> list[dict]:
        return [dict(r) for r in self.conn().execute("SELECT at, from_state, to_state, reason FROM job_events WHERE job=? ORDER BY id",
                                                     (name,))]

    # ------------------------------------------------------------------ audit
    def add_audit(self, entries: list) -> None:
        """Append audit rows (:class:`planner.daemon.audit.AuditEntry`) in one transaction."""
        with self.tx() as c:
            c.executemany("INSERT INTO audit(at, identity, client, method, path, job, status) VALUES (?,?,?,?,?,?,?)",
                          [(e.at, e.identity, e.client, e.method, e.path, e.job, e.status) for e in entries])
            # retention: refused calls (a 401 flood) must not grow the file without end; the newest AUDIT_KEEP rows stay
            last = c.execute("SELECT max(id) FROM audit").fetchone()[0] or 0
            if last > self.audit_keep and last % AUDIT_PRUNE_EVERY < len(entries) + 1:
                c.execute("DELETE FROM audit WHERE id <= ?", (last - self.audit_keep,))

    def audit(self, since_id: int = 0, limit: int = 100) -> list[dict]:
        return [dict(r) for r in self.conn().execute("SELECT * FROM audit WHERE id > ? ORDER BY id LIMIT ?", (since_id, limit))]

    # ------------------------------------------------------------------ telemetry
    def add_telemetry(self, job: str, wall: float, time_s: float, iteration: int, body: dict | str) -> int:
        with self.tx() as c:
            cur = c.execute("INSERT INTO telemetry(job, received_wall, time_s, iteration, body) VALUES (?,?,?,?,?)",
                            (job, wall, time_s, iteration, body if isinstance(body, str) else _dumps(body)))
            return _rowid(cur)

    def telemetry_after(self, cursor: int, limit: int = 100000) -> list[tuple[int, str, str]]:
        """(id, job, JSON text) of the snapshots after ``cursor``, oldest first."""
        rows = self.conn().execute("SELECT id, job, body FROM telemetry WHERE id > ? ORDER BY id LIMIT ?", (cursor, limit))
        return [(r["id"], r["job"], r["body"]) for r in rows]

    def prune_telemetry(self, c: sqlite3.Connection, cursor: int, older_than_wall: float) -> int:
        """Delete the consumed snapshots older than ``older_than_wall``, all but the newest row: ids are rowids,
        which SQLite numbers from the largest one left, so an emptied table would number the next post 1, at or
        below the loop's cursor, and the loop would skip every post up to it."""
        return c.execute("DELETE FROM telemetry WHERE id <= ? AND received_wall < ? AND id < (SELECT MAX(id) FROM telemetry)",
                         (cursor, older_than_wall)).rowcount

    def telemetry_max_id(self) -> int:
        """The newest snapshot's id (0: none stored)."""
        return int(self.conn().execute("SELECT COALESCE(MAX(id), 0) FROM telemetry").fetchone()[0])

    # ------------------------------------------------------------------ reallocation contexts
    def put_realloc_context(self, job: str, wall: float, time_s: float, iteration: int, body: str) -> None:
        """Keep ``body`` (validated context JSON text) as the job's latest context; 404 for an unknown job, 409 for one
        that is not admitted or running (as telemetry)."""
        with self.tx() as c:
            row = c.execute("SELECT state FROM jobs WHERE name=?", (job,)).fetchone()
            if row is None:
                raise NotFound(f"no job named '{job}'", "name", "post contexts only for jobs submitted to this daemon")
            if row["state"] not in (JobState.ADMITTED.value, JobState.RUNNING.value):
                raise Conflict(f"job '{job}' is {row['state']}; a reallocation context is accepted only for admitted or running jobs",
                               "name")
            c.execute("INSERT INTO realloc_ctx(job, received_wall, time_s, iteration, body) VALUES (?,?,?,?,?) "
                      "ON CONFLICT(job) DO UPDATE SET received_wall=excluded.received_wall, time_s=excluded.time_s, "
                      "iteration=excluded.iteration, body=excluded.body", (job, wall, time_s, iteration, body))

    def realloc_context(self, job: str) -> Optional[dict]:
        """The job's latest posted context: ``{"time_s", "iteration", "received_wall", "data"}`` (data: the parsed JSON), or None."""
        row = self.conn().execute("SELECT * FROM realloc_ctx WHERE job=?", (job,)).fetchone()
        if row is None:
            return None
        return {"time_s": row["time_s"], "iteration": row["iteration"], "received_wall": row["received_wall"],
                "data": json.loads(row["body"])}

    def prune_realloc_contexts(self, c: sqlite3.Connection) -> int:
        """Drop the contexts of jobs that are no longer admitted or running."""
        return c.execute("DELETE FROM realloc_ctx WHERE job NOT IN (SELECT name FROM jobs WHERE state IN (?, ?))",
                         (JobState.ADMITTED.value, JobState.RUNNING.value)).rowcount

    def telemetry_count(self) -> int:
        return int(self.conn().execute("SELECT COUNT(*) FROM telemetry").fetchone()[0])

    # ------------------------------------------------------------------ plans
    def insert_plan(self, c: sqlite3.Connection, *, created_at: float, cycle: int, kind: str, status: str, cost_per_hour: float,
                    decision_id: int | None, placement: dict, doc: dict) -> int:
        cur = c.execute("INSERT INTO plans(created_at, cycle, kind, status, cost_per_hour, decision_id, placement, doc) "
                        "VALUES (?,?,?,?,?,?,?,?)",
                        (created_at, cycle, kind, status, cost_per_hour, decision_id, _dumps(placement), _dumps(doc)))
        return _rowid(cur)

    def set_plan_status(self, c: sqlite3.Connection, plan_id: int, status: str) -> None:
        c.execute("UPDATE plans SET status=? WHERE id=?", (status, plan_id))

    def current_plan(self, c: sqlite3.Connection | None = None) -> Optional[PlanRecord]:
        """The newest target still in force (applying, applied, or recorded in dry-run)."""
        row = (c or self.conn()).execute(
            f"SELECT * FROM plans WHERE status IN ({','.join('?' * len(PLAN_LIVE))}) ORDER BY id DESC LIMIT 1", PLAN_LIVE).fetchone()
        return PlanRecord.from_row(row) if row else None

    def plan(self, plan_id: int) -> PlanRecord:
        row = self.conn().execute("SELECT * FROM plans WHERE id=?", (plan_id,)).fetchone()
        if row is None:
            raise NotFound(f"no plan {plan_id}", "plan_id")
        return PlanRecord.from_row(row)

    def prune_plans(self, c: sqlite3.Connection, keep: int) -> int:
        """Delete superseded and failed plans older than the newest ``keep`` plans; the plan in force stays."""
        row = c.execute("SELECT id FROM plans ORDER BY id DESC LIMIT 1 OFFSET ?", (keep - 1,)).fetchone()
        if row is None:
            return 0
        return c.execute("DELETE FROM plans WHERE id < ? AND status IN ('superseded', 'failed')", (row["id"],)).rowcount

    def plans_with_status(self, status: str) -> list[PlanRecord]:
        return [PlanRecord.from_row(r) for r in self.conn().execute("SELECT * FROM plans WHERE status=? ORDER BY id", (status,))]

    # ------------------------------------------------------------------ decisions
    def insert_decision(self, c: sqlite3.Connection, d: DecisionRow) -> int:
        cur = c.execute(
            "INSERT INTO decisions(cycle, at, kind, triggers, outcome, jobs, cost_before, cost_after, gain_usd, migration_usd, solver, "
            "reasons, plan_id, dry_run) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
            (d["cycle"], d["at"], d["kind"], _dumps(d.get("triggers", [])), d["outcome"], _dumps(d.get("jobs", [])), d.get("cost_before"),
             d.get("cost_after"), d.get("gain_usd"), d.get("migration_usd"), _dumps(d.get("solver", {})), _dumps(d.get("reasons", [])),
             d.get("plan_id"), int(bool(d.get("dry_run")))))
        return _rowid(cur)

    def update_decision(self, c: sqlite3.Connection, decision_id: int, *, outcome: str | None = None, plan_id: int | None = None,
                        add_reason: str | None = None) -> None:
        if outcome is not None:
            c.execute("UPDATE decisions SET outcome=? WHERE id=?", (outcome, decision_id))
        if plan_id is not None:
            c.execute("UPDATE decisions SET plan_id=? WHERE id=?", (plan_id, decision_id))
        if add_reason:
            row = c.execute("SELECT reasons FROM decisions WHERE id=?", (decision_id,)).fetchone()
            reasons = json.loads(row["reasons"]) + [add_reason]
            c.execute("UPDATE decisions SET reasons=? WHERE id=?", (_dumps(reasons), decision_id))

    def decisions_with_outcome(self, kind: str, outcome: str) -> list[dict]:
        """Every decision of ``kind`` whose outcome is ``outcome``, oldest first (id, cycle, jobs)."""
        return [{"id": r["id"], "cycle": r["cycle"], "jobs": json.loads(r["jobs"])} for r in self.conn().execute(
            "SELECT id, cycle, jobs FROM decisions WHERE kind=? AND outcome=? ORDER BY id", (kind, outcome))]

    def decisions(self, since_id: int = 0, limit: int = 100, kind: str | None = None) -> list[dict]:
        q, args = "SELECT * FROM decisions WHERE id > ?", list[Any]([since_id])
        if kind:
            q += " AND kind = ?"
            args.append(kind)
        q += " ORDER BY id LIMIT ?"
        args.append(limit)
        out = []
        for r in self.conn().execute(q, args):
            d = dict(r)
            for k in ("triggers", "jobs", "solver", "reasons"):
                d[k] = json.loads(d[k])
            d["dry_run"] = bool(d["dry_run"])
            out.append(d)
        return out
