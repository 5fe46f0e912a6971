"""The simulator driven by the real planners.

* a planned group's simulated cycle time is within 5% of the cycle time the placement planner
  predicted (its one definition: the maximum cycle ratio of the event graph), with the
  simulator's warm switches added;
* the reallocation planner drives the dynamic policy through the telemetry snapshots;
* the placement planner's online admission places every job of a trace.
"""

from __future__ import annotations


import pytest

from tests.conftest import SCENARIOS

def _weave_plan():
    from formulation.common import SolveOptions
    from formulation.placement.solve import solve
    from planner.instances.placement import compile_scenario
    from planner.schema import load_scenario

    sc = load_scenario(SCENARIOS / "weave-micro.yaml")
    inst = compile_scenario(sc)
    return sc, solve(inst, SolveOptions(time_limit_s=10.0)).plan


def test_planned_group_cycle_time_within_5_percent():
    from estimators import comm
    from simulator.groups import run_group, spec_from_plan_group

    sc, plan = _weave_plan()
    assert plan.groups
    for g in plan.groups:
        # warm switches: bf16 weights (rollout) and a few GB of optimizer state (training) over PCIe
        spec = spec_from_plan_group(g, rollout_switch_s=comm.WARM_FIXED_S + 1.0, train_switch_s=comm.WARM_FIXED_S + 2.0)
        run = run_group(spec, iterations=30)
        sim = max(run.cycle_times(skip=10).values())
        assert sim == pytest.approx(g.cycle_time_s, rel=0.05), (g.id, sim, g.cycle_time_s)
        assert sim >= g.cycle_time_s * (1 - 1e-9)  # switches only add time


def test_disjoint_pins_match_the_event_graph():
    from formulation.placement.cycle import Member, cycle_times
    from simulator.groups import GroupSpec, MemberSpec, run_group

    ms = [("a", 120.0, 40.0, 1.0, ("r0", "r1"), ("t0",)), ("b", 60.0, 90.0, 1.0, ("r1",), ("t0", "t1")),
          ("c", 30.0, 20.0, 0.5, ("r2",), ("t1",))]
    planned = cycle_times([Member(n, a, b, s, frozenset(r), frozenset(t)) for n, a, b, s, r, t in ms])
    run = run_group(GroupSpec("g", tuple(MemberSpec(n, a, b, s, r, t) for n, a, b, s, r, t in ms)), iterations=40)
    for name, ct in run.cycle_times(skip=10).items():
        assert ct == pytest.approx(planned.of(name), rel=0.01), name


def test_reallocation_planner_drives_the_dynamic_policy():
    from planner.instances.simulate import PlannerDecision, cluster_view, job_setup, pick_job
    from planner.schema import load_scenario
    from simulator.job import JobSim
    from simulator.policies import Policy

    sc = load_scenario(SCENARIOS / "dynarl" / "math-7b-64gpu.yaml")
    i, job = pick_job(sc, None)
    setup = job_setup(sc, i, job, cluster_view(sc))
    from dataclasses import replace


    setup = replace(setup, workload=replace(setup.workload, n_prompts=128))  # a quarter of the batch: fast
    dec = PlannerDecision(sc)
    res = JobSim(setup, Policy("dynamic", decision=dec, record_snapshots=True, telemetry_interval_s=2.0), seed=0,
                 iterations=2).run()
    assert dec.calls > 0
    assert all(r.finishes == 1 for r in res.requests)
    # every committed decision was carried out; iteration starts go back to the planned partition
    assert dec.committed <= len(res.decisions) <= dec.committed + dec.restores
    from simulator.job import partition

    init = partition(setup, Policy("static"))
    for it in res.iterations:
        assert res.ledger.held_at("rollout", it.start_s + 1e-6) == init["rollout"]
    snap = res.snapshots[0]
    assert getattr(snap, "nodes", None) is not None and sum(n.gpus for n in snap.nodes) == setup.total_gpus


def test_placement_planner_admits_every_trace_job():
    from planner.instances import simulate as inst
    from planner.schema import load_scenario
    from simulator.trace import TraceSim

    sc = load_scenario(SCENARIOS / "weave-micro.yaml")
    jobs = [__import__("dataclasses").replace(j, iterations=6) for j in inst.trace_jobs(sc)]
    placer = inst.placement_placer(sc, jobs)
    res = TraceSim(jobs, placer, inst.prices(sc), inst.gpus_per_node(sc), node_dram_gb=inst.node_dram_gb(sc)).run()
    assert all(len(r.iteration_s) == 6 and r.done_s is not None for r in res.jobs.values())
    assert all(r.slo_attainment == 1.0 for r in res.jobs.values())
    assert {m for _, m, _, _ in placer.moves} <= {"fill-bubble", "extend-rollout-pool", "new-group"}
