"""The loop's phases on a manual clock, in process: admission, departures, cancels, drift repair,
the gain-versus-migration gate, rate limits, dry-run, failed and interrupted applies."""

from __future__ import annotations

import os

import pytest
from daemonproc import job, write_cluster

from planner.daemon import gate, solve
from planner.daemon.adapters.simcluster import SimCluster, Truth
from planner.daemon.adapters.solo import SoloPlacer
from planner.daemon.clock import ManualClock
from planner.daemon.config import DaemonConfig
from planner.daemon.cycle import LeaseLost, Loop
from planner.daemon.estimates import Estimates
from planner.daemon.lease import Lease
from planner.daemon.lifecycle import JobState
from planner.daemon.metrics import DaemonMetrics
from planner.daemon.phasetimes import PhaseTimer
from planner.daemon.ports import ApplyResult, Group, IterationSample, Placement, PlanningContext, Reoptimisation, moved_jobs
from planner.daemon.ratelimit import TokenBucket
from planner.daemon.service import check_job
from planner.daemon.store import Store
from planner.errors import UserError
from planner.schema import load_scenario
from planner.schema.scenario import JobSpec


class World:
    """A loop wired to a store, a simulated cluster and a manual clock."""

    def __init__(self, tmp, truth=Truth(), executor=None, **cfg):
        self.cluster = load_scenario(write_cluster(tmp))
        self.store = Store(tmp / "s.sqlite")
        self.clock = ManualClock(0.0)
        self.cfg = DaemonConfig(**{"period_s": 60.0, "clock": "virtual", **cfg})
        self.lease = Lease(self.store, 60.0)
        assert self.lease.try_acquire()[0]
        self.sim = executor or SimCluster(tmp / "s.sim", self.cluster, self.spec, truth)
        self.placer = SoloPlacer(self.cluster)
        self.metrics = DaemonMetrics()
        self.loop = Loop(self.store, self.cluster, self.placer, self.sim, self.clock, self.cfg, self.lease, self.metrics)

    def spec(self, name):
        return JobSpec.model_validate(self.store.get_job(name).spec)

    def submit(self, name, at=0.0, **over):
        spec = JobSpec.model_validate(job(name, **over))
        self.store.submit_job(name, spec.model_dump(mode="json"), self.clock.now(), at, check_job(self.cluster, spec))

    def cycle(self, t):
        self.clock.set(t)
        return self.loop.run_cycle()

    def state(self, name):
        return self.store.get_job(name).state

    def decisions(self, kind=None):
        return self.store.decisions(0, 1000, kind)


def test_arrivals_admitted_in_order_then_run_and_complete(tmp_path):
    w = World(tmp_path)
    w.submit("late", at=500.0, duration_s=600.0)
    w.submit("early", at=0.0, duration_s=300.0)
    rep = w.cycle(0.0)
    assert rep.apply == "ok" and w.state("early") is JobState.RUNNING and w.state("late") is JobState.PENDING
    w.cycle(600.0)
    assert w.state("late") is JobState.RUNNING
    assert w.state("early") is JobState.COMPLETED, "300 s of running ended it"
    w.cycle(1300.0)
    assert w.state("late") is JobState.COMPLETED
    assert w.loop.idle()
    assert [d["kind"] for d in w.decisions()].count("admit") == 2
    deps = w.decisions("departure")
    assert {j for d in deps for j in d["jobs"]} == {"early", "late"} and all(d["outcome"] == "applied" for d in deps)
    plan = w.store.current_plan()
    assert plan.status == "applied" and plan.placement["groups"] == []
    # Cost is the $/h in force integrated over the clock: one solo job (1 H20 + 1 H800 node = 24 $/h).
    assert w.loop.cost_usd == pytest.approx(24.0 * 600 / 3600 + 24.0 * 700 / 3600)
    # Iterations were measured, and every one met the SLO (the estimates are the truth here).
    r = w.store.get_job("early")
    assert r.iterations > 0 and r.slo_misses == 0 and r.last_iteration_s <= r.slo_s


def test_old_plans_are_pruned_but_the_plan_in_force_stays(tmp_path):
    w = World(tmp_path, plans_keep=2)
    for i in range(4):
        w.submit(f"p{i}", at=100.0 * i)
        w.cycle(100.0 * i)
    rows = w.store.conn().execute("SELECT id, status FROM plans ORDER BY id").fetchall()
    assert [r["status"] for r in rows] == ["superseded", "applied"]
    assert w.store.current_plan().id == rows[-1]["id"] and len(w.decisions("admit")) == 4


def test_no_room_waits_then_admits_when_room_frees_and_timeout_rejects(tmp_path):
    w = World(tmp_path, admission_timeout_s=5000.0)
    for i in range(5):  # 4 H20 + 4 H800 nodes: the fifth solo job waits
        w.submit(f"j{i}", duration_s=1000.0 if i == 0 else None)
    w.cycle(0.0)
    assert w.state("j4") is JobState.PENDING and "waiting for room" in w.store.get_job("j4").reason
    assert w.decisions("wait")[0]["jobs"] == ["j4"]
    w.cycle(60.0)
    assert len(w.decisions("wait")) == 1, "an unchanged wait is not logged again every cycle"
    w.cycle(1100.0)  # j0 finished at 1000: its nodes free up, j4 gets them
    assert w.state("j0") is JobState.COMPLETED and w.state("j4") is JobState.RUNNING
    w.submit("j5", at=1100.0)
    w.cycle(1200.0)
    assert w.state("j5") is JobState.PENDING
    w.cycle(6200.0)
    r = w.store.get_job("j5")
    assert r.state is JobState.REJECTED and "waited" in r.reason and "deadline" in r.reason


