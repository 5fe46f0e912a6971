"""Failover on fresh state: the leader frozen mid-apply (SIGSTOP), the standby takes over and finishes
from the cluster as it is, the old leader woken (SIGCONT) runs no step under its stale epoch."""

from __future__ import annotations

import json
import signal
import time

from daemonproc import DaemonProc, applied_steps, job, query, step_delay, wait_for, write_cluster


def test_sigstop_the_leader_mid_apply_the_standby_finishes_the_woken_leader_is_fenced(tmp_path):
    trace = write_cluster(tmp_path, jobs=[job(n) for n in "ab"])
    leader = DaemonProc(tmp_path, "--scenario", str(trace), "--period-s", "0.2", "--placer", "solo", "--lease-ttl-s", "3",
                        "--sim-step-delay-s", step_delay(), name="leader")
    standby = None
    try:
        standby = DaemonProc(tmp_path, "--period-s", "0.2", "--placer", "solo", "--standby", "--lease-ttl-s", "3", name="standby")
        wait_for(lambda: len(applied_steps(leader.state)) >= 2, what="the leader's apply under way")
        leader.signal(signal.SIGSTOP)
        frozen_at = applied_steps(leader.state)
        with standby.client() as c:
            wait_for(lambda: c.get("/v1/health").json()["role"] == "applier", what="the standby took the lease")
            wait_for(lambda: all(c.get(f"/v1/jobs/{n}").json()["state"] == "running" for n in "ab"),
                     what="the standby finished the apply")
        leader.signal(signal.SIGCONT)
        assert leader.wait(what="the superseded leader to stop") != 0, "the superseded leader stops"
        out = leader.output()
        assert "lease" in out and "Traceback" not in out, out
        with standby.client() as c:
            cluster = c.get("/v1/cluster").json()
            assert c.get("/v1/health").json()["role"] == "applier"
    finally:
        if leader.proc.poll() is None:
            leader.signal(signal.SIGCONT)
        leader.stop()
        if standby is not None:
            assert standby.stop() == 0, standby.output()
    done = applied_steps(leader.state)
    assert done[:len(frozen_at)] == frozen_at, "steps done before the freeze were kept"
    assert len({(s["apply_id"], s["seq"]) for s in done}) == len(done), "no step was done twice"
    apply_id = frozen_at[0]["apply_id"]
    planned = query(leader.state.with_name(leader.state.name + ".journal"), "SELECT steps_json FROM applies WHERE id=?", (apply_id,))
    n_planned = len(json.loads(planned[0]["steps_json"]))
    assert len([s for s in done if s["apply_id"] == apply_id]) == n_planned, "the standby resumed the same apply, no extra steps"
    assert sum(s["attempts"] - 1 for s in done) <= 1, "at most the step the freeze interrupted ran again"
    # The standby saw every worker the old leader made (a fresh view), and nothing was created twice.
    from executor.backends.sim import SimBackend

    sim = SimBackend([], state_path=leader.state.with_name(leader.state.name + ".executor-sim"))
    try:
        assert not [w for w, n in sim.creates.items() if n > 1], sim.creates
        live = {r["id"] for r in sim.coord("records") if r.get("status") != "dead"}
        shown = {w["id"] for comp in cluster["components"] for w in comp["workers"]}
        assert shown == live and live, (sorted(live - shown)[:5], sorted(shown - live)[:5])
        assert sim.leaks() == []
    finally:
        sim.close(save=False)


def test_a_restart_whose_cluster_file_is_gone_under_a_running_journal_is_refused(tmp_path):
    trace = write_cluster(tmp_path, jobs=[job(n) for n in "ab"])
    d = DaemonProc(tmp_path, "--scenario", str(trace), "--period-s", "0.2", "--placer", "solo", "--sim-step-delay-s", step_delay())
    wait_for(lambda: len(applied_steps(d.state)) >= 1, what="a step done")
    d.kill()
    sim = d.state.with_name(d.state.name + ".executor-sim")
    for suffix in ("", "-wal", "-shm"):
        sim.with_name(sim.name + suffix).unlink(missing_ok=True)
    again = DaemonProc(tmp_path, "--period-s", "0.2", name="again", wait=False)
    assert again.wait(60) == 2
    out = again.output()
    assert "is gone" in out and "interrupted apply" in out and "Traceback" not in out, out
    assert not sim.exists(), "no empty cluster was started in its place"



