"""The plan from the bound phase's groups (:mod:`formulation.placement.dive`), judged without the index.

Each group of the dive's plan is decided by Howard's cycle times on its pins and the DRAM per node
(:func:`tests.placement.placement_helpers.group_feasible`), the nodes are counted against the
fleet, and the cost is compared with the exhaustive optimum (:func:`distinct_oracle`).
"""

from __future__ import annotations

import functools
from collections import Counter
from typing import Optional

import numpy as np
import pytest

from formulation.placement.boxstab import fleet_bound
from formulation.placement.colgen import job_classes
from formulation.placement.dive import dive
from formulation.placement.evaluate import Index
from tests.placement.placement_helpers import config_cost, config_use, distinct_oracle, group_feasible
from tests.placement.test_placement_farley import _inst

pytestmark = pytest.mark.jit  # (tests/conftest.py: one xdist group compiles the kernel once)

CASES = [(8, 11, 3), (10, 12, 8), (10, 12, 2), (9, 21, 3)]  # (jobs, seed, nodes per type): roomy and tight fleets


@functools.lru_cache(maxsize=None)
def _rounds(case) -> Optional[tuple]:
    """The box rounds' groups (``fleet_bound``'s columns, as tuples) of a case's instance; None when it
    finds none. Computed once per case in a test run: two tests dive over the rounds of each of the
    fleets of 8 nodes per type, whose rounds take 2-3 s each (deterministic: no deadline)."""
    inst = _inst(*case)
    idx = Index(inst)
    cl = job_classes(idx)
    _lb, res = fleet_bound(idx, cl.rep, cl.demand, cl.of_job, [], float("inf"))
    return None if res is None else tuple((int(k), tuple(counts.items())) for k, counts in res.columns)


def _setup(case):
    """(instance, index, job classes, the box rounds' groups or None) of a case; fresh objects on every call
    (the groups as the list of (configuration, {class: copies}) that ``fleet_bound`` gives), only the
    rounds' result is shared (:func:`_rounds`)."""
    inst = _inst(*case)
    idx = Index(inst)
    cols = _rounds(case)
    return inst, idx, job_classes(idx), None if cols is None else [(k, dict(counts)) for k, counts in cols]


_OPTIMA: dict[str, tuple[float, int]] = {}


def _optimum(inst) -> tuple[float, int]:
    """:func:`distinct_oracle` once per instance (by its content) in a test run: a test may judge two plans of one."""
    key = inst.model_dump_json()
    if key not in _OPTIMA:
        _OPTIMA[key] = distinct_oracle(inst)
    return _OPTIMA[key]


def _judge(inst, idx, sol) -> float:
    """The plan's $/h after checking it from outside the index; asserts what must hold."""
    types = sorted(inst.pool_types)
    use = np.zeros(len(types))
    seen: set[int] = set()
    cost = 0.0
    for g in sol.groups:
        c = tuple(idx.configs[g.config])
        assert group_feasible(inst, tuple(g.members), c), (g.members, c)
        assert not seen & set(g.members), "a job placed twice"
        seen |= set(g.members)
        use += np.array(config_use(inst, c))
        cost += config_cost(inst, c)
    assert (use <= np.array([inst.pool_types[t].count for t in types])).all(), "more nodes than the fleet has"
    assert seen | set(sol.unplaced) == set(range(len(inst.jobs))), "a job neither placed nor left out"
    return cost


def judge_against_optimum(inst, idx, sol) -> None:
    """The plan ``sol`` is valid from outside (:func:`_judge`) and, leaving out as few jobs as the
    exhaustive optimum, costs no less than it; it leaves out no fewer."""
    assert sol is not None
    cost = _judge(inst, idx, sol)
    opt, opt_unplaced = _optimum(inst)
    assert len(sol.unplaced) >= opt_unplaced
    if len(sol.unplaced) == opt_unplaced:
        assert cost + idx.penalty * len(sol.unplaced) >= opt - 1e-6


@pytest.mark.parametrize("case", CASES, ids=[f"n{c[0]}-seed{c[1]}-cap{c[2]}" for c in CASES])
def test_the_dive_gives_a_valid_plan_never_below_the_optimum(case):
    inst, idx, cl, columns = _setup(case)
    assert columns, "the box rounds found no groups to dive over"
    judge_against_optimum(inst, idx, dive(idx, cl, columns, [], float("inf")))


