"""The sim backend's saves write what changed, not the whole world (executor.backends.simsave).

A daemon's simulated cluster holds hundreds of workers; every executor step saved it and each save
re-encoded the whole coordinator (~620 KB on the weave-trace-60 replay), so cycles that moved many
workers spent most of their time in JSON encoding. These tests count what a save encodes and
writes (never how long it takes), and check that a file written by many incremental saves, killed
at any point, loads as exactly what a whole save of the same world would have written."""

from __future__ import annotations

import os
import random
import signal
import sqlite3
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from estimators.errors import UserError
from executor import safestate
from executor.backends.sim import SimBackend
from executor.journal import Fenced
from executor.state import Node

ROOT = Path(__file__).resolve().parents[2]


def _nodes(n: int = 64) -> list[Node]:
    return [Node(f"h20-{i}", "H20", 8, 2048.0) for i in range(n)]


def _args(i: int, nodes: int = 64) -> dict:
    w = {"id": f"job{i % 7}/rollout-{i}", "component": f"job{i % 7}/rollout", "node": f"h20-{i % nodes}", "gpus": 1,
         "dram_gb": 4.0, "index": i, "generation": 0}
    return {"worker": w, "role": "rollout", "job": f"job{i % 7}", "gpu_type": "H20", "layout": {}, "migration": "workload"}


def _record(args: dict, status: str = "running") -> dict:
    from executor.workers.factory import record_of

    return record_of(args, status)


def _cluster(path: Path, workers: int) -> SimBackend:
    """A saved cluster of ``workers`` rollout engines, each registered with a lease and a request."""
    b = SimBackend(_nodes(), state_path=path)
    for i in range(workers):
        a = _args(i)
        wid = a["worker"]["id"]
        b.coord("register", _record(a, "starting"))
        b.create_worker(a, b.coord("grant", wid))
        b.coord("set_status", wid, "running")
        b.coord("submit", [{"id": f"r{i}", "prompt": list(range(16)), "seed": i, "target_len": 64,
                            "component": a["worker"]["component"]}], [wid])
    b.save()
    return b


def _world(b: SimBackend) -> bytes:
    """Everything a load rebuilds beside the workers, as a whole save encodes it (order included)."""
    return safestate.dumps((b.coordinator, b.creates, b._nodes))


def _coord_rows(path: Path) -> int:
    c = sqlite3.connect(path)
    try:
        if not c.execute("SELECT count(*) FROM sqlite_master WHERE name='coord'").fetchone()[0]:
            return 0
        return c.execute("SELECT count(*) FROM coord").fetchone()[0]
    finally:
        c.close()


class _Counting:
    """safestate.dumps, counting what it encodes."""

    def __init__(self, monkeypatch) -> None:
        self.calls: list[tuple[str, int]] = []
        real = safestate.dumps

        def dumps(obj):
            out = real(obj)
            self.calls.append((type(obj).__name__, len(out)))
            return out
        monkeypatch.setattr(safestate, "dumps", dumps)

    def bytes(self) -> int:
        return sum(n for _, n in self.calls)


def test_a_step_that_changes_one_worker_encodes_that_worker_and_its_records_not_the_cluster(tmp_path, monkeypatch):
    """Fails before: every save encoded the whole coordinator (here ~200 KB for 400 engines with
    their registry records, leases and requests), its nodes and creation counts."""
    b = _cluster(tmp_path / "sim", 400)
    whole = len(safestate.dumps(b.coordinator))
    assert whole > 100_000
    count = _Counting(monkeypatch)
    wid = _args(7)["worker"]["id"]
    b.coord("set_status", wid, "draining")  # one registry record
    b.coord("progress", wid, b.raw(wid).epoch, {"r7": [1, 2, 3]})  # one request (raw(): the worker is touched)
    b.save()
    kinds = [k for k, _ in count.calls]
    assert "Coordinator" not in kinds and "Node" not in kinds, kinds
    assert len(count.calls) <= 4, count.calls  # the worker, its record, its request (and nothing per worker of the cluster)
    assert count.bytes() < whole / 20, (count.bytes(), whole)
    assert b.save_stats["whole"] == 1  # the first save only
    b2 = SimBackend([], state_path=tmp_path / "sim")
    assert _world(b2) == _world(b)
    assert b2.coordinator.registry[wid]["status"] == "draining" and b2.coordinator.requests["r7"]["output"] == [1, 2, 3]


