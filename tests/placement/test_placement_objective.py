"""What an admission move costs (``Packer(objective=...)``): the $/h it adds, the $ one round of the
group adds, or the $ it adds until the members are done.

A short job may join a long job's pinned group on a rollout node of its own for +8 $/h (a new group
costs 24 $/h; sharing the long job's rollout node would break its SLO), but the group's ring then
runs at the long job's period, so the short job holds its node and the shared training node 2.7x
longer than alone. Each choice is checked against the cost
until every job is done written out by hand here (nodes x price x time), not against the packer's
own numbers."""

from __future__ import annotations

import pytest

from formulation.placement.evaluate import Index
from formulation.placement.greedy import Packer
from formulation.placement.instance import PlacementInstance, PlacementJob, PoolType

GPN = 8  # GPUs per node (PoolType's default)
PRICE_A, PRICE_B = 1.0, 2.0


def _inst(short_slo: float = 400.0) -> PlacementInstance:
    long_ = PlacementJob(name="long", slo_s=200.0, rollout_s={"A": {1: 160.0}}, train_s={"B": {1: 30.0}}, arrival_s=0.0)
    short = PlacementJob(name="short", slo_s=short_slo, rollout_s={"A": {1: 60.0}}, train_s={"B": {1: 10.0}}, arrival_s=1.0)
    return PlacementInstance(pool_types={"A": PoolType(price_per_gpu_hour=PRICE_A, dram_gb=1000, count=8),
                                         "B": PoolType(price_per_gpu_hour=PRICE_B, dram_gb=1000, count=8)}, jobs=[long_, short])


def _by_hand(n_long: int, n_short: int) -> dict[str, float]:
    """$ until both jobs are done (no switches): joining on a rollout node of its own (one training ring, its
    period the long job's iteration, rollout 160 + training 30 s, against the ring's 30 + 10 s and the short
    job's 60 + 10 s; the training node held until the last member is done) or a group of its own."""
    node_a, node_b = GPN * PRICE_A / 3600.0, GPN * PRICE_B / 3600.0  # $ per node-second
    period = max(160.0 + 30.0, 30.0 + 10.0, 60.0 + 10.0)
    join = period * (n_long * node_a + n_short * node_a + max(n_long, n_short) * node_b)
    alone = period * n_long * (node_a + node_b) + (60.0 + 10.0) * n_short * (node_a + node_b)
    return {"extend-rollout-pool": join, "new-group": alone}


def _second_move(objective: str, n_long: float, n_short: float, short_slo: float = 400.0) -> str:
    idx = Index(_inst(short_slo))
    pk = Packer(idx, objective=objective)
    pk.rounds_left = {0: n_long, 1: n_short}
    assert pk.admit(0).move == "new-group"
    return pk.admit(1).move


CASES = [(10, 100), (100, 10), (50, 50), (100, 300)]


def test_the_cases_need_both_moves():
    picks = set()
    for n_long, n_short in CASES:
        cost = _by_hand(n_long, n_short)
        picks.add(min(cost, key=cost.get))
    assert picks == {"extend-rollout-pool", "new-group"}


@pytest.mark.parametrize("n_long,n_short", CASES)
def test_life_takes_the_move_that_costs_less_until_both_jobs_are_done(n_long, n_short):
    cost = _by_hand(n_long, n_short)
    want = min(cost, key=cost.get)
    assert _second_move("life", n_long, n_short) == want


def test_the_rate_objective_joins_whatever_the_stretch():
    for n_long, n_short in [(10, 100), (100, 10)]:
        assert _second_move("rate", n_long, n_short) == "extend-rollout-pool"  # +8 $/h against 24 $/h


def test_the_round_objective_is_life_with_as_many_iterations_left_for_every_job():
    # a round of the joined group costs (8 + 8 + 16) $/h x 190 s, the long job's alone 24 x 190 and the short job's 24 x 70
    for n in (1, 7, 40):
        cost = _by_hand(n, n)
        assert _second_move("round", n, n) == _second_move("life", n, n) == min(cost, key=cost.get)


def test_an_slo_the_join_would_break_is_kept_whatever_the_objective():
    for objective in ("rate", "round", "life"):
        assert _second_move(objective, 50, 50, short_slo=100.0) == "new-group"  # the ring's 190 s > 100 s


def test_an_unknown_objective_is_refused():
    with pytest.raises(ValueError, match="objective"):
        Packer(Index(_inst()), objective="cheapest")
