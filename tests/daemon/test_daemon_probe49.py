"""Probe 49: the daemon over time, from outside (a standby on a virtual clock)."""

from __future__ import annotations

from daemonproc import DaemonProc, job, kv, wait_for, write_cluster


def test_a_virtual_clock_standby_stamps_submissions_and_health_with_the_applier_time(tmp_path):
    """A standby's virtual clock does not tick while it waits for the lease. A job submitted through it
    arrived at the time the standby started (in the applier's past: with --admission-timeout-s such a
    job was rejected at its first cycle for having 'waited' that long), and its /v1/health said that
    time beside the applier's cycle number."""
    trace = write_cluster(tmp_path, jobs=[job("hog")])
    common = ("--clock", "virtual", "--period-s", "60", "--pace-s", "0.05", "--placer", "solo", "--lease-ttl-s", "3")
    leader = DaemonProc(tmp_path, "--scenario", str(trace), *common, name="leader")
    standby = DaemonProc(tmp_path, *common, "--standby", name="standby")
    try:
        wait_for(lambda: (kv(leader.state, "clock_s") or 0.0) >= 1200.0, what="the leader's clock past 1200 s")
        with standby.client() as c:
            before = kv(leader.state, "clock_s")
            health = c.get("/v1/health").json()
            assert health["role"] == "standby"
            assert health["clock_s"] >= before, (health["clock_s"], before)
            before = kv(leader.state, "clock_s")
            r = c.post("/v1/jobs", json=job("late"))
            assert r.status_code == 201, r.text
            assert r.json()["arrives_at"] >= before and r.json()["submitted_at"] >= before, (r.json(), before)
    finally:
        assert standby.stop() == 0, standby.output()
        assert leader.stop() == 0, leader.output()
    assert "Traceback" not in leader.output() + standby.output()
