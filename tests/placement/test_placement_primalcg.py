"""Column generation at the master's duals (:mod:`formulation.placement.primalcg`), judged from outside.

The pattern LP over *every* feasible group, enumerated by brute force (Howard's cycle times on the
pins, :func:`tests.placement.test_placement_farley._groups`) and solved here as its own LP, is what
the phase must reach when it converges; its groups must each be feasible by the same outside test;
and the dive over them must give a valid plan no cheaper than the exhaustive optimum.
"""

from __future__ import annotations

import highspy
import numpy as np
import pytest

from formulation.placement.colgen import job_classes
from formulation.placement.dive import dive
from formulation.placement.evaluate import Index
from formulation.placement.primalcg import primal_columns
from tests.placement.placement_helpers import config_cost, config_use, group_feasible, penalty
from tests.placement.test_placement_dive import judge_against_optimum
from tests.placement.test_placement_farley import _groups, _inst

CASES = [(8, 11, 3), (10, 12, 8), (10, 12, 2), (9, 21, 3), (8, 13, 2)]  # (jobs, seed, nodes per type)


def _full_lp(inst) -> float:
    """The pattern LP over every feasible group: cover rows >= 1 per job, a row per node type
    (its count), a slack per job at the unplaced-job penalty."""
    types = sorted(inst.pool_types)
    n = len(inst.jobs)
    h = highspy.Highs()
    h.setOptionValue("output_flag", False)
    inf = highspy.kHighsInf
    h.addRows(n, np.ones(n), np.full(n, inf), 0, np.zeros(n, dtype=np.int32), np.zeros(0, dtype=np.int32), np.zeros(0))
    cap = np.array([inst.pool_types[t].count for t in types], dtype=float)
    h.addRows(len(types), np.full(len(types), -inf), cap, 0, np.zeros(len(types), dtype=np.int32),
              np.zeros(0, dtype=np.int32), np.zeros(0))
    p = penalty(inst)
    for j in range(n):
        h.addCol(p, 0.0, inf, 1, np.array([j], dtype=np.int32), np.array([1.0]))
    for members, c in _groups(inst):
        use = config_use(inst, c)
        rows = list(members) + [n + t for t in range(len(types)) if use[t]]
        vals = [1.0] * len(members) + [float(use[t]) for t in range(len(types)) if use[t]]
        h.addCol(config_cost(inst, c), 0.0, inf, len(rows), np.array(rows, dtype=np.int32), np.array(vals))
    h.run()
    assert h.getModelStatus() == highspy.HighsModelStatus.kOptimal
    return float(h.getInfo().objective_function_value)


@pytest.mark.parametrize("case", CASES, ids=[f"n{c[0]}-seed{c[1]}-cap{c[2]}" for c in CASES])
def test_converged_it_reaches_the_lp_over_every_feasible_group_with_feasible_groups(case):
    inst = _inst(*case)
    idx = Index(inst)
    cl = job_classes(idx)
    pc = primal_columns(idx, cl, [], float("inf"))
    assert pc.converged and pc.lp is not None and pc.first_lp is not None
    full = _full_lp(inst)
    assert pc.lp == pytest.approx(full, rel=1e-6, abs=1e-6), (pc.lp, full)
    assert pc.lp <= pc.first_lp + 1e-6
    assert pc.columns, "the last LP's support was empty"
    for k, counts in pc.columns:
        members: list[int] = []
        for c, m in counts.items():
            jobs = [j for j in range(idx.n) if cl.of_job[j] == c]
            assert m <= len(jobs), (c, m)
            members += jobs[:m]
        assert group_feasible(inst, tuple(sorted(members)), tuple(idx.configs[k])), (members, idx.configs[k])


DIVE_CASES = [(8, 11, 3), (10, 12, 2), (8, 13, 2)]  # (the exhaustive optimum of (10, 12, 8) takes ~20 s)


@pytest.mark.parametrize("case", DIVE_CASES, ids=[f"n{c[0]}-seed{c[1]}-cap{c[2]}" for c in DIVE_CASES])
def test_the_dive_over_its_groups_gives_a_valid_plan_never_below_the_optimum(case):
    inst = _inst(*case)
    idx = Index(inst)
    cl = job_classes(idx)
    pc = primal_columns(idx, cl, [], float("inf"))
    judge_against_optimum(inst, idx, dive(idx, cl, pc.columns, [], float("inf")))


def test_past_its_deadline_it_returns_no_groups():
    inst = _inst(8, 11, 3)
    idx = Index(inst)
    pc = primal_columns(idx, job_classes(idx), [], 0.0)
    assert pc.columns == [] and pc.lp is None and not pc.converged
