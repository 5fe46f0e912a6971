"""The cheapest fleet for a forecast, in each deployment style.

``solve(instance, options, style, warm)`` returns a :class:`StyleResult`: the fleet (nodes per
type, owned nodes included), what it costs, a certified lower bound, and how the jobs run on it.

Styles
------
``co-execution``
    Weave's co-execution groups (any number of members per group): the pattern model of
    :mod:`formulation.capacity.patterns`, warm-started with the Weave greedy and, in a sweep,
    with the neighbouring point's groups and patterns.
``solo-disaggregated``
    Solo-D: every job alone on its own rollout pool and training pool. The same master with one
    column per job class and configuration; only the configurations with the fewest nodes of a
    (rollout type, training type) pair on which the job meets its SLO matter (any other uses more
    nodes of the same types and costs more), so the integer master over them is exact.
``colocated``
    Every job on its own nodes of one GPU type, rollout and training taking turns on them (one
    iteration = rollout + training + the in-place weight reshard, from ``instance.colocated``);
    the best single type. On one type a job's cost grows with its nodes, so each job takes the
    fewest nodes on which it meets its SLO; the type is the cheapest whose total fits its
    availability (and the budget). Exact by construction.

Every style reports the fleet's full hourly cost: the owned nodes (paid for whether used or not)
plus the nodes it buys.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from typing import Optional

import numpy as np

from formulation.capacity.instance import CapacityInstance
from formulation.capacity.patterns import FleetPatternModel
from formulation.common import SolveOptions, SolveRecord, SolveStatus
from formulation.placement.colgen import job_classes
from formulation.placement.evaluate import Group, Index, Solution
from formulation.placement.greedy import Packer, arrival_order, best_greedy
from formulation.placement.master import Column
from formulation.placement.solve import tighten

STYLES = ("co-execution", "solo-disaggregated", "colocated")
WARM_PATTERNS = 1500  # columns handed to the next point of a sweep (the LP's, then by reduced cost)


@dataclass
class Warm:
    """What a solve hands to the next point of a sweep: its groups and its columns, by name."""

    groups: list[tuple[str, list[str]]] = field(default_factory=list)  # (configuration label, member jobs)
    patterns: list[tuple[str, dict[str, int]]] = field(default_factory=list)  # (label, {a job of the class: count})


@dataclass
class Colocation:
    job: int
    gpu_type: str
    nodes: int


@dataclass
class StyleResult:
    style: str
    status: SolveStatus
    fleet: dict[str, int]  # nodes per type, owned included
    used: dict[str, int]  # nodes per type that serve jobs
    cost_per_hour: float  # the fleet's $/h, owned nodes included
    lower_bound: Optional[float]  # certified lower bound on cost_per_hour (None: none, or jobs left out)
    idx: Index
    solution: Optional[Solution] = None  # group styles
    colocation: list[Colocation] = field(default_factory=list)  # colocated style
    unplaced: list[int] = field(default_factory=list)
    record: Optional[SolveRecord] = None
    warm: Optional[Warm] = None
    note: str = ""  # why a style cannot serve the forecast, or which type it chose
    lp_duals: Optional[tuple] = None  # co-execution: (capacity, credit, budget) duals of the last LP


def solve(inst: CapacityInstance, options: SolveOptions, style: str = "co-execution", warm: Optional[Warm] = None,
          prune: bool = True) -> StyleResult:
    t0 = time.perf_counter()
    if style == "co-execution":
        res = _coexec(inst, options, warm, prune)
    elif style == "solo-disaggregated":
        res = _solo(inst, options)
    elif style == "colocated":
        res = _colocated(inst, options)
    else:
        raise ValueError(f"unknown deployment style {style!r}; use one of {', '.join(STYLES)}")
    res.record.wall_time_s = time.perf_counter() - t0
    res.record.time_limit_s = options.time_limit_s
    return res


# ---------------------------------------------------------------------------------- helpers
def cost_unit(inst: CapacityInstance) -> Optional[float]:
    """The greatest common divisor of the node prices: every fleet costs a multiple of it."""
    vals = [inst.node_price(t) for t in inst.types]
    scaled = [round(v * 1000) for v in vals]
    if any(abs(v * 1000 - s) > 1e-6 for v, s in zip(vals, scaled)):
        return None
    unit = 0
    for s in scaled:
        unit = math.gcd(unit, int(s))
    return unit / 1000 if unit > 0 else None


def _round_bound(inst: CapacityInstance, lb: float) -> float:
    unit = cost_unit(inst)
    return math.ceil(lb / unit - 1e-9) * unit if unit else lb


def _budget_new(inst: CapacityInstance) -> Optional[float]:
    return None if inst.budget_per_hour is None else inst.budget_per_hour - inst.owned_cost()


def _status(cost: float, lb: Optional[float], proven: bool, gap: float) -> SolveStatus:
    if proven:
        return SolveStatus.OPTIMAL
    if lb is not None and cost - lb <= gap * max(1.0, cost) + 1e-9:
        return SolveStatus.OPTIMAL
    return SolveStatus.FEASIBLE


def _group_result(inst: CapacityInstance, style: str, idx: Index, sol: Solution, lb_new: Optional[float], proven: bool,
                  options: SolveOptions, message: str, warm_name: Optional[str]) -> StyleResult:
    used = idx.nodes_used(sol.groups)
    fleet = inst.fleet_of(used)
    cost = inst.fleet_cost(fleet)
    lb = None
    if not sol.unplaced:
        if proven:
            lb = cost
        elif lb_new is not None and np.isfinite(lb_new) and lb_new > 0:
            lb = min(cost, _round_bound(inst, inst.owned_cost() + lb_new))
    status = _status(cost, lb, proven, options.mip_gap) if not sol.unplaced else SolveStatus.INFEASIBLE
    record = SolveRecord(backend=style, status=status, objective=cost, best_bound=lb, warm_start=warm_name, message=message)
    return StyleResult(style, status, fleet, {t: n for t, n in used.items()}, cost, lb, idx, solution=sol,
                       unplaced=list(sol.unplaced), record=record)


def _empty(inst: CapacityInstance, style: str, idx: Index) -> StyleResult:
    fleet = inst.fleet_of({})
    cost = inst.fleet_cost(fleet)
    record = SolveRecord(backend=style, status=SolveStatus.OPTIMAL, objective=cost, best_bound=cost, message="no jobs")
    return StyleResult(style, SolveStatus.OPTIMAL, fleet, {t: 0 for t in inst.types}, cost, cost, idx, solution=Solution([]),
                       record=record)


def _over_budget(inst: CapacityInstance, style: str, idx: Index) -> StyleResult:
    fleet = inst.fleet_of({})
    cost = inst.fleet_cost(fleet)
    note = (f"the owned nodes alone cost {cost:.2f} $/h, over the budget of {inst.budget_per_hour:.2f} $/h")
    record = SolveRecord(backend=style, status=SolveStatus.INFEASIBLE, objective=cost, message=note)
    return StyleResult(style, SolveStatus.INFEASIBLE, fleet, {t: 0 for t in inst.types}, cost, None, idx,
                       solution=Solution([], list(range(idx.n))), unplaced=list(range(idx.n)), record=record, note=note)


# ---------------------------------------------------------------------------------- co-execution
def warm_solution(idx: Index, warm: Warm) -> Solution:
    """The neighbour's groups that are still feasible groups here, then the greedy for the rest."""
    names = {n: i for i, n in enumerate(idx.names)}
    labels = {c.label(): k for k, c in enumerate(idx.configs)}
    pk = Packer(idx)
    taken: set[int] = set()
    for label, members in warm.groups:
        k = labels.get(label)
        js = [names[m] for m in members if m in names]
        if k is None or not js or taken & set(js) or not idx.feasible(k, js):
            continue
        if any(pk.free.get(t, 0) < n for t, n in idx.config_nodes(k).items()):
            continue
        pk.add_group(k, js)
        taken.update(js)
    for j in arrival_order(idx):
        if j not in pk.job_group:
            pk.admit(j)
    return pk.solution()