def test_a_dive_past_its_deadline_returns_nothing():
    inst = _inst(8, 11, 3)
    idx = Index(inst)
    cl = job_classes(idx)
    assert dive(idx, cl, [], [], 0.0) is None


#: instances whose first LP over the box rounds' groups is fractional (the dive fixes, then re-solves)
FRACTIONAL = [(8, 10, 3), (8, 13, 2), (8, 14, 8), (10, 11, 8), (10, 13, 2)]


@pytest.mark.parametrize("case", FRACTIONAL, ids=[f"n{c[0]}-seed{c[1]}-cap{c[2]}" for c in FRACTIONAL])
def test_a_dive_cut_short_after_fixing_groups_keeps_them_and_admits_the_rest(case, monkeypatch):
    """The deadline passes right after the first LP's groups are fixed (a clock that jumps past it
    from its third reading on: before the first LP, after it, then the next round): the plan holds
    the groups fixed so far and the greedy's admission of the other jobs, valid from outside."""
    import time as real_time

    import formulation.placement.dive as dive_module

    inst, idx, cl, columns = _setup(case)
    assert columns, "the box rounds found no groups to dive over"
    whole = dive(idx, cl, columns, [], float("inf"))
    assert whole is not None

    class JumpingClock:
        reads = 0

        def perf_counter(self) -> float:
            self.reads += 1
            return real_time.perf_counter() + (0.0 if self.reads <= 2 else 1e9)

    clock = JumpingClock()
    monkeypatch.setattr(dive_module, "time", clock)
    cut = dive(idx, cl, columns, [], real_time.perf_counter() + 600.0, finish_by=float("inf"))
    assert clock.reads > 2, "the first LP was integral: the case no longer tests a dive cut short"
    assert cut is not None, "a dive cut short after fixing groups gave no plan"
    _judge(inst, idx, cut)
    priced = {(int(k), tuple(sorted(c.items()))) for k, c in columns}
    held = [g for g in cut.groups
            if (int(g.config), tuple(sorted(Counter(int(cl.of_job[j]) for j in g.members).items()))) in priced]
    assert held, "none of the rounds' groups the dive fixed is in its plan"


@pytest.mark.parametrize("case", FRACTIONAL, ids=[f"n{c[0]}-seed{c[1]}-cap{c[2]}" for c in FRACTIONAL])
def test_the_dive_without_shrunk_copies_is_valid_too(case):
    """``shrink=False`` (the groups sharing a class with a fixed one only dropped) still gives a
    valid plan never below the exhaustive optimum."""
    inst, idx, cl, columns = _setup(case)
    assert columns
    judge_against_optimum(inst, idx, dive(idx, cl, columns, [], float("inf"), shrink=False))
    judge_against_optimum(inst, idx, dive(idx, cl, columns, [], float("inf"), shrink=True))


def test_a_fixed_group_leaves_shrunk_copies_of_the_groups_it_overlaps():
    """Fixing a group adds, for each LP group sharing a class with it, that group without the
    covered classes on its configuration at its price; each copy is a feasible group from outside."""
    from formulation.placement.colgen import PatternModel
    from formulation.placement.dive import _shrunk_copies
    from formulation.placement.master import Column

    inst, idx, cl, columns = _setup((10, 12, 8))
    assert columns is not None
    multi = [(int(k), c) for k, c in columns if len(c) >= 2]
    pairs = [(a, b) for a in multi for b in multi if a is not b and set(a[1]) & set(b[1]) and set(b[1]) - set(a[1])]
    assert pairs, "no two priced groups share a class: the case no longer tests the copies"
    (ka, ca), (kb, cb) = pairs[0]
    pm = PatternModel(idx, cl)
    ia = pm.master.add(Column(ka, ca, float(idx.cost[ka])))
    ib = pm.master.add(Column(kb, cb, float(idx.cost[kb])))
    before = len(pm.master.columns)
    covered = set(ca)
    assert _shrunk_copies(pm.master, idx, [ia, ib], ia, set(ca), covered) == 1
    copy = pm.master.columns[before]
    assert copy.config == kb and copy.cost == float(idx.cost[kb])
    assert copy.counts == {c: n for c, n in cb.items() if c not in covered}
    members = tuple(j for c, n in copy.counts.items() for j in cl.jobs[c][:n])
    assert group_feasible(inst, members, tuple(idx.configs[kb]))
    assert _shrunk_copies(pm.master, idx, [ia, ib], ia, set(ca), covered) == 0, "a copy added twice"
