"""Regression tests for the four bugs of issue 12 (explanations, leftovers, plan space, admit)."""

from __future__ import annotations

import copy

import pytest
import yaml

from formulation.common import SolveOptions
from formulation.placement import solve as solve_mod
from formulation.placement.check import check
from formulation.placement.evaluate import Index, Solution
from formulation.placement.explain import explain, placeable_alone
from formulation.placement.instance import PlacementInstance, PlacementJob, PoolType
from formulation.placement.plan import PlacementPlan
from formulation.placement.solve import solve
from planner.instances.placement import dump_instance
from tests.conftest import run_cli


def _slo_only_where_dram_does_not_fit() -> PlacementInstance:
    # x meets its SLO only with its rollout on A (40 + 40 <= 100), whose nodes lack the DRAM for it;
    # on B (where its DRAM fits) its rollout is too slow (90 + 40 > 100)
    pools = {"A": PoolType(gpus_per_node=1, price_per_gpu_hour=1.0, dram_gb=100, count=2),
             "B": PoolType(gpus_per_node=1, price_per_gpu_hour=2.0, dram_gb=1000, count=2)}
    jobs = [PlacementJob(name="x", slo_s=100, rollout_s={"A": {1: 40}, "B": {1: 90}}, train_s={"B": {1: 40}}, dram_rollout_node_gb=500),
            PlacementJob(name="y", slo_s=100, rollout_s={"A": {1: 40}}, train_s={"B": {1: 40}})]
    return PlacementInstance(name="bug1", pool_types=pools, jobs=jobs)


# --------------------------------------------------------------------------- bug 1: IndexError
@pytest.mark.parametrize("backend", ["colgen", "greedy", "cpsat"])
def test_a_job_meeting_its_slo_only_where_its_dram_does_not_fit_is_explained(backend):
    inst = _slo_only_where_dram_does_not_fit()
    res = solve(inst, SolveOptions(time_limit_s=10), backend)
    assert check(inst, res.plan) == []
    assert [u.job for u in res.plan.unplaced] == ["x"]
    u = res.plan.unplaced[0]
    assert u.reason == "dram" and "500.0 GB per A rollout node" in u.message
    assert "raise its SLO to at least 130 s" in u.fix  # 90 + 40 on the B rollout node, where it fits


def test_plan_and_admit_commands_explain_it_and_exit_2(tmp_path):
    inst = _slo_only_where_dram_does_not_fit()
    src = tmp_path / "inst.yaml"
    src.write_text(dump_instance(inst))
    proc = run_cli("plan", str(src), "--time-limit", "5")
    assert proc.returncode == 2, proc.stderr
    assert "internal error" not in proc.stderr and "Traceback" not in proc.stderr
    assert "job x" in proc.stderr and "dram" in proc.stderr


# --------------------------------------------------------------------------- bug 2: leftovers
def test_a_job_left_out_that_fits_the_free_nodes_is_placed_before_explaining(monkeypatch):
    pools = {"A": PoolType(gpus_per_node=1, price_per_gpu_hour=1.0, dram_gb=100, count=3),
             "B": PoolType(gpus_per_node=1, price_per_gpu_hour=2.0, dram_gb=100, count=3)}
    jobs = [PlacementJob(name=f"j{i}", slo_s=100, rollout_s={"A": {1: 60}}, train_s={"B": {1: 30}}) for i in range(2)]
    inst = PlacementInstance(name="bug2", pool_types=pools, jobs=jobs)
    real = solve_mod.warm_start

    def dropping(idx, cur, *deadline):  # a solver that leaves j1 out although a free A and B node remain
        sol, name = real(idx, cur, *deadline)
        keep = [g for g in sol.groups if 1 not in g.members]
        return Solution(keep, [1]), name

    monkeypatch.setattr(solve_mod, "warm_start", dropping)
    res = solve(inst, SolveOptions(time_limit_s=5), "greedy")
    assert res.plan.unplaced == [] and check(inst, res.plan) == []
    assert sorted(m.job for g in res.plan.groups for m in g.members) == ["j0", "j1"]


