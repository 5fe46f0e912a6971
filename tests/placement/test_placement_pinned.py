"""Members pinned to node subsets: each member on rollout nodes of its own, the training pool shared.

The oracle (``placement_helpers``) decides every group with Howard's cycle times on the members'
pins and DRAM per node, over the widened plan space (whole pools, or pinned configurations of up
to ``pinned_members_max`` members); the solvers use the closed form. Rollout-heavy jobs (training
a third of the rollout, as in Weave's production mix) are where pinned groups pay.
"""

from __future__ import annotations

import pytest

from formulation.common import SolveOptions
from formulation.placement.check import check
from formulation.placement.cycle import Member, cycle_times
from formulation.placement.evaluate import Index
from formulation.placement.greedy import Packer
from formulation.placement.plan import config_of
from formulation.placement.solve import solve
from tests.placement.placement_helpers import oracle, penalty, small_instance

CASES = [21, 24]  # seeds: 7 rollout-heavy jobs, 8 A + 4 B nodes; the widened optimum is below the whole-pool one


def _inst(seed: int, pinned: int = 8):
    return small_instance(seed, 7, capacity=(8, 4), dram_gb=(2048.0, 2048.0), rollout_heavy=0.3, pinned_members_max=pinned)


def _pinned_groups(plan):
    return [g for g in plan.groups if any(set(m.rollout_nodes) != set(g.rollout_pool.nodes) for m in g.members)]


@pytest.fixture(scope="module")
def optima():
    out = {}
    for seed in CASES:
        inst = _inst(seed)
        out[seed] = (inst, oracle(inst), oracle(_inst(seed, pinned=0)))
    return out


def test_the_widened_space_is_cheaper_than_whole_pools(optima):
    for seed, (_, (best, unplaced), (whole, unplaced0)) in optima.items():
        assert unplaced == unplaced0 == 0
        assert best < whole - 1e-9, (seed, best, whole)


@pytest.mark.parametrize("backend", ["colgen", "highs", "cpsat"])
@pytest.mark.parametrize("seed", CASES)
def test_exact_backends_find_the_widened_optimum(optima, seed, backend):
    inst, (best, _), _ = optima[seed]
    res = solve(inst, SolveOptions(time_limit_s=30, mip_gap=0.0), backend)
    assert check(inst, res.plan) == [], backend
    got = res.plan.cost_per_hour + penalty(inst) * len(res.plan.unplaced)
    assert got == pytest.approx(best, rel=1e-9), (backend, got, best)
    assert res.record.status.value == "optimal"
    assert res.record.best_bound is not None and res.record.best_bound <= best + 1e-6
    assert _pinned_groups(res.plan), "the optimum needs a pinned group here"


@pytest.mark.parametrize("backend", ["greedy", "fast"])
@pytest.mark.parametrize("seed", CASES)
def test_heuristic_backends_are_valid_and_their_bounds_hold(optima, seed, backend):
    inst, (best, _), _ = optima[seed]
    res = solve(inst, SolveOptions(time_limit_s=5, mip_gap=0.0), backend)
    assert check(inst, res.plan) == [], backend
    got = res.plan.cost_per_hour + penalty(inst) * len(res.plan.unplaced)
    assert got >= best - 1e-9
    if res.plan.lower_bound_per_hour is not None:
        assert res.plan.lower_bound_per_hour <= best + 1e-6
    if res.record.status.value == "optimal":
        assert got == pytest.approx(best, rel=1e-9)


@pytest.mark.parametrize("seed", CASES)
def test_pinned_groups_run_at_their_planned_cycle_in_the_group_simulator(optima, seed):
    """The plan's cycle time (closed form on pinned configurations, Howard in the plan body) against
    the event-by-event group run on the same pins and phase times: within 5% per group and member."""
    from simulator.groups import GroupSpec, MemberSpec, run_group

    inst, _, _ = optima[seed]
    plan = solve(inst, SolveOptions(time_limit_s=30, mip_gap=0.0), "colgen").plan
    for g in _pinned_groups(plan):
        specs = tuple(MemberSpec(name=m.job, rollout_s=m.rollout_s, train_s=m.train_s, sync_s=m.sync_s,
                                 rollout_nodes=tuple(m.rollout_nodes), train_nodes=tuple(m.train_nodes),
                                 rollout_switch_s=m.rollout_switch_s, train_switch_s=m.train_switch_s) for m in g.members)
        run = run_group(GroupSpec(name=g.id, members=specs, rollout_nodes=tuple(g.rollout_pool.nodes),
                                  train_nodes=tuple(g.train_pool.nodes)), iterations=30)
        sim = run.cycle_times(skip=5)
        for m in g.members:
            assert sim[m.job] == pytest.approx(m.cycle_time_s, rel=0.05), (g.id, m.job)
        assert max(sim.values()) == pytest.approx(g.cycle_time_s, rel=0.05)


