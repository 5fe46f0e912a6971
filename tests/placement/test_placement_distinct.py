"""Distinct jobs (every job different, tight fleets, jobs that fit nowhere) against an exhaustive
oracle, and the fast path's promises: checked plans, a bound that is a proof, never worse than FFD."""

from __future__ import annotations

import os
import time

import numpy as np
import pytest

from formulation.common import SolveOptions, SolveStatus
from formulation.placement.check import check
from formulation.placement.evaluate import Index
from formulation.placement.explain import placeable_alone
from formulation.placement.fast import ffd_order, load_bound, pack, repartition, subset_costs
from benchmarks.placement.generate import generate_distinct
from formulation.placement.greedy import greedy
from formulation.placement.solve import solve
from tests.placement.placement_helpers import distinct_oracle, group_feasible, penalty

CASES = [  # (jobs, seed, nodes per type)
    (8, 1, 3),
    (10, 2, 4),
    (16, 5, 5),
]
if os.environ.get("RL_PLANNER_SLOW") == "1":
    CASES += [(12, 3, 4), (14, 4, 5), (20, 6, 6)]


def _inst(n, seed, cnt):
    return generate_distinct(n, seed, counts={"H20": cnt, "H800": cnt, "A100": cnt, "L40S": cnt}, unplaceable=0.1)


@pytest.fixture(scope="module")
def solved():
    out = {}
    for case in CASES:
        inst = _inst(*case)
        # colgen stops when it has proven the optimum (seconds on an idle machine); its limit is only
        # reached on failure, so it is generous for a loaded one
        plans = {b: solve(inst, SolveOptions(time_limit_s=lim, mip_gap=0.0), b)
                 for b, lim in (("colgen", 60 if case[0] <= 16 else 120), ("fast", 1))}
        out[case] = (inst, distinct_oracle(inst), plans)
    return out


def _score(inst, plan):
    return plan.cost_per_hour + penalty(inst) * len(plan.unplaced)


@pytest.mark.parametrize("case", CASES, ids=[f"n{c[0]}-seed{c[1]}-cap{c[2]}" for c in CASES])
def test_distinct_jobs_against_the_exhaustive_optimum(solved, case):
    inst, (best, unplaced), plans = solved[case]
    assert unplaced >= 1  # the cases have jobs that fit nowhere, or a fleet too small for all
    P = penalty(inst)
    opt_cost = best - P * unplaced
    for b, res in plans.items():
        assert check(inst, res.plan) == [], b
        assert _score(inst, res.plan) >= best - 1e-6, b  # nothing beats the exhaustive optimum
        if res.record.best_bound is not None:  # a bound over the placeable jobs: a proof
            assert res.record.best_bound <= opt_cost + 1e-6, b
    # the exact backend finds the optimum, with the same jobs left out
    assert _score(inst, plans["colgen"].plan) == pytest.approx(best, rel=1e-9)
    # every job proven unplaceable alone is one the optimum leaves out too
    assert int((~placeable_alone(Index(inst))).sum()) <= unplaced


def test_the_bound_is_never_above_the_best_plan_any_backend_finds(solved):
    for case, (_inst, _, plans) in solved.items():
        fewest = min(len(r.plan.unplaced) for r in plans.values())
        cheapest = min(r.plan.cost_per_hour for r in plans.values() if len(r.plan.unplaced) == fewest)
        for b, r in plans.items():
            if r.record.best_bound is not None:
                assert r.record.best_bound <= cheapest + 1e-6, (case, b)


