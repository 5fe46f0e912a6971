"""Co-execution group runner and the multi-job trace (phase level)."""

from __future__ import annotations


import numpy as np
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from simulator.groups import GroupSpec, MemberSpec, TailProfile, run_group
from simulator.profiles import PhaseProfile
from simulator.trace import PoolConfig, SoloPlacer, TraceJob, TraceSim

R, T = ("r0", "r1"), ("t0",)


def closed_form(ms):
    a = [m.rollout_s for m in ms]
    bs = [m.train_s + m.sync_s for m in ms]
    return max(sum(a), sum(bs), max(x + y for x, y in zip(a, bs)))


@settings(max_examples=30, deadline=None)
@given(st.lists(st.tuples(st.floats(1, 300), st.floats(1, 300), st.floats(0, 5)), min_size=1, max_size=5))
@example([(64.0, 58.0, 0.0), (70.0, 136.0, 0.0), (83.0, 118.0, 0.0), (90.0, 61.0, 0.0), (170.0, 109.0, 0.0)])  # 482 vs 477: slow transient
def test_whole_pool_group_period_is_the_closed_form(phases):
    """Members on the whole pools: the executed schedule's period is max(sum a, sum(b+s), max(a+b+s))
    (DESIGN.md section 4; formulation/placement/cycle.py proves it). The runner is an independent
    execution of the schedule (node rings and dependencies), not the formula."""
    ms = tuple(MemberSpec(f"m{i}", a, b, s, R, T) for i, (a, b, s) in enumerate(phases))
    # iterations 1,100-1,500 of the run: past the runner's max-plus transient from its cold start (the
    # example above; see test_switches_on_partial_pins_run_at_the_cycle_models_period)
    run = run_group(GroupSpec("g", ms), iterations=1500)
    lam = closed_form(ms)
    for name, ct in run.cycle_times(skip=1100).items():
        assert ct == pytest.approx(lam, rel=1e-6), name


def test_disjoint_members_do_not_wait_for_each_other():
    ms = (MemberSpec("a", 100, 40, 2, ("r0",), ("t0",)), MemberSpec("b", 60, 80, 2, ("r1",), ("t1",)))
    run = run_group(GroupSpec("g", ms), iterations=6)
    ct = run.cycle_times()
    assert ct["a"] == pytest.approx(142) and ct["b"] == pytest.approx(142)
    assert closed_form(ms) > 142  # sharing every node would be slower


def test_switch_costs_add_to_a_shared_pool():
    base = (MemberSpec("a", 100, 40, 0, R, T), MemberSpec("b", 100, 40, 0, R, T))
    sw = tuple(MemberSpec(m.name, 100, 40, 0, R, T, rollout_switch_s=3.0, train_switch_s=2.0) for m in base)
    assert run_group(GroupSpec("g", sw), iterations=8).cycle_times()["a"] == pytest.approx(
        run_group(GroupSpec("g", base), iterations=8).cycle_times()["a"] + 6.0)


def test_consolidation_lets_the_next_rollout_start_in_the_tail():
    """Released GPUs start the next member's rollout: a rollout-bound group cycles faster, and
    the tail member's own rollout is stretched by its tail_stretch only."""
    plain = tuple(MemberSpec(n, 100, 20, 1, R, T) for n in "abc")
    cons = tuple(MemberSpec(n, 100, 20, 1, R, T, tail=TailProfile(0.3, 2, 1.2)) for n in "abc")
    c0 = run_group(GroupSpec("g", plain), iterations=8).cycle_times()["a"]
    c1 = run_group(GroupSpec("g", cons), iterations=8).cycle_times()["a"]
    assert c0 == pytest.approx(300)
    assert c1 < c0
    # lower bound: bodies cannot overlap beyond the GPUs the tails leave free
    assert c1 >= 3 * 100 * 0.3 - 1e-6


def test_sampled_phase_times_are_deterministic_per_seed():
    ms = (MemberSpec("a", (90.0, 110.0, 130.0), (30.0, 50.0), 1, R, T), MemberSpec("b", (50.0, 70.0), 60, 1, R, T))
    a = run_group(GroupSpec("g", ms), iterations=10, seed=1).cycle_times()
    b = run_group(GroupSpec("g", ms), iterations=10, seed=1).cycle_times()
    c = run_group(GroupSpec("g", ms), iterations=10, seed=2).cycle_times()
    assert a == b and a != c


