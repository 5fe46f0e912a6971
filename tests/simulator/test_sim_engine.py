"""The engine's closed-form event stepping against a token-by-token reference, and its KV/cache rules."""

from __future__ import annotations


import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from simulator.core import EventLoop
from simulator.engine import RolloutEngine
from simulator.rollout import EngineSlot, RolloutStage
from simulator.workload import Request
from tests.simulator.conftest import tiny_engine_model


def _req(rid, tokens, prompt=100, group=None, turns=None, tool=None, obs=0):
    turns = turns or [tokens]
    return Request(rid=rid, group=rid if group is None else group, prompt_tokens=prompt, turn_tokens=list(turns),
                   tool_s=list(tool or [0.0] * (len(turns) - 1)), observation_tokens=obs)


def token_tick_reference(lengths, prompt, model, max_running):
    """Step-by-step continuous batching (one loop iteration per decode step): completion times (s)."""
    queue = list(range(len(lengths)))
    running = {}  # idx -> generated
    t_ms = 0.0
    done = {}
    while queue or running:
        while queue and len(running) < max_running:
            running[queue.pop(0)] = 0
        b = len(running)
        kv = sum(prompt + g for g in running.values())
        t_ms += model.a_ms + model.b_ms * b + model.c_ms * kv
        for i in list(running):
            running[i] += 1
            if running[i] >= lengths[i]:
                done[i] = t_ms / 1e3
                del running[i]
    return done


@settings(max_examples=25, deadline=None)
@given(st.lists(st.integers(1, 400), min_size=1, max_size=40), st.integers(1, 12))
def test_closed_form_matches_token_ticks(lengths, max_running):
    m = tiny_engine_model(max_running=max_running)
    loop = EventLoop(0)
    done = {}
    e = RolloutEngine(0, loop, m, on_turn_done=lambda eng, r: done.__setitem__(r.rid, loop.now))
    for i, L in enumerate(lengths):
        e.queue.push(__import__("formulation.realloc.priority", fromlist=["QueuedRequest"]).QueuedRequest(
            str(i), 0.0, payload=_req(i, L)))
    e.kick(0.0)
    loop.run()
    ref = token_tick_reference(lengths, 100, m, max_running)
    assert set(done) == set(ref)
    for i in ref:
        # continuous steps: every completion within one step time of the discrete reference
        step = m.a_ms + m.b_ms * max_running + m.c_ms * max_running * (100 + max(lengths))
        assert abs(done[i] - ref[i]) <= 1.5 * step / 1e3 + 1e-9, (i, done[i], ref[i])


def test_kv_overflow_preempts_and_reprefills():
    m = tiny_engine_model(kv=3_000.0, max_running=16)
    loop = EventLoop(0)
    stage = RolloutStage(loop, m, [EngineSlot("n0", "H100", 1)])
    reqs = [_req(i, 1_000, prompt=100) for i in range(8)]
    stage.start(reqs)
    loop.run()
    e = stage.engines[0]
    assert all(r.finishes == 1 for r in reqs)
    assert e.preemptions > 0
    assert e.reprefill_tokens > 0
    assert e.peak_kv <= m.kv_capacity_tokens + 16  # at most one step of growth past capacity


def test_no_preemption_when_kv_is_ample():
    m = tiny_engine_model(kv=1e9, max_running=16)
    loop = EventLoop(0)
    stage = RolloutStage(loop, m, [EngineSlot("n0", "H100", 1)])
    reqs = [_req(i, 500) for i in range(40)]
    stage.start(reqs)
    loop.run()
    assert stage.engines[0].preemptions == 0
    assert stage.reprefill_tokens() == 0


def test_multi_turn_prefix_cache_reuse_and_eviction():
    """Turn contexts stay cached through the tool call; a small KV evicts them and they are re-prefilled."""
    def run(kv):
        m = tiny_engine_model(kv=kv, max_running=64)
        loop = EventLoop(0)
        stage = RolloutStage(loop, m, [EngineSlot("n0", "H100", 1)])
        reqs = [_req(i, 0, prompt=200, turns=[100, 100, 100], tool=[5.0 + i, 5.0], obs=50) for i in range(30)]
        stage.start(reqs)
        loop.run()
        assert all(r.finishes == 1 and r.turn == 2 for r in reqs)
        return stage.engines[0]

    big = run(1e7)
    assert big.reprefill_tokens == 0
    assert big.cache_hit_tokens > 0
    small = run(6_000)
    assert small.evicted_tokens > 0
    assert small.reprefill_tokens > 0


def test_group_siblings_share_the_prompt_prefill():
    m = tiny_engine_model(kv=1e7, max_running=64)
    loop = EventLoop(0)
    stage = RolloutStage(loop, m, [EngineSlot("n0", "H100", 1)])
    reqs = [_req(i, 50, prompt=300, group=0) for i in range(16)]
    stage.start(reqs)
    loop.run()
    e = stage.engines[0]
    assert e.prefill_tokens == pytest.approx(300)  # one prompt prefill for the whole group
    assert e.cache_hit_tokens == pytest.approx(15 * 300)


def test_drain_moves_requests_once_and_keeps_progress():
    m = tiny_engine_model(kv=1e7, max_running=64)
    loop = EventLoop(0)
    stage = RolloutStage(loop, m, [EngineSlot(f"n{i}", "H100", 1) for i in range(4)])
    reqs = [_req(i, 2_000 if i % 5 == 0 else 100) for i in range(40)]
    stage.start(reqs)
    loop.run(until=2.0)
    moved_before = [r.generated_in_turn for r in reqs]
    freed = stage.drain([1, 2, 3], loop.now)
    assert len(freed) == 3
    loop.run()
    assert all(r.finishes == 1 for r in reqs)
    assert {r.engine for r in reqs if r.done_s > 2.0} <= {0}
    assert stage.reprefill_tokens() > 0
    assert stage.stats.migrated > 0
    assert all(b >= 0 for b in moved_before)


def test_a_finish_closer_than_the_clocks_resolution_still_comes():
    """Late in a long simulated span (1e9 s: hours-long tool calls, a 1e8-second tool latency table) a
    decode step fraction can take less than half the clock's resolution there. Twenty requests start at
    t0, a twenty-first one tick later (about 5e-6 steps behind); when the twenty finish, the last one's
    4.6e-6 steps at b = 1 take 2.7e-8 s, which ``t0 + ...`` rounds away. Before, the engine rescheduled
    itself at ``now`` forever: `planner estimate` and `simulate` hung (an outside audit)."""
    import math

    from formulation.realloc.priority import QueuedRequest

    m = tiny_engine_model(kv=1e9, max_running=64, a=5.0, b=1.0)
    loop = EventLoop(0)
    done = {}
    e = RolloutEngine(0, loop, m, on_turn_done=lambda eng, r: done.__setitem__(r.rid, loop.now))

    def push(rids, now):
        for i in rids:
            e.queue.push(QueuedRequest(str(i), now, payload=_req(i, 100)))
        e.kick(now)

    t0 = 1e9
    t1 = math.nextafter(t0, math.inf)
    loop.at(t0, push, range(20), t0)
    loop.at(t1, push, [20], t1)
    loop.run(max_events=1_000)  # (RuntimeError "not converging" before)
    assert set(done) == set(range(21))
    assert done[20] >= max(done[i] for i in range(20)) and done[20] - t0 == pytest.approx(100 * 0.026, rel=0.2)