def test_unplaceable_jobs_leave_the_bound_in_place():
    # plenty of nodes, a few jobs that fit nowhere: the plan still has a bound and a gap
    inst = generate_distinct(30, 3, unplaceable=0.1)
    lost = ~placeable_alone(Index(inst))
    assert lost.sum() >= 2
    for backend, lim in (("fast", 2), ("colgen", 10)):
        res = solve(inst, SolveOptions(time_limit_s=lim), backend)
        assert check(inst, res.plan) == []
        assert {u.job for u in res.plan.unplaced} == {inst.jobs[j].name for j in np.flatnonzero(lost)}
        assert res.record.best_bound is not None and res.record.best_bound <= res.plan.cost_per_hour + 1e-6
        assert res.plan.lower_bound_per_hour == res.record.best_bound
        assert "fit nowhere alone" in res.record.message


def test_subset_costs_and_repartition_agree_with_howard():
    # the vectorised closed form against Howard on the whole pools, subset by subset
    inst = _inst(7, 11, 4)
    idx = Index(inst)
    jobs = [int(j) for j in np.flatnonzero(placeable_alone(idx))][:6]
    cost, conf = subset_costs(idx, jobs)
    for mask in range(1, 1 << len(jobs)):
        members = tuple(jobs[i] for i in range(len(jobs)) if mask >> i & 1)
        if np.isfinite(cost[mask - 1]):
            c = idx.configs[conf[mask - 1]]
            assert group_feasible(inst, members, tuple(c))
    res = repartition(idx, jobs, np.full(len(idx.types), 100.0), np.zeros(len(idx.types)))
    assert res is not None
    assert repartition(idx, jobs, np.zeros(len(idx.types)), np.zeros(len(idx.types))) is None  # no nodes: no partition
    covered = sorted(j for _, m in res[1] for j in m)
    assert covered == sorted(jobs)
    assert res[0] == pytest.approx(sum(idx.cost[k] for k, _ in res[1]))


def test_fast_path_at_scale_is_checked_bounded_and_never_worse_than_ffd():
    inst = generate_distinct(300, 2)
    idx = Index(inst)
    res = solve(inst, SolveOptions(time_limit_s=2.0), "fast")
    assert check(inst, res.plan) == []
    keep = np.flatnonzero(placeable_alone(idx))
    sub = idx.restrict(inst.model_copy(update={"jobs": [inst.jobs[j] for j in keep]}), keep)
    ffd = pack(sub, ffd_order(sub))
    P = penalty(inst)
    assert res.plan.cost_per_hour + P * len(res.plan.unplaced) <= ffd.cost(sub) + P * (len(ffd.unplaced) + idx.n - len(keep)) + 1e-6
    lb = res.record.best_bound
    assert lb is not None and lb <= res.plan.cost_per_hour
    assert lb >= load_bound(idx, keep, iterations=1) - 1e-6  # the rounded bound is at least the first dual's


@pytest.mark.parametrize("deadline", [float("inf"), 0.0])
def test_first_fit_plans_pass_the_checker_and_howard(deadline):
    """The fast path's first construction, whole and narrowed by a passed deadline: every group
    meets its members' SLOs by Howard's cycle times (not the packer's sums) and the DRAM limits,
    the plan passes the solver-free checker, and every placeable job is placed."""
    from formulation.placement.fast import first_fit
    from formulation.placement.plan import build_plan

    for seed in range(3):
        inst = generate_distinct(80, seed)
        idx = Index(inst)
        keep = np.flatnonzero(placeable_alone(idx))
        sub_inst = inst.model_copy(update={"jobs": [inst.jobs[j] for j in keep]})
        sub = idx.restrict(sub_inst, keep)
        sol, cut = first_fit(sub, deadline=deadline)
        assert cut == (deadline == 0.0)
        assert not sol.unplaced
        assert sorted(j for g in sol.groups for j in g.members) == list(range(sub.n))
        for g in sol.groups:
            assert group_feasible(sub_inst, g.members, sub.configs[g.config]), (seed, g)
        assert check(sub_inst, build_plan(sub, sol, [])) == []


