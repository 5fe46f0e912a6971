"""The controller on the sim backend: rollout reboot, component removal, rollback on request."""

from __future__ import annotations

import pytest

from executor import faultlib, router
from executor.backends.base import observe
from executor.backends.sim import SimBackend
from executor.controller import Executor
from executor.diff import diff
from executor.faults import ControllerCrash, Fault, FaultPlan
from executor.faultlib import NODES, ROLLOUT, TRAINER, full_state, same_state, target
from executor.journal import Journal
from executor.workers.engine import expected_output


def _started(requests=80):
    b = SimBackend(NODES, ticks_per_call=1)
    j = Journal(":memory:")
    Executor(b, j).apply(diff(observe(b), target(faultlib.base_body())).steps)
    router.submit(b, ROLLOUT, router.make_requests(ROLLOUT, requests, prompts=5, min_len=5, max_len=40, seed=2))
    b.tick(4)
    return b, j


def _finish(b):
    for _ in range(200):
        if b.coord("ledger_summary")["done"] == b.coord("ledger_summary")["requests"]:
            return
        b.tick(5)


def test_rollout_reboot_keeps_every_request_and_its_partial_output():
    b, j = _started()
    body = faultlib.base_body()
    body["components"][0].update(placement={"a": 1, "b": 1}, migration="reboot")
    open_before = {r["id"] for r in b.coord("request_records") if not r["done"]}
    assert open_before
    plan = diff(observe(b), target(body))
    assert [s.kind for s in plan.steps][:4] == ["save", "stop", "stop", "stop"]
    res = Executor(b, j).apply(plan.steps)
    assert res.status == "done" and res.outcomes["job/rollout/reboot/save"]["requests_saved"] > 0
    _finish(b)
    recs = b.coord("request_records")
    assert all(r["done"] and r["output"] == expected_output(r) for r in recs)
    restarted = {w["id"] for w in b.coord("records") if w["component"] == ROLLOUT}
    assert restarted and all(".g2." in w for w in restarted)
    # old engines may finish requests until they are drained by the save; the rest finish on the
    # restarted engines, resumed from their saved partial output
    assert sum(r["finished_by"] in restarted for r in recs if r["id"] in open_before) > len(open_before) // 2


def test_removing_a_rollout_cancels_its_requests_once():
    b, j = _started()
    body = faultlib.base_body()
    body["components"] = body["components"][1:]
    res = Executor(b, j).apply(diff(observe(b), target(body)).steps)
    assert res.status == "done"
    summ = b.coord("ledger_summary")
    assert summ["done"] == summ["requests"] == 80 and summ["cancelled"] + summ["done"] - summ["cancelled"] == 80
    assert summ["cancelled"] > 0
    assert not [r for r in b.coord("records") if r["component"] == ROLLOUT]
    assert b.leaks() == []


def test_rollback_on_request_after_a_crash_leaves_the_old_trainer_whole():
    b, j = _started()
    old = [r["id"] for r in b.coord("records") if r["component"] == TRAINER]
    before, step, _ = full_state(b, old)
    steps = diff(observe(b), target(faultlib.migration_body("p2p"))).steps
    try:
        Executor(b, j, faults=FaultPlan([Fault("reshard", "after", "crash")])).apply(steps)
        raise AssertionError("the controller should have died")
    except ControllerCrash:
        pass
    res = Executor(b, j).rollback_unfinished()
    assert res is not None and res.status == "rolled_back"
    now = [r["id"] for r in b.coord("records") if r["component"] == TRAINER]
    assert now == old and b.coord("active_set", TRAINER) == old
    after, step_after, _ = full_state(b, now)
    assert same_state(before, after) == [] and step_after == step
    assert all(b.train_step(TRAINER, 5))  # the old ranks keep training
    assert b.leaks() == [] and j.unfinished() is None
    assert Executor(b, j).rollback_unfinished() is None


def test_the_sim_state_file_never_lags_the_journal(tmp_path):
    """With a state file the cluster is the file: once the journal says a step is done, a process
    that opens the file (a restarted controller) finds the step's effect there — a created worker
    registered and running, a stopped one gone."""
    path = tmp_path / "world"
    b = SimBackend(NODES, ticks_per_call=1, state_path=path)
    j = Journal(tmp_path / "j.db")
    seen = []

    def check(step, status, data):
        if status != "done" or step.kind not in ("create", "stop"):
            return
        other = SimBackend([], state_path=path)
        wid = step.args["worker"]["id"]
        rec = {r["id"]: r for r in other.coord("records")}.get(wid)
        if step.kind == "create":
            assert other.worker_alive(wid) and rec is not None and rec["status"] == "running", wid
        else:
            assert not other.worker_alive(wid) and rec is None, wid
        seen.append(step.kind)
        other._conn.close()

    res = Executor(b, j, on_step=check).apply(diff(observe(b), target(faultlib.base_body())).steps)
    assert res.status == "done" and "create" in seen
    body = faultlib.base_body()
    body["components"][0].update(placement={"a": 1, "b": 1}, migration="reboot")
    res = Executor(b, j, on_step=check).apply(diff(observe(b), target(body)).steps)
    assert res.status == "done" and "stop" in seen
    b.close()


