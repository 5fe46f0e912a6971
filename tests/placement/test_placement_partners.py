"""The partner-capped load bound (:mod:`formulation.placement.partners`) against brute force.

Feasible groups are found independently of the optimisers (grown member by member, each decided by
Howard's cycle times on the pins, ``placement_helpers.group_feasible``); optima are the exhaustive
ones (``distinct_oracle``, ``oracle``). The solver is never its own reference.
"""

from __future__ import annotations

import numpy as np
import pytest

from formulation.placement.evaluate import Config, Index
from formulation.placement.fast import FastStats, bound_with_partners, load_bound
from formulation.placement.partners import partners
from tests.placement.placement_helpers import distinct_oracle, oracle, small_instance
from tests.placement.test_placement_farley import _groups, _inst

CASES = [(8, 11, 3), (10, 12, 4), (9, 5, 3)]  # (jobs, seed, nodes per type) of generate_distinct


@pytest.fixture(scope="module", params=CASES, ids=[f"n{c[0]}-seed{c[1]}-cap{c[2]}" for c in CASES])
def case(request):
    inst = _inst(*request.param)
    return inst, Index(inst), _groups(inst), distinct_oracle(inst)[0]


def test_caps_hold_on_every_feasible_group(case):
    """The proof's three facts, group by group: ``T <= tau`` and ``|S| <= m`` for every member of
    a group of two or more, and a member without partners is only ever alone."""
    _inst_, idx, groups, _ = case
    P = partners(idx)
    assert P.done.all()
    multi = 0
    for members, c in groups:
        k = idx.config_id[Config(*c)]
        m = list(members)
        if len(m) == 1:
            continue
        multi += 1
        T = idx.slo[m].min()
        assert (P.tau[k, m] >= T * (1 - 1e-9)).all(), (members, c)
        assert (P.m[k, m] >= len(m)).all(), (members, c)
    assert multi > 0  # the cases have groups of several members


def test_shares_sum_to_at_most_one_on_every_feasible_group(case):
    """For random weights on the five loads, the capped shares of every feasible group's members sum
    to at most 1 (what makes the bound valid), and some share is above the plain load's."""
    _inst_, idx, groups, _ = case
    P = partners(idx)
    rng = np.random.default_rng(1)
    raised = False
    for _ in range(5):
        theta = rng.dirichlet(np.ones(5), size=len(idx.configs))
        for members, c in groups:
            k = idx.config_id[Config(*c)]
            m = np.array(members)
            kk = np.full(len(m), k)
            e = P.effective_slo(idx, kk, m)
            L = np.stack([idx.a[k, m] / e, idx.bs[k, m] / e, idx.rollout_w(k, m) / idx.dram_cap_r[k],
                          idx.state_t[m] / idx.dram_cap_t[k], 1.0 / P.m[k, m]], axis=1)
            w = (L * theta[k]).sum(axis=1)
            s = np.where(P.tau[k, m] <= 0, 1.0, np.minimum(w, 1.0))
            assert s.sum() <= 1 + 1e-9, (members, c, s)
            plain = (np.stack([idx.a[k, m] / idx.slo[m], idx.bs[k, m] / idx.slo[m]], axis=1) * theta[k, :2]).sum(axis=1)
            raised |= bool((s > plain + 1e-9).any())
    assert raised


def test_bound_never_exceeds_the_exhaustive_optimum(case):
    _inst_, idx, _, opt = case
    P = partners(idx)
    capped = load_bound(idx, iterations=60, partners=P)
    plain = load_bound(idx, iterations=60)
    assert capped is not None and plain is not None
    assert capped <= opt + 1e-6, (capped, opt)
    st = FastStats()
    both = bound_with_partners(idx, st, deadline=float("inf"))
    assert both is not None and plain - 1e-9 <= both <= opt + 1e-6


@pytest.mark.parametrize("seed", range(8))
def test_random_small_instances_bound_below_the_oracle(seed):
    """Seeded random instances (warm switches, pinned members, DRAM limits, rollout-heavy jobs):
    the partner-capped bound over every job is at most the exhaustive optimum of placing them all."""
    inst = small_instance(seed, 6 + seed % 2, capacity=(7, 7), both_types=True, switches=seed % 2 == 0, rollout_heavy=0.3 if seed % 3 == 0 else 0.0,
                          dram_gb=(512.0, 1024.0))
    idx = Index(inst)
    if not idx.ok.any(axis=0).all():
        pytest.skip("a job fits nowhere alone")
    cost, unplaced = oracle(inst)
    if unplaced:
        pytest.skip("the fleet cannot place every job")
    b = load_bound(idx, iterations=60, partners=partners(idx))
    assert b is not None and b <= cost + 1e-6, (b, cost)


def test_a_deadline_leaves_the_plain_loads_and_the_bound_valid(case):
    _inst_, idx, _, opt = case
    P = partners(idx, deadline=0.0)  # nothing computed: tau = slo, m = inf
    assert not P.done.any()
    assert load_bound(idx, iterations=1, partners=P) == pytest.approx(load_bound(idx, iterations=1))
    assert load_bound(idx, iterations=60, partners=P) <= opt + 1e-6


def test_the_record_names_the_bound_method():
    from formulation.placement.fast import fast_solve

    inst = _inst(10, 12, 4)
    idx = Index(inst)
    sol, st = fast_solve(idx, deadline=__import__("time").perf_counter() + 3.0)
    assert st.bound is not None
    assert st.bound_method in st.message()
    assert st.bound_method.startswith("load bound")
