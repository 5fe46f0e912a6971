"""Online throughput predictor for reallocation: curves refined from observed throughput, with
its prediction error and decision regret reportable.

One :class:`~estimators.curves.OnlineCurve` per (component, GPU type) holds throughput (the
component's own units, e.g. tokens/s) as a concave function of GPUs. A prior comes from the
estimators (:meth:`ThroughputPredictor.set_prior`: profile points, fitted concave); each observation
(:meth:`observe`, or :meth:`observe_snapshot` from a telemetry snapshot: per component and GPU type,
the GPUs held and the tokens/s reported) is first predicted, logged with its realised value, then
folded in by recursive least squares (``OnlineCurve.update``).

Decisions are logged too (:meth:`record_decision`): the predicted pipeline throughput of the
allocation applied, the alternatives that were on the table (whole allocations: component ->
GPU type -> GPUs, with their migration cost), and later (:meth:`realise`) the realised pipeline
throughput. Reported (:meth:`report`):

* **curve error**: mean absolute percentage error of the predictions made before each update,
  per curve and overall;
* **decision error**: |predicted - realised| / realised of the applied allocations;
* **regret** (hindsight, under the refined curves): for each decision,
  ``max_alt V(alt) - V(applied)`` where ``V`` is the pipeline value (minimum over components of
  their predicted throughput divided by their work per pipeline unit, minus migration cost)
  recomputed with the curves as they are *now*; zero when the applied allocation is still the best
  of the alternatives it was chosen from.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

import numpy as np

from estimators.curves import ConcaveCurve, OnlineCurve, fit_concave


@dataclass
class DecisionRecord:
    decision_id: str
    time_s: float
    predicted: float
    applied: dict  # component -> {gpu type: gpus}
    alternatives: list  # (allocation dict, migration cost)
    weights: dict  # component -> work per pipeline unit
    applied_cost: float = 0.0
    realised: Optional[float] = None


@dataclass
class ThroughputPredictor:
    forgetting: float = 0.98
    curves: dict = field(default_factory=dict)  # (component, gpu type) -> OnlineCurve
    log: list = field(default_factory=list)  # (time, component, gpu type, gpus, predicted, observed)
    decisions: list = field(default_factory=list)

    # ------------------------------------------------------------------------------ curves
    def set_prior(self, component: str, gpu_type: str, points_or_curve, *, linear: bool = False) -> None:
        curve = points_or_curve if isinstance(points_or_curve, ConcaveCurve) else fit_concave(points_or_curve)
        if linear:
            curve = ConcaveCurve(curve.xs, curve.ys, extrapolate=True)
        self.curves[(component, gpu_type)] = OnlineCurve(curve, forgetting=self.forgetting)

    def has(self, component: str, gpu_type: str) -> bool:
        return (component, gpu_type) in self.curves

    def curve(self, component: str, gpu_type: str) -> ConcaveCurve:
        return self.curves[(component, gpu_type)].curve

    def predict(self, component: str, gpu_type: str, gpus: float) -> float:
        return self.curves[(component, gpu_type)].predict(gpus)

    def observe(self, component: str, gpu_type: str, gpus: float, observed: float, time_s: float = 0.0) -> Optional[float]:
        """Log the prediction for ``gpus`` against ``observed`` and refine; None when no curve exists yet."""
        oc = self.curves.get((component, gpu_type))
        if oc is None or gpus <= 0:
            return None
        predicted = oc.update(gpus, observed)
        self.log.append((time_s, component, gpu_type, float(gpus), predicted, float(observed)))
        return predicted

    def observe_snapshot(self, snap) -> int:
        """Fold in every (component, GPU type) of a telemetry snapshot that reports throughput."""
        n = 0
        agg: dict[tuple[str, str], list[float]] = {}
        for w in snap.workers:
            a = agg.setdefault((w.component, w.gpu_type), [0.0, 0.0])
            a[0] += w.gpus
            a[1] += w.tokens_per_s
        for (comp, t), (g, tps) in sorted(agg.items()):
            if tps > 0 and self.observe(comp, t, g, tps, snap.time_s) is not None:
                n += 1
        return n

    # --------------------------------------------------------------------------- decisions
    def _value(self, alloc: dict, cost: float, weights: dict) -> float:
        vals = []
        for comp, by_type in alloc.items():
            thr = sum(self.predict(comp, t, g) for t, g in by_type.items() if (comp, t) in self.curves and g > 0)
            vals.append(thr / max(1e-12, weights.get(comp, 1.0)))
        return (min(vals) if vals else 0.0) - cost

    def record_decision(self, decision_id: str, time_s: float, predicted: float, applied: dict, alternatives: list,
                        weights: dict | None = None, applied_cost: float = 0.0) -> DecisionRecord:
        rec = DecisionRecord(decision_id, time_s, float(predicted), applied, list(alternatives), dict(weights or {}), applied_cost)
        self.decisions.append(rec)
        return rec

    def realise(self, decision_id: str, realised: float) -> None:
        for rec in self.decisions:
            if rec.decision_id == decision_id:
                rec.realised = float(realised)
                return
        raise KeyError(f"no decision {decision_id!r} recorded")

    def regret(self, rec: DecisionRecord) -> float:
        applied = self._value(rec.applied, rec.applied_cost, rec.weights)
        best = max([applied] + [self._value(a, c, rec.weights) for a, c in rec.alternatives])
        return max(0.0, best - applied)

    # ------------------------------------------------------------------------------ report
    def report(self) -> dict:
        per_curve = {}
        for (comp, t), oc in sorted(self.curves.items()):
            if oc.history:
                per_curve[f"{comp}@{t}"] = {"observations": len(oc.history), "mape": oc.mape()}
        errs = [abs(p - o) / abs(o) for *_, p, o in self.log if abs(o) > 1e-12]
        realised = [r for r in self.decisions if r.realised is not None and abs(r.realised) > 1e-12]
        return {
            "observations": len(self.log),
            "curve_mape": float(np.mean(errs)) if errs else None,
            "curves": per_curve,
            "decisions": len(self.decisions),
            "decision_mape": (float(np.mean([abs(r.predicted - r.realised) / abs(r.realised) for r in realised]))
                              if realised else None),
            "mean_regret": float(np.mean([self.regret(r) for r in self.decisions])) if self.decisions else None,
        }
