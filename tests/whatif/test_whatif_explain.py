"""Minimum counts, one node fewer, binding constraints and the checker, against exhaustive search."""

from __future__ import annotations

import pytest

from formulation.capacity.check import check
from formulation.capacity.explain import binding, least_overshoot, minimum_for, minimum_nodes, relaxed
from formulation.capacity.plan import build_capacity_plan
from formulation.capacity.solve import solve
from formulation.common import SolveOptions, SolveStatus
from formulation.placement.check import check as check_placement
from tests.whatif.whatif_helpers import capacity_instance, feasible_groups, fewest_nodes, serves

OPTS = SolveOptions(time_limit_s=20, mip_gap=0.0)
CASES = [(2, 6, (6, 6), False), (3, 6, (6, 6), True), (11, 6, (6, 6), True)]


@pytest.fixture(scope="module", params=CASES, ids=[f"seed{c[0]}" for c in CASES])
def case(request):
    seed, n, limits, both = request.param
    inst = capacity_instance(seed, n, limits=limits, both_types=both)
    return inst, solve(inst, OPTS)


def test_minimum_counts_match_the_exhaustive_search(case):
    inst, res = case
    for t in inst.types:
        n, proven, low = minimum_nodes(inst, t, OPTS)
        assert n == fewest_nodes(inst, t) and proven and low == n
        # beside the chosen fleet's other nodes
        m = minimum_for(inst, t, OPTS, others=dict(res.fleet))
        assert m.min_nodes == fewest_nodes(inst, t, limits={u: res.fleet[u] for u in inst.types if u != t})


def test_one_node_fewer_reports_the_least_overshoot(case):
    inst, res = case
    t = max(inst.types, key=lambda u: res.fleet[u])
    limits = dict(res.fleet)
    limits[t] -= 1
    assert not serves(feasible_groups(inst), len(inst.placement.jobs), tuple(limits[u] for u in inst.types))
    ov = least_overshoot(inst, limits, OPTS)
    if ov.max_over_s is None:
        assert ov.cannot_run
        return
    assert ov.misses and ov.max_over_s > 0
    # the placement reported: on the reduced fleet, every job within its SLO plus the overshoot (placement checker, Howard)
    fleet_inst = relaxed(inst, ov.max_over_s + 1e-6).with_fleet(limits)
    assert check_placement(fleet_inst, ov.placement) == []
    slo = {j.name: j.slo_s for j in inst.placement.jobs}
    cycles = {m.job: m.cycle_time_s for g in ov.placement.groups for m in g.members}
    assert {m.job for m in ov.misses} == {j for j, c in cycles.items() if c > slo[j] * (1 + 1e-6)}
    for m in ov.misses:
        assert m.over_s == pytest.approx(cycles[m.job] - slo[m.job])
    # and no placement overshoots by less (to the bisection's tolerance)
    tol = max(1.0, 0.01 * ov.max_over_s)
    smaller = relaxed(inst, max(0.0, ov.max_over_s - tol - 1e-6))
    assert not serves(feasible_groups(smaller), len(inst.placement.jobs), tuple(limits[u] for u in inst.types))


def test_binding_availability_and_budget():
    inst = capacity_instance(2, 6, limits=(3, 2))
    res = solve(inst, OPTS)
    plan = build_capacity_plan(inst, res)
    kinds = {(b.kind, b.where) for b in binding(inst, res, plan)}
    full = [t for t in inst.types if res.used[t] == inst.limit(t)]
    assert full and all(("availability", f"type={t}") in kinds for t in full)
    tight = inst.model_copy(update={"budget_per_hour": res.cost_per_hour + 1.0})
    res2 = solve(tight, OPTS)
    assert ("budget", "fleet") in {(b.kind, b.where) for b in binding(tight, res2, build_capacity_plan(tight, res2))}


