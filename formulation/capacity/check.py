"""Solver-free checker of a capacity plan against its instance.

Never imports a solver. Group styles are judged by the placement checker
(:func:`formulation.placement.check.check`: Howard cycle times from the pins, DRAM per node,
capacity) on the placement instance *of the plan's fleet*; colocated jobs by
:mod:`formulation.placement.cycle` on their own nodes. Rules:

==================  ========================================================================
rule                meaning
==================  ========================================================================
fleet               per type: owned as in the instance, total = owned + new, within the limit
used                nodes in use per type match the plan's pools and fit the fleet
cost                the fleet's $/h (total, owned, new) match the prices
budget              the fleet's $/h within the budget
bound               the lower bound does not exceed the cost
style               a known style, and the plan's parts fit it (solo: one job per group;
                    colocated: one GPU type, no groups)
placement:<rule>    a rule of the placement checker on the plan's fleet
colocated-*         colocated jobs: placed once, nodes of the fleet used once, tables, SLO,
                    reported cycle time
==================  ========================================================================
"""

from __future__ import annotations

from formulation.capacity.instance import CapacityInstance
from formulation.capacity.plan import CapacityPlan, colocated_member
from formulation.placement.check import Violation, check as check_placement
from formulation.placement.cycle import cycle_times

TOL = 1e-6
STYLES = ("co-execution", "solo-disaggregated", "colocated")


def _close(x: float, y: float) -> bool:
    return abs(x - y) <= TOL * max(1.0, abs(x), abs(y))


def check(inst: CapacityInstance, plan: CapacityPlan) -> list[Violation]:
    out: list[Violation] = []
    add = lambda rule, where, msg: out.append(Violation(rule, where, msg))  # noqa: E731
    fleet = check_fleet(inst, plan, add)
    check_style(plan, add)
    if plan.placement is not None:
        check_groups(inst, plan, fleet, add)
    if plan.colocated or plan.style == "colocated":
        check_colocated(inst, plan, fleet, add)
    return out


def check_fleet(inst: CapacityInstance, plan: CapacityPlan, add) -> dict[str, int]:
    lines = {f.gpu_type: f for f in plan.fleet}
    fleet: dict[str, int] = {}
    for t in lines:
        if t not in inst.placement.pool_types:
            add("fleet", f"type={t}", "the instance has no such GPU type")
    for t in inst.types:
        f = lines.get(t)
        total = f.total if f else 0
        fleet[t] = total
        if f is None:
            if inst.owned_nodes(t):
                add("fleet", f"type={t}", f"{inst.owned_nodes(t)} owned node(s) are missing from the fleet")
            continue
        if f.owned != inst.owned_nodes(t):
            add("fleet", f"type={t}", f"owned is {f.owned} but the instance owns {inst.owned_nodes(t)}")
        if f.total != f.owned + f.new or f.new < 0:
            add("fleet", f"type={t}", f"total {f.total} is not owned {f.owned} + new {f.new} (new >= 0)")
        if f.total > inst.limit(t):
            add("fleet", f"type={t}", f"{f.total} nodes but at most {inst.limit(t)} are available")
        if f.limit != inst.reported_limit(t):
            add("fleet", f"type={t}", f"reports the limit {f.limit} but the instance's is {inst.reported_limit(t)} "
                "(null: bought without limit)")
        if not _close(f.cost_per_hour, f.total * inst.node_price(t)):
            add("cost", f"type={t}", f"reports {f.cost_per_hour:.6g} $/h but {f.total} nodes cost {f.total * inst.node_price(t):.6g} $/h")
    cost = inst.fleet_cost(fleet)
    if not _close(plan.cost_per_hour, cost):
        add("cost", "plan", f"reports {plan.cost_per_hour:.6g} $/h but the fleet costs {cost:.6g} $/h")
    if not _close(plan.owned_cost_per_hour, inst.owned_cost()) or not _close(plan.new_cost_per_hour, cost - inst.owned_cost()):
        add("cost", "plan", f"owned {plan.owned_cost_per_hour:.6g} + new {plan.new_cost_per_hour:.6g} $/h, but the owned nodes cost "
                            f"{inst.owned_cost():.6g} and the new ones {cost - inst.owned_cost():.6g} $/h")
    if inst.budget_per_hour is not None and cost > inst.budget_per_hour * (1 + TOL):
        add("budget", "plan", f"the fleet costs {cost:.2f} $/h, over the budget of {inst.budget_per_hour:.2f} $/h")
    if plan.lower_bound_per_hour is not None and plan.lower_bound_per_hour > plan.cost_per_hour * (1 + TOL):
        add("bound", "plan", f"lower bound {plan.lower_bound_per_hour:.6g} exceeds the cost {plan.cost_per_hour:.6g}")
    return fleet


