"""The in-process backend: the same workers and coordinator as on Ray, without processes.

Workers are plain objects; a call is a method call. What Ray would do to them is modelled
explicitly so that the controller's fault handling is exercised the same way:

* ``kill(worker)``: the process is gone; every later call raises :class:`WorkerLost`;
* ``freeze(worker)``: the process stops answering (every call misses its deadline and raises
  :class:`WorkerLost`) but the object lives on; ``thaw`` lets it act again, with whatever lease
  epoch it holds — the coordinator must refuse it;
* ``fail_start(worker_id)``: that worker's start-up raises (as an OOM would);
* node capacity is enforced at creation (a worker that does not fit is unplaceable: it fails at
  its start deadline, as a pending Ray actor would).

Rollout engines decode ``ticks_per_call`` iterations on every call into the backend, so requests
keep progressing while a migration runs. With ``state_path`` the whole world (coordinator and
worker objects, tensors included) is saved after every step the controller runs, before its
journal records the step done (:meth:`sync`), after a training step, and on close, so separate
CLI runs (``planner apply --backend sim`` then ``planner status``) see one cluster and the file
never lags the journal: a SQLite file with one row per worker, where a save writes only the
workers touched since the last save (a daemon's simulated cluster holds hundreds of engines and
ranks; rewriting all of them after every step is what made whole-world pickles too slow), and
only what changed in the coordinator and the world's records: the ``coord`` table holds, one row
per key, what changed since the coordinator was last written whole (a registry record, a
request, a lease, an attribute, the rejected effects, illegal transitions and commits appended
since; a row with no value deletes its key), read over the ``coordinator`` row at load
(:mod:`executor.backends.simsave`). Once those rows outweigh the coordinator's own, on close,
and at the end of ``planner apply``, a save writes it whole again and empties the table, so a
closed file holds the world as one row per part. Files without the table (earlier releases) are
read as they are; an rl-planner that knows no ``coord`` table refuses a file that holds one,
instead of reading a stale coordinator. Every save is one transaction: a kill leaves the old
save or the new one, never a mix. WAL with ``synchronous=NORMAL``: a killed process loses nothing
that was saved; what a step did before a kill is lost with it, and the journal re-runs the step.
Every row is a :mod:`executor.safestate` blob (typed JSON plus raw tensor bytes, versioned,
checksummed: reading a file never runs code it names); the file is created mode 0600. A file of
another format (the pickles of older releases), damaged, or crafted is refused with exit status 2.
"""

from __future__ import annotations

import sqlite3
from urllib.parse import quote
from pathlib import Path
from typing import Any, Callable, Optional

from estimators.errors import Problem, UserError
from estimators.host import create_private
from executor import capacity, safestate
from executor.backends import simsave
from executor.backends.base import Deadlines, StartFailed, WorkerLost
from executor.state import Layout, Node
from executor.workers.coordinator import Changes, Coordinator
from executor.workers.factory import make_worker


TABLES = {"world": "table", "workers": "table", "coord": "table"}
MOVE_AWAY = ("move the file away (the simulated cluster it held is lost) and apply again; if an older rl-planner wrote it, "
             "finish or roll back its apply with that release first")
MAX_BLOB_BYTES = 1 << 30  # one saved record (a stand-in trainer rank of 2^24 parameters and its Adam state is ~256 MB)
WORKER_CLASSES = ("RolloutEngine", "TrainerRank", "ServiceWorker", "LMEngine", "LMTrainerRank")
COMPACT_MIN_BYTES = 1 << 18  # the coord rows (executor.backends.simsave) a save may leave beside a small coordinator


def _int(v: Any, lo: int, hi: int) -> bool:
    return type(v) is int and lo <= v <= hi


def check_nodes(nodes: dict) -> None:
    """A loaded world's nodes: names, types and sizes as a target's nodes have them (executor.target.NodeIn)."""
    from executor.target import MAX_NODES

    if len(nodes) > MAX_NODES:
        raise safestate.BadState(f"it holds {len(nodes):,} nodes, more than {MAX_NODES:,}")
    for key, n in nodes.items():
        ok = (isinstance(key, str) and n.name == key and isinstance(n.gpu_type, str) and 0 < len(n.gpu_type) <= 200
              and _int(n.gpus, 0, 64) and _num(n.dram_gb, 0.0, 1e6) and n.dram_gb > 0
              and type(n.alive) is bool)
        if not ok:
            raise safestate.BadState(f"node {str(key)[:80]!r} is malformed (name, gpu_type, gpus 0-64, dram_gb > 0, alive)")


def check_creates(creates: Any) -> None:
    if not (type(creates) is dict and all(isinstance(k, str) and _int(v, 0, 1 << 40) for k, v in creates.items())):
        raise safestate.BadState("its record of created workers is malformed")


