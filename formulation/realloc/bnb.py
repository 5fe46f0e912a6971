"""Exact branch and bound on the bottleneck level: the default backend for the reallocation decision.

The objective ``min_{s in pipeline} F_{s,c_s} − Σ_s m_{s,c_s}`` is a max-min over per-stage tables
(each stage's candidates are its separable, concave curve sampled at the candidate's GPUs) minus
additive costs, under pool capacities. Fix the bottleneck level ``τ``: every choice whose pipeline
stages all reach ``τ`` is worth at least ``τ`` minus its cost, and the optimal choice's own minimum
is one of the table's values (the threshold argument of :mod:`formulation.realloc.dp`). So an
upper bound on any completion of a partial choice is

    ``max_{τ <= τ_0} [ τ − cost so far − Σ_{s remaining} min{ m_{s,c} : F_{s,c} >= τ, c fits } ]``

where ``τ_0`` is the smallest throughput fixed so far and "``c`` fits" means that candidate ``c``
fits the pools next to what is fixed and the least every other remaining stage must hold. The
search fixes one stage at a time (stages with few candidates first, donors last: their shrinks
are what the receivers' grows compete for), tries each stage's candidates in decreasing bound and
prunes every branch whose bound does not beat the incumbent (the current allocation, when it
fits). The bound is evaluated for all candidates of a stage at once (numpy, over a grid of the
table's values), and the last stage is scored in one vector operation.

Exact: a branch is cut only when no completion can beat the incumbent by more than a relative
``1e-12``; the answer is re-scored by the instance. A node budget (and the time limit) bound
the worst case: past it the status is ``feasible`` (the best choice found so far) and
:func:`formulation.realloc.decide.solve_instance` finishes with HiGHS. Tested against the DP,
exhaustive enumeration, HiGHS and CP-SAT (``tests/realloc/test_solvers.py``).
"""

from __future__ import annotations

import time

import numpy as np

from formulation.common import SolveOptions, SolveRecord, SolveStatus
from formulation.realloc.instance import ReallocInstance, Solution

NODE_LIMIT = 5_000  # about a quarter of a second on the benchmark machine; the benchmark's searches take under 200
REL_TOL = 1e-12


class _Limit(Exception):
    pass


def search_order(inst: ReallocInstance) -> list[int]:
    """Stages in the order the search fixes them: non-donors before donors, fewer candidates first."""
    return sorted(range(len(inst.stages)), key=lambda s: (inst.stages[s].donor, len(inst.stages[s].candidates), s))


