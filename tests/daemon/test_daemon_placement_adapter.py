"""The co-execution placement planner behind the daemon's seam: admission moves, re-optimisation
warm-started from the current placement, drift factors in the estimates, judged by the planner's
own solver-free checker."""

from __future__ import annotations

import pytest
from daemonproc import job, write_cluster

pytest.importorskip("formulation.placement.solve")

from formulation.placement.check import check  # noqa: E402
from formulation.placement.evaluate import Index  # noqa: E402
from planner.daemon.adapters.placement import WeavePlacer  # noqa: E402
from planner.daemon.ports import PhaseFactors, Placement, PlanningContext  # noqa: E402
from planner.schema import load_scenario  # noqa: E402
from planner.schema.scenario import JobSpec  # noqa: E402


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    cluster = load_scenario(write_cluster(tmp_path_factory.mktemp("wp")))
    specs = {n: JobSpec.model_validate(job(n, model=m, slo={"ratio_to_solo": 2.0}))
             for n, m in (("a", "qwen2.5-1.5b"), ("b", "qwen2.5-1.5b"), ("c", "qwen2.5-3b"), ("d", "qwen2.5-1.5b"))}
    return cluster, specs


def _admit_all(placer, ctx, names):
    cur = Placement()
    for n in names:
        adm = placer.admit(ctx, cur, n)
        assert adm.placement is not None, adm.reason
        cur = adm.placement
    return cur


def test_admission_fills_bubbles_and_the_checker_accepts_every_step(setup):
    cluster, specs = setup
    placer = WeavePlacer(cluster)
    ctx = PlanningContext(cluster, specs)
    cur = Placement()
    moves = []
    for n in specs:
        adm = placer.admit(ctx, cur, n)
        assert adm.placement is not None, adm.reason
        moves.append(adm.move)
        cur = adm.placement
        inst = placer._instance(ctx, cur.jobs())
        assert check(inst, placer._body(Index(inst), cur)) == []
    assert moves[0] == "new-group" and "fill-bubble" in moves, moves
    assert len(cur.groups) < len(specs), "co-execution: some jobs share a group"
    assert sorted(cur.jobs()) == sorted(specs)
    assert set(placer.predict(ctx, cur)) == set(specs)
    _, bad = placer.evaluate(ctx, cur)
    assert bad == []


def test_drift_factors_break_slos_and_reoptimisation_repairs_them(setup):
    cluster, specs = setup
    placer = WeavePlacer(cluster)
    ctx = PlanningContext(cluster, specs)
    cur = _admit_all(placer, ctx, list(specs))
    shared = next(g for g in cur.groups if len(g.members) > 1)
    slow = PlanningContext(cluster, specs, {m: PhaseFactors(1.9, 1.9) for m in shared.members})
    _, bad = placer.evaluate(slow, cur)
    assert bad and {v.rule for v in bad} == {"slo"} and {v.where for v in bad} <= set(shared.members)
    r = placer.reoptimise(slow, cur, time_limit_s=10)
    fixed, still = placer.evaluate(slow, r.placement)
    assert still == [] and sorted(fixed.jobs()) == sorted(specs), r.reason
    assert r.solver["status"] in ("optimal", "feasible") and r.solver["warm_start"] == "previous-plan"
    # slower jobs cannot be served more cheaply than the same jobs at their estimates: the certified
    # bound of that problem (no move prices, so its bound holds for the $/h of any plan) is below
    # the repaired plan's cost (the online admissions' plan itself need not be optimal)
    free = PlanningContext(cluster, specs, move_price_per_job=0.0)
    base = placer.reoptimise(free, cur, time_limit_s=10)
    assert base.solver["best_bound"] is not None, base.reason
    assert fixed.cost_per_hour >= base.solver["best_bound"] - 1e-6, "slower jobs served below the bound at their estimates"
    assert base.placement.cost_per_hour <= cur.cost_per_hour + 1e-9, "re-optimising from a plan never makes it dearer"


def test_a_job_no_pool_can_serve_is_permanent_and_a_full_fleet_is_not(setup):
    cluster, specs = setup
    placer = WeavePlacer(cluster)
    tight = dict(specs, t=JobSpec.model_validate({**job("t"), "slo": {"iteration_s": 1.0}}))
    adm = placer.admit(PlanningContext(cluster, tight), Placement(), "t")
    assert adm.placement is None and adm.permanent and adm.reason.startswith("slo")
    big = {f"x{i}": JobSpec.model_validate({**job(f"x{i}"), "slo": {"ratio_to_solo": 1.0}}) for i in range(6)}
    ctx = PlanningContext(cluster, big)
    cur = Placement()
    refused = None
    for n in big:
        adm = placer.admit(ctx, cur, n)
        if adm.placement is None:
            refused = adm
            break
        cur = adm.placement
    assert refused is not None and not refused.permanent and refused.reason.startswith("capacity")


