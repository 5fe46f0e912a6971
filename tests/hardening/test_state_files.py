"""State files trusted past their checksum (issue 25, item 6): crafted simulated-cluster files and
journals with a valid SHA-256 but the wrong structure, views or triggers in their SQLite schema,
damaged pages, or a model size that would allocate gigabytes. Each ends with exit 2 naming the
file's flag and what to do, within 10 CPU s and 1 GB, and ``status`` writes nothing."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Callable

import pytest

from tests.hardening import corpus
from tests.hardening.test_hostile_inputs import LIMIT_RSS_KB, LIMIT_S, run_inprocess


def _world_rows(nodes=None, creates=None) -> list[tuple[str, bytes]]:
    from executor import safestate
    from executor.state import Node
    from executor.workers.coordinator import Coordinator

    nodes = nodes if nodes is not None else {"h20-0": Node("h20-0", "H20", 8, 512.0)}
    return [("stamp", b"0" * 16), ("format", safestate.dumps({"version": safestate.VERSION})), ("nodes", safestate.dumps(nodes)),
            ("coordinator", safestate.dumps(Coordinator())), ("creates", safestate.dumps(creates if creates is not None else {}))]


def _sim(path: Path, world: list, workers: list[tuple[str, bytes]] = (), extra_sql: str = "") -> None:
    c = sqlite3.connect(path)
    c.execute("CREATE TABLE world (key TEXT PRIMARY KEY, blob BLOB NOT NULL)")
    c.execute("CREATE TABLE workers (id TEXT PRIMARY KEY, blob BLOB NOT NULL)")
    c.executemany("INSERT INTO world VALUES (?, ?)", world)
    c.executemany("INSERT INTO workers VALUES (?, ?)", list(workers))
    if extra_sql:
        c.executescript(extra_sql)
    c.commit()
    c.close()


def _blob(doc) -> bytes:
    """A blob with a valid checksum around any JSON document (what a crafted file can hold)."""
    import hashlib
    import struct

    from executor import safestate

    raw = json.dumps(doc).encode()
    body = struct.pack("<Q", len(raw)) + raw
    return safestate.MAGIC + hashlib.sha256(body).digest() + body


def int_worker(p: Path) -> None:
    from executor import safestate

    _sim(p, _world_rows(), [("w1", safestate.dumps(({"worker": {"id": "w1", "node": "h20-0", "gpus": 1}}, 5, True)))])


def node_gpus_word(p: Path) -> None:
    from executor.state import Node

    _sim(p, _world_rows(nodes={"h20-0": Node("h20-0", "H20", "eight", 512.0)}))  # type: ignore[arg-type]


def self_creates(p: Path) -> None:
    rows = [r for r in _world_rows() if r[0] != "creates"] + [("creates", _blob({"$list": 0, "items": [{"$lref": 0}] * 8}))]
    _sim(p, rows)


def huge_lm_trainer(p: Path) -> None:
    state = {"id": "w1", "epoch": 1, "component": "job/trainer", "rank": 0, "layout": {"tp": 1, "pp": 1, "dp": 1},
             "model": {"hidden": 16384, "ffn": 65536, "layers": 64, "vocab": 1 << 20}, "loaded": True, "state": {}}
    rec = {"$t": [{"worker": {"id": "w1", "node": "h20-0", "gpus": 1}}, {"$obj": "LMTrainerRank", "ref": 0, "state": state}, True]}
    _sim(p, _world_rows(), [("w1", _blob(rec))])


def recursive_view(p: Path) -> None:
    c = sqlite3.connect(p)
    c.executescript("CREATE TABLE workers (id TEXT PRIMARY KEY, blob BLOB NOT NULL);"
                    "CREATE VIEW world AS WITH RECURSIVE n(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM n) SELECT 'k' AS key, x AS blob FROM n;")
    c.close()


def trigger(p: Path) -> None:
    _sim(p, _world_rows(), extra_sql="CREATE TABLE log(x); CREATE TRIGGER t AFTER INSERT ON world BEGIN INSERT INTO log VALUES (1); END;")


SIM_CASES: list[tuple[str, Callable[[Path], None], str]] = [
    ("worker-is-an-int", int_worker, "not a worker"),
    ("node-gpus-word", node_gpus_word, "node 'h20-0' is malformed"),
    ("creates-self-reference", self_creates, "created workers"),
    ("lm-trainer-huge", huge_lm_trainer, "parameters"),
    ("recursive-view-world", recursive_view, "view 'world'"),
    ("trigger", trigger, "trigger"),
]


@pytest.mark.parametrize("cid,make,expect", SIM_CASES, ids=[c[0] for c in SIM_CASES])
@pytest.mark.parametrize("cmd", ["status", "rollback"])
def test_a_crafted_sim_state_is_refused(tmp_path, cid, make, expect, cmd):
    s = tmp_path / "s.db"
    make(s)
    before = {p.name: p.read_bytes() for p in tmp_path.iterdir()}
    argv = ["status", "--sim-state", str(s)] if cmd == "status" else ["apply", "--rollback", "--sim-state", str(s)]
    rc, out, cpu, rss = run_inprocess(argv)
    assert rc == 2 and "--sim-state" in out and expect in out and "Traceback" not in out, out[-1500:]
    assert cpu < LIMIT_S and rss < LIMIT_RSS_KB, (cpu, rss)
    if cmd == "status":
        assert {p.name: p.read_bytes() for p in tmp_path.iterdir()} == before, "status wrote nothing"


def test_status_of_an_empty_file_writes_nothing(tmp_path):
    s = tmp_path / "s.db"
    s.touch()
    rc, out, _, _ = run_inprocess(["status", "--sim-state", str(s)])
    assert rc == 2 and "empty" in out, out
    assert s.stat().st_size == 0 and sorted(p.name for p in tmp_path.iterdir()) == ["s.db"]


@pytest.fixture
def applied(tmp_path) -> tuple[Path, Path]:
    """A real sim state and its journal after one apply."""
    (tmp_path / "p.yaml").write_bytes(corpus.dump(corpus.BASE_PLAN))
    rc, out, _, _ = run_inprocess(["apply", str(tmp_path / "p.yaml"), "--sim-state", str(tmp_path / "s.db")])
    assert rc == 0, out
    return tmp_path / "s.db", tmp_path / "s.db.journal"


def _sql(sql: str, *args) -> Callable[[Path], None]:
    def run(j: Path) -> None:
        c = sqlite3.connect(j)
        c.execute(sql, args)
        c.commit()
        c.close()
    return run


def _running_with(steps_json: str) -> Callable[[Path], None]:
    return _sql("INSERT INTO applies(plan_digest, plan_name, backend, status, started, steps_json) VALUES ('x', 'p', 'sim', 'running', 0, ?)",
                steps_json)


def _scribble(j: Path) -> None:
    c = sqlite3.connect(j)
    c.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    c.close()
    data = bytearray(j.read_bytes())
    page = 4096
    for off in range(page + 16, min(len(data), 3 * page), 7):  # the second and third pages
        data[off] = 0xA5
    j.write_bytes(bytes(data))


JOURNAL_CASES: list[tuple[str, Callable[[Path], None], str]] = [
    ("steps-garbage", _running_with("not json at all"), "damaged"),
    ("steps-deep", _running_with("[" * 200000 + "]" * 200000), "damaged"),
    ("steps-wrong-shape", _running_with(json.dumps([{"evil": 1}])), "damaged"),
    ("view-applies", _sql("CREATE VIEW v AS WITH RECURSIVE n(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM n) SELECT x FROM n"), "view"),
    ("trigger", _sql("CREATE TRIGGER t AFTER UPDATE ON steps BEGIN SELECT 1; END"), "trigger"),
    ("scribbled", _scribble, "journal"),
]


@pytest.mark.parametrize("cid,damage,expect", JOURNAL_CASES, ids=[c[0] for c in JOURNAL_CASES])
def test_a_damaged_journal_is_exit_2_with_the_way_out(applied, cid, damage, expect):
    sim, journal = applied
    damage(journal)
    commands = [["apply", "--rollback", "--sim-state", str(sim)], ["apply", str(sim.parent / "p.yaml"), "--sim-state", str(sim)]]
    if not cid.startswith("steps-"):  # status lists the applies, it does not read their steps
        commands.append(["status", "--sim-state", str(sim)])
    for argv in commands:
        rc, out, cpu, rss = run_inprocess(argv)
        assert rc == 2 and "journal" in out and expect in out and "Traceback" not in out, (argv, out[-1500:])
        assert "mv " in out, "the error says how to get out"
        assert cpu < LIMIT_S and rss < LIMIT_RSS_KB, (cpu, rss)


@pytest.mark.parametrize("sql,what", [
    ("CREATE VIEW jobs AS WITH RECURSIVE n(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM n) SELECT x AS name FROM n", "view 'jobs'"),
    ("CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL); CREATE TRIGGER t AFTER INSERT ON meta BEGIN SELECT 1; END",
     "trigger"),
    ("CREATE TABLE evil (x)", "table 'evil'"),
])
def test_the_daemon_state_file_is_opened_only_with_its_own_schema(tmp_path, sql, what):
    from planner.daemon.store import StateFileError, Store

    c = sqlite3.connect(tmp_path / "s.sqlite")
    c.executescript(sql)
    c.close()
    with pytest.raises(StateFileError, match=what):
        Store(tmp_path / "s.sqlite")


def test_audit_rows_are_kept_bounded(tmp_path):
    """Every refused call (a 401 flood) adds a row; only the newest ``audit_keep`` (and one pruning step) stay."""
    from planner.daemon.audit import AuditEntry
    from planner.daemon.store import AUDIT_PRUNE_EVERY, Store

    st = Store(tmp_path / "s.sqlite", audit_keep=100)
    for i in range(30):
        st.add_audit([AuditEntry(float(i), "-", "127.0.0.1", "POST", "/v1/jobs", 401)] * 100)
    n = st.conn().execute("SELECT count(*) FROM audit").fetchone()[0]
    assert n <= 100 + AUDIT_PRUNE_EVERY + 100, n
    assert st.conn().execute("SELECT max(id) FROM audit").fetchone()[0] == 3000, "the newest rows are kept"
    st.close()


def test_a_record_over_the_size_cap_is_refused_before_it_is_read(applied, monkeypatch):
    """Sizes are checked (SQL length()) before a record is read into memory; the cap is lowered here."""
    from executor.backends import sim as simmod

    monkeypatch.setattr(simmod, "MAX_BLOB_BYTES", 1000)
    rc, out, _, _ = run_inprocess(["status", "--sim-state", str(applied[0])])
    assert rc == 2 and "more than 1,000" in out and "--sim-state" in out, out[-1000:]


def _recode(sim: Path, table: str, key: str, edit: Callable[[dict], dict]) -> None:
    """Rewrite one record (``world`` by key, ``workers`` by id) of a real sim state through ``edit`` (its
    JSON document) with a valid checksum: what a crafted or hand-edited file can hold."""
    import hashlib
    import struct

    from executor import safestate

    col = "key" if table == "world" else "id"
    c = sqlite3.connect(sim)
    (blob,) = c.execute(f"SELECT blob FROM {table} WHERE {col}=?", (key,)).fetchone()
    body = bytes(blob)[40:]
    (n,) = struct.unpack_from("<Q", body, 0)
    doc, rest = json.loads(body[8:8 + n]), body[8 + n:]
    raw = json.dumps(edit(doc)).encode()
    new = struct.pack("<Q", len(raw)) + raw + rest
    c.execute(f"UPDATE {table} SET blob=? WHERE {col}=?", (safestate.MAGIC + hashlib.sha256(new).digest() + new, key))
    c.commit()
    c.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    c.close()


def _recode_coordinator(sim: Path, edit: Callable[[dict], dict]) -> None:
    _recode(sim, "world", "coordinator", edit)


def _coord_field(name: str, value) -> Callable[[dict], dict]:
    def edit(doc: dict) -> dict:
        doc["state"][name] = value
        return doc
    return edit


COORD_CASES: list[tuple[str, Callable[[dict], dict], str]] = [
    ("state-empty", lambda d: {"$obj": "Coordinator", "ref": 0, "state": {}}, "next_epoch is missing"),
    ("leases-str", _coord_field("leases", "x"), "leases is not a mapping"),
    ("active-list", _coord_field("active", [1, 2]), "active is not a mapping"),
    ("next-epoch-str", _coord_field("next_epoch", "abc"), "next_epoch is 'abc'"),
    ("next-epoch-nan", _coord_field("next_epoch", {"$f": "nan"}), "next_epoch is 'nan'"),
    ("next-epoch-below-leases", _coord_field("next_epoch", 1), "leases hold an epoch not below next_epoch"),
    ("registry-role", lambda d: (d["state"]["registry"][next(iter(d["state"]["registry"]))].update(role="evil"), d)[1], "'role'"),
    ("shadows-a-method", _coord_field("records", 5), "'records' is not a field of the coordinator"),
]


@pytest.mark.parametrize("cid,edit,expect", COORD_CASES, ids=[c[0] for c in COORD_CASES])
def test_a_coordinator_record_of_the_wrong_shape_is_refused_before_anything_acts(applied, cid, edit, expect):
    """Audit 40: a coordinator record re-encoded with a valid checksum but the wrong structure or types
    (``state: {}``, ``leases: "x"``, ``active: [1, 2]``, ``next_epoch: "abc"``) was an AttributeError in
    ``status`` or a TypeError part-way through an ``apply``. Each command now exits 2 naming the file,
    the field and the way out, and no file changes."""
    sim, journal = applied
    _recode_coordinator(sim, edit)
    _assert_refused_before_anything_acts(sim, corpus.BASE_PLAN, ("coordinator", expect))


def _contents(folder: Path) -> dict[str, object]:
    """What each file of ``folder`` holds: a SQLite database (with its write-ahead log) as its rows,
    read from a copy; any other file as its bytes. SQLite's -wal and -shm files are not compared
    themselves: a reader that closes the last connection checkpoints the log into the database
    (the bytes change, the rows do not), which is no change of state."""
    import shutil
    import tempfile

    out: dict[str, object] = {}
    for p in sorted(folder.iterdir()):
        if p.name.endswith(("-wal", "-shm")):
            continue
        data = p.read_bytes()
        if not data.startswith(b"SQLite format 3\x00"):
            out[p.name] = data
            continue
        with tempfile.TemporaryDirectory() as tmp:
            copy = Path(tmp) / p.name
            shutil.copyfile(p, copy)
            if Path(f"{p}-wal").exists():
                shutil.copyfile(f"{p}-wal", f"{copy}-wal")
            con = sqlite3.connect(copy)
            try:
                out[p.name] = list(con.iterdump())
            finally:
                con.close()
    return out


def _assert_refused_before_anything_acts(sim: Path, plan: dict, expect: tuple[str, ...]) -> None:
    """``status``, an ``apply`` that would stop workers (and grant epochs) and ``apply --rollback`` of the
    crafted ``sim`` each exit 2 naming the file, ``expect`` and the way out, and no file changes."""
    plan2 = sim.parent / "p2.yaml"
    changed = json.loads(json.dumps(plan))
    changed["body"]["components"][0]["placement"] = {"h20-0": 2}  # an apply that would stop workers (and grant epochs)
    plan2.write_bytes(corpus.dump(changed))

    def files() -> dict[str, object]:
        return _contents(sim.parent)

    before = files()
    for argv in (["status", "--backend", "sim", "--sim-state", str(sim)], ["apply", str(plan2), "--backend", "sim", "--sim-state", str(sim)],
                 ["apply", "--rollback", "--sim-state", str(sim)]):
        rc, out, _, _ = run_inprocess(argv)
        assert rc == 2 and "Traceback" not in out and "internal error" not in out, (argv, out[-1500:])
        assert "--sim-state" in out and str(sim) in out and all(e in out for e in expect), (argv, out[-1500:])
        assert "move the file away" in out, out
        assert files() == before, (argv, "nothing created or changed")


#: BASE_PLAN with a service component: the state holds a RolloutEngine and a ServiceWorker row
SERVICE_PLAN = {**corpus.BASE_PLAN, "body": {**corpus.BASE_PLAN["body"], "components": [
    *corpus.BASE_PLAN["body"]["components"],
    {"name": "job/reward", "role": "service", "gpu_type": "H20", "gpus_per_worker": 0, "placement": {"h20-0": 1}}]}}
ENGINE, SERVICE = "job.rollout.g1.e0", "job.reward.g1.w0"


def _at(path: list, value) -> Callable[[dict], dict]:
    """An edit setting one value of a worker row's document ({"$t": [args, object, alive]}); "DEL" deletes it."""
    def edit(doc: dict) -> dict:
        x = doc["$t"]
        for k in path[:-1]:
            x = x[k]
        if value == "DEL":
            del x[path[-1]]
        else:
            x[path[-1]] = value
        return doc
    return edit


