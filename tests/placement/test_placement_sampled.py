"""Members' iteration times under sampled phase times (:mod:`formulation.placement.sampled`) and the
admission hook that uses them (``Packer(accept=...)``).

The recurrence is checked against the group runner (:mod:`simulator.groups`, what the trace runs):
iteration by iteration with fixed phase times, and with drawn phase times (its own draws, not the
recurrence's) the runner's slowest iteration never exceeds the predicted slowest one by more than the
draw noise, and where the p90 tables say a group fits the recurrence and the runner both see
iterations past the SLO."""

from __future__ import annotations

import numpy as np
import pytest

from formulation.placement.cycle import Member, cycle_times
from formulation.placement.evaluate import Index
from formulation.placement.greedy import Packer
from formulation.placement.instance import PlacementInstance, PlacementJob, PoolType
from formulation.placement.sampled import SampledMember, iteration_gaps, slowest_iterations
from simulator.core import EventLoop
from simulator.groups import GroupRun, GroupSpec, MemberSpec


def _group(pinned: bool, a: list, b: list, s: float = 0.5, sw: float = 0.0) -> list[SampledMember]:
    out = []
    for i, (ra, tb) in enumerate(zip(a, b)):
        rn = frozenset({f"r{i}"}) if pinned else frozenset({"r"})
        out.append(SampledMember(f"m{i}", tuple(np.atleast_1d(ra)), tuple(np.atleast_1d(tb)), s, rn, frozenset({"t"}), sw, sw))
    return out


def _runner_gaps(ms: list[SampledMember], iterations: int, seed: int = 0) -> np.ndarray:
    loop = EventLoop(seed)
    specs = tuple(MemberSpec(name=m.name, rollout_s=m.rollout_s if len(m.rollout_s) > 1 else m.rollout_s[0],
                             train_s=m.train_s if len(m.train_s) > 1 else m.train_s[0], sync_s=m.sync_s,
                             rollout_nodes=tuple(sorted(m.rollout_nodes)), train_nodes=tuple(sorted(m.train_nodes)),
                             rollout_switch_s=m.rollout_switch_s, train_switch_s=m.train_switch_s, iterations=iterations)
                  for m in ms)
    rn = tuple(sorted({n for m in ms for n in m.rollout_nodes}))
    run = GroupRun(loop, GroupSpec(name="g", members=specs, rollout_nodes=rn, train_nodes=("t",)), record=False)
    loop.run()
    return np.array([np.diff(run.finished[m.name].iter_end) for m in ms]).T  # (iterations - 1, members)


@pytest.mark.parametrize("pinned", [True, False])
def test_fixed_phase_times_give_the_runners_gaps_iteration_by_iteration(pinned):
    ms = _group(pinned, [40.0, 25.0, 55.0], [10.0, 18.0, 12.0])
    rec = iteration_gaps(ms, iterations=20, reps=1, warmup=0)[0]  # (19, 3)
    np.testing.assert_allclose(rec, _runner_gaps(ms, 20), rtol=0, atol=1e-9)


@pytest.mark.parametrize("pinned", [True, False])
def test_fixed_phase_times_settle_at_howards_cycle_time(pinned):
    ms = _group(pinned, [40.0, 25.0, 55.0], [10.0, 18.0, 12.0])
    howard = cycle_times([Member(m.name, m.rollout_s[0], m.train_s[0], m.sync_s, m.rollout_nodes, m.train_nodes) for m in ms])
    g = iteration_gaps(ms, iterations=80, reps=1)[0]
    for i, m in enumerate(ms):
        assert g[-12:, i].mean() == pytest.approx(howard.of(m.name), rel=1e-6)


def test_a_lone_member_is_slowest_on_its_slowest_samples():
    ms = _group(True, [(30.0, 31.0, 35.0)], [(10.0, 12.0, 11.0)], s=0.4)
    assert slowest_iterations(ms)[0] == pytest.approx(35.0 + 12.0 + 0.4)


def test_switches_on_a_shared_ring_bound_the_runner_from_above():
    ms = _group(True, [(40.0, 44.0), (25.0, 30.0)], [(10.0, 11.0), (18.0, 19.0)], sw=1.5)
    pred = slowest_iterations(ms, reps=32)
    seen = _runner_gaps(ms, 200, seed=3)[2 * len(ms) + 2:].max(axis=0)
    assert np.all(seen <= pred + 1e-9)


