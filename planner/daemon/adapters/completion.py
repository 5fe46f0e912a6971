"""The completion decision (what ``planner simulate --policy dynamic`` runs) behind the daemon's reallocation seam.

Glue only; the decision is :class:`planner.instances.completion.CompletionPlannerDecision`'s, made through
:mod:`planner.instances.completion_io` exactly as ``planner realloc --decision completion`` makes it: per running
job the adapter keeps one ``make_decision(setup, scenario)`` (the set-up of
:func:`planner.instances.simulate.job_setup` for the job's spec on the cluster), feeds it every snapshot in order
(its tail trigger needs the stream) and, when the job's posted reallocation context
(``POST /v1/jobs/{name}/realloc-context``, :meth:`planner.daemon.store.Store.realloc_context`) is *fresh* for the
last snapshot of the cycle, decides there with :func:`~planner.instances.completion_io.decide_stream`.

Fresh: the context is of the snapshot's iteration, not newer than the snapshot (it is used with the telemetry that
reaches it) and at most ``max_age_s`` job seconds older. Otherwise, with ``mode="auto"``, the min-over-stages planner
(:class:`planner.daemon.adapters.realloc.DynaRLReallocator`, fed every snapshot either way) decides, and its reason
says why the completion decision did not; with ``mode="completion"`` there is no decision.

A committed completion target is GPUs per component (rollout, reference, trainer). :func:`plan_body` turns it into a
``ReallocPlan`` body the executor applies: the realloc instance of the snapshot (``build_graph``, ``build_instance``:
every stage's current allocation, curves and horizon), one joint allocation that reaches the target on the nodes
(:func:`joint_allocation`: the shrinking components release workers in the planner's release order, the growing
ones take whole units on the GPUs then free; per stage candidates picked independently would compete for the same
GPUs), each component's migration planned by :class:`formulation.realloc.migrations.MigrationPlanner`, the whole
checked by the solver-free checker (:mod:`formulation.realloc.check`: capacity, TP units, single type, migration
steps), then :func:`formulation.realloc.plan.decision_body`. The body's reason and notes, and the outcome's solver record, say it
is the completion decision and carry the predicted completion times (kept and chosen) and the min-over-stages proxy.
"""

from __future__ import annotations

import time
from typing import Any, Callable, Optional, Sequence

from planner.daemon.ports import PlanningContext, ReallocOutcome
from planner.schema.scenario import Scenario

ROLES = ("rollout", "reference", "trainer")