def test_a_trace_job_added_before_a_later_start_arrives_then_not_in_the_past(tmp_path):
    """A job added to the --scenario file before a restart, its arrival_s behind the virtual clock, was
    submitted arriving in the past: with no room at once it was rejected at its first cycle as having
    'waited 2400 s for room (deadline 1800 s)', 300 s after it was submitted."""
    from planner.daemon.service import Options, Service

    w = World(tmp_path, admission_timeout_s=1800.0)
    svc = Service(Options(state=tmp_path / "s.sqlite", cfg=w.cfg), w.store, w.cluster, w.clock, w.metrics, w.lease)
    svc.role = "applier"
    first = [JobSpec.model_validate(job(f"j{i}", arrival_s=60.0 * i)) for i in range(4)]
    svc.submit_trace(first)  # the first start: trace time
    assert [w.store.get_job(f"j{i}").arrives_at for i in range(4)] == [0.0, 60.0, 120.0, 180.0]
    for t in range(0, 2401, 300):
        w.cycle(float(t))
    assert all(w.state(f"j{i}") is JobState.RUNNING for i in range(4))  # the 4 H20 + 4 H800 nodes are taken
    svc.submit_trace(first + [JobSpec.model_validate(job("late", arrival_s=0.0))])  # a later start, one job added
    late = w.store.get_job("late")
    assert late.arrives_at == late.submitted_at == 2400.0
    w.cycle(2700.0)
    r = w.store.get_job("late")
    assert r.state is JobState.PENDING and r.reason.startswith("waiting"), r.reason
    w.cycle(4200.0)
    r = w.store.get_job("late")
    assert r.state is JobState.REJECTED and "waited 1800 s" in r.reason, r.reason


def test_a_job_no_pool_can_serve_is_rejected_at_once(tmp_path):
    w = World(tmp_path)
    w.submit("ok")
    spec = JobSpec.model_validate(job("tight"))
    # Bypass the submission check (as an SLO computed under other estimates would): 1 s per iteration.
    w.store.submit_job("tight", spec.model_dump(mode="json"), 0.0, 0.0, 1.0)
    w.placer._est.clear()
    w.placer._estimate(PlanningContext(w.cluster, {"tight": spec}), "tight").slo_s = 1.0
    w.cycle(0.0)
    r = w.store.get_job("tight")
    assert r.state is JobState.REJECTED and "SLO" in r.reason


def test_cancel_pending_and_running(tmp_path):
    w = World(tmp_path)
    w.submit("run")
    w.submit("wait", at=10_000.0)
    w.cycle(0.0)
    w.store.request_cancel("run", 10.0)
    w.store.request_cancel("wait", 10.0)
    w.cycle(60.0)
    assert w.state("wait") is JobState.CANCELLED
    assert w.state("run") is JobState.CANCELLED, "removed by an applied plan in the same cycle"
    assert [e["to_state"] for e in w.store.job_events("run")] == ["pending", "admitted", "running", "cancelling", "cancelled"]
    assert w.sim.running_groups() == {}
    stops = [s for s in w.sim.journal() if s["action"] == "stop"]
    assert [s["job"] for s in stops] == ["run"]


def test_dry_run_decides_and_records_but_applies_nothing(tmp_path):
    w = World(tmp_path, dry_run=True)
    w.submit("a")
    w.submit("b")
    rep = w.cycle(0.0)
    assert rep.apply == "dry-run"
    assert w.sim.journal() == [] and w.sim.running_groups() == {}
    assert w.state("a") is JobState.ADMITTED  # placed in the recorded plan, never started
    plan = w.store.current_plan()
    assert plan.status == "recorded" and {m for g in plan.placement["groups"] for m in g["members"]} == {"a", "b"}
    assert {d["outcome"] for d in w.decisions("admit")} == {"dry-run"}
    w.store.request_cancel("a", 1.0)
    w.cycle(60.0)
    assert w.state("a") is JobState.CANCELLED and w.sim.journal() == []


def test_drift_updates_the_estimates_in_force(tmp_path):
    """The cluster is 1.9x slower than estimated: the daemon measures it, moves the job's factors to
    1.9 and logs why; alone on its pools the job still meets its 2x SLO, so the plan is kept."""
    w = World(tmp_path, truth=Truth(slow_lo=1.9, slow_hi=1.9), drift_min_samples=2)
    w.submit("a")
    w.cycle(0.0)
    for t in range(1, 40):
        w.cycle(60.0 * t)
    f = w.loop.estimates.factors_of("a")
    assert f.rollout == pytest.approx(1.9, rel=1e-6) and f.train == pytest.approx(1.9, rel=1e-6)
    drifts = w.decisions("drift")
    assert drifts and "1.900x the estimate" in " ".join(drifts[0]["reasons"])
    assert drifts[0]["outcome"] == "kept-current", "alone on its pools, 1.9x still meets a 2x SLO"
    err = w.loop.estimates.predictor_error()
    assert 0.0 < err["rollout"] < 0.1, "the first iterations were mispredicted by 47%, later ones are right"
    assert w.loop.estimates.errors["rollout"][0] == pytest.approx(0.9 / 1.9)
    r = w.store.get_job("a")
    assert r.last_iteration_s <= r.slo_s


def test_drift_beyond_the_slo_is_repaired_by_moving_jobs(tmp_path):
    """Two jobs whose SLO breaks when measured: repair evicts and re-admits; one that can never meet it stays
    (no pool can serve it at 3x) and the repair says why."""
    w = World(tmp_path, truth=Truth(slow_lo=3.0, slow_hi=3.0), drift_min_samples=2)
    w.submit("a")
    w.cycle(0.0)
    for t in range(1, 30):
        w.cycle(60.0 * t)
    reps = w.decisions("repair")
    assert reps, "a 3x slowdown breaks a 2x SLO"
    assert reps[0]["outcome"] == "infeasible" and "cannot repair" in " ".join(reps[0]["reasons"])
    assert w.store.get_job("a").slo_misses > 0


