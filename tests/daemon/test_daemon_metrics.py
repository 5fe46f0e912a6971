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


def test_slo_attainment_is_read_from_the_state_on_every_daemon(tmp_path):
    """planner_slo_attainment_ratio was set only at a cycle's end: a restarted daemon said 0.0 until its
    first cycle ended (with --period-s 300, five minutes of a false alert) and a standby said 0.0 for
    ever, while the state held running jobs whose last iterations met their SLOs."""
    from planner.daemon.lifecycle import JobState
    from planner.daemon.metrics import DaemonMetrics
    from tests.daemon.test_daemon_cycle import World

    w = World(tmp_path)
    for n in "abc":
        w.submit(n)
    w.cycle(0.0)
    assert all(w.state(n) is JobState.RUNNING for n in "abc")
    with w.store.tx() as c:
        w.store.record_iterations(c, "a", 1, 0.5 * w.store.get_job("a").slo_s, 0)
        w.store.record_iterations(c, "b", 1, 2.0 * w.store.get_job("b").slo_s, 1)  # c: no iteration measured yet

    def ratio(m: DaemonMetrics) -> float:
        line = next(x for x in m.render().decode().splitlines() if x.startswith("planner_slo_attainment_ratio "))
        return float(line.split()[1])

    fresh = DaemonMetrics()  # a restarted daemon, or a standby: no cycle of its own yet
    fresh.export_state(w.store)
    assert 0.49 < ratio(fresh) < 0.51
    (tmp_path / "empty").mkdir()
    empty = World(tmp_path / "empty")
    m = DaemonMetrics()
    m.export_state(empty.store)
    assert ratio(m) == 1.0  # no running job has measured an iteration
