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
cycle. A reallocation inside an iteration that a crash (or a lost lease) left unfinished is not
resumed (the iteration it was for is gone): recover first has the executor settle it from its
journal (the unit in flight rolled back, or forward past its commit point) and records how its
decision ended, so that the journal is free for the next apply. Everything the next cycle depends on (the virtual clock, the telemetry cursor, the estimates,
the churn budget, the cost integral) is saved in the same transaction as the decisions, so a
restarted daemon continues exactly where the last committed cycle ended.

A resume (or an apply) that raises leaves its plan ``applying``: every later cycle first retries
the resume (with backoff, on an executor built again from its files) and decides nothing new on
top of it until it finishes; :meth:`Loop.problems` says why meanwhile (``/v1/health``, ``/readyz``).

A live job whose spec names a file that can no longer be read (a trace under ``--data-dir``, a
model's config.json, deleted or damaged after it was accepted) is set aside in phase 1 and fails
alone in phase 4 (cancelled instead when a cancel was requested), the field named in its reason;
the cycle goes on for the other jobs.
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass, field
from typing import Callable, Optional

from pydantic import ValidationError

from formulation.realloc.telemetry import TelemetrySnapshot
from planner.apply.precheck import blocking
from planner.daemon import gate, solve
from planner.daemon.clock import Clock
from planner.daemon.config import DaemonConfig
from planner.daemon.datafiles import job_spec, trace_stamp, unreadable
from planner.daemon.estimates import Drift, Estimates
from planner.daemon.lease import Lease
from planner.daemon.lifecycle import JobState
from planner.daemon.metrics import DaemonMetrics
from planner.daemon.phasetimes import PhaseTimer
from planner.daemon.ports import (ApplyResult, Executor, IterationSample, Observation, Placement, PlacementPlanner, PlanningContext,
                                  Reallocator, moved_jobs)
from planner.daemon.ratelimit import TokenBucket
from planner.daemon.store import DecisionRow, JobRecord, Store
from planner.errors import UserError
from planner.schema.scenario import JobSpec, Scenario

log = logging.getLogger("planner.daemon")

RESUME_BACKOFF_MAX_PERIODS = 16  # a stuck apply's resume is retried after 1, 2, 4, ... periods, at most this many apart


class LeaseLost(Exception):
    """Another daemon took the applier lease: this one must stop deciding."""


def _slo_misses(slo_s: Optional[float], samples: list[IterationSample]) -> int:
    """How many of ``samples`` took longer than the SLO ``slo_s`` (none when the job has no SLO)."""
    if slo_s is None:
        return 0
    return sum(1 for s in samples if s.iteration_s > slo_s * (1 + 1e-9))


@dataclass
class CycleReport:
    cycle: int
    at: float
    triggers: list[str] = field(default_factory=list)
    decisions: int = 0
    plan_id: Optional[int] = None
    apply: Optional[str] = None  # ok | failed | interrupted | dry-run | stuck (a resume retried and failed) | None (nothing to apply)
    wall_s: float = 0.0


@dataclass
class _Cycle:
    """What one cycle's phases hand each other (the snapshot and the decisions made on it)."""

    cycle: int
    now: float
    jobs: dict[str, JobRecord] = field(default_factory=dict)
    set_aside: dict[str, JobRecord] = field(default_factory=dict)  # live jobs whose files can no longer be read (not in jobs)
    unreadable: dict[str, str] = field(default_factory=dict)  # job -> why (the field and the file, never a value of it)
    plan: Placement = field(default_factory=Placement)
    obs: Observation = field(default_factory=Observation)
    cursor: int = 0
    snapshots: dict[str, list[TelemetrySnapshot]] = field(default_factory=dict)  # job -> telemetry snapshots in order
    ctx: Optional[PlanningContext] = None
    per_job: dict[str, list[IterationSample]] = field(default_factory=dict)  # job -> new measured iterations
    drifts: list[Drift] = field(default_factory=list)
    periodic: bool = False
    target: Placement = field(default_factory=Placement)
    moves: list[solve.Move] = field(default_factory=list)
    decisions: list[solve.Decision] = field(default_factory=list)
    missing: dict[str, str] = field(default_factory=dict)  # running job -> why the cluster no longer runs it (restored)
    restore: bool = False  # the plan in force is applied again although it did not change
    report: CycleReport = field(init=False)

    def __post_init__(self) -> None:
        self.report = CycleReport(self.cycle, self.now)

    @property
    def context(self) -> PlanningContext:
        """The planning context phase 1 made (every later phase reads it)."""
        if self.ctx is None:
            raise RuntimeError(f"cycle {self.cycle}: the planning context is read before the snapshot phase made it")
        return self.ctx


def _confined(snaps: list[TelemetrySnapshot], group) -> list[TelemetrySnapshot]:
    """The snapshots with the nodes they declare cut to the job's nodes in the plan (its group's, and those its
    workers are on): a reallocation stays inside them. A job that declared other nodes free had its workers
    started there, outside every reservation of the plan."""
    if group is None:
        return snaps
    out = []
    for s in snaps:
        keep = group.nodes_of(s.job) | {w.node for w in s.workers}
        if s.nodes is not None and any(n.node not in keep for n in s.nodes):
            s = s.model_copy(update={"nodes": [n for n in s.nodes if n.node in keep]})
        out.append(s)
    return out


class Loop:
    def __init__(self, store: Store, cluster: Scenario, placer: PlacementPlanner, executor: Executor, clock: Clock, cfg: DaemonConfig,
                 lease: Lease, metrics: DaemonMetrics, reallocator: Optional[Reallocator] = None,
                 stop: Optional[threading.Event] = None, reopen: Optional[Callable[[], Executor]] = None) -> None:
        """``reopen``: the executor built again from its files, as a restart builds it (the daemon's;
        used before a stuck apply's resume is retried, since the failed attempt may have left the
        executor's memory ahead of its files)."""
        self.store, self.cluster, self.placer, self.executor = store, cluster, placer, executor
        self.clock, self.cfg, self.lease, self.metrics, self.reallocator = clock, cfg, lease, metrics, reallocator
        self.stop = stop if stop is not None else threading.Event()
        self.reopen = reopen
        self.stuck: Optional[str] = None  # why a plan is still applying after its resume raised (None: none is)
        self._resume_tries = 0
        self._resume_at: Optional[float] = None  # the clock time of the next retry
        self._restore_tries = 0  # restores of the plan in force in a row that did not bring every job back
        self._restore_at: Optional[float] = None  # the clock time before which no restore is tried again
        # job -> (applies that failed with it in a row, the clock time it may be admitted again): a job
        # displaced by a failed apply waits 1, 2, 4, ... periods (at most RESUME_BACKOFF_MAX_PERIODS)
        # before its next admission; it was admitted again every cycle (a plan a cycle, each failing)
        self._displaced: dict[str, tuple[int, float]] = {}
        self._inputs_read: set[tuple[str, int]] = set()  # (job, seq) whose files this process has read
        self._input_problems: dict[str, str] = {}  # job failed for unreadable files -> the line health shows until it has left the plan
        self._realloc_errors: dict[str, str] = {}
        self._described: Optional[dict] = None  # what the executor ran when last recorded
        self._specs: dict[tuple[str, int, Optional[tuple[int, int]]], JobSpec] = {}
        kv = store.get_kv
        self.cycle_no: int = kv("cycle", 0)
        self.cursor: int = kv("telemetry_cursor", 0)
        self.last_at: Optional[float] = kv("last_cycle_at")
        self.last_reopt_at: Optional[float] = kv("last_reopt_at")
        self.cost_usd: float = kv("cost_usd", 0.0)
        self.migration_usd: float = kv("migration_usd", 0.0)
        self.realloc_at: dict[str, float] = kv("realloc_at", {})
        # job -> {"iteration", "decision", "due"}: the layout a reallocation left (for its iteration only); "due" once the
        # job's telemetry is of a later iteration: the plan in force is applied again for it (a restore)
        self.standing: dict[str, dict] = kv("realloc_standing", {})
        self._relaid: set[str] = set()  # jobs this cycle's placement apply laid out as planned again (their snapshots are stale)
        self.estimates = Estimates(cfg.drift_window, cfg.drift_min_samples, cfg.drift_threshold, kv("estimates"))
        self.timer = PhaseTimer(kv("phase_timer"))
        self.sample_mark: dict[str, int] = kv("sample_mark", {})  # job -> newest iteration already folded in
        self.reopt_blocked_until: Optional[float] = kv("reopt_blocked_until")  # after an executor refusal: no reshuffles
        if kv("clock_s") is not None:
            clock.advance_to(kv("clock_s"))
        self.bucket = TokenBucket.restore(cfg.max_moves_per_hour, kv("move_budget"), clock.now())

    # ------------------------------------------------------------------ helpers
    def spec(self, r: JobRecord) -> JobSpec:
        key = (r.name, r.seq, trace_stamp(r))  # (a prompt_tokens defaulted from a trace follows the file's edits)
        if key not in self._specs:
            self._specs = {k: v for k, v in self._specs.items() if k[:2] != key[:2]}
            self._specs[key] = job_spec(r)
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
        """Settle what a crash or a lost lease interrupted, through the executor's journal: first a
        reallocation's apply (ended, never resumed), then placement applies (plans left ``applying``: resumed)."""
        done = self._recover_reallocs()
        return done + self._resume_applying()

    def _resume_applying(self, reopen: bool = False) -> list[str]:
        """Resume the plans left ``applying`` through the executor's journal (``reopen``: on an executor
        built again from its files first). One whose resume raises stays ``applying``: :attr:`stuck`
        says why, and :meth:`run_cycle` retries it (after 1, 2, 4, ... periods) before anything new."""
        done: list[str] = []
        for p in self.store.plans_with_status("applying"):
            if self.cfg.dry_run:
                log.warning("plan %d was being applied when the last daemon stopped; dry-run leaves it to an applying daemon", p.id)
                continue
            target = Placement.from_dict(p.placement)
            prev = self._previous_applied(p.id)
            now = self.clock.now()
            log.info("resuming the apply of plan %d from the executor's journal", p.id)
            try:
                if reopen and self.reopen is not None:
                    self.executor = self.reopen()
                res = self.executor.resume(p.id, target, now=now, should_stop=self.stop.is_set)
            except LeaseLost:
                raise
            except Exception as exc:  # noqa: BLE001 - the plan stays applying; retried first by the next cycles
                self._resume_tries += 1
                wait = self._backoff(self._resume_tries)
                self._resume_at = now + wait
                self.stuck = (f"plan {p.id} is stuck applying: its resume failed ({self._resume_tries} attempt(s)), the last with "
                              f"{type(exc).__name__}: {exc}; retried in {wait:g} s of the daemon's clock, and no new plan is made "
                              "until it finishes")
                log.error("%s", self.stuck)
                return done
            jobs = {r.name: r for r in self.store.live_jobs()}
            self._finish_apply(p.id, prev, target, res, now, self.context(jobs, now), resumed=True)
            done.append(f"resumed plan {p.id}: {res.message}")
            if res.interrupted:  # stopped (SIGTERM) again: the next start resumes it
                return done
        self.stuck, self._resume_tries, self._resume_at = None, 0, None
        return done

    def problems(self) -> list[str]:
        """What health reports of the loop: a stuck apply; jobs failed for files that can no longer be
        read, until the plan that removes them is applied."""
        return ([self.stuck] if self.stuck else []) + list(self._input_problems.values())

    def _recover_reallocs(self) -> list[str]:
        """End the reallocation applies the last leader left unfinished and give every realloc
        decision still ``applying`` its final outcome (from the executor's journal)."""
        pending = self.store.decisions_with_outcome("realloc", "applying")
        if self.cfg.dry_run:
            if pending:
                log.warning("%d reallocation(s) were being applied when the last daemon stopped; dry-run leaves them to an applying "
                            "daemon", len(pending))
            return []
        done = []
        settle = getattr(self.executor, "settle_realloc", None)
        s = settle() if settle is not None else None
        if s is not None:
            if s.outcome == "interrupted":
                raise LeaseLost(f"the applier lease was lost while settling a reallocation: {s.message}")
            did = s.decision_id
            if did is None:  # journaled before applies named their decision: the newest unfinished one of the job
                did = next((d["id"] for d in reversed(pending) if d["jobs"] == [s.job]), None)
            if s.outcome == "unsettled":
                log.error("the unfinished reallocation of %s (decision %s) in the executor's journal %s; later applies wait for it",
                          s.job, did if did is not None else "-", s.message)
                return [f"could not settle the unfinished reallocation of {s.job}: {s.message}"]
            note = f"interrupted (the daemon applying it stopped); settled from the executor's journal by the next leader: {s.message}"
            log.warning("reallocation of %s (decision %s) %s", s.job, did if did is not None else "-", note)
            if did is not None:
                self._end_realloc(did, s.outcome, note, s.job)
            done.append(f"settled the unfinished reallocation of {s.job} (decision {did if did is not None else '-'}): {s.outcome}: "
                        f"{s.message}")
        status_of = getattr(self.executor, "realloc_status", None)
        for d in self.store.decisions_with_outcome("realloc", "applying"):  # the executor's journal holds nothing unfinished of these
            st = status_of(d["id"]) if status_of is not None else None
            outcome = {"done": "applied", "rolled_back": "rolled-back"}.get(st or "", "failed")
            note = ("interrupted (the daemon applying it stopped); the executor's journal " +
                    (f"says its apply ended {st}" if st else "holds no apply of it: it was not applied"))
            self._end_realloc(d["id"], outcome, note, d["jobs"][0] if d["jobs"] else None)
            done.append(f"recorded how the reallocation of {', '.join(d['jobs'])} (decision {d['id']}) ended: {outcome}")
        return done

    def _end_realloc(self, decision_id: int, outcome: str, note: str, job: Optional[str] = None) -> None:
        """``job``: whose layout a settled apply may have changed (units done stand): the first cycle restores its
        planned layout (the iteration the reallocation was for is gone)."""
        with self.store.tx() as c:
            if not self.lease.verify(c):
                raise LeaseLost("the applier lease is held by another daemon now")
            self.store.update_decision(c, decision_id, outcome=outcome, add_reason=note)
            if job is not None and outcome in ("applied", "rolled-back"):
                self.standing[job] = {"iteration": 0, "decision": decision_id, "due": True}
                self.store.set_kv(c, "realloc_standing", self.standing)
        self.metrics.decisions.labels("realloc", outcome).inc()

    def _previous_applied(self, plan_id: int) -> Placement:
        row = self.store.conn().execute("SELECT placement FROM plans WHERE status IN ('applied', 'superseded') AND id < ? "
                                        "ORDER BY id DESC LIMIT 1", (plan_id,)).fetchone()
        import json

        return Placement.from_dict(json.loads(row["placement"])) if row else Placement()

    # ------------------------------------------------------------------ the cycle
    def run_cycle(self) -> CycleReport:
        t_wall = time.perf_counter()
        cy = _Cycle(self.cycle_no + 1, self.clock.now())
        if not self.cfg.dry_run and self._stuck_apply(cy):
            return cy.report
        self._observe(cy)  # 1
        self._estimate(cy)  # 2
        self._triggers(cy)  # 3
        self._solve(cy)  # 4 and 5 (the gate sits inside the optional re-optimisation)
        self._apply(cy)  # 6
        self._record(cy)  # 7
        cy.report.wall_s = time.perf_counter() - t_wall
        self.metrics.cycles.inc()
        self.metrics.cycle_seconds.observe(cy.report.wall_s)
        if self.clock.kind == "wall" and cy.report.wall_s > self.cfg.period_s:
            self.metrics.cycle_overrun.inc()
        self.metrics.last_cycle.set(time.time())
        return cy.report

    def _stuck_apply(self, cy: "_Cycle") -> bool:
        """A plan still ``applying`` (its apply or resume raised) is resumed first, when its retry is
        due; True while it stays unfinished: no new plan or decision is made on top of it."""
        if not self.store.plans_with_status("applying"):
            return False
        if self._resume_at is None or cy.now >= self._resume_at:
            self._resume_applying(reopen=True)
            cy.report.apply = "stuck" if self.stuck else None
        if not self.store.plans_with_status("applying"):
            return False
        cy.report.triggers.append("stuck-apply")
        return True

    def _observe(self, cy: "_Cycle") -> None:
        """1. The state (live jobs, plan in force, new telemetry) and the backend, at one instant."""
        cy.jobs = {r.name: r for r in self.store.live_jobs()}
        self._set_aside_unreadable(cy)
        _, cy.plan = self.current()
        self._revive(cy)
        cy.obs = self.executor.observe(cy.now)
        self._reported_ends(cy)
        if self.cursor and self.store.telemetry_max_id() < self.cursor:
            # the ids went back (a table emptied by an older release's pruning numbers the next post 1): every row
            # stored now came after the cursor's, none was read
            log.warning("telemetry ids restarted below the loop's cursor %d: reading the stored snapshots from the first", self.cursor)
            self.cursor = 0
        rows = self.store.telemetry_after(self.cursor, self.cfg.telemetry_max_per_cycle)
        cy.cursor = rows[-1][0] if rows else self.cursor
        for _, job, body in rows:
            try:
                cy.snapshots.setdefault(job, []).append(TelemetrySnapshot.model_validate_json(body))
            except ValidationError:  # validated on the way in; a row that no longer validates is skipped, not fatal
                log.warning("skipping a stored telemetry snapshot of %s that no longer validates", job)
        for snap in cy.obs.telemetry:
            cy.snapshots.setdefault(snap.job, []).append(snap)
        for job, snaps in cy.snapshots.items():
            left = self.standing.get(job)
            if left is not None and max(s.iteration for s in snaps) > left["iteration"]:
                left["due"] = True
        self._missing(cy)

    def _revive(self, cy: "_Cycle") -> None:
        """Operators' requests that a node the executor declared dead is repaired
        (``POST /v1/nodes/{name}/revive``): the executor forgets its record, before this cycle observes
        the dead nodes, and the decision log says what was done (a ``repair`` decision, trigger
        ``node-revived``). A dry run, or an executor without the call, leaves the requests waiting."""
        revive = getattr(self.executor, "revive_node", None)
        if revive is None or self.cfg.dry_run:
            return
        for node, _at in sorted(self.store.take_revive_requests().items()):
            said = revive(node)
            log.info("%s", said)
            cy.decisions.append(solve.Decision("repair", ["node-revived"], "kept-current", [], [said]))

    def _backoff(self, tries: int) -> float:
        """Clock seconds before the next try after ``tries`` failed ones: 1, 2, 4, ... periods, at most
        RESUME_BACKOFF_MAX_PERIODS (a stuck resume, a restore, a displaced job's next admission)."""
        return self.cfg.period_s * min(2 ** (tries - 1), RESUME_BACKOFF_MAX_PERIODS)

    def _missing(self, cy: "_Cycle") -> None:
        """Running jobs of the plan in force that the cluster no longer runs (the executor's own view:
        no live trainer worker), e.g. a daemon restarted on a fresh local Ray cluster or workers lost
        with their node. Phase 4 applies the plan in force again for them (a ``restore`` decision: the
        executor's diff creates what is missing); a restore that does not bring them back is tried
        again after 1, 2, 4, ... periods. One whose trainer state is gone with its workers (the
        executor's ``lost``: it committed steps and nothing holds a checkpoint) fails instead."""
        probe = getattr(self.executor, "missing", None)
        if probe is None or self.cfg.dry_run or not cy.plan.groups or (self._restore_at is not None and cy.now < self._restore_at):
            return
        running = {n for n, r in cy.jobs.items() if r.state is JobState.RUNNING and n not in cy.obs.finished and n not in cy.obs.failed}
        cy.missing = {j: why for j, why in probe(cy.plan).items() if j in running}
        lost = getattr(self.executor, "lost", None)
        if cy.missing and lost is not None:  # no restore brings back a trainer whose state is gone: the job fails
            for j, why in lost(cy.plan).items():
                if cy.missing.pop(j, None) is not None:
                    cy.obs.failed[j] = f"its workers are gone and its training state with them: {why}"
        for j, left in sorted(self.standing.items()):
            if left.get("due") and j in running and j not in cy.missing and j not in cy.obs.failed and j in set(cy.plan.jobs()):
                cy.missing[j] = (f"reallocated in iteration {left['iteration']} (decision {left['decision']}) and now in a later "
                                 "iteration: its planned layout is restored")
        if not cy.missing:
            self._restore_tries, self._restore_at = 0, None
            return
        self._restore_tries += 1
        self._restore_at = cy.now + self._backoff(self._restore_tries)

    def _reported_ends(self, cy: "_Cycle") -> None:
        """The ends jobs reported themselves (``POST /v1/jobs/{name}/end``) join what the backend
        observed: phase 4 moves such a job to ``completed`` or ``failed`` and takes it out of the plan,
        under any backend (``--backend ray`` observes no job's end of its own). What the backend
        reported itself stands first."""
        for name, r in cy.jobs.items():
            end = r.end_report
            if end is None or r.state not in (JobState.RUNNING, JobState.CANCELLING) or name in cy.obs.finished or name in cy.obs.failed:
                continue
            why = "reported by the job" + (f": {end['message']}" if end.get("message") else "")
            (cy.obs.finished if end["outcome"] == "completed" else cy.obs.failed)[name] = why

    def _set_aside_unreadable(self, cy: "_Cycle") -> None:
        """Take out of the snapshot the live jobs whose files (a trace, a model's config.json) can no
        longer be read: phase 4 fails them (cancels them, when a cancel was requested) and takes them
        out of the plan, and no other phase reads their specs. A job's files are read once per process
        (as the placers read them); a job that reads stays in."""
        for name, r in list(cy.jobs.items()):
            if (name, r.seq) in self._inputs_read:
                continue
            why = unreadable(self.spec(r), prompt_tokens_from_trace=r.prompt_tokens_from_trace)
            if why is None:
                self._inputs_read.add((name, r.seq))
                continue
            cy.set_aside[name] = cy.jobs.pop(name)
            cy.unreadable[name] = why
            self._input_problems[name] = f"job '{name}' failed in cycle {cy.cycle}: a file its spec names can no longer be read: {why}"
            log.error("job %s: a file its spec names can no longer be read (%s); it leaves the plan, the other jobs go on", name, why)

    def _estimate(self, cy: "_Cycle") -> None:
        """2. Fold measured iterations (the backend's, else derived from telemetry) into the estimates."""
        cy.ctx = self.context(cy.jobs, cy.now)
        cy.ctx.unavailable = frozenset(cy.obs.dead_nodes)
        samples: list[IterationSample] = list(cy.obs.samples)
        sampled = {s.job for s in samples}
        for job, snaps in cy.snapshots.items():
            for snap in snaps:
                s = self.timer.feed(snap)
                if s is not None and job not in sampled and job in cy.jobs:
                    samples.append(s)
        base = self.placer.predict(cy.ctx, cy.plan)
        for s in sorted(samples, key=lambda s: (s.job, s.iteration)):
            if s.job in base and s.job in cy.jobs and s.iteration > self.sample_mark.get(s.job, 0):
                self.estimates.add(s, *base[s.job])
                cy.per_job.setdefault(s.job, []).append(s)
                self.sample_mark[s.job] = s.iteration
        missed = {j for j, ss in cy.per_job.items() if _slo_misses(cy.jobs[j].slo_s, ss)}
        groups = cy.plan.job_groups()
        suspects = {m for j in missed if j in groups for m in groups[j].members}  # every member shapes the group's cycle
        cy.drifts = self.estimates.detect(missed | suspects)
        for d in cy.drifts:
            self.metrics.drifts.labels(d.phase).inc()
        cy.ctx.factors = self.estimates.factors()

    def _triggers(self, cy: "_Cycle") -> None:
        """3. What asks for a decision this cycle."""
        jobs, t = cy.jobs, cy.report.triggers
        due = [r for r in jobs.values() if r.state is JobState.PENDING and r.arrives_at <= cy.now]
        if due:
            t.append(f"arrival({len(due)})")
        if cy.obs.finished or cy.obs.failed or cy.unreadable or any(r.cancel_requested_at is not None or r.state is JobState.CANCELLING
                                                   for r in jobs.values()):
            t.append("departure")
        if cy.drifts:
            t.append(f"drift({len(cy.drifts)})")
        if cy.missing:
            t.append(f"restore({len(cy.missing)})")
        hit = solve.groups_on(cy.plan, set(cy.obs.dead_nodes))
        if hit:
            t.append(f"node-lost({len(hit)})")
        cy.periodic = self.cfg.reoptimise and (self.last_reopt_at is None or cy.now - self.last_reopt_at >= self.cfg.reoptimise_every_s)
        if cy.periodic and cy.plan.groups:
            t.append("periodic")
        if cy.snapshots:
            t.append(f"telemetry({sum(len(v) for v in cy.snapshots.values())})")

    def _solve(self, cy: "_Cycle") -> None:
        """4-5. Departures, repair, admissions (mandatory); re-optimisation (optional, gated)."""
        lost = solve.node_loss(cy.context, self.placer, cy.plan, cy.obs, cy.jobs)
        steps = [solve.departures({**cy.jobs, **cy.set_aside}, lost.target, cy.obs, reprice=lambda p: self.placer.evaluate(cy.context, p)[0],
                                  unreadable=cy.unreadable)]
        departed = bool(steps[0].decisions)
        steps.insert(0, lost)
        blocked = self.reopt_blocked_until is not None and cy.now < self.reopt_blocked_until
        steps.append(solve.repair(cy.context, self.placer, steps[-1].target, cy.drifts, cy.jobs, self.cfg, allow_reoptimise=not blocked))
        reopt_ran = steps[-1].reoptimised
        waiting = {n for n, (_, at) in self._displaced.items() if at > cy.now}
        steps.append(solve.admissions(cy.context, self.placer, steps[-1].target,
                                      {n: r for n, r in cy.jobs.items() if n not in waiting}, cy.now, self.cfg))
        since = float("inf") if self.last_reopt_at is None else cy.now - self.last_reopt_at
        freed = departed and since >= self.cfg.reoptimise_min_interval_s
        if self.cfg.reoptimise and not reopt_ran and not blocked and steps[-1].target.groups and (cy.periodic or freed):
            steps.append(solve.reoptimise(cy.context, self.placer, steps[-1].target, self.cfg, self.bucket, cy.now,
                                          ["periodic"] if cy.periodic else ["departure"]))
            reopt_ran = True
        if reopt_ran or cy.periodic:
            self.last_reopt_at = cy.now
        cy.target = steps[-1].target
        moved = {j for d in lost.decisions for j in d.jobs}  # (their node-lost repair applies the changed plan)
        back = sorted(j for j in cy.missing if j in set(cy.target.jobs()) and j not in moved)
        if back:  # (a changed plan's apply creates them too; an unchanged one is applied again)
            cy.restore = cy.target.as_dict() == cy.plan.as_dict()
            cy.decisions.append(solve.Decision("restore", ["restore"], "changes-plan", back,
                                               [f"{j}: {cy.missing[j]}; the plan in force is applied again" for j in back],
                                               cy.plan.cost_per_hour, cy.target.cost_per_hour))
        for st in steps:
            cy.moves += st.moves
            cy.decisions += st.decisions
            for kind, secs in st.solve_s.items():
                self.metrics.solve_seconds.labels(kind).observe(secs)
        for d in cy.decisions:
            gap = d.solver.get("gap") if d.solver else None
            if gap is not None:
                self.metrics.solve_gap.labels(d.kind).set(gap)

    def _apply(self, cy: "_Cycle") -> None:
        """6. Write-ahead (decisions, target, transitions, loop state), then the executor, then the outcome."""
        now, jobs, target, plan = cy.now, cy.jobs, cy.target, cy.plan
        changed = target.as_dict() != plan.as_dict() or cy.restore
        refused: list = []
        if changed:  # the plan check before an apply (planner.apply.precheck): what the checker refuses is not applied
            target, violations = self.placer.evaluate(cy.context, target)
            cy.target = target
            refused = blocking(violations)
        for j in {m.job for m in cy.moves if m.to in (JobState.COMPLETED, JobState.FAILED, JobState.CANCELLED)}:
            if self.reallocator is not None:
                self.reallocator.forget(j)
            self.estimates.forget(j)
            self.timer.forget(j)
            self.sample_mark.pop(j, None)
            self.realloc_at.pop(j, None)
            self.standing.pop(j, None)
        cost_delta = plan.cost_per_hour * max(0.0, now - self.last_at) / 3600.0 if self.last_at is not None else 0.0
        new_plan_id = None
        with self.store.tx() as c:
            if not self.lease.verify(c):
                raise LeaseLost("the applier lease is held by another daemon now")
            for job, ss in cy.per_job.items():
                misses = _slo_misses(jobs[job].slo_s, ss)
                last = max(ss, key=lambda s: s.iteration)
                total = cy.obs.iterations.get(job, jobs[job].iterations + len(ss))
                self.store.record_iterations(c, job, total, last.iteration_s, misses)
                if misses:
                    self.metrics.slo_misses.inc(misses)
            for m in cy.moves:
                if m.to is None:
                    self.store.set_job_reason(c, m.job, m.reason)
                else:
                    self.store.transition(c, m.job, m.to, m.reason, now)
            if changed:
                status = "recorded" if self.cfg.dry_run else "applying"
                solver = next((d.solver for d in reversed(cy.decisions) if d.changes_plan and d.solver), {}) or \
                    {"backend": self.placer.name, "status": "feasible", "warm_start": "previous-plan"}
                new_plan_id = self.store.insert_plan(c, created_at=now, cycle=cy.cycle, kind="placement", status=status,
                                                     cost_per_hour=target.cost_per_hour, decision_id=None, placement=target.as_dict(),
                                                     doc=self.placer.plan_document(cy.context, target, solver))
                if self.cfg.dry_run:
                    placed = set(target.jobs())
                    for name, r in {**jobs, **cy.set_aside}.items():
                        m_to = next((m.to for m in cy.moves if m.job == name), r.state)
                        if m_to is JobState.CANCELLING and name not in placed:
                            self.store.transition(c, name, JobState.CANCELLED, "removed from the recorded plan (dry-run)", now)
            for d in cy.decisions:
                outcome = d.outcome
                if d.changes_plan and changed:
                    outcome = "dry-run" if self.cfg.dry_run else "applying"
                row = d.row(cycle=cy.cycle, at=now, outcome=outcome, plan_id=new_plan_id if d.changes_plan else None,
                            dry_run=self.cfg.dry_run)
                self.store.insert_decision(c, row)
                if outcome != "applying":  # counted with its final outcome once the apply ends
                    self.metrics.decisions.labels(d.kind, outcome).inc()
            self.cost_usd += cost_delta
            self._save_state(c, cy.cycle, cy.cursor, now)
        self.cycle_no, self.cursor, self.last_at = cy.cycle, cy.cursor, now
        cy.report.decisions, cy.report.plan_id = len(cy.decisions), new_plan_id
        if changed and self.cfg.dry_run:
            cy.report.apply = "dry-run"
        elif changed:
            assert new_plan_id is not None  # inserted above whenever the plan changed
            if refused:
                log.error("plan %d fails the plan check, not applied: %s", new_plan_id, "; ".join(v.message for v in refused[:5]))
                res = ApplyResult(False, 0, 0, "the plan check refuses it: " + "; ".join(v.message for v in refused[:5]))
            else:
                res = self.executor.apply(target, plan_id=new_plan_id, now=now, should_stop=self.stop.is_set)
            self._finish_apply(new_plan_id, plan, target, res, now, cy.context)
            cy.report.apply = "ok" if res.ok else ("interrupted" if res.interrupted else "failed")

    def _record(self, cy: "_Cycle") -> None:
        """7. Reallocations inside iterations, metrics, what the executor runs, housekeeping."""
        if self.reallocator is not None and self.cfg.realloc and not self.stop.is_set():
            self._reallocate(cy.context, cy.jobs, cy.target, cy.plan, cy.snapshots, cy.now, cy.cycle, set(cy.missing) | self._relaid)
        self._relaid = set()
        self._export()
        if self._input_problems:  # shown until the plan in force no longer holds the job
            _, in_force = self.current()
            placed = set(in_force.jobs())
            for name in [n for n in self._input_problems if n not in placed]:
                del self._input_problems[name]
        cluster = self.executor.describe() if hasattr(self.executor, "describe") and not self.cfg.dry_run else None
        with self.store.tx() as c:
            if cluster is not None and cluster != self._described:  # GET /v1/cluster reads it (only the loop writes the state)
                if not self.lease.verify(c):
                    raise LeaseLost("the applier lease is held by another daemon now")
                self.store.set_kv(c, "cluster", {"at": cy.now, **cluster})
                self._described = cluster
            self.store.prune_telemetry(c, self.cursor, time.time() - self.cfg.telemetry_retention_s)
            self.store.prune_realloc_contexts(c)
            self.store.prune_plans(c, self.cfg.plans_keep)

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
        kv(c, "realloc_standing", self.standing)
        kv(c, "reopt_blocked_until", self.reopt_blocked_until)

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
            note = ("resumed: " if resumed else "") + f"apply: {res.message} ({res.steps_done}/{res.steps_total} steps)"
            if res.ok:
                c.execute("UPDATE plans SET status='superseded' WHERE status='applied' AND id != ?", (plan_id,))
                self.store.set_plan_status(c, plan_id, "applied")
                for i in ids:
                    self.store.update_decision(c, i, outcome="applied", add_reason=note)
                for j in set(target.jobs()) & set(self.standing):  # (the executor's diff laid them out as planned)
                    del self.standing[j]
                    self._relaid.add(j)
                self.store.set_kv(c, "realloc_standing", self.standing)
                running = res.running if res.running else frozenset(target.jobs())
                in_target = set(target.jobs())
                for r in self.store.live_jobs(c):
                    if r.state is JobState.ADMITTED and r.name in in_target and r.name in running:
                        self.store.transition(c, r.name, JobState.RUNNING, f"running: plan {plan_id} applied", now)
                        self._displaced.pop(r.name, None)
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
                # a file a member's spec names may have gone since this process read it (the executor's
                # target reads them again): the next cycle reads them again, to fail that job alone
                members = set(target.jobs())
                self._inputs_read = {k for k in self._inputs_read if k[0] not in members}
                self.store.set_plan_status(c, plan_id, "failed")
                self.reopt_blocked_until = now + self.cfg.reoptimise_min_interval_s
                self.store.set_kv(c, "reopt_blocked_until", self.reopt_blocked_until)
                note += (f"; the previous plan stays in force, and re-optimisations wait until clock {self.reopt_blocked_until:.0f} "
                         "(admissions and departures go on)")
                for i in ids:
                    self.store.update_decision(c, i, outcome="failed", add_reason=note)
                prev_jobs = set(prev.jobs())
                for r in self.store.live_jobs(c):
                    if r.state is JobState.ADMITTED and r.name in set(target.jobs()) and r.name not in prev_jobs:
                        n = self._displaced.get(r.name, (0, now))[0] + 1
                        wait = self._backoff(n)
                        self._displaced[r.name] = (n, now + wait)
                        self.store.transition(c, r.name, JobState.PENDING, f"displaced: plan {plan_id} could not be applied ({res.message}); "
                                              f"admitted again from clock {now + wait:.0f} ({n} failed apply(s) in a row)", now)

    # ------------------------------------------------------------------ reallocation
    def _reallocate(self, ctx: PlanningContext, jobs: dict[str, JobRecord], target: Placement, plan: Placement, snapshots: dict,
                    now: float, cycle: int, restored: set[str]) -> None:
        """``restored``: jobs whose workers this cycle's apply laid out again (their snapshots name the workers before it)."""
        reallocator = self.reallocator
        if reallocator is None:
            return
        moved = set(moved_jobs(plan, target)) | restored
        for job, snaps in sorted(snapshots.items()):
            r = jobs.get(job)
            if r is None or r.state is not JobState.RUNNING or job in moved or not snaps:
                continue
            snaps = _confined(snaps, target.job_groups().get(job))
            t0 = time.perf_counter()
            try:
                out = reallocator.decide(ctx, job, snaps)
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
            row: DecisionRow = {"cycle": cycle, "at": now, "kind": "realloc",
                                "triggers": [f"donor({', '.join(out.donors)})" if out.donors else "telemetry"], "outcome": outcome,
                                "jobs": [job], "reasons": reasons, "solver": out.solver, "dry_run": self.cfg.dry_run}
            with self.store.tx() as c:
                if not self.lease.verify(c):
                    raise LeaseLost("the applier lease is held by another daemon now")
                did = self.store.insert_decision(c, row)
                if outcome == "applying":
                    self.realloc_at[job] = now
                    self.store.set_kv(c, "realloc_at", self.realloc_at)
            if outcome == "applying":
                res = self.executor.apply_realloc(job, out.body, now=now, decision_id=did)
                if res.interrupted:  # fenced: the decision stays applying; the new leader settles it from the journal
                    raise LeaseLost(f"the applier lease was lost during the reallocation of {job} (decision {did}); "
                                    f"its new holder settles it: {res.message}")
                with self.store.tx() as c:
                    if not self.lease.verify(c):
                        raise LeaseLost(f"the applier lease was lost during the reallocation of {job} (decision {did}); "
                                        "its new holder records how it ended")
                    self.store.update_decision(c, did, outcome="applied" if res.ok else "failed", add_reason=f"apply: {res.message}")
                    if res.ok or res.steps_done:  # (a failed one may leave units done before it; a refused one did nothing)
                        # the next iteration gets the planned layout back
                        self.standing[job] = {"iteration": snaps[-1].iteration, "decision": did, "due": False}
                        self.store.set_kv(c, "realloc_standing", self.standing)
                outcome = "applied" if res.ok else "failed"
            self.metrics.decisions.labels("realloc", outcome).inc()

    # ------------------------------------------------------------------ metrics
    def _export(self) -> None:
        m = self.metrics
        m.export_state(self.store)  # the plan in force (a failed target is not), jobs, cost: saved in this cycle's phase 6
        for phase, err in self.estimates.predictor_error().items():
            m.predictor_error.labels(phase).set(err)
        if self.reallocator is not None:
            tput_err = self.reallocator.predictor_error()
            if tput_err is not None:
                m.predictor_error.labels("throughput").set(tput_err)