def test_explain_never_reports_a_shortage_of_nothing():
    pools = {"A": PoolType(gpus_per_node=1, price_per_gpu_hour=1.0, dram_gb=100, count=3),
             "B": PoolType(gpus_per_node=1, price_per_gpu_hour=2.0, dram_gb=100, count=3)}
    inst = PlacementInstance(name="n", pool_types=pools,
                             jobs=[PlacementJob(name="j", slo_s=100, rollout_s={"A": {1: 60}}, train_s={"B": {1: 30}})])
    idx = Index(inst)
    for free in ({"A": 3, "B": 3}, {"A": 0, "B": 3}, {"A": 1, "B": 0}):
        u = explain(idx, 0, free)
        assert "nothing" not in u.message and "nothing" not in u.fix
    assert "short by 1 node(s) of A" in explain(idx, 0, {"A": 0, "B": 3}).message


# --------------------------------------------------------------------------- bug 3: plan space
def _two_big_jobs() -> PlacementInstance:
    # two 600 GB jobs cannot share a 1,000 GB rollout node: on whole pools they need two groups (32 $/h)
    pools = {"A": PoolType(gpus_per_node=8, price_per_gpu_hour=1.0, dram_gb=1000, count=2),
             "B": PoolType(gpus_per_node=8, price_per_gpu_hour=1.0, dram_gb=1000, count=2)}
    jobs = [PlacementJob(name=n, slo_s=100, rollout_s={"A": {1: 30, 2: 20}}, train_s={"B": {1: 20}}, dram_rollout_node_gb=600)
            for n in ("p", "q")]
    return PlacementInstance(name="bug3", pool_types=pools, jobs=jobs)


def test_the_checker_accepts_only_whole_pool_plans_so_the_bound_holds_for_every_accepted_plan():
    inst = _two_big_jobs()
    res = solve(inst, SolveOptions(time_limit_s=10, mip_gap=0.0), "colgen")
    assert check(inst, res.plan) == []
    assert res.plan.cost_per_hour == pytest.approx(32.0) and res.record.status.value == "optimal"
    assert res.record.best_bound == pytest.approx(32.0)
    # the 24 $/h plan of the issue: one group, 2 rollout nodes, each job pinned to one of them,
    # sharing one training node -- outside the plan space: the checker rejects it
    p = copy.deepcopy(res.plan)
    g0, g1 = p.groups
    r_nodes = g0.rollout_pool.nodes + g1.rollout_pool.nodes
    g0.rollout_pool.nodes, g0.rollout_pool.size, g0.rollout_pool.gpus = r_nodes, 2, 16
    moved = g1.members[0]
    moved.train_nodes = list(g0.train_pool.nodes)
    g0.members[0].rollout_nodes = [r_nodes[0]]
    moved.rollout_nodes = [r_nodes[1]]
    g0.members.append(moved)
    g0.order.append(moved.job)
    g0.cost_per_hour = 24.0
    p.groups = [g0]
    p.cost_per_hour = 24.0
    vs = check(inst, PlacementPlan.model_validate(p.model_dump()))
    pins = [v for v in vs if v.rule == "pins"]
    assert pins and "whole pools" in pins[0].message