def exact_solution(idx: Index, groups: list[tuple[str, list[str]]]) -> Optional[Solution]:
    """Another point's groups taken as they are: None unless every group is feasible here and
    together they place every job exactly once."""
    names = {n: i for i, n in enumerate(idx.names)}
    labels = {c.label(): k for k, c in enumerate(idx.configs)}
    out, seen = [], set()
    for label, members in groups:
        k = labels.get(label)
        js = [names.get(m) for m in members]
        if k is None or None in js or seen & set(js) or not idx.feasible(k, js):
            return None
        seen.update(js)
        out.append(Group(k, tuple(sorted(js))))
    return Solution(out) if len(seen) == idx.n else None


def improve(inst: CapacityInstance, cost: Optional[float], lower_bound: Optional[float], message: str,
            candidates: list[tuple[str, Warm]], options: SolveOptions) -> Optional[StyleResult]:
    """The cheapest of other points' groups (a sweep's neighbours on both sides) when it beats
    ``cost`` here, else None. A candidate's groups must all be feasible here, cover every job and
    fit the availability limits and the budget; the bound stays ``lower_bound`` (this point's own
    solve)."""
    idx = Index(inst.placement)
    best, best_cost, src = None, np.inf if cost is None else cost, None
    for name, warm in candidates:
        sol = exact_solution(idx, warm.groups)
        if sol is None:
            continue
        sol = tighten(idx, sol)
        used = idx.nodes_used(sol.groups)
        if any(used[t] > inst.limit(t) for t in inst.types):
            continue
        c = inst.fleet_cost(inst.fleet_of(used))
        if inst.budget_per_hour is not None and c > inst.budget_per_hour * (1 + 1e-9):
            continue
        if c < best_cost - 1e-9:
            best, best_cost, src = sol, c, name
    if best is None:
        return None
    lb_new = None if lower_bound is None else lower_bound - inst.owned_cost()
    out = _group_result(inst, "co-execution", idx, best, lb_new, False, options,
                        message + f"; the groups of {src} are cheaper here and were taken", src)
    out.warm = Warm(warm_groups(idx, best), [])
    return out


