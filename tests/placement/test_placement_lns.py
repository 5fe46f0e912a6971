"""The large-neighbourhood search (``formulation.placement.lns``): its insertion test against the
closed form group by group, and its plans against the solver-free checker and the exhaustive
optimum (never below it, and from a plan of one job per group it gets most of the way there)."""

from __future__ import annotations

import numpy as np
import pytest

from benchmarks.placement.generate import generate_distinct
from formulation.placement.check import check
from formulation.placement.evaluate import Index, Solution
from formulation.placement.lns import GroupState, improve
from formulation.placement.plan import build_plan
from tests.placement.placement_helpers import distinct_oracle


def _violations(inst, idx: Index, sol: Solution):
    """The solver-free checker on the plan of ``sol`` (its left-out jobs explained)."""
    from formulation.placement.explain import explain

    used = idx.nodes_used(sol.groups)
    free = {t: idx.capacity[t] - used[t] for t in idx.types}
    return check(inst, build_plan(idx, sol, [explain(idx, j, free) for j in sol.unplaced]))


def _inst(n: int, seed: int, cnt: int = 6):
    return generate_distinct(n, seed, counts={"H20": cnt, "H800": cnt, "A100": cnt, "L40S": cnt}, unplaceable=0.0,
                             slo_ratio=(1.5, 3.0))


@pytest.mark.parametrize("seed", range(6))
def test_best_insert_is_the_cheapest_feasible_join(seed):
    from formulation.placement.fast import first_fit

    inst = _inst(24, seed, cnt=12)
    idx = Index(inst)
    groups = first_fit(idx)[0].groups
    free = np.array([idx.capacity[t] for t in idx.types], dtype=float) - sum(idx.node_matrix[g.config] for g in groups)
    st = GroupState(idx, list(groups), free)
    for g_out, g in enumerate(groups):
        j = int(g.members[-1])
        got = st.best_insert(j, g_out)
        # brute force on the closed form: every other group, every configuration within the free nodes
        best = None
        for h, other in enumerate(groups):
            if h == g_out:
                continue
            for k in range(len(idx.configs)):
                extra = idx.node_matrix[k] - idx.node_matrix[other.config]
                if (extra > free + 1e-9).any() or not idx.feasible(k, list(other.members) + [j]):
                    continue
                m = idx.cost[k] - idx.cost[other.config]
                if best is None or m < best - 1e-9:
                    best = m
        if best is None:
            assert got is None
        else:
            assert got is not None and got[0] == pytest.approx(best)
            assert idx.feasible(got[2], list(groups[got[1]].members) + [j])


@pytest.mark.parametrize("seed", range(6))
def test_the_search_gets_valid_plans_near_the_exhaustive_optimum(seed):
    from formulation.placement.fast import first_fit, slo_order

    full = _inst(12, seed, cnt=5)
    fi = Index(full)
    placed = sorted(j for g in first_fit(fi)[0].groups for j in g.members)[:8]  # jobs this fleet holds
    inst = full.model_copy(update={"jobs": [full.jobs[j] for j in placed]})
    idx = Index(inst)
    start, _ = first_fit(idx, slo_order(idx)[::-1])  # loosest SLO first: a poor start
    if start.unplaced:
        start, _ = first_fit(idx)
    opt, left_out = distinct_oracle(inst)
    if start.unplaced or left_out:
        pytest.skip("the fleet holds not every job")
    sol, moves = improve(idx, start, float("inf"), seed=seed)  # ends when a sweep finds nothing
    assert check(inst, build_plan(idx, sol, [])) == []
    cost = sol.cost(idx)
    assert sorted(j for g in sol.groups for j in g.members) == list(range(idx.n))
    assert cost >= opt - 1e-6  # nothing beats the exhaustive optimum
    assert cost <= start.cost(idx) + 1e-9
    if start.cost(idx) > opt * 1.15:
        assert moves >= 1
    assert cost <= 1.15 * opt, (cost, opt, start.cost(idx))


def test_the_search_keeps_to_the_fleet():
    """On a fleet too small for every job (22 of 30 left out by the first fit) every move must fit
    the nodes left: the plan stays within the fleet, places the same jobs, and passes the checker."""
    from formulation.placement.fast import first_fit

    inst = generate_distinct(30, 3, counts={"H20": 6, "H800": 5, "A100": 5, "L40S": 6}, unplaceable=0.0, slo_ratio=(1.5, 3.0))
    idx = Index(inst)
    start, _ = first_fit(idx)
    assert start.unplaced  # the case is a tight fleet
    sol, _ = improve(idx, start, float("inf"))
    used = idx.nodes_used(sol.groups)
    assert all(used[t] <= idx.capacity[t] for t in idx.types)
    assert sorted(j for g in sol.groups for j in g.members) == sorted(j for g in start.groups for j in g.members)
    assert _violations(inst, idx, sol) == []
    assert sol.cost(idx) <= start.cost(idx) + 1e-9


def test_anchored_groups_are_left_as_they_are():
    """A current plan's groups (anchored) are neither removed nor grown by the search."""
    from formulation.placement.evaluate import Group
    from formulation.placement.fast import first_fit, slo_order

    inst = _inst(24, 4, cnt=12)
    idx = Index(inst)
    start, _ = first_fit(idx, slo_order(idx)[::-1])
    groups = [Group(g.config, g.members, f"cur-{i}" if i % 2 == 0 else None) for i, g in enumerate(start.groups)]
    sol, _ = improve(idx, Solution(groups, list(start.unplaced)), float("inf"))
    anchored = {g.anchor: (g.config, g.members) for g in groups if g.anchor}
    kept = {g.anchor: (g.config, g.members) for g in sol.groups if g.anchor}
    assert kept == anchored
    assert _violations(inst, idx, sol) == [] and sol.cost(idx) <= start.cost(idx) + 1e-9