def test_gate_keeps_a_change_only_when_gain_beats_migration(tmp_path):
    w = World(tmp_path)
    for n in ("a", "b"):
        w.submit(n)
    ctx = w.loop.context({r.name: r for r in w.store.live_jobs()}, 0.0)
    g1 = Group("g1", "H20", ("h20-0",), "H800", ("h800-0",), ("a",), 24.0)
    g2 = Group("g2", "H20", ("h20-1",), "H800", ("h800-1",), ("b",), 24.0)
    before = Placement((g1, g2))
    merged = Placement((Group("g1", "H20", ("h20-0",), "H800", ("h800-0",), ("a", "b"), 24.0),))
    assert moved_jobs(before, merged) == {"b": "moved"}
    v = gate.judge(ctx, before, merged, amortise_s=3600, margin=0.1)
    assert v.keep and v.gain_usd == pytest.approx(24.0) and 0 < v.migration_usd < 24.0 / 1.1
    v2 = gate.judge(ctx, before, merged, amortise_s=1.0, margin=0.1)  # a saving counted over one second pays for nothing
    assert not v2.keep and "does not beat" in v2.reasons[-1]
    v3 = gate.judge(ctx, merged, before, amortise_s=3600, margin=0.1)
    assert not v3.keep and "not cheaper" in v3.reasons[-1]
    extended = Placement((Group("g1", "H20", ("h20-0", "h20-1"), "H800", ("h800-0",), ("a",), 40.0), g2))
    assert moved_jobs(before, extended) == {"a": "extended"}


def test_token_bucket_limits_and_restores():
    b = TokenBucket.full(6.0, now=0.0)
    assert b.allows(6, 0.0) and not b.allows(7, 0.0)
    b.take(6, 0.0)
    assert not b.allows(1, 0.0) and b.wait_s(1) == pytest.approx(600.0)
    assert b.allows(1, 600.0)
    r = TokenBucket.restore(6.0, b.state(), now=600.0)
    assert r.tokens == pytest.approx(b.tokens)


def test_a_churn_budget_of_zero_moves_allows_no_move_and_says_so(tmp_path):
    """--max-moves-per-hour 0 held one token, so an optional re-optimisation moving one job was applied;
    and a change the bucket can never hold said 'enough in inf s'."""
    zero = TokenBucket.full(0.0, now=0.0)
    assert not zero.allows(1, 0.0) and not zero.allows(1, 10 * 3600.0)
    assert TokenBucket.restore(0.0, {"tokens": 28.0, "updated_at": 0.0}, now=0.0).tokens == 0.0
    w = World(tmp_path, max_moves_per_hour=0.0)
    for n in ("a", "b"):
        w.submit(n)
    ctx = w.loop.context({r.name: r for r in w.store.live_jobs()}, 0.0)
    before = Placement((Group("g1", "H20", ("h20-0",), "H800", ("h800-0",), ("a",), 24.0),
                        Group("g2", "H20", ("h20-1",), "H800", ("h800-1",), ("b",), 24.0)))
    merged = Placement((Group("g1", "H20", ("h20-0",), "H800", ("h800-0",), ("a", "b"), 24.0),))

    class Merging:
        def reoptimise(self, ctx, current, time_limit_s, keep_groups=frozenset()):
            return Reoptimisation(merged, {}, "merged")

        def evaluate(self, ctx, placement):
            return placement, []

    for rate, bucket in ((0.0, zero), (0.5, TokenBucket.full(0.5, now=0.0))):
        cfg = DaemonConfig(period_s=60.0, clock="virtual", max_moves_per_hour=rate)
        if rate:  # one move fits a fractional budget once
            out = solve.reoptimise(ctx, Merging(), before, cfg, bucket, 0.0, ["periodic"])
            assert out.target is merged and out.decisions[-1].outcome == "changes-plan"
            continue
        out = solve.reoptimise(ctx, Merging(), before, cfg, bucket, 0.0, ["periodic"])
        d = out.decisions[-1]
        assert d.outcome == "rate-limited" and out.target is before, d
        assert "inf s" not in d.reasons[-1] and "never at this budget" in d.reasons[-1]
        assert "--max-moves-per-hour" in d.reasons[-1]


def test_an_invalid_reoptimisation_records_the_cost_of_the_plan_kept_not_of_the_one_leaving_jobs_out(tmp_path):
    """A re-optimisation that left jobs out (their SLOs unreachable at the drifted estimates) was logged
    'infeasible' with the cost of that plan as its cost after (872 -> 368 $/h on a replay): a saving
    no plan made."""
    w = World(tmp_path)
    for n in ("a", "b"):
        w.submit(n)
    ctx = w.loop.context({r.name: r for r in w.store.live_jobs()}, 0.0)
    before = Placement((Group("g1", "H20", ("h20-0",), "H800", ("h800-0",), ("a",), 24.0),
                        Group("g2", "H20", ("h20-1",), "H800", ("h800-1",), ("b",), 24.0)))
    only_a = Placement((before.groups[0],))

    class LeavingOut:
        def reoptimise(self, ctx, current, time_limit_s, keep_groups=frozenset()):
            return Reoptimisation(only_a, {}, "re-optimised; left out: b (slo)")

        def evaluate(self, ctx, placement):
            return placement, []

    out = solve.reoptimise(ctx, LeavingOut(), before, w.cfg, TokenBucket.full(30.0, 0.0), 0.0, ["periodic"])
    d = out.decisions[-1]
    assert d.outcome == "infeasible" and out.target is before and "it leaves out b" in d.reasons
    assert d.cost_before == d.cost_after == before.cost_per_hour


def test_estimates_follow_slowdowns_at_once_and_speedups_only_when_the_window_agrees():
    e = Estimates(window=4, min_samples=2, threshold=0.1)
    s = lambda k, r: IterationSample("j", k, r, r, 2 * r)  # noqa: E731
    e.add(s(1, 1.0), 1.0, 1.0)
    assert e.detect() == []  # one sample is not enough
    e.add(s(2, 1.5), 1.0, 1.0)
    d = e.detect()
    assert {x.phase for x in d} == {"rollout", "train"}
    assert e.factors_of("j").rollout == pytest.approx(1.75)  # slowest 1.5 plus half the spread 0.5
    for k in range(3, 6):
        e.add(s(k, 0.8), 1.0, 1.0)
    assert e.detect() == [], "1.5 is still in the window of 4: the envelope moved by less than the threshold"
    e.add(s(6, 0.8), 1.0, 1.0)
    assert [x.new for x in e.detect()] == [0.8, 0.8]
    again = Estimates(4, 2, 0.1, state=e.state())
    assert again.factors_of("j") == e.factors_of("j") and again.predictor_error() == e.predictor_error()


