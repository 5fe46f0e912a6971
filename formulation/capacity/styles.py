"""The two deployment styles a buyer compares co-execution groups with (both exact).

``solo-disaggregated`` (Solo-D): every job alone on its own rollout pool and training pool; the
fleet master with one column per job class and Pareto-minimal pool pair, solved as an integer
program. ``colocated``: every job on its own nodes of one GPU type, rollout and training taking
turns; the fewest nodes per job that meet its SLO, the cheapest type whose total fits.
"""

from __future__ import annotations

import time
from typing import Optional

import numpy as np

from formulation.capacity.instance import CapacityInstance
from formulation.capacity.patterns import FleetPatternModel
from formulation.capacity.result import Colocation, StyleResult, group_result, start
from formulation.common import SolveOptions, SolveRecord, SolveStatus
from formulation.placement.colgen import job_classes
from formulation.placement.evaluate import Index, Solution
from formulation.placement.master import Column
from formulation.placement.solve import tighten


def solo_columns(idx: Index, classes) -> list[tuple[int, int]]:
    """(configuration, class) pairs worth a column: per (rollout type, training type) the
    configurations on which the class meets its SLO alone with no other such configuration of the
    same types using no more nodes on both sides."""
    out: list[tuple[int, int]] = []
    for c, j in enumerate(classes.rep):
        by_pair: dict[tuple[str, str], list[int]] = {}
        for kk in np.flatnonzero(idx.ok[:, j]):
            cf = idx.configs[kk]
            if cf.pinned:  # a job alone: its whole-pool configuration (a pinned one of one member is the same pools)
                continue
            by_pair.setdefault((cf.rollout_type, cf.train_type), []).append(int(kk))
        for ks in by_pair.values():
            for k in ks:
                ck = idx.configs[k]
                if not any(o != k and idx.configs[o].rollout_nodes <= ck.rollout_nodes and idx.configs[o].train_nodes <= ck.train_nodes
                           for o in ks):
                    out.append((k, int(c)))
    return out


def solve_solo(inst: CapacityInstance, options: SolveOptions) -> StyleResult:
    deadline = time.perf_counter() + options.time_limit_s
    idx, budget_new, early = start(inst, "solo-disaggregated")
    if early is not None:
        return early
    cl = job_classes(idx)
    model = FleetPatternModel(idx, cl, inst.owned, budget_new, options.threads, prune=False)
    pairs = solo_columns(idx, cl)
    for k, c in pairs:
        model.master.add(Column(k, {c: 1}, float(idx.cost[k])))
    x, status, fired = model.master.solve_mip(deadline, None, options.mip_gap)
    sol = model.to_solution(x, {}) if x is not None else Solution([], list(range(idx.n)))
    sol = tighten(idx, sol)
    proven = status == "Optimal"
    info = model.master.h.getInfo()
    lb_new = float(info.mip_dual_bound) if x is not None and np.isfinite(info.mip_dual_bound) else None
    message = f"integer master over {len(pairs)} solo columns: {status}{'; stopped by the watchdog' if fired else ''}"
    return group_result(inst, "solo-disaggregated", idx, sol, lb_new, proven, options, message, None)


def colocated_sizes(inst: CapacityInstance, t: str) -> list[Optional[int]]:
    """Per job, the fewest nodes of ``t`` on which it meets its SLO colocated (None: none)."""
    out: list[Optional[int]] = []
    limit = inst.limit(t)
    for job in inst.placement.jobs:
        row = inst.colocated.get(job.name, {}).get(t, {})
        ok = [n for n, tm in row.items() if n <= limit and tm.iteration_s <= job.slo_s * (1 + 1e-9) + 1e-12]
        out.append(min(ok) if ok else None)
    return out


def solve_colocated(inst: CapacityInstance, options: SolveOptions) -> StyleResult:
    idx, _, early = start(inst, "colocated")
    if early is not None:
        return early
    best: Optional[tuple[float, str, dict[str, int], list[int]]] = None
    why = []
    for t in inst.types:
        if inst.limit(t) <= 0:  # not "jobs miss their SLO on it": there is none of it to run on
            why.append(f"{t}: none owned and none can be bought (max_nodes 0)")
            continue
        maybe = colocated_sizes(inst, t)
        missing = [inst.placement.jobs[j].name for j, n in enumerate(maybe) if n is None]
        if missing:
            why.append(f"{t}: {len(missing)} job(s) miss their SLO colocated on it (e.g. {', '.join(missing[:3])})")
            continue
        sizes = [int(n) for n in maybe if n is not None]
        total = sum(sizes)
        if total > inst.limit(t):
            why.append(f"{t}: needs {total} nodes, at most {inst.limit(t)} available")
            continue
        fleet = inst.fleet_of({t: total})
        cost = inst.fleet_cost(fleet)
        if inst.budget_per_hour is not None and cost > inst.budget_per_hour * (1 + 1e-9):
            why.append(f"{t}: {cost:.2f} $/h, over the budget of {inst.budget_per_hour:.2f} $/h")
            continue
        if best is None or cost < best[0] - 1e-9:
            best = (cost, t, fleet, sizes)
    if best is None:
        note = "no single GPU type serves every job colocated: " + "; ".join(why)
        fleet = inst.fleet_of({})
        record = SolveRecord(backend="colocated", status=SolveStatus.INFEASIBLE, objective=None, message=note)
        return StyleResult("colocated", SolveStatus.INFEASIBLE, fleet, {t: 0 for t in inst.types}, inst.fleet_cost(fleet), None,
                           idx, unplaced=list(range(idx.n)), record=record, note=note)
    cost, t, fleet, sizes = best
    placed = [Colocation(j, t, int(n)) for j, n in enumerate(sizes)]
    used = {u: (sum(sizes) if u == t else 0) for u in inst.types}
    note = f"best single type {t}" + (f" (not: {'; '.join(why)})" if why else "")
    record = SolveRecord(backend="colocated", status=SolveStatus.OPTIMAL, objective=cost, best_bound=cost,
                         message=f"each job on the fewest {t} nodes that meet its SLO; {note}")
    return StyleResult("colocated", SolveStatus.OPTIMAL, fleet, used, cost, cost, idx, colocation=placed, record=record, note=note)
