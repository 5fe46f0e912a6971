"""Known-answer instances built by hand, judged by the solver-free checker and by arithmetic."""

from __future__ import annotations

import pytest

from formulation.common import SolveOptions
from formulation.placement.check import check
from formulation.placement.evaluate import Index
from formulation.placement.greedy import Packer
from formulation.placement.instance import PlacementInstance, PlacementJob, PoolType
from formulation.placement.solve import solve

BACKENDS = ["colgen", "highs", "cpsat"]


def pools(n_a=4, n_b=4, dram=2048.0):
    # 1 GPU per node keeps the $/h arithmetic readable: a node of A costs 1, of B 2
    return {"A": PoolType(gpus_per_node=1, price_per_gpu_hour=1.0, dram_gb=dram, count=n_a),
            "B": PoolType(gpus_per_node=1, price_per_gpu_hour=2.0, dram_gb=dram, count=n_b)}


def job(name, a, b, slo, s=0.0, a2=None, b2=None, dram_r=0.0, state=0.0):
    r = {1: a} | ({2: a2} if a2 else {})
    t = {1: b} | ({2: b2} if b2 else {})
    return PlacementJob(name=name, slo_s=slo, rollout_s={"A": r}, train_s={"B": t}, sync_s={"A": {"B": s}},
                        dram_rollout_node_gb=dram_r, train_state_gb=state)


def run(inst, backend):
    res = solve(inst, SolveOptions(time_limit_s=20), backend)
    assert check(inst, res.plan) == []
    return res


@pytest.mark.parametrize("backend", BACKENDS)
def test_pairs_fill_each_others_bubbles(backend):
    # each job alone: 100 + 100 = 200 s <= 250; two share a group (sums 200, 200); three do not (300 > 250).
    inst = PlacementInstance(name="pairs", pool_types=pools(), jobs=[job(f"j{i}", 100, 100, 250) for i in range(4)])
    res = run(inst, backend)
    assert res.plan.cost_per_hour == pytest.approx(2 * (1 + 2))  # two groups of 1 A + 1 B node
    assert sorted(len(g.members) for g in res.plan.groups) == [2, 2]
    assert res.record.status.value == "optimal"
    assert all(g.cycle_time_s == pytest.approx(200) for g in res.plan.groups)


@pytest.mark.parametrize("backend", BACKENDS)
def test_complementary_jobs_share_and_similar_ones_do_not(backend):
    # rollout-heavy x and training-heavy y fit together (sums 120/120); x with x would need 200 > 150
    jobs = [job("x1", 100, 20, 150), job("y1", 20, 100, 150), job("x2", 100, 20, 150), job("y2", 20, 100, 150)]
    res = run(PlacementInstance(name="comp", pool_types=pools(), jobs=jobs), backend)
    assert res.plan.cost_per_hour == pytest.approx(6)
    for g in res.plan.groups:
        assert sorted(n[0] for n in g.order) == ["x", "y"]


@pytest.mark.parametrize("backend", BACKENDS)
def test_extending_the_rollout_pool_beats_a_new_group(backend):
    # on 1 A node the pair's rollouts take 160 > 150; on 2 A nodes 2 x 45 = 90: one group of 2A+1B
    # (4 $/h) is cheaper than two groups of 1A+1B (6 $/h)
    jobs = [job("p", 80, 60, 150, a2=45), job("q", 80, 60, 150, a2=45)]
    res = run(PlacementInstance(name="ext", pool_types=pools(), jobs=jobs), backend)
    assert res.plan.cost_per_hour == pytest.approx(4)
    (g,) = res.plan.groups
    assert g.rollout_pool.size == 2 and g.train_pool.size == 1


@pytest.mark.parametrize("backend", BACKENDS)
def test_host_dram_limits_the_group(backend):
    # the time fits four per group, but each job keeps 600 GB on the training node of 1 TB: one per node
    jobs = [job(f"j{i}", 10, 10, 1000, state=600) for i in range(3)]
    res = run(PlacementInstance(name="dram", pool_types=pools(dram=1000), jobs=jobs), backend)
    assert len(res.plan.groups) == 3
    assert res.plan.cost_per_hour == pytest.approx(9)


@pytest.mark.parametrize("backend", BACKENDS)
def test_capacity_forces_sharing_at_a_higher_price(backend):
    # one B node only: both jobs must share it; alone each fits 1A+1B, together they need 2 A nodes (45 + 45)
    jobs = [job("p", 80, 60, 150, a2=45), job("q", 80, 60, 150, a2=45)]
    res = run(PlacementInstance(name="cap", pool_types=pools(n_b=1), jobs=jobs), backend)
    assert res.plan.cost_per_hour == pytest.approx(4)