def test_an_slo_miss_moves_the_estimates_by_less_than_the_threshold():
    e = Estimates(window=4, min_samples=3, threshold=0.1)
    e.add(IterationSample("j", 1, 1.05, 1.05, 2.1), 1.0, 1.0)
    assert e.detect() == []
    d = e.detect(missed={"j"})
    assert d and e.factors_of("j").rollout == pytest.approx(1.05)


def test_phase_timer_derives_iterations_from_telemetry():
    from formulation.realloc.telemetry import TelemetrySnapshot

    def snap(it, t, rollout_p, train_p):
        return TelemetrySnapshot.model_validate({
            "job": "j", "time_s": t, "iteration": it,
            "components": [{"name": "r", "kind": "rollout", "progress": rollout_p}, {"name": "t", "kind": "trainer", "progress": train_p}],
            "workers": [{"worker_id": "w0", "component": "r", "node": "n0", "gpu_type": "H20"},
                        {"worker_id": "w1", "component": "t", "node": "n1", "gpu_type": "H800"}]})

    pt = PhaseTimer()
    assert pt.feed(snap(3, 10.0, 0.5, 0.0)) is None
    assert pt.feed(snap(3, 40.0, 1.0, 0.0)) is None
    assert pt.feed(snap(3, 70.0, 1.0, 1.0)) is None
    s = pt.feed(snap(4, 1.0, 0.0, 0.0))
    assert (s.iteration, s.rollout_s, s.train_s, s.iteration_s) == (3, 40.0, 30.0, 70.0)
    again = PhaseTimer(pt.state())
    assert again.feed(snap(5, 2.0, 0.0, 0.0)) is None  # iteration 4 never saw its rollout end


class FailingExecutor:
    """Applies nothing and says so (a backend whose start failed): the loop must not pretend."""

    name = "failing"

    def __init__(self):
        self.applies = 0

    def observe(self, now):
        from planner.daemon.ports import Observation

        return Observation()

    def apply(self, target, *, plan_id, now, should_stop):
        self.applies += 1
        return ApplyResult(False, 0, 2, "start failed: out of memory on h20-0")

    resume = apply

    def apply_realloc(self, job, body, *, now, decision_id=None):
        return ApplyResult(False, 0, 1, "n/a")

    def close(self):
        pass


def test_a_failed_apply_leaves_the_previous_plan_in_force_and_jobs_pending(tmp_path):
    ex = FailingExecutor()
    w = World(tmp_path, executor=ex)
    w.submit("a")
    w.cycle(0.0)
    assert ex.applies == 1
    assert w.state("a") is JobState.PENDING and "could not be applied" in w.store.get_job("a").reason
    assert w.store.current_plan() is None
    assert w.decisions("admit")[0]["outcome"] == "failed"
    w.cycle(60.0)
    assert ex.applies == 2, "admitted again on the next cycle"


def test_a_job_displaced_by_failed_applies_waits_longer_each_time(tmp_path):
    """Under --backend ray a job whose workers could not start was displaced and admitted again every
    cycle, each time a new plan and a failed apply (126 plans in a minute at --period-s 0.5). Now it waits
    1, 2, 4, ... periods (at most 16) between admissions, says until when, and the wait ends with a success."""
    ex = FailingExecutor()
    w = World(tmp_path, executor=ex)
    w.submit("a")
    tried = []
    for k in range(40):
        before = ex.applies
        w.cycle(60.0 * k)
        if ex.applies > before:
            tried.append(k)
    assert tried == [0, 1, 3, 7, 15, 31], tried  # gaps of 1, 2, 4, 8, 16 periods
    assert len(w.store.plans_with_status("failed")) == len(tried)
    reason = w.store.get_job("a").reason
    assert "admitted again from clock 2820" in reason and "6 failed apply(s) in a row" in reason, reason


def test_an_interrupted_apply_is_resumed_from_the_journal_without_repeating_steps(tmp_path):
    w = World(tmp_path)
    for n in ("a", "b", "c"):
        w.submit(n)
    calls = {"n": 0}

    def stop_after_two():
        calls["n"] += 1
        return calls["n"] > 2

    w.loop.stop.is_set = stop_after_two  # SIGTERM arrives while the third step is due
    rep = w.cycle(0.0)
    assert rep.apply == "interrupted"
    plan = w.store.current_plan()
    assert plan.status == "applying" and len(w.sim.journal()) == 2
    # A new daemon on the same files: recover() finishes the apply before any cycle.
    w2_loop = Loop(w.store, w.cluster, w.placer, SimCluster(tmp_path / "s.sim", w.cluster, w.spec), w.clock, w.cfg, w.lease, DaemonMetrics())
    done = w2_loop.recover()
    assert len(done) == 1 and "1 step(s) carried out" in done[0]
    steps = w.sim.journal()
    assert len(steps) == 3 and len({(s["action"], s["job"]) for s in steps}) == 3
    assert w.store.plan(plan.id).status == "applied"
    assert {w.state(n) for n in ("a", "b", "c")} == {JobState.RUNNING}
    assert w2_loop.recover() == []


def test_a_daemon_that_lost_the_lease_stops_before_writing(tmp_path):
    w = World(tmp_path)
    w.submit("a")
    thief = Lease(w.store, 60.0)
    thief.pid += 1
    with w.store.tx() as c:
        c.execute("UPDATE lease SET expires_at=0")
    assert thief.try_acquire()[0]
    with pytest.raises(LeaseLost):
        w.cycle(0.0)
    assert w.state("a") is JobState.PENDING and w.store.current_plan() is None and w.sim.journal() == []