def test_a_group_the_p90_tables_fit_misses_iterations_and_the_recurrence_sees_them():
    # two members on rollout nodes of their own sharing a training node: on the tables (p90 of the
    # samples) the training ring is 50 + 30 and the own cycles 45 + 30 and 70 + 20: every member within
    # 100; drawn phases make the training ring wait for a late rollout
    a0, b0, a1, b1 = (40.0, 42.0, 45.0), (28.0, 29.0, 30.0), (60.0, 65.0, 70.0), (15.0, 18.0, 20.0)
    ms = _group(True, [a0, a1], [b0, b1], s=0.0)
    table = max(np.quantile(b0, 0.9) + np.quantile(b1, 0.9), np.quantile(a0, 0.9) + np.quantile(b0, 0.9),
                np.quantile(a1, 0.9) + np.quantile(b1, 0.9))
    slowest = slowest_iterations(ms).max()
    seen = _runner_gaps(ms, 400, seed=7)[6:].max()
    assert table <= 100.0
    assert slowest > table
    assert seen > table  # the runner (its own draws) sees it too
    assert seen <= slowest + 1e-9


def _inst() -> PlacementInstance:
    def job(name: str, slo: float, arrival: float) -> PlacementJob:
        return PlacementJob(name=name, slo_s=slo, rollout_s={"A": {1: 60.0}}, train_s={"B": {1: 20.0}}, arrival_s=arrival)

    return PlacementInstance(pool_types={"A": PoolType(price_per_gpu_hour=1.0, dram_gb=1000, count=8),
                                         "B": PoolType(price_per_gpu_hour=2.0, dram_gb=1000, count=8)},
                             jobs=[job("x", 200.0, 0.0), job("y", 200.0, 1.0)])


def test_packer_asks_accept_and_a_refused_join_takes_the_next_move():
    asked = []
    pk = Packer(Index(_inst()), accept=lambda g, k, j: asked.append((g, k, j)) is not None)  # refuses every join
    pk.admit(0)
    adm = pk.admit(1)
    assert asked and all(j == 1 and g == 0 for g, _, j in asked)
    assert adm.move == "new-group"
    pk2 = Packer(Index(_inst()), accept=lambda g, k, j: True)
    pk2.admit(0)
    assert pk2.admit(1).move in ("fill-bubble", "extend-rollout-pool")


def _pinned_spec(name: str, a: float, b: float, node: int, sync: float = 0.5, sw: float = 1.0) -> MemberSpec:
    return MemberSpec(name=name, rollout_s=a, train_s=b, sync_s=sync, rollout_nodes=(f"r{node}",), train_nodes=("t",),
                      train_switch_s=sw)


@pytest.mark.parametrize("join_at,start_after", [(130.0, 0.0), (147.0, 0.0), (163.5, 0.0), (130.0, 9.0), (171.0, 4.0)])
def test_join_forward_gives_the_runners_iterations_with_fixed_phase_times(join_at, start_after):
    """A pinned group running; at ``join_at`` the scheduler reads its state and a newcomer starts its
    first rollout ``start_after`` later: the forward prediction from that state is the runner's own
    slowest iteration of every member (the join's transient included) and the newcomer's, exactly."""
    from formulation.placement.sampled import RingState, join_forward

    specs = [_pinned_spec("x", 40.0, 12.0, 0), _pinned_spec("y", 25.0, 20.0, 1), _pinned_spec("z", 33.0, 9.0, 2)]
    new = _pinned_spec("n", 28.0, 15.0, 3)
    loop = EventLoop(0)
    run = GroupRun(loop, GroupSpec(name="g", members=tuple(specs), rollout_nodes=("r0", "r1", "r2", "r3"), train_nodes=("t",)),
                   record=False)
    loop.run(until=join_at)
    now = loop.now
    node = run.train_nodes["t"]
    order = node.ring[node.ptr:] + node.ring[:node.ptr]
    ring = []
    for name in order:
        mem = run.members[name]
        last = mem.last_end if mem.last_end is not None else mem.rollout_starts[0]
        ring.append(RingState(name, (mem.spec.rollout_s,), (mem.spec.train_s,), mem.spec.sync_s, mem.spec.train_switch_s, 1e9,
                              last, rollout_start=mem.phase_start if mem.state in ("rollout", "tail") else None,
                              training_start=mem.train_start if mem.state == "train" else None))
    start = now + start_after
    mine = RingState("n", (new.rollout_s,), (new.train_s,), new.sync_s, new.train_switch_s, 1e9, start)
    rounds = 6
    worst, worst_new = join_forward(ring, mine, now, start, rounds, reps=1)
    loop.at(start, lambda: run.add_member(new))
    last_seen = {n: (run.members[n].last_end or run.members[n].rollout_starts[0]) for n in order}
    loop.run(until=start + rounds * 400.0)
    for i, name in enumerate(order):
        ends = [e for e in run.members[name].iter_end if e > now - 1e-9]
        gaps = np.diff([last_seen[name]] + ends[:rounds])
        assert worst[i] == pytest.approx(gaps.max(), abs=1e-6)
    first = run.members["n"].iter_end[0] - start
    later = np.diff(run.members["n"].iter_end[:rounds]).max()
    assert worst_new == pytest.approx(max(first, later), abs=1e-6)