def check_worker(wid: Any, rec: Any, nodes: dict, lenient: bool = False) -> None:
    """A worker row: (create arguments naming a node of the world, a worker object, alive), each field
    of the type and range the backend and the worker's methods use (:func:`_worker_problem`).
    ``lenient`` (observe-only, the core install): a worker whose class needs torch is a
    :class:`safestate.Unloaded` naming one of the worker classes (its object's fields are not checked)."""
    if not (isinstance(rec, tuple) and len(rec) == 3 and type(rec[0]) is dict and type(rec[2]) is bool):
        raise safestate.BadState(f"the record of worker {str(wid)[:80]!r} is malformed")
    args, obj = rec[0], rec[1]
    if lenient and isinstance(obj, safestate.Unloaded):
        if obj.name not in WORKER_CLASSES:
            raise safestate.BadState(f"the record of worker {str(wid)[:80]!r} holds a {str(obj.name)[:80]}, not a worker")
    elif type(obj).__name__ not in WORKER_CLASSES or safestate.allowed_class(type(obj).__name__, load=False) is not type(obj):
        raise safestate.BadState(f"the record of worker {str(wid)[:80]!r} holds a {type(obj).__name__}, not a worker")
    w = args.get("worker")
    if not (type(w) is dict and w.get("id") == wid and isinstance(w.get("node"), str) and _int(w.get("gpus", 0), 0, 64)):
        raise safestate.BadState(f"the create arguments of worker {str(wid)[:80]!r} are malformed (id, node, gpus 0-64)")
    why = _worker_problem(wid, rec, nodes)
    if why:
        raise safestate.BadState(f"the record of worker {str(wid)[:80]!r} is malformed: {why}")


MAX_EPOCH = 1 << 62  # lease epochs and counters a saved coordinator may hold
# A saved coordinator's attributes (executor.workers.coordinator.Coordinator.__getstate__); those in COORD_OPTIONAL may be
# absent (older saves).
COORD_FIELDS = ("next_epoch", "leases", "active", "registry", "requests", "rejected", "checkpoints", "commits", "generation",
                "dead_nodes", "illegal", "parked", "pgs", "restarts", "_store", "writer")
COORD_OPTIONAL = ("parked", "pgs", "restarts", "_store", "writer")
_REC_STR = ("job", "gpu_type", "migration", "group", "reserves", "impl", "share", "revoked_because")


def _str_map(v: Any, ok: Callable[[Any], bool]) -> bool:
    return type(v) is dict and all(isinstance(k, str) and ok(x) for k, x in v.items())


def _num(v: Any, lo: float, hi: float) -> bool:
    import math

    # (an int is compared exactly: math.isfinite of a 400-digit integer raises OverflowError)
    return type(v) in (int, float) and (type(v) is int or math.isfinite(v)) and lo <= v <= hi


def _registry_record_problem(wid: str, r: Any) -> str:
    """What is wrong with one registry record (a worker the coordinator knows), or ''."""
    from executor.state import ROLES
    from executor.steps import WORKER_TRANSITIONS

    if type(r) is not dict:
        return "is not a mapping"
    checks = [("id", r.get("id") == wid), ("component", isinstance(r.get("component"), str)), ("node", isinstance(r.get("node"), str)),
              ("role", r.get("role") in ROLES), ("gpus", _int(r.get("gpus"), 0, 64)), ("dram_gb", _num(r.get("dram_gb"), 0, 1e6)),
              ("index", _int(r.get("index"), 0, MAX_EPOCH)), ("generation", _int(r.get("generation", 0), 0, MAX_EPOCH)),
              ("status", r.get("status", "running") in WORKER_TRANSITIONS),
              ("layout", _str_map(r.get("layout", {}), lambda x: _int(x, 1, 1 << 20)) and set(r.get("layout", {})) <= {"tp", "pp", "dp"}),
              ("model", type(r.get("model", {})) is dict), ("engine", type(r.get("engine", {})) is dict)]
    checks += [(k, isinstance(r.get(k, ""), str)) for k in _REC_STR]
    bad = [k for k, ok in checks if not ok]
    return f"field {bad[0]!r} is missing or of the wrong type" if bad else ""


def _layout_ok(v: Any) -> bool:
    """A layout as create arguments and registry records hold it: {tp, pp, dp} -> 1..2^20."""
    return _str_map(v, lambda x: _int(x, 1, 1 << 20)) and set(v) <= {"tp", "pp", "dp"}


def _wrong(where: str, bad: list[str]) -> str:
    return f"{where} field {bad[0]!r} is missing, of the wrong type or out of range" if bad else ""


def _args_problem(wid: str, args: dict, nodes: dict) -> str:
    """What is wrong with a worker's saved create arguments (what capacity, tick and status read), or ''."""
    from executor.state import ROLES

    w = args["worker"]
    if w["node"] not in nodes:
        return f"its create arguments name node {w['node'][:80]!r}, which is not in the cluster"
    checks = [("worker.dram_gb", _num(w.get("dram_gb"), 0, 1e6)), ("worker.component", isinstance(w.get("component", ""), str)),
              ("worker.index", _int(w.get("index", 0), 0, MAX_EPOCH)), ("worker.generation", _int(w.get("generation", 0), 0, MAX_EPOCH)),
              ("worker.share", isinstance(w.get("share", ""), str)), ("role", args.get("role") in ROLES),
              ("layout", _layout_ok(args.get("layout", {}))), ("model", type(args.get("model") or {}) is dict),
              ("engine", type(args.get("engine") or {}) is dict)]
    checks += [(k, isinstance(args.get(k, ""), str)) for k in _REC_STR + ("init",)]
    return _wrong("its create arguments'", [k for k, ok in checks if not ok])