def test_a_plan_of_anchored_groups_only_ends_at_once():
    from formulation.placement.evaluate import Group
    from formulation.placement.fast import first_fit

    inst = _inst(12, 1, cnt=12)
    idx = Index(inst)
    start, _ = first_fit(idx)
    groups = [Group(g.config, g.members, f"cur-{i}") for i, g in enumerate(start.groups)]
    sol, moves = improve(idx, Solution(groups, list(start.unplaced)), float("inf"))  # no deadline: must end by itself
    assert moves == 0 and sorted(sol.groups, key=lambda g: g.anchor) == sorted(groups, key=lambda g: g.anchor)


# ------------------------------------------------------------------ the short search (few configurations)
def test_a_configuration_subset_index_has_the_same_rows_and_the_same_feasible_groups():
    inst = _inst(30, 2, cnt=12)
    idx = Index(inst)
    rng = np.random.default_rng(0)
    keep = np.sort(rng.choice(len(idx.configs), size=len(idx.configs) // 3, replace=False))
    sub = idx.restrict_configs(keep)
    assert [sub.configs[i] for i in range(len(keep))] == [idx.configs[k] for k in keep]
    for name in ("a", "bs", "tot", "ok", "cost", "dram_cap_r", "dram_cap_t", "node_matrix"):
        assert np.array_equal(getattr(sub, name), getattr(idx, name)[keep]), name
    for _ in range(300):  # groups of 1-4 random jobs on random kept configurations: the same verdict
        i = int(rng.integers(len(keep)))
        members = list(rng.choice(idx.n, size=int(rng.integers(1, 5)), replace=False))
        assert sub.feasible(i, members) == idx.feasible(int(keep[i]), members)


def test_the_short_search_keeps_used_configurations_and_each_jobs_two_cheapest_by_floored_share():
    from formulation.placement.fast import first_fit
    from formulation.placement.lns import short_configs

    inst = _inst(40, 5, cnt=12)
    idx = Index(inst)
    start, _ = first_fit(idx)
    got = set(short_configs(idx, start, per_job=2, rows=7).tolist())  # a small block: many blocks
    used = {g.config for g in start.groups}
    assert got >= used
    cheap = set()  # every configuration that is some job's first or second by floored share (ties included)
    for j in range(idx.n):  # one job at a time, by hand
        shares = {k: idx.cost[k] * max(max(idx.a[k, j], idx.bs[k, j]) / idx.slo[j], 0.5)
                  for k in range(len(idx.configs)) if idx.ok[k, j]}
        if not shares:
            continue  # fits nowhere alone
        second = sorted(shares.values())[:2][-1]
        near = {k for k, v in shares.items() if v <= second}
        assert len(got & near) >= min(2, len(shares)), j  # the job's two cheapest (up to ties) are kept
        cheap |= near
    assert got <= used | cheap  # nothing else is kept


@pytest.mark.parametrize("seed", range(3))
def test_the_short_search_gives_checked_plans_on_its_configurations_no_costlier_than_its_start(seed):
    from formulation.placement.fast import first_fit, slo_order
    from formulation.placement.lns import improve_short, short_configs

    inst = _inst(40, seed, cnt=12)
    idx = Index(inst)
    start, _ = first_fit(idx, slo_order(idx)[::-1])  # loosest SLO first: room to improve
    kept = set(short_configs(idx, start).tolist())
    sol, moves = improve_short(idx, start, float("inf"), seed=seed)  # ends when a sweep finds nothing
    assert {g.config for g in sol.groups} <= kept
    assert sorted(j for g in sol.groups for j in g.members) == sorted(j for g in start.groups for j in g.members)
    assert _violations(inst, idx, sol) == []
    assert sol.cost(idx) <= start.cost(idx) + 1e-9
    assert moves >= 1 or sol.cost(idx) == pytest.approx(start.cost(idx))


def test_the_fast_path_begins_with_the_short_search_where_the_state_is_large_and_says_so(monkeypatch):
    import time

    from formulation.placement import fast

    inst = generate_distinct(210, 1, unplaceable=0.0)
    idx = Index(inst)
    monkeypatch.setattr(fast, "SHORT_LNS_CELLS", 0)  # this instance's state is small: take the short path anyway
    monkeypatch.setattr(fast, "SHORT_LNS_S", 1e9)
    sol, st = fast.fast_solve(idx, time.perf_counter() + 3.0)
    assert st.short_search and "first over each job's cheapest configurations" in st.message()
    assert _violations(inst, idx, sol) == []
    monkeypatch.setattr(fast, "SHORT_LNS_CELLS", 10**12)
    _, st = fast.fast_solve(idx, time.perf_counter() + 0.5)
    assert not st.short_search and "cheapest configurations" not in st.message()


def test_the_short_search_does_not_start_when_choosing_its_configurations_would_pass_the_deadline(monkeypatch):
    import time

    from formulation.placement import lns
    from formulation.placement.fast import first_fit

    inst = _inst(40, 1, cnt=12)
    idx = Index(inst)
    start, _ = first_fit(idx)
    called = []
    monkeypatch.setattr(lns, "short_configs", lambda *a, **k: called.append(1))
    monkeypatch.setattr(lns, "SHORT_PICK_S_PER_CELL", 10.0)  # any instance: far more than the time left
    sol, moves = lns.improve_short(idx, start, time.perf_counter() + 60.0)
    assert (sol, moves, called) == (start, 0, [])