def test_the_upper_end_of_a_range_is_the_uniform_estimate():
    from planner.instances.sampled_admission import with_upper_end

    assert with_upper_end((10.0, 12.0, 14.0)) == (10.0, 12.0, 14.0, 16.0)
    assert with_upper_end((5.0,)) == (5.0,)


def test_a_new_group_opens_on_the_cheapest_configuration_its_alone_test_passes():
    """``Packer.accept_alone`` (the sampled admissions' test of a job's own slowest iteration): the
    cheapest configuration that passes, a join when no new group passes below the join's cost, and
    the cheapest that fits when nothing passes and nothing can be joined."""
    from formulation.placement.evaluate import Index
    from formulation.placement.greedy import Packer
    from formulation.placement.instance import PlacementInstance, PlacementJob, PoolType

    pools = {"A": PoolType(gpus_per_node=8, price_per_gpu_hour=1.0, dram_gb=512, count=6),
             "B": PoolType(gpus_per_node=8, price_per_gpu_hour=2.0, dram_gb=512, count=3)}
    jobs = [PlacementJob(name=f"j{i}", slo_s=85.0, rollout_s={"A": {1: 60.0, 2: 40.0}}, train_s={"B": {1: 20.0}},
                         dram_rollout_node_gb=10.0, train_state_gb=10.0) for i in range(2)]
    idx = Index(PlacementInstance(name="alone", pool_types=pools, jobs=jobs, pinned_members_max=2))
    two_nodes = lambda k, j: idx.configs[k].rollout_nodes >= 2  # noqa: E731 (a stand-in for the sampled test)
    pk = Packer(idx)
    pk.accept_alone = two_nodes
    first = pk.admit(0)
    assert first.move == "new-group" and idx.configs[first.config].rollout_nodes == 2 and idx.cost[first.config] == 8 * 2 + 16
    plain = Packer(idx).admit(0)
    assert idx.configs[plain.config].rollout_nodes == 1 and idx.cost[plain.config] == 8 + 16  # without the test: the cheapest
    # the second job joins the group (its own rollout nodes cost less than a group of its own passing the test)
    second = pk.admit(1)
    assert second.move in ("fill-bubble", "extend-rollout-pool") and second.marginal_cost < 8 * 2 + 16
    nothing = Packer(idx)
    nothing.accept_alone = lambda k, j: False
    assert idx.cost[nothing.admit(0).config] == 8 + 16  # nothing passes, nothing to join: the cheapest that fits


def test_a_run_stopped_at_its_first_iteration_above_a_limit_gives_the_whole_runs_answer():
    """``join_forward(stop_above=...)`` (the timed join's early stop): on random rings, sampled phases
    and limits around the runs' own iterations, the stopped run fails the limits exactly when the whole
    run does, and where the whole run passes it returns the same iterations (the same draws)."""
    from formulation.placement.sampled import RingState, join_forward

    rng = np.random.default_rng(7)
    seen = {True: 0, False: 0}
    for case in range(120):
        m = int(rng.integers(1, 5))
        now = 100.0

        def samples(lo, hi):
            return tuple(float(x) for x in rng.uniform(lo, hi, size=int(rng.integers(1, 6))))

        ring = []
        for i in range(m):
            phase = rng.integers(0, 3)
            ring.append(RingState(f"m{i}", samples(20, 60), samples(5, 20), 0.5, 1.0, 1e9, now - float(rng.uniform(0, 50)),
                                  rollout_start=now - float(rng.uniform(0, 30)) if phase == 1 else None,
                                  training_start=now - float(rng.uniform(0, 5)) if phase == 2 and i == 0 else None))
        mine = RingState("n", samples(20, 60), samples(5, 20), 0.5, 1.0, 1e9, now)
        start, rounds = now + float(rng.uniform(0, 40)), 3 * (m + 1) + 4
        worst, worst_new = join_forward(ring, mine, now, start, rounds, reps=4, seed=case)
        # limits between 0.8x and 1.3x of what the whole run gives: some pass, some fail
        lim = worst * rng.uniform(0.8, 1.3, size=m)
        lim_new = worst_new * float(rng.uniform(0.8, 1.3))
        whole = bool(np.all(worst <= lim) and worst_new <= lim_new)
        w2, n2 = join_forward(ring, mine, now, start, rounds, reps=4, seed=case, stop_above=(lim, lim_new))
        stopped = bool(np.all(w2 <= lim) and n2 <= lim_new)
        assert stopped == whole, (case, worst, w2, lim, worst_new, n2, lim_new)
        if whole:
            assert np.array_equal(w2, worst) and n2 == worst_new
        seen[whole] += 1
    assert seen[True] >= 10 and seen[False] >= 10, seen  # (both answers were exercised)
