"""decide(): donors → candidates → solve → check → commit rule → plan body, on hand-made contexts."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from formulation.common import SolveOptions
from formulation.realloc import check as checker
from formulation.realloc.decide import ReallocOptions, decide
from formulation.realloc.donors import DonorConfig, DonorDetector
from formulation.realloc.migrations import order_moves
from formulation.realloc.plan import ReallocPlan
from tests.realloc.helpers import three_stage_context, three_stage_snapshot


def _run(backend="bnb", margin=0.05, horizon=100.0, interruptible_trainer=True, require_donor=True, generator="numpy",
         mip_gap=1e-6):
    det = DonorDetector(DonorConfig(hold_s=2.0))
    dec = None
    for t in (0.0, 1.0, 2.0):
        snap = three_stage_snapshot(t, interruptible_trainer=interruptible_trainer)
        opts = ReallocOptions(backend=backend, margin=margin, require_donor=require_donor, generator=generator,
                              solve=SolveOptions(time_limit_s=10.0, mip_gap=mip_gap))
        dec = decide(snap, three_stage_context(snap, horizon), opts, det)
    return dec


def test_no_donor_no_decision():
    snap = three_stage_snapshot(0.0)
    dec = decide(snap, three_stage_context(snap), ReallocOptions(), DonorDetector(DonorConfig(hold_s=2.0)))
    assert not dec.committed and dec.record.status.value == "not_solved"
    assert dec.reason.startswith("no donor detected") and dec.choice == [0, 0, 0]


@pytest.mark.parametrize("backend", ["bnb", "highs", "cpsat"])
def test_rollout_tail_gives_gpus_to_the_trainer(backend):
    """By hand: rollout 8 GPUs (620/s), reference 4 (400/s), trainer 4 (360/s): the trainer is the
    bottleneck at 360/s. With n0's GPUs freed by shrinking the rollout, reference and trainer grow
    to 6 GPUs each: min(rollout(4) = 600, 600, 540) = 540/s; migration costs are 360 x duration / 100."""
    dec = _run(backend)
    assert dec.current_throughput == pytest.approx(360.0)
    assert dec.predicted_throughput == pytest.approx(540.0)
    inst = dec.instance
    names = [inst.stages[s].candidates[c].name for s, c in enumerate(dec.choice)]
    assert inst.stages[2].candidates[dec.choice[2]].total_gpus == 6  # trainer 4 -> 6
    assert inst.stages[0].candidates[dec.choice[0]].total_gpus in (3, 4)  # rollout gives 4 or 5 (both keep >= 540/s)
    assert dec.committed, dec.reason
    assert checker.check(inst, dec.choice, objective=dec.objective, stage_throughput=dec.stage_throughput, committed=True) == []
    kinds = {inst.stages[s].name: inst.stages[s].candidates[c].migration_kind for s, c in enumerate(dec.choice)}
    assert kinds == {"rollout": "workload", "ref": "workload", "actor": "p2p"}, names


def test_margin_and_migration_cost_block_commit():
    # a short horizon makes the 20 s engine start cost most of the gain: 540 - 360 * 22 / 10 < 360
    dec = _run(horizon=10.0)
    assert not dec.committed and (dec.choice == [0, 0, 0] or "margin" in dec.reason)
    dec = _run(margin=0.6)  # the 1.07x improvement does not beat a 60% margin
    assert not dec.committed and "does not beat" in dec.reason
    assert dec.objective > dec.current_throughput


def test_non_interruptible_component_never_moves():
    dec = _run(interruptible_trainer=False)
    assert dec.choice[2] == 0 and len(dec.instance.stages[2].candidates) == 1
    assert checker.check(dec.instance, dec.choice) == []


def test_plan_body_is_explicit_and_valid():
    dec = _run()
    body = ReallocPlan.model_validate(dec.body())
    assert body.committed and body.donors[0].donor
    chosen = [c for s in body.stages for c in s.candidates if c.chosen]
    assert len(chosen) == 3
    by = {a.component: a for a in body.allocation}
    assert set(by) == {"rollout", "ref", "actor"}
    assert sum(w.gpus for w in by["actor"].to_workers) == 6 and any(w.new for w in by["actor"].to_workers)
    removed = {w for s in body.steps for w in s.workers_removed}
    kept = {w.worker_id for w in by["rollout"].to_workers}
    assert removed and not removed & kept  # drained engines are not kept
    # steps in order never over-fill a node
    free = {"n0": 0, "n1": 0}
    for s in body.steps:
        free[s.node] -= s.gpus_to - s.gpus_from
        assert free[s.node] >= 0, s
    assert all(s.duration_s > 0 and s.bytes_moved >= 0 for s in body.steps)


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 10_000))
def test_step_order_respects_capacity(seed):
    """Random feasible reallocations between three components on three nodes: the ordered steps
    keep every node within capacity at every intermediate state."""
    from formulation.realloc.instance import Move

    rng = np.random.default_rng(seed)
    cap = {p: 8 for p in ("a", "b", "c")}
    before = {c: {p: 0 for p in cap} for c in ("x", "y", "z")}
    after = {c: {p: 0 for p in cap} for c in ("x", "y", "z")}
    for p in cap:
        for alloc in (before, after):
            cuts = np.sort(rng.integers(0, cap[p] + 1, size=2))
            alloc["x"][p], alloc["y"][p], alloc["z"][p] = cuts[0], cuts[1] - cuts[0], int(rng.integers(0, cap[p] - cuts[1] + 1))
    moves = [(c, Move("workload", p, before[c][p], after[c][p], 1.0, 0.0, "")) for c in before for p in cap
             if before[c][p] != after[c][p]]
    used = {p: sum(before[c][p] for c in before) for p in cap}
    ordered = order_moves(moves, cap, used)
    assert sorted(map(id, ordered)) == sorted(map(id, moves))
    for _, m in ordered:
        used[m.pool] += m.gpus_to - m.gpus_from
        assert used[m.pool] <= cap[m.pool]


def test_default_path_and_the_path_before_give_the_same_plan_body():
    """bnb with the numpy generator (the default) and HiGHS with the Python reference generator (the
    path before): the same decision and the same ReallocPlan body, timings and backend aside. (HiGHS
    at its default gap 1e-6 may stop at a choice 1e-7 worse here: two rollout shrinks differ only
    in migration cost; bnb is exact.)"""
    new, old = _run(), _run(backend="highs", generator="python", mip_gap=0.0)
    assert new.objective >= _run(backend="highs", generator="python").objective
    a, b = new.body(), old.body()
    for body in (a, b):
        body.pop("timings_ms")
        body.pop("backend")
    assert a == b and a["committed"]