def warm_groups(idx: Index, sol: Solution):
    return [(idx.configs[g.config].label(), [idx.names[j] for j in g.members]) for g in sol.groups]


def _warm_patterns(idx: Index, model: FleetPatternModel, warm: Warm) -> list[tuple[int, dict[int, int]]]:
    names = {n: i for i, n in enumerate(idx.names)}
    labels = {c.label(): k for k, c in enumerate(idx.configs)}
    out = []
    for label, counts in warm.patterns:
        k = labels.get(label)
        if k is None:
            continue
        cc: dict[int, int] = {}
        for name, n in counts.items():
            j = names.get(name)
            if j is None:
                break
            c = int(model.cl.of_job[j])
            cc[c] = cc.get(c, 0) + n
        else:
            out.append((k, cc))
    return out


def export_warm(idx: Index, model: FleetPatternModel, sol: Solution) -> Warm:
    groups = warm_groups(idx, sol)
    pats = model.best_patterns(WARM_PATTERNS)
    rep = model.cl.rep
    patterns = [(idx.configs[k].label(), {idx.names[int(rep[c])]: n for c, n in counts.items()}) for k, counts in pats]
    return Warm(groups, patterns)


def _start(inst: CapacityInstance, style: str):
    """(index, budget for new nodes, an early result when there is nothing to solve)."""
    idx = Index(inst.placement)
    if idx.n == 0:
        return idx, None, _empty(inst, style, idx)
    budget_new = _budget_new(inst)
    if budget_new is not None and budget_new < -1e-9:
        return idx, budget_new, _over_budget(inst, style, idx)
    return idx, budget_new, None


