"""The reduced-cost ladder behind colgen's certified bound (``colgen.Ladder``) and the pricing it
relies on, judged by brute force: every feasible group of a small instance from its tables with
Howard's cycle times (``placement_helpers.feasible_groups``) and the exhaustive optimum
(``placement_helpers.oracle``), never by the solver itself."""

from __future__ import annotations

import time
from collections import Counter

import numpy as np
import pytest

from formulation.placement.colgen import ColgenStats, Ladder, PatternModel, job_classes
from formulation.placement.evaluate import Index
from formulation.placement.pricing import price
from formulation.placement.solve import _round_up_to_cost_unit
from tests.placement.placement_helpers import feasible_groups, oracle, small_instance

SEEDS = [21, 22, 23, 24]


def _case(seed: int):
    """A 7-job instance, its index and classes, and random duals (some classes at zero)."""
    inst = small_instance(seed, 7, capacity=(3, 3), dram_gb=(400.0, 800.0), both_types=seed % 2 == 0)
    idx = Index(inst)
    classes = job_classes(idx)
    rng = np.random.default_rng(seed)
    pi = rng.uniform(0.0, 40.0, len(classes.rep))
    pi[rng.random(len(pi)) < 0.25] = 0.0  # classes the duals do not value still belong in the patterns
    mu = rng.uniform(0.0, 4.0, len(idx.types))
    return inst, idx, classes, pi, mu


def _brute_reduced_costs(inst, classes, pi, mu) -> dict:
    """(configuration, class counts) -> reduced cost, for every feasible group."""
    out = {}
    for members, config, cost, nodes in feasible_groups(inst):
        counts = Counter(int(classes.of_job[j]) for j in members)
        out[(tuple(config), frozenset(counts.items()))] = cost + float(mu @ np.array(nodes)) - sum(pi[c] * m for c, m in counts.items())
    return out


@pytest.mark.parametrize("seed", SEEDS)
def test_enumeration_finds_every_group_below_the_gap(seed):
    inst, idx, cl, pi, mu = _case(seed)
    brute = _brute_reduced_costs(inst, cl, pi, mu)
    gap = float(np.quantile(list(brute.values()), 0.4))  # plenty of groups on both sides
    pm = PatternModel(idx, cl)
    pm.converged = (pi, mu, np.zeros(len(idx.configs)))
    pool, complete = Ladder(pm, 10**6).enumerate(gap, float("inf"))
    assert complete
    found = {(tuple(idx.configs[c.config]), frozenset(c.counts.items())) for c in pool}
    assert len(found) == len(pool)  # no pattern twice
    below = {g for g, rc in brute.items() if rc <= gap - 1e-7}
    assert below and below <= found
    assert found <= {g for g, rc in brute.items() if rc <= gap + 1e-7}


@pytest.mark.parametrize("seed", SEEDS)
def test_pricing_finds_the_most_valuable_group_of_each_configuration(seed):
    inst, idx, cl, pi, mu = _case(seed)
    best: dict = {}
    for members, config, _cost, _nodes in feasible_groups(inst):
        value = sum(pi[cl.of_job[j]] for j in members)
        best[tuple(config)] = max(best.get(tuple(config), 0.0), value)
    pm = PatternModel(idx, cl)
    for k, config in enumerate(idx.configs):
        res = price(pm._items(k, pi, False), 0.0, max_columns=3)
        assert res.exact
        top = best.get(tuple(config), 0.0)
        assert res.upper_bound >= top - 1e-9
        if top > 1e-9:
            assert res.columns[0][0] == pytest.approx(top)


ORACLE_CASES = [  # (seed, jobs, capacity, dram, both types): the LP bound is a unit or more below the optimum
    (5, 9, (5, 5), (2048.0, 2048.0), False),
    (6, 10, (6, 6), (2048.0, 2048.0), False),
    (11, 9, (4, 4), (512.0, 512.0), True),  # two jobs left out: costs off the unit, the raw bound climbs
    (35, 9, (5, 5), (1024.0, 2048.0), True),
    (51, 9, (5, 5), (1024.0, 2048.0), False),
]


def _column_generation(case):
    """(exhaustive optimum, index, pattern model after column generation, its stats, LP bound) of an oracle case."""
    seed, n, cap, dram, both = case
    inst = small_instance(seed, n, capacity=cap, dram_gb=dram, both_types=both)
    best, _ = oracle(inst)
    idx = Index(inst)
    pm = PatternModel(idx, job_classes(idx))
    pm.add_singletons()
    st = ColgenStats()
    t0 = time.perf_counter()
    _, _, lp_bound = pm.column_generation(st, t0, t0 + 60, t0 + 60, 200000)
    return best, idx, pm, st, lp_bound


def test_every_rung_of_the_ladder_bounds_the_exhaustive_optimum_and_the_last_proves_it():
    lifted = 0
    for case in ORACLE_CASES:
        best, idx, pm, st, lp_bound = _column_generation(case)
        assert st.lp_converged
        lp = _round_up_to_cost_unit(idx, lp_bound)
        assert lp <= best + 1e-6
        ladder = Ladder(pm, 10**6)
        rungs = ladder.rungs(best + 1e-6)[:6]  # up to the rung that proves the optimum (when it is near)
        bound = None
        for gap in rungs:
            pool, complete = ladder.enumerate(gap, float("inf"))
            assert complete
            for col in pool:
                pm.master.add(col)
            ladder.gap = gap
            pm.master.solve_mip(time.perf_counter() + 60, None, 0.0, stop_at_bound=ladder.reach())
            bound = _round_up_to_cost_unit(idx, ladder.bound(pm.master.last_mip_bound))
            assert bound <= best + 1e-6, (case, gap, bound, best)
            lifted += bound > lp + 1e-6
        if rungs and len(rungs) == len(ladder.rungs(best + 1e-6)):  # the proof rung was climbed
            assert ladder.proves(ladder.bound(pm.master.last_mip_bound), best)
    assert lifted >= 4  # the ladder does lift the bound above the LP's


def test_a_large_integer_master_runs_without_the_sub_mip_heuristics_and_still_solves(monkeypatch):
    """HiGHS's sub-MIP heuristics poll no interrupt (one ran 106 s past the watchdog on a master of
    200,120 columns): past ``SUBMIP_MAX_COLUMNS`` they are off, and the master still solves to a
    plan (on those columns) that the exhaustive oracle does not beat."""
    import formulation.placement.master as master_mod

    best, _, pm, _, _ = _column_generation(ORACLE_CASES[0])
    for limit, on in ((10**9, True), (0, False)):
        monkeypatch.setattr(master_mod, "SUBMIP_MAX_COLUMNS", limit)
        x, status, fired = pm.master.solve_mip(time.perf_counter() + 60, None, 0.0)
        assert pm.master.h.getOptionValue("mip_heuristic_run_rens")[1] is on
        assert pm.master.h.getOptionValue("mip_heuristic_run_root_reduced_cost")[1] is on
        assert x is not None and not fired and status == "Optimal"
        assert pm.master.h.getInfo().objective_function_value >= best - 1e-6  # no plan below the optimum
