"""Request priority: ordering, the age bound (property test), FIFO baseline."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from formulation.realloc.priority import FifoQueue, PriorityQueue, QueuedRequest, make_queue


def test_late_turns_with_cache_go_first():
    q = PriorityQueue(max_wait_s=100)
    q.push(QueuedRequest("fresh", 0.0, 0, 0))
    q.push(QueuedRequest("turn3", 1.0, 2, 4096))
    q.push(QueuedRequest("turn3-small-cache", 1.0, 2, 512))
    q.push(QueuedRequest("turn2", 0.5, 1, 8192))
    assert [q.pop(2.0).request_id for _ in range(4)] == ["turn3", "turn3-small-cache", "turn2", "fresh"]


def test_overdue_request_jumps_the_queue():
    q = PriorityQueue(max_wait_s=10)
    q.push(QueuedRequest("fresh", 0.0))
    for i in range(5):
        q.push(QueuedRequest(f"late{i}", 5.0 + i, tool_calls_done=3))
    assert q.pop(9.0).request_id == "late0"  # fresh has waited 9 s < 10 s
    assert q.pop(10.0).request_id == "fresh"  # now overdue
    assert q.overdue(10.0) == 0


def test_remove_and_fifo():
    q = PriorityQueue(max_wait_s=10)
    q.push(QueuedRequest("a", 0.0, 1))
    q.push(QueuedRequest("b", 1.0, 2))
    assert q.remove("b").request_id == "b" and "b" not in q
    assert q.pop(1.0).request_id == "a" and q.pop(1.0) is None
    f = make_queue("fifo")
    for i, t in enumerate([3.0, 1.0, 2.0]):
        f.push(QueuedRequest(str(i), t, tool_calls_done=i))
    assert [f.pop(5.0).request_id for _ in range(3)] == ["1", "2", "0"]
    assert isinstance(f, FifoQueue)


ops = st.lists(
    st.tuples(st.sampled_from(["push", "pop"]), st.floats(0, 5), st.integers(0, 4), st.integers(0, 10_000)),
    min_size=1, max_size=200,
)


@settings(max_examples=200, deadline=None)
@given(ops=ops, bound=st.floats(0.5, 20))
def test_no_request_waits_beyond_its_bound_while_a_later_one_is_served(ops, bound):
    """At every pop: if some waiting request is overdue, the oldest overdue one is served; and a
    request is never served ahead of an overdue request that entered earlier."""
    q = PriorityQueue(max_wait_s=bound)
    waiting: dict[str, float] = {}
    now = 0.0
    for i, (op, dt, tools, prefix) in enumerate(ops):
        now += dt
        if op == "push":
            q.push(QueuedRequest(f"r{i}", now, tools, prefix))
            waiting[f"r{i}"] = now
        else:
            got = q.pop(now)
            if not waiting:
                assert got is None
                continue
            # the oldest overdue, ties in arrival order (r10 after r2: not the ids' string order)
            overdue = sorted((t, int(rid[1:]), rid) for rid, t in waiting.items() if now - t >= bound)
            if overdue:
                assert got.request_id == overdue[0][2]
            assert got.request_id in waiting
            del waiting[got.request_id]
    assert len(q) == len(waiting)


@settings(max_examples=100, deadline=None)
@given(gaps=st.lists(st.tuples(st.floats(0, 2), st.integers(0, 5), st.integers(0, 4096)), min_size=1, max_size=100),
       bound=st.floats(1, 10))
def test_wait_bounded_with_steady_service(gaps, bound):
    """One pop per second: a request waits at most the bound plus one second per request that
    entered before it and was still waiting when it became overdue (FIFO among overdue)."""
    arrivals, t = [], 0.0
    for i, (dt, tools, prefix) in enumerate(gaps):
        t += dt
        arrivals.append((t, f"r{i}", tools, prefix))
    q = PriorityQueue(max_wait_s=bound)
    now, k, served = 0.0, 0, {}
    while k < len(arrivals) or len(q):
        now += 1.0
        while k < len(arrivals) and arrivals[k][0] <= now:
            at, rid, tools, prefix = arrivals[k]
            q.push(QueuedRequest(rid, at, tools, prefix))
            k += 1
        r = q.pop(now)
        if r is not None:
            served[r.request_id] = now
    for rank, (at, rid, _, _) in enumerate(arrivals):
        assert served[rid] - at <= bound + rank + 1.0 + 1e-9
