"""What a style's solve returns, and the pieces every style builds its result from.

:class:`StyleResult` (the fleet, its $/h with owned nodes, a certified lower bound, the groups or
colocated pools, the jobs left out), :class:`Warm` (what a sweep point hands to the next one),
and the shared steps: the fleet's cost unit for rounding bounds, the budget left for new nodes,
the status from cost and bound, and the results with nothing to solve.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Optional

import numpy as np

from formulation.capacity.instance import CapacityInstance
from formulation.common import SolveOptions, SolveRecord, SolveStatus
from formulation.placement.evaluate import Index, Solution


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

    @property
    def served(self) -> bool:
        """Every job placed on a fleet within the limits and the budget. Not the same as no job
        left out: with no jobs, owned nodes that alone cost more than the budget serve nothing."""
        return not self.unplaced and self.status != SolveStatus.INFEASIBLE


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


def round_bound(inst: CapacityInstance, lb: float) -> float:
    unit = cost_unit(inst)
    return math.ceil(lb / unit - 1e-9) * unit if unit else lb


def budget_new(inst: CapacityInstance) -> Optional[float]:
    return None if inst.budget_per_hour is None else inst.budget_per_hour - inst.owned_cost()


def status_of(cost: float, lb: Optional[float], proven: bool, gap: float) -> SolveStatus:
    if proven:
        return SolveStatus.OPTIMAL
    if lb is not None and cost - lb <= gap * max(1.0, cost) + 1e-9:
        return SolveStatus.OPTIMAL
    return SolveStatus.FEASIBLE


def group_result(inst: CapacityInstance, style: str, idx: Index, sol: Solution, lb_new: Optional[float], proven: bool,
                  options: SolveOptions, message: str, warm_name: Optional[str]) -> StyleResult:
    used = idx.nodes_used(sol.groups)
    fleet = inst.fleet_of(used)
    cost = inst.fleet_cost(fleet)
    lb = None
    if not sol.unplaced:
        if proven:
            lb = cost
        elif lb_new is not None and np.isfinite(lb_new) and lb_new > 0:
            lb = min(cost, round_bound(inst, inst.owned_cost() + lb_new))
    status = status_of(cost, lb, proven, options.mip_gap) if not sol.unplaced else SolveStatus.INFEASIBLE
    record = SolveRecord(backend=style, status=status, objective=cost, best_bound=lb, warm_start=warm_name, message=message)
    return StyleResult(style, status, fleet, {t: n for t, n in used.items()}, cost, lb, idx, solution=sol,
                       unplaced=list(sol.unplaced), record=record)


def empty_result(inst: CapacityInstance, style: str, idx: Index) -> StyleResult:
    fleet = inst.fleet_of({})
    cost = inst.fleet_cost(fleet)
    record = SolveRecord(backend=style, status=SolveStatus.OPTIMAL, objective=cost, best_bound=cost, message="no jobs")
    return StyleResult(style, SolveStatus.OPTIMAL, fleet, {t: 0 for t in inst.types}, cost, cost, idx, solution=Solution([]),
                       record=record)


def over_budget_result(inst: CapacityInstance, style: str, idx: Index) -> StyleResult:
    fleet = inst.fleet_of({})
    cost = inst.fleet_cost(fleet)
    note = (f"the owned nodes alone cost {cost:.2f} $/h, over the budget of {inst.budget_per_hour:.2f} $/h")
    record = SolveRecord(backend=style, status=SolveStatus.INFEASIBLE, objective=cost, message=note)
    return StyleResult(style, SolveStatus.INFEASIBLE, fleet, {t: 0 for t in inst.types}, cost, None, idx,
                       solution=Solution([], list(range(idx.n))), unplaced=list(range(idx.n)), record=record, note=note)


def start(inst: CapacityInstance, style: str):
    """(index, budget for new nodes, an early result when there is nothing to solve). Owned nodes
    that alone cost more than the budget come first: no fleet is within it, jobs or none."""
    idx = Index(inst.placement)
    left = budget_new(inst)
    if left is not None and left < -1e-9:
        return idx, left, over_budget_result(inst, style, idx)
    if idx.n == 0:
        return idx, None, empty_result(inst, style, idx)
    return idx, left, None