def _member(name, a, b, r, t, sr=0.0, st=0.0):
    return Member(name, a, b, 0.0, frozenset(r), frozenset(t), sr, st)


def test_cycle_time_on_pins_only_shares_the_rings_of_shared_nodes():
    # two members on rollout nodes of their own, one shared training node: no rollout ring
    res = cycle_times([_member("x", 30.0, 10.0, {"r0"}, {"t0"}, 2.0, 1.0), _member("y", 40.0, 12.0, {"r1"}, {"t0"}, 2.0, 1.0)])
    assert res.period == pytest.approx(max(40.0 + 12.0, 10.0 + 1.0 + 12.0 + 1.0))
    # any mix: x on both rollout nodes, y on one of them -- the shared node's ring holds both
    mix = cycle_times([_member("x", 30.0, 10.0, {"r0", "r1"}, {"t0"}), _member("y", 40.0, 12.0, {"r1"}, {"t0"})])
    assert mix.period == pytest.approx(70.0)


def test_the_checker_reads_pins_and_counts_dram_on_the_pinned_nodes(optima):
    inst, _, _ = optima[CASES[0]]
    plan = solve(inst, SolveOptions(time_limit_s=30, mip_gap=0.0), "colgen").plan
    g = _pinned_groups(plan)[0]
    assert config_of(g).members >= len(g.members) >= 2
    # a pin outside the group's pools
    bad = plan.model_copy(deep=True)
    bg = next(x for x in bad.groups if x.id == g.id)
    bg.members[0].rollout_nodes = ["not-a-node"]
    assert any(v.rule == "pins" for v in check(inst, bad))
    # a member moved onto another member's own rollout node: the ring is shared now, the reported
    # cycle time no longer matches the schedule (and DRAM counts both there)
    moved = plan.model_copy(deep=True)
    mg = next(x for x in moved.groups if x.id == g.id)
    mg.members[1].rollout_nodes = list(mg.members[0].rollout_nodes)
    rules = {v.rule for v in check(inst, moved)}
    assert "cycle-time" in rules or "slo" in rules


def _rollout_bound_jobs(n: int, pinned: int = 8):
    """Jobs whose rollouts do not fit a shared rollout pool within their SLO (60 s on one A node, 55 s
    on two, SLO 100 s) but whose training (20 s) leaves a shared B node room for several."""
    from formulation.placement.instance import PlacementInstance, PlacementJob, PoolType

    pools = {"A": PoolType(gpus_per_node=8, price_per_gpu_hour=1.0, dram_gb=512, count=8),
             "B": PoolType(gpus_per_node=8, price_per_gpu_hour=2.0, dram_gb=512, count=4)}
    jobs = [PlacementJob(name=f"j{i}", slo_s=100.0, rollout_s={"A": {1: 60.0, 2: 55.0}}, train_s={"B": {1: 20.0}},
                         dram_rollout_node_gb=100.0, train_state_gb=100.0) for i in range(n)]
    return PlacementInstance(name="rollout-bound", pool_types=pools, jobs=jobs, pinned_members_max=pinned)


