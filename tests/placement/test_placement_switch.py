"""Warm switches of shared groups: the instance fields, every backend's plan, and the checker."""

from __future__ import annotations

from pathlib import Path

import pytest

from formulation.common import SolveOptions
from formulation.placement.check import check
from formulation.placement.instance import PlacementInstance, PlacementJob, PoolType
from formulation.placement.solve import solve

ROOT = Path(__file__).resolve().parents[2]


def two_jobs(sw_r: float, sw_t: float, slo: float = 130.0) -> PlacementInstance:
    """Two jobs whose phases interleave (100/20 and 20/100 s): sharing one pair of nodes costs half
    of two groups; with switches the shared cycle is 120 + 2 max(sw_r, sw_t)."""
    pools = {"A": PoolType(price_per_gpu_hour=1.0, dram_gb=1024, count=2), "B": PoolType(price_per_gpu_hour=1.0, dram_gb=1024, count=2)}

    def job(name, a, b):
        return PlacementJob(name=name, slo_s=slo, rollout_s={"A": {1: a}}, train_s={"B": {1: b}},
                            rollout_switch_s={"A": {1: sw_r}}, train_switch_s={"B": {1: sw_t}})
    return PlacementInstance(name="switch", pool_types=pools, jobs=[job("x", 100.0, 20.0), job("y", 20.0, 100.0)])


@pytest.mark.parametrize("backend", ["greedy", "colgen", "highs", "cpsat", "fast"])
def test_every_backend_plans_the_switches_of_a_shared_group(backend):
    inst = two_jobs(2.0, 3.0)  # shared cycle max(124, 126, 120) = 126 <= 130
    plan = solve(inst, SolveOptions(time_limit_s=20), backend).plan
    assert check(inst, plan) == []
    assert len(plan.groups) == 1
    g = plan.groups[0]
    assert g.cycle_time_s == pytest.approx(126.0)
    assert all(m.cycle_time_s == pytest.approx(126.0) and m.train_switch_s == pytest.approx(3.0) for m in g.members)


@pytest.mark.parametrize("backend", ["greedy", "colgen", "highs", "cpsat", "fast"])
def test_switches_that_break_the_slo_split_the_group(backend):
    inst = two_jobs(2.0, 6.0)  # shared: 120 + 12 = 132 > 130, so each job alone (120 s, no switch)
    plan = solve(inst, SolveOptions(time_limit_s=20), backend).plan
    assert check(inst, plan) == []
    assert not plan.unplaced and len(plan.groups) == 2
    assert sorted(g.cycle_time_s for g in plan.groups) == pytest.approx([120.0, 120.0])


def test_the_checker_recomputes_the_switches_itself():
    inst = two_jobs(2.0, 3.0)
    plan = solve(inst, SolveOptions(time_limit_s=20), "greedy").plan
    g = plan.groups[0]
    # a plan that reports the cycle without the switches (the old model) is caught ...
    short = plan.model_copy(deep=True)
    short.groups[0].cycle_time_s = 120.0
    for m in short.groups[0].members:
        m.cycle_time_s = 120.0
    assert {v.rule for v in check(inst, short)} == {"cycle-time"}
    # ... and so is one whose switch seconds are not the instance's (the cycle then follows them)
    zero = plan.model_copy(deep=True)
    for m in zero.groups[0].members:
        m.rollout_switch_s = m.train_switch_s = 0.0
    rules = {v.rule for v in check(inst, zero)}
    assert "phase-times" in rules
    assert g.cycle_time_s == pytest.approx(126.0)


def test_instance_files_without_switch_fields_still_load():
    from planner.instances.placement_files import load_instance

    inst = load_instance(ROOT / "scenarios" / "instances" / "placement-small.yaml")
    assert inst.jobs and all(j.rollout_switch_s == {} and j.train_switch_s == {} for j in inst.jobs)
    assert inst.jobs[0].switches("H20", 1, "H800", 1) == (0.0, 0.0)


def test_a_switch_table_on_an_unknown_gpu_type_is_refused():
    with pytest.raises(ValueError, match="rollout_switch_s"):
        PlacementInstance(pool_types={"A": PoolType(price_per_gpu_hour=1.0, dram_gb=1, count=1)},
                          jobs=[PlacementJob(name="x", slo_s=10, rollout_s={"A": {1: 1}}, train_s={"A": {1: 1}},
                                             rollout_switch_s={"Z": {1: 1.0}})])
