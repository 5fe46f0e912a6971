"""Phase 2 of a cycle: update the estimates from what the jobs measured.

For every running job and phase (rollout; training plus weight sync) the daemon keeps the ratio
``measured / predicted`` of its recent iterations, where *predicted* is the estimators' figure
for the pools the job runs on. The **factor in force** multiplies that job's estimated phase
times in every later decision (the planning context carries it to the placement planner). It
changes -- a **drift** -- when the conservative envelope of the recent ratios differs from it by
more than the threshold, once ``min_samples`` iterations back it; or by any amount when the job
just missed its SLO (a group packed to within a few percent of an SLO must not wait for a 10%
drift). The envelope is the slowest recent ratio plus half the recent spread (max + (max - min)/2):
conservative like Weave's bounds, so an SLO is judged against the slowest iteration seen and the
noise around it. A slowdown is therefore followed at once; a speed-up only when the whole window
agrees.

**A job not yet measured** is planned at the fleet's prior, not at its bare estimates: per phase the
bias every running job with a factor of its own shares, once at least ``prior_min_jobs`` have one --
the least of their factors when all are above 1 (every job slower than estimated, by at least that),
the largest when all are below 1, else 1.0 (some slower, some faster: no shared bias; a median there
planned the fast newcomers on too many nodes). Estimates that are off for the whole fleet the same
way (an MFU or decode-speed model wrong for the hardware) are then not re-learnt in full by every
newcomer at the price of its group's SLOs: on the ``weave-trace-60`` replay with every job 1.3-1.6x
slower than estimated, each newcomer admitted at 1.0 missed at its first iterations, its drift broke
its group and the repair moved its co-members. A job gets its own factor once ``min_samples`` of its iterations are measured: the
envelope below where it differs from the prior it was planned at by more than the threshold (a
drift), else that prior.

The prediction error of the estimates in force (the mean absolute percentage error over the most
recent iterations, per phase) is the ``predictor error`` the daemon exports.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass

from planner.daemon.ports import IterationSample, PhaseFactors

PHASES = ("rollout", "train")
ERROR_WINDOW = 256
#: jobs with a factor of their own needed before their median is the prior of the others (0: no prior)
PRIOR_MIN_JOBS = 3


@dataclass(frozen=True)
class Drift:
    job: str
    phase: str
    old: float
    new: float
    samples: int

    def reason(self) -> str:
        return (f"{self.job}: measured {self.phase} time is {self.new:.3f}x the estimate over the last {self.samples} "
                f"iteration(s) (was {self.old:.3f}x)")


class Estimates:
    def __init__(self, window: int = 8, min_samples: int = 3, threshold: float = 0.10, state: dict | None = None,
                 prior_min_jobs: int = PRIOR_MIN_JOBS) -> None:
        self.window, self.min_samples, self.threshold = window, min_samples, threshold
        self.prior_min_jobs = prior_min_jobs
        self.ratios: dict[str, dict[str, deque]] = {}
        self.factor: dict[str, dict[str, float]] = {}
        self.errors: dict[str, deque] = {p: deque(maxlen=ERROR_WINDOW) for p in PHASES}
        if state:
            for job, d in state.get("ratios", {}).items():
                self.ratios[job] = {p: deque(d.get(p, []), maxlen=window) for p in PHASES}
            self.factor = {j: dict(f) for j, f in state.get("factor", {}).items()}
            for p in PHASES:
                self.errors[p].extend(state.get("errors", {}).get(p, []))

    # ------------------------------------------------------------------ updates
    def add(self, s: IterationSample, base_rollout_s: float, base_train_s: float) -> None:
        """Fold in one measured iteration, given the estimators' phase times for its pools."""
        r = self.ratios.setdefault(s.job, {p: deque(maxlen=self.window) for p in PHASES})
        f = self.factors_of(s.job)
        for phase, measured, base, fac in (("rollout", s.rollout_s, base_rollout_s, f.rollout), ("train", s.train_s, base_train_s, f.train)):
            if base > 0 and measured > 0:
                r[phase].append(measured / base)
                self.errors[phase].append(abs(fac * base - measured) / measured)

    def detect(self, missed: set[str] | frozenset = frozenset()) -> list[Drift]:
        """Move the factors where the window says so (for jobs in ``missed``: where it differs at all)."""
        out = []
        for job, by_phase in sorted(self.ratios.items()):
            for phase in PHASES:
                q = by_phase[phase]
                if len(q) < self.min_samples and job not in missed:
                    continue
                if not q:
                    continue
                hi, lo = max(q), min(q)
                env = hi + (hi - lo) / 2.0
                own = phase in self.factor.get(job, {})
                old = getattr(self.factors_of(job), phase)  # its own factor, else the prior it was planned at
                limit = 1e-3 if job in missed else self.threshold
                if abs(env / old - 1.0) > limit:
                    self.factor.setdefault(job, {})[phase] = env
                    out.append(Drift(job, phase, old, env, len(q)))
                elif not own and len(q) >= self.min_samples:
                    # measured, and the prior it was planned at agreed: that is its own from now on (it no longer
                    # follows the others', and counts in their median)
                    self.factor.setdefault(job, {})[phase] = old
        return out

    def forget(self, job: str) -> None:
        self.ratios.pop(job, None)
        self.factor.pop(job, None)

    # ------------------------------------------------------------------ reads
    def prior(self) -> PhaseFactors:
        """The factors a job without its own is planned at (module docstring): per phase the bias every job
        with its own shares -- the least of their factors where all are above 1, the largest where all are
        below -- once at least ``prior_min_jobs`` have one; else 1.0."""
        out = []
        for phase in PHASES:
            own = [f[phase] for f in self.factor.values() if phase in f]
            if self.prior_min_jobs <= 0 or len(own) < self.prior_min_jobs:
                out.append(1.0)
            elif min(own) > 1.0:
                out.append(min(own))  # every job slower than estimated: at least this much slower
            elif max(own) < 1.0:
                out.append(max(own))
            else:
                out.append(1.0)  # some slower, some faster: no bias they share
        return PhaseFactors(*out)

    def factors_of(self, job: str) -> PhaseFactors:
        f = self.factor.get(job, {})
        if len(f) == len(PHASES):
            return PhaseFactors(f["rollout"], f["train"])
        pr = self.prior()
        return PhaseFactors(f.get("rollout", pr.rollout), f.get("train", pr.train))

    def factors(self, jobs: Iterable[str] = ()) -> dict[str, PhaseFactors]:
        """The factors in force of the jobs with their own and of ``jobs`` (the prior where they have none)."""
        return {j: self.factors_of(j) for j in sorted(set(self.factor) | set(jobs))}

    def predictor_error(self) -> dict[str, float]:
        return {p: (sum(e) / len(e) if e else 0.0) for p, e in self.errors.items()}

    def state(self) -> dict:
        return {"ratios": {j: {p: list(q) for p, q in d.items()} for j, d in self.ratios.items()},
                "factor": self.factor, "errors": {p: list(e) for p, e in self.errors.items()}}
