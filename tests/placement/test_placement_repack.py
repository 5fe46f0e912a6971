"""The re-pack admission move (``Packer.admit_repack``) and the trace moving running members.

Admission: a big job's pinned group takes small jobs at +16 $/h each (rollout nodes of two, the
big job's size) where the small jobs together fit one cheap group; the three moves cannot undo
that, re-packing the joined group can. The trace: a placer that moves a running member to another
group makes it leave at the end of its iteration and run its remaining iterations there, the
move's wait counted in the iteration it interrupts; a pinned group built with several members at
once gives each its own rollout node."""

from __future__ import annotations

import pytest

from formulation.placement.evaluate import Index
from formulation.placement.greedy import REPACK, Packer, arrival_order
from formulation.placement.instance import PlacementInstance, PlacementJob, PoolType
from simulator.groups import TailProfile
from simulator.profiles import PhaseProfile
from simulator.trace import PoolConfig, TraceJob, TraceSim


def _inst() -> PlacementInstance:
    big = PlacementJob(name="big", slo_s=200.0, rollout_s={"A": {2: 160.0}}, train_s={"B": {2: 30.0}}, arrival_s=0.0)
    small = [PlacementJob(name=f"s{i}", slo_s=200.0, rollout_s={"A": {1: 60.0, 2: 50.0}}, train_s={"B": {1: 15.0, 2: 10.0}},
                          arrival_s=1.0 + i) for i in range(3)]
    return PlacementInstance(pool_types={"A": PoolType(price_per_gpu_hour=1.0, dram_gb=1000, count=16),
                                         "B": PoolType(price_per_gpu_hour=2.0, dram_gb=1000, count=16)}, jobs=[big] + small)


def _online(idx: Index, repack: bool):
    pk = Packer(idx)
    moves = [(pk.admit_repack(j) if repack else pk.admit(j)).move for j in arrival_order(idx)]
    sol = pk.solution()
    return sol, moves


def test_repack_undoes_the_big_groups_expensive_joins():
    idx = Index(_inst())
    weave, wm = _online(idx, repack=False)
    rp, rm = _online(idx, repack=True)
    assert wm == ["new-group"] + ["extend-rollout-pool"] * 3  # each small job on two rollout nodes of its own
    assert weave.cost(idx) == pytest.approx(96.0)
    assert REPACK in rm
    assert rp.cost(idx) == pytest.approx(72.0)  # big alone (48) + the small jobs sharing 1 + 1 nodes (24)
    assert not rp.unplaced
    for g in rp.groups:  # every group is feasible (closed form) and every job placed once
        assert idx.feasible(g.config, g.members)
    assert sorted(j for g in rp.groups for j in g.members) == list(range(idx.n))


def test_repack_never_costs_more_than_the_three_moves_at_each_arrival():
    idx = Index(_inst())
    a, b = Packer(idx), Packer(idx)
    for j in arrival_order(idx):
        before = b.solution().cost(idx)
        best = b.best_move(j).marginal_cost
        b.admit_repack(j)
        assert b.solution().cost(idx) <= before + best + 1e-9
        a.admit(j)
    assert b.solution().cost(idx) <= a.solution().cost(idx) + 1e-9


def _prof(c):
    return PhaseProfile((100.0,), (40.0,), 1.0, TailProfile(0.3, 2, 1.1), 1e6, 64)


def _job(name: str, arrival: float, iters: int) -> TraceJob:
    return TraceJob(name, arrival, iters, 1e9, _prof, lambda c: (1.0, 2.0), PoolConfig("H20", 1, "H800", 1))


