"""The anytime bound (:mod:`formulation.placement.farley`) against brute force on small distinct instances.

Every feasible group is found independently of the optimisers (grown member by member, decided by
Howard's cycle times on the whole pools, ``placement_helpers.group_feasible``); the optimum is the
exhaustive one (``distinct_oracle``).
"""

from __future__ import annotations

import numpy as np
import pytest

from formulation.placement.evaluate import Config, Index
from formulation.placement.explain import placeable_alone
from formulation.placement.farley import cheap_value_bounds, farley_bound, items_for, stabilised_bound
from benchmarks.placement.generate import generate_distinct
from formulation.placement.pricing import price
from tests.placement.placement_helpers import config_cost, configs_of, distinct_oracle, group_feasible, own_count, penalty

pytestmark = pytest.mark.jit  # (tests/conftest.py: one xdist group compiles the kernel once)

CASES = [(8, 11, 3), (10, 12, 4)]  # (jobs, seed, nodes per type)


def _inst(n, seed, cnt):
    inst = generate_distinct(n, seed, counts={"H20": cnt, "H800": cnt, "A100": cnt, "L40S": cnt}, unplaceable=0.0)
    keep = placeable_alone(Index(inst))  # (as the solvers do: the bound covers the jobs that fit somewhere)
    return inst.model_copy(update={"jobs": [j for j, k in zip(inst.jobs, keep) if k]})


def _groups(inst):
    """Every feasible (members, configuration) by growing groups: a group whose rollout or training
    seconds already exceed the smallest SLO stays infeasible with more members."""
    jobs, confs, out = inst.jobs, configs_of(inst), []

    def necessary(members, c) -> bool:
        p, nr, q, nt, m, own = c  # m >= 1: members on rollout nodes of their own (no rollout ring), at most m
        lim = min(jobs[i].slo_s for i in members) * (1 + 1e-9)
        counts = [own_count(inst, i, c) if own else nr for i in members]  # own: each member's own count
        if any(x is None for x in counts) or (own and sum(counts) > nr):  # type: ignore[misc]
            return False
        ra = [jobs[i].rollout_s.get(p, {}).get(x) for i, x in zip(members, counts)]
        tb = [jobs[i].train_s.get(q, {}).get(nt) for i in members]
        if any(x is None for x in ra + tb) or (m and len(members) > m):
            return False
        return (m > 0 or sum(ra) <= lim) and sum(tb) <= lim  # type: ignore[arg-type]

    stack = [((i,), [c for c in confs if necessary((i,), c)]) for i in range(len(jobs))]
    while stack:
        members, cands = stack.pop()
        out += [(members, c) for c in cands if group_feasible(inst, members, c)]
        for nxt in range(members[-1] + 1, len(jobs)):
            keep = [c for c in cands if necessary(members + (nxt,), c)]
            if keep:
                stack.append((members + (nxt,), keep))
    return out


@pytest.fixture(scope="module", params=CASES, ids=[f"n{c[0]}-seed{c[1]}-cap{c[2]}" for c in CASES])
def case(request):
    inst = _inst(*request.param)
    idx = Index(inst)
    groups = _groups(inst)
    best = {}  # configuration -> feasible member sets
    for members, c in groups:
        best.setdefault(c, []).append(members)
    return inst, idx, best, distinct_oracle(inst)[0]


@pytest.fixture(params=["numpy", "compiled"])
def cheap_path(request, monkeypatch):
    """The cheap bounds in numpy, or on the compiled kernel (:func:`formulation.placement.farley._compiled`)."""
    from formulation.placement import pricing_jit

    if request.param == "compiled":
        pytest.importorskip("numba")
        assert pricing_jit._load() is not None
    else:
        monkeypatch.setattr(pricing_jit, "_KERNEL", None)
    return request.param


def test_value_bounds_cover_every_feasible_group(case, cheap_path):
    _inst_, idx, by_config, _ = case
    rng = np.random.default_rng(0)
    reps, demand = np.arange(idx.n), np.ones(idx.n)
    items_of = items_for(idx, reps, demand)
    for _ in range(3):
        pi = rng.uniform(0, 60, idx.n) * (rng.random(idx.n) < 0.8)
        cheap = cheap_value_bounds(idx, reps, demand, pi)
        for c, sets in by_config.items():
            k = idx.config_id[Config(*c)]
            most = max(pi[list(m)].sum() for m in sets)
            assert cheap[k] >= most - 1e-6, (c, cheap[k], most)
            assert price(items_of(k, pi), 0.0, max_columns=1, node_budget=50).upper_bound >= most - 1e-6
        # a configuration with no feasible group containing a valued job may still get a bound, never a negative one
        assert (cheap >= 0).all()