ARGS, OBJ = [0], [1, "state"]
WORKER_CASES: list[tuple[str, str, Callable[[dict], dict], str]] = [
    ("w-epoch-str", SERVICE, _at(OBJ + ["epoch"], "x"), "'epoch'"),
    ("w-kv-list", SERVICE, _at(OBJ + ["kv"], [1]), "'kv'"),
    ("w-served-nan", SERVICE, _at(OBJ + ["served"], {"$f": "nan"}), "'served'"),
    ("w-state-empty", SERVICE, _at([1, "state"], {}), "'id'"),
    ("w-id-other", SERVICE, _at(OBJ + ["id"], ENGINE), "'id'"),
    ("w-dram-nan", SERVICE, _at(ARGS + ["worker", "dram_gb"], {"$f": "nan"}), "'worker.dram_gb'"),
    ("w-dram-missing", ENGINE, _at(ARGS + ["worker", "dram_gb"], "DEL"), "'worker.dram_gb'"),
    ("w-node-unknown", SERVICE, _at(ARGS + ["worker", "node"], "nope"), "node 'nope', which is not in the cluster"),
    ("w-role-bad", SERVICE, _at(ARGS + ["role"], "evil"), "'role'"),
    ("w-layout-str", SERVICE, _at(ARGS + ["layout"], "x"), "'layout'"),
    ("w-job-int", ENGINE, _at(ARGS + ["job"], 5), "'job'"),
    ("e-epoch-negative", ENGINE, _at(OBJ + ["epoch"], -1), "'epoch'"),
    ("e-running-list", ENGINE, _at(OBJ + ["running"], [1]), "'running'"),
    ("e-pending-junk", ENGINE, _at(OBJ + ["pending"], [{"id": "r"}]), "'pending'"),
    ("e-admitting-str", ENGINE, _at(OBJ + ["admitting"], "yes"), "'admitting'"),
    ("e-cfg-batch-zero", ENGINE, _at(OBJ + ["cfg", "state", "max_batch"], 0), "'cfg'"),
    ("e-finished-ints", ENGINE, _at(OBJ + ["finished"], [1, 2]), "'finished'"),
    ("e-shadows-a-method", ENGINE, _at(OBJ + ["step"], 5), "'step' is not a field of a RolloutEngine"),
]


@pytest.fixture
def applied_with_service(tmp_path) -> Path:
    (tmp_path / "p.yaml").write_bytes(corpus.dump(SERVICE_PLAN))
    rc, out, _, _ = run_inprocess(["apply", str(tmp_path / "p.yaml"), "--sim-state", str(tmp_path / "s.db")])
    assert rc == 0, out
    return tmp_path / "s.db"


@pytest.mark.parametrize("cid,wid,edit,expect", WORKER_CASES, ids=[c[0] for c in WORKER_CASES])
def test_a_worker_record_of_the_wrong_shape_is_refused_before_anything_acts(applied_with_service, cid, wid, edit, expect):
    """Audit 40: a worker row re-encoded with a valid checksum but a field of the wrong type or range
    (a ServiceWorker's epoch ``"x"``, its kv a list, its create arguments' dram_gb NaN, a node not in the
    cluster, an engine's running requests a list, a field shadowing a method) loaded: ``status`` and
    ``apply`` exited 0 with it in place. Each command now exits 2 naming the worker, the field and the way
    out, and no file changes."""
    sim = applied_with_service
    _recode(sim, "workers", wid, edit)
    _assert_refused_before_anything_acts(sim, SERVICE_PLAN, (f"worker {wid!r}", expect))