class RefusingOnce(SimCluster):
    """The simulated cluster, whose executor refuses the first plan after ``after`` applies (an unreachable order)."""

    def __init__(self, *a, after: int = 1, **k):
        super().__init__(*a, **k)
        self.after, self.calls = after, 0

    def apply(self, target, *, plan_id, now, should_stop):
        self.calls += 1
        if self.calls == self.after + 1:
            return ApplyResult(False, 0, 3, "the executor refuses the target: no capacity-safe order of the steps exists")
        return super().apply(target, plan_id=plan_id, now=now, should_stop=should_stop)


def test_after_a_refused_plan_ended_jobs_still_leave_and_reshuffles_wait(tmp_path):
    w = World(tmp_path, reoptimise_every_s=60.0)  # a periodic re-optimisation is due every cycle, unless blocked
    w.sim = RefusingOnce(tmp_path / "r.sim", w.cluster, w.spec, after=1)
    w.loop = Loop(w.store, w.cluster, w.placer, w.sim, w.clock, w.cfg, w.lease, w.metrics)
    w.submit("short", duration_s=100.0)
    w.submit("long")
    w.cycle(0.0)
    assert w.state("short") is JobState.RUNNING
    w.cycle(200.0)  # short finished: the plan without it is refused
    assert w.state("short") is JobState.COMPLETED
    dep = w.decisions("departure")[-1]
    assert dep["outcome"] == "failed" and "re-optimisations wait" in dep["reasons"][-1]
    assert "short" in {m for g in w.store.current_plan().placement["groups"] for m in g["members"]}
    assert w.loop.reopt_blocked_until == pytest.approx(200.0 + w.cfg.reoptimise_min_interval_s)
    w.cycle(260.0)  # the ended job leaves the plan in force now; no re-optimisation while blocked
    plan = w.store.current_plan()
    assert plan.status == "applied" and "short" not in {m for g in plan.placement["groups"] for m in g["members"]}
    assert "could not be applied" in w.decisions("departure")[-1]["reasons"][0]
    assert not [d for d in w.decisions("reoptimise") if d["cycle"] >= 3]
    w.cycle(1200.0)  # the block has passed
    assert [d for d in w.decisions("reoptimise") if d["cycle"] == 4]


def test_after_a_failed_apply_the_cost_metric_is_the_plan_in_force(tmp_path):
    """planner_plan_cost_per_hour_usd says what GET /v1/plan and /v1/health say: the plan in force,
    not the target whose apply failed (it said the failed target's cost)."""
    w = World(tmp_path)
    w.sim = RefusingOnce(tmp_path / "r.sim", w.cluster, w.spec, after=1)
    w.loop = Loop(w.store, w.cluster, w.placer, w.sim, w.clock, w.cfg, w.lease, w.metrics)
    w.submit("a")
    w.cycle(0.0)
    in_force = w.store.current_plan()
    assert in_force.status == "applied" and w.metrics.plan_cost._value.get() == pytest.approx(in_force.cost_per_hour)
    w.submit("b", at=60.0)
    w.cycle(60.0)  # b's admission is refused by the executor: the plan with it failed
    failed = w.store.plans_with_status("failed")
    assert len(failed) == 1 and failed[0].cost_per_hour > in_force.cost_per_hour
    assert w.store.current_plan().id == in_force.id
    assert w.metrics.plan_cost._value.get() == pytest.approx(in_force.cost_per_hour)
    assert w.metrics.jobs.labels("pending")._value.get() == 1 and w.metrics.jobs.labels("running")._value.get() == 1


def test_a_plan_the_checker_refuses_is_not_applied(tmp_path):
    """The daemon's apply runs the plan check first (planner.apply.precheck): a structural violation
    (here a node in two pools) keeps the executor from being called; the apply counts as failed and
    the previous plan stays in force. An SLO violation alone does not block."""
    from planner.daemon.ports import Violation

    ex = FailingExecutor()
    w = World(tmp_path, executor=ex)
    real = w.placer.evaluate
    w.placer.evaluate = lambda ctx, p: (real(ctx, p)[0], [Violation("node-exclusive", "h20-0", "node h20-0 in two pools")])
    w.submit("a")
    w.cycle(0.0)
    assert ex.applies == 0, "the executor was never asked"
    assert w.state("a") is JobState.PENDING and w.store.current_plan() is None
    assert w.decisions("admit")[0]["outcome"] == "failed" and "plan check" in str(w.decisions("admit")[0])
    w.placer.evaluate = lambda ctx, p: (real(ctx, p)[0], [Violation("slo", "a", "a: predicted iteration over its SLO")])
    w.cycle(60.0)
    assert ex.applies == 1


class Committing:
    """A reallocation decision that commits on any telemetry (the loop's handling of the apply is under test)."""

    def decide(self, ctx, job, snapshots):
        from planner.daemon.ports import ReallocOutcome

        return ReallocOutcome(job, True, "committed (test)", ["rollout"], 1.0, 2.0, {"job": job, "iteration": 3}, {}, 0.0)

    def forget(self, job):
        pass

    def predictor_error(self):
        return None


class FencedRealloc(SimCluster):
    """The simulated cluster whose reallocation applies are cut short by a lost lease (the executor's fence), and
    which, like the executor's journal, says how an unfinished one was settled."""

    def __init__(self, *a, **k):
        super().__init__(*a, **k)
        self.realloc_decisions: list = []
        self.unfinished = None  # what settle_realloc reports once
        self.journaled: dict = {}  # decision id -> the journal's status of its apply

    def apply_realloc(self, job, body, *, now, decision_id=None):
        self.realloc_decisions.append(decision_id)
        return ApplyResult(False, 0, 0, "fenced: the applier lease (epoch 1) was taken over", interrupted=True)

    def settle_realloc(self):
        s, self.unfinished = self.unfinished, None
        return s

    def realloc_status(self, decision_id):
        return self.journaled.get(decision_id)


