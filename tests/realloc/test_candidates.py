"""The numpy candidate generator against the Python reference: the same candidates to the last bit
(names, allocations, migration kind, cause, seconds, bytes, cost, steps), on the benchmark's
synthetic clusters, the example scenarios, several clusters with and without an inter-cluster
link, Reboot-only trainers and odd link figures; the vectorised migration costs against one plan
per target; the lazy steps and allocations against the tuples and dicts they stand for; the
vectorised throughput table against the scalar one; and the instance's structural checks."""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest

from formulation.realloc.bench import synthetic
from formulation.realloc.candidates import build_instance
from formulation.realloc.context import Links
from formulation.realloc.donors import DonorConfig, DonorDetector
from formulation.realloc.graph import build_graph
from formulation.realloc.instance import Candidate, Curve, LazyAlloc, LazyMoves, Move, Pool, ReallocInstance, Stage
from formulation.realloc.migrations import MigrationPlanner
from formulation.realloc.telemetry import TelemetrySnapshot
from tests.conftest import ROOT

FIELDS = ("name", "gpus", "migration_kind", "cause", "migration_s", "migration_bytes", "migration_cost")
DONORS = DonorConfig(theta=0.5, u_low=0.2, hold_s=0.0, kinds=("rollout", "tool_agent"))


def _donors(snap, config=DONORS):
    graph = build_graph(snap)
    return graph, [e.component for e in DonorDetector(config).observe(snap) if e.donor and graph.nodes[e.component].interruptible]


def _assert_same(graph, ctx, donors, max_candidates):
    ref = build_instance(graph, ctx, donors, max_candidates=max_candidates, margin=0.02, generator="python")
    fast = build_instance(graph, ctx, donors, max_candidates=max_candidates, margin=0.02, generator="numpy")
    assert ref.horizon_s == fast.horizon_s
    n = 0
    for a, b in zip(ref.stages, fast.stages, strict=True):
        assert [c.name for c in a.candidates] == [c.name for c in b.candidates], a.name
        for ca, cb in zip(a.candidates, b.candidates):
            for f in FIELDS:
                assert getattr(ca, f) == getattr(cb, f), (a.name, ca.name, f)  # exact, not approximate
            assert tuple(ca.moves) == tuple(cb.moves), (a.name, ca.name)
            n += 1
    assert ref.throughput_table() == fast.throughput_table()
    arr = fast.arrays()
    for s, st in enumerate(fast.stages):  # the arrays the solvers read are the candidates' allocations
        col = {p.name: i for i, p in enumerate(fast.pools)}
        dense = np.zeros_like(arr.gpus[s])
        for c, cand in enumerate(st.candidates):
            for p, g in cand.gpus.items():
                dense[c, col[p]] = g
        assert (dense == arr.gpus[s]).all(), st.name
    return n, {c.migration_kind for st in fast.stages for c in st.candidates}


@pytest.mark.parametrize("case", [("H100",), ("H100", "H800", "H20", "H200")], ids=["128gpu", "1024gpu"])
@pytest.mark.parametrize("seed", [0, 3, 7])
def test_numpy_generator_matches_the_reference_on_the_benchmark(case, seed):
    snap, ctx = synthetic(seed, case, 16 if len(case) == 1 else 32)
    graph, donors = _donors(snap)
    n, kinds = _assert_same(graph, ctx, donors, 10 if len(case) == 1 else 64)
    assert n > 50 and {"workload", "p2p"} <= kinds


def test_numpy_generator_matches_the_reference_on_the_example_scenarios():
    from planner.instances.realloc import build_context
    from planner.schema import load_scenario

    for stream, scen in (("tail-h100-16node.json", ROOT / "scenarios/dynarl/math-7b-128gpu.yaml"),
                         ("hetero-h20-h100.json", ROOT / "scenarios/realloc/hetero.yaml")):
        snaps = [TelemetrySnapshot.model_validate(d) for d in json.loads((ROOT / "scenarios/realloc" / stream).read_text())["snapshots"]]
        snap = snaps[-1]
        ctx = build_context(snap, load_scenario(scen))
        graph = build_graph(snap)
        donors = [c.name for c in snap.components if c.kind == "rollout"]
        n, _ = _assert_same(graph, ctx, donors, 8)
        assert n > 5


