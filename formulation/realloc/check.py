"""Solver-free checker of a reallocation decision. Never imports pyomo, highspy or ortools.

Rules (each violation names one):

* ``choice``          one existing candidate per stage;
* ``capacity``        per pool (node): the GPUs the chosen candidates put there fit it; and per GPU type;
* ``tp_granularity``  every candidate's GPUs on a pool are whole units (engine TP, replica TP x PP),
                      and a unit fits inside one node;
* ``single_type``     a synchronous stage (trainer, critic) runs on one GPU type;
* ``interruptible``   a stage that is not at an interruptible point keeps its allocation;
* ``migration``       the chosen candidate's steps take exactly the current allocation to the new
                      one; stateless stages never use P2P, stateful ones never Workload;
* ``throughput``      the claimed stage and pipeline throughputs equal the ones recomputed here
                      from the curves' breakpoints (own interpolation, not the instance's);
* ``objective``       the claimed objective equals recomputed throughput minus migration cost;
* ``commit``          committed exactly when the objective beats the current pipeline throughput
                      by the margin (strictly).
"""

from __future__ import annotations

from typing import Optional, Sequence

from formulation.common.violation import Violation
from formulation.realloc.instance import Curve, ReallocInstance

STATELESS = {"rollout", "reference", "reward", "tool_agent"}
STATEFUL = {"trainer", "critic"}


def curve_value(curve: Curve, g: float) -> float:
    """f(g) by walking the breakpoints (independent of ``Curve.__call__`` and its segments)."""
    xs = [0.0, *curve.gpus]
    ys = [0.0, *curve.throughput]
    for i in range(1, len(xs)):
        if g <= xs[i]:
            return ys[i - 1] + (ys[i] - ys[i - 1]) * (g - xs[i - 1]) / (xs[i] - xs[i - 1])
    if curve.extrapolate:
        return ys[-1] + (ys[-1] - ys[-2]) / (xs[-1] - xs[-2]) * (g - xs[-1])
    return ys[-1]


def _close(a: float, b: float, rel: float) -> bool:
    return abs(a - b) <= rel * max(1.0, abs(a), abs(b))


def stage_value(inst: ReallocInstance, s: int, c: int, pool_type: Optional[dict] = None) -> float:
    st = inst.stages[s]
    pool_type = pool_type if pool_type is not None else {pl.name: pl.gpu_type for pl in inst.pools}
    by_type: dict[str, float] = {}
    for p, g in st.candidates[c].gpus.items():
        t = pool_type[p]
        by_type[t] = by_type.get(t, 0.0) + g
    return sum(curve_value(st.curves[t], g) for t, g in by_type.items())


def check(inst: ReallocInstance, choice: Sequence[int], *, objective: Optional[float] = None,
          stage_throughput: Optional[Sequence[float]] = None, committed: Optional[bool] = None,
          rel_tol: float = 1e-6) -> list[Violation]:
    out: list[Violation] = []
    if len(choice) != len(inst.stages) or any(not 0 <= c < len(st.candidates) for c, st in zip(choice, inst.stages)):
        return [Violation("choice", "decision", f"need one candidate index per stage ({len(inst.stages)}), got {list(choice)}")]
    pools = {p.name: p for p in inst.pools}
    use: dict[str, int] = {}
    for s, c in enumerate(choice):
        st, cand = inst.stages[s], inst.stages[s].candidates[c]
        for p, g in cand.gpus.items():
            use[p] = use.get(p, 0) + g
            if g % st.unit_gpus:
                out.append(Violation("tp_granularity", f"{st.name}/{cand.name}", f"{g} GPUs on {p} is not a multiple of {st.unit_gpus}"))
            if st.unit_gpus > pools[p].gpus and g:
                out.append(Violation("tp_granularity", f"{st.name}/{cand.name}", f"a unit of {st.unit_gpus} GPUs does not fit node {p}"))
        types = {pools[p].gpu_type for p, g in cand.gpus.items() if g > 0}
        if st.single_type and len(types) > 1:
            out.append(Violation("single_type", f"{st.name}/{cand.name}", f"synchronous stage on several GPU types {sorted(types)}"))
        cur = {p: g for p, g in st.current.gpus.items() if g}
        new = {p: g for p, g in cand.gpus.items() if g}
        if not st.interruptible and cur != new:
            out.append(Violation("interruptible", st.name, "moved although not at an interruptible point"))
        out += _check_moves(st, cand, cur, new)
    per_type_use: dict[str, int] = {}
    per_type_cap: dict[str, int] = {}
    for p in inst.pools:
        per_type_cap[p.gpu_type] = per_type_cap.get(p.gpu_type, 0) + p.gpus
    for p, v in use.items():
        if v > pools[p].gpus:
            out.append(Violation("capacity", f"node {p} ({pools[p].gpu_type})", f"{v} GPUs assigned, it has {pools[p].gpus}"))
        per_type_use[pools[p].gpu_type] = per_type_use.get(pools[p].gpu_type, 0) + v
    for t, v in per_type_use.items():
        if v > per_type_cap[t]:
            out.append(Violation("capacity", f"GPU type {t}", f"{v} GPUs assigned, {per_type_cap[t]} exist"))
    pool_type = {p.name: p.gpu_type for p in inst.pools}
    thr = [stage_value(inst, s, c, pool_type) for s, c in enumerate(choice)]
    if stage_throughput is not None:
        for s, (a, b) in enumerate(zip(stage_throughput, thr)):
            if not _close(a, b, rel_tol):
                out.append(Violation("throughput", inst.stages[s].name, f"claimed {a:.6g}, recomputed {b:.6g}"))
    pipe = [s for s, st in enumerate(inst.stages) if st.pipeline]
    value = min(thr[s] for s in pipe) - sum(inst.stages[s].candidates[c].migration_cost for s, c in enumerate(choice))
    if objective is not None and not _close(objective, value, rel_tol):
        out.append(Violation("objective", "decision", f"claimed {objective:.6g}, recomputed {value:.6g}"))
    if committed is not None:
        current = min(stage_value(inst, s, 0, pool_type) for s in pipe)
        should = value > current * (1.0 + inst.margin) and any(c != 0 for c in choice)
        if bool(committed) != should:
            out.append(Violation("commit", "decision", f"committed={committed}, but objective {value:.6g} vs current {current:.6g} "
                                                       f"with margin {inst.margin:g} says {should}"))
    return out


def _check_moves(st, cand, cur: dict, new: dict) -> list[Violation]:
    out = []
    reached = dict(cur)
    for m in cand.moves:
        if reached.get(m.pool, 0) != m.gpus_from:
            out.append(Violation("migration", f"{st.name}/{cand.name}", f"step on {m.pool} starts from {m.gpus_from} GPUs, "
                                                                      f"the component holds {reached.get(m.pool, 0)} there"))
        reached[m.pool] = m.gpus_to
        if st.kind in STATELESS and m.kind == "p2p":
            out.append(Violation("migration", f"{st.name}/{cand.name}", "P2P migration for a stateless component"))
        if st.kind in STATEFUL and m.kind == "workload":
            out.append(Violation("migration", f"{st.name}/{cand.name}", "Workload migration for a stateful component"))
        if m.duration_s < 0 or m.bytes_moved < 0:
            out.append(Violation("migration", f"{st.name}/{cand.name}", "negative duration or bytes"))
    reached = {p: g for p, g in reached.items() if g}
    if reached != new:
        out.append(Violation("migration", f"{st.name}/{cand.name}", f"steps reach {reached}, the candidate is {new}"))
    return out