def _telemetry(store, name, t):
    snap = {"job": name, "time_s": t, "iteration": 1,
            "components": [{"name": "rollout", "kind": "rollout", "progress": 0.9}, {"name": "trainer", "kind": "trainer", "progress": 0.0}],
            "workers": [{"worker_id": "w0", "component": "rollout", "node": "h20-0", "gpu_type": "H20"},
                        {"worker_id": "w1", "component": "trainer", "node": "h800-0", "gpu_type": "H800"}]}
    store.add_telemetry(name, 0.0, t, 1, snap)


def test_a_reallocation_cut_short_by_a_lost_lease_is_left_to_the_new_leader_which_settles_it(tmp_path):
    from planner.daemon.ports import ReallocSettlement

    ex = FencedRealloc(tmp_path / "s.sim", load_scenario(write_cluster(tmp_path)), lambda n: w.spec(n))
    w = World(tmp_path, executor=ex)
    w.loop.reallocator = Committing()
    w.submit("a")
    w.cycle(0.0)
    assert w.state("a") is JobState.RUNNING
    _telemetry(w.store, "a", 10.0)
    with pytest.raises(LeaseLost):  # the fenced daemon stops; it does not record an outcome it does not know
        w.cycle(60.0)
    (d,) = w.decisions("realloc")
    assert d["outcome"] == "applying" and ex.realloc_decisions == [d["id"]], (d, ex.realloc_decisions)
    # a second reallocation left applying that the journal never saw (cut before the executor began it)
    with w.store.tx() as c:
        lost = w.store.insert_decision(c, {"cycle": 3, "at": 61.0, "kind": "realloc", "triggers": ["telemetry"], "outcome": "applying",
                                           "jobs": ["a"], "reasons": ["committed (test)"], "solver": {}})
    # The new leader settles the unfinished apply from the journal before its first cycle.
    ex.unfinished = ReallocSettlement("a", 7, d["id"], "rolled-back", "executor apply #7 rolled_back: unit a/rollout/workload rolled back")
    metrics = DaemonMetrics()
    loop = Loop(w.store, w.cluster, w.placer, ex, w.clock, w.cfg, w.lease, metrics)
    msgs = loop.recover()
    assert len(msgs) == 2 and "settled the unfinished reallocation of a" in msgs[0], msgs
    by_id = {x["id"]: x for x in w.decisions("realloc")}
    assert by_id[d["id"]]["outcome"] == "rolled-back" and "a/rollout/workload rolled back" in by_id[d["id"]]["reasons"][-1]
    assert by_id[lost]["outcome"] == "failed" and "holds no apply of it" in by_id[lost]["reasons"][-1]
    assert metrics.decisions.labels("realloc", "rolled-back")._value.get() == 1
    assert not [x for x in w.decisions() if x["outcome"] == "applying"]
    assert loop.recover() == [], "nothing is left to settle"


# ----------------------------------------------------------------- files a job names, deleted or damaged later
def _trace_world(tmp_path, executor=None):
    """A world whose jobs 'gone' (a trace file, deleted later), 'bad' (damaged later) and 'ok' (no file) run."""
    w = World(tmp_path, executor=executor)
    data = tmp_path / "data"
    data.mkdir()
    for f in ("gone.csv", "bad.csv"):
        (data / f).write_text("n\n" + "\n".join(str(100 + i) for i in range(50)) + "\n")

    def submit(name, path):
        spec = JobSpec.model_validate(job(name, rollout={"response_lengths": {"source": "trace", "path": str(path), "column": "n"}}))
        w.store.submit_job(name, spec.model_dump(mode="json"), w.clock.now(), 0.0, check_job(w.cluster, spec))

    submit("gone", data / "gone.csv")
    submit("bad", data / "bad.csv")
    w.submit("ok")
    return w, data


def _restart(w):
    """A new loop on the same files (what a restarted daemon builds: nothing read yet)."""
    w.sim = SimCluster(w.sim.path, w.cluster, w.spec, Truth()) if isinstance(w.sim, SimCluster) else w.sim
    w.loop = Loop(w.store, w.cluster, SoloPlacer(w.cluster), w.sim, w.clock, w.cfg, w.lease, w.metrics)


def test_a_job_whose_trace_file_is_deleted_or_damaged_fails_alone_naming_the_field(tmp_path):
    w, data = _trace_world(tmp_path)
    w.cycle(0.0)
    assert {w.state(n) for n in ("gone", "bad", "ok")} == {JobState.RUNNING}
    (data / "gone.csv").unlink()
    (data / "bad.csv").write_text("n\nSECRET-VALUE-7\n")
    _restart(w)  # the restart used to fail every cycle reading them (exit 1, and again at each restart)
    w.submit("late", at=60.0)
    rep = w.cycle(60.0)
    assert rep.apply == "ok", rep
    for name in ("gone", "bad"):
        r = w.store.get_job(name)
        assert r.state is JobState.FAILED and "rollout.response_lengths.path" in r.reason, (name, r.reason)
        assert "SECRET" not in r.reason
    assert w.state("ok") is JobState.RUNNING and w.state("late") is JobState.RUNNING, "the other jobs go on"
    assert set(Placement.from_dict(w.store.current_plan().placement).jobs()) == {"ok", "late"}
    dep = w.decisions("departure")[-1]
    assert dep["jobs"] == ["bad", "gone"] and dep["outcome"] == "applied" and all("can no longer be read" in x for x in dep["reasons"][:2])
    assert w.loop.problems() == [], "handled: the plan without them is applied"
    w.store.request_cancel("ok", w.clock.now())
    w.cycle(120.0)
    assert w.state("ok") is JobState.CANCELLED, "cancels still work"