def test_checker_names_what_a_tampered_plan_breaks():
    inst = capacity_instance(2, 6, limits=(6, 6), owned=(1, 0), budget=200.0)
    res = solve(inst, OPTS)
    plan = build_capacity_plan(inst, res)
    assert check(inst, plan) == []
    rules = lambda p: {v.rule for v in check(inst, p)}  # noqa: E731
    small = plan.model_copy(deep=True)
    line = next(f for f in small.fleet if f.used > 1)
    line.total, line.new = line.used - 1, line.used - 1 - line.owned
    assert {"placement:pool-nodes", "cost"} <= rules(small)
    cheap = plan.model_copy(deep=True)
    cheap.cost_per_hour -= 1
    assert "cost" in rules(cheap)
    over = plan.model_copy(deep=True)
    over.fleet[0].total = over.fleet[0].limit + 1
    assert "fleet" in rules(over)
    # a type bought without limit reports none; a plan that reports the compiler's bound, or none for a
    # type with a limit, is refused
    t = plan.fleet[0].gpu_type
    free = inst.model_copy(update={"unlimited": [t]})
    assert "fleet" in {v.rule for v in check(free, plan)}
    unlimited = plan.model_copy(deep=True)
    unlimited.fleet[0].limit = None
    assert check(free, unlimited) == [] and "fleet" in rules(unlimited)
    poor = inst.model_copy(update={"budget_per_hour": plan.cost_per_hour - 1})
    assert "budget" in {v.rule for v in check(poor, plan)}
    solo = plan.model_copy(deep=True, update={"style": "solo-disaggregated"})
    assert ("style" in rules(solo)) == any(len(g.members) > 1 for g in plan.placement.groups)
    colo = solve(inst, OPTS, "colocated")
    cplan = build_capacity_plan(inst, colo)
    assert check(inst, cplan) == []
    slow = cplan.model_copy(deep=True)
    slow.colocated[0].slo_s = 1.0
    slow.colocated[0].iteration_s += 1.0
    assert "colocated-cycle-time" in rules(slow)


@pytest.mark.parametrize("style", ["co-execution", "solo-disaggregated", "colocated"])
@pytest.mark.parametrize("n_jobs", [0, 3])
def test_owned_nodes_over_the_budget_serve_nothing_in_every_style(style, n_jobs):
    """With no jobs the over-budget owned fleet was an optimal empty answer (nothing left out)."""
    from formulation.capacity.plan import style_line

    inst = capacity_instance(2, max(n_jobs, 1), limits=(6, 6), owned=(2, 0))
    inst = inst.model_copy(update={"placement": inst.placement.model_copy(update={"jobs": inst.placement.jobs[:n_jobs]}),
                                   "budget_per_hour": inst.owned_cost() - 1.0})
    res = solve(inst, OPTS, style)
    assert not res.served and res.status.value == "infeasible"
    assert "the owned nodes alone cost" in res.note
    assert style_line(res, inst).cost_per_hour is None
    if n_jobs == 0:  # a budget of exactly the owned nodes' cost holds them
        ok = solve(inst.model_copy(update={"budget_per_hour": inst.owned_cost()}), OPTS, style)
        assert ok.served and ok.status.value == "optimal" and ok.cost_per_hour == inst.owned_cost()


def test_a_type_the_other_nodes_can_do_without_reads_as_one_sentence():
    """An owned type the fleet uses but need not (its minimum beside the fleet's other nodes is 0):
    the line read "meeting every SLO needs the forecast needs no A node"."""
    from formulation.capacity.explain import minimums

    inst = capacity_instance(1, 2, limits=(6, 6), owned=(6, 6), both_types=True)
    res = solve(inst, OPTS)
    zero = [m for m in minimums(inst, res, OPTS) if m.min_nodes == 0]
    assert zero, "the case needs a used type whose minimum beside the fleet's other nodes is 0"
    for m in zero:
        assert m.message == f"with the fleet's other nodes, meeting every SLO needs no {m.gpu_type} node"


def test_the_solve_record_of_an_optimum_proven_by_the_lp_bound_reads_as_such():
    """Proven by the LP bound alone (no ladder), the record read "optimality proven over None
    enumerated patterns; integer master: " (capacity-plan.yaml's solver.message)."""
    res = solve(capacity_instance(1, 4), OPTS, "co-execution")
    assert res.record is not None and res.record.status == SolveStatus.OPTIMAL
    msg = res.record.message
    assert "None" not in msg and not msg.endswith(": ")
    assert "optimality proven by the LP bound" in msg


def test_colocated_names_a_type_none_can_be_had_of_as_such():
    """A type with max_nodes 0 and none owned was said to have jobs "miss their SLO colocated on it"."""
    inst = capacity_instance(1, 3, limits=(0, 6))
    res = solve(inst, OPTS, "colocated")
    assert "A: none owned and none can be bought (max_nodes 0)" in res.note
    assert "A: 3 job(s) miss their SLO" not in res.note