def test_an_interrupted_apply_is_not_resumed_on_a_cluster_started_anew(tmp_path):
    """The journal of a cluster by address (or of --address local, a new cluster on every run) names an
    interrupted apply with steps done; the cluster it now meets was started anew and has none of
    them. Resuming skipped the 'done' creates and failed at the switch (exit 1, 'not running at the
    switch'), or ran on over work that is not there; a rollback compensated workers that never
    existed. Both are refused before anything is done, with the way out."""
    import pytest

    from estimators.errors import UserError

    j = Journal(tmp_path / "j.db")
    first = SimBackend(NODES, ticks_per_call=1)
    steps = diff(observe(first), target(faultlib.base_body())).steps
    with pytest.raises(ControllerCrash):
        Executor(first, j, faults=FaultPlan([Fault("create", "after", "crash", nth=1)])).apply(steps, "base")
    assert j.unfinished() is not None
    anew = SimBackend(NODES, ticks_per_call=1)  # the same nodes, nothing of the first cluster
    for attempt in (lambda: Executor(anew, j).apply(steps, "base"), lambda: Executor(anew, j).rollback_unfinished()):
        with pytest.raises(UserError) as err:
            attempt()
        text = str(err.value)
        assert "bears no mark of any apply" in text and f"mv {j.path} {j.path}.stale" in text
    assert anew.coord("records") == [] and j.unfinished() is not None  # nothing done, the journal kept as it was
    res = Executor(first, j).apply(steps, "base")  # the cluster the journal describes still resumes
    assert res.status == "done" and res.resumed


def test_a_worker_started_before_the_kill_is_running_after_the_resume():
    # Seen on Ray: a controller SIGKILLed after a trainer rank's actor came up, before it was marked
    # running; the resume adopted it ("already running") but status showed it 'starting' for good.
    b = SimBackend(NODES, ticks_per_call=1)
    j = Journal(":memory:")
    steps = diff(observe(b), target(faultlib.base_body())).steps
    try:
        Executor(b, j, faults=FaultPlan([Fault("create", "started", "crash", nth=1)])).apply(steps, "base")
        raise AssertionError("the controller should have died")
    except ControllerCrash:
        pass
    assert "starting" in {r["status"] for r in b.coord("records")}
    res = Executor(b, j).apply(steps, "base")
    assert res.status == "done" and res.resumed
    assert {r["id"]: r["status"] for r in b.coord("records") if r["status"] != "running"} == {}
    assert b.leaks() == []


def test_without_the_journal_a_started_worker_left_starting_is_settled_running():
    # The cluster left by a kill at create:started (before the fix, also what a resume left): every later
    # diff saw the component as not whole (a worker not 'running') and migrated it.
    from executor.recover import settle

    b = SimBackend(NODES, ticks_per_call=1)
    steps = diff(observe(b), target(faultlib.base_body())).steps
    with pytest.raises(ControllerCrash):
        Executor(b, Journal(":memory:"), faults=FaultPlan([Fault("create", "started", "crash", nth=1)])).apply(steps, "base")
    left = [r["id"] for r in b.coord("records") if r["status"] == "starting"]
    assert len(left) == 1
    notes = settle(b)
    assert any(left[0] in n and "never marked running" in n for n in notes), notes
    assert {r["status"] for r in b.coord("records")} == {"running"}


def test_a_failure_message_with_brackets_does_not_cut_the_rollback_short():
    # Seen on Ray: gloo's "[/__w/.../pair.cc:537] Read error ..." failed a P2P reshard; printing it as rich
    # markup raised MarkupError from the progress callback, the unit was never rolled back and the apply
    # was left running ('internal error' on the CLI).
    from executor.progress import Progress

    b, j = _started(requests=10)
    steps = diff(observe(b), target(faultlib.migration_body("p2p"))).steps
    assert any(s.kind == "reshard" for s in steps)

    def boom(backend, step):
        raise RuntimeError("[/__w/pytorch/third_party/gloo/transport/tcp/pair.cc:537] Read error [127.0.0.1]:6041")

    with Progress(steps) as prog:
        res = Executor(b, j, faults=FaultPlan([Fault("reshard", "mid", boom)]), on_step=prog.update,
                       on_event=prog.event).apply(steps)
    assert res.status != "done" and "pair.cc:537" in res.message
    assert j.unfinished() is None and b.leaks() == []
