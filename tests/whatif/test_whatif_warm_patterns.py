"""Warm-start patterns carried into a capacity solve (``FleetPatternModel.feasible_patterns``, the
vectorised ``Index.feasible``) are judged as the scalar check judges them."""

from __future__ import annotations

import warnings

import numpy as np

from formulation.capacity.instance import CapacityInstance
from formulation.capacity.patterns import FleetPatternModel
from formulation.capacity.result import start
from formulation.placement.colgen import job_classes
from tests.placement.placement_helpers import small_instance


def test_a_job_no_own_count_serves_does_not_fail_the_patterns_it_is_absent_from():
    """``planner whatif scenarios/procurement.yaml`` printed numpy's "invalid value encountered in
    multiply": on an own-sized configuration the rollout-side weight of a job that no own count
    serves is inf, and 0 (the job absent) x inf is NaN, which failed every pattern of that
    configuration, the job's or not (72 of 240 feasible single-member patterns here)."""
    p = small_instance(21, 7, capacity=(8, 4), dram_gb=(2048.0, 2048.0), rollout_heavy=0.3, pinned_members_max=8)
    jobs = list(p.jobs)
    jobs[0] = jobs[0].model_copy(update={"slo_s": 1.0})  # no configuration serves j0: its own count is inf
    inst = CapacityInstance(name="own-inf", placement=p.model_copy(update={"jobs": jobs}))
    idx, budget_new, early = start(inst, "co-execution")
    assert early is None
    assert bool(idx.own.any()) and bool(np.isinf(idx.WO).any()), "the case needs an own-sized configuration and an inf own count"
    model = FleetPatternModel(idx, job_classes(idx), inst.owned, budget_new, 1, True)
    rep = [int(r) for r in model.cl.rep]
    pats = [(k, {c: 1}) for k in range(len(idx.configs)) for c in range(len(rep))]
    pats += [(k, {a: 1, b: 1}) for k in range(len(idx.configs)) for a in range(len(rep)) for b in range(a + 1, len(rep))]
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        got = model.feasible_patterns(pats)
    want = np.array([idx.feasible(k, [rep[c] for c in counts]) for k, counts in pats])
    assert want[[bool(idx.own[k]) for k, _ in pats]].any(), "some own-sized pattern is feasible"
    assert (got == want).all(), [pats[i] for i in np.flatnonzero(got != want)][:5]
