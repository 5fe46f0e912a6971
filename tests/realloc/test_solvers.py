"""Selection: known answers by hand, and the DP, HiGHS, CP-SAT (and Pyomo) agreeing on random instances,
every answer judged by the solver-free checker and exhaustive enumeration."""

from __future__ import annotations

import numpy as np
import pytest

from formulation.common import SolveOptions
from formulation.realloc import check as checker
from formulation.realloc import dp
from formulation.realloc.decide import solve_instance
from formulation.realloc.instance import Candidate, Curve, Move, Pool, ReallocInstance, Stage
from formulation.realloc.migrations import moved_fraction
from tests.realloc.helpers import random_instance

OPTS = SolveOptions(time_limit_s=10.0, mip_gap=1e-9)


def _cand(name, pool, cur, g, cost=0.0, kind="workload"):
    moves = () if g == cur else (Move(kind, pool, cur, g, 1.0, 0.0, "test"),)
    return Candidate(name, {pool: g} if g else {}, migration_cost=cost, moves=moves)


def _two_stage(cost_a=0.0, cost_b=0.0, margin=0.0) -> ReallocInstance:
    """Pool of 8 GPUs. A: 10/s per GPU (linear). B: concave 2->30, 4->40, 8->44.
    Now A has 2 (20/s), B has 6 (42/s): the pipeline runs at 20/s. Moving to A=4, B=4 gives 40/s."""
    a = Stage("A", "trainer", False, True, {"H100": Curve.linear(10.0)},
              [_cand("keep", "p", 2, 2), _cand("a4", "p", 2, 4, cost_a, "p2p"), _cand("a6", "p", 2, 6, cost_a, "p2p")], unit_gpus=2)
    b = Stage("B", "rollout", True, True, {"H100": Curve((2, 4, 8), (30, 40, 44))},
              [_cand("keep", "p", 6, 6), _cand("b4", "p", 6, 4, cost_b), _cand("b2", "p", 6, 2, cost_b)], unit_gpus=2)
    return ReallocInstance([Pool("p", "H100", 8)], [a, b], margin=margin)


@pytest.mark.parametrize("backend", ["bnb", "highs", "cpsat", "dp", "pyomo"])
def test_known_answer_balance(backend):
    inst = _two_stage()
    sol, rec = solve_instance(inst, backend, OPTS)
    assert rec.status.value == "optimal"
    assert sol.choice == [1, 1]  # A=4 (40/s), B=4 (40/s): by hand
    assert inst.objective(sol.choice) == pytest.approx(40.0)
    assert checker.check(inst, sol.choice, objective=40.0) == []


@pytest.mark.parametrize("backend", ["bnb", "highs", "cpsat", "dp"])
def test_known_answer_migration_cost_decides(backend):
    # A=6, B=2 gives min(60, 30) = 30; A=4, B=4 gives 40. With cost 15 on each move: 40-30 = 10 < 20 (keep).
    inst = _two_stage(cost_a=15.0, cost_b=15.0)
    sol, _ = solve_instance(inst, backend, OPTS)
    assert sol.choice == [0, 0] and inst.objective(sol.choice) == pytest.approx(20.0)
    # cost 5 each: 40 - 10 = 30 > 20: move
    inst = _two_stage(cost_a=5.0, cost_b=5.0)
    sol, _ = solve_instance(inst, backend, OPTS)
    assert sol.choice == [1, 1] and inst.objective(sol.choice) == pytest.approx(30.0)


