"""The completion-time reallocation model: every candidate owns every GPU, and the decision is the exhaustive
checker's optimum (checked one allocation at a time, not with the vectorised search it checks)."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from formulation.realloc.completion import CompletionState, candidates, check, decide, predict


def state(G=32, cur=(16, 6, 10), unit_r=1, unit_t=2, n_left=200.0, rem_tokens=4e5, rem_max=9000.0, busiest=30.0, grow=5.0,
          tr_to_come=2000.0, groups_left=40.0):
    return CompletionState(gpus=G, current=cur, unit_r=unit_r, unit_t=unit_t, n_left=n_left, rem_tokens=rem_tokens,
                           rem_max=rem_max, ctx_tokens=8000.0, busiest_batch=busiest, busiest_ctx=9000.0, a_ms=8.5,
                           b_ms=0.0065, c_ms=2e-5, batch_cap=1024.0, kv_tokens=9e5, ref_queued=1e15, ref_per_sample=4e14,
                           ref_rate=3e14, tr_queued=5e15, tr_to_come=tr_to_come, tr_per_sample=1.2e15, tr_rate=2.5e14, group=16,
                           groups_left=groups_left, grow_s={"rollout": 3.0, "reference": grow, "trainer": grow},
                           opt_s=lambda t: 0.05 + 0.0 * np.asarray(t, dtype=float),
                           sync_s=lambda r, t: 0.1 + 0.0 * np.asarray(r, dtype=float))


def test_every_candidate_owns_every_gpu_on_the_units():
    s = state(G=64, cur=(34, 12, 18), unit_r=2, unit_t=4)
    R, F, T = candidates(s)
    assert len(R) > 0
    assert np.all(R + F + T == 64) and np.all(R % 2 == 0) and np.all(T % 4 == 0) and np.all(F >= 1)


@settings(max_examples=25, deadline=None)
@given(n_left=st.floats(0, 3000), rem_max=st.floats(1, 28000), busiest=st.floats(0, 300), grow=st.floats(0, 60),
       tr_to_come=st.floats(0, 8000), groups_left=st.floats(0, 500), r=st.integers(1, 20), t=st.integers(1, 5))
def test_decision_is_the_exhaustive_optimum(n_left, rem_max, busiest, grow, tr_to_come, groups_left, r, t):
    cur = (r, 32 - r - 2 * t, 2 * t)
    if cur[1] < 1:
        return
    s = state(cur=cur, n_left=n_left, rem_tokens=n_left * rem_max / 3, rem_max=rem_max, busiest=busiest, grow=grow,
              tr_to_come=tr_to_come, groups_left=groups_left)
    d = decide(s, margin=0.05, migration_s=2.0, max_rollout=cur[0])
    assert check(s, d, margin=0.05, migration_s=2.0, max_rollout=cur[0]) == []
    assert d.target[0] <= cur[0]  # a donor rollout only gives
    if d.committed:
        assert d.completion_s < 0.95 * d.completion_keep_s
    else:
        assert d.target == cur


def test_checker_rejects_a_worse_committed_choice():
    s = state()
    d = decide(s, margin=0.0)
    assert d.committed
    from dataclasses import replace

    worst = max(zip(*candidates(s)), key=lambda a: float(predict(s, *[np.array([v]) for v in a])["completion_s"][0]))
    bad = replace(d, target=tuple(int(v) for v in worst))
    assert check(s, bad, margin=0.0)


def test_the_tail_predicts_a_shorter_end_with_the_rollouts_gpus_downstream():
    """In the tail (few requests left, training work queued) moving rollout GPUs to the trainer shortens the end."""
    s = state(cur=(24, 4, 4), n_left=20.0, rem_tokens=20 * 3000.0, rem_max=6000.0, busiest=4.0, tr_to_come=300.0, groups_left=5.0)
    d = decide(s, margin=0.05, max_rollout=24)
    assert d.committed and d.target[0] < 24 and d.target[2] > 4


def test_fluid_at_group_ends_is_a_close_lower_bound_of_the_fluid_queue():
    """:func:`_fluid_at` (finish times at each group's last response, the running maximum over the first and last
    arrival of each segment) against :func:`_fluid_after` (every arrival): never later, exact when every segment
    holds at most two arrivals."""
    from formulation.realloc.completion import _fluid_after, _fluid_at

    rng = np.random.default_rng(3)
    for _ in range(100):
        n = int(rng.integers(1, 200))
        arrive = np.sort(rng.uniform(0.0, 50.0, n))
        work = rng.exponential(1.0, n)
        rate, ready = rng.uniform(0.05, 5.0, 5), rng.uniform(0.0, 30.0, 5)
        group = rng.integers(0, max(1, n // 6), n)
        last = np.full(group.max() + 1, -1)
        np.maximum.at(last, group, np.arange(n))
        at = np.sort(last[last >= 0])
        exact = _fluid_after(arrive, work, rate, ready)[:, at]
        assert np.all(_fluid_at(arrive, work, at, rate, ready) <= exact + 1e-9)
        at2 = np.unique(np.concatenate([np.arange(1, n, 2), [n - 1]]))  # segments of at most two arrivals
        assert np.allclose(_fluid_at(arrive, work, at2, rate, ready), _fluid_after(arrive, work, rate, ready)[:, at2])