def test_nothing_changed_writes_no_coordinator_row(tmp_path, monkeypatch):
    b = _cluster(tmp_path / "sim", 50)
    count = _Counting(monkeypatch)
    for _ in range(5):
        b.save()
    assert count.calls == [], count.calls  # only the new stamp is written
    b.close()
    assert SimBackend([], state_path=tmp_path / "sim").coordinator.registry == b.coordinator.registry


def _mutate(b: SimBackend, rng: random.Random, step: int) -> None:
    """One random change of the kinds an apply makes, through the coordinator's methods."""
    co = b.coordinator
    ids = sorted(co.registry)
    wid = rng.choice(ids) if ids else None
    op = rng.randrange(16)
    if op == 0 and wid:
        co.set_status(wid, rng.choice(["draining", "stopping", "dead", "running"]))  # illegal ones append to `illegal`
    elif op == 1:
        a = _args(1000 + step)
        co.register(_record(a))
        co.grant(a["worker"]["id"])
        b.creates[a["worker"]["id"]] = 1
    elif op == 2 and wid:
        co.unregister(wid)
    elif op == 3 and wid:  # re-registered: its record and lease move to the end of their mappings
        rec = dict(co.registry[wid])
        co.unregister(wid)
        co.register(rec)
        co.grant(wid)
    elif op == 4 and wid:
        co.revoke(wid, "test")
        if rng.random() < 0.5:
            co.grant(wid)
    elif op == 5:
        co.submit([{"id": f"q{step}", "prompt": [1, 2, 3], "seed": step, "target_len": 8, "component": "job0/rollout"}],
                  [wid or "nobody"])
    elif op == 6:
        r = rng.choice(sorted(co.requests))
        owner = co.requests[r]["owner"]
        co.progress(owner, co.leases.get(owner, 0), {r: co.requests[r]["output"] + [step]})
    elif op == 7:
        r = rng.choice(sorted(co.requests))
        owner = co.requests[r]["owner"]
        co.complete(owner, co.leases.get(owner, -1), r, [step])  # a stale lease is refused (a rejected effect)
    elif op == 8 and wid:
        co.transfer({rng.choice(sorted(co.requests)): wid}, {})
    elif op == 9:
        comp = f"job{step % 7}/trainer"
        co.switch(comp, [wid] if wid else [], [], step)
        if wid:
            co.commit_step(wid, co.leases.get(wid, 0), comp, step)
    elif op == 10:
        co.put_checkpoint(wid or "x", co.leases.get(wid or "x", 0), f"ck/{step % 5}", {"step": step, "bytes": b"\0" * 3})
    elif op == 11:
        co.drop_checkpoints(f"ck/{step % 5}")
    elif op == 12:
        if step % 2:
            co.park(f"job{step % 7}/trainer", {"step": step})
        else:
            co.unpark(f"job{(step - 1) % 7}/trainer")
    elif op == 13:
        co.mark_node_dead(f"h20-{step % 40}", "frozen")
        n = b._nodes[f"h20-{step % 40}"]
        b._nodes[n.name] = Node(n.name, n.gpu_type, n.gpus, n.dram_gb, alive=step % 3 != 0)
    elif op == 14:
        co.claim_writer(f"apply-{step}")
        if step % 2:
            co.set_placement_group(f"pg{step % 3}", {"bundles": [step]})
        else:
            co.drop_placement_group(f"pg{step % 3}")
    else:
        co.cancel(f"job{step % 7}/rollout", "left")
        b.creates[f"job{step % 7}/rollout-x"] = b.creates.get(f"job{step % 7}/rollout-x", 0) + 1


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_many_incremental_saves_load_as_exactly_what_a_whole_save_writes(tmp_path, seed):
    """Registry records that leave and come back, leases re-granted, requests, rejected effects,
    illegal transitions, commits, checkpoints, parked components, dead nodes, placement groups and
    creation counts, saved after every change: a load (without close, as after a kill) rebuilds
    the coordinator, creation counts and nodes byte for byte as a whole save encodes them."""
    rng = random.Random(seed)
    b = _cluster(tmp_path / "sim", 60)
    seen_rows = 0
    for step in range(400):
        _mutate(b, rng, step)
        b.save()
        seen_rows = max(seen_rows, _coord_rows(tmp_path / "sim"))
        if step % 50 == 49:
            b2 = SimBackend([], state_path=tmp_path / "sim")  # a load mid-way (another process, a kill)
            assert _world(b2) == _world(b), step
            b2.close(save=False)
    assert seen_rows > 0, "the saves never wrote incrementally"
    assert b.save_stats["whole"] < b.save_stats["saves"] / 4, b.save_stats
    b2 = SimBackend([], state_path=tmp_path / "sim")
    assert _world(b2) == _world(b)
    # and it goes on saving incrementally from what it loaded, as the first one did
    for step in range(400, 460):
        _mutate(b2, rng, step)
        b2.save()
    b3 = SimBackend([], state_path=tmp_path / "sim")
    assert _world(b3) == _world(b2)
    b2.close()
    assert _coord_rows(tmp_path / "sim") == 0, "a closed file holds the coordinator whole"
    assert _world(SimBackend([], state_path=tmp_path / "sim")) == _world(b2)


