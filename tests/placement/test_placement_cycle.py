"""Cycle time of a round-robin group: known answers, Howard vs enumeration vs the schedule itself."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from formulation.placement.cycle import Member, closed_form, cycle_time, cycle_times, cycle_times_by_enumeration, schedule

R, T = frozenset({"r0"}), frozenset({"t0"})


def m(name, a, b, s=0.0, r=R, t=T):
    return Member(name, a, b, s, frozenset(r), frozenset(t))


def test_lone_member_runs_its_solo_iteration():
    assert cycle_time([m("x", 30, 50, 2)]) == pytest.approx(82)


def test_two_members_fill_each_others_bubbles():
    # rollout 100 + 20 on the shared rollout pool; training 20 + 100: each pool is busy 120 s a cycle
    res = cycle_times([m("x", 100, 20), m("y", 20, 100)])
    assert res.period == pytest.approx(120)
    assert res.of("x") == res.of("y") == pytest.approx(120)


def test_a_long_member_sets_the_period_by_its_own_iteration():
    # sums are 60 and 60 but x alone needs 50 + 50 + 5
    assert cycle_time([m("x", 50, 50, 5), m("y", 10, 10)]) == pytest.approx(105)


def test_members_on_disjoint_nodes_do_not_wait_for_each_other():
    x = m("x", 40, 30, 0, r={"r0"}, t={"t0"})
    y = m("y", 10, 60, 0, r={"r1"}, t={"t1"})
    res = cycle_times([x, y])
    assert res.of("x") == pytest.approx(70) and res.of("y") == pytest.approx(70)
    assert res.period < closed_form([40, 10], [30, 60]) == pytest.approx(90)


def test_partial_overlap_only_couples_the_shared_node():
    # x and y share rollout node r0; z has r1 to itself. z is not slowed by x and y at all.
    x = m("x", 30, 5, r={"r0"}, t={"t0"})
    y = m("y", 30, 5, r={"r0"}, t={"t1"})
    z = m("z", 10, 5, r={"r1"}, t={"t2"})
    res = cycle_times([x, y, z])
    assert res.of("x") == pytest.approx(60) and res.of("y") == pytest.approx(60)
    assert res.of("z") == pytest.approx(15)


def test_sync_occupies_the_training_pool():
    # the example where the sums alone would say 1: with sync on the training ring the period is 2
    mem = [m("a", 1, 0, 0), m("b", 0, 1, 0), m("c", 0, 0, 1)]
    assert cycle_time(mem) == pytest.approx(2.0)
    assert cycle_times_by_enumeration(mem).period == pytest.approx(2.0)


def test_critical_cycle_names_the_bottleneck_pool():
    res = cycle_times([m("x", 100, 20), m("y", 100, 20)])
    assert res.period == pytest.approx(200)
    assert set(res.critical) == {"R:x", "R:y"}


def test_a_lone_member_pays_no_switch():
    x = Member("x", 30, 50, 2, R, T, rollout_switch_s=5, train_switch_s=7)
    assert cycle_time([x]) == pytest.approx(82)
    assert closed_form([30], [52], [5], [7]) == pytest.approx(82)


def test_shared_rings_pay_each_members_switch():
    # rollout ring 100 + 2 + 20 + 2 = 124, training ring 20 + 3 + 100 + 3 = 126, own cycles 120
    x = Member("x", 100, 20, 0, R, T, 2, 3)
    y = Member("y", 20, 100, 0, R, T, 2, 3)
    assert cycle_time([x, y]) == pytest.approx(126)
    assert cycle_times_by_enumeration([x, y]).period == pytest.approx(126)
    assert closed_form([100, 20], [20, 100], [2, 2], [3, 3]) == pytest.approx(126)
    # the member's own cycle is not charged: a long member still sets the period at a + b + s
    assert cycle_time([Member("x", 50, 50, 5, R, T, 1, 1), Member("y", 5, 5, 0, R, T, 1, 1)]) == pytest.approx(105)


def test_a_switch_is_capped_at_the_members_other_phase():
    # y's rollout switch (30 s) outlasts its training (4 s): its rollout-ring arc weighs 10 + 4
    x = Member("x", 40, 10, 0, R, T)
    y = Member("y", 10, 4, 0, R, T, rollout_switch_s=30)
    assert cycle_time([x, y]) == pytest.approx(54)
    assert closed_form([40, 10], [10, 4], [0, 30], [0, 0]) == pytest.approx(54)


def test_only_nodes_shared_by_two_members_switch():
    # x and y share rollout node r0 but train on their own nodes: only the rollout ring switches
    x = Member("x", 30, 5, 0, frozenset({"r0"}), frozenset({"t0"}), 2, 9)
    y = Member("y", 30, 5, 0, frozenset({"r0"}), frozenset({"t1"}), 2, 9)
    assert cycle_time([x, y]) == pytest.approx(64)


node_sets = st.sets(st.sampled_from(["n0", "n1", "n2"]), min_size=1)


@st.composite
def groups(draw, whole: bool):
    k = draw(st.integers(1, 4))
    out = []
    for i in range(k):
        a = draw(st.floats(0, 100, allow_nan=False))
        b = draw(st.floats(0, 100, allow_nan=False))
        s = draw(st.one_of(st.just(0.0), st.floats(0, 20, allow_nan=False)))
        r = {"n0", "n1"} if whole else draw(node_sets)
        t = {"n0", "n1", "n2"} if whole else draw(node_sets)
        sr = draw(st.one_of(st.just(0.0), st.floats(0, 30, allow_nan=False)))
        sw_t = draw(st.one_of(st.just(0.0), st.floats(0, 30, allow_nan=False)))
        out.append(Member(f"m{i}", a, b, s, frozenset(f"r-{x}" for x in r), frozenset(f"t-{x}" for x in t), sr, sw_t))
    return out


@settings(max_examples=60, deadline=None)
@given(groups(whole=False))
def test_howard_agrees_with_cycle_enumeration_and_the_schedule(mem):
    h = cycle_times(mem)
    e = cycle_times_by_enumeration(mem)
    # max-plus schedules become periodic after a transient, with a cyclicity c (x(k + c) = x(k) + c
    # lambda): measure over 840 = lcm(1..8) iterations after a long transient
    x = schedule(mem, 1500)
    for i, mm in enumerate(mem):
        assert h.of(mm.name) == pytest.approx(e.of(mm.name), rel=1e-9, abs=1e-9)
        slope = (x[-1, 2 * i] - x[-1 - 840, 2 * i]) / 840
        assert slope == pytest.approx(h.of(mm.name), rel=1e-6, abs=1e-6)


@settings(max_examples=60, deadline=None)
@given(groups(whole=True))
def test_closed_form_is_exact_on_whole_pools(mem):
    cf = closed_form([x.rollout_s for x in mem], [x.train_s + x.sync_s for x in mem],
                     [x.rollout_switch_s for x in mem], [x.train_switch_s for x in mem])
    assert cycle_time(mem) == pytest.approx(cf, rel=1e-9, abs=1e-9)


@settings(max_examples=60, deadline=None)
@given(groups(whole=False))
def test_closed_form_bounds_any_pinning_from_above(mem):
    cf = closed_form([x.rollout_s for x in mem], [x.train_s + x.sync_s for x in mem],
                     [x.rollout_switch_s for x in mem], [x.train_switch_s for x in mem])
    assert cycle_time(mem) <= cf * (1 + 1e-9) + 1e-9
    assert cycle_time(mem) >= max(x.solo_s for x in mem) - 1e-9
