"""The ``repacking`` admission (:mod:`planner.instances.repack`, ``PlannerPlacer(repacking=True)``).

* The pure rules: a target group is hosted by the running group of its family that shares most
  members with it; the movers are the jobs not in their target's host; a re-pack is taken only when
  its $/h saving over the jobs' remaining stay beats the moves' $ by the margin.
* On a hand-made packing (two jobs alone, each with a training node of its own, that fit one
  training node): the offline target puts them together; where the jobs stay long it is taken and
  the mover joins the other's group at its boundary (the $/h drops by the freed node); where they
  are about to leave it is not taken and nothing moves; where the join would break an SLO (the
  acceptance refuses it) the member stays, the packing exactly as it was, and after a few refused
  boundaries it stops trying.
* The trace: a member moved out of a group and later back into the same run rejoins it (on a rollout
  slot no running member holds), rather than waiting for that run to end.
"""

from __future__ import annotations

import numpy as np
import pytest

from formulation.placement.evaluate import Config, Index
from formulation.placement.greedy import Packer
from formulation.placement.instance import PlacementInstance, PlacementJob, PoolType
from planner.instances import repack as rp
from planner.instances.simulate import PlannerPlacer
from simulator.groups import TailProfile
from simulator.profiles import PhaseProfile
from simulator.trace import JobRecord, PoolConfig, TraceJob, TraceSim
from tests.placement.test_placement_drain import BoundaryPlacer


def _two_lone_members() -> PlacementInstance:
    """Two jobs that each need a rollout node of their own and share one training node happily
    (rollout 60 s, training 20 s of a 100 s SLO)."""
    jobs = [PlacementJob(name=f"j{i}", slo_s=100.0, rollout_s={"A": {1: 60.0}}, train_s={"B": {1: 20.0}}, arrival_s=float(i))
            for i in range(2)]
    return PlacementInstance(pool_types={"A": PoolType(price_per_gpu_hour=1.0, dram_gb=1000, count=4),
                                         "B": PoolType(price_per_gpu_hour=2.0, dram_gb=1000, count=4)}, jobs=jobs)


def _prof(c):
    return PhaseProfile((60.0,), (20.0,), 0.0, TailProfile(0.3, 2, 1.1), 1e6, 64)


def _trace_job(name: str, iters: int, slo_s: float = 100.0) -> TraceJob:
    return TraceJob(name, 0.0, iters, slo_s, _prof, lambda c: (1.0, 2.0), PoolConfig("A", 1, "B", 1),
                    cold_switch_s=lambda c: (5.0, 60.0))  # a move loads its state in 60 s


class _Acceptance:
    """A stand-in for the sampled acceptance: every join ``ok`` or none; a member's slowest
    iteration alone is 80 s."""

    def __init__(self, ok: bool) -> None:
        self.ok, self.moving, self.start_at, self.calls = ok, None, {}, 0

    def __call__(self, g, k, j):
        self.calls += 1
        assert self.moving is not None  # a re-pack's join is judged as a move (its state loaded first)
        return self.ok

    def slowest(self, k, js):
        return np.full(len(js), 80.0)


class _Loop:
    now = 1000.0


class _Trace:
    def __init__(self, names) -> None:
        self.loop = _Loop()
        self.records = {n: JobRecord(n, 0.0, slo_s=100.0) for n in names}