def test_greedy_takes_weaves_moves_in_order():
    # j0 opens a group; j1 fills its bubble (sums 100/160); j2 does not fit the 1-node rollout pool
    # (210 > 200) but does on 2 nodes (30 + 30 + 60): extending (+1 $/h) beats a new group (+3 $/h);
    # j3 would push the training sum to 340 > 320, so it opens a new group
    jobs = [job("j0", 50, 100, 200, a2=30), job("j1", 50, 60, 200, a2=30), job("j2", 110, 30, 200, a2=60),
            job("j3", 150, 150, 320, a2=100)]
    inst = PlacementInstance(name="moves", pool_types=pools(), jobs=jobs)
    idx = Index(inst)
    pk = Packer(idx)
    moves = []
    for j in range(4):
        adm = pk.admit(j)
        moves.append((adm.move, adm.marginal_cost))
    assert moves == [("new-group", 3.0), ("fill-bubble", 0.0), ("extend-rollout-pool", 1.0), ("new-group", 3.0)]
    res = solve(inst, SolveOptions(time_limit_s=10), "greedy")
    assert check(inst, res.plan) == []
    assert res.plan.cost_per_hour == pytest.approx(7)


def test_explanations_say_why_and_by_how_much():
    jobs = [job("ok", 10, 10, 100),
            job("too-tight", 100, 100, 150, a2=70, b2=60),  # best solo: 70 + 60 = 130 ... fits
            job("impossible", 100, 100, 120, a2=70, b2=60),  # best solo 130 > 120 by 10
            job("fat", 10, 10, 100, dram_r=5000.0),  # no rollout node has 5 TB
            job("huge-state", 10, 10, 100, state=9000.0, b2=5)]  # 4500 GB per node even on 2 nodes
    inst = PlacementInstance(name="explain", pool_types=pools(dram=2048), jobs=jobs)
    res = solve(inst, SolveOptions(time_limit_s=10), "colgen")
    assert check(inst, res.plan) == []
    why = {u.job: u for u in res.plan.unplaced}
    assert set(why) == {"impossible", "fat", "huge-state"}
    assert why["impossible"].reason == "slo" and "by 10.0 s" in why["impossible"].message and "130" in why["impossible"].fix
    assert why["fat"].reason == "dram" and "5000.0 GB" in why["fat"].message
    assert why["huge-state"].reason == "dram" and "4500.0 GB" in why["huge-state"].message


def test_fleet_short_by_n_nodes():
    # each job needs its own group (SLO too tight to share: any two share a training node, and two
    # trainings take 120 s > 115 s); 3 jobs, 2 B nodes: short by 1 node of B
    jobs = [job(f"j{i}", 50, 60, 115) for i in range(3)]
    inst = PlacementInstance(name="short", pool_types=pools(n_b=2), jobs=jobs)
    res = solve(inst, SolveOptions(time_limit_s=10), "colgen")
    assert check(inst, res.plan) == []
    (u,) = res.plan.unplaced
    assert u.reason == "capacity" and "short by 1 node(s) of B" in u.message


@pytest.mark.parametrize("backend", BACKENDS + ["greedy"])
def test_edge_cases_no_jobs_and_a_type_without_nodes(backend):
    empty = PlacementInstance(name="empty", pool_types=pools(), jobs=[])
    res = solve(empty, SolveOptions(time_limit_s=5), backend)
    assert res.plan.groups == [] and res.plan.cost_per_hour == 0 and res.record.status.value == "optimal"
    # type A has no nodes: the job can still run both pools on B (1 + 1 B nodes = 4 $/h)
    p = pools(n_a=0)
    j = PlacementJob(name="x", slo_s=100, rollout_s={"A": {1: 10}, "B": {1: 12}}, train_s={"B": {1: 10}})
    inst = PlacementInstance(name="no-a", pool_types=p, jobs=[j])
    res = solve(inst, SolveOptions(time_limit_s=5), backend)
    assert check(inst, res.plan) == []
    assert res.plan.cost_per_hour == pytest.approx(4) and not res.plan.unplaced


def test_greedy_fills_a_bubble_when_the_first_member_has_no_larger_pool():
    """Regression: a group whose member has no time at the family's largest rollout pool was
    marked closed, so every later job opened a new group. j0 runs on one rollout node only;
    j1 also has a 2-node time; both fit one 1+1 group (rollout 50 + 50, training 60 + 60)."""
    jobs = [job("j0", 50, 60, 200), job("j1", 50, 60, 200, a2=30)]
    inst = PlacementInstance(name="bubble", pool_types=pools(), jobs=jobs)
    pk = Packer(Index(inst))
    assert [pk.admit(j).move for j in range(2)] == ["new-group", "fill-bubble"]
    res = solve(inst, SolveOptions(time_limit_s=10), "greedy")
    assert check(inst, res.plan) == [] and res.plan.cost_per_hour == pytest.approx(3)
