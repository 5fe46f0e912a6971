"""/metrics agrees with the API on every daemon that serves it: a standby, and a restarted daemon
still resuming its predecessor's apply before its first cycle (both showed no plan cost and no
planner_jobs series while /v1/health named the plan in force and the jobs)."""

from __future__ import annotations

from daemonproc import DaemonProc, applied_steps, job, query, wait_for, write_cluster


def agree(http) -> bool:
    """/metrics' plan cost and jobs per state are /v1/health's (read in that order; the state is settled)."""
    h = http.get("/v1/health").json()
    m = {}
    for line in http.get("/metrics").text.splitlines():
        if line.startswith("planner_plan_cost_per_hour_usd "):
            m["cost"] = float(line.split()[1])
        elif line.startswith("planner_jobs{"):
            m[line.split('state="', 1)[1].split('"', 1)[0]] = float(line.rsplit(" ", 1)[1])
    return m.get("cost") == h["plan_cost_per_hour"] and all(m.get(s) == n for s, n in h["jobs"].items())


def test_a_standby_and_a_daemon_resuming_before_its_first_cycle_report_what_the_api_says(tmp_path):
    trace = write_cluster(tmp_path, jobs=[job(n) for n in "ab"])
    first = DaemonProc(tmp_path, "--scenario", str(trace), "--period-s", "0.2", "--placer", "solo", "--sim-step-delay-s", "0.25",
                       name="first")
    wait_for(lambda: len(applied_steps(first.state)) >= 1, what="the first apply under way")
    first.kill()
    # the restart resumes the apply before its first cycle, 5 s a step
    again = DaemonProc(tmp_path, "--period-s", "0.2", "--placer", "solo", "--sim-step-delay-s", "5", "--lease-ttl-s", "3", name="again")
    standby = DaemonProc(tmp_path, "--period-s", "0.2", "--placer", "solo", "--standby", "--lease-ttl-s", "3", name="standby")
    with again.client() as c:
        h = c.get("/v1/health").json()
        assert h["plan_id"] is not None and h["plan_cost_per_hour"] > 0, h
        wait_for(lambda: agree(c), timeout=60, what="the resuming daemon's /metrics agreeing with its /v1/health")
        # checked while it still resumes, before it ran a cycle of its own
        assert query(again.state, "SELECT status FROM plans WHERE id=?", (h["plan_id"],))[0]["status"] == "applying"
        assert "planner_cycles_total 0.0" in c.get("/metrics").text
    with standby.client() as c:
        assert c.get("/v1/health").json()["role"] == "standby"
        wait_for(lambda: agree(c), timeout=60, what="the standby's /metrics agreeing with its /v1/health")
        assert "planner_lease_held 0.0" in c.get("/metrics").text
    assert standby.stop() == 0, standby.output()
    assert again.stop() == 0, again.output()
