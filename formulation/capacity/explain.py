"""Answers a buyer can act on: minimum node counts, what one node fewer costs, what binds.

Minimum count of a type ``t``
    The fewest nodes of ``t`` with which every job meets its SLO, the other types available up to
    their limits, no budget and no owned nodes (the count the forecast *needs*): the co-execution
    capacity model with ``t``'s nodes priced at 1 and every other node at ``eps`` (so that all the
    other nodes together weigh less than one node of ``t``). Proven when that solve is optimal.

With fewer
    On ``t`` limited to one node fewer (or to its availability when even that is short), the
    placement that minimises the largest SLO overshoot: every SLO relaxed by the same ``V``
    seconds, ``V`` found by doubling then bisection (to ``overshoot_tol``), each ``V`` decided by
    the Weave greedy and, when that fails, the capacity model. The jobs reported are those whose
    cycle time (:mod:`formulation.placement.cycle`, Howard on the plan's pins) exceeds their own
    SLO in that placement, with by how much. Jobs that cannot run at all on that fleet whatever
    the SLO (no pool of their size is left) are listed apart.

Binding constraints of a plan
    ``availability`` (a type's fleet is at its limit; the LP's shadow price when the relaxation
    prices it), ``budget`` (less than the cheapest node's price left), ``slo`` (members within
    ``SLO_TIGHT`` of their SLO, with the term of the cycle that is critical), ``dram`` (pools whose
    nodes hold at least ``DRAM_TIGHT`` of their host DRAM).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Optional

import numpy as np

from formulation.capacity.instance import CapacityInstance
from formulation.capacity.plan import Binding, CapacityPlan, Miss, Minimum
from formulation.capacity.solve import StyleResult, Warm, solve
from formulation.common import SolveOptions
from formulation.placement.evaluate import Index
from formulation.placement.greedy import best_greedy
from formulation.placement.plan import PlacementPlan, build_plan

SLO_TIGHT = 0.005  # a member within 0.5 % of its SLO binds
DRAM_TIGHT = 0.95
OVERSHOOT_REL_TOL = 0.01  # of the overshoot, and at least one second


# ---------------------------------------------------------------------------------- minimum counts
def count_question(inst: CapacityInstance, t: str) -> CapacityInstance:
    """The instance whose cheapest fleet has the fewest nodes of ``t`` (others nearly free, none owned, no budget)."""
    others = sum(inst.limit(u) for u in inst.types if u != t)
    eps = 1.0 / (2.0 * (1 + others))
    pools = {}
    for u, p in inst.placement.pool_types.items():
        per_node = 1.0 if u == t else eps
        pools[u] = p.model_copy(update={"price_per_gpu_hour": per_node / p.gpus_per_node})
    placement = inst.placement.model_copy(update={"pool_types": pools})
    return inst.model_copy(update={"placement": placement, "owned": {}, "budget_per_hour": None})


def minimum_nodes(inst: CapacityInstance, t: str, options: SolveOptions, warm: Optional[Warm] = None,
                  found: Optional[list] = None) -> tuple[Optional[int], bool, Optional[int]]:
    """(fewest nodes of ``t`` found, proven, a lower bound); (None, ..) when no fleet serves every
    job. ``warm``: a plan that serves every job (e.g. the chosen one), so the count found is never
    above its own. ``found`` collects ("the minimum count of <t>", groups) of the plan found."""
    q = count_question(inst, t)
    res = solve(q, options, "co-execution", warm)
    if found is not None and not res.unplaced and res.warm is not None:
        found.append((f"the minimum count of {t}", Warm(res.warm.groups, [])))
    if res.unplaced:
        return None, res.status.value == "infeasible" and bool(res.note), None
    n = int(res.fleet[t])
    eps_total = sum(q.node_price(u) * q.limit(u) for u in q.types if u != t)
    low = n if res.status.value == "optimal" else (max(0, math.ceil(res.lower_bound - eps_total - 1e-9))
                                                   if res.lower_bound is not None else 0)
    return n, res.status.value == "optimal", low


# ---------------------------------------------------------------------------------- one node fewer
@dataclass
class Overshoot:
    max_over_s: Optional[float]  # None: some job cannot run at all
    misses: list[Miss] = field(default_factory=list)
    cannot_run: list[str] = field(default_factory=list)
    placement: Optional[PlacementPlan] = None  # the placement that overshoots least


def relaxed(inst: CapacityInstance, v: float) -> CapacityInstance:
    jobs = [j.model_copy(update={"slo_s": j.slo_s + v}) for j in inst.placement.jobs]
    return inst.model_copy(update={"placement": inst.placement.model_copy(update={"jobs": jobs})})


def _greedy(inst: CapacityInstance, v: float):
    q = relaxed(inst, v)
    idx = Index(q.placement)
    sol, _ = best_greedy(idx)
    return idx, sol


def _serve(inst: CapacityInstance, v: float, options: SolveOptions):
    """A placement of every job with SLOs relaxed by ``v`` within ``inst``'s limits:
    (index, solution, []) or (None, None, the jobs left out)."""
    idx, sol = _greedy(inst, v)
    if not sol.unplaced:
        return idx, sol, []
    res = solve(relaxed(inst, v), options, "co-execution")
    if not res.unplaced:
        return res.idx, res.solution, []
    return None, None, [inst.placement.jobs[j].name for j in res.unplaced]


def least_overshoot(inst: CapacityInstance, limits: dict[str, int], options: SolveOptions) -> Overshoot:
    """The placement on the given availability limits (no budget, nothing owned) that minimises the
    largest SLO overshoot, and the jobs over their SLO in it.

    The greedy brackets the overshoot first (milliseconds per try), then bisection between 0 and
    the greedy's answer decides each ``V`` with the capacity model, to ``OVERSHOOT_REL_TOL`` of it.
    """
    base = inst.with_limits(limits).model_copy(update={"owned": {}, "budget_per_hour": None})
    idx0 = Index(base.placement)
    if idx0.n == 0:
        return Overshoot(0.0)
    finite = np.where(np.isfinite(idx0.tot), idx0.tot, 0.0)
    v_big = float(finite.max(axis=0).sum()) + 1.0 if finite.size else 1.0  # no pattern fits these limits: _serve says who cannot run
    idx, sol, left = _serve(base, v_big, options)
    if left:
        return Overshoot(None, cannot_run=left)
    found = (idx, sol)
    lo, hi = 0.0, v_big
    while hi - lo > max(1.0, OVERSHOOT_REL_TOL * hi):  # the greedy's bracket
        mid = 0.5 * (lo + hi)
        g_idx, g_sol = _greedy(base, mid)
        if g_sol.unplaced:
            lo = mid
        else:
            found, hi = (g_idx, g_sol), mid
    lo = 0.0
    while hi - lo > max(1.0, OVERSHOOT_REL_TOL * hi):
        mid = 0.5 * (lo + hi) if lo > 0 else min(0.5 * hi, max(1.0, 0.01 * hi))  # try a small overshoot first
        idx, sol, _ = _serve(base, mid, options)
        if sol is not None:
            found, hi = (idx, sol), mid
        else:
            lo = mid
    idx, sol = found
    plan = build_plan(idx, sol, [], None)
    misses = []
    own = {j.name: j.slo_s for j in base.placement.jobs}
    for g in plan.groups:
        for m in g.members:
            over = m.cycle_time_s - own[m.job]
            if over > 1e-6 * max(1.0, own[m.job]):
                misses.append(Miss(job=m.job, cycle_time_s=m.cycle_time_s, slo_s=own[m.job], over_s=over))
    misses.sort(key=lambda m: (-m.over_s, m.job))
    return Overshoot(max((m.over_s for m in misses), default=0.0), misses, placement=plan)


def minimum_for(inst: CapacityInstance, t: str, options: SolveOptions, others: dict[str, int],
                short_of: Optional[int] = None, warm: Optional[Warm] = None, found: Optional[list] = None) -> Optional[Minimum]:
    """The fewest nodes of ``t`` that serve every job with the other types limited to ``others``, and
    what one node fewer (or ``short_of`` nodes, the availability when it is short) costs in SLO
    misses; None when no fleet serves every job even with ``t`` at its limit."""
    q = inst.with_limits({u: n for u, n in others.items() if u != t})
    n, proven, low = minimum_nodes(q, t, options, warm, found)
    if n is None:
        return None
    if n == 0:
        return Minimum(gpu_type=t, min_nodes=0, proven=proven, fewer_nodes=0, message=f"no {t} node")  # read after "... meeting every SLO needs "
    fewer = n - 1 if short_of is None or short_of >= n else short_of
    limits = {u: q.limit(u) for u in q.types}
    limits[t] = fewer
    ov = least_overshoot(q, limits, options)
    head = f"at least {n} {t} node(s)" if proven else (
        f"{n} {t} node(s) in the best plan found (not proven minimal" + (f"; at least {low} proven)" if low else ")"))
    if short_of is not None and short_of < n:
        head += f", but at most {short_of} can be had"
    if ov.max_over_s is None:
        tail = f"with {fewer}, {_names(ov.cannot_run)} cannot run at all, whatever the SLO"
    elif not ov.misses:
        tail = f"with {fewer}, every job still meets its SLO in the placement found (the minimum is not proven)"
    else:
        if len(ov.misses) == 1:
            m = ov.misses[0]
            tail = f"with {fewer}, job {m.job} misses its SLO by {m.over_s:.1f} s (cycle {m.cycle_time_s:.1f} s vs SLO {m.slo_s:.1f} s)"
        else:
            tail = (f"with {fewer}, {_names([m.job for m in ov.misses])} miss their SLOs by up to {ov.max_over_s:.1f} s ("
                    + ", ".join(f"{m.job} +{m.over_s:.1f} s" for m in ov.misses[:6]) + (", ..." if len(ov.misses) > 6 else "") + ")")
    return Minimum(gpu_type=t, min_nodes=n, proven=proven, fewer_nodes=fewer, max_over_s=ov.max_over_s, misses=ov.misses,
                   cannot_run=ov.cannot_run, message=f"{head}; {tail}")


def _names(names: list[str]) -> str:
    if len(names) <= 1:
        return "job " + "".join(names)
    shown = names[:5]
    more = f" and {len(names) - 5} more" if len(names) > 5 else ""
    return "jobs " + ", ".join(shown[:-1]) + (f", {shown[-1]}" if more else f" and {shown[-1]}") + more


def minimums(inst: CapacityInstance, res: StyleResult, options: SolveOptions, found: Optional[list] = None,
             on_type=None) -> list[Minimum]:
    """For every type the chosen fleet uses: the fewest nodes of it that serve every job beside the
    fleet's other nodes, what one node fewer costs in SLO misses, and the fewest with the other
    types free up to their limits (how far other types can stand in for it). ``found`` collects the
    plans the counts came from: with a solve that is not proven optimal, one of them may be a
    cheaper fleet than ``res`` (``planner whatif`` then takes it). ``on_type(t)`` is called as each
    type's search starts (a progress line)."""
    out = []
    for t in inst.types:
        if res.used.get(t, 0) <= 0:
            continue
        if on_type is not None:
            on_type(t)
        m = minimum_for(inst, t, options, others=dict(res.fleet), warm=res.warm, found=found)
        if m is None:
            continue
        any_n, any_proven, _ = minimum_nodes(inst, t, options, res.warm)
        m.min_nodes_any = any_n
        m.message = "with the fleet's other nodes, meeting every SLO needs " + m.message
        if any_n is not None and any_n < m.min_nodes:
            m.message += (f"; with other types up to their limits, {any_n} {t} node(s)" + (" would do" if any_proven else " were found to do")
                          + " (at a cost no lower)")
        out.append(m)
    return out