def _with_switches(inst, seed: int):
    """The instance with warm switches on every pool of every job (2-20% of the phase time)."""
    rng = np.random.default_rng(seed)
    jobs = []
    for j in inst.jobs:
        rs = {t: {n: round(float(v * rng.uniform(0.02, 0.2)), 3) for n, v in row.items()} for t, row in j.rollout_s.items()}
        ts = {t: {n: round(float(v * rng.uniform(0.02, 0.2)), 3) for n, v in row.items()} for t, row in j.train_s.items()}
        jobs.append(j.model_copy(update={"rollout_switch_s": rs, "train_switch_s": ts}))
    return inst.model_copy(update={"jobs": jobs})


def test_first_fit_and_the_fast_path_with_warm_switches_pass_howard_and_the_checker():
    """Switches couple the members' rings (``min(sigma, other phase)``); the first fit adds them
    uncapped, which may only refuse a join, never accept an infeasible one."""
    from formulation.placement.explain import explain
    from formulation.placement.fast import fast_solve, first_fit
    from formulation.placement.plan import build_plan

    for seed in range(2):
        inst = _with_switches(generate_distinct(60, seed, unplaceable=0.0), seed)
        idx = Index(inst)
        assert idx.SR.any() and idx.ST.any()
        for sol in (first_fit(idx)[0], fast_solve(idx, time.perf_counter() + 0.5)[0]):
            for g in sol.groups:
                assert group_feasible(inst, g.members, idx.configs[g.config]), (seed, g)
            assert check(inst, build_plan(idx, sol, [explain(idx, j) for j in sol.unplaced])) == []


def test_fast_path_beats_the_weave_greedy_when_jobs_need_different_training_pools():
    # distinct jobs with own smallest training pools (1-4 nodes): the greedy's groups only grow
    # their rollout pool; the fast path's grow both
    worse = 0
    for seed in range(3):
        inst = generate_distinct(60, seed, unplaceable=0.0)
        idx = Index(inst)
        g = greedy(idx, "arrival")
        res = solve(inst, SolveOptions(time_limit_s=1.0), "fast")
        assert check(inst, res.plan) == []
        if len(res.plan.unplaced) <= len(g.unplaced) and res.plan.cost_per_hour < g.cost(idx) - 1e-6:
            worse += 1
    assert worse == 3


def test_ffd_order_is_by_decreasing_size():
    idx = Index(generate_distinct(40, 1))
    from formulation.placement.fast import size_key

    key = size_key(idx)
    order = ffd_order(idx)
    assert (np.diff(key[order]) <= 1e-12).all()


def test_whole_pool_cycle_times_agree_with_howard():
    from formulation.placement.cycle import Member, cycle_times, whole_pool_cycle_times

    rng = np.random.default_rng(5)
    for _ in range(30):
        n = int(rng.integers(1, 5))
        r, t = frozenset({"r0", "r1"}), frozenset({"t0"})
        ms = [Member(f"m{i}", float(rng.uniform(1, 50)), float(rng.uniform(1, 50)), float(rng.uniform(0, 3)), r, t) for i in range(n)]
        a, b = whole_pool_cycle_times(ms), cycle_times(ms)
        assert a.period == pytest.approx(b.period, rel=1e-9)
        for m in ms:
            assert a.of(m.name) == pytest.approx(b.of(m.name), rel=1e-9)


# ------------------------------------------------ bounds and warm starts on every backend (issue 12)
@pytest.mark.parametrize("seed", [0, 2, 4])
def test_a_plan_that_leaves_jobs_out_for_capacity_still_has_a_bound_over_the_jobs_it_places(seed):
    # the Weave greedy on a tight fleet leaves placeable jobs out; the plan's bound is then over the
    # jobs it places, and the exhaustive optimum of placing exactly those jobs is at least that bound
    from tests.placement.placement_helpers import oracle, small_instance

    inst = small_instance(seed, 8, capacity=(2, 2))
    assert placeable_alone(Index(inst)).all()  # every job fits alone: the ones left out are capacity
    res = solve(inst, SolveOptions(time_limit_s=10), "greedy")
    assert check(inst, res.plan) == []
    assert res.plan.unplaced and all(u.reason == "capacity" for u in res.plan.unplaced)
    lb = res.plan.lower_bound_per_hour
    assert lb is not None and 0 < lb <= res.plan.cost_per_hour
    assert f"bound over the {8 - len(res.plan.unplaced)} job(s) placed" in res.record.message
    placed = {m.job for g in res.plan.groups for m in g.members}
    sub = inst.model_copy(update={"jobs": [j for j in inst.jobs if j.name in placed]})
    best, left_out = oracle(sub)
    assert left_out == 0 and lb <= best + 1e-6