# --------------------------------------------------------------------------- bug 4: admit "pending"
def test_admit_keeps_the_reason_of_a_job_that_fits_nowhere(tmp_path):
    pools = {"A": PoolType(gpus_per_node=1, price_per_gpu_hour=1.0, dram_gb=100, count=4),
             "B": PoolType(gpus_per_node=1, price_per_gpu_hour=2.0, dram_gb=100, count=4)}
    job = lambda n, **kw: PlacementJob(name=n, slo_s=100, rollout_s={"A": {1: 40}}, train_s={"B": {1: 30}}, **kw)  # noqa: E731
    inst = PlacementInstance(name="bug4", pool_types=pools, jobs=[job("a"), job("huge", dram_rollout_node_gb=500), job("late"), job("later")])
    first = inst.model_copy(update={"jobs": inst.jobs[:2]})
    assert not placeable_alone(Index(inst))[1] and placeable_alone(Index(inst))[[0, 2, 3]].all()
    (tmp_path / "first.yaml").write_text(dump_instance(first))
    (tmp_path / "all.yaml").write_text(dump_instance(inst))
    base, after = tmp_path / "base.yaml", tmp_path / "after.yaml"
    proc = run_cli("plan", str(tmp_path / "first.yaml"), "--allow-unplaced", "--out", str(base), "--time-limit", "5")
    assert proc.returncode == 0, proc.stderr
    proc = run_cli("admit", str(tmp_path / "all.yaml"), "--current", str(base), "--job", "late", "--out", str(after))
    assert proc.returncode == 0, proc.stderr
    body = PlacementPlan.model_validate(yaml.safe_load(after.read_text())["body"])
    why = {u.job: u for u in body.unplaced}
    assert why["huge"].reason == "dram" and "--job" not in why["huge"].fix
    assert why["later"].reason == "pending" and "--job later" in why["later"].fix
    assert check(inst, body) == []


def test_plan_text_is_what_plandoc_writes():
    from planner import plandoc
    from planner.commands._placement import plan_text

    inst = _two_big_jobs()
    res = solve(inst, SolveOptions(time_limit_s=5), "colgen")
    record = res.record.as_dict()
    doc = plandoc.PlanDocument(kind="PlacementPlan", scenario="s", scenario_digest="d", solver=plandoc.SolverRecord(**record),
                               body=res.plan.model_dump(mode="json"))
    for fmt in ("json", "yaml"):
        assert plan_text(res.plan, record, "s", "d", fmt) == plandoc.dumps(doc, fmt)


def test_a_plan_model_rounds_as_its_dump_for_plans_with_unplaced_and_moved_jobs():
    """plandoc._round reading a plan's fields in one walk (no dump) against pydantic's dump rounded,
    on a plan with unplaced jobs, a bound, moved members and models built without validation."""
    from benchmarks.placement.generate import generate_distinct
    from formulation.placement.plan import Unplaced
    from planner import plandoc

    inst = generate_distinct(40, 3, unplaceable=0.1)
    res = solve(inst, SolveOptions(time_limit_s=3), "auto")
    plan = res.plan
    assert plan.unplaced and plan.groups and plan.lower_bound_per_hour is not None
    plan.groups[0].members[0].moved = True
    plan.moved_jobs = [plan.groups[0].members[0].job]
    plan.unplaced.append(Unplaced(job="x", reason="pending", message="m", fix="f"))
    assert plandoc._round(plan) == plandoc._round(plan.model_dump(mode="json"))
    plan.greedy_cost_per_hour = 1 / 3
    assert plandoc._round(plan) == plandoc._round(plan.model_dump(mode="json"))


def test_status_line_shows_phase_plan_bound_and_gap_after_two_seconds(monkeypatch):
    import io
    import sys

    from planner.commands.plan import _status_line

    buf = io.StringIO()
    monkeypatch.setattr(sys, "stderr", buf)
    line = _status_line()
    line("local search", 120.0, 100.0)  # within the first 2 s: quiet
    assert buf.getvalue() == ""
    line.t0 -= 5.0
    line("local search", 120.0, 100.0)
    line("column generation round 3 (LP 99)", None, None)
    line.done()
    out = buf.getvalue()
    assert "local search: plan 120.00 $/h, bound 100.00, gap 16.7%" in out and out.endswith("\n")
    assert "column generation round 3" in out


def test_plan_writes_no_status_line_when_stderr_is_not_a_terminal(tmp_path):
    inst = _two_big_jobs()
    src = tmp_path / "inst.yaml"
    src.write_text(dump_instance(inst))
    proc = run_cli("plan", str(src), "--time-limit", "3", "--out", str(tmp_path / "p.json"))
    assert proc.returncode == 0, proc.stderr
    assert "\r" not in proc.stderr