def test_the_changes_rows_are_folded_into_the_coordinator_before_they_outweigh_it(tmp_path):
    b = _cluster(tmp_path / "sim", 30)
    wid = _args(3)["worker"]["id"]
    for step in range(3000):
        b.coord("progress", wid, b.coordinator.leases[wid], {"r3": list(range(step % 50)) + [step]})
        b.coord("claim_writer", f"apply-{step}")
        b.save()
    assert b.save_stats["whole"] >= 2, b.save_stats  # folded at least once after the first whole save
    assert b._saved is not None and b._saved.delta_bytes <= max(b._saved.base_bytes, 1 << 18)
    assert _world(SimBackend([], state_path=tmp_path / "sim")) == _world(b)


def test_a_save_that_fails_part_way_leaves_the_old_save_and_its_changes_are_written_by_the_next(tmp_path):
    b = _cluster(tmp_path / "sim", 40)
    before = _world(b)
    wid = _args(5)["worker"]["id"]
    b.coord("set_status", wid, "draining")

    class Boom(Exception):
        pass

    real = b._conn

    class Failing:  # the connection, failing on the coord table's rows (the transaction is under way)
        def __getattr__(self, name):
            return getattr(real, name)

        def executemany(self, sql, rows):
            if "coord" in sql:
                raise Boom()
            return real.executemany(sql, rows)

    b._conn = Failing()  # type: ignore[assignment]
    with pytest.raises(Boom):
        b.save()
    b._conn = real
    assert _world(SimBackend([], state_path=tmp_path / "sim")) == before, "a failed save left part of itself"
    b.save()
    b2 = SimBackend([], state_path=tmp_path / "sim")
    assert b2.coordinator.registry[wid]["status"] == "draining" and _world(b2) == _world(b)


def test_another_process_saving_still_fences_an_incremental_save_and_refresh_reads_its_changes(tmp_path):
    a = _cluster(tmp_path / "sim", 30)
    b = SimBackend([], state_path=tmp_path / "sim")
    wid = _args(4)["worker"]["id"]
    a.coord("set_status", wid, "draining")
    a.save()
    assert _coord_rows(tmp_path / "sim") > 0
    b.coord("claim_writer", "other")
    with pytest.raises(Fenced):
        b.save()
    assert b.refresh()
    assert _world(b) == _world(a) and b.coordinator.registry[wid]["status"] == "draining"
    b.coord("set_status", wid, "stopping")
    b.save()
    with pytest.raises(Fenced):
        a.save()


def _add_coord_row(path: Path, key: str, blob: bytes) -> None:
    c = sqlite3.connect(path)
    c.execute("CREATE TABLE IF NOT EXISTS coord (key TEXT PRIMARY KEY, blob BLOB NOT NULL)")
    c.execute("INSERT OR REPLACE INTO coord VALUES (?, ?)", (key, blob))
    c.commit()
    c.close()