@pytest.mark.parametrize("backend", ["colgen", "highs", "cpsat"])
def test_a_backend_that_finds_nothing_in_time_returns_the_cheapest_construction_with_the_load_bound(monkeypatch, backend):
    # a stand-in for a model that found no plan and no bound in the time it had: the plan is the
    # cheapest of the Weave greedy, the first fit and best-fit FFD (never worse than FFD), and it
    # carries at least the load bound
    from formulation.placement import colgen, cpsat, milp
    from formulation.placement.colgen import ColgenStats
    from formulation.placement.fast import ffd_order, load_bound, pack
    from formulation.placement.greedy import best_greedy

    if backend == "colgen":
        monkeypatch.setattr(colgen.PatternModel, "solve", lambda self, *a, **k: (None, ColgenStats()))
    else:
        mod = milp if backend == "highs" else cpsat
        monkeypatch.setattr(mod, "solve_compact", lambda idx, *a, **k: (None, SolveStatus.NOT_SOLVED, None, "stand-in"))
    inst = generate_distinct(30, 3, unplaceable=0.0)
    alone = placeable_alone(Index(inst))
    inst = inst.model_copy(update={"jobs": [j for j, ok in zip(inst.jobs, alone) if ok]})  # every job placeable
    idx = Index(inst)
    ffd = pack(idx, ffd_order(idx)).cost(idx)
    greedy_cost = best_greedy(idx)[0].cost(idx)
    res = solve(inst, SolveOptions(time_limit_s=30), backend)
    assert check(inst, res.plan) == []
    assert not res.plan.unplaced
    assert res.plan.cost_per_hour <= min(ffd, greedy_cost) + 1e-6
    assert res.record.warm_start in ("greedy", "first fit", "FFD best fit")
    lb = res.plan.lower_bound_per_hour
    assert lb is not None and load_bound(idx) - 1e-6 <= lb <= res.plan.cost_per_hour


def test_the_load_bounds_first_step_when_the_time_is_up_is_the_plain_formula_and_below_more_steps():
    # past its deadline the load bound takes one step on dense blocks of jobs (no gather of the
    # (job, configuration) pairs); its value is sum_j min_k c_k (a_kj + bs_kj) / (2 slo_j)
    inst = generate_distinct(300, 8, unplaceable=0.0)
    alone = placeable_alone(Index(inst))
    idx = Index(inst.model_copy(update={"jobs": [j for j, ok in zip(inst.jobs, alone) if ok]}))
    plain = 0.0
    for j in range(idx.n):
        ks = np.flatnonzero(idx.ok[:, j])
        plain += min(idx.cost[k] * (idx.a[k, j] + idx.bs[k, j]) / (2 * idx.slo[j]) for k in ks)
    duals: list = []
    first = load_bound(idx, deadline=0.0, duals=duals)
    assert first == pytest.approx(plain, rel=1e-9)
    assert duals and duals[0].sum() == pytest.approx(plain, rel=1e-9) and not duals[1].any()
    assert load_bound(idx, iterations=12) >= first * (1 - 1e-12)
    # a job that fits nowhere alone: no bound, as on the general path
    assert not alone.all() and load_bound(Index(inst), deadline=0.0) is None
