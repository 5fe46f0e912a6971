"""Pricing's root bounds and forced members, and the box-stabilised bound, against brute force.

Pricing is judged on synthetic item sets by enumerating every multiset of classes; the bound on
small distinct-job instances by the LP over every feasible group (grown and decided by Howard's
cycle times, :mod:`tests.placement.placement_helpers`, not by the index) and by the exact optimum.
"""

from __future__ import annotations

import itertools

import highspy
import numpy as np
import pytest

from formulation.placement.boxstab import REL_GAP, box_bound, class_scales
from formulation.placement.colgen import PatternModel, job_classes
from formulation.placement.evaluate import REL_TOL, Config, Index
from formulation.placement.fast import load_bound
from formulation.placement.master import new_highs
from formulation.placement.pricing import PricingItems, PricingResult, fractional_fills, price
from tests.placement.placement_helpers import config_cost, distinct_oracle, penalty
from tests.placement.test_placement_farley import CASES, _groups, _inst

pytestmark = pytest.mark.jit  # (tests/conftest.py: one xdist group compiles the kernel once)


# ------------------------------------------------------------------------------------ pricing
def _items(rng, n: int, shared_slo: bool) -> PricingItems:
    slo = rng.uniform(50, 100, n)
    if shared_slo:  # several classes at one SLO (the threshold has no single forced member)
        slo[rng.integers(0, n, n // 2)] = slo[0]
    tot = slo * rng.uniform(0.2, 1.05, n)  # some do not fit their own SLO
    a = tot * rng.uniform(0.1, 0.6, n)
    bs = tot * rng.uniform(0.1, 0.6, n)
    order = np.argsort(-slo, kind="stable")
    f = lambda x: np.asarray(x)[order]  # noqa: E731
    return PricingItems(np.arange(n), f(rng.uniform(1, 10, n) * (rng.random(n) < 0.9) + 1e-3), f(rng.integers(1, 3, n)),
                        f(a), f(bs), f(tot), f(slo), f(rng.uniform(0, 60, n)), f(rng.uniform(0, 80, n)),
                        float(rng.uniform(60, 200)), float(rng.choice([rng.uniform(80, 250), float("inf")])))


def _brute(items: PricingItems) -> list[float]:
    """The worth of every feasible multiset (each class at most its demand), best first."""
    tol = 1 + REL_TOL
    vals = []
    for counts in itertools.product(*[range(int(d) + 1) for d in items.demand]):
        c = np.array(counts, dtype=float)
        if not c.any():
            continue
        on = c > 0
        theta = items.slo[on].min()
        if (items.tot[on].max() <= theta * tol and c @ items.a <= theta * tol and c @ items.bs <= theta * tol
                and c @ items.w <= items.cap_w * tol and c @ items.s <= items.cap_s * tol):
            vals.append(float(c @ items.value))
    return sorted(vals, reverse=True)


def _pricer(impl: str):
    """The Python search, or the compiled one (:mod:`formulation.placement.pricing_jit`)."""
    if impl == "python":
        return price
    pytest.importorskip("numba")
    from formulation.placement.pricing_jit import price_jit

    return lambda items, min_value, **kw: PricingResult(*price_jit(items, min_value, node_budget=10**7, **kw))


@pytest.mark.parametrize("impl", ["python", "compiled"])
@pytest.mark.parametrize("shared_slo", [False, True])
def test_pricing_finds_the_best_groups_that_brute_force_finds(shared_slo, impl):
    price = _pricer(impl)
    rng = np.random.default_rng(7 + shared_slo)
    for _ in range(60):
        items = _items(rng, int(rng.integers(3, 8)), shared_slo)
        truth = _brute(items)
        most = truth[0] if truth else 0.0
        res = price(items, 0.0, max_columns=3)
        assert res.exact
        assert res.upper_bound >= most - 1e-9
        got = [v for v, _ in res.columns]
        # the three best worths (distinct multisets may tie: compare values, not sets)
        assert got == pytest.approx(truth[:3], rel=1e-9, abs=1e-9)
        for v, counts in res.columns:  # each column is the multiset it claims to be
            assert sum(items.value[c] * q for c, q in counts.items()) == pytest.approx(v)
        # above a threshold: exactly the groups worth more than it (at most max_columns)
        mid = most * 0.9
        above = [v for v in truth if v > mid + 1e-12]
        res = price(items, mid, max_columns=50)
        assert sorted((v for v, _ in res.columns), reverse=True) == pytest.approx(above[:50])
        assert res.upper_bound >= most - 1e-9


def _fill_reference(val, size, avail, cap) -> float:
    total, left = 0.0, cap
    order = sorted(range(len(val)), key=lambda i: -(val[i] / size[i]) if size[i] > 1e-12 else -np.inf)
    for i in order:
        if avail[i] <= 0:
            continue
        if size[i] <= 1e-12:
            total += val[i] * avail[i]
            continue
        if left <= 0:
            break
        take = min(avail[i], left / size[i])
        total += val[i] * take
        left -= size[i] * take
        if take < avail[i]:
            break
    return total


def test_fractional_fills_row_by_row_match_one_at_a_time():
    rng = np.random.default_rng(3)
    for _ in range(40):
        n, T = int(rng.integers(1, 12)), int(rng.integers(1, 6))
        val = rng.uniform(0, 5, n)
        size = rng.uniform(0, 3, n) * (rng.random(n) < 0.85)  # some of size 0
        avail = rng.integers(0, 3, (T, n)).astype(float)
        cap = np.concatenate([rng.uniform(-1, 8, T - 1), [np.inf]])
        got = fractional_fills(val, size, avail, cap)
        for t in range(T):
            assert got[t] == pytest.approx(_fill_reference(val, size, avail[t], cap[t]), rel=1e-9, abs=1e-9)


# ------------------------------------------------------------------------- the box bound
def _lp_over_every_group(inst, idx, groups, P) -> float:
    """The capacity-free pattern LP over every feasible group (brute force), on HiGHS."""
    h = new_highs()
    h.setOptionValue("threads", 1)  # (as every master here: HiGHS's scheduler keeps the first count it gets)
    n = idx.n
    h.addRows(n, np.ones(n), np.full(n, highspy.kHighsInf), 0, np.zeros(n, dtype=np.int32), np.zeros(0, dtype=np.int32),
              np.zeros(0))
    for j in range(n):  # the slack: a job left unplaced
        h.addCol(P, 0.0, highspy.kHighsInf, 1, np.array([j], dtype=np.int32), np.array([1.0]))
    for members, c in groups:
        h.addCol(config_cost(inst, c), 0.0, highspy.kHighsInf, len(members), np.array(members, dtype=np.int32),
                 np.ones(len(members)))
    h.run()
    return float(h.getInfo().objective_function_value)


@pytest.fixture(scope="module", params=CASES, ids=[f"n{c[0]}-seed{c[1]}-cap{c[2]}" for c in CASES])
def small(request):
    inst = _inst(*request.param)
    idx = Index(inst)
    groups = _groups(inst)
    P = penalty(inst)
    return inst, idx, groups, P, _lp_over_every_group(inst, idx, groups, P), distinct_oracle(inst)[0]


def test_box_bound_reaches_the_lp_over_every_group_and_its_duals_are_feasible(small):
    inst, idx, groups, P, lp, best = small
    reps, demand = np.arange(idx.n), np.ones(idx.n)
    duals: list = []
    start = load_bound(idx, jobs=reps, duals=duals)
    center = np.asarray(duals[0])
    res = box_bound(idx, reps, demand, center, P, [], deadline=float("inf"),
                    start=None if not np.any(duals[1] > 0) else -np.inf)
    assert res.converged
    assert res.bound <= lp + 1e-6 * max(1.0, lp)  # never above the LP (a proof) ...
    assert res.bound >= lp * (1 - 2 * REL_GAP)  # ... and it reaches it (to REL_GAP)
    assert res.bound <= best + 1e-6
    assert res.bound >= start - 1e-6
    # the duals behind it are feasible for every group brute force finds (not the index's test)
    for members, c in groups:
        assert res.duals[list(members)].sum() <= config_cost(inst, c) * (1 + 1e-9) + 1e-9, (members, c)
    assert (res.duals <= P + 1e-9).all()
    assert res.duals.sum() == pytest.approx(res.bound)


def test_class_scales_make_any_duals_feasible_and_beat_one_scale(small):
    """Per-class scales from each configuration's largest group worth (brute force here, not
    pricing): ``pi / r`` holds for every feasible group brute force finds, and is worth at least
    Farley's ``pi / max_k rho_k``; on these fleets some classes cannot use the most violated
    configuration, so it is worth strictly more for some draw."""
    inst, idx, groups, P, _lp, _best = small
    reps = np.arange(idx.n)
    K = len(idx.configs)
    rng = np.random.default_rng(5)
    sharper = 0
    for _ in range(20):
        pi = rng.uniform(0.2, 1.5, idx.n) * np.median(idx.cost)
        worth = np.zeros(K)
        for members, c in groups:
            k = idx.config_id[Config(*c)]
            worth[k] = max(worth[k], pi[list(members)].sum())
        rho = np.maximum(1.0, worth / idx.cost)
        rc = class_scales(idx, reps, rho, pi, P)
        scaled = pi / rc
        for members, c in groups:
            assert scaled[list(members)].sum() <= config_cost(inst, c) * (1 + 1e-9), (members, c)
        assert (scaled <= P * (1 + 1e-12)).all()
        farley = pi.sum() / max(1.0, rho.max(), pi.max() / P)
        assert scaled.sum() >= farley * (1 - 1e-12)
        sharper += scaled.sum() > farley * (1 + 1e-9)
    assert sharper > 0


def test_box_bound_stopped_at_once_keeps_the_bound_it_started_from(small):
    _inst_, idx, _groups_, P, lp, _ = small
    reps, demand = np.arange(idx.n), np.ones(idx.n)
    res = box_bound(idx, reps, demand, np.full(idx.n, 1.0), P, [], deadline=0.0, start=7.0)
    assert res.bound == 7.0 and res.rounds == 0 and not res.converged
    # a centre that is not dual feasible proves nothing by itself: start=-inf, the rounds' proofs only
    res = box_bound(idx, reps, demand, np.full(idx.n, P), P, [], deadline=float("inf"), start=-np.inf)
    assert res.bound <= lp + 1e-6 * max(1.0, lp)


def test_colgen_on_distinct_jobs_runs_the_box_rounds_and_its_bound_holds(monkeypatch):
    import formulation.placement.colgen as colgen

    inst, idx = None, None
    for n, seed, cnt in CASES:
        inst = _inst(n, seed, cnt)
        idx = Index(inst)
        monkeypatch.setattr(colgen, "BOX_MIN_CLASSES", 3)  # (the small cases stand in for many classes)
        pm = PatternModel(idx, job_classes(idx))
        assert pm.box_stabilised
        sol, st = pm.solve(float("inf"), None, {}, 0.0)
        assert st.box_rounds > 0 and st.box_bound is not None
        best = distinct_oracle(inst)[0]
        assert st.box_bound <= best + 1e-6 and st.lower_bound <= best + 1e-6
        assert sol is not None and pm.score(sol) >= best - 1e-6
    # move charges price groups above their configuration's cost: no box rounds there
    pm = PatternModel(idx, job_classes(idx), move_price=1.0)
    assert not pm.box_stabilised
    assert Config  # (imported for the fixtures' configuration keys)


def test_a_master_solved_again_and_again_gets_the_time_left_not_a_spent_limit():
    """HiGHS measures ``time_limit`` against the run time its object has accumulated: a plain
    limit below that stops the next run at once; :func:`set_time_left` counts from now."""
    from formulation.placement.master import set_time_left

    rng = np.random.default_rng(0)
    h = new_highs()
    n = 200
    inf = highspy.kHighsInf
    h.addCols(n, rng.uniform(1, 2, n), np.zeros(n), np.full(n, inf), 0, np.zeros(0, dtype=np.int32),
              np.zeros(0, dtype=np.int32), np.zeros(0))
    for _ in range(150):
        cols = rng.choice(n, 15, replace=False).astype(np.int32)
        h.addRow(1.0, inf, len(cols), cols, np.ones(len(cols)))
    for _ in range(3):
        h.run()
    spent = h.getRunTime()
    assert spent > 0
    h.changeColCost(0, 1.9)
    h.setOptionValue("time_limit", spent / 2)  # the time left as a plain limit: already spent
    h.run()
    assert h.getModelStatus() == highspy.HighsModelStatus.kTimeLimit
    h.changeColCost(1, 1.9)
    set_time_left(h, 30.0)
    h.run()
    assert h.getModelStatus() == highspy.HighsModelStatus.kOptimal


def test_a_ladder_cut_at_its_limit_leaves_the_plans_to_the_small_masters(monkeypatch):
    """When the ladder's enumeration stops at its limit before a rung is certified, the master of
    every pattern found is not solved (too slow to help at scale); the small masters over the
    patterns of least reduced cost make the plans, never above the optimum, the bound never above it."""
    import formulation.placement.colgen as colgen
    from formulation.placement.colgen import PatternModel, job_classes
    from formulation.placement.evaluate import Index
    from formulation.placement.greedy import best_greedy
    from tests.placement.placement_helpers import oracle, small_instance

    monkeypatch.setattr(colgen, "PRIMAL_SIZES", (2, 4, 8))  # (the small instance stands in for a large one)
    inst = small_instance(5, 9, capacity=(5, 5), dram_gb=(2048.0, 2048.0), both_types=False)
    idx = Index(inst)
    pm = PatternModel(idx, job_classes(idx))
    warm = best_greedy(idx)[0]
    sol, st = pm.solve(float("inf"), warm, {}, 1e-4, enumerate_limit=1)
    best, _ = oracle(inst)
    assert st.lp_converged
    assert "least reduced cost" in st.mip_status, st.mip_status
    assert sol is not None and best - 1e-6 <= pm.score(sol) <= pm.score(warm) + 1e-6
    assert st.lower_bound is not None and st.lower_bound <= best + 1e-6
    assert all(idx.feasible(g.config, g.members) for g in sol.groups)


def test_column_rounds_add_only_feasible_groups_and_leave_the_proof_alone(small):
    """Column rounds (``boxstab`` docstring, step 5: after each round, the master's own duals priced
    over the configurations that round found groups on) prove nothing: every group they add is one
    brute force finds feasible on its configuration, and the bound is still a proof (never above
    the LP over every group nor the exhaustive optimum) that reaches the LP."""
    inst, idx, groups, P, lp, best = small
    reps, demand = np.arange(idx.n), np.ones(idx.n)
    duals: list = []
    load_bound(idx, jobs=reps, duals=duals)
    center = np.asarray(duals[0])
    start = None if not np.any(duals[1] > 0) else -np.inf
    feasible = {(tuple(sorted(members)), idx.config_id[Config(*c)]) for members, c in groups}
    res = box_bound(idx, reps, demand, center, P, [], deadline=float("inf"), start=start, column_rounds=2)
    assert res.column_rounds >= 1, "no column round ran"
    assert res.converged
    assert res.bound <= lp + 1e-6 * max(1.0, lp) and res.bound <= best + 1e-6
    assert res.bound >= lp * (1 - 2 * REL_GAP)
    for k, counts in res.columns:
        assert set(counts.values()) == {1}, counts  # (one job per class here)
        assert (tuple(sorted(counts)), k) in feasible, (k, counts)