@pytest.mark.parametrize("key,value,says", [
    ('["evil","x"]', ("v",), "no save writes"),
    ("not json", ("v",), "no save writes"),
    ('["kv","records"]', (5,), "no save writes"),  # an attribute that is not one of the coordinator's records
    ('["kv","next_epoch"]', ("abc",), "next_epoch"),
    ('["registry","w"]', ({"id": "w", "role": "evil"},), "registry"),
    ('["registry","w"]', (1, 2, 3), "malformed"),
    ('["rejected",5]', ({"worker": "w"},), "out of order"),
    ('["leases","w"]', ("one",), "leases"),
    ('["creates","w"]', (-1,), "created workers"),
])
def test_a_crafted_or_damaged_change_row_is_refused_with_the_flag_and_the_way_out(tmp_path, key, value, says):
    b = _cluster(tmp_path / "sim", 3)
    b.close()
    _add_coord_row(tmp_path / "sim", key, safestate.dumps(value))
    with pytest.raises(UserError) as e:
        SimBackend([], state_path=tmp_path / "sim")
    assert "--sim-state" in str(e.value) and says in str(e.value), str(e.value)


def test_a_damaged_change_row_is_refused_by_status(tmp_path):
    from tests.conftest import run_cli

    b = _cluster(tmp_path / "sim", 3)
    b.coord("set_status", _args(1)["worker"]["id"], "draining")
    b.save()
    c = sqlite3.connect(tmp_path / "sim")
    (blob,) = c.execute("SELECT blob FROM coord LIMIT 1").fetchone()
    c.execute("UPDATE coord SET blob=?", (blob[:-2] + b"zz",))
    c.commit()
    c.close()
    r = run_cli("status", "--sim-state", str(tmp_path / "sim"), "--journal", str(tmp_path / "j.db"))
    assert r.returncode == 2 and "checksum" in r.stderr and "Traceback" not in r.stderr, r.stderr


_CHILD = textwrap.dedent("""
    import hashlib, random, sys
    sys.path.insert(0, {root!r})
    from executor import safestate
    from executor.backends.sim import SimBackend
    from tests.executor.test_exec_simsave import _cluster, _mutate, _world
    b = _cluster(__import__("pathlib").Path({path!r}), 60)
    rng = random.Random(7)
    for step in range(100000):
        _mutate(b, rng, step)
        print(hashlib.sha256(_world(b)).hexdigest(), flush=True)  # what the save below writes
        b.save()
""")


def test_a_kill_at_any_point_of_many_incremental_saves_leaves_one_whole_save(tmp_path):
    """A process saving incrementally is killed (SIGKILL) mid-run: the file loads as the world of
    its last save, or of the one before when the kill came during a save."""
    path = tmp_path / "sim"
    child = subprocess.Popen([sys.executable, "-c", _CHILD.format(root=str(ROOT), path=str(path))], stdout=subprocess.PIPE,
                             text=True, cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)})
    try:
        assert child.stdout is not None
        lines = []
        for line in child.stdout:
            lines.append(line.strip())
            if len(lines) >= 150:
                break
        child.send_signal(signal.SIGKILL)
        lines += [x.strip() for x in child.stdout.read().splitlines()]
    finally:
        child.kill()
        child.wait()
    assert len(lines) >= 150 and _coord_rows(path) > 0
    import hashlib

    got = hashlib.sha256(_world(SimBackend([], state_path=path))).hexdigest()
    assert got in lines[-2:], (got, lines[-3:])


def test_a_file_of_the_previous_layout_loads_and_goes_on_saving_incrementally(tmp_path):
    """What the release before wrote: the world and workers tables only (no coord table)."""
    path = tmp_path / "sim"
    b = _cluster(path, 20)
    b.close()
    c = sqlite3.connect(path)
    c.execute("DROP TABLE coord")
    c.commit()
    c.close()
    ro = SimBackend([], state_path=path, observe_only=True)  # status: read as it is, nothing created
    assert _world(ro) == _world(b) and _coord_rows(path) == 0
    ro.close(save=False)
    b2 = SimBackend([], state_path=path)
    wid = _args(2)["worker"]["id"]
    b2.coord("set_status", wid, "draining")
    b2.save()
    assert _coord_rows(path) > 0 and b2.save_stats["whole"] == 0
    assert _world(SimBackend([], state_path=path)) == _world(b2)
