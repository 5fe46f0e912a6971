"""Real daemons on two faults that used to take the whole loop down.

* A job whose spec names a file (a trace under ``--data-dir``) that is deleted or damaged after it
  was accepted: every cycle failed reading it, five in a row exited 1, and each restart did the
  same (a crash loop; a cancel never took effect). Now that job fails alone, its reason naming the
  field, and the other jobs, submissions and cancels go on.
* An apply that raised (the executor's simulated backend file could not be written, e.g. made
  read-only after the daemon's start-up check, which refuses one read-only at start): the plan
  stayed ``applying`` for ever while health said ok, and every later admission failed on the
  executor's unfinished journal entry until a restart. Now each cycle retries the resume first,
  makes no new plan on top of it, health and readiness name the plan and the error, and the resume
  completes once the file can be written again, without a restart.

Both run in process in ``tests/daemon/test_daemon_cycle.py`` (the same cycle code, no subprocess);
these real-daemon reproductions (about 30 s) run with ``RL_PLANNER_SLOW=1``.
"""

from __future__ import annotations

import os
import shutil

import httpx
import pytest
from daemonproc import DaemonProc, healthy, job, query, wait_for, write_cluster

pytestmark = pytest.mark.skipif(os.environ.get("RL_PLANNER_SLOW") != "1",
                                reason="real daemons, about 30 s; test_daemon_cycle.py runs the same cases in process: set RL_PLANNER_SLOW=1")

COMMON = ("--placer", "solo", "--period-s", "0.2")


def _alive(d: DaemonProc, what: str):
    """A predicate for wait_for that fails at once, with the daemon's log, if the daemon exited."""
    def check(pred):
        def run():
            try:
                return pred()
            except httpx.TransportError:  # not answering: fine while it runs (the next poll asks again)
                if d.running():
                    return False
                raise AssertionError(f"the daemon exited ({d.proc.returncode}) while waiting for {what}:\n{d.output()[-4000:]}") from None
        return run
    return check


def _state(c, name: str) -> str:
    return c.get(f"/v1/jobs/{name}").json()["state"]


def test_a_job_whose_trace_file_is_deleted_or_damaged_fails_alone_and_the_restart_goes_on(tmp_path):
    data = tmp_path / "data"
    data.mkdir()
    for f in ("gone.csv", "bad.csv"):
        (data / f).write_text("n\n" + "\n".join(str(100 + i) for i in range(50)) + "\n")

    def traced(name: str, path: str) -> dict:
        return job(name, rollout={"response_lengths": {"source": "trace", "path": path, "column": "n"}})

    d = DaemonProc(tmp_path, "--scenario", str(write_cluster(tmp_path)), "--data-dir", str(data), *COMMON)
    with d.client() as c:
        for spec in (traced("gone", "gone.csv"), traced("bad", "bad.csv"), job("ok")):
            assert c.post("/v1/jobs", json=spec).status_code == 201
        wait_for(_alive(d, "the three jobs running")(lambda: {_state(c, n) for n in ("gone", "bad", "ok")} == {"running"}),
                 what="the three jobs running")
    (data / "gone.csv").unlink()
    (data / "bad.csv").write_text("n\nSECRET-VALUE-7\n")
    assert d.stop() == 0, d.output()

    again = DaemonProc(tmp_path, "--data-dir", str(data), *COMMON, name="again")  # used to fail every cycle, then exit 1
    with again.client() as c:
        ended = _alive(again, "'gone' and 'bad' failed")(lambda: {_state(c, n) for n in ("gone", "bad")} == {"failed"})
        wait_for(ended, what="'gone' and 'bad' failed")
        for name in ("gone", "bad"):
            reason = c.get(f"/v1/jobs/{name}").json()["reason"]
            assert "rollout.response_lengths.path" in reason and "SECRET" not in reason, reason
            assert f"{name}.csv" in reason and f"/{name}.csv" not in reason, reason  # the client's path, not the server's
        decisions = c.get("/v1/decisions", params={"limit": 1000}).text
        assert "gone.csv" in decisions and str(data.resolve()) not in decisions, decisions[:2000]
        assert _state(c, "ok") == "running"
        assert c.post("/v1/jobs", json=job("late")).status_code == 201
        assert c.delete("/v1/jobs/ok").status_code == 202
        wait_for(_alive(again, "'late' running and 'ok' cancelled")(lambda: (_state(c, "late"), _state(c, "ok")) == ("running", "cancelled")),
                 what="'late' running and 'ok' cancelled")
        health = c.get("/v1/health").json()
        assert healthy(health), health
    assert again.stop() == 0
    out = again.output()
    assert "Traceback" not in out and "failed: TraceError" not in out and "SECRET" not in out, out


