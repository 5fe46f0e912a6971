"""The compiled pricing search against the Python search it mirrors, and the box-stabilised bound
on the fast path (:mod:`formulation.placement.pricing_jit`, :func:`formulation.placement.boxstab.fleet_bound`).

Against brute force (every multiset of classes) both searches are judged in
``tests/placement/test_placement_boxstab.py``; here, on larger item sets where brute force cannot
go, the compiled search's groups and bound are compared with the Python search's (two
implementations of one search, neither checked by itself). The first compiled call compiles the
kernel (seconds, once per machine: numba caches it).
"""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("numba")
pytestmark = pytest.mark.jit  # (tests/conftest.py: one xdist group compiles the kernel once)

from formulation.placement import pricing_jit  # noqa: E402
from formulation.placement.pricing import PricingItems, PricingResult, price  # noqa: E402
from formulation.placement.pricing_jit import price_jit as _price_jit  # noqa: E402



def _fleet_phases_on_small_instances(monkeypatch) -> None:
    """The fleet-scale phases on a 10-job instance: the compiled pricing on few items, fleet scale
    from 3 classes, the phases from a 1 s limit, and the fast path a quarter of the limit (1/15 of a
    few seconds can be too short for its repair on a busy machine: a job it leaves out sends the
    time to the search and no bound phase runs)."""
    import formulation.placement.solve as solve_mod

    monkeypatch.setattr(pricing_jit, "MIN_ITEMS", 1)
    monkeypatch.setattr(pricing_jit, "MIN_TIME_LEFT_S", 0.0)
    monkeypatch.setattr(solve_mod, "FAST_ONLY_CLASSES", 3)
    monkeypatch.setattr(solve_mod, "FLEET_PHASES_MIN_S", 1.0)
    monkeypatch.setattr(solve_mod, "FLEET_FAST_SHARE", 0.25)
    monkeypatch.setattr(solve_mod, "FLEET_COLUMNS_MIN_LIMIT_S", 1.0)

def price_jit(items, min_value, **kw) -> PricingResult:
    """The compiled search's result as pricing's."""
    res = _price_jit(items, min_value, **kw)
    assert res is not None
    return PricingResult(*res)