@pytest.mark.parametrize("edit,said", [
    ("s\n10\n90000\n", "it gives tool calls longer than 86,400 s (scale applied), the most one may take"),
    ("s\n10\ninf\n", "tools.csv:3: column 's' holds a value that is not finite"),
    ("s\n10\nnan\n", "tools.csv:3: column 's' holds a value that is not finite"),
], ids=["past-max-tool-latency", "infinite", "nan"])
def test_a_tool_latency_trace_edited_past_its_bounds_fails_its_job_alone(tmp_path, edit, said):
    """A tool latency trace is bounded at submission (at most MAX_TOOL_LATENCY_S a call, finite numbers), but the
    daemon's re-read of a live job's files only asked whether they read: a file edited afterwards to hold a 90,000 s
    call was taken (the estimators' tool calls past the bound every time of a scenario obeys). Now the job fails
    alone at the re-read, its reason naming the field and no value of the file; the loop and the other jobs go on."""
    w = World(tmp_path)
    data = tmp_path / "data"
    data.mkdir()
    trace = data / "tools.csv"
    trace.write_text("s\n" + "\n".join(str(1 + i) for i in range(20)) + "\n")
    spec = JobSpec.model_validate(job("tools", rollout={"turns": 2, "tools": {"latency": {"source": "trace", "path": str(trace),
                                                                                         "column": "s"}}}))
    w.store.submit_job("tools", spec.model_dump(mode="json"), w.clock.now(), 0.0, check_job(w.cluster, spec))
    w.submit("ok")
    w.cycle(0.0)
    assert w.state("tools") is JobState.RUNNING and w.state("ok") is JobState.RUNNING
    was = trace.stat().st_mtime_ns
    trace.write_text(edit)
    os.utime(trace, ns=(was + 10**9, was + 10**9))  # a new mtime however coarse the file system's clock (reads are cached by it)
    with pytest.raises(UserError) as exc:  # (submitted now, it is refused: the bound the re-read applies)
        check_job(w.cluster, spec)
    assert exc.value.problems[0].where == "rollout.tools.latency"
    assert "90,000" not in exc.value.render(), "no value of the file is quoted"
    _restart(w)
    rep = w.cycle(60.0)
    assert rep.apply == "ok", rep
    r = w.store.get_job("tools")
    assert r.state is JobState.FAILED and "rollout.tools.latency.path" in r.reason and said in r.reason, r.reason
    assert "90000" not in r.reason and "90,000" not in r.reason
    assert w.state("ok") is JobState.RUNNING, "the other job goes on"
    assert set(Placement.from_dict(w.store.current_plan().placement).jobs()) == {"ok"}
    w.cycle(120.0)
    assert w.state("ok") is JobState.RUNNING


def test_an_unreadable_pending_job_fails_and_one_being_cancelled_is_cancelled(tmp_path):
    w, data = _trace_world(tmp_path)
    for f in ("gone.csv", "bad.csv"):
        (data / f).unlink()
    w.store.request_cancel("bad", 0.0)
    w.cycle(0.0)
    assert w.state("gone") is JobState.FAILED and "rollout.response_lengths.path" in w.store.get_job("gone").reason
    assert w.state("bad") is JobState.CANCELLED
    assert w.state("ok") is JobState.RUNNING


def test_a_job_failed_for_an_unreadable_file_is_a_health_problem_until_a_plan_without_it_applies(tmp_path):
    w, data = _trace_world(tmp_path)
    w.cycle(0.0)
    (data / "gone.csv").unlink()
    w.sim = RefusingOnce(tmp_path / "s.sim", w.cluster, w.spec, after=0)  # a restart whose first apply is refused
    w.loop = Loop(w.store, w.cluster, SoloPlacer(w.cluster), w.sim, w.clock, w.cfg, w.lease, w.metrics)
    rep = w.cycle(60.0)  # the plan without 'gone' is refused: the plan in force still holds it
    assert rep.apply == "failed" and w.state("gone") is JobState.FAILED
    probs = w.loop.problems()
    assert len(probs) == 1 and "'gone'" in probs[0] and "rollout.response_lengths.path" in probs[0], probs
    w.cycle(120.0)
    assert "gone" not in Placement.from_dict(w.store.current_plan().placement).jobs()
    assert w.loop.problems() == []


# ------------------------------------------------------------------------- an apply that raises: resumed first
class RaisingWhileFlagged(SimCluster):
    """The simulated cluster, whose applies and resumes raise while ``broken`` (a state file that cannot be written)."""

    broken = False
    opened = 0

    def __init__(self, *a, **k):
        super().__init__(*a, **k)
        type(self).opened += 1

    def apply(self, target, *, plan_id, now, should_stop):
        if type(self).broken:
            import sqlite3

            raise sqlite3.OperationalError("attempt to write a readonly database")
        return super().apply(target, plan_id=plan_id, now=now, should_stop=should_stop)

    def resume(self, plan_id, target, *, now, should_stop):
        return self.apply(target, plan_id=plan_id, now=now, should_stop=should_stop)


