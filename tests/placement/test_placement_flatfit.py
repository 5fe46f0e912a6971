"""The flat first fit (:mod:`formulation.placement.flatfit`): every pair's groups tested at once.

It must be the same packing as the per-pair first fit over every pair (``max_pairs=16``) on
instances where neither's window binds, pass Howard (group_feasible) and the solver-free
checker, warm switches included, and respect the node counts on a tight fleet."""

from __future__ import annotations

import pytest

from benchmarks.placement.generate import generate_distinct
from formulation.placement.check import check
from formulation.placement.explain import explain
from formulation.placement.fast import first_fit, slo_order
from formulation.placement.flatfit import flat_first_fit
from formulation.placement.plan import build_plan
from tests.placement.placement_helpers import assert_same_packing_and_valid, placeable_sub
from tests.placement.test_placement_distinct import _with_switches


@pytest.mark.parametrize("seed", range(3))
@pytest.mark.parametrize("switches", [False, True])
def test_flat_first_fit_is_the_all_pairs_first_fit_and_passes_howard_and_the_checker(seed, switches):
    inst = generate_distinct(120, seed)
    if switches:
        inst = _with_switches(inst, seed)
    sub_inst, sub = placeable_sub(inst)
    flat, cut = flat_first_fit(sub, slo_order(sub))
    per_pair, _ = first_fit(sub, slo_order(sub), max_pairs=16)
    assert not cut
    assert_same_packing_and_valid(sub_inst, sub, flat, per_pair, seed)


def test_flat_first_fit_respects_the_node_counts_and_a_passed_deadline():
    inst = generate_distinct(60, 1, counts={"H20": 3, "H800": 3, "A100": 3, "L40S": 3}, unplaceable=0.0)
    sub_inst, sub = placeable_sub(inst)
    for deadline in (float("inf"), 0.0):
        sol, cut = flat_first_fit(sub, deadline=deadline, sweep_every=4)
        assert cut == (deadline == 0.0)
        used = sub.nodes_used(sol.groups)
        assert all(used[t] <= sub.capacity[t] for t in used)
        assert sol.unplaced  # 60 jobs on 12 nodes: some are left out, none is placed twice
        placed = [j for g in sol.groups for j in g.members]
        assert len(placed) == len(set(placed)) and not set(placed) & set(sol.unplaced)
        assert check(sub_inst, build_plan(sub, sol, [explain(sub, j) for j in sol.unplaced])) == []


@pytest.mark.parametrize("seed", range(3))
def test_with_an_open_floor_each_group_opens_on_the_configuration_of_least_floored_share(seed):
    """``open_floor=f``: the job that opens a group (its first member) opens it on the whole-pool
    configuration of least ``c_k max(load, f)``, ``load`` its larger ring weight over its SLO (read
    here from the index's configurations x jobs matrices, not the first fit's per-type rows); ties
    to the cheaper configuration. The fleet is large, so no node count narrows the choice."""
    import numpy as np

    inst = generate_distinct(120, seed, fleet_per_job=20.0)
    sub_inst, sub = placeable_sub(inst)
    sol, cut = flat_first_fit(sub, slo_order(sub), open_floor=0.5)
    assert not cut and not sol.unplaced
    assert check(sub_inst, build_plan(sub, sol, [])) == []
    whole = np.flatnonzero(sub.pinned_m == 0)
    for g in sol.groups:
        o = g.members[0]
        ks = whole[sub.ok[whole, o]]
        share = sub.cost[ks] * np.maximum(np.maximum(sub.a[ks, o], sub.bs[ks, o]) / sub.slo[o], 0.5)
        best = share.min()
        assert share[ks == g.config][0] <= best * (1 + 1e-9), (o, g.config)
        assert sub.cost[g.config] == sub.cost[ks[share <= best * (1 + 1e-9)]].min()
