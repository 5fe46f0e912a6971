"""A daemon SIGKILLed during its very first apply, before any step saved the simulated cluster
(issue 25, item 2): the restart resumes the apply from the journal instead of refusing to start
("the simulated cluster is gone"), and the job ends up running, its steps each done once."""

from __future__ import annotations

from daemonproc import DaemonProc, applied_steps, job, query, wait_for, write_cluster


def test_sigkill_before_the_first_save_resumes(tmp_path):
    cluster = write_cluster(tmp_path)
    # a long first step: the kill lands while it runs, before anything was saved
    d = DaemonProc(tmp_path, "--scenario", str(cluster), "--period-s", "0.2", "--sim-step-delay-s", "30")
    journal = d.state.with_name(d.state.name + ".journal")
    with d.client() as c:
        r = c.post("/v1/jobs", json=job("a"))
        assert r.status_code in (200, 201, 202), r.text
    wait_for(lambda: journal.exists() and query(journal, "SELECT id FROM applies WHERE status='running'"),
             what="the first apply journaled")
    assert applied_steps(d.state) == [], "killed before the first step was done"
    d.kill()
    again = DaemonProc(tmp_path, "--period-s", "0.2", name="again")  # the first restart used to exit 2 here
    with again.client() as c:
        wait_for(lambda: c.get("/v1/jobs/a").json()["state"] == "running", what="job a running after the restart")
    assert again.stop() == 0, again.output()
    steps = applied_steps(d.state)
    assert steps and len({s["step"] for s in steps}) == len(steps) and all(s["attempts"] <= 2 for s in steps), steps
    assert len({s["apply_id"] for s in steps}) == 1, "the interrupted apply was resumed, not replaced"