def test_moves_are_priced_so_a_small_gain_does_not_reshuffle(setup):
    cluster, specs = setup
    placer = WeavePlacer(cluster)
    ctx = PlanningContext(cluster, specs)
    cur = _admit_all(placer, ctx, list(specs))
    expensive = PlanningContext(cluster, specs, move_price_per_job=1e6)
    r = placer.reoptimise(expensive, cur, time_limit_s=10)
    assert sorted((g.members, g.rollout_nodes, g.train_nodes) for g in r.placement.groups) == \
        sorted((g.members, g.rollout_nodes, g.train_nodes) for g in cur.groups), "no job moves at 1e6 $/h per move"


def test_members_on_rollout_nodes_of_their_own_keep_them_through_admissions_departures_and_the_store(setup):
    """The daemon places as `planner plan` does: members pinned to rollout nodes of their own sharing
    the training pool where that is cheaper. Admissions move no running member, a departure releases
    the leaver's own rollout node (the group gets cheaper) and nobody else's, and the placement
    round-trips through the store's JSON."""
    import json

    from planner.daemon.ports import moved_jobs

    cluster, specs = setup
    placer = WeavePlacer(cluster)
    ctx = PlanningContext(cluster, specs)
    cur = Placement()
    for n in specs:
        adm = placer.admit(ctx, cur, n)
        assert adm.placement is not None, adm.reason
        assert not {j: how for j, how in moved_jobs(cur, adm.placement).items() if how == "moved"}, adm.move
        cur = adm.placement
    assert Placement.from_dict(json.loads(json.dumps(cur.as_dict()))) == cur
    shared = [g for g in cur.groups if g.pinned and len(g.members) >= 2]
    assert shared, [g.as_dict() for g in cur.groups]
    g = shared[0]
    assert len({n for m in g.members for n in g.rollout_of(m)}) == len(g.members) * len(g.rollout_of(g.members[0]))
    _, bad = placer.evaluate(ctx, cur)
    assert bad == []
    leaver = g.members[0]
    after, bad = placer.evaluate(ctx, cur.without({leaver}))
    assert bad == []
    g2 = next(x for x in after.groups if x.id == g.id)
    assert set(g.rollout_of(leaver)).isdisjoint(g2.rollout_nodes)
    assert {m: g2.rollout_of(m) for m in g2.members} == {m: g.rollout_of(m) for m in g.members if m != leaver}
    assert g2.cost_per_hour < g.cost_per_hour
    assert moved_jobs(cur, after) == {}


def test_a_departure_from_a_pinned_group_is_decided_at_the_cheaper_cost(setup):
    """The departure decision's cost after is the plan's as the placer prices it: a member leaving a
    pinned group releases its own rollout node, so the plan gets cheaper by that node."""
    from planner.daemon import solve
    from planner.daemon.lifecycle import JobState
    from planner.daemon.ports import Observation
    from planner.daemon.store import JobRecord

    cluster, specs = setup
    placer = WeavePlacer(cluster)
    ctx = PlanningContext(cluster, specs)
    cur = _admit_all(placer, ctx, list(specs))
    g = next(x for x in cur.groups if x.pinned and len(x.members) >= 2)
    leaver = g.members[-1]
    jobs = {n: JobRecord(n, {}, JobState.RUNNING, 0.0, 0.0, 0.0, 0.0, None, None, "", None, i) for i, n in enumerate(specs)}
    obs = Observation()
    obs.finished[leaver] = "done"
    out = solve.departures(jobs, cur, obs, reprice=lambda p: placer.evaluate(ctx, p)[0])
    (d,) = out.decisions
    assert d.kind == "departure" and leaver not in out.target.jobs() and d.cost_after == out.target.cost_per_hour
    pool = placer.pools[g.rollout_type]  # the released nodes' price, from the fleet (not from the placer's evaluation)
    node_cost = len(g.rollout_of(leaver)) * pool.gpus_per_node * pool.price_per_gpu_hour
    assert node_cost > 0 and out.target.cost_per_hour == pytest.approx(cur.cost_per_hour - node_cost)
    unpriced = solve.departures(jobs, cur, obs)
    assert unpriced.target.cost_per_hour > out.target.cost_per_hour  # without the placer the freed node is still counted