def solve(inst: ReallocInstance, options: SolveOptions | None = None, node_limit: int | None = None) -> tuple[Solution, SolveRecord]:
    opts = options or SolveOptions()
    node_limit = NODE_LIMIT if node_limit is None else node_limit
    t0 = time.perf_counter()
    deadline = t0 + float(opts.time_limit_s)
    arr = inst.arrays()
    thr = inst.throughput_arrays()
    S = len(inst.stages)
    pipe = [st.pipeline for st in inst.stages]
    used = np.zeros(len(arr.cap), dtype=bool)
    for g in arr.gpus:
        used |= g.any(axis=0)
    cols = np.nonzero(used)[0]  # pools no candidate uses cannot constrain anything
    cap = arr.cap[cols]
    top = min(float(thr[s].max()) for s in range(S) if pipe[s])  # no choice's bottleneck exceeds it
    order = search_order(inst)
    F = [np.minimum(thr[s], top) if pipe[s] else np.full(len(thr[s]), np.inf) for s in order]
    M = [arr.cost[s] for s in order]
    G = [arr.gpus[s][:, cols] for s in order]
    taus = np.unique(np.concatenate([F[k] for k in range(S) if pipe[order[k]]]))  # ascending
    by_f = [np.argsort(f, kind="stable") for f in F]
    first = [np.searchsorted(f[o], taus, side="left") for f, o in zip(F, by_f)]  # first candidate reaching each tau
    # in throughput order, with a sentinel (fits anywhere, costs inf) for levels no candidate reaches
    G_by_f = [np.vstack([g[o], np.zeros((1, len(cols)), dtype=g.dtype)]) for g, o in zip(G, by_f)]
    M_by_f = [np.append(m[o], np.inf) for m, o in zip(M, by_f)]
    least = [g.min(axis=0) for g in G]
    rest = [np.zeros(len(cols), dtype=np.int64) for _ in range(S + 1)]  # least GPUs stages k.. must hold
    for k in range(S - 1, -1, -1):
        rest[k] = rest[k + 1] + least[k]

    best_val, best = -np.inf, None
    zero = [0] * S
    if (sum(G[k][0] for k in range(S)) <= cap).all():
        best_val, best = min(F[k][0] for k in range(S)) - sum(M[k][0] for k in range(S)), list(zero)
    nodes = 0
    choice = [0] * S

    def tol() -> float:
        return REL_TOL * max(1.0, abs(best_val)) if best is not None else 0.0

    def visit(k: int, use: np.ndarray, tau0: float, cost: float) -> None:
        nonlocal best_val, best, nodes
        nodes += 1
        if nodes > node_limit or (nodes % 256 == 0 and time.perf_counter() > deadline):
            raise _Limit
        room = cap - use - rest[k]  # >= 0: what is left once every remaining stage holds its least
        fits = (G[k] <= room + least[k]).all(axis=1)
        tau = np.minimum(F[k], tau0)
        value = cost + M[k]
        if k == S - 1:
            v = np.where(fits, tau - value, -np.inf)
            c = int(np.argmax(v))
            if v[c] > best_val + tol():
                choice[k] = c
                best_val, best = float(v[c]), list(choice)
            return
        need = np.zeros(len(taus))  # least cost of the remaining stages at every level tau
        for j in range(k + 1, S):
            ok = (G_by_f[j] <= room + least[j]).all(axis=1)
            cheapest = np.minimum.accumulate(np.where(ok, M_by_f[j], np.inf)[::-1])[::-1]
            need += cheapest[first[j]]
        reach = np.maximum.accumulate(taus - need)  # best level-minus-cost at or below each tau
        at = np.searchsorted(taus, tau, side="right") - 1
        bound = np.where(fits & (at >= 0), reach[np.maximum(at, 0)] - value, -np.inf)
        for c in np.argsort(-bound, kind="stable"):
            if not bound[c] > best_val + tol():
                break
            choice[k] = int(c)
            visit(k + 1, use + G[k][c], float(tau[c]), float(value[c]))

    status = SolveStatus.OPTIMAL
    feasible_at_all = (rest[0] <= cap).all()
    if feasible_at_all:
        try:
            visit(0, np.zeros(len(cols), dtype=np.int64), np.inf, 0.0)
        except _Limit:
            status = SolveStatus.FEASIBLE if best is not None else SolveStatus.NOT_SOLVED
    if best is None:
        if status is SolveStatus.OPTIMAL:
            status = SolveStatus.INFEASIBLE
        why = "no combination of candidates fits the pools" if status is SolveStatus.INFEASIBLE else "stopped at the node or time limit"
        rec = SolveRecord("bnb", status, None, None, time.perf_counter() - t0, opts.time_limit_s, None,
                          f"bottleneck branch and bound: {why} ({nodes} nodes)")
        return Solution(list(zero)), rec
    out = [0] * S
    for k, s in enumerate(order):
        out[s] = int(best[k])
    obj = inst.objective(out)
    bound = obj if status is SolveStatus.OPTIMAL else None
    what = "exact" if status is SolveStatus.OPTIMAL else "stopped at the node or time limit"
    rec = SolveRecord("bnb", status, obj, bound, time.perf_counter() - t0, opts.time_limit_s, "current-allocation",
                      f"bottleneck branch and bound: {what} ({nodes} nodes)")
    return Solution(out, obj, bound), rec