# ---------------------------------------------------------------------------------- binding constraints
def binding(inst: CapacityInstance, res: StyleResult, plan: CapacityPlan) -> list[Binding]:
    out: list[Binding] = []
    mu = res.lp_duals[0] if res.lp_duals is not None else None
    for i, t in enumerate(inst.types):
        if inst.limit(t) > 0 and res.fleet.get(t, 0) >= inst.limit(t) and res.used.get(t, 0) >= inst.limit(t):
            price = f"; the LP relaxation values one more node at {mu[i]:.2f} $/h" if mu is not None and mu[i] > 1e-6 else ""
            what = (f"{t} is bought without limit, but the plan uses all {inst.limit(t)} nodes the planner considers "
                    f"for it (what the jobs could use); set gpu_types.{t}.max_nodes to consider more" if t in inst.unlimited
                    else f"every available {t} node is used ({inst.limit(t)})")
            out.append(Binding(kind="availability", where=f"type={t}", message=what + price))
    if inst.budget_per_hour is not None:
        left = inst.budget_per_hour - res.cost_per_hour
        cheapest = min(inst.node_price(t) for t in inst.types)
        if left < cheapest - 1e-9:
            out.append(Binding(kind="budget", where="fleet",
                               message=f"{res.cost_per_hour:.2f} of {inst.budget_per_hour:.2f} $/h spent; less than one node "
                                       f"({cheapest:.2f} $/h) left"))
    if plan.placement is not None:
        out += _group_bindings(inst, plan)
    for c in plan.colocated:
        if c.slack_s <= SLO_TIGHT * c.slo_s:
            out.append(Binding(kind="slo", where=f"job={c.job}",
                               message=f"iteration {c.iteration_s:.1f} s vs SLO {c.slo_s:.1f} s on {c.size} {c.gpu_type} node(s)"))
    return out


