"""Draining a group (:mod:`formulation.placement.drain`), judged without the packer's own numbers.

* A known answer: two one-member groups that each hold a training node of their own, where both
  members fit one training node: draining one saves exactly that node's $/h.
* On random small instances after departures: a trial drain leaves the packing exactly as it was
  (every group's members in order, configuration, free nodes, what the next job would do); where a
  drain is worth it, replaying its moves gives groups that Howard's cycle times on the node pins
  (the test helpers' independent check) find feasible, every job placed once, and saves the $/h the
  trial said, the $/h summed from the instance's own prices.
* A member no other group takes stays where it was.
"""

from __future__ import annotations

import numpy as np
import pytest

from formulation.placement.drain import drain_gain, move_member
from formulation.placement.evaluate import Config, Index
from formulation.placement.greedy import Packer, arrival_order
from formulation.placement.instance import PlacementInstance, PlacementJob, PoolType
from simulator.groups import TailProfile
from simulator.profiles import PhaseProfile
from simulator.trace import PoolConfig, TraceJob, TraceSim, move_s
from tests.placement.placement_helpers import config_cost, group_feasible, small_instance


def _state(pk: Packer) -> tuple:
    return ([list(m) for m in pk.groups], list(pk.group_config), dict(pk.free), dict(pk.job_group), set(pk.closed))


def _cost(inst: PlacementInstance, pk: Packer) -> float:
    return sum(config_cost(inst, tuple(pk.idx.configs[pk.group_config[g]])) for g, m in enumerate(pk.groups) if m)


def _two_lone_members() -> PlacementInstance:
    """Two jobs that each need a rollout node of their own and share one training node happily
    (training 20 s of a 100 s SLO), arriving when the other's group is not open to them."""
    jobs = [PlacementJob(name=f"j{i}", slo_s=100.0, rollout_s={"A": {1: 60.0}}, train_s={"B": {1: 20.0}}, arrival_s=float(i))
            for i in range(3)]
    return PlacementInstance(pool_types={"A": PoolType(price_per_gpu_hour=1.0, dram_gb=1000, count=4),
                                         "B": PoolType(price_per_gpu_hour=2.0, dram_gb=1000, count=4)}, jobs=jobs)


def test_draining_a_lone_member_saves_its_training_node():
    inst = _two_lone_members()
    idx = Index(inst)
    pk = Packer(idx)
    alone = idx.config_id[Config("A", 1, "B", 1)]  # one rollout node and one training node (24 $/h)
    g0, g1 = pk.add_group(alone, [0]), pk.add_group(alone, [1])  # as an online order can leave them
    before = _cost(inst, pk)
    assert before == pytest.approx(48.0)
    snap = _state(pk)
    gain = drain_gain(pk, g1)
    assert _state(pk) == snap
    assert gain == pytest.approx(8 * 2.0)  # one B node of 8 GPUs at 2 $/GPU-h
    adm = move_member(pk, 1)
    assert adm is not None and adm.group == g0
    assert not pk.groups[g1] and pk.groups[g0] == [0, 1]
    assert _cost(inst, pk) == pytest.approx(32.0)  # two rollout nodes of their own, one training node
    assert group_feasible(inst, (0, 1), tuple(idx.configs[pk.group_config[g0]]))


