"""A trace file a planned job names vanishing before or while its plan is applied, in process on a manual clock
(as test_daemon_cycle.py): the plan never stays ``applying``; the job fails alone naming the field; later plans
proceed.

With the executor (the daemon's default when it is installed) the apply builds the executor's target, whose
host-DRAM estimate reads every member's files: a plan interrupted mid-apply whose job's file was then deleted
was retried for ever at each restart ("stuck applying", nothing new planned), and a file deleted between the
cycle's read and the apply made every later plan fail. The simulated cluster that applies by itself reads no
file to apply (the ``sim`` case proves it)."""

from __future__ import annotations

import pytest
from daemonproc import job

from planner.daemon.adapters import executor as ex
from planner.daemon.adapters.simcluster import SimCluster
from planner.daemon.adapters.solo import SoloPlacer
from planner.daemon.cycle import Loop
from planner.daemon.lifecycle import JobState
from planner.daemon.metrics import DaemonMetrics
from planner.daemon.ports import Placement
from planner.daemon.service import Options, _executor, check_job
from planner.schema.scenario import JobSpec
from tests.daemon.test_daemon_cycle import _trace_world

FIELD = "rollout.response_lengths.path"


def _needs_executor(kind: str) -> None:
    if kind == "executor" and ex.available() is not None:
        pytest.skip(f"the executor cannot apply here: {ex.available()}")


def _wire(w, tmp_path, kind: str):
    """The loop on a fresh executor of ``kind`` built from the files (what a (re)started daemon builds)."""
    if kind == "executor":
        opts = Options(state=tmp_path / "s.sqlite")

        def build():
            return _executor(opts, w.cluster, w.store)
    else:
        def build():
            return SimCluster(tmp_path / "s.sim", w.cluster, w.spec)
    w.sim = build()
    w.loop = Loop(w.store, w.cluster, SoloPlacer(w.cluster), w.sim, w.clock, w.cfg, w.lease, DaemonMetrics(), reopen=build)


def _cycles(w, start: float, n: int = 6) -> list[str]:
    """``n`` cycles, a period apart, as the daemon runs them: one that raises is a failed cycle, and the next runs."""
    raised = []
    for i in range(n):
        try:
            w.cycle(start + 60.0 * i)
        except Exception as exc:  # noqa: BLE001 - the daemon counts it and goes on; the test reports it
            raised.append(f"{type(exc).__name__}: {exc}")
    return raised


def _not_stuck(w, raised) -> None:
    applying = [p.id for p in w.store.plans_with_status("applying")]
    assert not applying, f"plan(s) {applying} still applying; problems: {w.loop.problems()}; cycles raised: {raised}"
    assert w.loop.stuck is None, w.loop.stuck


@pytest.mark.parametrize("kind", ["executor", "sim"])
def test_a_plan_interrupted_mid_apply_whose_job_file_then_vanished_is_resumed_not_left_applying(tmp_path, kind):
    _needs_executor(kind)
    w, data = _trace_world(tmp_path)
    _wire(w, tmp_path, kind)
    calls = {"n": 0}

    def stop_after_one_step():
        calls["n"] += 1
        return calls["n"] > 1

    w.loop.stop.is_set = stop_after_one_step  # SIGTERM while the plan of 'gone', 'bad' and 'ok' is applied
    assert w.cycle(0.0).apply == "interrupted"
    (plan,) = w.store.plans_with_status("applying")
    (data / "gone.csv").unlink()  # while the daemon is down
    _wire(w, tmp_path, kind)  # the restart: nothing read yet
    done = w.loop.recover()
    assert len(done) == 1 and f"resumed plan {plan.id}" in done[0], (done, w.loop.problems())
    _not_stuck(w, [])
    assert w.store.plan(plan.id).status == "applied"
    w.submit("late", at=60.0)
    raised = _cycles(w, 60.0, 2)
    _not_stuck(w, raised)
    assert not raised, raised
    r = w.store.get_job("gone")
    assert r.state is JobState.FAILED and FIELD in r.reason, r.reason
    assert {n: w.state(n) for n in ("bad", "ok", "late")} == dict.fromkeys(("bad", "ok", "late"), JobState.RUNNING)
    assert set(Placement.from_dict(w.store.current_plan().placement).jobs()) == {"bad", "ok", "late"}


def test_a_job_file_that_vanishes_between_the_plan_and_its_apply_fails_that_job_alone(tmp_path):
    _needs_executor("executor")
    w, data = _trace_world(tmp_path)
    _wire(w, tmp_path, "executor")
    w.cycle(0.0)
    (data / "new.csv").write_text("n\n" + "\n".join(str(100 + i) for i in range(50)) + "\n")
    spec = JobSpec.model_validate(job("new", rollout={"response_lengths": {"source": "trace", "path": str(data / "new.csv"),
                                                                           "column": "n"}}))
    w.store.submit_job("new", spec.model_dump(mode="json"), 60.0, 60.0, check_job(w.cluster, spec))
    w.submit("plain", at=60.0)
    executor = w.loop.executor
    real = executor.apply

    def deleting_first(*a, **k):  # read by the cycle (it plans 'new'), gone when the executor builds the target
        (data / "new.csv").unlink(missing_ok=True)
        return real(*a, **k)

    executor.apply = deleting_first
    raised = _cycles(w, 60.0, 4)
    _not_stuck(w, raised)
    assert not raised, raised
    failed = w.store.plans_with_status("failed")
    assert len(failed) == 1, "the plan with 'new' failed once; the next, without it, applied"
    r = w.store.get_job("new")
    assert r.state is JobState.FAILED and FIELD in r.reason, r.reason
    assert w.state("plain") is JobState.RUNNING, "later plans proceed"
    assert {w.state(n) for n in ("gone", "bad", "ok")} == {JobState.RUNNING}
    assert "new" not in Placement.from_dict(w.store.current_plan().placement).jobs()
    assert w.loop.problems() == [], "handled: the plan without it is applied"


def test_a_target_the_executor_refuses_fails_its_apply_and_later_plans_proceed(tmp_path, monkeypatch):
    """A target that fails the executor's schema (a layout with no trainer replica, seen on Ray with a
    tp-8 trainer, session 57) raised out of the apply: the plan stayed ``applying``, its resume raised
    again every few periods and nothing else was planned. Now the apply fails with the reason, the jobs
    in it wait and are admitted again, and a job submitted later is placed and runs."""
    _needs_executor("executor")
    w, _ = _trace_world(tmp_path)
    _wire(w, tmp_path, "executor")
    import planner.apply.placement as placement

    real = placement.from_placement
    bad = {"on": True}

    def refusing(body, *a, **k):
        if bad["on"]:
            from executor.target import ExecutorTarget

            ExecutorTarget.model_validate({"nodes": [], "components": [{"name": "x/trainer", "layout": {"dp": 0}}]})
        return real(body, *a, **k)

    monkeypatch.setattr(placement, "from_placement", refusing)
    raised = _cycles(w, 0.0, 2)
    assert not raised, raised
    _not_stuck(w, raised)
    failed = w.store.plans_with_status("failed")
    assert failed and "the executor's target is not valid" in str(w.decisions("admit")[0]["reasons"]), w.decisions("admit")[0]
    bad["on"] = False
    _cycles(w, 3600.0, 4)
    _not_stuck(w, [])
    assert any(w.state(r.name) is JobState.RUNNING for r in w.store.live_jobs()), [(r.name, r.state) for r in w.store.live_jobs()]