def _critical_term(g) -> str:
    """What binds a group's cycle, read from the critical cycle its plan carries (Howard's, on the pins)."""
    kinds = {e.split(":", 1)[0] for e in g.critical}
    if kinds == {"R"}:
        if all(set(m.rollout_nodes) == set(g.rollout_pool.nodes) for m in g.members):
            return "the rollout pool is busy the whole cycle"
        return "a rollout node shared by members is busy the whole cycle"
    if kinds == {"T"}:
        return "the training pool is busy the whole cycle"
    if len({e.split(":", 1)[1] for e in g.critical}) == 1:
        return "a member's own rollout + training + sync"
    return "rollouts and trainings of several members in a chain"


def _group_bindings(inst: CapacityInstance, plan: CapacityPlan) -> list[Binding]:
    out = []
    jobs = {j.name: j for j in inst.placement.jobs}
    pools = inst.placement.pool_types
    assert plan.placement is not None  # a plan with a fleet has its placement
    for g in plan.placement.groups:
        term = _critical_term(g)
        for m in g.members:
            if m.slack_s <= SLO_TIGHT * m.slo_s:
                out.append(Binding(kind="slo", where=f"job={m.job},group={g.id}",
                                   message=f"cycle {m.cycle_time_s:.1f} s vs SLO {m.slo_s:.1f} s (slack {m.slack_s:.1f} s); "
                                           f"critical: {term}"))
        w = max((sum(jobs[m.job].dram_rollout_node_gb for m in g.members if n in m.rollout_nodes) for n in g.rollout_pool.nodes),
                default=0.0)  # the fullest rollout node's resident state
        s = sum(jobs[m.job].train_state_gb for m in g.members) / g.train_pool.size
        for side, used, cap in (("rollout", w, pools[g.rollout_pool.gpu_type].dram_gb), ("training", s, pools[g.train_pool.gpu_type].dram_gb)):
            if cap > 0 and used >= DRAM_TIGHT * cap:
                out.append(Binding(kind="dram", where=f"group={g.id},{side}",
                                   message=f"each {side} node holds {used:.0f} of {cap:.0f} GB of resident job state"))
    return out