def _jobs(n=8, iters=10):
    def prof(c):
        f = 1.0 / c.rollout_nodes
        return PhaseProfile((100.0 * f, 120.0 * f, 90.0 * f), (40.0, 45.0), 1.0, TailProfile(0.3, 2, 1.1), 1e6, 1024)

    return [TraceJob(f"j{i}", 60.0 * i, iters, 500.0, prof, lambda c: (1.0, 2.0), PoolConfig("H20", 1, "H800", 1),
                     PoolConfig("H800", 2, "H800", 2)) for i in range(n)]


class OneGroupPlacer:
    """Test placer: every job joins one group on 2+1 nodes (no planning involved)."""

    def __init__(self):
        self.members = []

    def admit(self, job):
        self.members.append(job)
        return True

    def remove(self, job):
        self.members.remove(job)

    def groups(self):
        return {"g0": (PoolConfig("H20", 2, "H800", 1), list(self.members))} if self.members else {}


def test_trace_every_job_runs_its_iterations_and_cost_adds_up():
    jobs = _jobs()
    res = TraceSim(jobs, SoloPlacer({j.name: j for j in jobs}, {"H20": 3, "H800": 3}), {"H20": 1.0, "H800": 2.0},
                   policy="solo-d").run()
    for j in jobs:
        rec = res.jobs[j.name]
        assert len(rec.iteration_s) == j.iterations and rec.done_s is not None
        assert rec.admitted_s >= rec.arrival_s
    # capacity: never more than 3 nodes of a type provisioned
    assert max(lv for _, t, lv in res.provisioned) <= 3 * 8
    # cost = GPU-hours x price, GPU-hours = sum over groups of their span x GPUs
    hours = sum((b - a) for a, b, _ in res.group_spans.values()) * 8 / 3600.0
    assert res.gpu_hours["H20"] == pytest.approx(hours) and res.gpu_hours["H800"] == pytest.approx(hours)
    assert res.cost == pytest.approx(hours * 1.0 + hours * 2.0)


def test_a_shared_group_is_cheaper_than_solo_for_the_same_work():
    jobs = _jobs(n=4, iters=12)
    solo = TraceSim(jobs, SoloPlacer({j.name: j for j in jobs}, {"H20": 8, "H800": 8}), {"H20": 1.0, "H800": 2.0},
                    policy="solo-d").run()
    grp = TraceSim(jobs, OneGroupPlacer(), {"H20": 1.0, "H800": 2.0}, policy="groups").run()
    assert all(len(r.iteration_s) == 12 for r in grp.jobs.values())
    assert grp.cost < solo.cost
    assert grp.summary()["tokens"] == pytest.approx(solo.summary()["tokens"])


def test_members_beyond_host_dram_switch_cold():
    """Residency: members that fit in the nodes' DRAM switch warm; once the DRAM is full, later
    members pay cold starts, and the group cycles slower."""
    def jobs():
        out = []
        for j in _jobs(n=3, iters=10):
            out.append(TraceJob(j.name, 0.0, 10, j.slo_s, j.profile, lambda c: (1.0, 2.0), j.solo, j.colocated,
                                cold_switch_s=lambda c: (60.0, 90.0), dram_rollout_node_gb=100.0, train_state_gb=300.0))
        return out

    roomy = TraceSim(jobs(), OneGroupPlacer(), {"H20": 1.0, "H800": 2.0}, node_dram_gb={"H20": 2048, "H800": 2048}).run()
    tight = TraceSim(jobs(), OneGroupPlacer(), {"H20": 1.0, "H800": 2.0}, node_dram_gb={"H20": 250, "H800": 2048}).run()
    def span(r):
        return max(j.done_s for j in r.jobs.values())
    assert span(tight) > span(roomy) + 5 * 60.0  # the third member's rollout switches are cold
    assert tight.cost > roomy.cost