def test_heterogeneous_known_answer():
    """Rollout on H20 (node h20), trainer on H100 (node h100, 8 GPUs); the trainer may not use H20.
    Rollout concave on H20: 4 -> 40, 8 -> 48; trainer 5/s per H100 GPU. Now: rollout 8 H20 (48/s),
    trainer 4 H100 (20/s), 4 H100 free. Best: trainer to 8 H100 (40/s) and rollout keeps 8 (48/s) -> 40/s;
    moving rollout onto H100 cannot help (its H100 curve is the same shape but H100 GPUs are needed by the trainer)."""
    pools = [Pool("h20", "H20", 8), Pool("h100", "H100", 8)]
    roll = Stage("rollout", "rollout", True, True, {"H20": Curve((4, 8), (40, 48)), "H100": Curve((4, 8), (60, 70))}, [
        Candidate("keep", {"h20": 8}),
        Candidate("h20-4", {"h20": 4}, migration_cost=0.5, moves=(Move("workload", "h20", 8, 4, 1, 0, ""),)),
        Candidate("mix", {"h20": 4, "h100": 4}, migration_cost=0.5,
                  moves=(Move("workload", "h20", 8, 4, 1, 0, ""), Move("workload", "h100", 0, 4, 1, 0, ""))),
    ])
    tr = Stage("actor", "trainer", False, True, {"H100": Curve.linear(5.0)}, [
        Candidate("keep", {"h100": 4}),
        Candidate("h100-8", {"h100": 8}, migration_cost=2.0, moves=(Move("p2p", "h100", 4, 8, 1, 0, ""),)),
    ], unit_gpus=2, single_type=True)
    inst = ReallocInstance(pools, [roll, tr], margin=0.05)
    assert inst.stage_throughput(0, 2) == pytest.approx(40 + 60)  # engines of both types add
    for backend in ("bnb", "highs", "cpsat"):
        sol, _ = solve_instance(inst, backend, OPTS)
        assert sol.choice == [0, 1]
        assert inst.objective(sol.choice) == pytest.approx(40.0 - 2.0)
        assert checker.check(inst, sol.choice) == []
    # the mixed rollout candidate plus the grown trainer would need 12 H100 GPUs: the checker names it
    bad = checker.check(inst, [2, 1])
    assert [v.rule for v in bad] == ["capacity", "capacity"] and "h100" in bad[0].where


def test_moved_fraction_by_hand():
    assert moved_fraction(4, 4) == 0.0
    assert moved_fraction(1, 2) == pytest.approx(0.5)  # rank 0 keeps [0, 1/2)
    assert moved_fraction(2, 4) == pytest.approx(0.75)  # rank 0 keeps [0, 1/4), rank 1 keeps nothing
    assert moved_fraction(2, 1) == pytest.approx(0.5)
    assert moved_fraction(3, 3) == 0.0


def test_curve_segments_by_hand():
    c = Curve((2, 4, 8), (30, 40, 44))
    assert c.segments() == [(15.0, 0.0), (5.0, 20.0), (1.0, 36.0), (0.0, 44.0)]
    for g in [0, 1, 2, 3, 5, 8, 11]:
        assert c(g) == pytest.approx(min(a * g + b for a, b in c.segments()))
        assert c(g) == pytest.approx(checker.curve_value(c, g))
    lin = Curve.linear(7.0, 4)
    assert lin(10) == pytest.approx(70.0) and checker.curve_value(lin, 10) == pytest.approx(70.0)
    with pytest.raises(ValueError, match="increasing"):
        Curve((2, 2), (1, 2))


@pytest.mark.parametrize("seed", range(25))
def test_backends_agree_single_pool(seed):
    rng = np.random.default_rng(seed)
    inst = random_instance(rng, n_pools=1, n_stages=int(rng.integers(2, 5)), n_cands=int(rng.integers(2, 6)),
                           gpus_per_pool=int(rng.choice([8, 16, 32])), interruptible_p=0.8)
    exact = dp.exhaustive(inst)
    vals = {}
    for backend in ("dp", "bnb", "highs", "cpsat"):
        sol, rec = solve_instance(inst, backend, OPTS)
        assert rec.status.value == "optimal", (backend, rec)
        assert checker.check(inst, sol.choice) == [], backend
        vals[backend] = inst.objective(sol.choice)
    assert vals["dp"] == pytest.approx(exact.objective, rel=1e-9, abs=1e-9)
    assert vals["bnb"] == pytest.approx(exact.objective, rel=1e-9, abs=1e-9)
    assert vals["highs"] == pytest.approx(exact.objective, rel=1e-6, abs=1e-6)
    assert vals["cpsat"] == pytest.approx(exact.objective, rel=1e-5, abs=1e-5)  # integer scaling at 1e-7 resolution


