"""The in-iteration reallocation planner (:mod:`formulation.realloc`, after DynaRL) behind the daemon's seam.

Glue only; the decision is :func:`formulation.realloc.decide.decide`'s. Per running job the
adapter keeps the planner's stateful pieces across cycles:

* a :class:`~formulation.realloc.donors.DonorDetector` fed every snapshot in order (a donor must
  stay below ``U_low`` for ``T`` seconds: the detector needs the stream, not the last snapshot);
* a :class:`~estimators.predictor.ThroughputPredictor` for the *static* components only
  (reference, critic, reward, trainer: throughput linear in GPUs for the whole iteration): a
  curve starts linear through the first observed (GPUs, tokens/s) of the component on a GPU type
  and is refined by every later snapshot (recursive least squares); the context then takes these
  curves instead of the estimators' rates. A rollout's curve is the tail curve of the requests still running, recomputed
  by :func:`planner.instances.realloc.build_context` at each snapshot by design, so it is not
  averaged over the iteration. The predictor's error is what ``planner_predictor_error
  {phase="throughput"}`` reports.

With ``--realloc-decision auto`` (the default) or ``completion`` the daemon runs the completion decision
instead (:mod:`planner.daemon.adapters.completion`), this planner being its fallback where no fresh context is
posted; :func:`planner.daemon.adapters.completion.make_reallocator` picks.
Each cycle the loop hands over a job's new snapshots; the adapter feeds all but the last to the
detector and decides at the last with the cluster scenario (so the curves and migration bytes
come from the job's model). State lives in memory: after a restart a donor must hold for ``T``
again (conservative), and the predictor starts again from the estimators.
"""

from __future__ import annotations

from typing import Optional

from planner.daemon.ports import PlanningContext, ReallocOutcome
from planner.schema.scenario import Scenario

STATIC = ("reference", "critic", "reward", "trainer")


class DynaRLReallocator:
    def __init__(self, cluster: Scenario, *, margin: float = 0.05, backend: Optional[str] = None, donor: Optional[dict] = None) -> None:
        from formulation.common import SolveOptions
        from formulation.realloc.decide import ReallocOptions
        from formulation.realloc.donors import DonorConfig

        self.cluster = cluster
        backend = backend or ReallocOptions().backend  # the planner's default solver
        self.options = ReallocOptions(backend=backend, margin=margin, solve=SolveOptions(time_limit_s=1.0, mip_gap=1e-6))
        self.donor_cfg = DonorConfig(**(donor or {}))
        self.detectors: dict = {}
        self.predictors: dict = {}

    def forget(self, job: str) -> None:
        self.detectors.pop(job, None)
        self.predictors.pop(job, None)

    def predictor_error(self) -> Optional[float]:
        errs = [p.report()["curve_mape"] for p in self.predictors.values()]
        errs = [e for e in errs if e is not None]
        return sum(errs) / len(errs) if errs else None

    def observe(self, job: str, snapshots: list) -> None:
        """Feed snapshots without deciding (another decision runs this cycle): the donor detector and the curves
        keep the whole stream."""
        from estimators.predictor import ThroughputPredictor
        from formulation.realloc.donors import DonorDetector

        det = self.detectors.setdefault(job, DonorDetector(self.donor_cfg))
        pred = self.predictors.setdefault(job, ThroughputPredictor())
        for s in snapshots:
            _seed(pred, s)
            pred.observe_snapshot(s)
            det.observe(s)

    def decide(self, ctx: PlanningContext, job: str, snapshots: list) -> ReallocOutcome:
        from estimators.predictor import ThroughputPredictor
        from formulation.realloc.decide import decide
        from formulation.realloc.donors import DonorDetector
        from planner.instances.realloc import build_context

        det = self.detectors.setdefault(job, DonorDetector(self.donor_cfg))
        pred = self.predictors.setdefault(job, ThroughputPredictor())
        scenario = self.cluster.model_copy(update={"jobs": [ctx.jobs[job]]})
        last = snapshots[-1]
        for s in snapshots:
            _seed(pred, s)
            pred.observe_snapshot(s)
            if s is not last:
                det.observe(s)
        rctx = build_context(last, scenario, pred)
        d = decide(last, rctx, self.options, det)
        return ReallocOutcome(job, d.committed, d.reason, [e.component for e in d.donors if e.donor], d.current_throughput,
                              d.predicted_throughput, d.body() if d.committed else {}, d.record.as_dict(),
                              float(d.timings_ms.get("total", 0.0)))


def _seed(pred, snap) -> None:
    """A linear prior through the first observation of each static component on each GPU type."""
    kinds = {c.name: c.kind for c in snap.components}
    seen: dict = {}
    for w in snap.workers:
        if kinds.get(w.component) in STATIC:
            a = seen.setdefault((w.component, w.gpu_type), [0.0, 0.0])
            a[0] += w.gpus
            a[1] += w.tokens_per_s
    for (comp, t), (g, tps) in seen.items():
        if tps > 0 and not pred.has(comp, t):
            pred.set_prior(comp, t, [(g, tps)], linear=True)


def available() -> Optional[str]:
    try:
        import formulation.realloc.decide  # noqa: F401
        import planner.instances.realloc  # noqa: F401
    except ImportError as exc:
        return f"the reallocation planner (formulation.realloc) is not in this build: {exc}"
    return None
