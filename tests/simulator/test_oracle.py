"""The hindsight references: the work-conservation bound lies below every simulated schedule, a schedule plays its
moves at their fractions done, and the search's best is what re-simulating its schedule gives."""

from __future__ import annotations

from dataclasses import replace

from simulator.job import JobSim
from simulator.oracle import Schedule, ScheduleDecision, best_schedule, work_bound
from simulator.policies import Policy

from tests.simulator.test_sim_job import small_setup


def tiny():
    s = small_setup(n_prompts=16, group=4, rollout_nodes=2, train_nodes=2, gpn=4)
    return replace(s, train_unit=2)


def play(setup, sched, skip=0):
    a = sched.start
    pol = Policy("dynamic", rollout_gpus=a[0], reference_gpus=a[1], trainer_gpus=a[2],
                 decision=ScheduleDecision(sched, setup.workload.n_requests))
    return JobSim(setup, pol, seed=3, iterations=1, skip_batches=skip).run()


def test_a_schedule_moves_at_its_fraction_done():
    s = tiny()
    res = play(s, Schedule((10, 2, 4), ((0.5, (6, 4, 6)),)))
    assert len(res.decisions) == 1
    t, target, _ = res.decisions[0]
    done = sum(1 for r in res.requests if r.done_s is not None and r.done_s <= t)
    assert done >= 0.5 * s.workload.n_requests and target == {"rollout": 6, "reference": 4, "trainer": 6}


def test_skipped_batches_give_the_later_iterations_requests():
    s = tiny()
    two = JobSim(s, Policy("static"), seed=3, iterations=2).run()
    alone = JobSim(s, Policy("static"), seed=3, iterations=1, skip_batches=1).run()
    n = s.workload.n_requests
    assert [r.response_tokens for r in two.requests[n:]] == [r.response_tokens for r in alone.requests]


