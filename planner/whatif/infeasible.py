"""Why no fleet serves the forecast, as problems a person can act on (``planner whatif`` exits 2).

In order:

1. jobs no fleet can serve whatever it holds (SLO below the solo time on every pool the job may
   use, no GPU type that fits it, not enough host DRAM on any node): from the placement
   explanation against the largest fleet allowed;
2. the budget: owned nodes that alone cost more than it (no fleet is within it, jobs or none);
   else the cheapest fleet that serves every job without it, by how much it is over, and
   how many jobs the budget can serve;
3. availability: for each type with a limit, the fewest nodes of it that serve every job with
   the other types up to their limits (compiled again with that type's limit lifted, so that its
   pool sizes are not capped), and with the nodes that can be had, which jobs miss their SLOs
   and by how much (:func:`formulation.capacity.explain.minimum_for`).
"""

from __future__ import annotations

from formulation.capacity.explain import minimum_for
from formulation.capacity.instance import CapacityInstance
from formulation.capacity.plan import default_unplaced
from formulation.capacity.result import budget_new
from formulation.capacity.solve import StyleResult, solve
from formulation.common import SolveOptions, SolveStatus
from planner.errors import Problem
from planner.schema.scenario import Scenario

FLEET_INDEPENDENT = ("slo", "no-pool", "dram")


def problems(sc: Scenario, inst: CapacityInstance, res: StyleResult, options: SolveOptions, mode: str) -> list[Problem]:
    unplaced = default_unplaced(inst, res)
    hard = [u for u in unplaced if u.reason in FLEET_INDEPENDENT]
    owned = owned_over_budget(inst, options)
    if hard:
        return owned + [Problem(f"job {u.job}", f"no fleet can serve it ({u.reason}): {u.message}", u.fix) for u in hard]
    if owned:
        return owned
    out: list[Problem] = []
    if inst.budget_per_hour is not None:
        free = solve(inst.model_copy(update={"budget_per_hour": None}), options, "co-execution")
        if not free.unplaced:
            left = [u.job for u in unplaced]
            out.append(Problem("budget_per_hour",
                               f"the cheapest fleet that meets every SLO costs {free.cost_per_hour:.2f} $/h, "
                               f"{free.cost_per_hour - inst.budget_per_hour:.2f} $/h over the budget of {inst.budget_per_hour:.2f} $/h; "
                               f"within the budget {len(inst.placement.jobs) - len(left)} of {len(inst.placement.jobs)} jobs fit "
                               f"(left out: {', '.join(left[:8])}{', ...' if len(left) > 8 else ''})",
                               f"raise budget_per_hour to at least {free.cost_per_hour:.2f}, or drop or relax those jobs"))
            return out
    out += availability(sc, inst, options, mode)
    if not out:
        out = [Problem(f"job {u.job}", f"cannot be served within the availability limits ({u.reason}): {u.message}", u.fix)
               for u in unplaced]
    return out


def owned_over_budget(inst: CapacityInstance, options: SolveOptions) -> list[Problem]:
    """The owned nodes alone cost more than the budget (which caps the whole fleet, owned nodes
    included: they are paid for whether they serve jobs or not), so no fleet is within it."""
    budget, left = inst.budget_per_hour, budget_new(inst)
    if budget is None or left is None or left >= -1e-9:  # the same test as the solve's (formulation.capacity.result.start)
        return []
    owned = inst.owned_cost()
    nodes = " + ".join(f"{inst.owned_nodes(t)} {t}" for t in inst.types if inst.owned_nodes(t))
    need, also = owned, ""
    if inst.placement.jobs:
        free = solve(inst.model_copy(update={"budget_per_hour": None}), options, "co-execution")
        if free.served:
            need = max(owned, free.cost_per_hour)
            also = f"; the cheapest fleet that meets every SLO costs {free.cost_per_hour:.2f} $/h"
    return [Problem("budget_per_hour",
                    f"the owned nodes alone ({nodes}) cost {owned:.2f} $/h, {owned - budget:.2f} $/h over the budget of "
                    f"{budget:.2f} $/h, which caps the whole fleet with the owned nodes counted (they are paid for used or "
                    f"idle): no fleet is within it{also}",
                    f"raise budget_per_hour to at least {need:.2f}, or lower the count of the owned node groups "
                    "(cluster.node_groups[].count)")]


def availability(sc: Scenario, inst: CapacityInstance, options: SolveOptions, mode: str) -> list[Problem]:
    from planner.instances.capacity import compile_capacity

    out = []
    for t in inst.types:
        spec = sc.gpu_types.get(t)
        if spec is None or spec.max_nodes is None:
            continue  # unlimited already
        lifted_sc = sc.model_copy(update={"gpu_types": {**sc.gpu_types, t: spec.model_copy(update={"max_nodes": None})}})
        lifted = compile_capacity(lifted_sc, mode)
        others = {u: inst.limit(u) for u in inst.types if u != t}
        m = minimum_for(lifted, t, options, others=others, short_of=inst.limit(t))
        if m is None or m.min_nodes <= inst.limit(t):
            continue
        fix = f"raise gpu_types.{t}.max_nodes to at least {m.min_nodes - inst.owned_nodes(t)}"
        over = over_budget_too(lifted, others, options)
        if over is not None:  # the budget blocks as well: raising the limit alone leaves no fleet
            least, fleet = over
            nodes = " + ".join(f"{n} {u}" for u, n in fleet.items() if n)
            m.message += (f"; and the cheapest fleet that does ({nodes}) costs {least:.2f} $/h, over the budget of "
                          f"{inst.budget_per_hour:.2f} $/h")
            fix += (f" and budget_per_hour to at least {least:.2f} (max_nodes {fleet.get(t, 0) - inst.owned_nodes(t)} "
                    f"and budget_per_hour {least:.2f} buy that fleet)")
        out.append(Problem(f"gpu_types.{t}.max_nodes", "with the other types up to their limits, meeting every SLO needs " + m.message,
                           fix + (", or relax the SLOs of the jobs named" if m.misses else "")))
    return out


def over_budget_too(lifted: CapacityInstance, others: dict[str, int],
                    options: SolveOptions) -> tuple[float, dict[str, int]] | None:
    """With one type's limit lifted (``lifted``) and the others at ``others``: when the cheapest
    fleet that serves every job is over the budget, its $/h and nodes per type (the $/h the
    solve's bound where it is not proven optimal); else None."""
    budget = lifted.budget_per_hour
    if budget is None:
        return None
    free = solve(lifted.with_limits(others).model_copy(update={"budget_per_hour": None}), options, "co-execution")
    if not free.served:
        return None
    least = free.cost_per_hour if free.status == SolveStatus.OPTIMAL else free.lower_bound
    if least is None or least <= budget * (1 + 1e-9):
        return None
    return float(least), dict(free.fleet)
