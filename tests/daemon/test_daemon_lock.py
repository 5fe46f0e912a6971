"""A state file locked by another process (an ``sqlite3`` shell in a write transaction) and a state file or
folder the daemon may not write.

Locked: the heartbeat keeps retrying (``/v1/health`` says it is failing) and renews once the lock is gone;
if the lease expires first the daemon steps down and says why (exit 1); API requests answer 503 with
``Retry-After``; a start (or the resume of an interrupted apply at start) under the lock exits 2 naming
the state file. ``RL_PLANNER_SQLITE_BUSY_S=1``: SQLite gives up waiting for the lock after a second
(the daemon's default is 30 s), so the tests need not hold a lock for half a minute.

Not writable: refused before SQLite opens anything (exit 2, "state file/folder not writable"), no -wal
or -shm left behind with the file's read-only mode; sidecars left with such a mode are named, not
called a damaged state file. As root, the daemon runs under ``setpriv`` without the capabilities that
bypass file permissions.
"""

from __future__ import annotations

import sqlite3
import subprocess
import sys
from contextlib import contextmanager

from daemonproc import DEADLINE_S, ROOT, DaemonProc, env, job, query, wait_for, write_cluster
from tests.conftest import unprivileged

BUSY = {"RL_PLANNER_SQLITE_BUSY_S": "1"}


@contextmanager
def _locked(state):
    """Another process's write transaction on the state file, held for the block (rolled back after it)."""
    c = sqlite3.connect(state, timeout=DEADLINE_S, isolation_level=None)
    c.execute("BEGIN IMMEDIATE")
    try:
        yield c
    finally:
        c.rollback()
        c.close()


def _health(c) -> dict:
    r = c.get("/v1/health")
    assert r.status_code == 200, r.text
    return r.json()


def test_a_locked_state_file_answers_503_the_heartbeat_reports_it_and_renews_after(tmp_path):
    # TTL 30 s: renewed every 10 s, so the lease has 20 s left when a renewal first fails; period 10 s: the
    # cycles that fail meanwhile stay fewer than the five in a row that end a daemon
    d = DaemonProc(tmp_path, "--scenario", str(write_cluster(tmp_path)), "--period-s", "10", "--lease-ttl-s", "30", extra_env=BUSY)
    with d.client() as c:
        wait_for(lambda: _health(c)["status"] == "ok", what="the daemon healthy before the lock")
        with _locked(d.state):
            r = c.post("/v1/jobs", json=job("a"))
            assert r.status_code == 503, r.text
            assert r.headers.get("retry-after", "").isdigit(), r.headers
            body = r.json()
            assert "locked" in body["error"] and "internal" not in body["error"], body
            assert "this request was not carried out" in body["problems"][0]["message"], body
            h = wait_for(lambda: (lambda h: h if any("heartbeat cannot renew" in p for p in h["problems"]) else None)(_health(c)),
                         what="/v1/health to report the heartbeat failing")
            assert h["status"] == "degraded" and h["role"] == "applier", h
            assert h["lease"]["pid"] == d.proc.pid, h
        wait_for(lambda: _health(c)["status"] == "ok", what="/v1/health ok again once the lock is gone (the lease renewed)")
        assert d.running(), d.output()
        r = c.post("/v1/jobs", json=job("a"))
        assert r.status_code == 201, r.text
        assert _health(c)["lease"]["pid"] == d.proc.pid
    assert d.stop() == 0, d.output()
    out = d.output()
    assert "Traceback" not in out and "Exception in thread" not in out, out
    assert "renewed the applier lease again" in out, out


def test_a_lock_held_past_the_lease_makes_the_daemon_step_down_and_say_why(tmp_path):
    d = DaemonProc(tmp_path, "--scenario", str(write_cluster(tmp_path)), "--period-s", "10", "--lease-ttl-s", "3", extra_env=BUSY)
    with _locked(d.state):
        rc = d.wait(what="the daemon to step down when its lease expired under the lock")
    out = d.output()
    assert rc == 1, out
    assert "stepping down: the applier lease expired before the heartbeat could renew it" in out and "locked by another process" in out, out
    assert "Traceback" not in out and "Exception in thread" not in out, out
    again = DaemonProc(tmp_path, "--period-s", "10", name="again")  # nothing it left blocks the next start
    with again.client() as c:
        assert _health(c)["role"] == "applier"
    assert again.stop() == 0, again.output()


def test_a_start_under_a_lock_exits_2_naming_the_state_file(tmp_path):
    d = DaemonProc(tmp_path, "--scenario", str(write_cluster(tmp_path)), "--period-s", "10")
    assert d.stop() == 0, d.output()
    with _locked(d.state):
        again = DaemonProc(tmp_path, "--period-s", "10", name="again", wait=False, extra_env=BUSY)
        rc = again.wait(what="the start under the lock to give up")
    out = again.output()
    assert rc == 2, out
    assert f"the state file {d.state} stayed locked by another process" in out, out
    assert "restore" not in out and "Traceback" not in out and "internal error" not in out, out


