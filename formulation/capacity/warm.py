"""Warm starts between the points of a sweep: a point's groups and columns, by name, for the next.

A point hands on its groups (configuration label, member job names) and up to ``WARM_PATTERNS``
of its master's columns (the last LP's support first, then by reduced cost), each pattern as
{a job of the class: count}. The next point keeps the groups that are still feasible groups
there (the greedy admits the other jobs) and the columns that are still feasible patterns.
:func:`improve` tries other points' groups as they are (after the chains, on both sides).
"""

from __future__ import annotations

from typing import Optional

import numpy as np

from formulation.capacity.instance import CapacityInstance
from formulation.capacity.patterns import FleetPatternModel
from formulation.capacity.result import StyleResult, Warm, group_result
from formulation.common import SolveOptions
from formulation.placement.evaluate import Group, Index, Solution
from formulation.placement.greedy import Packer, arrival_order
from formulation.placement.solve import tighten

WARM_PATTERNS = 1500  # columns handed to the next point of a sweep (the LP's, then by reduced cost)


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
    out: list[Group] = []
    seen: set[int] = set()
    for label, members in groups:
        k = labels.get(label)
        found = [names.get(m) for m in members]
        js = [j for j in found if j is not None]
        if k is None or len(js) < len(found) or seen & set(js) or not idx.feasible(k, js):
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
    out = group_result(inst, "co-execution", idx, best, lb_new, False, options,
                        message + f"; the groups of {src} are cheaper here and were taken", src)
    out.warm = Warm(warm_groups(idx, best), [])
    return out


def warm_groups(idx: Index, sol: Solution):
    return [(idx.configs[g.config].label(), [idx.names[j] for j in g.members]) for g in sol.groups]


def warm_patterns(idx: Index, model: FleetPatternModel, warm: Warm) -> list[tuple[int, dict[int, int]]]:
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