def _placer(iterations: int, ok: bool = True) -> PlannerPlacer:
    """A :class:`PlannerPlacer` (``repacking``) on two lone groups, without a scenario: only what the
    re-pack reads."""
    inst = _two_lone_members()
    idx = Index(inst)
    pl = object.__new__(PlannerPlacer)
    pl.inst = pl.repack_inst = inst
    pl.idx = idx
    pl.pk = Packer(idx)
    pl.acceptance = _Acceptance(ok)
    pl.pk.accept = pl.acceptance
    alone = idx.config_id[Config("A", 1, "B", 1)]
    pl.pk.add_group(alone, [0])
    pl.pk.add_group(alone, [1])
    pl.j_of = {n: i for i, n in enumerate(idx.names)}
    pl.iterations = {n: iterations for n in idx.names}
    pl.trace_jobs = {n: _trace_job(n, iterations) for n in idx.names}
    pl.trace = _Trace(idx.names)
    pl.repacking, pl.repack_period_s, pl.repack_solve_s, pl.repack_move_price = True, None, 2.0, 0.0
    pl.repack_sampled_only, pl.repack_open, pl.repack_prelaunch, pl.staged, pl.prelaunched = False, True, False, {}, {}
    pl.target, pl._last_repack, pl.repacks, pl.solve_s = None, -float("inf"), [], []
    pl.repack_stats = {"tries": 0, "joined": 0, "opened": 0, "refused": 0, "stayed": 0}
    pl.moves, pl.starts, pl._version = [], {}, 0
    return pl


def _state(pk: Packer) -> tuple:
    return [list(m) for m in pk.groups], list(pk.group_config), dict(pk.free), dict(pk.job_group)


def _rate(pl: PlannerPlacer) -> float:
    return float(sum(pl.idx.cost[pl.pk.group_config[g]] for g, m in enumerate(pl.pk.groups) if m))


def test_hosts_movers_and_what_pays():
    idx = Index(_two_lone_members())
    alone = idx.config_id[Config("A", 1, "B", 1)]
    two = idx.config_id[Config("A", 1, "B", 1, 2)]
    host = rp.assign_hosts(idx, [(two, [0, 1])], [[0], [1]], [alone, alone])
    assert set(host) == {0} and host[0] in (0, 1)
    assert rp.movers([(two, [0, 1])], host, {0: 0, 1: 1}) == {1 - host[0]}
    assert rp.movers([(two, [0, 1])], {}, {0: 0, 1: 1}) == {0, 1}  # no host: every member moves (one opens it)
    assert rp.pays(48.0, 32.0, hours_left=1.0, move_cost=1.0)
    assert not rp.pays(48.0, 32.0, hours_left=0.01, move_cost=1.0)  # saves 0.16 $ for 1 $ of moves
    assert not rp.pays(48.0, 47.9, hours_left=100.0, move_cost=0.0)  # below the least saving worth a re-pack
    assert rp.hours_left({0: 36, 1: 72, 2: 360}, {0: 100.0, 1: 100.0, 2: 100.0}) == pytest.approx(2.0)


def test_a_repack_that_pays_moves_the_member_at_its_boundary():
    pl = _placer(iterations=1000)
    assert _rate(pl) == pytest.approx(48.0)  # two A nodes (8 $/h each) and two B nodes (16 $/h each)
    pl._plan_repack()
    assert pl.target is not None and pl.repacks[-1][4]
    assert pl.repacks[-1][2] == pytest.approx(32.0)  # the target: one training node for both
    (mover,) = pl.target.movers
    stay = 1 - mover
    assert pl._repack_move(pl.idx.names[stay]) is False  # not a mover: it stays where it is
    assert pl._repack_move(pl.idx.names[mover]) is True
    assert pl.pk.job_group[mover] == pl.pk.job_group[stay]
    assert _rate(pl) == pytest.approx(32.0)
    assert pl.moves[-1][1] == "repack" and pl.acceptance.moving is None  # the move's timing is reset after it
    assert pl._repack_move(pl.idx.names[mover]) is False  # moved once


def test_a_repack_that_does_not_pay_moves_nobody():
    pl = _placer(iterations=1)  # both about to leave: 16 $/h saved for 100 s (0.44 $) is less than 2 x the move (60 s at 32 $/h)
    snap = _state(pl.pk)
    pl._plan_repack()
    assert pl.target is None and pl.repacks and not pl.repacks[-1][4]
    for n in pl.idx.names:
        assert pl._repack_move(n) is False
    assert _state(pl.pk) == snap


