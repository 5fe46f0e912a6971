"""The request-level tail model (:mod:`formulation.realloc.tail`) and the completion prediction built on it,
judged against independent references: the token-by-token continuous-batching reference of the simulator's
tests, brute-force queues, and the simulator itself (a static run's end against the prediction made mid-run)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from formulation.realloc.completion import _fluid_after
from formulation.realloc.tail import (TailRequests, _drain_ms, end_times, group_difficulty_posterior, reassign,
                                      residual_draws)
from tests.simulator.conftest import tiny_engine_model
from tests.simulator.test_sim_engine import token_tick_reference


def _tail(engine, group, generated=None, running=None, key=None, slots=64, lengths=None, **kw):
    n = len(engine)
    E = int(max(engine)) + 1 if n else 1
    return TailRequests(engine=np.asarray(engine, dtype=int), group=np.asarray(group, dtype=int),
                        generated=np.zeros(n) if generated is None else np.asarray(generated, dtype=float),
                        context=np.full(n, 100.0), running=np.ones(n, dtype=bool) if running is None else np.asarray(running),
                        drain_key=np.arange(E, dtype=float) if key is None else np.asarray(key, dtype=float),
                        lengths=np.arange(1.0, 2001.0) if lengths is None else lengths, prompt_tokens=np.full(n, 100.0),
                        slots=slots, **kw)


@settings(max_examples=30, deadline=None)
@given(st.lists(st.integers(1, 400), min_size=1, max_size=40), st.integers(1, 12))
def test_one_engine_drain_matches_the_token_by_token_reference(lengths, slots):
    m = tiny_engine_model(max_running=slots)
    n = len(lengths)
    t = _drain_ms(np.zeros(n, dtype=int), np.arange(n, dtype=float), np.asarray(lengths, dtype=float), np.full(n, 100.0),
                  slots, m.a_ms, m.b_ms, m.c_ms) / 1e3
    ref = token_tick_reference(lengths, 100, m, slots)
    step = (m.a_ms + m.b_ms * slots + m.c_ms * slots * (100 + max(lengths))) / 1e3
    for i in range(n):
        assert abs(t[i] - ref[i]) <= 1.5 * step + 1e-9, (i, t[i], ref[i])


@settings(max_examples=20, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 3), st.integers(1, 300)), min_size=1, max_size=30))
def test_engines_drain_independently(reqs):
    """Several engines in one vectorised pass: each as if it were alone."""
    m = tiny_engine_model()
    eng = np.array([e for e, _ in reqs])
    L = np.array([x for _, x in reqs], dtype=float)
    both = _drain_ms(eng, np.arange(eng.size, dtype=float), L, np.full(eng.size, 100.0), 64, m.a_ms, m.b_ms, m.c_ms)
    for e in np.unique(eng):
        mine = eng == e
        alone = _drain_ms(np.zeros(int(mine.sum()), dtype=int), np.arange(int(mine.sum()), dtype=float), L[mine],
                          np.full(int(mine.sum()), 100.0), 64, m.a_ms, m.b_ms, m.c_ms)
        assert np.allclose(both[mine], alone, rtol=1e-9, atol=1e-6)


@settings(max_examples=40, deadline=None)
@given(st.lists(st.integers(0, 5), min_size=1, max_size=60), st.integers(1, 6), st.integers(1, 4))
def test_fewer_engines_keep_the_fullest_and_move_whole_groups_level(engines, keep, gsize):
    group = np.arange(len(engines)) // gsize
    E = max(engines) + 1
    key = np.bincount(engines, minlength=E).astype(float)
    t = _tail(engines, group, key=key)
    out, moved, delay = reassign(t, keep)
    k = min(keep, E)
    assert out.min() >= 0 and out.max() < max(k, E if keep >= E else k)
    if keep >= E:
        assert not moved.any() and np.array_equal(out, np.asarray(engines))
        return
    kept = np.sort(np.lexsort((-np.arange(E), key))[E - keep:])
    assert set(np.asarray(engines)[~moved]) <= set(kept.tolist())  # the kept are the fullest; their requests stay
    assert all(np.isin(np.asarray(engines)[moved], kept, invert=True))
    for g in np.unique(group[moved]):  # a moved group lands on one engine
        assert np.unique(out[moved & (group == g)]).size == 1
    before = np.bincount(out[~moved], minlength=keep)
    after = np.bincount(out, minlength=keep)
    # water-filling: an engine that received ends at most one group above the least loaded engine
    recv = after > before
    if recv.any():
        assert after[recv].max() <= after.min() + gsize


@settings(max_examples=40, deadline=None)
@given(st.lists(st.tuples(st.floats(0, 100), st.floats(0.1, 50)), min_size=1, max_size=20), st.floats(0.5, 5), st.floats(0, 30))
def test_fluid_queue_matches_a_first_come_first_served_recursion(items, rate, ready):
    items = sorted(items)
    a = np.array([x for x, _ in items])
    w = np.array([y for _, y in items])
    c = _fluid_after(a, w, np.array([rate]), np.array([ready]))[0]
    t = ready
    for i in range(a.size):
        t = max(t, a[i]) + w[i] / rate
        assert abs(c[i] - t) <= 1e-9 * max(1.0, t)


def test_residual_draws_stay_above_what_was_generated_and_follow_the_distribution():
    L = np.sort(np.random.default_rng(1).lognormal(7.0, 0.8, 4000)).clip(1, 8000)
    gen = np.array([0.0, 500.0, 3000.0, 7990.0])
    t = _tail([0, 0, 1, 1], [0, 1, 2, 3], generated=gen, lengths=L, draws=200)
    D = residual_draws(t)
    assert D.shape == (200, 4) and np.all(D >= 1.0)
    total = gen[None, :] + D
    assert np.all(total[:, 1:] > gen[None, 1:])
    # the mean residual of a fresh request is the distribution's mean (within sampling error)
    assert abs(D[:, 0].mean() - L.mean()) < 0.15 * L.mean()


def test_difficulty_posterior_reads_the_siblings():
    """A group whose open samples have generated much is likely hard; one whose finished siblings were short, easy."""
    base = np.sort(np.random.default_rng(2).lognormal(6.5, 0.6, 2000))
    t = _tail([0, 0, 1, 1], [0, 0, 1, 1], generated=[3000.0, 2500.0, 50.0, 60.0], lengths=base, base_lengths=base, spread=0.5,
              max_tokens=16000.0, done_group=np.array([1, 1, 1]), done_length=np.array([150.0, 200.0, 120.0]))
    groups, z, w = group_difficulty_posterior(t)
    ez = w @ z
    assert list(groups) == [0, 1]
    assert ez[0] > 0.5 > -0.5 > ez[1]
    assert np.allclose(w.sum(axis=1), 1.0)


@pytest.mark.parametrize("lengths", [{"kind": "servegen", "client": "66", "scale": 1.0},
                                     {"kind": "lognormal", "median_tokens": 900.0, "sigma": 1.2}])
def test_the_keep_prediction_follows_a_static_simulation(lengths):
    """Mid-rollout, the predicted end of the iteration's training if nothing moves, against the static run of the
    same job on the same seed from that instant (the simulator's own draws are never read by the prediction)."""
    from dataclasses import replace

    from estimators.lengths import LengthDistribution
    from planner.instances.completion import CompletionPlannerDecision
    from simulator.job import JobSim
    from simulator.policies import Policy
    from tests.simulator.test_sim_job import small_setup

    setup = small_setup(n_prompts=48, group=8, max_tokens=8192, gpn=8)
    setup = replace(setup, workload=replace(setup.workload, lengths=LengthDistribution(**lengths)))
    dec = CompletionPlannerDecision(choose_start=False, margin=0.999, log_every_s=5.0)
    dec.setup = setup
    dec.detector.min_done = 2.0  # never fires: only the logged keep predictions are computed
    res = JobSim(setup, Policy("dynamic", decision=dec), seed=3, iterations=1).run()
    it = res.iterations[0]
    logs = [r for r in dec.keep_log if r["time_s"] >= 0.3 * (it.rollout_end_s - it.start_s)]
    assert len(logs) >= 3, f"too few keep predictions logged in the rollout's second part: {dec.keep_log}"
    errs = [abs((r["time_s"] + r["keep_s"]) / (it.end_s - it.start_s) - 1.0) for r in logs]
    assert float(np.median(errs)) < 0.10, errs


def test_one_request_alone_ends_after_its_own_steps():
    m = tiny_engine_model()
    t = _tail([0], [0])
    lay = reassign(t, 1)
    end = end_times(t, np.array([100.0]), lay, m.a_ms, m.b_ms, m.c_ms)
    ref = token_tick_reference([100], 100, m, 64)[0]
    assert abs(end[0] - ref) <= 2 * (m.a_ms + m.b_ms + m.c_ms * 300) / 1e3