def _coexec(inst: CapacityInstance, options: SolveOptions, warm: Optional[Warm], prune: bool) -> StyleResult:
    deadline = time.perf_counter() + options.time_limit_s
    idx, budget_new, early = _start(inst, "co-execution")
    if early is not None:
        return early
    model = FleetPatternModel(idx, job_classes(idx), inst.owned, budget_new, options.threads, prune)
    cands = [(best_greedy(idx)[0], "greedy")]
    carried = 0
    if warm is not None:
        cands.append((warm_solution(idx, warm), "neighbour"))
        carried = model.add_patterns(_warm_patterns(idx, model, warm))
    start, warm_name = min(cands, key=lambda c: model.score(c[0]))
    found, st = model.solve(deadline, start, {}, options.mip_gap)
    sol = found if found is not None and model.score(found) <= model.score(start) + 1e-9 else start
    sol = tighten(idx, sol)
    lb_new = st.lower_bound if st.lower_bound is not None and st.lower_bound > -1e300 else None
    message = (f"column generation: {st.rounds} rounds, {st.columns} columns, {int(model.active.sum())} of "
               f"{len(idx.configs)} configurations priced, LP {st.lp_value:.6g}{' (converged)' if st.lp_converged else ''}"
               + (f"; optimality proven over {st.enumerated} enumerated patterns" if st.proven else "")
               + f"; integer master: {st.mip_status}" + (f"; {carried} columns from the neighbouring point" if warm is not None else ""))
    res = _group_result(inst, "co-execution", idx, sol, lb_new, st.proven, options, message, warm_name)
    if res.unplaced and lb_new is not None and lb_new >= model.penalty * (1 - 1e-9):
        res.note = "proven: every plan within the limits leaves a job out"
    res.warm = export_warm(idx, model, sol)
    res.lp_duals = model.master.last_duals
    return res


# ---------------------------------------------------------------------------------- solo-D
def solo_columns(idx: Index, classes) -> list[tuple[int, int]]:
    """(configuration, class) pairs worth a column: per (rollout type, training type) the
    configurations on which the class meets its SLO alone with no other such configuration of the
    same types using no more nodes on both sides."""
    out = []
    for c, j in enumerate(classes.rep):
        by_pair: dict[tuple[str, str], list[int]] = {}
        for k in np.flatnonzero(idx.ok[:, j]):
            cf = idx.configs[k]
            by_pair.setdefault((cf.rollout_type, cf.train_type), []).append(int(k))
        for ks in by_pair.values():
            for k in ks:
                ck = idx.configs[k]
                if not any(o != k and idx.configs[o].rollout_nodes <= ck.rollout_nodes and idx.configs[o].train_nodes <= ck.train_nodes
                           for o in ks):
                    out.append((k, c))
    return out


def _solo(inst: CapacityInstance, options: SolveOptions) -> StyleResult:
    deadline = time.perf_counter() + options.time_limit_s
    idx, budget_new, early = _start(inst, "solo-disaggregated")
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
    return _group_result(inst, "solo-disaggregated", idx, sol, lb_new, proven, options, message, None)


# ---------------------------------------------------------------------------------- colocated
def colocated_sizes(inst: CapacityInstance, t: str) -> list[Optional[int]]:
    """Per job, the fewest nodes of ``t`` on which it meets its SLO colocated (None: none)."""
    out: list[Optional[int]] = []
    limit = inst.limit(t)
    for job in inst.placement.jobs:
        row = inst.colocated.get(job.name, {}).get(t, {})
        ok = [n for n, tm in row.items() if n <= limit and tm.iteration_s <= job.slo_s * (1 + 1e-9) + 1e-12]
        out.append(min(ok) if ok else None)
    return out


def _colocated(inst: CapacityInstance, options: SolveOptions) -> StyleResult:
    idx = Index(inst.placement)
    if idx.n == 0:
        return _empty(inst, "colocated", idx)
    best = None
    why = []
    for t in inst.types:
        sizes = colocated_sizes(inst, t)
        missing = [inst.placement.jobs[j].name for j, n in enumerate(sizes) if n is None]
        if missing:
            why.append(f"{t}: {len(missing)} job(s) miss their SLO colocated on it (e.g. {', '.join(missing[:3])})")
            continue
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
