"""One cycle of the daemon: numbered phases on a snapshot, with an injected clock.

====  ==========  ===========================================================================
 #    phase       what it does
====  ==========  ===========================================================================
 1    observe     read the state (live jobs, the plan in force, new telemetry) and the backend
                  (what runs, what finished or failed, measured iterations)
 2    estimate    fold measured iterations (from the backend, or derived from telemetry) into
                  the drift trackers; move the estimates where drift is beyond the threshold
 3    triggers    arrivals, departures and cancels, drift, donors (telemetry), periodic
 4    solve       departures, drift repair, admissions (mandatory), re-optimisation warm-started
                  from the current plan (optional)
 5    gate        keep an optional change only if its gain beats its migration cost and the
                  churn budget allows it (:mod:`planner.daemon.gate`)
 6    apply       write-ahead: the decisions, the target plan (``applying``; ``recorded`` in
                  dry-run) and the job transitions commit in one transaction that first checks
                  the lease is still ours; then the executor applies the target; then a second
                  transaction records the outcome (``applied`` / ``failed`` / interrupted)
 7    record      reallocation decisions inside iterations, metrics, telemetry pruning
====  ==========  ===========================================================================

A crash between the two transactions leaves the plan ``applying``: :meth:`Loop.recover` hands it
to the executor's ``resume`` on restart (its journal skips the steps already done) before any new
cycle. Everything the next cycle depends on (the virtual clock, the telemetry cursor, the estimates,
the churn budget, the cost integral) is saved in the same transaction as the decisions, so a
restarted daemon continues exactly where the last committed cycle ended.
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass, field
from typing import Optional

from pydantic import ValidationError

from formulation.realloc.telemetry import TelemetrySnapshot
from planner.daemon import gate, solve
from planner.daemon.clock import Clock
from planner.daemon.config import DaemonConfig
from planner.daemon.estimates import Estimates
from planner.daemon.lease import Lease
from planner.daemon.lifecycle import JobState
from planner.daemon.metrics import DaemonMetrics
from planner.daemon.phasetimes import PhaseTimer
from planner.daemon.ports import (ApplyResult, Executor, IterationSample, Observation, Placement, PlacementPlanner, PlanningContext,
                                  Reallocator, moved_jobs)
from planner.daemon.ratelimit import TokenBucket
from planner.daemon.store import JobRecord, Store
from planner.errors import UserError
from planner.schema.scenario import JobSpec, Scenario

log = logging.getLogger("planner.daemon")


class LeaseLost(Exception):
    """Another daemon took the applier lease: this one must stop deciding."""


@dataclass
class CycleReport:
    cycle: int
    at: float
    triggers: list[str] = field(default_factory=list)
    decisions: int = 0
    plan_id: Optional[int] = None
    apply: Optional[str] = None  # ok | failed | interrupted | dry-run | None (nothing to apply)
    wall_s: float = 0.0


class Loop:
    def __init__(self, store: Store, cluster: Scenario, placer: PlacementPlanner, executor: Executor, clock: Clock, cfg: DaemonConfig,
                 lease: Lease, metrics: DaemonMetrics, reallocator: Optional[Reallocator] = None,
                 stop: Optional[threading.Event] = None) -> None:
        self.store, self.cluster, self.placer, self.executor = store, cluster, placer, executor
        self.clock, self.cfg, self.lease, self.metrics, self.reallocator = clock, cfg, lease, metrics, reallocator
        self.stop = stop if stop is not None else threading.Event()
        self._realloc_errors: dict[str, str] = {}
        self._specs: dict[tuple[str, int], JobSpec] = {}
        kv = store.get_kv
        self.cycle_no: int = kv("cycle", 0)
        self.cursor: int = kv("telemetry_cursor", 0)
        self.last_at: Optional[float] = kv("last_cycle_at")
        self.last_reopt_at: Optional[float] = kv("last_reopt_at")
        self.cost_usd: float = kv("cost_usd", 0.0)
        self.migration_usd: float = kv("migration_usd", 0.0)
        self.realloc_at: dict[str, float] = kv("realloc_at", {})
        self.estimates = Estimates(cfg.drift_window, cfg.drift_min_samples, cfg.drift_threshold, kv("estimates"))
        self.timer = PhaseTimer(kv("phase_timer"))
        self.sample_mark: dict[str, int] = kv("sample_mark", {})  # job -> newest iteration already folded in
        if kv("clock_s") is not None:
            clock.advance_to(kv("clock_s"))
        self.bucket = TokenBucket.restore(cfg.max_moves_per_hour, kv("move_budget"), clock.now())

    # ------------------------------------------------------------------ helpers
    def spec(self, r: JobRecord) -> JobSpec:
        key = (r.name, r.seq)
        if key not in self._specs:
            self._specs[key] = JobSpec.model_validate(r.spec)
        return self._specs[key]

    def context(self, jobs: dict[str, JobRecord], now: float) -> PlanningContext:
        return PlanningContext(self.cluster, {n: self.spec(r) for n, r in jobs.items()}, self.estimates.factors(), now)

    def current(self) -> tuple[Optional[int], Placement]:
        p = self.store.current_plan()
        return (p.id, Placement.from_dict(p.placement)) if p else (None, Placement())

    def idle(self) -> bool:
        """No live job: nothing pending, placed or being cancelled."""
        return not self.store.live_jobs()

    # ------------------------------------------------------------------ recovery
    def recover(self) -> list[str]:
        """Finish applies a crash interrupted (plans left ``applying``), through the executor's journal."""
        done = []
        for p in self.store.plans_with_status("applying"):
            if self.cfg.dry_run:
                log.warning("plan %d was being applied when the last daemon stopped; dry-run leaves it to an applying daemon", p.id)
                continue
            target = Placement.from_dict(p.placement)
            prev = self._previous_applied(p.id)
            now = self.clock.now()
            log.info("resuming the apply of plan %d from the executor's journal", p.id)
            res = self.executor.resume(p.id, target, now=now, should_stop=self.stop.is_set)
            jobs = {r.name: r for r in self.store.live_jobs()}
            self._finish_apply(p.id, prev, target, res, now, self.context(jobs, now), resumed=True)
            done.append(f"plan {p.id}: {res.message}")
        return done

    def _previous_applied(self, plan_id: int) -> Placement:
        row = self.store.conn().execute("SELECT placement FROM plans WHERE status IN ('applied', 'superseded') AND id < ? "
                                        "ORDER BY id DESC LIMIT 1", (plan_id,)).fetchone()
        import json

        return Placement.from_dict(json.loads(row["placement"])) if row else Placement()

    # ------------------------------------------------------------------ the cycle
    def run_cycle(self) -> CycleReport:
        t_wall = time.perf_counter()
        now = self.clock.now()
        cycle = self.cycle_no + 1
        rep = CycleReport(cycle, now)

        # 1. observe ----------------------------------------------------------------------
        jobs = {r.name: r for r in self.store.live_jobs()}
        plan_id, plan = self.current()
        obs: Observation = self.executor.observe(now)
        rows = self.store.telemetry_after(self.cursor, self.cfg.telemetry_max_per_cycle)
        cursor = rows[-1][0] if rows else self.cursor
        snapshots: dict[str, list] = {}
        for _, job, body in rows:
            try:
                snapshots.setdefault(job, []).append(TelemetrySnapshot.model_validate_json(body))
            except ValidationError:  # validated on the way in; a row that no longer validates is skipped, not fatal
                log.warning("skipping a stored telemetry snapshot of %s that no longer validates", job)
        for snap in obs.telemetry:
            snapshots.setdefault(snap.job, []).append(snap)

        # 2. estimate ---------------------------------------------------------------------
        ctx = self.context(jobs, now)
        samples: list[IterationSample] = list(obs.samples)
        sampled = {s.job for s in samples}
        for job, snaps in snapshots.items():
            for snap in snaps:
                s = self.timer.feed(snap)
                if s is not None and job not in sampled and job in jobs:
                    samples.append(s)
        base = self.placer.predict(ctx, plan)
        per_job: dict[str, list[IterationSample]] = {}
        for s in sorted(samples, key=lambda s: (s.job, s.iteration)):
            if s.job in base and s.job in jobs and s.iteration > self.sample_mark.get(s.job, 0):
                self.estimates.add(s, *base[s.job])
                per_job.setdefault(s.job, []).append(s)
                self.sample_mark[s.job] = s.iteration
        missed = {j for j, ss in per_job.items() if jobs[j].slo_s is not None and any(s.iteration_s > jobs[j].slo_s * (1 + 1e-9) for s in ss)}
        drifts = self.estimates.detect(missed)
        for d in drifts:
            self.metrics.drifts.labels(d.phase).inc()
        ctx.factors = self.estimates.factors()

        # 3. triggers ---------------------------------------------------------------------
        due = [r for r in jobs.values() if r.state is JobState.PENDING and r.arrives_at <= now]
        triggers = []
        if due:
            triggers.append(f"arrival({len(due)})")
        if obs.finished or obs.failed or any(r.cancel_requested_at is not None or r.state is JobState.CANCELLING for r in jobs.values()):
            triggers.append("departure")
        if drifts:
            triggers.append(f"drift({len(drifts)})")
        periodic = self.cfg.reoptimise and (self.last_reopt_at is None or now - self.last_reopt_at >= self.cfg.reoptimise_every_s)
        if periodic and plan.groups:
            triggers.append("periodic")
        if snapshots:
            triggers.append(f"telemetry({sum(len(v) for v in snapshots.values())})")
        rep.triggers = triggers

        # 4-5. solve and gate -------------------------------------------------------------
        out = solve.departures(jobs, plan, obs)
        target, moves, decisions, solve_s = out.target, list(out.moves), list(out.decisions), dict(out.solve_s)
        departed = bool(out.decisions)
        rep_ = solve.repair(ctx, self.placer, target, drifts, jobs, self.cfg)
        target = rep_.target
        decisions += rep_.decisions
        solve_s.update(rep_.solve_s)
        adm = solve.admissions(ctx, self.placer, target, jobs, now, self.cfg)
        target = adm.target
        moves += adm.moves
        decisions += adm.decisions
        solve_s.update(adm.solve_s)
        reopt_ran = rep_.reoptimised
        since = float("inf") if self.last_reopt_at is None else now - self.last_reopt_at
        freed = departed and since >= self.cfg.reoptimise_min_interval_s
        if self.cfg.reoptimise and not reopt_ran and target.groups and (periodic or freed):
            ro = solve.reoptimise(ctx, self.placer, target, self.cfg, self.bucket, now, ["periodic"] if periodic else ["departure"])
            target = ro.target
            decisions += ro.decisions
            solve_s.update(ro.solve_s)
            reopt_ran = True
        if reopt_ran or periodic:
            self.last_reopt_at = now
        for kind, secs in solve_s.items():
            self.metrics.solve_seconds.labels(kind).observe(secs)
        for d in decisions:
            gap = d.solver.get("gap") if d.solver else None
            if gap is not None:
                self.metrics.solve_gap.labels(d.kind).set(gap)

        # 6. apply (write-ahead, then the executor, then the outcome) ---------------------
        changed = target.as_dict() != plan.as_dict()
        if changed:
            target, _ = self.placer.evaluate(ctx, target)
        leaving = {m.job for m in moves if m.to in (JobState.COMPLETED, JobState.FAILED, JobState.CANCELLED)}
        for j in leaving:
            if self.reallocator is not None:
                self.reallocator.forget(j)
            self.estimates.forget(j)
            self.timer.forget(j)
            self.sample_mark.pop(j, None)
            self.realloc_at.pop(j, None)
        cost_delta = plan.cost_per_hour * max(0.0, now - self.last_at) / 3600.0 if self.last_at is not None else 0.0
        new_plan_id = None
        with self.store.tx() as c:
            if not self.lease.verify(c):
                raise LeaseLost("the applier lease is held by another daemon now")
            for job, ss in per_job.items():
                slo = jobs[job].slo_s
                misses = sum(1 for s in ss if slo is not None and s.iteration_s > slo * (1 + 1e-9))
                last = max(ss, key=lambda s: s.iteration)
                total = obs.iterations.get(job, jobs[job].iterations + len(ss))
                self.store.record_iterations(c, job, total, last.iteration_s, misses)
                if misses:
                    self.metrics.slo_misses.inc(misses)
            for m in moves:
                if m.to is None:
                    self.store.set_job_reason(c, m.job, m.reason)
                else:
                    self.store.transition(c, m.job, m.to, m.reason, now)
            if changed:
                status = "recorded" if self.cfg.dry_run else "applying"
                solver = next((d.solver for d in reversed(decisions) if d.changes_plan and d.solver), {}) or \
                    {"backend": self.placer.name, "status": "feasible", "warm_start": "previous-plan"}
                new_plan_id = self.store.insert_plan(c, created_at=now, cycle=cycle, kind="placement", status=status,
                                                     cost_per_hour=target.cost_per_hour, decision_id=None, placement=target.as_dict(),
                                                     doc=self.placer.plan_document(ctx, target, solver))
                if self.cfg.dry_run:
                    for name, r in jobs.items():
                        m_to = next((m.to for m in moves if m.job == name), r.state)
                        if m_to is JobState.CANCELLING and name not in set(target.jobs()):
                            self.store.transition(c, name, JobState.CANCELLED, "removed from the recorded plan (dry-run)", now)
            for d in decisions:
                outcome = d.outcome
                if d.changes_plan and changed:
                    outcome = "dry-run" if self.cfg.dry_run else "applying"
                row = d.row() | {"cycle": cycle, "at": now, "outcome": outcome, "plan_id": new_plan_id if d.changes_plan else None,
                                 "dry_run": self.cfg.dry_run}
                self.store.insert_decision(c, row)
                if outcome != "applying":  # counted with its final outcome once the apply ends
                    self.metrics.decisions.labels(d.kind, outcome).inc()
            self.cost_usd += cost_delta
            self._save_state(c, cycle, cursor, now)
        self.cycle_no, self.cursor, self.last_at = cycle, cursor, now
        rep.decisions, rep.plan_id = len(decisions), new_plan_id
        if changed and self.cfg.dry_run:
            rep.apply = "dry-run"
        elif changed:
            res = self.executor.apply(target, plan_id=new_plan_id, now=now, should_stop=self.stop.is_set)
            self._finish_apply(new_plan_id, plan, target, res, now, ctx)
            rep.apply = "ok" if res.ok else ("interrupted" if res.interrupted else "failed")

        # 7. record -----------------------------------------------------------------------
        if self.reallocator is not None and self.cfg.realloc and not self.stop.is_set():
            self._reallocate(ctx, jobs, target, plan, snapshots, now, cycle)
        self._export(jobs, target, per_job)
        with self.store.tx() as c:
            self.store.prune_telemetry(c, self.cursor, time.time() - self.cfg.telemetry_retention_s)
            self.store.prune_plans(c, self.cfg.plans_keep)
        rep.wall_s = time.perf_counter() - t_wall
        self.metrics.cycles.inc()
        self.metrics.cycle_seconds.observe(rep.wall_s)
        if self.clock.kind == "wall" and rep.wall_s > self.cfg.period_s:
            self.metrics.cycle_overrun.inc()
        self.metrics.last_cycle.set(time.time())
        return rep

    def _save_state(self, c, cycle: int, cursor: int, now: float) -> None:
        kv = self.store.set_kv
        kv(c, "cycle", cycle)
        kv(c, "telemetry_cursor", cursor)
        kv(c, "last_cycle_at", now)
        kv(c, "clock_s", now)
        kv(c, "last_reopt_at", self.last_reopt_at)
        kv(c, "cost_usd", self.cost_usd)
        kv(c, "estimates", self.estimates.state())
        kv(c, "phase_timer", self.timer.state())
        kv(c, "sample_mark", self.sample_mark)
        kv(c, "move_budget", self.bucket.state())
        kv(c, "realloc_at", self.realloc_at)

    # ------------------------------------------------------------------ apply outcome
    def _finish_apply(self, plan_id: int, prev: Placement, target: Placement, res: ApplyResult, now: float, ctx: PlanningContext,
                      resumed: bool = False) -> None:
        result = "ok" if res.ok else ("interrupted" if res.interrupted else "failed")
        self.metrics.applies.labels(result).inc()
        with self.store.tx() as c:
            if not self.lease.verify(c):
                raise LeaseLost("the applier lease was lost during an apply; its new holder resumes it")
            rows = list(c.execute("SELECT id, kind FROM decisions WHERE plan_id=?", (plan_id,)))
            ids = [r["id"] for r in rows]
            if not res.interrupted:
                for r in rows:
                    self.metrics.decisions.labels(r["kind"], "applied" if res.ok else "failed").inc()
            note = ("resumed after a restart: " if resumed else "") + f"apply: {res.message} ({res.steps_done}/{res.steps_total} steps)"
            if res.ok:
                c.execute("UPDATE plans SET status='superseded' WHERE status='applied' AND id != ?", (plan_id,))
                self.store.set_plan_status(c, plan_id, "applied")
                for i in ids:
                    self.store.update_decision(c, i, outcome="applied", add_reason=note)
                running = res.running if res.running else frozenset(target.jobs())
                in_target = set(target.jobs())
                for r in self.store.live_jobs(c):
                    if r.state is JobState.ADMITTED and r.name in in_target and r.name in running:
                        self.store.transition(c, r.name, JobState.RUNNING, f"running: plan {plan_id} applied", now)
                    elif r.state is JobState.CANCELLING and r.name not in in_target:
                        self.store.transition(c, r.name, JobState.CANCELLED, f"cancelled: removed by plan {plan_id}", now)
                mig, moves, _ = gate.migration_usd(ctx, prev, target) if all(j in ctx.jobs for j in set(prev.jobs()) & set(target.jobs())) \
                    else (0.0, {}, {})
                self.migration_usd += mig
                self.store.set_kv(c, "migration_usd", self.migration_usd)
                for kind in moves.values():
                    self.metrics.migrations.labels(kind).inc()
                self.metrics.migration_cost.inc(mig)
            elif res.interrupted:
                for i in ids:
                    self.store.update_decision(c, i, add_reason=note + "; a restarted daemon resumes it from the journal")
            else:
                self.store.set_plan_status(c, plan_id, "failed")
                for i in ids:
                    self.store.update_decision(c, i, outcome="failed", add_reason=note)
                prev_jobs = set(prev.jobs())
                for r in self.store.live_jobs(c):
                    if r.state is JobState.ADMITTED and r.name in set(target.jobs()) and r.name not in prev_jobs:
                        self.store.transition(c, r.name, JobState.PENDING, f"displaced: plan {plan_id} could not be applied ({res.message})", now)

    # ------------------------------------------------------------------ reallocation
    def _reallocate(self, ctx, jobs, target: Placement, plan: Placement, snapshots: dict, now: float, cycle: int) -> None:
        moved = set(moved_jobs(plan, target))
        for job, snaps in sorted(snapshots.items()):
            r = jobs.get(job)
            if r is None or r.state is not JobState.RUNNING or job in moved or not snaps:
                continue
            t0 = time.perf_counter()
            try:
                out = self.reallocator.decide(ctx, job, snaps)
            except (UserError, ValueError) as exc:  # telemetry the planner cannot use: say so once, keep the loop going
                msg = exc.render() if isinstance(exc, UserError) else str(exc)
                if self._realloc_errors.get(job) != msg:
                    log.warning("no reallocation decision for %s: %s", job, msg)
                    self._realloc_errors[job] = msg
                self.metrics.decisions.labels("realloc", "error").inc()
                continue
            self._realloc_errors.pop(job, None)
            self.metrics.solve_seconds.labels("realloc").observe(time.perf_counter() - t0)
            if not out.donors and not out.committed:
                continue
            cooling = now - self.realloc_at.get(job, float("-inf")) < self.cfg.realloc_cooldown_s
            reasons = [out.reason]
            if out.committed and cooling:
                reasons.append(f"not applied: the last reallocation of {job} was {now - self.realloc_at[job]:.0f} s ago "
                               f"(cooldown {self.cfg.realloc_cooldown_s:g} s)")
            outcome = ("dry-run" if self.cfg.dry_run else "applying") if out.committed and not cooling else \
                ("rate-limited" if out.committed else "not-committed")
            row = {"cycle": cycle, "at": now, "kind": "realloc", "triggers": [f"donor({', '.join(out.donors)})" if out.donors else "telemetry"],
                   "outcome": outcome, "jobs": [job], "reasons": reasons, "solver": out.solver, "dry_run": self.cfg.dry_run}
            with self.store.tx() as c:
                if not self.lease.verify(c):
                    raise LeaseLost("the applier lease is held by another daemon now")
                did = self.store.insert_decision(c, row)
                if outcome == "applying":
                    self.realloc_at[job] = now
                    self.store.set_kv(c, "realloc_at", self.realloc_at)
            if outcome == "applying":
                res = self.executor.apply_realloc(job, out.body, now=now)
                with self.store.tx() as c:
                    self.store.update_decision(c, did, outcome="applied" if res.ok else "failed", add_reason=f"apply: {res.message}")
                outcome = "applied" if res.ok else "failed"
            self.metrics.decisions.labels("realloc", outcome).inc()

    # ------------------------------------------------------------------ metrics
    def _export(self, jobs: dict[str, JobRecord], target: Placement, per_job: dict[str, list[IterationSample]]) -> None:
        m = self.metrics
        for state, n in self.store.count_jobs().items():
            m.jobs.labels(state).set(n)
        m.plan_cost.set(target.cost_per_hour)
        m.cost_total.set(self.cost_usd)
        for phase, err in self.estimates.predictor_error().items():
            m.predictor_error.labels(phase).set(err)
        if self.reallocator is not None:
            err = self.reallocator.predictor_error()
            if err is not None:
                m.predictor_error.labels("throughput").set(err)
        met = total = 0
        for name, r in jobs.items():
            if r.state is not JobState.RUNNING or r.slo_s is None:
                continue
            last = max(per_job[name], key=lambda s: s.iteration).iteration_s if name in per_job else r.last_iteration_s
            if last is None:
                continue
            total += 1
            met += last <= r.slo_s * (1 + 1e-9)
        m.slo_attainment.set(met / total if total else 1.0)