def test_farley_and_stabilised_bounds_never_exceed_the_optimum(case):
    inst, idx, by_config, best = case
    P = penalty(inst)
    reps, demand = np.arange(idx.n), np.ones(idx.n)
    items_of = items_for(idx, reps, demand)
    rng = np.random.default_rng(1)
    # the LP bound over every feasible group (brute force) is the most Farley's scaling can certify
    bounds = []
    for scale in (5, 50, 500, 5 * P):  # (the largest drives pi above the penalty: the slack term scales it)
        pi = rng.uniform(0, scale, idx.n)
        b, r, searched = farley_bound(idx, reps, demand, pi, P, items_of)
        assert searched and r >= 1.0
        # pi / r is dual feasible: every brute-force group is worth at most its cost after scaling
        for c, sets in by_config.items():
            assert max(pi[list(m)].sum() for m in sets) / r <= config_cost(inst, c) + 1e-6
        assert b <= best + 1e-6
        bounds.append(b)
        s = stabilised_bound(idx, reps, demand, pi, P, items_of, deadline=float("inf"))
        assert s is not None and s <= best + 1e-6
    assert max(bounds) > 0
    # the cut-short search (deadline already passed) stays valid, from the cheap bounds alone
    b, _, searched = farley_bound(idx, reps, demand, rng.uniform(0, 50, idx.n), P, items_of, deadline=0.0)
    assert b <= best + 1e-6


@pytest.mark.parametrize("n, seed, cnt", CASES)
def test_an_unconverged_lp_on_few_classes_still_gets_the_farley_bound_and_it_holds(monkeypatch, n, seed, cnt):
    # column generation stopped after its first round (a loaded machine): below 150 classes the
    # Farley bound now stands in too (before, only the load bound did: 1,364 against 1,886 at 100
    # distinct jobs under 5 s); it never exceeds the exhaustive optimum
    import time

    from formulation.placement.colgen import PatternModel, job_classes
    from formulation.placement.fast import load_bound

    inst = _inst(n, seed, cnt)
    idx = Index(inst)
    real = PatternModel.column_generation

    def one_round(self, st, t0, deadline, lp_deadline, node_budget):
        return real(self, st, t0, deadline, time.perf_counter(), node_budget)  # the LP's share is already over

    monkeypatch.setattr(PatternModel, "column_generation", one_round)
    pm = PatternModel(idx, job_classes(idx))
    found, st = pm.solve(time.perf_counter() + 60, None, {}, 1e-4)
    if st.lp_converged:
        pytest.skip("the LP converged in its first round")
    assert st.farley_bound is not None
    best, _ = distinct_oracle(inst)  # with the penalty of the jobs the fleet leaves out, as the model
    assert st.farley_bound <= best + 1e-6
    assert st.lower_bound is not None and st.lower_bound <= best + 1e-6
    assert st.lower_bound >= min(st.farley_bound, load_bound(idx)) - 1e-6


def test_compiled_cheap_bounds_are_the_fractional_knapsacks():
    """The compiled cheap bounds against :func:`formulation.placement.pricing.fractional_fills` (the
    numpy knapsack) on synthetic configurations: many small items (more than the kernel's 24 passes
    fill, so its sorted tail runs), free items, several copies, pinned and whole-pool rollout rows."""
    pytest.importorskip("numba")
    from formulation.placement.pricing import fractional_fills
    from formulation.placement.pricing_kernel import cheap_bounds

    rng = np.random.default_rng(7)
    for trial in range(20):
        K, n_jobs = 6, 300
        small = trial % 2 == 0
        a = rng.uniform(0, 3 if small else 60, (K, n_jobs))
        bs = rng.uniform(0, 3 if small else 60, (K, n_jobs))
        a[:, rng.integers(0, n_jobs, 20)] = 0.0  # free on one side
        ok = rng.random((K, n_jobs)) < 0.7
        pinned = np.array([True, False] * (K // 2))
        cap_r = np.where(pinned, rng.integers(2, 200, K), rng.uniform(500, 4000, K)).astype(float)
        cap_t = rng.uniform(500, 8000, K)
        dram_r, state_t = rng.uniform(0, 40, n_jobs), rng.uniform(0, 80, n_jobs)
        reps = rng.choice(n_jobs, 200, replace=False)
        slo = rng.uniform(100, 400, len(reps))
        v, d = rng.uniform(0.1, 20, len(reps)), rng.integers(1, 4, len(reps)).astype(float)
        own_k = np.array([-1, -1, 0, -1, 1, -1][:K], dtype=np.int64)  # two own-sized rows (pinned ones)
        pinned |= own_k >= 0
        own_w = rng.integers(1, 4, (2, n_jobs)).astype(float)
        cap_r = np.where(own_k >= 0, rng.integers(2, 40, K), cap_r).astype(float)
        got = cheap_bounds(ok, a, bs, pinned, own_k, own_w, cap_r, cap_t, reps.astype(np.int64), slo, dram_r, state_t, v, d)
        for k in range(K):
            sel = ok[k, reps]
            if not sel.any():
                assert got[k] == 0.0
                continue
            r = reps[sel]
            sizes = (a[k, r] / slo[sel], bs[k, r] / slo[sel],
                     (own_w[own_k[k], r] if own_k[k] >= 0 else np.ones(len(r)) if pinned[k] else dram_r[r]) / cap_r[k],
                     state_t[r] / cap_t[k])
            want = min(float(fractional_fills(v[sel], z, d[sel][None, :], np.ones(1))[0]) for z in sizes)
            assert got[k] == pytest.approx(want, rel=1e-9, abs=1e-9), (trial, k)
