"""Prometheus metrics of one daemon (a registry of its own, so two daemons in a process never mix).

=========================================  ==========================================================
metric                                     what
=========================================  ==========================================================
planner_decisions_total{kind,outcome}      decisions logged (admit, reject, departure, repair, drift, reoptimise, realloc)
planner_solve_seconds{kind}                wall time of planner calls (admit, reoptimise, repair, realloc)
planner_solve_gap{kind}                    relative gap of the last re-optimisation (0: proven optimal)
planner_migrations_total{kind}             jobs whose nodes changed in applied plans (moved, extended)
planner_migration_cost_usd_total           migration cost of applied plans
planner_slo_attainment_ratio               running jobs whose last measured iteration met their SLO, fraction
planner_slo_misses_total                   measured iterations slower than their job's SLO
planner_predictor_error{phase}             mean absolute percentage error of the estimates in force: phase times
                                           (rollout, train) and the reallocation throughput predictor (throughput)
planner_drifts_total{phase}                estimate updates after drift
planner_cycles_total                       cycles run
planner_cycle_seconds                      wall time of a cycle (histogram)
planner_cycle_overrun_total                cycles that took longer than the period (wall clock)
planner_cycle_errors_total                 cycles that failed (logged; the loop reloads its state and goes on)
planner_cycle_lateness_seconds             how late a cycle started after its scheduled time (wall clock, histogram)
planner_cycle_lateness_max_seconds         the latest a cycle has started (wall clock)
planner_last_cycle_timestamp_seconds       wall time the last cycle ended
planner_plan_cost_per_hour_usd             $/h of the plan in force (GET /v1/plan's; a target whose apply failed is not)
planner_cost_usd_total                     $ of the plans in force integrated over the daemon's clock
planner_jobs{state}                        jobs per lifecycle state
                                           (these three from the state file at every scrape: a standby's agree with the API too)
planner_telemetry_received_total           telemetry snapshots accepted
planner_telemetry_rejected_total{reason}   telemetry snapshots refused: invalid (422), too-large (413), unknown-job (404),
                                           not-placed (409: the job is not admitted or running), out-of-order (409:
                                           before the job's newest accepted snapshot, planner.daemon.ingest)
planner_applies_total{result}              executor applies (ok, failed, interrupted)
planner_lease_held                         1 while this daemon holds the applier lease
=========================================  ==========================================================
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, disable_created_metrics, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST

disable_created_metrics()  # no *_created series: they double the output and nobody graphs them

SOLVE_BUCKETS = (0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60)


class DaemonMetrics:
    content_type = CONTENT_TYPE_LATEST

    def __init__(self) -> None:
        r = self.registry = CollectorRegistry()
        self.decisions = Counter("planner_decisions", "decisions logged", ["kind", "outcome"], registry=r)
        self.solve_seconds = Histogram("planner_solve_seconds", "wall time of planner calls", ["kind"], buckets=SOLVE_BUCKETS, registry=r)
        self.solve_gap = Gauge("planner_solve_gap", "relative gap of the last solve", ["kind"], registry=r)
        self.migrations = Counter("planner_migrations", "jobs whose nodes changed in applied plans", ["kind"], registry=r)
        self.migration_cost = Counter("planner_migration_cost_usd", "migration cost of applied plans, $", registry=r)
        self.slo_attainment = Gauge("planner_slo_attainment_ratio", "running jobs whose last measured iteration met the SLO", registry=r)
        self.slo_misses = Counter("planner_slo_misses", "measured iterations slower than the SLO", registry=r)
        self.predictor_error = Gauge("planner_predictor_error", "MAPE of the phase-time estimates in force", ["phase"], registry=r)
        self.drifts = Counter("planner_drifts", "estimate updates after drift", ["phase"], registry=r)
        self.cycles = Counter("planner_cycles", "cycles run", registry=r)
        self.cycle_seconds = Histogram("planner_cycle_seconds", "wall time of a cycle", buckets=SOLVE_BUCKETS, registry=r)
        self.cycle_errors = Counter("planner_cycle_errors", "cycles that failed", registry=r)
        self.cycle_overrun = Counter("planner_cycle_overrun", "cycles longer than the period", registry=r)
        self.cycle_lateness = Histogram("planner_cycle_lateness_seconds", "how late a cycle started after its schedule", buckets=SOLVE_BUCKETS,
                                        registry=r)
        self.cycle_lateness_max = Gauge("planner_cycle_lateness_max_seconds", "the latest a cycle has started", registry=r)
        self.last_cycle = Gauge("planner_last_cycle_timestamp_seconds", "wall time the last cycle ended", registry=r)
        self.plan_cost = Gauge("planner_plan_cost_per_hour_usd", "$/h of the plan in force", registry=r)
        self.cost_total = Gauge("planner_cost_usd_total", "$ of plans in force over the daemon's clock", registry=r)
        self.jobs = Gauge("planner_jobs", "jobs per lifecycle state", ["state"], registry=r)
        self.telemetry = Counter("planner_telemetry_received", "telemetry snapshots accepted", registry=r)
        self.telemetry_rejected = Counter("planner_telemetry_rejected", "telemetry snapshots refused", ["reason"], registry=r)
        self.applies = Counter("planner_applies", "executor applies", ["result"], registry=r)
        self.lease_held = Gauge("planner_lease_held", "1 while this daemon holds the applier lease", registry=r)

    def export_state(self, store) -> None:
        """The gauges that describe the shared state, from ``store`` (what /v1/health and /v1/plan read): the
        plan in force and its cost, jobs per state, the cost so far, the SLO attainment of the running jobs
        (it was set only at a cycle's end: 0 on a standby, and after a restart until a cycle ended)."""
        p = store.current_plan()
        self.plan_cost.set(p.cost_per_hour if p else 0.0)
        for state, n in store.count_jobs().items():
            self.jobs.labels(state).set(n)
        self.cost_total.set(float(store.get_kv("cost_usd", 0.0)))
        self.slo_attainment.set(store.slo_attainment())

    def render(self) -> bytes:
        return generate_latest(self.registry)