def _req_ok(r: Any) -> bool:
    """A request an engine holds (executor.workers.engine.Req)."""
    from executor.workers.engine import Req

    def toks(v: Any) -> bool:
        return type(v) is list and all(_int(t, -MAX_EPOCH, MAX_EPOCH) for t in v)

    return (type(r) is Req and isinstance(r.id, str) and toks(r.prompt) and _int(r.seed, -MAX_EPOCH, MAX_EPOCH)
            and _int(r.target_len, 0, MAX_EPOCH) and toks(r.output) and _int(r.turns_done, 0, MAX_EPOCH) and _int(r.age, 0, MAX_EPOCH)
            and _str_map(r.sampling, lambda x: True))


def _engine_checks(st: dict) -> list[tuple[str, bool]]:
    from collections import OrderedDict

    from executor.workers.engine import EngineConfig

    cfg = st.get("cfg")
    cfg_ok = (type(cfg) is EngineConfig and _int(cfg.max_batch, 1, 1 << 20) and _int(cfg.cache_blocks, 0, 1 << 40)
              and _int(cfg.progress_every, 1, 1 << 20) and _int(cfg.tokens_per_tick, 1, 1 << 20))
    return [("cfg", cfg_ok), ("pending", type(st.get("pending")) is list and all(_req_ok(r) for r in st["pending"])),
            ("running", _str_map(st.get("running"), _req_ok) and all(k == r.id for k, r in st["running"].items())),
            ("cache", type(st.get("cache")) is OrderedDict), ("admitting", type(st.get("admitting")) is bool),
            ("decoding", type(st.get("decoding")) is bool),
            ("finished", type(st.get("finished")) is list and all(isinstance(x, str) for x in st["finished"])),
            ("refused", type(st.get("refused")) is list and all(isinstance(x, str) for x in st["refused"])),
            ("cache_hits_tokens", _int(st.get("cache_hits_tokens"), 0, MAX_EPOCH)),
            ("_seen_done", type(st.get("_seen_done")) is set and all(isinstance(x, str) for x in st["_seen_done"])),
            ("_since_progress", _int(st.get("_since_progress"), 0, MAX_EPOCH)),
            ("weights_version", _int(st.get("weights_version", 0), 0, MAX_EPOCH))]


def _object_problem(wid: str, obj: Any) -> str:
    """What is wrong with a loaded worker object's fields (those its methods and the backend read), or ''."""
    from executor.state import Layout

    cls, st = type(obj), vars(obj)
    shadow = sorted(k for k in st if callable(getattr(cls, k, None)) or isinstance(getattr(cls, k, None), property))
    if shadow:
        return f"its worker object's field {shadow[0][:80]!r} is not a field of a {cls.__name__}"
    checks = [("id", st.get("id") == wid), ("epoch", _int(st.get("epoch"), 0, MAX_EPOCH))]
    name = cls.__name__
    if name == "ServiceWorker":
        checks += [("kv", _str_map(st.get("kv"), lambda x: True)), ("served", _int(st.get("served"), 0, MAX_EPOCH))]
    elif name in ("RolloutEngine", "LMEngine"):
        checks += _engine_checks(st)
        if name == "LMEngine":
            rp = st.get("reprefill")
            checks += [("model", type(st.get("model")) is dict), ("P", _str_map(st.get("P"), lambda v: type(v) is list)),
                       ("prefill_tokens", _int(st.get("prefill_tokens"), 0, MAX_EPOCH)),
                       ("reprefill", type(rp) is dict and _int(rp.get("requests"), 0, MAX_EPOCH) and _int(rp.get("tokens"), 0, MAX_EPOCH)
                        and _num(rp.get("seconds"), 0, 1e12))]
    else:  # TrainerRank, LMTrainerRank
        lay = st.get("layout")
        lay_ok = type(lay) is Layout and all(_int(getattr(lay, k, None), 1, 1 << 20) for k in ("tp", "pp", "dp"))
        checks += [("component", isinstance(st.get("component"), str)), ("layout", lay_ok),
                   ("rank", lay_ok and _int(st.get("rank"), 0, lay.tp * lay.pp * lay.dp - 1)),
                   ("step_no", _int(st.get("step_no"), 0, MAX_EPOCH)), ("loaded", type(st.get("loaded")) is bool)]
        if name == "TrainerRank":
            checks += [("params", _str_map(st.get("params"), lambda x: True)),
                       ("shards", _str_map(st.get("shards"), lambda v: _str_map(v, lambda x: True))),
                       ("lr", _num(st.get("lr", 1e-3), 0, 1e6)), ("eps", _num(st.get("eps", 1e-8), 0, 1e6))]
        else:
            checks += [("model", type(st.get("model")) is dict)]
    return _wrong("its worker object's", [k for k, ok in checks if not ok])


def _worker_problem(wid: str, rec: tuple, nodes: dict) -> str:
    """What is wrong with one worker row (create arguments, worker object) past its shape, or ''."""
    why = _args_problem(wid, rec[0], nodes)
    if why or isinstance(rec[1], safestate.Unloaded):
        return why
    return _object_problem(wid, rec[1])