def check_style(plan: CapacityPlan, add) -> None:
    if plan.style not in STYLES:
        add("style", "plan", f"unknown style '{plan.style}'; one of {', '.join(STYLES)}")
        return
    if plan.style == "colocated":
        if plan.placement is not None and plan.placement.groups:
            add("style", "plan", "a colocated plan has no co-execution groups")
        if len({c.gpu_type for c in plan.colocated}) > 1:
            add("style", "plan", "the colocated style puts every job on one GPU type")
    else:
        if plan.colocated:
            add("style", "plan", f"a {plan.style} plan has no colocated jobs")
        if plan.placement is None:
            add("style", "plan", f"a {plan.style} plan needs its placement")
        elif plan.style == "solo-disaggregated":
            for g in plan.placement.groups:
                if len(g.members) != 1:
                    add("style", f"group={g.id}", f"solo-disaggregated groups hold one job, this one {len(g.members)}")


def _used(inst: CapacityInstance, plan: CapacityPlan, counted: dict[str, int], add) -> None:
    for f in plan.fleet:
        if f.used != counted.get(f.gpu_type, 0):
            add("used", f"type={f.gpu_type}", f"reports {f.used} nodes in use but the plan uses {counted.get(f.gpu_type, 0)}")
    for t, n in counted.items():
        if t in inst.placement.pool_types and n and t not in {f.gpu_type for f in plan.fleet}:
            add("used", f"type={t}", f"the plan uses {n} node(s) of a type its fleet does not list")


def check_groups(inst: CapacityInstance, plan: CapacityPlan, fleet: dict[str, int], add) -> None:
    pinst = inst.with_fleet(fleet)
    assert plan.placement is not None  # check() calls this only for plans with groups
    body = plan.placement.model_copy(update={"unplaced": list(plan.placement.unplaced) + list(plan.unplaced)})
    for v in check_placement(pinst, body):
        add(f"placement:{v.rule}", v.where, v.message)
    counted: dict[str, int] = {}
    for g in plan.placement.groups:
        for pool in (g.rollout_pool, g.train_pool):
            counted[pool.gpu_type] = counted.get(pool.gpu_type, 0) + len(pool.nodes)
    _used(inst, plan, counted, add)


def check_colocated(inst: CapacityInstance, plan: CapacityPlan, fleet: dict[str, int], add) -> None:
    jobs = {j.name: j for j in inst.placement.jobs}
    seen: dict[str, int] = {}
    for name in [c.job for c in plan.colocated] + [u.job for u in plan.unplaced]:
        seen[name] = seen.get(name, 0) + 1
    for name in jobs:
        if seen.get(name, 0) != 1:
            add("colocated-placed-once", f"job={name}", f"appears {seen.get(name, 0)} times (colocated jobs and unplaced list)")
    allowed = {t: set(inst.placement.node_names(t)[: fleet.get(t, 0)]) for t in inst.types}
    owner: dict[str, str] = {}
    counted: dict[str, int] = {}
    for c in plan.colocated:
        where = f"job={c.job}"
        job = jobs.get(c.job)
        if job is None:
            add("colocated-placed-once", where, "the instance has no such job")
            continue
        if len(set(c.nodes)) != c.size or len(c.nodes) != c.size:
            add("colocated-nodes", where, f"size {c.size} but {len(set(c.nodes))} distinct nodes listed")
        for n in c.nodes:
            if n not in allowed.get(c.gpu_type, set()):
                add("colocated-nodes", where, f"node '{n}' is not a {c.gpu_type} node of the fleet")
            if n in owner:
                add("colocated-nodes", f"node={n}", f"used by both {owner[n]} and {c.job}")
            owner[n] = c.job
        counted[c.gpu_type] = counted.get(c.gpu_type, 0) + len(c.nodes)
        tm = inst.colocated.get(c.job, {}).get(c.gpu_type, {}).get(len(set(c.nodes)))
        if tm is None:
            add("colocated-table", where, f"the job has no colocated times on {len(set(c.nodes))} {c.gpu_type} node(s)")
            continue
        for label, mine, theirs in (("rollout_s", c.rollout_s, tm.rollout_s), ("train_s", c.train_s, tm.train_s),
                                    ("sync_s", c.sync_s, tm.sync_s)):
            if not _close(mine, theirs):
                add("colocated-table", where, f"{label} is {mine:.6g} but the instance says {theirs:.6g}")
        lam = cycle_times([colocated_member(c.job, tm, list(c.nodes))]).period
        if not _close(lam, c.iteration_s):
            add("colocated-cycle-time", where, f"reports {c.iteration_s:.6g} s but the schedule gives {lam:.6g} s")
        if lam > job.slo_s * (1 + TOL):
            add("colocated-slo", where, f"cycle time {lam:.1f} s exceeds the SLO {job.slo_s:.1f} s by {lam - job.slo_s:.1f} s")
    _used(inst, plan, counted, add)