def test_bound_below_every_schedule_and_search_reproducible():
    s = tiny()
    sched, t, st = best_schedule(s, seed=3, iteration=0, max_moves=1, coarse=4)
    b = work_bound(s, seed=3, iteration=0)
    assert b["bound_s"] <= t
    again = play(s, sched).iterations[0].duration_s
    assert abs(again - t) <= 1e-6 * t
    for r in (4, 8, 12):  # every static split simulated lies above the bound too
        static = JobSim(s, Policy("static", rollout_gpus=r, reference_gpus=(16 - r) // 2, trainer_gpus=16 - r - (16 - r) // 2),
                        seed=3, iterations=1).run().iterations[0].duration_s
        assert b["bound_s"] <= static
    assert st.simulations > 0 and st.wall_s > 0


class _Once:
    """Moves once, at the first tick past 20% done, to ``target`` (with or without filling)."""

    reads_snapshot = False

    def __init__(self, target, fill):
        self.target, self.fill, self.done = target, fill, False

    def __call__(self, snap, ctx):
        from simulator.policies import Reallocation

        if ctx.at_boundary or self.done or ctx.components["rollout"].pending > 0.8 * 64:
            return None
        self.done = True
        return Reallocation(target=self.target, fill=self.fill)


def test_gpus_a_unit_bound_receiver_cannot_take_go_to_log_prob_inference():
    """A trainer unit of 4 cannot use 2 GPUs freed on one node: with ``fill`` they go to log-prob inference (and the
    record says so), without it they stay unowned."""
    s = replace(small_setup(n_prompts=16, group=4, rollout_nodes=2, train_nodes=2, gpn=4), train_unit=4)
    out = {}
    for fill in (False, True):
        pol = Policy("dynamic", rollout_gpus=8, reference_gpus=4, trainer_gpus=4,
                     decision=_Once({"rollout": 6, "reference": 2, "trainer": 8}, fill))
        res = JobSim(s, pol, seed=3, iterations=1).run()
        t = res.decisions[0][0]
        out[fill] = (sum(res.ledger.held_at(c, t + 1e-6) for c in ("rollout", "reference", "trainer")), res.decisions[0][2])
    assert out[False][0] < 16
    assert out[True][0] == 16 and "log-prob inference" in out[True][1]


def test_a_shrink_that_feeds_the_trainer_drains_whole_nodes():
    """Rollout 8 -> 4 GPUs with the trainer 4 -> 8 (a replica is 4 GPUs on one node): the drain frees one whole node
    rather than the 4 emptiest engines wherever they run, so the trainer takes the freed GPUs and nothing is left for
    the log-prob fill."""
    s = replace(small_setup(n_prompts=16, group=4, rollout_nodes=2, train_nodes=2, gpn=4), train_unit=4)
    for seed in (1, 2, 3):
        pol = Policy("dynamic", rollout_gpus=8, reference_gpus=4, trainer_gpus=4,
                     decision=_Once({"rollout": 4, "reference": 4, "trainer": 8}, True))
        res = JobSim(s, pol, seed=seed, iterations=1).run()
        t = res.decisions[0][0]
        assert res.ledger.held_at("trainer", t + 1e-6) == 8, (seed, res.decisions[0])
        assert res.ledger.held_at("reference", t + 1e-6) == 4, (seed, res.decisions[0])
        assert "log-prob inference" not in res.decisions[0][2]


def _threshold_run(s, iterations=2):
    """A policy that moves inside an iteration (its trigger reads telemetry) and back at every boundary."""
    from simulator.decisions import ThresholdDecision

    pol = Policy("dynamic", rollout_gpus=10, reference_gpus=2, trainer_gpus=4, decision=ThresholdDecision(u_low=0.5, window_s=2.0))
    return JobSim(s, pol, seed=3, iterations=iterations).run()


def test_a_policys_played_schedule_replayed_alone_gives_its_iteration_time():
    """Each iteration of a policy's run, replayed alone as a schedule (the moves at the fraction done and second at
    which the policy took them; the later iteration from the allocation before its boundary, with the run's tick
    phase), takes the time the policy's run took. The replay is the same deterministic simulation of the same requests
    and moves; only its clock starts at zero rather than at the iteration's start, so the durations may differ by
    float rounding of the absolute times (relative 1e-6 allows that, and nothing a missed tick or migration would give:
    one second of ticks is over 1e-3 of these iterations)."""
    from simulator.oracle import played_schedule, schedule_policy

    s = tiny()
    res = _threshold_run(s)
    assert any(not b for *_, b, _ in res.decision_points), "the policy never moved inside an iteration"
    for k, it in enumerate(res.iterations):
        sched = played_schedule(res, k)
        if k > 0:
            assert sched.prior is not None and sched.first_tick_s is not None and sched.layout is not None
        replay = JobSim(s, schedule_policy(sched, s.workload.n_requests), seed=3, iterations=1, skip_batches=k).run()
        assert len(replay.decisions) == len(sched.moves) + (sched.prior is not None and sched.prior != sched.start)
        assert abs(replay.iterations[0].duration_s - it.duration_s) <= 1e-6 * it.duration_s, (k, sched.describe())


def test_the_search_seeded_with_a_schedule_is_never_slower_than_it():
    from simulator.oracle import SearchStats, played_schedule, schedule_policy

    s = tiny()
    res = _threshold_run(s)
    seed_sched = played_schedule(res, 1)
    alone = JobSim(s, schedule_policy(seed_sched, s.workload.n_requests), seed=3, iterations=1, skip_batches=1).run()
    t_seed = alone.iterations[0].duration_s
    sched, t, st = best_schedule(s, seed=3, iteration=1, max_moves=1, coarse=4, stats=SearchStats(), start_from=seed_sched)
    assert t <= t_seed
    assert abs(st.seeded_s - t_seed) <= 1e-6 * t_seed
    assert t == min(x for _, _, x in st.trace)  # the best of every schedule simulated
    again = JobSim(s, schedule_policy(sched, s.workload.n_requests), seed=3, iterations=1, skip_batches=1).run()
    assert abs(again.iterations[0].duration_s - t) <= 1e-6 * t


def test_a_later_iterations_replay_starts_from_the_runs_node_layout():
    """With a trainer replica of 4 GPUs, which engines a drain frees depends on the nodes the previous iteration left
    them on: the replay places them as the run had them (``layout``), and without that it is off for some seed."""
    from simulator.decisions import ThresholdDecision
    from simulator.oracle import played_schedule, schedule_policy

    s = replace(small_setup(n_prompts=16, group=4, rollout_nodes=2, train_nodes=2, gpn=4), train_unit=4)
    off = []
    for seed in (2, 3, 5):
        pol = Policy("dynamic", rollout_gpus=8, reference_gpus=4, trainer_gpus=4, decision=ThresholdDecision(u_low=0.5, window_s=2.0))
        res = JobSim(s, pol, seed=seed, iterations=2).run()
        sched = played_schedule(res, 1)
        want = res.iterations[1].duration_s

        def replay(sc, seed=seed):
            return JobSim(s, schedule_policy(sc, s.workload.n_requests), seed=seed, iterations=1, skip_batches=1).run().iterations[0].duration_s

        assert abs(replay(sched) - want) <= 1e-6 * want, (seed, sched.describe())
        off.append(abs(replay(replace(sched, layout=None)) / want - 1.0))
    assert max(off) > 1e-3


def test_simulate_oracle_searches_from_the_dynamic_policys_own_schedule():
    """``planner simulate --oracle`` (:func:`planner.commands.simulate.hindsight`) seeds each iteration's search with
    the schedule the dynamic policy played, so its oracle is a hindsight reference: in every iteration at most the
    policy's own time (before, the search's own family could be slower than the policy it was judging). The policy's
    times come from its run, the oracle's from separate simulations, so the comparison allows float rounding."""
    from planner.commands.simulate import hindsight

    s = tiny()
    res = _threshold_run(s)
    h = hindsight(res, 3, True)
    assert h["seeded"] == len(res.iterations) == 2
    for it, t in zip(res.iterations, h["oracle_s"]):
        assert t <= it.duration_s * (1 + 1e-6), (t, it.duration_s)
    assert h["policy_vs_oracle"] <= 1 + 1e-6
    static = JobSim(s, Policy("static", rollout_gpus=10, reference_gpus=2, trainer_gpus=4), seed=3, iterations=1).run()
    assert hindsight(static, 3, False).get("seeded") is None  # no oracle asked: nothing searched