def test_admission_extends_a_lone_members_group_with_nodes_of_the_new_members_own():
    idx = Index(_rollout_bound_jobs(6))
    pk = Packer(idx)
    moves = [pk.admit(j) for j in range(idx.n)]
    assert moves[0].move == "new-group" and not idx.configs[moves[0].config].pinned
    # the training ring holds 5 members (5 x 20 s <= 100 s): each newcomer gets a node of its own
    assert [m.move for m in moves[1:5]] == ["extend-rollout-pool"] * 4
    assert idx.configs[moves[4].config].members == 5 and moves[5].move == "new-group"
    sol = pk.solution()
    assert all(idx.feasible(grp.config, grp.members) for grp in sol.groups)
    assert sol.cost(idx) == pytest.approx(5 * 8 + 16 + 8 + 16)  # against 6 x 24 on pools of their own
    # a member leaving a pinned group takes its rollout node with it
    g = pk.job_group[0]
    before = pk.free["A"]
    pk.remove_job(2)
    assert idx.configs[pk.group_config[g]].members == 4 and pk.free["A"] == before + 1
    # and the group admits a newcomer again on a node of its own
    again = pk.admit(2)
    assert again.move == "extend-rollout-pool" and again.group == g


def test_a_scenario_plan_pins_members_and_the_executor_launches_them_on_their_pins():
    """tiny-2jobs: two small jobs on one H20 node each sharing one H800 node (32 $/h; whole pools
    need 48); the executor's target puts each member's engines on its own node only."""
    from pathlib import Path

    from planner.apply.placement import from_placement
    from planner.instances.placement import compile_scenario
    from planner.schema import load_scenario

    sc = load_scenario(Path(__file__).resolve().parents[2] / "scenarios" / "ci" / "tiny-2jobs.yaml")
    inst = compile_scenario(sc)
    res = solve(inst, SolveOptions(time_limit_s=10, mip_gap=0.0), "auto")
    whole = solve(inst.model_copy(update={"pinned_members_max": 0}), SolveOptions(time_limit_s=10, mip_gap=0.0), "auto")
    assert check(inst, res.plan) == []
    assert res.plan.cost_per_hour < whole.plan.cost_per_hour
    (g,) = res.plan.groups
    pins = {m.job: set(m.rollout_nodes) for m in g.members}
    assert len(pins) == 2 and not (pins["small-a"] & pins["small-b"])
    target = from_placement(res.plan.model_dump(), sc)
    for c in target.components:
        job = c.name.split("/")[0]
        if job in pins and c.name.endswith("/rollout"):
            assert set(c.placement) == pins[job]


def _valid(inst, plan) -> bool:
    """No violated rule but the jobs this test leaves out on purpose."""
    return [v for v in check(inst, plan) if v.rule != "placed-once"] == []


def test_a_group_rebuilt_from_the_current_plan_keeps_each_members_own_rollout_nodes():
    """Extending a pinned group (admission) or shrinking it (a departure) moves no staying member:
    a running member's own rollout nodes are its resident state, whatever their order in the pool."""
    from formulation.placement.evaluate import Config, Group, Solution
    from formulation.placement.plan import build_plan
    from formulation.placement.solve import read_current

    inst = _rollout_bound_jobs(6)
    idx = Index(inst)
    k = {m: idx.config_id[Config("A", 1, "B", 1, m)] for m in (2, 3, 4)}
    plan = build_plan(idx, Solution([Group(k[3], (0, 1, 2))]), [])
    (g,) = plan.groups
    g.members[0].rollout_nodes, g.members[2].rollout_nodes = g.members[2].rollout_nodes, g.members[0].rollout_nodes
    assert _valid(inst, plan)
    before = {m.job: m.rollout_nodes for m in g.members}
    cur = read_current(idx, plan)
    grown = build_plan(idx, Solution([Group(k[4], (0, 1, 2, 3), g.id)]), [], cur.nodes)
    assert _valid(inst, grown)
    pins = {m.job: m.rollout_nodes for m in grown.groups[0].members}
    assert {j: pins[j] for j in before} == before
    assert not set(pins["j3"]) & {n for v in before.values() for n in v}
    shrunk = build_plan(idx, Solution([Group(k[2], (0, 2), g.id)]), [], cur.nodes)
    assert _valid(inst, shrunk)
    (sg,) = shrunk.groups
    assert {m.job: m.rollout_nodes for m in sg.members} == {"j0": before["j0"], "j2": before["j2"]}
    assert set(sg.rollout_pool.nodes) == set(before["j0"]) | set(before["j2"])  # the leaver's node is released