def _request_problem(rid: str, r: Any) -> str:
    if type(r) is not dict:
        return "is not a mapping"
    checks = [("id", r.get("id") == rid), ("owner", isinstance(r.get("owner"), str)),
              ("output", type(r.get("output")) is list and all(type(t) is int for t in r["output"])), ("done", type(r.get("done")) is bool),
              ("finished_by", r.get("finished_by") is None or isinstance(r.get("finished_by"), str)),
              ("completions_refused", _int(r.get("completions_refused"), 0, MAX_EPOCH)), ("handoffs", _int(r.get("handoffs"), 0, MAX_EPOCH)),
              ("component", isinstance(r.get("component", ""), str))]
    bad = [k for k, ok in checks if not ok]
    return f"field {bad[0]!r} is missing or of the wrong type" if bad else ""


def check_coordinator(coord: Any) -> None:
    """A loaded coordinator: exactly its own attributes, each of the type the coordinator's methods use
    (a crafted record with a valid checksum could otherwise shadow a method, or fail an apply part-way)."""
    st = vars(coord)

    def bad(name: str, what: str) -> safestate.BadState:
        return safestate.BadState(f"its coordinator record is malformed: {name} {what}")

    missing = [k for k in COORD_FIELDS if k not in st and k not in COORD_OPTIONAL]
    if missing:
        raise bad(missing[0], "is missing")
    extra = sorted(k for k in st if k not in COORD_FIELDS and k != "_lock")
    if extra:
        raise bad(repr(extra[0])[:80], "is not a field of the coordinator")
    if st.get("_store") is not None:
        raise bad("_store", "must be empty")
    if not _int(st["next_epoch"], 1, MAX_EPOCH):
        raise bad("next_epoch", f"is {str(st['next_epoch'])[:40]!r}, not a whole number from 1")
    if not _str_map(st["leases"], lambda e: _int(e, 1, MAX_EPOCH)):
        raise bad("leases", "is not a mapping of worker id -> lease epoch")
    if st["leases"] and max(st["leases"].values()) >= st["next_epoch"]:
        raise bad("leases", "hold an epoch not below next_epoch (epochs must only grow)")
    if not _str_map(st["active"], lambda v: type(v) is list and all(isinstance(w, str) for w in v)):
        raise bad("active", "is not a mapping of component -> list of worker ids")
    if not _str_map(st["generation"], lambda g: _int(g, 0, MAX_EPOCH)):
        raise bad("generation", "is not a mapping of component -> generation number")
    if not (isinstance(st.get("writer", ""), str) and len(st.get("writer", "")) <= 512):
        raise bad("writer", "is not a text of at most 512 characters")
    if not _str_map(st["dead_nodes"], lambda v: isinstance(v, str)):
        raise bad("dead_nodes", "is not a mapping of node -> reason")
    for name in ("parked", "pgs"):
        if not _str_map(st.get(name, {}), lambda v: type(v) is dict):
            raise bad(name, "is not a mapping of name -> record")
    if not _str_map(st["checkpoints"], lambda v: True):
        raise bad("checkpoints", "is not a mapping of key -> checkpoint")
    if not (type(st["illegal"]) is list and all(isinstance(t, str) for t in st["illegal"])):
        raise bad("illegal", "is not a list of texts")
    if not (type(st["rejected"]) is list and all(type(r) is dict for r in st["rejected"])):
        raise bad("rejected", "is not a list of records")
    if not _str_map(st["commits"], lambda v: type(v) is list and all(
            type(c) is dict and isinstance(c.get("worker"), str) and _int(c.get("epoch"), 0, MAX_EPOCH)
            and _int(c.get("step"), 0, MAX_EPOCH) for c in v)):
        raise bad("commits", "is not a mapping of component -> list of {worker, epoch, step}")
    if not _int(st.get("restarts", 0), 0, MAX_EPOCH):
        raise bad("restarts", "is not a whole number from 0")
    for table, what, problem in (("registry", "worker", _registry_record_problem), ("requests", "request", _request_problem)):
        if type(st[table]) is not dict:
            raise bad(table, f"is not a mapping of {what} id -> record")
        for key, r in st[table].items():
            why = problem(key, r) if isinstance(key, str) else f"has a key that is not a {what} id"
            if why:
                raise bad(f"{table}[{str(key)[:80]!r}]", why)


class _W:
    def __init__(self, args: dict, obj: Any) -> None:
        self.args, self.obj = args, obj
        self.alive, self.frozen = True, False


