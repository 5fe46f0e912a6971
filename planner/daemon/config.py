"""The daemon's settings, each with its unit, default and reason.

Checked once at start (a bad value is a :class:`planner.errors.UserError` naming the flag); the
loop never re-validates them.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Optional

from planner.errors import Problem, UserError


@dataclass(frozen=True)
class DaemonConfig:
    period_s: float = 10.0  # one cycle per period (on the daemon's clock)
    dry_run: bool = False  # decide and record, apply nothing
    clock: str = "wall"  # wall | virtual (virtual: cycles advance simulated time by period_s without waiting)
    # Re-optimisation: periodic, and after departures free nodes. Optional changes, so gated.
    reoptimise: bool = True
    reoptimise_every_s: float = 3600.0  # at most one periodic re-optimisation per this many clock seconds
    reoptimise_time_limit_s: float = 10.0  # wall-clock limit of one re-optimisation solve
    reoptimise_min_interval_s: float = 900.0  # departure-triggered re-optimisations at most this often (clock seconds)
    amortise_s: float = 3600.0  # a $/h saving counts over this horizon against the one-off migration cost
    gain_margin: float = 0.10  # keep an optional change only if gain > (1 + margin) x migration cost
    max_moves_per_hour: float = 30.0  # jobs moved by optional changes, token bucket (rate limit)
    # Drift: measured / predicted phase time beyond the threshold updates the estimates.
    drift_threshold: float = 0.10
    drift_window: int = 8  # recent iterations per job and phase whose ratio is tracked
    drift_min_samples: int = 3
    # Admission.
    admission_timeout_s: Optional[float] = None  # a job waiting for room longer than this is rejected (None: waits)
    # Reallocation inside iterations (DynaRL).
    realloc: bool = True
    realloc_cooldown_s: float = 30.0  # per job, at most one committed reallocation per this many seconds
    # which decision: completion (planner.instances.completion: moves judged on the iteration's predicted completion
    # time, what `planner simulate --policy dynamic` runs; needs the job's posted reallocation context), planner (the
    # min-over-stages throughput planner on telemetry alone), auto (completion where a fresh context is posted, else planner)
    realloc_decision: str = "auto"
    realloc_context_max_age_s: float = 30.0  # job seconds a posted context stays usable after its time_s (else stale)
    # Housekeeping.
    telemetry_retention_s: float = 120.0  # wall seconds a consumed telemetry snapshot is kept for inspection
    plans_keep: int = 1000  # superseded and failed plans beyond the newest this many are deleted (decisions keep their reasons)
    telemetry_max_per_cycle: int = 20000  # snapshots one cycle consumes (the rest waits: the loop keeps its period)
    lease_ttl_s: float = 15.0  # wall seconds; a heartbeat renews it every third of that while the loop is alive
    until_idle: bool = False  # exit once no job is live and none is due to arrive
    max_cycles: Optional[int] = None  # exit after this many cycles (tests, replays)

    def __post_init__(self) -> None:
        bad = []
        pos = ["period_s", "reoptimise_every_s", "reoptimise_time_limit_s", "reoptimise_min_interval_s", "amortise_s", "lease_ttl_s", "drift_threshold",
               "telemetry_retention_s"]
        for name in pos:
            if not getattr(self, name) > 0:
                bad.append(Problem(f"--{name.replace('_', '-')}", f"must be > 0, got {getattr(self, name)}"))
        for name in ("gain_margin", "max_moves_per_hour", "realloc_cooldown_s"):
            if getattr(self, name) < 0:
                bad.append(Problem(f"--{name.replace('_', '-')}", f"must be >= 0, got {getattr(self, name)}"))
        if self.realloc_decision not in ("auto", "completion", "planner"):
            bad.append(Problem("--realloc-decision", f"must be auto, completion or planner, got {self.realloc_decision!r}"))
        if not self.realloc_context_max_age_s >= 0:
            bad.append(Problem("--realloc-context-max-age-s", f"must be >= 0, got {self.realloc_context_max_age_s}"))
        if self.clock not in ("wall", "virtual"):
            bad.append(Problem("--clock", f"must be wall or virtual, got {self.clock!r}"))
        if self.drift_window < 1 or self.drift_min_samples < 1 or self.drift_min_samples > self.drift_window:
            bad.append(Problem("--drift-min-samples", "needs 1 <= drift_min_samples <= drift_window"))
        if self.admission_timeout_s is not None and self.admission_timeout_s <= 0:
            bad.append(Problem("--admission-timeout-s", f"must be > 0, got {self.admission_timeout_s}"))
        if self.plans_keep < 1:
            bad.append(Problem("plans_keep", f"must be >= 1, got {self.plans_keep}"))
        if self.max_cycles is not None and self.max_cycles < 1:
            bad.append(Problem("--max-cycles", f"must be >= 1, got {self.max_cycles}"))
        if self.lease_ttl_s < 3.0:
            bad.append(Problem("--lease-ttl-s", f"must be >= 3 s (it is renewed every third of it), got {self.lease_ttl_s}"))
        if bad:
            raise UserError(bad, title="invalid daemon settings")

    def as_dict(self) -> dict:
        return asdict(self)