@pytest.mark.parametrize("seed", range(15))
def test_backends_agree_many_pools_and_types(seed):
    rng = np.random.default_rng(1000 + seed)
    inst = random_instance(rng, n_pools=int(rng.integers(2, 5)), types=("H100", "H20"), n_stages=3, n_cands=4,
                           gpus_per_pool=8, interruptible_p=0.8)
    exact = dp.exhaustive(inst)
    for backend in ("bnb", "highs", "cpsat"):
        sol, rec = solve_instance(inst, backend, OPTS)
        assert checker.check(inst, sol.choice) == [], backend
        assert inst.objective(sol.choice) == pytest.approx(exact.objective, rel=1e-5, abs=1e-5), backend
    with pytest.raises(ValueError, match="single pool"):
        dp.solve(inst)


def test_pyomo_reference_agrees():
    rng = np.random.default_rng(7)
    for _ in range(3):
        inst = random_instance(rng, n_pools=2, types=("H100", "H20"), n_stages=3, n_cands=4)
        a, _ = solve_instance(inst, "pyomo", OPTS)
        b, _ = solve_instance(inst, "highs", OPTS)
        assert inst.objective(a.choice) == pytest.approx(inst.objective(b.choice), rel=1e-6, abs=1e-6)


def test_checker_catches_bad_claims():
    inst = _two_stage()
    assert [v.rule for v in checker.check(inst, [1, 1], objective=41.0)] == ["objective"]
    assert [v.rule for v in checker.check(inst, [1, 1], stage_throughput=[40.0, 44.0])] == ["throughput"]
    assert [(v.rule, v.where) for v in checker.check(inst, [2, 0])] == [("capacity", "node p (H100)"), ("capacity", "GPU type H100")]
    assert [v.rule for v in checker.check(inst, [0, 0], committed=True)] == ["commit"]
    assert checker.check(inst, [5, 0])[0].rule == "choice"
    inst.stages[0].interruptible = False
    assert "interruptible" in [v.rule for v in checker.check(inst, [1, 1])]


@pytest.mark.parametrize("seed", [1, 14, 18, 6])
def test_benchmark_instances_agree_with_and_without_reduction(seed):
    """The 128-GPU benchmark's synthetic instances (where a HiGHS warm start once returned a stale
    solution vector): HiGHS and CP-SAT, on the reduced and the full instance, reach one optimum,
    and the reduction drops no candidate that an optimum needs."""
    from formulation.realloc.bench import synthetic
    from formulation.realloc.candidates import build_instance
    from formulation.realloc.graph import build_graph

    snap, ctx = synthetic(seed, ("H100",), 16)
    inst = build_instance(build_graph(snap), ctx, ["rollout", "agent"], max_candidates=10, margin=0.02)
    vals = []
    for backend in ("bnb", "highs", "cpsat"):
        for red in (True, False):
            sol, rec = solve_instance(inst, backend, OPTS, reduce=red)
            assert rec.status.value == "optimal" and checker.check(inst, sol.choice) == []
            vals.append(inst.objective(sol.choice))
    assert max(vals) - min(vals) <= 1e-5 * max(1.0, abs(max(vals)))


@pytest.mark.parametrize("seed", range(10))
def test_reduction_is_exact_on_random_instances(seed):
    from formulation.realloc.reduce import reduce

    rng = np.random.default_rng(500 + seed)
    inst = random_instance(rng, n_pools=2, types=("H100", "H20"), n_stages=3, n_cands=6, cost_scale=2.0)
    red, keep = reduce(inst)
    assert all(k[0] == 0 for k in keep)  # the current allocation always stays
    full = dp.exhaustive(inst).objective
    reduced = dp.exhaustive(red).objective
    assert reduced == pytest.approx(full, rel=1e-9, abs=1e-9)


