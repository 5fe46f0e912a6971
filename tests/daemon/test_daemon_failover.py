"""Failover on fresh state: the leader frozen mid-apply (SIGSTOP), the standby takes over and finishes
from the cluster as it is, the old leader woken (SIGCONT) runs no step under its stale epoch."""

from __future__ import annotations

import json
import signal

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
