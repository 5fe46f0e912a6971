"""The flat best fit (:mod:`formulation.placement.flatbest`): every pair's groups tested at once,
pools free to grow.

It must be the same packing as the per-pair best fit over every pair
(``pack(slo_order, max_pairs=16)``), pass Howard (group_feasible) and the solver-free checker,
warm switches included, respect the node counts on a tight fleet, and give up (None) past its
deadline."""

from __future__ import annotations

import pytest

from benchmarks.placement.bench_backends import families
from benchmarks.placement.generate import generate_distinct
from formulation.placement.check import check
from formulation.placement.explain import explain
from formulation.placement.fast import pack, slo_order
from formulation.placement.flatbest import flat_best_fit
from formulation.placement.plan import build_plan
from tests.placement.placement_helpers import assert_same_packing_and_valid, placeable_sub
from tests.placement.test_placement_distinct import _with_switches


@pytest.mark.parametrize("seed", range(3))
@pytest.mark.parametrize("switches", [False, True])
def test_flat_best_fit_is_the_all_pairs_best_fit_and_passes_howard_and_the_checker(seed, switches):
    inst = generate_distinct(120, seed)
    if switches:
        inst = _with_switches(inst, seed)
    sub_inst, sub = placeable_sub(inst)
    flat = flat_best_fit(sub, slo_order(sub))
    assert flat is not None
    per_pair = pack(sub, slo_order(sub), max_pairs=16)
    assert_same_packing_and_valid(sub_inst, sub, flat, per_pair, seed)


@pytest.mark.parametrize("family", ["distinct-loose", "classes", "two-types"])
def test_flat_best_fit_on_other_families_is_the_all_pairs_best_fit(family):
    sub_inst, sub = placeable_sub(families()[family](150, 1))
    flat = flat_best_fit(sub)
    assert flat is not None
    per_pair = pack(sub, slo_order(sub), max_pairs=16)
    assert sorted((g.config, g.members) for g in flat.groups) == sorted((g.config, g.members) for g in per_pair.groups)
    assert check(sub_inst, build_plan(sub, flat, [explain(sub, j) for j in flat.unplaced])) == []


@pytest.mark.parametrize("seed", [0, 1, 3])
def test_flat_best_fit_respects_the_node_counts_and_gives_up_past_its_deadline(seed):
    inst = generate_distinct(60, seed, counts={"H20": 3, "H800": 3, "A100": 3, "L40S": 3}, unplaceable=0.0)
    sub_inst, sub = placeable_sub(inst)
    assert flat_best_fit(sub, deadline=0.0, sweep_every=4) is None
    sol = flat_best_fit(sub, sweep_every=4)
    assert sol is not None
    # a job no group of its own fits may still join one (the per-pair best fit's rule)
    per_pair = pack(sub, slo_order(sub), max_pairs=16)
    assert sorted((g.config, g.members) for g in sol.groups) == sorted((g.config, g.members) for g in per_pair.groups)
    used = sub.nodes_used(sol.groups)
    assert all(used[t] <= sub.capacity[t] for t in used)
    assert sol.unplaced  # 60 jobs on 12 nodes: some are left out, none is placed twice
    placed = [j for g in sol.groups for j in g.members]
    assert len(placed) == len(set(placed)) and not set(placed) & set(sol.unplaced)
    assert check(sub_inst, build_plan(sub, sol, [explain(sub, j) for j in sol.unplaced])) == []
