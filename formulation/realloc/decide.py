"""The reallocation decision as one in-process call, with no file I/O.

``decide(snapshot, context, options, detector) -> Decision``: build the component graph, feed the
donor detector, generate candidates (the numbers-only instance), solve with the chosen backend
(``bnb``: exact branch and bound; ``highs``: highspy directly; ``cpsat``; ``dp``: the exact single-pool program; ``pyomo``: the
Pyomo reference), check the answer with the solver-free checker, and commit only when the
objective beats the current pipeline throughput by ``margin``.

``bnb`` (:mod:`formulation.realloc.bnb`, exact branch and bound on the bottleneck level) is the
default: it is exact and the fastest on the benchmark (``results/realloc/latency.md``); when it
stops at its node or time budget, HiGHS finishes the decision. The simulator calls it in its
dynamic-reallocation policy, the daemon per telemetry post, ``planner realloc`` once per file.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field, replace
from typing import Optional

from formulation.common import SolveOptions, SolveRecord, SolveStatus
from formulation.realloc import check as checker
from formulation.realloc.candidates import DEFAULT_MAX_CANDIDATES, GENERATORS, build_instance
from formulation.realloc.context import ReallocContext
from formulation.realloc.donors import DonorDetector, DonorEvidence
from formulation.realloc.graph import ComponentGraph, build_graph
from formulation.realloc.instance import ReallocInstance, Solution
from formulation.realloc.migrations import drain_order
from formulation.realloc.telemetry import TelemetrySnapshot

BACKENDS = ("bnb", "highs", "cpsat", "dp", "pyomo")
FINISHED_REASON = ("nothing to reallocate: every component has finished its work this iteration (progress 1 or no "
                   "remaining work); the allocation is kept")


def solve_instance(inst: ReallocInstance, backend: str = "highs", options: SolveOptions | None = None,
                   reduce: bool | None = None) -> tuple[Solution, SolveRecord]:
    """One interface over the backends. The model backends solve the exactly reduced instance
    (:mod:`formulation.realloc.reduce`; ``reduce=False`` to skip); the DP oracle never does."""
    if reduce is None:
        reduce = backend in ("bnb", "highs", "cpsat", "pyomo")
    if reduce:
        from formulation.realloc.reduce import expand
        from formulation.realloc.reduce import reduce as reduce_instance

        red, keep = reduce_instance(inst)
        opts = options or SolveOptions()
        if opts.warm_start:
            back = [{orig: i for i, orig in enumerate(k)} for k in keep]
            opts = replace(opts, warm_start=[back[s].get(c, 0) for s, c in enumerate(opts.warm_start)])
        sol, rec = solve_instance(red, backend, opts, reduce=False)
        full = sum(len(st.candidates) for st in inst.stages)
        rec.message += f"; exact reduction kept {sum(len(k) for k in keep)} of {full} candidates"
        return Solution(expand(sol.choice, keep), sol.objective, sol.best_bound), rec
    if backend == "bnb":
        from formulation.realloc import bnb
        opts = options or SolveOptions()
        sol, rec = bnb.solve(inst, opts)
        if rec.status is SolveStatus.FEASIBLE or rec.status is SolveStatus.NOT_SOLVED:
            from formulation.realloc import milp
            # past the search's budget: HiGHS finishes the decision in the time left
            sol, hrec = milp.solve(inst, replace(opts, time_limit_s=max(0.05, opts.time_limit_s - rec.wall_time_s)))
            hrec.message = f"{rec.message}; finished by {hrec.message}"
            hrec.backend = "bnb+highs"
            hrec.wall_time_s += rec.wall_time_s
            rec = hrec
        return sol, rec
    if backend == "highs":
        from formulation.realloc import milp
        return milp.solve(inst, options)
    if backend == "cpsat":
        from formulation.realloc import cpsat
        return cpsat.solve(inst, options)
    if backend == "dp":
        from formulation.realloc import dp
        return dp.solve(inst, options)
    if backend == "pyomo":
        from formulation.realloc import milp
        return milp.solve_pyomo(inst, options)
    raise ValueError(f"unknown backend {backend!r}: use one of {', '.join(BACKENDS)}")


@dataclass
class ReallocOptions:
    backend: str = "bnb"
    margin: float = 0.05  # commit only when objective > (1 + margin) x current throughput
    max_candidates: int = DEFAULT_MAX_CANDIDATES  # per component, including the current allocation
    require_donor: bool = True  # decide only when a donor is detected (DynaRL's trigger)
    generator: str = "numpy"  # candidate generator: numpy, or python (the reference it is tested against)
    solve: SolveOptions = field(default_factory=lambda: SolveOptions(time_limit_s=1.0, mip_gap=1e-6))

    def __post_init__(self) -> None:
        if self.backend not in BACKENDS:
            raise ValueError(f"unknown backend {self.backend!r}: use one of {', '.join(BACKENDS)}")
        if self.margin < 0:
            raise ValueError(f"margin must be >= 0, got {self.margin}")
        if self.max_candidates < 1:
            raise ValueError(f"max_candidates must be >= 1, got {self.max_candidates}")
        if self.generator not in GENERATORS:
            raise ValueError(f"unknown candidate generator {self.generator!r}: use one of {', '.join(GENERATORS)}")


@dataclass
class Decision:
    job: str
    time_s: float
    iteration: int
    donors: list[DonorEvidence]
    graph: ComponentGraph
    instance: Optional[ReallocInstance]
    choice: list[int]
    record: SolveRecord
    current_throughput: float
    predicted_throughput: float
    objective: float
    stage_throughput: list[float]
    committed: bool
    reason: str
    violations: list = field(default_factory=list)
    timings_ms: dict = field(default_factory=dict)

    def changed(self) -> list[int]:
        """Indices of the stages whose chosen candidate is not their current allocation."""
        return [s for s, c in enumerate(self.choice) if c != 0]

    def body(self) -> dict:
        """The ``ReallocPlan`` body (validated by :class:`formulation.realloc.plan.ReallocPlan`)."""
        from formulation.realloc.plan import decision_body

        return decision_body(self)


def decide(snapshot: TelemetrySnapshot | dict, context: ReallocContext, options: ReallocOptions | None = None,
           detector: DonorDetector | None = None) -> Decision:
    """Decide whether and how to reallocate GPUs now. ``detector`` carries the job's donor history."""
    opts = options or ReallocOptions()
    t0 = time.perf_counter()
    timings: dict[str, float] = {}
    snap = snapshot if isinstance(snapshot, TelemetrySnapshot) else TelemetrySnapshot.model_validate(snapshot)
    graph = build_graph(snap)
    det = detector if detector is not None else DonorDetector()
    evidence = det.observe(snap)
    donors = [e.component for e in evidence if e.donor and graph.nodes[e.component].interruptible]
    t1 = time.perf_counter()
    timings["graph_and_donors"] = (t1 - t0) * 1e3
    comps = [context.components.get(n) for n in graph.nodes]
    if comps and all(c is not None and not c.pipeline for c in comps):
        # every component's work this iteration is done: there is no bottleneck to relieve
        inst = build_instance(graph, context, [], max_candidates=1, margin=opts.margin, generator=opts.generator, finished=True)
        rec = SolveRecord("none", SolveStatus.NOT_SOLVED, None, None, 0.0, None, None,
                          "nothing to decide: every component has finished")
        timings["total"] = (time.perf_counter() - t0) * 1e3
        thr = [inst.stage_throughput(s, 0) for s in range(len(inst.stages))]
        return Decision(graph.job, graph.time_s, graph.iteration, evidence, graph, inst, [0] * len(inst.stages), rec, 0.0, 0.0,
                        0.0, thr, False, FINISHED_REASON, [], timings)
    if opts.require_donor and not donors:
        inst = build_instance(graph, context, [], max_candidates=1, margin=opts.margin, generator=opts.generator)
        waiting = [e for e in evidence if e.donor]  # donors by their evidence, none at an interruptible point
        if waiting:
            names = ", ".join(e.component for e in waiting)
            why = "; ".join(f"{e.component}: {e.cause}" for e in waiting)
            rec = SolveRecord("none", SolveStatus.NOT_SOLVED, None, None, 0.0, None, None,
                              "no trigger: no donor at an interruptible point")
            return _keep(graph, evidence, inst, rec, f"no donor can give now: {names} {'is a donor' if len(waiting) == 1 else 'are donors'} "
                         f"({why}) but not at an interruptible point (interruptible: false); a migration waits for one",
                         t0, timings)
        why = "; ".join(e.cause for e in evidence) or "no component of a judged kind"
        rec = SolveRecord("none", SolveStatus.NOT_SOLVED, None, None, 0.0, None, None, "no trigger: no donor detected")
        return _keep(graph, evidence, inst, rec, f"no donor detected: {why}", t0, timings)
    inst = build_instance(graph, context, donors, max_candidates=opts.max_candidates, margin=opts.margin, generator=opts.generator)
    t2 = time.perf_counter()
    timings["candidates"] = (t2 - t1) * 1e3
    sol, rec = solve_instance(inst, opts.backend, opts.solve)
    t3 = time.perf_counter()
    timings["build_and_solve"] = (t3 - t2) * 1e3
    current = inst.current_throughput()
    if not rec.status.has_solution:
        return _keep(graph, evidence, inst, rec, f"kept the current allocation: the {rec.backend} solve ended "
                                                 f"{rec.status.value} ({rec.message})", t0, timings)
    choice = list(sol.choice)
    table = inst.throughput_table()  # computed by the solve: the same numbers as inst.stage_throughput
    thr = [table[s][c] for s, c in enumerate(choice)]
    obj = inst.objective(choice)
    pipe_thr = inst.pipeline_throughput(choice)
    moved = any(c != 0 for c in choice)
    if not moved:
        reason = f"kept: the current allocation is the best candidate combination ({current:.6g} per s)"
        commit = False
    elif obj > current * (1.0 + inst.margin):
        reason = (f"committed: predicted {pipe_thr:.6g} per s minus migration cost {pipe_thr - obj:.6g} = {obj:.6g}, "
                  f"{obj / current if current > 0 else float('inf'):.3f}x the current {current:.6g} (margin {inst.margin:.0%})")
        commit = True
    else:
        reason = (f"not committed: best objective {obj:.6g} per s does not beat the current {current:.6g} by the "
                  f"margin {inst.margin:.0%}")
        commit = False
    violations = checker.check(inst, choice, objective=obj, stage_throughput=thr, committed=commit)
    if violations:
        commit = False
        reason = "not committed: the checker rejected the decision: " + "; ".join(str(v) for v in violations)
    timings["total"] = (time.perf_counter() - t0) * 1e3
    return Decision(graph.job, graph.time_s, graph.iteration, evidence, graph, inst, choice, rec, current, pipe_thr, obj, thr,
                    commit, reason, violations, timings)


def _keep(graph, evidence, inst, rec, reason, t0, timings) -> Decision:
    timings["total"] = (time.perf_counter() - t0) * 1e3
    current = inst.current_throughput()
    thr = [inst.stage_throughput(s, 0) for s in range(len(inst.stages))]
    return Decision(graph.job, graph.time_s, graph.iteration, evidence, graph, inst, [0] * len(inst.stages), rec, current, current,
                    current, thr, False, reason, [], timings)


__all__ = ["BACKENDS", "FINISHED_REASON", "Decision", "ReallocOptions", "decide", "drain_order", "solve_instance"]