# the stall limit at a 0.1 s re-optimisation limit (3 x 0.1 s + a floor of 8 s where the daemon's default is 30 s:
# $RL_PLANNER_STALL_FLOOR_S, given to the daemons of the two tests below); the lease TTL
STALL_FLOOR_S = 8.0
STALL_S, TTL_S = 3 * 0.1 + STALL_FLOOR_S, 3.0
FLOOR_ENV = {"RL_PLANNER_STALL_FLOOR_S": str(STALL_FLOOR_S)}
COMMON = ("--period-s", "0.2", "--placer", "solo", "--lease-ttl-s", str(TTL_S), "--reoptimise-time-limit-s", "0.1")


def test_an_apply_longer_than_the_stall_limit_keeps_the_lease(tmp_path):
    """Each executor step that completes is the loop's progress: a leader whose apply lasts longer than the
    stall limit (each step well within it) keeps renewing its lease. Before, only a cycle's end or its wait
    counted: past the stall limit the leader stopped renewing mid-apply and a standby took the lease."""
    trace = write_cluster(tmp_path, jobs=[job("a")])  # one solo job: 29 executor steps, 0.7 s each (20.3 s in all)
    leader = DaemonProc(tmp_path, "--scenario", str(trace), *COMMON, "--sim-step-delay-s", "0.7", name="leader", extra_env=FLOOR_ENV)
    standby = DaemonProc(tmp_path, *COMMON, "--standby", name="standby", extra_env=FLOOR_ENV)
    journal = leader.state.with_name(leader.state.name + ".journal")

    def apply_age():  # seconds since the leader's apply began, while it runs
        rows = query(journal, "SELECT started FROM applies WHERE status='running'") if journal.exists() else []
        return time.time() - rows[0]["started"] if rows else 0.0

    wait_for(lambda: apply_age() > STALL_S + TTL_S + 2, what="the leader's apply running past the stall limit and a lease TTL")
    assert query(leader.state, "SELECT pid, epoch FROM lease") == [{"pid": leader.proc.pid, "epoch": 1}]
    with leader.client() as c:
        wait_for(lambda: c.get("/v1/jobs/a").json()["state"] == "running", what="the leader finishing its apply")
        assert c.get("/v1/health").json()["role"] == "applier"
    with standby.client() as c:
        assert c.get("/v1/health").json()["role"] == "standby"
    assert query(leader.state, "SELECT pid, epoch FROM lease") == [{"pid": leader.proc.pid, "epoch": 1}]
    assert "made no progress" not in leader.output(), leader.output()
    assert leader.stop() == 0 and standby.stop() == 0, (leader.output(), standby.output())


def test_a_standby_counts_progress_from_when_it_takes_the_lease(tmp_path):
    """A standby that has waited longer than the stall limit takes the lease (its leader SIGKILLed in the first
    step of an apply) and resumes that apply: its loop's progress counts from the takeover, so it renews the
    lease during the first resumed step. Before, its last progress was its own start: it logged 'made no
    progress' and did not renew until a step completed (the lease could lapse to a third daemon)."""
    leader = DaemonProc(tmp_path, "--scenario", str(write_cluster(tmp_path)), *COMMON, "--sim-step-delay-s", "600", name="leader",
                        extra_env=FLOOR_ENV)
    standby = DaemonProc(tmp_path, *COMMON, "--standby", "--sim-step-delay-s", "2", name="standby", extra_env=FLOOR_ENV)
    since = time.monotonic()
    wait_for(lambda: time.monotonic() - since > STALL_S + 2, every=0.5, what="the standby waiting longer than the stall limit")
    with leader.client() as c:
        assert c.post("/v1/jobs", json=job("a")).status_code == 201
    journal = leader.state.with_name(leader.state.name + ".journal")
    wait_for(lambda: journal.exists() and query(journal, "SELECT id FROM applies WHERE status='running'"),
             what="the leader's apply begun (its first step takes 600 s)")
    assert applied_steps(leader.state) == []
    leader.kill()
    with standby.client() as c:
        wait_for(lambda: c.get("/v1/health").json()["role"] == "applier", what="the standby taking the lease")
    wait_for(lambda: len(applied_steps(leader.state)) >= 2, what="the promoted standby resuming the apply, 2 s a step")
    assert query(leader.state, "SELECT pid, epoch FROM lease") == [{"pid": standby.proc.pid, "epoch": 2}]
    out = standby.output()
    assert "made no progress" not in out and "Traceback" not in out, out
    assert standby.stop() == 0, standby.output()