def _big_items(rng, n: int) -> PricingItems:
    """Many classes with tight SLOs and values near a configuration's worth (as near the LP's duals):
    the searches branch a lot."""
    slo = rng.uniform(60, 100, n)
    slo[rng.integers(0, n, n // 4)] = slo[rng.integers(0, n)]
    tot = slo * rng.uniform(0.15, 0.8, n)
    a = tot * rng.uniform(0.2, 0.7, n)
    bs = tot - a
    order = np.argsort(-slo, kind="stable")
    f = lambda x: np.asarray(x)[order]  # noqa: E731
    return PricingItems(np.arange(n) * 3 + 1, f(rng.uniform(1, 3, n)), f(rng.integers(1, 4, n)), f(a), f(bs), f(tot),
                        f(slo), f(rng.uniform(0, 40, n)), f(rng.uniform(0, 60, n)), 150.0, float(rng.uniform(150, 400)))


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_compiled_search_agrees_with_the_python_search(seed, monkeypatch):
    rng = np.random.default_rng(seed)
    for _ in range(8):
        items = _big_items(rng, int(rng.integers(40, 120)))
        for min_value in (0.0, 6.0):
            monkeypatch.setenv("RL_PLANNER_JIT", "0")
            py = price(items, min_value, max_columns=5, node_budget=10**7)
            monkeypatch.delenv("RL_PLANNER_JIT")
            jit = price_jit(items, min_value, max_columns=5, node_budget=10**7)
            assert py.exact and jit.exact
            assert jit.upper_bound == pytest.approx(py.upper_bound, rel=1e-12, abs=1e-12)
            # the same groups, ties broken alike
            assert [v for v, _ in jit.columns] == pytest.approx([v for v, _ in py.columns], rel=1e-12)
            assert [c for _, c in jit.columns] == [c for _, c in py.columns]
            # with a tolerance both prune groups within it of the incumbents (each its own way):
            # the best found is within it of the best, and the bound covers the best
            best = py.columns[0][0] if py.columns else min_value
            tol = 0.05 * max(best, 1.0)
            rough = price_jit(items, min_value, max_columns=5, node_budget=10**7, tolerance=tol)
            assert best - 1e-9 <= rough.upper_bound <= best + tol + 1e-9
            if py.columns:
                assert rough.columns and rough.columns[0][0] >= best - tol - 1e-9


def test_a_cut_search_still_bounds_every_group():
    rng = np.random.default_rng(5)
    for _ in range(6):
        items = _big_items(rng, 80)
        full = price_jit(items, 0.0, max_columns=5, node_budget=10**8)
        assert full.exact
        cut = price_jit(items, 0.0, max_columns=5, node_budget=50)
        assert not cut.exact
        assert cut.upper_bound >= full.columns[0][0] - 1e-9
        assert all(v <= full.columns[0][0] + 1e-9 for v, _ in cut.columns)


def test_price_picks_the_compiled_search_only_where_it_pays(monkeypatch):
    monkeypatch.setattr(pricing_jit, "_KERNEL", None)
    assert not pricing_jit.use_jit(10_000, deadline=0.0)  # a first compile needs time left
    assert not pricing_jit.use_jit(20, deadline=float("inf"))  # a few classes: the Python search
    assert pricing_jit.use_jit(pricing_jit.MIN_ITEMS, deadline=float("inf"))
    monkeypatch.setenv("RL_PLANNER_JIT", "0")
    assert not pricing_jit.use_jit(10_000, deadline=float("inf"))


def test_the_fast_path_bound_at_fleet_scale_holds_and_beats_the_load_bound(monkeypatch):
    """``auto`` beyond column generation's reach (here: the class limit lowered to 3) with a long
    limit runs the box-stabilised rounds after the fast path's search; the bound it reports never
    exceeds the exhaustive optimum and is at least the load bound's."""
    import formulation.placement.solve as solve_mod
    from formulation.common import SolveOptions
    from formulation.placement.boxstab import fleet_bound
    from formulation.placement.colgen import job_classes
    from formulation.placement.evaluate import Index
    from formulation.placement.fast import load_bound
    from tests.placement.placement_helpers import distinct_oracle
    from tests.placement.test_placement_farley import _inst

    monkeypatch.setattr(pricing_jit, "MIN_ITEMS", 1)  # (the small cases stand in for many classes)
    monkeypatch.setattr(pricing_jit, "MIN_TIME_LEFT_S", 0.0)
    for n, seed, cnt in [(8, 11, 3), (10, 12, 8)]:  # (fleets that hold every job: the bound covers them all)
        inst = _inst(n, seed, cnt)
        idx = Index(inst)
        best = distinct_oracle(inst)[0]
        cl = job_classes(idx)
        lb, res = fleet_bound(idx, cl.rep, cl.demand, cl.of_job, [], float("inf"))
        assert res is not None and res.rounds > 0
        assert load_bound(idx) - 1e-6 <= lb <= best + 1e-6
        _fleet_phases_on_small_instances(monkeypatch)  # (the fast path gets 2 s of the 8)
        out = solve_mod.solve(inst, SolveOptions(time_limit_s=8.0))
        assert not out.solution.unplaced
        assert "box-stabilised bound" in out.record.message
        # (column generation's words need one of its LPs solved in its share: not asserted, a loaded
        # machine may not give it that)
        assert "LP-guided dive over" in out.record.message  # (its plan is the one judged below when kept)
        assert out.record.best_bound is not None and out.record.best_bound <= best + 1e-6
        assert out.record.objective >= best - 1e-6
        monkeypatch.undo()


def test_a_fleet_too_small_for_every_job_gives_the_bound_phase_time_to_the_search(monkeypatch):
    """Regression: when the fast path's plan leaves jobs out for capacity, a bound over every job
    bounds no plan of fewer; the bound phase used to be skipped and the command ended with the plan
    of 30% of its limit. Now the search goes on from that plan until the command's deadline."""
    import formulation.placement.fast as fast_mod
    import formulation.placement.solve as solve_mod
    from formulation.common import SolveOptions
    from formulation.placement.check import check
    from tests.placement.test_placement_farley import _inst

    calls: list[tuple[float, bool]] = []
    real = fast_mod.fast_solve

    def spy(idx, deadline, warm=None, **kw):
        calls.append((deadline, warm is not None))
        return real(idx, deadline, warm, **kw)

    monkeypatch.setattr(fast_mod, "fast_solve", spy)
    monkeypatch.setattr(solve_mod, "FAST_ONLY_CLASSES", 3)
    monkeypatch.setattr(solve_mod, "FLEET_PHASES_MIN_S", 1.0)
    monkeypatch.setattr(solve_mod, "_jit_available", lambda: True)
    inst = _inst(12, 14, 2)  # (10 jobs that each fit alone, 2 nodes a type: not all of them at once)
    out = solve_mod.solve(inst, SolveOptions(time_limit_s=20.0))
    assert out.solution.unplaced, "the fleet was meant to leave jobs out"
    assert len(calls) == 3, f"expected the fast path, its search on for another share, then to the end; calls: {calls}"
    (first, _), (second, again), (third, from_plan) = calls
    assert again and from_plan and third > second + 5.0, "the search did not get the bound phase's share of the limit"
    assert "searched on in place of the bound phase" in out.record.message
    assert "box-stabilised bound" not in out.record.message
    assert check(inst, out.plan) == []


def test_a_kernel_that_cannot_be_built_leaves_the_python_search(monkeypatch):
    """numba present but the kernel not buildable (e.g. no writable cache directory): pricing
    warns once, runs the Python search and does not try again in this process."""
    def broken():
        raise RuntimeError("cannot cache function: no locator available")

    monkeypatch.setattr(pricing_jit, "kernel", broken)
    monkeypatch.setattr(pricing_jit, "_MISSING", False)
    monkeypatch.setattr(pricing_jit, "MIN_ITEMS", 1)  # (whether or not a kernel is loaded in this process)
    items = _big_items(np.random.default_rng(9), 60)
    monkeypatch.setenv("RL_PLANNER_JIT", "0")
    reference = price(items, 0.0, max_columns=5, node_budget=10**7)
    monkeypatch.delenv("RL_PLANNER_JIT")
    with pytest.warns(RuntimeWarning, match="Python search runs"):
        res = price(items, 0.0, max_columns=5, node_budget=10**7, deadline=float("inf"))
    assert res.upper_bound == reference.upper_bound and res.columns == reference.columns
    assert not pricing_jit.available() and not pricing_jit.ready(10_000, float("inf"))


def test_a_60_s_command_leaves_the_solver_enough_for_the_fleet_phases_at_2000_jobs_and_not_at_10000():
    """Regression: the fleet-scale phases start from ``fleet_phases_min_s`` of the *solver's* share,
    and `planner plan --time-limit T` hands the solver what reading and writing leave of the T s
    (when the threshold was 150 s, a 150 s command at 2,000 jobs ran no bound phase and no dive).
    At 10,000 jobs a round of the box bound outlasts most of a minute: the phases must not start
    there under 60 s (they did, and the plan lost 4.6% to the fast path's). Loading 10,000 jobs
    takes a few seconds (~1-2 s on an idle machine); 5 s is allowed."""
    from formulation.placement.solve import fleet_phases_min_s
    from planner.commands.plan import solver_share

    for n, json_out in [(2000, True), (2000, False)]:
        share, cut = solver_share(60.0, 5.0, n, json_out)
        assert not cut and share >= fleet_phases_min_s(n), (n, json_out, share)
    assert fleet_phases_min_s(10000) > 60.0


def test_the_fleet_phases_split_the_limit_and_the_dive_starts_from_the_rounds_groups_alone(monkeypatch):
    """The fleet-scale phases in order: the fast path until FLEET_FAST_SHARE of the limit, the box
    rounds until the last ``fleet_shares`` primal seconds, column generation at the master's duals
    from the rounds' groups for ``fleet_columns_s``, then the dive over its groups *without* the fast
    path's plan among its columns (with it, that integral plan was often the LP's optimum when the
    rounds had priced few groups, and the dive gave it back unchanged)."""
    import formulation.placement.boxstab as boxstab
    import formulation.placement.dive as dive_mod
    import formulation.placement.fast as fast_mod
    import formulation.placement.primalcg as primalcg
    import formulation.placement.solve as solve_mod
    from formulation.common import SolveOptions
    from formulation.placement.check import check
    from tests.placement.test_placement_farley import _inst

    seen: dict[str, object] = {}
    real_fast, real_bound, real_dive = fast_mod.fast_solve, boxstab.fleet_bound, dive_mod.dive

    def fast_spy(idx, deadline, warm=None, **kw):
        seen.setdefault("fast", deadline)
        return real_fast(idx, deadline, warm, **kw)

    def bound_spy(idx, reps, demand, of_job, groups, deadline, **kw):
        seen["bound"], seen["plan groups"] = deadline, len(groups)
        lb, res = real_bound(idx, reps, demand, of_job, groups, deadline, **kw)
        seen["rounds' groups"] = list(res.columns) if res is not None else None
        return lb, res

    def dive_spy(idx, classes, columns, seed_groups, deadline, **kw):
        seen["seeds"], seen["dive columns"] = list(seed_groups), list(columns)
        return real_dive(idx, classes, columns, seed_groups, deadline, **kw)

    real_cg = primalcg.primal_columns

    def cg_spy(idx, classes, columns, deadline, **kw):
        seen["cg"], seen["cg from"] = deadline, list(columns)
        out = real_cg(idx, classes, columns, deadline, **kw)
        seen["cg columns"] = list(out.columns)
        return out

    monkeypatch.setattr(fast_mod, "fast_solve", fast_spy)
    monkeypatch.setattr(boxstab, "fleet_bound", bound_spy)
    monkeypatch.setattr(dive_mod, "dive", dive_spy)
    monkeypatch.setattr(primalcg, "primal_columns", cg_spy)
    _fleet_phases_on_small_instances(monkeypatch)
    inst = _inst(10, 12, 8)
    limit = 6.0
    out = solve_mod.solve(inst, SolveOptions(time_limit_s=limit))
    fast_s, primal_s = solve_mod.fleet_shares(limit)
    assert 0 < fast_s < limit - primal_s < limit
    assert {"fast", "bound", "cg", "seeds"} <= set(seen), f"a phase did not run: {sorted(seen)}"
    # the rounds end primal_s (less the finish, at most 0.3 s here) before the fast path's deadline
    # plus what lies between the two shares
    gap = float(seen["bound"]) - float(seen["fast"])  # type: ignore[arg-type]
    assert limit - fast_s - primal_s - 0.5 <= gap <= limit - fast_s - primal_s + 0.01, gap
    assert seen["plan groups"], "the box master was meant to start from the fast path's groups"
    assert seen["seeds"] == [], "the dive was given the fast path's plan"
    # column generation from the rounds' groups (not the fast path's plan) for fleet_columns_s, the
    # dive from its groups
    cg_s = float(seen["cg"]) - float(seen["bound"])  # type: ignore[arg-type]
    assert 0 < solve_mod.fleet_columns_s(limit) < primal_s
    assert solve_mod.fleet_columns_s(limit) - 0.5 <= cg_s <= solve_mod.fleet_columns_s(limit) + 0.5, cg_s
    assert seen["cg from"] == seen["rounds' groups"], "column generation did not start from the rounds' groups"
    # (on a loaded machine the rounds may price no group and column generation find none in its share:
    # the dive then has the rounds' groups)
    if seen["cg columns"]:
        assert seen["dive columns"] == seen["cg columns"], "the dive did not start from column generation's groups"
        assert "LP-guided dive over those" in out.record.message
    else:
        assert seen["dive columns"] == seen["cg from"]
    assert check(inst, out.plan) == []


def test_jobs_the_fast_paths_share_left_out_get_another_share_before_the_bound_phase_is_given_up(monkeypatch):
    """Regression (a CI run under load): the fast path's first share (1/15 of the limit) ended before
    its repair placed one job, and the command gave the bound phase's time to the search as if the
    fleet could not hold every job. Now the search goes on from that plan for another share and the
    bound phase runs when the plan then holds every job. Here the first call's plan is made to leave
    a job out (as a cut-short repair does), and the second share's plan holds every job (the first
    call's own plan stands in when the search from the short plan has not placed the job by the end
    of its share: on a loaded machine the real repair could still be cut short, and the solve would
    rightly go on to a third call), whatever the machine's speed."""
    import formulation.placement.fast as fast_mod
    import formulation.placement.solve as solve_mod
    from formulation.common import SolveOptions
    from formulation.placement.check import check
    from formulation.placement.evaluate import Group, Solution
    from tests.placement.test_placement_farley import _inst

    calls: list[tuple[float, bool]] = []
    real = fast_mod.fast_solve
    whole: list = []  # the first call's plan, before a job is taken out of it

    def spy(idx, deadline, warm=None, **kw):
        calls.append((deadline, warm is not None))
        sol, st = real(idx, deadline, warm, **kw)
        if len(calls) == 2 and sol.unplaced and whole and not whole[0].unplaced:
            sol = whole[0]  # the second share's repair, as on an idle machine: every job placed
        if len(calls) == 1:  # the first share's plan, one job short
            whole.append(sol)
            big = max(range(len(sol.groups)), key=lambda i: len(sol.groups[i].members))
            g = sol.groups[big]
            assert len(g.members) >= 2, "the instance was meant to pair jobs"
            groups = list(sol.groups)
            groups[big] = Group(g.config, tuple(g.members[1:]), g.anchor)
            sol = Solution(groups, list(sol.unplaced) + [g.members[0]])
        return sol, st

    monkeypatch.setattr(fast_mod, "fast_solve", spy)
    _fleet_phases_on_small_instances(monkeypatch)
    inst = _inst(10, 12, 8)  # (a fleet that holds every job)
    out = solve_mod.solve(inst, SolveOptions(time_limit_s=8.0))
    assert whole and not whole[0].unplaced, "the fast path's own first plan left a job out: the instance was meant to fit"
    assert len(calls) == 2, f"expected the fast path and one more share from its plan; calls: {calls}"
    (first, _), (second, from_plan) = calls
    assert from_plan and second - first == pytest.approx(2.0, abs=0.05), "the second share is not the fast path's share"
    assert "box-stabilised bound" in out.record.message, out.record.message
    assert "in place of the bound phase" not in out.record.message
    assert not out.solution.unplaced and check(inst, out.plan) == []