@pytest.mark.parametrize("seed", range(12))
def test_bnb_is_exact_without_reduction_and_when_the_current_allocation_does_not_fit(seed):
    """Against exhaustive enumeration: the search on the full instance (no reduction, more
    candidates per stage), and with pools shrunk below the current allocation (no incumbent to
    start from; sometimes nothing fits at all)."""
    from formulation.realloc import bnb
    from formulation.realloc.instance import Pool

    rng = np.random.default_rng(3000 + seed)
    inst = random_instance(rng, n_pools=int(rng.integers(1, 4)), types=("H100", "H20"), n_stages=3, n_cands=7,
                           gpus_per_pool=8, cost_scale=float(rng.choice([0.5, 5.0])))
    sol, rec = bnb.solve(inst, OPTS)
    exact = dp.exhaustive(inst)
    assert rec.status.value == "optimal" and checker.check(inst, sol.choice) == []
    assert inst.objective(sol.choice) == pytest.approx(exact.objective, rel=1e-9, abs=1e-9)
    tight = ReallocInstance([Pool(p.name, p.gpu_type, max(0, p.gpus - int(rng.integers(3, 8)))) for p in inst.pools],
                            inst.stages, margin=0.0)
    exact = dp.exhaustive(tight)
    sol, rec = bnb.solve(tight, OPTS)
    if exact.objective is None:
        assert rec.status.value == "infeasible"
    else:
        assert rec.status.value == "optimal" and checker.check(tight, sol.choice) == []
        assert tight.objective(sol.choice) == pytest.approx(exact.objective, rel=1e-9, abs=1e-9)


@pytest.mark.parametrize("seed", range(6))
def test_bnb_agrees_with_highs_and_cpsat_on_large_random_instances(seed):
    """Too large to enumerate (8 pools of 2 types, 6 stages x 12 candidates): the search, HiGHS and
    CP-SAT on the full instance reach one optimum."""
    rng = np.random.default_rng(4000 + seed)
    inst = random_instance(rng, n_pools=8, types=("H100", "H20"), n_stages=6, n_cands=12, gpus_per_pool=8, cost_scale=1.0)
    vals = {}
    for backend in ("bnb", "highs", "cpsat"):
        sol, rec = solve_instance(inst, backend, OPTS, reduce=False)
        assert rec.status.value == "optimal" and checker.check(inst, sol.choice) == [], backend
        vals[backend] = inst.objective(sol.choice)
    assert vals["bnb"] == pytest.approx(vals["highs"], rel=1e-6, abs=1e-6)
    assert vals["bnb"] == pytest.approx(vals["cpsat"], rel=1e-5, abs=1e-5)


def test_bnb_past_its_node_budget_hands_over_to_highs(monkeypatch):
    from formulation.realloc import bnb

    rng = np.random.default_rng(4001)
    inst = random_instance(rng, n_pools=8, types=("H100", "H20"), n_stages=6, n_cands=12, gpus_per_pool=8, cost_scale=1.0)
    sol, rec = bnb.solve(inst, OPTS, node_limit=2)
    assert rec.status.value in ("feasible", "not_solved") and "limit" in rec.message
    monkeypatch.setattr(bnb, "NODE_LIMIT", 2)
    sol, rec = solve_instance(inst, "bnb", OPTS, reduce=False)
    ref, _ = solve_instance(inst, "highs", OPTS, reduce=False)
    assert rec.backend == "bnb+highs" and rec.status.value == "optimal"
    assert inst.objective(sol.choice) == pytest.approx(inst.objective(ref.choice), rel=1e-6, abs=1e-6)