@pytest.mark.parametrize("inter", [None, 12.5], ids=["no-link", "link"])
@pytest.mark.parametrize("p2p", [True, False], ids=["p2p", "reboot"])
def test_numpy_generator_matches_the_reference_across_clusters(inter, p2p):
    """Pools in three clusters (Reboot where no link joins them), NICs that differ by type, and
    trainers that cannot reshard live: every migration kind and link rule."""
    snap, ctx = synthetic(11, ("H100", "H800", "H20", "H200"), 8)
    cluster = {"H100": "a", "H800": "b", "H20": "a", "H200": "c"}
    ctx.pools = [dataclasses.replace(p, cluster=cluster[p.gpu_type]) for p in ctx.pools]
    ctx.links = Links({"H100": 450.0, "H800": 400.0, "H20": 450.0, "H200": 900.0}, {"H100": 50.0, "H800": 25.0, "H20": 12.5, "H200": 100.0},
                      inter, storage_gb_per_s=2.0)
    ctx.components = {k: dataclasses.replace(v, p2p=p2p) for k, v in ctx.components.items()}
    graph, donors = _donors(snap)
    _, kinds = _assert_same(graph, ctx, donors, 24)
    assert ("reboot" in kinds) == (inter is None or not p2p) and ("p2p" in kinds) == p2p


def test_numpy_generator_falls_back_when_nvlink_is_slower_than_the_nic():
    """The vectorised link rule assumes NVLink >= NIC (always so on real hardware); otherwise the
    costs come from one plan per target, and still match."""
    snap, ctx = synthetic(5, ("H100", "H20"), 8)
    ctx.links = Links({"H100": 10.0, "H20": 450.0}, {"H100": 50.0, "H20": 50.0}, 50.0)
    graph, donors = _donors(snap)
    _assert_same(graph, ctx, donors, 16)