class MovingPlacer:
    """Test placer: ``a`` alone in g0; once ``b`` arrives both are in g1 (sharing its rollout node:
    ``a`` arrives there while ``b`` rolls out, and waits for the node)."""

    def __init__(self):
        self.members: list = []
        self.moved = False

    def admit(self, job):
        self.members.append(job)
        self.moved = self.moved or job == "b"
        return True

    def remove(self, job):
        self.members.remove(job)

    def groups(self):
        if self.moved and self.members:
            return {"g1": (PoolConfig("H20", 1, "H800", 1), list(self.members))}
        return {"g0": (PoolConfig("H20", 1, "H800", 1), list(self.members))} if self.members else {}


def test_a_moved_member_finishes_its_iterations_in_its_new_group_and_the_move_counts():
    jobs = [_job("a", 0.0, 6), _job("b", 250.0, 4)]
    res = TraceSim(jobs, MovingPlacer(), {"H20": 1.0, "H800": 2.0}, policy="groups").run()
    assert res.migrations == 1
    for j in jobs:
        rec = res.jobs[j.name]
        assert len(rec.iteration_s) == j.iterations and rec.done_s is not None
    assert "a" in res.groups["g1"].finished  # it ran its last iterations in g1
    # the iteration after the move is measured from a's last iteration end in g0: no time goes uncounted
    a = res.jobs["a"]
    assert sum(a.iteration_s) == pytest.approx(a.done_s - a.admitted_s)
    # g0's pools were held until a left it, then released: g0's span ends when g1 is running
    assert res.group_spans["g0"][1] <= res.group_spans["g1"][1]


class PairPlacer:
    def __init__(self):
        self.members: list = []

    def admit(self, job):
        self.members.append(job)
        return len(self.members) <= 2

    def remove(self, job):
        self.members.remove(job)

    def groups(self):
        return {"g0": (PoolConfig("H20", 1, "H800", 1, 2), list(self.members))} if len(self.members) == 2 else {}


def test_a_pinned_group_built_with_two_members_gives_each_its_own_rollout_node():
    jobs = [_job("a", 0.0, 3), _job("b", 0.0, 3)]
    res = TraceSim(jobs, PairPlacer(), {"H20": 1.0, "H800": 2.0}, policy="groups").run()
    run = res.groups["g0"]
    nodes = {n: m.spec.rollout_nodes for n, m in run._all_members().items()}
    assert nodes["a"] != nodes["b"]


def test_repack_over_two_groups_keeps_online_admission_near_the_offline_optimum():
    """Re-packing only the group a job joins was myopic: on the fourth 13-job window of the Weave-like trace an
    early re-pack saved 24 $/h and left later arrivals no bubble (224 $/h, more than the three moves' 208; the
    proven optimum 184). Trying pairs of groups too keeps each window within Weave's 1.12x of the optimum,
    proven here by column generation (a different method from the greedy admission it judges), and never above
    the three moves; every group feasible (closed form), every job placed once."""
    from formulation.common import SolveOptions
    from formulation.common.status import SolveStatus
    from formulation.placement.solve import solve
    from planner.instances.placement import compile_scenario
    from planner.schema import load_scenario
    from planner.sim import trace_baselines as tb

    sc = load_scenario(tb.SC / "weave-like-60.yaml")
    sc = sc.model_copy(update={"jobs": sorted(sc.jobs, key=lambda j: (j.arrival_s, j.name))[39:52]})
    inst = compile_scenario(sc)
    idx = Index(inst)
    weave, _ = _online(idx, repack=False)
    rp, moves = _online(idx, repack=True)
    opt = solve(inst, SolveOptions(time_limit_s=120, mip_gap=0.0), "colgen")
    assert opt.record.status is SolveStatus.OPTIMAL and not opt.plan.unplaced
    assert REPACK in moves and not rp.unplaced
    assert rp.cost(idx) <= weave.cost(idx) + 1e-9
    assert rp.cost(idx) <= 1.12 * opt.plan.cost_per_hour + 1e-9, (rp.cost(idx), opt.plan.cost_per_hour)
    for g in rp.groups:
        assert idx.feasible(g.config, g.members)
    assert sorted(j for g in rp.groups for j in g.members) == list(range(idx.n))