def test_a_move_that_would_break_an_slo_is_not_made():
    pl = _placer(iterations=1000, ok=False)
    snap = _state(pl.pk)
    pl._plan_repack()
    assert pl.target is not None
    (mover,) = pl.target.movers
    for _ in range(rp.TRIES):
        assert pl._repack_move(pl.idx.names[mover]) is False
        assert _state(pl.pk) == snap  # refused: the packing exactly as it was
    asked = pl.acceptance.calls
    assert asked >= rp.TRIES  # every boundary asked (each candidate configuration of the join)
    assert mover not in pl.target.movers  # it stays for good
    assert pl._repack_move(pl.idx.names[mover]) is False and pl.acceptance.calls == asked
    assert pl.repack_stats["refused"] == rp.TRIES and pl.repack_stats["stayed"] == 1


# ------------------------------------------------------------------ the trace: back into a run it left
class OutAndBack(BoundaryPlacer):
    """``a`` and ``c`` in g0 (each on a rollout node of its own), ``b`` alone in g1; ``a`` moves to
    g1 at its second boundary and back to g0 at its fourth (``where``, ``remove`` and ``members`` as the drain test's placer)."""

    def admit(self, job):
        self.where[job] = "g1" if job == "b" else "g0"
        return True

    def at_boundary(self, job):
        if job != "a":
            return False
        self.seen += 1
        if self.seen in (2, 4):
            self.where["a"] = "g1" if self.seen == 2 else "g0"
            return True
        return False

    def groups(self):
        return {g: (PoolConfig("A", 1, "B", 1, len(ms)), ms) for g, ms in self.members().items()}


def test_a_member_moved_back_into_a_run_it_left_rejoins_it_on_a_free_slot():
    jobs = [_trace_job("a", 8, 1e9), _trace_job("b", 12, 1e9), _trace_job("c", 12, 1e9)]
    res = TraceSim(jobs, OutAndBack(), {"A": 1.0, "B": 2.0}, policy="groups").run()
    assert res.migrations == 2
    a = res.jobs["a"]
    assert len(a.iteration_s) == 8 and a.done_s is not None
    assert max(a.iteration_s) < 3 * (60.0 + 20.0 + 60.0 + 2.0)  # no wait for g0's run to end (it ran on with c)
    run = res.groups["g0"]
    members = run._all_members()
    assert members["a"].rollout_starts[0] < res.jobs["c"].done_s  # back in the same run, c still there
    assert set(members["a"].spec.rollout_nodes).isdisjoint(members["c"].spec.rollout_nodes)


def test_a_prelaunched_move_waits_for_the_launch_then_pays_only_the_state_load():
    from estimators.comm import COLD_INIT_S

    pl = _placer(iterations=1000)
    pl.trace_jobs = {n: TraceJob(n, 0.0, 1000, 100.0, _prof, lambda c: (1.0, 2.0), PoolConfig("A", 1, "B", 1),
                                 cold_switch_s=lambda c: (5.0, COLD_INIT_S + 15.0)) for n in pl.idx.names}
    pl.repack_prelaunch = True
    pl._plan_repack()
    (mover,) = pl.target.movers
    name = pl.idx.names[mover]
    snap = _state(pl.pk)
    assert pl._repack_move(name) is False and _state(pl.pk) == snap  # the launch starts: it runs on where it is
    pl.trace.loop.now = 1000.0 + COLD_INIT_S / 2
    assert pl._repack_move(name) is False and _state(pl.pk) == snap  # not up yet
    pl.trace.loop.now = 1000.0 + COLD_INIT_S + 1.0
    assert pl._repack_move(name) is True
    assert _rate(pl) == pytest.approx(32.0)
    assert pl.move_delay(name) == pytest.approx(15.0) and pl.move_delay(name) is None  # only the state's load, once