DROP_CAPS = """\
import os, sys

if os.geteuid() == 0 and not os.environ.get("RL_TEST_CAPS_DROPPED"):  # root writes a mode-0400 file anyway: drop the capabilities that let it
    os.environ["RL_TEST_CAPS_DROPPED"] = "1"
    os.execvp("setpriv", ["setpriv", "--bounding-set=-dac_override,-dac_read_search,-fowner", "--inh-caps=-all", sys.executable, *sys.argv])
# The daemon refuses a read-only executor file at start (check_cluster_files_writable); this one stands
# for a file that turned read-only after that check: the check passes, and the file is read-only when opened.
import planner.daemon.service as service

service.check_cluster_files_writable = lambda o: None
from planner.cli import entry

sys.argv = ["planner", *sys.argv[1:]]
raise SystemExit(entry())
"""


def _writable(sim) -> None:
    """Give the simulated backend's file write permission back, with the -wal and -shm files SQLite
    created beside it with the same (read-only) mode while it was read-only."""
    for f in (sim, sim.with_name(sim.name + "-wal"), sim.with_name(sim.name + "-shm")):
        if f.exists():
            f.chmod(0o600)


def test_an_apply_that_raised_is_retried_first_reported_and_finishes_once_the_file_is_writable(tmp_path):
    if os.geteuid() == 0 and shutil.which("setpriv") is None:
        pytest.skip("as root, a read-only file stays writable without setpriv to drop CAP_DAC_OVERRIDE")
    d = DaemonProc(tmp_path, "--scenario", str(write_cluster(tmp_path)), *COMMON)
    with d.client() as c:
        assert c.post("/v1/jobs", json=job("a")).status_code == 201
        wait_for(_alive(d, "'a' running")(lambda: _state(c, "a") == "running"), what="'a' running")
    assert d.stop() == 0, d.output()
    sim = d.state.with_name(d.state.name + ".executor-sim")
    if not sim.exists():
        pytest.skip("the executor is not in this build (the simulated cluster applies by itself)")
    launcher = tmp_path / "dropcaps.py"
    launcher.write_text(DROP_CAPS)
    sim.chmod(0o400)  # read-only after the start-up check (the launcher skips it): the next apply cannot save a step
    try:
        again = DaemonProc(tmp_path, *COMMON, name="again", launcher=(str(launcher),))
        with again.client() as c:
            assert c.post("/v1/jobs", json=job("b")).status_code == 201

            def stuck():
                h = c.get("/v1/health").json()
                return [p for p in h["problems"] if "stuck applying" in p]

            problem = wait_for(_alive(again, "health to report the stuck apply")(stuck), what="health to report the stuck apply")[0]
            plan = query(again.state, "SELECT id FROM plans WHERE status='applying'")
            assert len(plan) == 1 and f"plan {plan[0]['id']} " in problem and "readonly database" in problem, (plan, problem)
            r = c.get("/readyz")
            assert r.status_code == 503 and "stuck applying" in r.text, r.text
            assert c.post("/v1/jobs", json=job("c")).status_code == 201
            plans = query(again.state, "SELECT COUNT(*) AS n FROM plans")[0]["n"]
            decisions = query(again.state, "SELECT COUNT(*) AS n FROM decisions")[0]["n"]
            # a few retries later: still stuck, and nothing new decided on top of it ('c' waits)
            retried = _alive(again, "two more failed resumes")(lambda: any(f"({n} attempt(s))" in " ".join(stuck()) for n in (3, 4, 5)))
            wait_for(retried, what="two more failed resumes")
            assert query(again.state, "SELECT COUNT(*) AS n FROM plans")[0]["n"] == plans
            assert query(again.state, "SELECT COUNT(*) AS n FROM decisions")[0]["n"] == decisions
            assert _state(c, "c") == "pending" and _state(c, "b") == "admitted"
            _writable(sim)
            wait_for(_alive(again, "'b' and 'c' running")(lambda: (_state(c, "b"), _state(c, "c")) == ("running", "running")),
                     what="'b' and 'c' running after the file became writable (no restart)")
            assert query(again.state, "SELECT COUNT(*) AS n FROM plans WHERE status='applying'")[0]["n"] == 0
            health = c.get("/v1/health").json()
            assert healthy(health), health
            assert c.get("/readyz").status_code == 200
        assert again.stop() == 0, again.output()
    finally:
        _writable(sim)