def _plain(v: Any) -> Any:
    """JSON-ready copy (numpy scalars and tuples as Python numbers and lists)."""
    if isinstance(v, dict):
        return {str(k): _plain(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [_plain(x) for x in v]
    if hasattr(v, "item") and callable(v.item):
        return v.item()
    return v


def _summary(rec: dict) -> str:
    cur, tgt = rec["current"], rec["target"]
    return (f"rollout+reference+trainer {cur[0]}+{cur[1]}+{cur[2]} -> {tgt[0]}+{tgt[1]}+{tgt[2]} GPUs; predicted completion "
            f"{rec['completion_keep_s']:.1f} s if kept, {rec['completion_s']:.1f} s chosen; min-over-stages proxy "
            f"{rec['proxy_keep']:.4g} -> {rec['proxy']:.4g} per s")


def _roles(graph) -> dict[str, str]:
    """Role -> the snapshot's component of that kind (exactly one each)."""
    out = {}
    for role in ROLES:
        names = [n.name for n in graph.nodes.values() if n.kind == role]
        if len(names) != 1:
            raise ValueError(f"the snapshot has {len(names)} {role} components; the completion decision moves exactly one of each")
        out[role] = names[0]
    return out


def joint_allocation(graph, rctx, want: dict[str, int]) -> dict[str, dict[str, int]]:
    """Component -> GPUs per node that reach ``want`` (component -> GPUs) together, as close as the nodes allow: the
    components that shrink release whole workers in the planner's release order (:mod:`formulation.realloc.candidates`);
    those that grow take whole units (an engine's TP, a trainer replica's TP x PP) inside one node on the GPUs then
    free (the trainer first: its units are the largest), nodes they already use first, then the emptiest; a
    synchronous component stays on its GPU type. What fragmentation leaves of the released GPUs goes to log-prob
    inference, as the simulator does (``Reallocation.fill``)."""
    from formulation.realloc.candidates import _release_order
    from formulation.realloc.graph import SYNCHRONOUS_KINDS

    pools = {p.name: p for p in rctx.pools}
    alloc = {n: dict(graph.nodes[n].gpus_by_node()) for n in graph.nodes}
    for n, w in want.items():
        total = sum(alloc[n].values())
        for wk in _release_order(graph.nodes[n]):
            if total - wk.gpus < w:
                continue
            alloc[n][wk.node] -= wk.gpus
            total -= wk.gpus
    free = {p: pools[p].gpus - sum(a.get(p, 0) for a in alloc.values()) for p in pools}

    def grow(n: str, need: int) -> int:
        node, ctx = graph.nodes[n], rctx.components[n]
        unit = max(1, ctx.unit_gpus)
        mine = {pools[p].gpu_type for p, g in alloc[n].items() if g > 0}
        types = set(ctx.types())
        if node.kind in SYNCHRONOUS_KINDS and mine:
            types &= mine
        order = sorted((p for p in pools if pools[p].gpu_type in types),
                       key=lambda p: (alloc[n].get(p, 0) == 0, -free[p], p))
        got = 0
        for p in order:
            k = min((need - got) // unit, free[p] // unit)
            if k > 0:
                alloc[n][p] = alloc[n].get(p, 0) + k * unit
                free[p] -= k * unit
                got += k * unit
        return got

    kinds = {n: graph.nodes[n].kind for n in want}
    growing = sorted((n for n in want if want[n] > sum(alloc[n].values())),
                     key=lambda n: (-max(1, rctx.components[n].unit_gpus), kinds[n] != "trainer", n))
    short = 0
    for n in growing:
        need = want[n] - sum(alloc[n].values())
        short += need - grow(n, need)
    ref = next((n for n in want if kinds[n] == "reference"), None)
    if short > 0 and ref is not None:
        grow(ref, short)
    return {n: {p: g for p, g in a.items() if g > 0} for n, a in alloc.items()}


def plan_body(snapshot, scenario: Optional[Scenario], target: dict, *, reason: str, notes: Sequence[str] = (),
              margin: float = 0.05, predictor=None) -> tuple[Optional[dict], dict, str]:
    """The ``ReallocPlan`` body that takes the snapshot's allocation to ``target`` (role -> GPUs), or as close as the
    nodes allow (:func:`joint_allocation`), checked by the solver-free checker: (the body, or None when nothing moves
    or the checker refuses; role -> GPUs the body gives; how it was placed)."""
    from formulation.common import SolveRecord, SolveStatus
    from formulation.realloc import check as checker
    from formulation.realloc.candidates import _capacity, build_instance
    from formulation.realloc.decide import Decision
    from formulation.realloc.graph import build_graph
    from formulation.realloc.instance import Candidate, ReallocInstance, Stage
    from formulation.realloc.migrations import MigrationPlanner, charged_seconds
    from formulation.realloc.plan import decision_body
    from planner.instances.realloc import build_context

    t0 = time.perf_counter()
    graph = build_graph(snapshot)
    names = _roles(graph)
    want = {names[r]: int(target[r]) for r in ROLES}
    rctx = build_context(snapshot, scenario, predictor)
    held = {n: sum(graph.nodes[n].gpus_by_node().values()) for n in want}
    stuck = [n for n in want if want[n] != held[n] and not graph.nodes[n].interruptible]
    if stuck:
        # the target was chosen with every component moving: moving the others alone would drain GPUs for a
        # component that cannot take them yet (or take GPUs one cannot give), leaving them owned by no one
        return None, {r: held[names[r]] for r in ROLES}, (
            f"{', '.join(stuck)} {'is' if len(stuck) == 1 else 'are'} not at an interruptible point (interruptible: false); "
            "the move waits for one")
    shrinking = [n for n in want if want[n] < held[n]]
    base = build_instance(graph, rctx, shrinking, max_candidates=1, margin=margin)  # every stage's current allocation, curves
    new = joint_allocation(graph, rctx, want)
    pools = {p.name: p for p in rctx.pools}
    t_now = base.current_throughput()
    stages = []
    for st in base.stages:
        node, ctx = graph.nodes[st.name], rctx.components[st.name]
        current = {p: g for p, g in st.current.gpus.items() if g}
        alloc = new.get(st.name, current)
        cands = [Candidate("keep", dict(current), cause=st.current.cause)]
        if st.name in want and alloc != current and node.interruptible:
            mp = MigrationPlanner(node.name, node.kind, ctx, current, node.workers, pools, rctx.links).plan(alloc)
            lost = charged_seconds([mp.kind], [mp.duration_s], _capacity(ctx, pools, [current]), _capacity(ctx, pools, [alloc]),
                                   [any(v > current.get(p, 0) for p, v in alloc.items())],
                                   [any(v > alloc.get(p, 0) for p, v in current.items())], rctx.links)
            cands.append(Candidate(f"completion-{sum(alloc.values())}", dict(alloc), mp.duration_s, mp.bytes_moved,
                                   float(t_now * lost[0] / base.horizon_s), mp.kind, tuple(mp.moves), mp.cause))
        stages.append(Stage(st.name, st.kind, st.dynamic, st.interruptible, st.curves, cands, unit_gpus=st.unit_gpus,
                            single_type=st.single_type, donor=st.donor, pipeline=st.pipeline, curve_source=st.curve_source))
    inst = ReallocInstance(base.pools, stages, margin=margin, horizon_s=base.horizon_s, job=base.job, time_s=base.time_s,
                           notes=list(base.notes), unit=base.unit)
    choice = [len(st.candidates) - 1 for st in stages]
    at = {st.name: s for s, st in enumerate(stages)}
    placed = {r: stages[at[names[r]]].candidates[choice[at[names[r]]]].total_gpus for r in ROLES}
    if not any(choice):
        return None, placed, "the nodes hold no move towards the target (the current allocation is the closest)"
    bad = checker.check(inst, choice)
    if bad:
        return None, placed, "the checker refuses the placement: " + "; ".join(str(v) for v in bad[:5])
    exact = placed == {r: int(target[r]) for r in ROLES}
    how = ("the target exactly" if exact else
           f"the closest allocation the nodes hold: {placed['rollout']}+{placed['reference']}+{placed['trainer']} GPUs")
    rec = SolveRecord("completion", SolveStatus.OPTIMAL if exact else SolveStatus.FEASIBLE,
                      message=f"placement of the completion target: {how}")
    thr = [inst.stage_throughput(s, c) for s, c in enumerate(choice)]
    dec = Decision(graph.job, graph.time_s, graph.iteration, [], graph, inst, choice, rec, inst.current_throughput(),
                   inst.pipeline_throughput(choice), inst.objective(choice), thr, True, f"{reason}; placed: {how}",
                   [], {"total": (time.perf_counter() - t0) * 1e3})
    body = decision_body(dec)
    body["notes"] = [*notes, f"placed: {how}", *body["notes"]]
    return body, placed, how


class CompletionReallocator:
    """The completion decision per job, with the min-over-stages planner as the fallback (see the module docstring)."""

    def __init__(self, cluster: Scenario, contexts: Callable[[str], Optional[dict]], *, mode: str = "auto", max_age_s: float = 30.0,
                 fallback=None, knobs: Optional[dict] = None) -> None:
        from planner.daemon.adapters.realloc import DynaRLReallocator

        if mode not in ("auto", "completion"):
            raise ValueError(f"mode: {mode!r} is not 'auto' or 'completion'")
        self.cluster, self.contexts, self.mode, self.max_age_s = cluster, contexts, mode, max_age_s
        self.fallback = fallback if fallback is not None else DynaRLReallocator(cluster)
        self.knobs = dict(knobs or {})  # CompletionPlannerDecision's (u_low, window_s, theta, margin): its defaults otherwise
        self.decisions: dict[str, Any] = {}
        self.scenarios: dict[str, Scenario] = {}
        self.unusable: dict[str, str] = {}  # job -> why it has no completion decision (its set-up failed)

    def forget(self, job: str) -> None:
        self.decisions.pop(job, None)
        self.scenarios.pop(job, None)
        self.unusable.pop(job, None)
        self.fallback.forget(job)

    def predictor_error(self) -> Optional[float]:
        return self.fallback.predictor_error()

    # ------------------------------------------------------------------ the decision
    def _decision(self, ctx: PlanningContext, job: str):
        if job in self.decisions:
            return self.decisions[job]
        if job in self.unusable:
            return None
        from planner.errors import UserError
        from planner.instances.completion_io import make_decision
        from planner.instances.simulate import cluster_view, job_setup

        spec = ctx.jobs[job]
        sc = self.cluster.model_copy(update={"jobs": [spec]})
        try:
            setup = job_setup(sc, 0, spec, cluster_view(sc))
        except UserError as exc:
            self.unusable[job] = f"the job has no set-up for the completion decision ({exc.render()})"
            return None
        except Exception as exc:  # noqa: BLE001 - any job the set-up cannot model keeps the fallback, said once per job
            self.unusable[job] = f"the job has no set-up for the completion decision ({type(exc).__name__}: {exc})"
            return None
        self.scenarios[job] = sc
        self.decisions[job] = make_decision(setup, sc, **self.knobs)
        return self.decisions[job]

    def _fresh(self, stored: Optional[dict], last, total_gpus: int, setup=None):
        """(the context to decide with, or None; why not)."""
        from planner.instances.completion_io import ContextError, check_against_setup, context_from_data

        if stored is None:
            return None, "no reallocation context posted for the job"
        if stored["iteration"] != last.iteration:
            return None, f"the posted context is of iteration {stored['iteration']}, the telemetry of iteration {last.iteration}"
        if stored["time_s"] > last.time_s + 1e-9:
            return None, (f"the posted context (t={stored['time_s']:g} s) is newer than the last snapshot (t={last.time_s:g} s); "
                          "it is used with the telemetry that reaches it")
        if last.time_s - stored["time_s"] > self.max_age_s:
            return None, (f"the posted context is stale: t={stored['time_s']:g} s, {last.time_s - stored['time_s']:g} s before the "
                          f"last snapshot (limit {self.max_age_s:g} s)")
        try:
            cctx = context_from_data(stored["data"])
        except ContextError as exc:  # validated when posted: only a context written by another release
            return None, f"the posted context cannot be used: {exc}"
        if cctx.total_gpus != total_gpus:
            return None, f"the posted context has {cctx.total_gpus} GPUs in all, the job's set-up {total_gpus}"
        if setup is not None:
            try:
                check_against_setup(cctx, setup)  # (as `planner realloc --decision completion` does)
            except ContextError as exc:
                return None, f"the posted context does not fit the job's set-up: {exc}; {exc.fix}"
        return cctx, ""

    def decide(self, ctx: PlanningContext, job: str, snapshots: list) -> ReallocOutcome:
        from planner.instances.completion_io import decide_stream

        last = snapshots[-1]
        dec = self._decision(ctx, job)
        if dec is None:
            cctx, why = None, self.unusable[job]
        else:
            cctx, why = self._fresh(self.contexts(job), last, int(dec.setup.total_gpus), dec.setup)
        if cctx is None:
            if dec is not None:
                for s in snapshots:  # the trigger keeps the stream whichever decision runs
                    dec.detector.observe(s)
            if self.mode == "completion":
                return ReallocOutcome(job, False, f"completion decision: no decision ({why})", [], 0.0, 0.0, {},
                                      {"backend": "completion", "decision": "completion", "used": False, "why": why}, 0.0)
            out = self.fallback.decide(ctx, job, snapshots)
            out.reason = f"min-over-stages planner (not the completion decision: {why}): {out.reason}"
            out.solver = dict(out.solver, decision="planner", fallback=why)
            return out
        self.fallback.observe(job, snapshots)  # its donor detector keeps the stream too
        t0 = time.perf_counter()
        move, rec = decide_stream(dec, snapshots, cctx)
        ms = (time.perf_counter() - t0) * 1e3
        solver: dict[str, Any] = {"backend": "completion", "decision": "completion", "used": True,
                                  "context": {"iteration": cctx.iteration, "time_s": cctx.time_s}}
        if rec is None:
            return ReallocOutcome(job, False, "completion decision: the tail trigger has not fired", [], 0.0, 0.0, {}, solver, ms)
        from planner.instances.completion_io import ContextError, check_record

        try:
            check_record(rec)  # a prediction that is not a finite time moves nothing and is not logged as one
        except ContextError as exc:
            solver["refused"] = exc.message
            return ReallocOutcome(job, False, f"completion decision: no decision ({exc.message}; {exc.fix})", [], 0.0, 0.0, {},
                                  solver, ms)
        rec = _plain(rec)
        solver["record"] = rec
        names = {c.kind: c.name for c in last.components}
        keep_thr, thr = 1.0 / max(rec["completion_keep_s"], 1e-9), 1.0 / max(rec["completion_s"], 1e-9)
        if move is None:
            return ReallocOutcome(job, False, f"completion decision, not committed: {rec['reason']} ({_summary(rec)})",
                                  [names.get("rollout", "rollout")], keep_thr, thr, {}, solver, ms)
        target = {r: int(move.target[r]) for r in ROLES}
        solver["target"] = target
        reason = f"completion decision, committed: {rec['reason']} ({_summary(rec)})"
        try:
            body, placed, how = plan_body(last, self.scenarios[job], target, reason=reason, margin=float(dec.margin),
                                          notes=[f"completion decision: {_summary(rec)}"],
                                          predictor=self.fallback.predictors.get(job))
        except ValueError as exc:
            body, placed, how = None, {}, str(exc)
        solver["placed"] = placed
        solver["placement"] = how
        ms = (time.perf_counter() - t0) * 1e3
        cur = rec["current"]
        shrunk = [names.get(r, r) for r, c in zip(ROLES, cur) if target[r] < c] or [names.get("rollout", "rollout")]
        if body is None:
            return ReallocOutcome(job, False, f"{reason}; not applied: {how}", shrunk, keep_thr, thr, {}, solver, ms)
        return ReallocOutcome(job, True, f"{reason}; placed: {how}", shrunk, keep_thr, thr, body, solver, ms)


def make_reallocator(cluster: Scenario, decision: str, contexts: Callable[[str], Optional[dict]], *, max_age_s: float = 30.0):
    """The daemon's reallocator for ``--realloc-decision``: ``planner`` (:mod:`planner.daemon.adapters.realloc`'s), ``completion`` or ``auto``
    (:class:`CompletionReallocator`, reading the posted contexts via ``contexts``)."""
    if decision == "planner":
        from planner.daemon.adapters.realloc import DynaRLReallocator

        return DynaRLReallocator(cluster)
    return CompletionReallocator(cluster, contexts, mode=decision, max_age_s=max_age_s)