def _after_departures(seed: int) -> tuple[PlacementInstance, Index, Packer]:
    """9 random jobs admitted online, then half of them gone."""
    inst = small_instance(seed, 9, capacity=(12, 12), rollout_heavy=0.3 if seed % 2 else 0.0)
    idx = Index(inst)
    pk = Packer(idx)
    for j in arrival_order(idx):
        pk.admit(j)
    rng = np.random.default_rng(seed)
    for j in rng.permutation(sorted(pk.job_group))[: len(pk.job_group) // 2]:
        pk.remove_job(int(j))
    return inst, idx, pk


@pytest.mark.parametrize("seed", range(12))
def test_a_trial_leaves_the_packing_as_it_was_and_its_moves_are_real(seed):
    inst, idx, pk = _after_departures(seed)
    probe = [j for j in range(idx.n) if j not in pk.job_group]
    for g in range(len(pk.groups)):
        if not pk.groups[g]:
            continue
        snap = _state(pk)
        nxt = [pk.best_move(j) for j in probe]
        before = _cost(inst, pk)
        gain = drain_gain(pk, g)
        assert _state(pk) == snap, "a trial drain changed the packing"
        assert [pk.best_move(j) for j in probe] == nxt, "a trial drain changed what the next job would do"
        if gain is None or gain <= 1e-9:
            continue
        members = sorted(pk.groups[g], key=lambda j: (-float(idx.tot[:, j].min()), j))
        pk.set_closed(g, True)
        for j in members:
            assert move_member(pk, j) is not None, "the trial's move is not there when replayed"
        assert not pk.groups[g]
        assert _cost(inst, pk) == pytest.approx(before - gain)
        for h, ms in enumerate(pk.groups):
            if ms:
                assert group_feasible(inst, tuple(ms), tuple(idx.configs[pk.group_config[h]])), (h, ms)
        placed = [j for ms in pk.groups for j in ms]
        assert len(placed) == len(set(placed)) == len(pk.job_group)
        used = {t: 0 for t in idx.types}
        for h, ms in enumerate(pk.groups):
            if ms:
                for t, n in idx.config_nodes(pk.group_config[h]).items():
                    used[t] += n
        assert all(used[t] + pk.free[t] == idx.capacity[t] for t in idx.types), (used, pk.free)
        pk.set_closed(g, False)


def test_some_random_packings_are_worth_draining():
    worth = 0
    for seed in range(12):
        _, _, pk = _after_departures(seed)
        worth += any(pk.groups[g] and (drain_gain(pk, g) or 0.0) > 1e-9 for g in range(len(pk.groups)))
    assert worth >= 2, "the random departures left nothing to drain: the property test above checks no move"


def test_a_member_no_group_takes_stays():
    inst = _two_lone_members()
    idx = Index(inst)
    pk = Packer(idx)
    g = pk.add_group(idx.config_id[Config("A", 1, "B", 1)], [0])
    snap = _state(pk)
    assert move_member(pk, 0) is None
    assert _state(pk) == snap and pk.job_group[0] == g


# ------------------------------------------------------------------ the trace moves a member at its boundary
def _prof(c):
    return PhaseProfile((100.0,), (40.0,), 1.0, TailProfile(0.3, 2, 1.1), 1e6, 64)


def _job(name: str, iters: int) -> TraceJob:
    return TraceJob(name, 0.0, iters, 1e9, _prof, lambda c: (1.0, 2.0), PoolConfig("H20", 1, "H800", 1),
                    cold_switch_s=lambda c: (5.0, 30.0))


class BoundaryPlacer:
    """``a`` and ``b`` each alone (g0, g1); at ``a``'s second iteration boundary it moves into g1,
    on a rollout node of its own (what a drain does)."""

    def __init__(self):
        self.where: dict = {}
        self.seen = 0

    def admit(self, job):
        self.where[job] = "g0" if job == "a" else "g1"
        return True

    def remove(self, job):
        self.where.pop(job, None)

    def at_boundary(self, job):
        if job != "a" or self.where.get("a") != "g0":
            return False
        self.seen += 1
        if self.seen == 2:
            self.where["a"] = "g1"
            return True
        return False

    def members(self) -> dict:
        """Group -> its members in name order, from ``where``."""
        out: dict = {}
        for j, g in sorted(self.where.items()):
            out.setdefault(g, []).append(j)
        return out

    def groups(self):
        # g1 pinned from the move on (one member's rollout node per member, as the packer keeps it)
        return {g: (PoolConfig("H20", 1, "H800", 1, len(ms)) if g == "g1" and self.seen >= 2 else PoolConfig("H20", 1, "H800", 1), ms)
                for g, ms in self.members().items()}


def test_a_member_moved_at_its_boundary_starts_in_its_new_group_once_its_state_is_loaded():
    jobs = [_job("a", 5), _job("b", 5)]
    res = TraceSim(jobs, BoundaryPlacer(), {"H20": 1.0, "H800": 2.0}, policy="groups").run()
    assert res.migrations == 1
    for j in jobs:
        rec = res.jobs[j.name]
        assert len(rec.iteration_s) == j.iterations and rec.done_s is not None
    left = res.groups["g0"].finished["a"]
    assert left.k == 2  # it left right at the boundary the placer moved it at, not an iteration later
    first = res.groups["g1"]._all_members()["a"].rollout_starts[0]
    assert first >= left.last_end + move_s(jobs[0], PoolConfig("H20", 1, "H800", 1, 2)) - 1e-9
    assert move_s(jobs[0], PoolConfig("H20", 1, "H800", 1, 2)) == pytest.approx(30.0)  # the slower side's cold start
    a = res.jobs["a"]
    assert sum(a.iteration_s) == pytest.approx(a.done_s - a.admitted_s)  # the move's wait is counted, in iteration 3
    assert a.iteration_s[2] >= 30.0 + 100.0 + 40.0


class TimedBoundaryPlacer(BoundaryPlacer):
    """As :class:`BoundaryPlacer`, and it times the moved member's first rollout in g1 (what the
    ``draining`` admission's timed join does): 10 s after its state is loaded there."""

    sim: TraceSim

    def start_s(self, job):
        if job == "a" and self.seen >= 2 and "a" in self.sim.ready_at:
            return self.sim.ready_at["a"] + 10.0
        return None


def test_a_member_moved_by_a_timed_join_keeps_its_admission_time():
    """A move through a timed join reset the member's admission time to its first rollout in the new
    group: the trace's wait column counted a running member as waiting since its arrival (191,458 s
    for a member of the draining reproduction that had run 580 iterations)."""
    jobs = [_job("a", 5), _job("b", 5)]
    placer = TimedBoundaryPlacer()
    sim = TraceSim(jobs, placer, {"H20": 1.0, "H800": 2.0}, policy="groups")
    placer.sim = sim
    res = sim.run()
    assert res.migrations == 1
    a = res.jobs["a"]
    assert len(a.iteration_s) == 5 and a.done_s is not None
    assert a.admitted_s == pytest.approx(0.0)  # admitted on arrival; the move is no admission
    first = res.groups["g1"]._all_members()["a"].rollout_starts[0]
    left = res.groups["g0"].finished["a"]
    assert first >= left.last_end + move_s(jobs[0], PoolConfig("H20", 1, "H800", 1, 2)) + 10.0 - 1e-9  # the timed start held
    assert res.summary()["mean_wait_s"] == pytest.approx(0.0)