class SimBackend:
    name = "sim"

    def __init__(self, nodes: dict[str, Node] | list[Node], *, deadlines: Optional[Deadlines] = None,
                 ticks_per_call: int = 0, state_path: str | Path | None = None, observe_only: bool = False) -> None:
        # observe_only: read the saved cluster to show or diff it; workers whose classes need torch
        # (absent on the core install) are loaded as safestate.Unloaded, and nothing is ever saved
        self.observe_only = observe_only
        self.readonly = observe_only  # the file is opened read-only and never created or written
        self._nodes = dict(nodes) if isinstance(nodes, dict) else {n.name: n for n in nodes}
        self.deadlines = deadlines or Deadlines()
        self.ticks_per_call = ticks_per_call
        self.state_path = Path(state_path) if state_path else None
        self.coordinator = Coordinator()
        self.workers: dict[str, _W] = {}
        self.fail_starts: set[str] = set()
        self.creates: dict[str, int] = {}  # successful creations per worker id (nothing is done twice)
        self._conn: Optional[sqlite3.Connection] = None
        self._dirty: set[str] = set()
        self._stamp: Optional[bytes] = None  # the file's save stamp as of our last load or save
        self._saved: Optional[simsave.Saved] = None  # what the file holds as of then (None: the next save writes it whole)
        self.save_stats = {"saves": 0, "whole": 0, "rows": 0, "bytes": 0}  # what saves wrote (bytes: keys and blobs)
        if self.state_path and self.state_path.exists() and not (self.readonly and self.state_path.stat().st_size == 0):
            self._load()

    # ------------------------------------------------------------------ persistence
    def _coord_fn(self):
        return lambda m, *a: getattr(self.coordinator, m)(*a)

    def _refuse(self, why: str) -> UserError:
        return UserError(Problem("--sim-state", f"{self.state_path} cannot be read: {why}",
                                 "if an older rl-planner wrote it, finish or roll back its apply with that release first; otherwise move "
                                 "the file away (the simulated cluster it held is lost) and apply again"))

    def _db(self) -> sqlite3.Connection:
        if self._conn is None:
            if self.state_path is None:
                raise RuntimeError("the sim backend was asked for its state file but was made without a state_path")
            if self.state_path.is_dir():  # (SQLite's own word for it is "disk I/O error")
                raise UserError(Problem("--sim-state", f"{self.state_path} is a folder, not a simulated cluster's state file",
                                        "pass a file path: a new one (it is created) or one an apply wrote"))
            if self.readonly:
                return self._db_readonly()
            try:
                create_private(self.state_path)  # it holds the cluster's state
            except OSError as exc:
                raise UserError(Problem("--sim-state", f"cannot create {self.state_path}: {exc.strerror}",
                                        "pass a --sim-state path in a writable folder")) from None
            from executor.dbschema import verify

            try:
                c = sqlite3.connect(self.state_path, isolation_level=None, timeout=30)
                verify(c, self.state_path, TABLES, "--sim-state", MOVE_AWAY, what="simulated cluster's state file")
                c.execute("PRAGMA journal_mode=WAL")
                c.execute("PRAGMA synchronous=NORMAL")
                c.execute("CREATE TABLE IF NOT EXISTS world (key TEXT PRIMARY KEY, blob BLOB NOT NULL)")
                c.execute("CREATE TABLE IF NOT EXISTS workers (id TEXT PRIMARY KEY, blob BLOB NOT NULL)")
                c.execute("CREATE TABLE IF NOT EXISTS coord (key TEXT PRIMARY KEY, blob BLOB NOT NULL)")
            except sqlite3.DatabaseError as exc:
                raise UserError(Problem("--sim-state", f"{self.state_path} is not a simulated cluster's state file ({exc})",
                                        "pass another --sim-state path (files of older versions cannot be read)")) from None
            self._conn = c
        return self._conn

    def _db_readonly(self) -> sqlite3.Connection:
        from executor.dbschema import verify

        assert self.state_path is not None
        try:
            c = sqlite3.connect(f"file:{quote(str(self.state_path.resolve()))}?mode=ro", uri=True, isolation_level=None, timeout=30)
        except sqlite3.DatabaseError as exc:
            raise self._refuse(f"not a simulated cluster's state file ({exc})") from None
        verify(c, self.state_path, TABLES, "--sim-state", MOVE_AWAY, what="simulated cluster's state file")
        self._conn = c
        return c

    def _load(self) -> None:
        c = self._db()
        # One read transaction: the rows and the stamp are those of one save, whatever another process
        # (an apply with another journal, another daemon) commits meanwhile (autocommit reads were torn).
        try:
            c.execute("BEGIN")
            try:
                self._load_rows(c)
            except BaseException:
                # Ending the read fails too on a damaged file (SQLite reports it again): never in
                # place of the refusal _load_rows raised.
                try:
                    c.execute("ROLLBACK")
                except sqlite3.DatabaseError:
                    pass
                raise
            c.execute("COMMIT")
        except sqlite3.DatabaseError as exc:
            raise self._refuse(f"not a simulated cluster's state file ({exc})") from None

    def _load_rows(self, c: sqlite3.Connection) -> None:
        stamp = self._file_stamp()
        try:
            has_coord = c.execute("SELECT count(*) FROM sqlite_master WHERE type='table' AND name='coord'").fetchone()[0] > 0
            for table in ("world", "workers") + (("coord",) if has_coord else ()):  # sizes before anything is read into memory
                big = c.execute(f"SELECT max(length(blob)) FROM {table}").fetchone()[0] or 0
                if big > MAX_BLOB_BYTES:
                    raise safestate.BadState(f"a record of {big:,} bytes in its {table} table, more than {MAX_BLOB_BYTES:,}")
            rows = list(c.execute("SELECT key, blob FROM world"))
            if not rows:
                return
            base_bytes = sum(len(b) for k, b in rows if k == "coordinator")
            world = {k: safestate.loads(b) for k, b in rows if k != "stamp"}
            if world.get("format") != {"version": safestate.VERSION} or not {"nodes", "coordinator"} <= set(world):
                raise safestate.BadState("it lacks the format record or the world's parts")
            nodes, coordinator = world["nodes"], world["coordinator"]
            if not (isinstance(nodes, dict) and all(isinstance(n, Node) for n in nodes.values()) and isinstance(coordinator, Coordinator)):
                raise safestate.BadState("its world record holds the wrong types")
            check_nodes(nodes)
            check_coordinator(coordinator)
            creates = world.get("creates", {})
            check_creates(creates)
            seqs, delta_bytes = None, 0
            if has_coord:  # what changed since the coordinator row was written
                n_rows = c.execute("SELECT count(*) FROM coord").fetchone()[0]
                if n_rows > simsave.MAX_ROWS:
                    raise safestate.BadState(f"it holds {n_rows:,} coordinator changes, more than {simsave.MAX_ROWS:,}")
                changes = list(c.execute("SELECT key, blob FROM coord"))
                delta_bytes = sum(len(str(k)) + len(b) for k, b in changes)
                seqs = simsave.apply_rows(coordinator, creates, changes, lenient=self.observe_only)
                check_coordinator(coordinator)
                check_creates(creates)
            workers = []
            from executor.target import MAX_WORKERS

            n_workers = c.execute("SELECT count(*) FROM workers").fetchone()[0]
            if n_workers > MAX_WORKERS:
                raise safestate.BadState(f"it holds {n_workers:,} workers, more than {MAX_WORKERS:,}")
            for wid, blob in c.execute("SELECT id, blob FROM workers"):
                rec = safestate.loads(blob, lenient=self.observe_only)
                check_worker(wid, rec, nodes, lenient=self.observe_only)
                workers.append((wid, rec))
        except safestate.BadState as exc:
            raise self._refuse(str(exc)) from None
        except sqlite3.DatabaseError as exc:
            raise self._refuse(f"not a simulated cluster's state file ({exc})") from None
        self._nodes = nodes if not self._nodes else self._nodes
        self.coordinator = coordinator
        self._stamp = stamp
        self.creates = creates
        if not self.observe_only:
            coordinator._changes = Changes()
            self._saved = simsave.Saved(coordinator, creates, nodes, base_bytes, delta_bytes, seqs)
        for wid, (args, obj, alive) in workers:
            obj._coord = self._coord_fn()
            w = _W(args, obj)
            w.alive = alive
            self.workers[wid] = w

    def _file_stamp(self) -> Optional[bytes]:
        row = self._db().execute("SELECT blob FROM world WHERE key='stamp'").fetchone()
        return bytes(row[0]) if row else None

    def refresh(self) -> bool:
        """Reload from the file if another process saved since we last loaded or saved (a daemon
        that takes over from another); True when reloaded. What this object held unsaved is dropped."""
        if not self.state_path or not self.state_path.exists() or self._file_stamp() == self._stamp:
            return False
        self.workers, self.coordinator, self.creates, self._dirty = {}, Coordinator(), {}, set()
        self._saved = None
        self._load()
        return True

    def touch(self, worker_id: str) -> None:
        """The worker's object changed: the next save writes it."""
        self._dirty.add(worker_id)

    def sync(self) -> None:
        """The controller's call before it journals a step done (creates and stops are saved then,
        with the coordinator's records of them, in one transaction)."""
        self.save()

    def ensure_saved(self) -> None:
        """The controller's call before it journals an apply: a cluster never saved (a fresh state
        file) is written first, so the journal never names an apply whose cluster file does not
        exist (a kill before the first step's save then resumes instead of being refused)."""
        if self.state_path and self._stamp is None:
            self.save()

    def save(self, whole: bool = False) -> None:
        """Write what changed since the last save, in one transaction (a kill leaves the old save or
        this one): the workers touched, and what changed in the coordinator and the world's records
        as rows of the ``coord`` table; the coordinator whole (and that table emptied) when the file
        was never saved by this object, when those rows would outweigh it, when only a whole save can
        say what changed (:meth:`simsave.Saved.rows`), or with ``whole`` (:meth:`close`)."""
        if not self.state_path:
            return
        if self.observe_only:
            raise RuntimeError("an observe-only sim backend (status, apply --dry-run) never saves the cluster")
        c = self._db()
        rows: list[tuple[str, Optional[bytes]]] = []
        for wid in sorted(self._dirty):
            w = self.workers.get(wid)
            if w is None:
                rows.append((wid, None))
                continue
            w.obj._coord = None
            try:
                rows.append((wid, safestate.dumps((w.args, w.obj, w.alive))))
            finally:
                w.obj._coord = self._coord_fn()
        import os

        co, saved = self.coordinator, self._saved
        with co._lock:  # (a method running on another thread records into the next save's changes)
            if co._changes is None:
                co._changes = Changes()
            changes = co._changes.take()
        try:
            delta = None if saved is None or saved.coord is not co else saved.rows(changes, self.creates)
            if delta is not None and saved is not None:
                total = saved.delta_bytes + sum(len(k) + len(b) for k, b in delta)
                if total > max(saved.base_bytes, COMPACT_MIN_BYTES) or (whole and total > 0):
                    delta = None
            stamp = os.urandom(16)
            world: list[tuple[str, bytes]] = [("stamp", stamp)]
            if delta is None:
                base = safestate.dumps(co)
                world += [("format", safestate.dumps({"version": safestate.VERSION})), ("nodes", safestate.dumps(self._nodes)),
                          ("coordinator", base), ("creates", safestate.dumps(self.creates))]
            elif saved is not None and self._nodes != saved.nodes:
                world.append(("nodes", safestate.dumps(self._nodes)))
            self._commit(c, world, rows, delta)
        except BaseException:
            co._changes.merge(changes)  # not saved: still to be written
            raise
        if delta is None:
            self._saved = simsave.Saved(co, self.creates, self._nodes, len(base), 0)
        else:
            assert saved is not None
            saved.commit(delta)
            if any(k == "nodes" for k, _ in world):
                saved.nodes = dict(self._nodes)
        st = self.save_stats
        st["saves"] += 1
        st["whole"] += delta is None
        st["rows"] += len(world) + len(rows) + len(delta or ())
        st["bytes"] += sum(len(k) + len(b) for k, b in world + (delta or [])) + sum(len(k) + len(b or b"") for k, b in rows)
        self._dirty.clear()
        self._stamp = stamp

    def _commit(self, c: sqlite3.Connection, world: list[tuple[str, bytes]], rows: list[tuple[str, Optional[bytes]]],
                delta: Optional[list[tuple[str, bytes]]]) -> None:
        """One transaction, refused (:class:`Fenced`) when another process saved since we read the file."""
        c.execute("BEGIN IMMEDIATE")
        try:
            row = c.execute("SELECT blob FROM world WHERE key='stamp'").fetchone()
            if (bytes(row[0]) if row else None) != self._stamp:  # saved by another process since we read it
                from executor.journal import Fenced

                raise Fenced(f"the simulated cluster {self.state_path} was changed by another apply (one with another "
                             "journal, or another daemon) since this one read it: this one stops without writing over it")
            if delta is None:
                c.execute("DELETE FROM coord")
            elif delta:
                c.executemany("INSERT OR REPLACE INTO coord(key, blob) VALUES (?, ?)", delta)
            c.executemany("INSERT OR REPLACE INTO world(key, blob) VALUES (?, ?)", world)
            c.executemany("DELETE FROM workers WHERE id=?", [(wid,) for wid, b in rows if b is None])
            c.executemany("INSERT OR REPLACE INTO workers(id, blob) VALUES (?, ?)", [r for r in rows if r[1] is not None])
            c.execute("COMMIT")
        except BaseException:
            c.execute("ROLLBACK")
            raise

    # ------------------------------------------------------------------ interface
    def nodes(self) -> dict[str, Node]:
        return dict(self._nodes)

    def coord(self, method: str, *args: Any) -> Any:
        return getattr(self.coordinator, method)(*args)

    def _fits(self, node: Node, args: dict) -> Optional[str]:
        """Why ``args``'s worker does not fit next to the workers on its node (:mod:`executor.capacity`), or None."""
        here = [capacity.Need.of_args(w.args) for w in self.workers.values() if w.args["worker"]["node"] == node.name]
        return capacity.take(capacity.initial({node.name: node}, here), capacity.Need.of_args(args))

    def create_worker(self, args: dict, epoch: int) -> None:
        w = args["worker"]
        wid, node = w["id"], self._nodes.get(w["node"])
        if wid in self.workers and self.workers[wid].alive:
            return
        self.tick(self.ticks_per_call)
        if node is None or not node.alive:
            raise StartFailed(wid, f"node {w['node']} is not in the cluster or is dead (unplaceable until the "
                                   f"{self.deadlines.start_s:g} s start deadline)")
        why = self._fits(node, args)
        if why:
            raise StartFailed(wid, f"unplaceable on {node.name}: needs {w['gpus']} GPU(s) and {w['dram_gb']:g} GB DRAM, {why} "
                                   f"(start deadline {self.deadlines.start_s:g} s passed)")
        try:
            obj = make_worker(args, epoch, self._coord_fn(), fail_start=wid in self.fail_starts)
        except MemoryError as exc:
            raise StartFailed(wid, str(exc)) from None
        self.workers[wid] = _W(args, obj)
        self.creates[wid] = self.creates.get(wid, 0) + 1
        self.touch(wid)

    def worker_alive(self, worker_id: str) -> bool:
        w = self.workers.get(worker_id)
        return bool(w and w.alive)

    def call(self, worker_id: str, method: str, *args: Any, deadline_s: Optional[float] = None) -> Any:
        self.tick(self.ticks_per_call)
        w = self.workers.get(worker_id)
        if w is None or not w.alive:
            raise WorkerLost(worker_id, "the worker's process is gone")
        if w.frozen:
            raise WorkerLost(worker_id, f"no answer within {deadline_s or self.deadlines.call_s:g} s")
        self.touch(worker_id)
        return getattr(w.obj, method)(*args)

    def call_many(self, calls: list[tuple[str, str, tuple]], deadline_s: Optional[float] = None) -> list[Any]:
        return [self.call(wid, m, *a, deadline_s=deadline_s) for wid, m, a in calls]

    def stop_worker(self, worker_id: str) -> str:
        w = self.workers.pop(worker_id, None)
        self.touch(worker_id)
        if w is None:
            return "already gone"
        _close(w.obj)
        return "stopped" if w.alive else "reaped (its process was already gone)"

    def reshard(self, component: str, old: list[dict], new: list[dict], old_layout: Layout, new_layout: Layout,
                generation: int) -> dict:
        from executor.migrations import reshard as rs  # torch: imported only when a trainer moves
        from executor.workers.model import ModelSpec

        spec = ModelSpec(**(new[0].get("model") or {})) if new else ModelSpec()
        fill = {r["index"] for r in new}  # in place, the kept ranks are not among them: they hold their shards
        pieces = [pc for pc in rs.plan(spec, old_layout, new_layout) if pc.dst in fill]
        objs = {}
        for side, recs in (("old", old), ("new", new)):
            for r in recs:
                self.call(r["id"], "ready")  # raises WorkerLost for a dead or frozen worker
                objs[(side, r["index"])] = self.workers[r["id"]].obj
        for r in new:
            lease = self.coordinator.lease(r["id"])
            if lease != objs[("new", r["index"])].epoch:
                raise WorkerLost(r["id"], f"lease epoch {lease} is not the worker's ({objs[('new', r['index'])].epoch})")
        sums = rs.apply_local(pieces, {i: o.shards for (s, i), o in objs.items() if s == "old"},
                              {i: o.shards for (s, i), o in objs.items() if s == "new"})
        bad = [f"{a}->{b}" for (a, b), (x, y) in sums.items() if x != y]
        nbytes = sum(rs.pack(objs[("old", s)].shards, pcs).numel() * 4 for (s, d), pcs in rs.pairs(pieces).items())
        self.save()
        return {"pieces": len(pieces), "pairs": len(sums), "bytes": nbytes, "checksum_mismatches": bad,
                "checksums": {f"{a}->{b}": x for (a, b), (x, y) in sums.items()}}

    def form_training_group(self, component: str, ranks: list[dict], layout: Layout) -> None:
        for r in ranks:
            self.call(r["id"], "ready")

    def train_step(self, component: str, step: int) -> list[bool]:
        """One training step of the component's active ranks (DP average done in-process)."""
        from executor.workers.trainer import average_over_dp

        ids = self.coordinator.active_set(component)
        objs = [self.workers[i].obj for i in ids if self.worker_alive(i) and not self.workers[i].frozen]
        group_step = getattr(type(objs[0]), "train_group", None) if objs else None
        if group_step is not None:  # an implementation whose ranks talk during the step (TP, in threads)
            out = group_step(objs, step)
        else:
            for o in objs:
                o.compute_grads(step)
            average_over_dp(objs)
            out = [o.apply_step(step) for o in objs]
        for i in ids:
            self.touch(i)
        self.save()
        return out

    def tick(self, n: int = 1) -> None:
        for _ in range(n):
            for wid, w in list(self.workers.items()):
                if w.alive and not w.frozen and w.args["role"] == "rollout" and (w.obj.pending or w.obj.running):
                    w.obj.step()
                    self.touch(wid)

    def leaks(self) -> list[str]:
        recs = {r["id"]: r for r in self.coordinator.records()}
        out = [f"worker {wid} runs but is not registered" for wid, w in self.workers.items() if w.alive and wid not in recs]
        out += [f"worker {wid} was declared dead but its process still runs (not reaped)" for wid, r in recs.items()
                if r.get("status") == "dead" and self.worker_alive(wid)]
        out += [f"registered worker {wid} has no process" for wid, r in recs.items()
                if r.get("status") != "dead" and not self.worker_alive(wid)]
        return sorted(out)

    def close(self, save: bool = True) -> None:
        """``save=False``: a process that lost the right to act (a superseded daemon) leaves the file as it is."""
        if save:
            self.save(whole=True)  # a closed file holds the world as one row per part
        if self._conn is not None:
            self._conn.close()
            self._conn = None

    # ------------------------------------------------------------------ fault injection
    def kill(self, worker_id: str) -> None:
        w = self.workers.get(worker_id)
        if w:
            w.alive = False
            _close(w.obj)  # what a process takes with it (an engine's server: PR_SET_PDEATHSIG)
            self.touch(worker_id)

    def freeze(self, worker_id: str) -> None:
        self.workers[worker_id].frozen = True

    def thaw(self, worker_id: str) -> Any:
        """Wake a frozen worker: it answers again and acts with whatever lease epoch it holds."""
        w = self.workers.get(worker_id)
        if w:
            w.frozen = False

    def raw(self, worker_id: str) -> Any:
        w = self.workers.get(worker_id)
        if w:
            self.touch(worker_id)
        return w.obj if w else None


def _close(obj: Any) -> None:
    """A worker holding outside resources (a server process, a client) lets them go when stopped."""
    close = getattr(obj, "close", None)
    if callable(close):
        close()
