"""Join-aware admission (``Packer(join_delay=True)``): a job joining a running group delays one
iteration of a running member and waits in its own first one; the check keeps both within the SLOs.

The admission tests build a two-job instance on which the steady-state check admits the join and
the join's transient does not fit; the simulation tests run the group runner (the trace's) with a
member joining at many moments and check every iteration against the bounds the check uses."""

from __future__ import annotations

import numpy as np
import pytest

from formulation.placement.evaluate import Index
from formulation.placement.greedy import Packer
from formulation.placement.instance import PlacementInstance, PlacementJob, PoolType
from simulator.core import EventLoop
from simulator.groups import GroupRun, GroupSpec, MemberSpec


def _inst(slo_x: float, slo_y: float = 400.0) -> PlacementInstance:
    def job(name: str, slo: float, arrival: float) -> PlacementJob:
        return PlacementJob(name=name, slo_s=slo, rollout_s={"A": {1: 60.0}}, train_s={"B": {1: 30.0}}, arrival_s=arrival)

    return PlacementInstance(pool_types={"A": PoolType(price_per_gpu_hour=1.0, dram_gb=1000, count=8),
                                         "B": PoolType(price_per_gpu_hour=2.0, dram_gb=1000, count=8)},
                             jobs=[job("x", slo_x, 0.0), job("y", slo_y, 1.0)])


def _admit_both(inst: PlacementInstance, join_delay: bool):
    pk = Packer(Index(inst), join_delay=join_delay)
    first, second = pk.admit(0), pk.admit(1)
    return pk, first, second


def test_a_join_that_would_delay_a_member_past_its_slo_opens_a_group_instead():
    # x alone: period 90 (60 + 30), SLO 100. y joining x's training node: the steady state fits
    # (training ring 60, own cycles 90), but the iteration of x that y's training delays is 90 + 30 > 100.
    inst = _inst(100.0)
    _, _, weave = _admit_both(inst, join_delay=False)
    assert weave.move == "extend-rollout-pool"  # Weave's check: y gets a rollout node of its own, shares the training node
    pk, _, aware = _admit_both(inst, join_delay=True)
    assert aware.move == "new-group"
    assert len(pk.solution().groups) == 2


def test_a_join_with_slack_for_its_delay_is_admitted():
    inst = _inst(125.0)  # 90 + 30 <= 125
    pk, _, adm = _admit_both(inst, join_delay=True)
    assert adm.move == "extend-rollout-pool"
    assert len(pk.solution().groups) == 1


def test_the_newcomers_first_iteration_counts_its_wait():
    # y's own cycle is 90, SLO 110: its first iteration may wait up to x's training (30): 120 > 110
    inst = _inst(400.0, slo_y=110.0)
    assert _admit_both(inst, join_delay=False)[2].move == "extend-rollout-pool"
    assert _admit_both(inst, join_delay=True)[2].move == "new-group"


def _run_join(a, b, join_at: float, pinned: bool, iterations: int = 12):
    """Member x alone from 0, member y joining at ``join_at``: every iteration of each (start, end)."""
    loop = EventLoop(0)
    rn_x, rn_y = ("r0",), (("r1",) if pinned else ("r0",))
    x = MemberSpec(name="x", rollout_s=a[0], train_s=b[0], sync_s=0.0, rollout_nodes=rn_x, train_nodes=("t0",), iterations=iterations)
    y = MemberSpec(name="y", rollout_s=a[1], train_s=b[1], sync_s=0.0, rollout_nodes=rn_y, train_nodes=("t0",), iterations=iterations)
    its: dict = {"x": [], "y": []}
    run = GroupRun(loop, GroupSpec(name="g", members=(x,), rollout_nodes=("r0", "r1") if pinned else ("r0",), train_nodes=("t0",)),
                   record=False, on_iteration=lambda m, s, e, _t: its[m].append(e - s))
    loop.at(join_at, run.add_member, y)
    loop.run()
    return its


@pytest.mark.parametrize("pinned", [True, False])
def test_simulated_join_delays_stay_within_the_bounds_the_check_uses(pinned):
    # x: rollout 60, training 30; y: rollout 40, training 25. Pinned: y on a rollout node of its own.
    a, b = (60.0, 40.0), (30.0, 25.0)
    tot_x, tot_y = a[0] + b[0], a[1] + b[1]
    period_old = tot_x
    d_y = b[1] if pinned else max(a[1], b[1])
    wait = b[0] + (0.0 if pinned else a[0])
    worst_x, worst_y = 0.0, 0.0
    for join_at in np.linspace(0.0, 2 * tot_x, 61):
        its = _run_join(a, b, float(join_at), pinned)
        assert len(its["x"]) == len(its["y"]) == 12
        worst_x = max(worst_x, max(its["x"]))
        worst_y = max(worst_y, its["y"][0])
    new_period = max(tot_x, tot_y, b[0] + b[1], 0.0 if pinned else a[0] + a[1])
    assert worst_x <= max(new_period, period_old + d_y) + 1e-6
    assert worst_y <= tot_y + wait + 1e-6
    assert worst_x > tot_x + 1e-6  # a join does delay the running member at some moment (the check is not vacuous)