LOCK_AT_RESUME = """\
import sqlite3, sys

from planner.daemon import cycle

_recover = cycle.Loop.recover


def recover(self):
    # another process takes the state file's write lock just as the daemon starts resuming the interrupted apply
    cycle.HELD = sqlite3.connect(self.store.path, isolation_level=None)
    cycle.HELD.execute("BEGIN IMMEDIATE")
    print("locked the state file", flush=True)
    return _recover(self)


cycle.Loop.recover = recover
from planner.cli import entry

sys.argv = ["planner", *sys.argv[1:]]
raise SystemExit(entry())
"""


def test_resuming_an_apply_under_a_lock_exits_2_naming_the_state_file(tmp_path):
    d = DaemonProc(tmp_path, "--scenario", str(write_cluster(tmp_path)), "--period-s", "0.2", "--sim-step-delay-s", "30")
    journal = d.state.with_name(d.state.name + ".journal")
    with d.client() as c:
        r = c.post("/v1/jobs", json=job("a"))
        assert r.status_code == 201, r.text
    wait_for(lambda: query(d.state, "SELECT id FROM plans WHERE status='applying'"), what="an apply under way")
    d.kill()
    assert query(d.state, "SELECT id FROM plans WHERE status='applying'"), "the kill left the apply unfinished"
    script = tmp_path / "lock_at_resume.py"
    script.write_text(LOCK_AT_RESUME)
    again = DaemonProc(tmp_path, "--period-s", "0.2", name="again", wait=False, launcher=(str(script),), extra_env=BUSY)
    rc = again.wait(what="the resume under the lock to give up")
    out = again.output()
    assert "locked the state file" in out, out
    assert rc == 2, out
    assert f"the state file {d.state} stayed locked by another process" in out and "resuming" in out, out
    assert "Traceback" not in out and "internal error" not in out, out
    assert journal.exists()


# ------------------------------------------------------------------------------ permissions

def _unprivileged() -> list[str]:
    return unprivileged('the daemon')


def _start(state, *args: str) -> subprocess.CompletedProcess:
    """A daemon start that is expected to end by itself (killed at the deadline if it does not)."""
    cmd = [*_unprivileged(), sys.executable, "-m", "planner", "daemon", "--state", str(state), "--listen", "127.0.0.1:0",
           "--period-s", "0.2", "--max-cycles", "1", *args]
    try:
        return subprocess.run(cmd, cwd=ROOT, env=env(), capture_output=True, text=True, timeout=DEADLINE_S)
    except subprocess.TimeoutExpired as exc:  # (subprocess.run killed it)
        raise TimeoutError(f"a daemon start did not end within {DEADLINE_S} s: {exc.stdout} {exc.stderr}") from None


def test_a_state_file_or_folder_it_may_not_write_is_refused_before_sqlite_touches_it(tmp_path):
    _unprivileged()
    folder = tmp_path / "st"
    folder.mkdir()
    state = folder / "st.sqlite"
    first = _start(state, "--scenario", str(write_cluster(tmp_path)))
    assert first.returncode == 0, first.stdout + first.stderr
    wal, shm = (state.with_name(state.name + s) for s in ("-wal", "-shm"))
    assert not wal.exists() and not shm.exists(), "a clean stop leaves no sidecars"

    state.chmod(0o400)
    r = _start(state)
    assert r.returncode == 2, r.stdout + r.stderr
    assert f"state file not writable: {state}; check its permissions" in r.stderr, r.stderr
    assert "internal error" not in r.stderr and "Traceback" not in r.stderr, r.stderr
    assert not wal.exists() and not shm.exists(), "no read-only -wal or -shm was left to block the next start"
    state.chmod(0o600)
    r = _start(state)
    assert r.returncode == 0, r.stdout + r.stderr

    folder.chmod(0o555)
    try:
        r = _start(state)
    finally:
        folder.chmod(0o755)
    assert r.returncode == 2, r.stdout + r.stderr
    assert f"state folder not writable: {folder}; check its permissions" in r.stderr, r.stderr
    assert "restore" not in r.stderr and "Traceback" not in r.stderr, r.stderr

    # sidecars with a mode that blocks every start (as an older release left them): named, with the fix
    for side in (wal, shm):
        side.write_bytes(b"")
        side.chmod(0o400)
    r = _start(state)
    assert r.returncode == 2, r.stdout + r.stderr
    assert f"sidecar {wal} (mode 0400) and {shm} (mode 0400) are not writable" in r.stderr, r.stderr
    assert f"chmod u+rw {wal} {shm}" in r.stderr, r.stderr
    assert "restore" not in r.stderr and "Traceback" not in r.stderr, r.stderr
    for side in (wal, shm):
        side.chmod(0o600)
    r = _start(state)
    assert r.returncode == 0, r.stdout + r.stderr