@pytest.mark.parametrize("seed", range(4))
def test_vectorised_migration_costs_match_one_plan_per_target(seed):
    """Random targets (not just the generator's): drains of part of a node, whole nodes, new nodes
    in other clusters, components that vanish from a node and reappear elsewhere."""
    rng = np.random.default_rng(seed)
    snap, ctx = synthetic(20 + seed, ("H100", "H20", "H200"), 6)
    ctx.pools = [dataclasses.replace(p, cluster="x" if p.gpu_type == "H200" else "y") for p in ctx.pools]
    ctx.links = dataclasses.replace(ctx.links, inter_cluster_gb_per_s=None if seed % 2 else 20.0)
    graph = build_graph(snap)
    pools = {p.name: p for p in ctx.pools}
    names = list(pools)
    for node in graph.nodes.values():
        cctx = ctx.components[node.name]
        unit = max(1, cctx.unit_gpus)
        cur = node.gpus_by_node()
        planner = MigrationPlanner(node.name, node.kind, cctx, cur, node.workers, pools, ctx.links)
        rows = []
        for _ in range(30):
            row = np.array([cur.get(p, 0) for p in names], dtype=np.int64)
            for i in rng.choice(len(names), size=int(rng.integers(1, 6)), replace=False):
                row[i] = unit * int(rng.integers(0, pools[names[i]].gpus // unit + 1))
            rows.append(row)
        kinds, seconds, nbytes, causes = planner.costs(np.array(rows))
        for i, row in enumerate(rows):
            mp = planner.plan({names[j]: int(row[j]) for j in np.flatnonzero(row)})
            assert (kinds[i], causes[i]) == (mp.kind, mp.cause)
            assert seconds[i] == mp.duration_s and nbytes[i] == mp.bytes_moved, (node.name, mp.kind)


def test_lazy_steps_and_allocations_read_like_what_they_stand_for():
    planned = []
    moves = (Move("workload", "a", 2, 1, 1.0, 0.0, "x"),)
    lazy = LazyMoves(lambda: planned.append(1) or moves)
    assert not planned and "not planned" in repr(lazy)
    assert lazy == moves and moves == lazy and len(lazy) == 1 and lazy[0] is moves[0] and list(lazy) == list(moves)
    assert planned == [1]  # planned once
    alloc = LazyAlloc(np.array([0, 3, 0, 2]), ["p", "q", "r", "s"])
    assert alloc == {"q": 3, "s": 2} and {"q": 3, "s": 2} == alloc and alloc != {"q": 3}
    assert alloc.get("p", 0) == 0 and "s" in alloc and "p" not in alloc and dict(alloc.items()) == {"q": 3, "s": 2}
    assert sum(alloc.values()) == 5 and Candidate("c", alloc).total_gpus == 5


def test_vectorised_table_equals_the_scalar_throughput():
    snap, ctx = synthetic(2, ("H100", "H800", "H20", "H200"), 32)
    graph, donors = _donors(snap)
    for generator in ("numpy", "python"):
        inst = build_instance(graph, ctx, donors, max_candidates=64, generator=generator)
        table = inst.throughput_table()
        mixed = 0
        for s, st in enumerate(inst.stages):
            for c, cand in enumerate(st.candidates):
                assert table[s][c] == inst.stage_throughput(s, c)
                mixed += len(inst.gpus_by_type(cand)) > 1
        assert mixed > 0  # candidates on several GPU types add their types' curves


def test_extrapolating_curve_values_match_the_scalar_curve():
    for cv in (Curve((2, 4), (3.0, 5.0), extrapolate=True), Curve((2, 4), (3.0, 5.0)), Curve.linear(7.5, 4)):
        g = np.arange(0, 12)
        assert cv.values(g).tolist() == [cv(float(x)) for x in g]


def _stage(cands, curves=None):
    return Stage("s", "rollout", True, True, curves or {"H100": Curve.linear(1.0)}, cands)


@pytest.mark.parametrize("bad, message", [
    ([Candidate("keep", {"p": 1}), Candidate("c", {"nowhere": 1})], "unknown pool"),
    ([Candidate("keep", {"p": 1}), Candidate("c", {"p": -1})], "negative GPUs"),
    ([Candidate("keep", {"p": 1}), Candidate("c", {"p": 1}, migration_cost=-1.0)], "negative GPUs"),
    ([Candidate("keep", {"p": 1}), Candidate("c", {"q": 1})], r"GPU type\(s\) \['H20'\] without a throughput curve"),
    ([Candidate("keep", {"p": 1}, migration_cost=1.0)], "must carry no migration"),
    ([], "has no candidate"),
])
def test_instance_rejects_malformed_candidates(bad, message):
    with pytest.raises(ValueError, match=message):
        ReallocInstance([Pool("p", "H100", 8), Pool("q", "H20", 8)], [_stage(bad)])


def test_selection_quota_is_a_round_robin():
    """_take hands out its quota in whole rounds and then one more per group in order: the same as
    giving every group one more per round, in group order, until the limit is reached."""
    from formulation.realloc.candidates import _take

    rng = np.random.default_rng(0)
    for _ in range(300):
        groups = [list(range(100 * g, 100 * g + int(rng.integers(1, 9)))) for g in range(int(rng.integers(1, 12)))]
        limit = int(rng.integers(0, 70))
        quota, left = [0] * len(groups), limit
        while left > 0 and any(q < len(g) for q, g in zip(quota, groups)):
            for i, g in enumerate(groups):
                if left > 0 and quota[i] < len(g):
                    quota[i] += 1
                    left -= 1
        got = _take(groups, limit)
        assert [sum(1 for x in got if x // 100 == g) for g in range(len(groups))] == quota
        for g, q in zip(groups, quota):  # spread evenly, the largest always in
            mine = [x for x in got if x // 100 == g[0] // 100]
            assert len(set(mine)) == q and (q == 0 or g[-1] in mine)


def test_moved_fractions_equal_the_scalar_rule():
    from formulation.realloc.migrations import moved_fraction, moved_fractions

    for n_old in range(0, 70):
        new = np.arange(0, 100)
        assert moved_fractions(n_old, new).tolist() == [moved_fraction(n_old, int(m)) for m in new]