def test_a_plan_whose_apply_raised_is_resumed_first_and_blocks_new_plans_until_it_finishes(tmp_path):
    import sqlite3

    w = World(tmp_path)
    cluster = w.cluster
    RaisingWhileFlagged.broken, RaisingWhileFlagged.opened = False, 0
    reopen = lambda: RaisingWhileFlagged(tmp_path / "s2.sim", cluster, w.spec)  # noqa: E731 - a restart's executor
    w.sim = reopen()
    w.loop = Loop(w.store, w.cluster, w.placer, w.sim, w.clock, w.cfg, w.lease, w.metrics, reopen=reopen)
    w.submit("a")
    w.cycle(0.0)
    assert w.state("a") is JobState.RUNNING
    RaisingWhileFlagged.broken = True
    w.submit("b", at=60.0)
    with pytest.raises(sqlite3.OperationalError):
        w.cycle(60.0)  # the daemon counts it as a failed cycle
    stuck = w.store.current_plan()
    assert stuck.status == "applying"
    plans = len(w.store.conn().execute("SELECT id FROM plans").fetchall())
    decisions = len(w.decisions())
    w.submit("c", at=60.0)
    for t in (120.0, 180.0, 240.0, 300.0, 360.0):
        rep = w.cycle(t)
        assert rep.decisions == 0 and rep.plan_id is None and "stuck-apply" in rep.triggers, rep
    assert len(w.store.conn().execute("SELECT id FROM plans").fetchall()) == plans, "no new plan on top of the stuck one"
    assert len(w.decisions()) == decisions, "no new decision either"
    probs = w.loop.problems()
    assert len(probs) == 1 and f"plan {stuck.id} is stuck applying" in probs[0] and "readonly database" in probs[0], probs
    tries = RaisingWhileFlagged.opened
    assert 3 <= tries <= 5, f"retried with backoff (1, 2, 4 periods): {tries} executors built"
    RaisingWhileFlagged.broken = False
    t, rep = 360.0, None
    for _ in range(20):  # the next retry that is due finishes it, without a restart
        t += 60.0
        rep = w.cycle(t)
        if w.store.plan(stuck.id).status != "applying":
            break
    assert w.store.plan(stuck.id).status in ("applied", "superseded"), rep  # (the same cycle goes on: 'c' is admitted)
    assert all(d["outcome"] == "applied" for d in w.decisions() if d["plan_id"] == stuck.id)
    assert w.loop.problems() == [] and w.state("b") is JobState.RUNNING
    assert w.state("c") is JobState.RUNNING, "new plans again once it finished"


def test_prompt_tokens_defaulted_from_a_trace_follow_the_file_as_it_reads_now(tmp_path):
    """A job whose prompt_tokens defaults to its prompt_lengths trace's mean: the loop (and the simulated
    cluster) plan it at the file's mean as it reads now, as the estimators read the file's prompt lengths.
    Before, the figure of submission stayed in the stored spec for good, restarts included, after the file
    was edited; a given prompt_tokens stays the client's, and a mean past the most a prompt may have fails
    the job naming the field."""
    from planner.daemon.datafiles import job_spec, unreadable
    from planner.schema.workload import TraceColumn

    w = World(tmp_path)
    trace = tmp_path / "prompts.csv"
    trace.write_text("n\n100\n200\n300\n400\n")
    for name, over in (("from-trace", {}), ("given", {"prompt_tokens": 700})):
        spec = JobSpec.model_validate(job(name, rollout={"prompt_lengths": {"source": "trace", "path": str(trace), "column": "n"},
                                                         **over}))
        from_trace = isinstance(spec.rollout.prompt_lengths, TraceColumn) and "prompt_tokens" not in spec.rollout.model_fields_set
        slo = check_job(w.cluster, spec)  # (sets the default, as Service.submit)
        w.store.submit_job(name, spec.model_dump(mode="json"), 0.0, 0.0, slo, prompt_tokens_from_trace=from_trace)
    assert w.store.get_job("from-trace").spec["rollout"]["prompt_tokens"] == 250  # the stored (and echoed) figure of submission
    assert [job_spec(w.store.get_job(n)).rollout.prompt_tokens for n in ("from-trace", "given")] == [250, 700]
    assert w.loop.spec(w.store.get_job("from-trace")).rollout.prompt_tokens == 250  # (the loop's cached spec, read again below)
    trace.write_text("n\n1000\n2000\n3000\n4000\n")
    os.utime(trace, ns=(trace.stat().st_atime_ns, trace.stat().st_mtime_ns + 10**9))  # (a coarse clock: the edit's time differs)
    assert [job_spec(w.store.get_job(n)).rollout.prompt_tokens for n in ("from-trace", "given")] == [2500, 700]
    assert w.loop.spec(w.store.get_job("from-trace")).rollout.prompt_tokens == 2500
    trace.write_text("n\n" + "5000000\n" * 4)  # each value within the reader's bounds, the mean past a prompt's
    rec = w.store.get_job("from-trace")
    why = unreadable(job_spec(rec), prompt_tokens_from_trace=rec.prompt_tokens_from_trace)
    assert why is not None and why.startswith("rollout.prompt_lengths.path: ") and "5000000" not in why, why
    assert unreadable(job_spec(w.store.get_job("given")), prompt_tokens_from_trace=False) is None


def test_a_changed_scenario_job_of_a_known_name_is_kept_as_submitted_and_a_later_start_says_so(tmp_path, caplog):
    """A --scenario job edited before a restart (same name) was skipped in silence: the daemon went on
    with the job as first submitted and nothing said the file's new SLO or batch was not in force."""
    import logging

    from planner.daemon.service import Options, Service

    w = World(tmp_path)
    svc = Service(Options(state=tmp_path / "s.sqlite", cfg=w.cfg), w.store, w.cluster, w.clock, w.metrics, w.lease)
    first = [JobSpec.model_validate(job(f"j{i}", arrival_s=60.0 * i)) for i in range(2)]
    # (prompt_tokens not given: the submission sets it to the prompts' mean, the comparison too)
    first.append(JobSpec.model_validate(job("jq", rollout={"prompt_lengths": {"source": "quantiles", "quantiles": {0: 100, 1: 900}}})))
    svc.submit_trace(first)
    stored = [w.store.get_job(f"j{i}").spec for i in range(2)]
    assert w.store.get_job("jq").spec["rollout"]["prompt_tokens"] == 500
    with caplog.at_level(logging.WARNING, logger="planner.daemon"):
        svc.submit_trace(first)  # a restart on the same file: nothing to say
    assert not [r for r in caplog.records if "--scenario" in r.getMessage()], caplog.text
    edited = job("j1", arrival_s=60.0)
    edited["rollout"]["batch_prompts"] = 64
    with caplog.at_level(logging.WARNING, logger="planner.daemon"):
        svc.submit_trace([first[0], JobSpec.model_validate(edited)])
    said = [r.getMessage() for r in caplog.records if "--scenario" in r.getMessage()]
    assert len(said) == 1 and "j1" in said[0] and "rollout.batch_prompts" in said[0] and "cancel j1" in said[0], said
    assert [w.store.get_job(f"j{i}").spec for i in range(2)] == stored  # kept as submitted
