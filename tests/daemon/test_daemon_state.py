"""The daemon's state: the lifecycle table, the SQLite store, the one-applier lease."""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
import threading

import pytest

from planner.daemon import lifecycle
from planner.daemon.lease import Lease
from planner.daemon.lifecycle import CANCEL_TARGET, TRANSITIONS, IllegalTransition, JobState
from planner.daemon.store import Conflict, NotFound, StateFileError, Store


# ------------------------------------------------------------------------------ lifecycle
def test_every_state_reaches_a_terminal_state_and_terminals_have_no_exit():
    nxt: dict[JobState, set] = {s: set() for s in JobState}
    for a, b in TRANSITIONS:
        nxt[a].add(b)
    for s in JobState:
        if s.terminal:
            assert not nxt[s], f"terminal {s} has moves {nxt[s]}"
            continue
        seen, todo = set(), [s]
        while todo:
            x = todo.pop()
            for y in nxt[x] - seen:
                seen.add(y)
                todo.append(y)
        assert any(t.terminal for t in seen), f"{s} cannot end"


def test_illegal_moves_are_refused_with_what_is_allowed():
    assert lifecycle.check("j", "pending", "admitted")
    with pytest.raises(IllegalTransition) as e:
        lifecycle.check("j", JobState.COMPLETED, JobState.RUNNING)
    assert "nothing (terminal)" in str(e.value)
    with pytest.raises(IllegalTransition) as e:
        lifecycle.check("j", JobState.PENDING, JobState.RUNNING)
    assert "admitted" in str(e.value) and "cancelled" in str(e.value)


def test_cancel_targets_are_legal_moves():
    for src, dst in CANCEL_TARGET.items():
        if dst is None:
            assert src.terminal
        elif dst is not src:
            assert (src, dst) in TRANSITIONS


# ---------------------------------------------------------------------------------- store
def test_store_submit_transition_events_and_conflicts(tmp_path):
    st = Store(tmp_path / "s.sqlite")
    st.submit_job("a", {"name": "a"}, now=1.0, arrives_at=5.0, slo_s=100.0)
    with pytest.raises(Conflict):
        st.submit_job("a", {"name": "a"}, now=2.0, arrives_at=5.0, slo_s=100.0)
    with st.tx() as c:
        st.transition(c, "a", JobState.ADMITTED, "placed", 6.0)
    assert st.get_job("a").state is JobState.ADMITTED and st.get_job("a").admitted_at == 6.0
    # An illegal move inside a transaction rolls the whole transaction back.
    with pytest.raises(IllegalTransition):
        with st.tx() as c:
            st.set_job_reason(c, "a", "should not stick")
            st.transition(c, "a", JobState.COMPLETED, "skips running", 7.0)
    r = st.get_job("a")
    assert r.state is JobState.ADMITTED and r.reason == "placed"
    assert [e["to_state"] for e in st.job_events("a")] == ["pending", "admitted"]
    with pytest.raises(NotFound):
        st.request_cancel("nope", 1.0)
    st.request_cancel("a", 8.0)
    assert st.get_job("a").cancel_requested_at == 8.0
    with st.tx() as c:
        st.transition(c, "a", JobState.CANCELLING, "x", 9.0)
        st.transition(c, "a", JobState.CANCELLED, "x", 9.0)
    with pytest.raises(Conflict):
        st.request_cancel("a", 10.0)
    assert st.count_jobs()["cancelled"] == 1


def test_store_refuses_another_schema_version_and_non_sqlite_files(tmp_path):
    p = tmp_path / "s.sqlite"
    Store(p).close()
    c = sqlite3.connect(p)
    c.execute("UPDATE meta SET value='99' WHERE key='schema_version'")
    c.commit()
    c.close()
    with pytest.raises(StateFileError, match="schema version 99"):
        Store(p)
    junk = tmp_path / "junk.sqlite"
    junk.write_text("this is not a database " * 100)
    with pytest.raises(StateFileError, match="not a usable SQLite"):
        Store(junk)


def test_store_concurrent_writers_do_not_fail(tmp_path):
    """The API threads append telemetry while the loop writes transitions: busy waits, no errors."""
    st = Store(tmp_path / "s.sqlite")
    for i in range(20):
        st.submit_job(f"j{i}", {}, 0.0, 0.0, None)
    errors = []

    def telemetry():
        try:
            for k in range(300):
                st.add_telemetry("j0", 0.0, float(k), 0, {"k": k})
        except Exception as exc:  # noqa: BLE001
            errors.append(exc)

    def loop():
        try:
            for i in range(20):
                with st.tx() as c:
                    st.transition(c, f"j{i}", JobState.ADMITTED, "x", 1.0)
                    st.set_kv(c, "cycle", i)
        except Exception as exc:  # noqa: BLE001
            errors.append(exc)

    ts = [threading.Thread(target=telemetry) for _ in range(3)] + [threading.Thread(target=loop)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    assert not errors
    assert st.telemetry_count() == 900 and st.count_jobs()["admitted"] == 20
    rows = st.telemetry_after(0)
    assert [r[0] for r in rows] == sorted(r[0] for r in rows)
    with st.tx() as c:
        assert st.prune_telemetry(c, rows[449][0], older_than_wall=1.0) == 450


# ---------------------------------------------------------------------------------- lease
def test_lease_one_holder_expiry_and_fencing(tmp_path):
    st = Store(tmp_path / "s.sqlite")
    a, b = Lease(st, ttl_s=10, listen="http://a"), Lease(st, ttl_s=10, listen="http://b")
    b.pid = a.pid + 1  # pretend b is another live process on this host
    assert a.try_acquire(now=100.0)[0]
    taken, holder = b.try_acquire(now=105.0)
    assert not taken and holder.holder == a.id
    assert f"pid {a.pid}" in holder.describe(now=105.0) and "http://a" in holder.describe(now=105.0)
    assert a.renew(now=108.0)
    assert not b.try_acquire(now=117.0)[0]  # renewed at 108: valid to 118
    assert b.try_acquire(now=118.5)[0]  # expired: b takes it, epoch 2
    assert b.epoch == 2
    with st.tx() as c:
        assert not a.verify(c)  # fencing: a may not write decisions any more
        assert b.verify(c)
    assert not a.renew(now=119.0) and not a.held
    b.release()
    assert b.holder() is None


def test_lease_taken_over_from_a_dead_process_on_this_host(tmp_path):
    st = Store(tmp_path / "s.sqlite")
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    dead = Lease(st, ttl_s=3600)
    dead.pid = child.pid  # a holder whose process has exited
    assert dead.try_acquire()[0]
    alive = Lease(st, ttl_s=3600)
    assert alive.try_acquire()[0], "a holder that no longer exists must not block a restart for a whole TTL"
    me = Lease(st, ttl_s=3600)
    me.pid = os.getppid()  # a live process: must not be taken over
    assert not me.try_acquire()[0]