class RandomPlacer:
    """Test placer: joins, new groups and rollout-pool growth chosen at random (no planning)."""

    def __init__(self, rng, groups=3):
        self.rng = rng
        self.n = groups
        self.members = {}
        self.size = {}

    def admit(self, job):
        g = f"g{int(self.rng.integers(0, self.n))}"
        if self.members.get(g) and self.rng.random() < 0.3:
            self.size[g] = min(4, self.size[g] + 1)  # extend the rollout pool
        self.size.setdefault(g, 1)
        self.members.setdefault(g, []).append(job)
        return True

    def remove(self, job):
        for g, ms in self.members.items():
            if job in ms:
                ms.remove(job)
                if not ms:
                    self.size.pop(g, None)

    def groups(self):
        return {g: (PoolConfig("H20", self.size[g], "H800", 1), list(ms)) for g, ms in self.members.items() if ms}


@settings(max_examples=25, deadline=None)
@given(st.integers(0, 10_000), st.integers(2, 9), st.booleans())
def test_joins_departures_and_pool_growth_never_deadlock(seed, n_jobs, consolidate):
    """Jobs join running groups (the rollout and training rings can be a round apart), leave, and
    pools grow, in random order: every job still runs all its iterations."""
    rng = np.random.default_rng(seed)

    def prof_for(a, b):
        return lambda c: PhaseProfile((a / c.rollout_nodes ** 0.2,), (b,), 0.5, TailProfile(0.3, 2, 1.1), 1e5, 64)

    jobs = [TraceJob(f"j{i}", float(rng.uniform(0, 400)), int(rng.integers(1, 8)), 1e9,
                     prof_for(float(rng.uniform(20, 120)), float(rng.uniform(10, 90))), lambda c: (1.0, 1.5),
                     PoolConfig("H20", 1, "H800", 1)) for i in range(n_jobs)]
    res = TraceSim(jobs, RandomPlacer(rng), {"H20": 1.0, "H800": 2.0}, consolidate=consolidate, seed=seed).run()
    for j in jobs:
        assert len(res.jobs[j.name].iteration_s) == j.iterations, j.name
        assert res.jobs[j.name].done_s is not None


@settings(max_examples=40, deadline=None)
@given(st.lists(st.tuples(st.floats(5, 300), st.floats(5, 300), st.floats(0, 5), st.floats(0, 4), st.floats(0, 4),
                          st.sets(st.sampled_from(("r0", "r1", "r2")), min_size=1), st.sets(st.sampled_from(("t0", "t1")), min_size=1)),
                min_size=2, max_size=4))
# found by hypothesis under load (2026-12-06) when the runner ran 120 iterations: m1's own rollout ring (224 + 2 + 5 +
# 4 = 235 s) is 1 s quicker than the period the shared training node sets (236 s), so m1 gained a second an iteration
# on m2 until iteration 118, and its mean over iterations 60-120 was 235.02
@example([(5.0, 109.0, 5.0, 0.0, 4.0, {"r1"}, {"t0"}), (224.0, 5.0, 0.0, 4.0, 0.0, {"r0"}, {"t1"}),
          (5.0, 109.0, 5.0, 2.0, 4.0, {"r0"}, {"t0"})])
def test_switches_on_partial_pins_run_at_the_cycle_models_period(members):
    """Members pinned to node subsets with a warm switch of their own on every node they share: the
    runner (node rings, the next member's state loaded as soon as a node is released) runs at the
    period Howard's policy iteration gives on the event graph of :mod:`formulation.placement.cycle`
    (switches on the ring arcs into the member they load, none on a member's own arcs). The two are
    written independently: one executes the schedule with resources, the other is algebra."""
    from formulation.placement.cycle import Member, cycle_times

    specs = tuple(MemberSpec(f"m{i}", a, b, s, tuple(sorted(rn)), tuple(sorted(tn)), rollout_switch_s=sr, train_switch_s=sw)
                  for i, (a, b, s, sr, sw, rn, tn) in enumerate(members))
    model = cycle_times([Member(m.name, m.rollout_s, m.train_s, m.sync_s, frozenset(m.rollout_nodes), frozenset(m.train_nodes),
                                rollout_switch_s=m.rollout_switch_s, train_switch_s=m.train_switch_s) for m in specs])
    # the runner from its cold start has a max-plus transient: a member whose own ring is a little quicker than the
    # period gains on the others for (slack / difference) iterations, hundreds when the difference is ~1 s; the mean
    # is taken over iterations 1,100-1,500 (a run of 1,500 takes ~0.1 s)
    run = run_group(GroupSpec("g", specs), iterations=1500)
    for name, ct in run.cycle_times(skip=1100).items():
        assert ct == pytest.approx(model.of(name), rel=1e-3), name
