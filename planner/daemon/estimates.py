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

The prediction error of the estimates in force (the mean absolute percentage error over the most
recent iterations, per phase) is the ``predictor error`` the daemon exports.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass

from planner.daemon.ports import IterationSample, PhaseFactors

PHASES = ("rollout", "train")
ERROR_WINDOW = 256


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
    def __init__(self, window: int = 8, min_samples: int = 3, threshold: float = 0.10, state: dict | None = None) -> None:
        self.window, self.min_samples, self.threshold = window, min_samples, threshold
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
                old = self.factor.get(job, {}).get(phase, 1.0)
                limit = 1e-3 if job in missed else self.threshold
                if abs(env / old - 1.0) > limit:
                    self.factor.setdefault(job, {})[phase] = env
                    out.append(Drift(job, phase, old, env, len(q)))
        return out

    def forget(self, job: str) -> None:
        self.ratios.pop(job, None)
        self.factor.pop(job, None)

    # ------------------------------------------------------------------ reads
    def factors_of(self, job: str) -> PhaseFactors:
        f = self.factor.get(job, {})
        return PhaseFactors(f.get("rollout", 1.0), f.get("train", 1.0))

    def factors(self) -> dict[str, PhaseFactors]:
        return {j: self.factors_of(j) for j in self.factor}

    def predictor_error(self) -> dict[str, float]:
        return {p: (sum(e) / len(e) if e else 0.0) for p, e in self.errors.items()}

    def state(self) -> dict:
        return {"ratios": {j: {p: list(q) for p, q in d.items()} for j, d in self.ratios.items()},
                "factor": self.factor, "errors": {p: list(e) for p, e in self.errors.items()}}
