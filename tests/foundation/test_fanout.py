"""Phase-time estimates side by side (planner.instances.fanout): the same numbers as in process,
never forked beside another thread, and a failing job's own error."""

from __future__ import annotations

import threading

import pytest

from planner.instances import fanout
from planner.instances.placement import compile_scenario
from planner.schema import load_scenario
from tests.conftest import SCENARIOS


def _own_threads(monkeypatch):
    """Count only the threads started after now: a test run before these in the same process may leave
    an idle one (a finished test client's), which is not what these tests are about."""
    base = threading.active_count()
    monkeypatch.setattr(fanout, "_threads", lambda: 1 + max(0, threading.active_count() - base))


@pytest.fixture
def two_workers(monkeypatch):
    monkeypatch.setenv("RL_PLANNER_WORKERS", "2")
    monkeypatch.setattr(fanout, "usable_cpus", lambda: 2)
    _own_threads(monkeypatch)


def test_parallel_compile_gives_the_serial_instance(two_workers):
    sc = load_scenario(SCENARIOS / "weave-micro.yaml")
    assert len(sc.jobs) >= fanout.MIN_JOBS and fanout.planned_workers(len(sc.jobs)) == 2
    seen = []
    par = compile_scenario(sc, "conservative", parallel=True, on_job=lambda k, n, name: seen.append((k, n, name)))
    ser = compile_scenario(sc, "conservative")
    assert par.model_dump() == ser.model_dump()
    assert [k for k, _, _ in seen] == list(range(len(sc.jobs))) and {name for _, _, name in seen} == {j.name for j in sc.jobs}


def test_no_fork_beside_another_thread_or_for_few_jobs(two_workers):
    assert fanout.planned_workers(fanout.MIN_JOBS - 1) == 1
    stop = threading.Event()
    t = threading.Thread(target=stop.wait, daemon=True)
    t.start()
    try:
        assert fanout.planned_workers(100) == 1
    finally:
        stop.set()
        t.join(timeout=30)
    assert fanout.planned_workers(100) == 2


@pytest.mark.parametrize("value,expected", [("1", 1), ("0", 1), ("x", 1), ("8", 2)])
def test_the_worker_cap(monkeypatch, value, expected):
    monkeypatch.setenv("RL_PLANNER_WORKERS", value)
    monkeypatch.setattr(fanout, "usable_cpus", lambda: 2)
    _own_threads(monkeypatch)
    assert fanout.planned_workers(100) == expected


class Boom(ValueError):
    pass


def _square_or_fail(x):
    if x == 3:
        raise Boom(f"item {x} is bad")
    return x * x


def test_results_in_order_and_a_failing_item_raises_its_own_error(two_workers):
    assert fanout.map_jobs(_square_or_fail, [0, 1, 2, 4, 5, 6]) == [0, 1, 4, 16, 25, 36]
    with pytest.raises(Boom, match="item 3 is bad"):
        fanout.map_jobs(_square_or_fail, [0, 1, 2, 3, 4])


def test_jobs_of_one_spec_are_estimated_in_one_process(two_workers, monkeypatch):
    """Jobs alike but for name, arrival and SLO share every simulated iteration (memoised per process):
    the fan-out hands them to one worker together (weave-like-60: 60 jobs, 18 specs; the compile's CPU
    time 17 -> 10.6 s on two workers), and the instance is the serial one."""
    sc = load_scenario(SCENARIOS / "weave-micro.yaml")
    twins = [j.model_copy(update={"name": f"{j.name}-twin", "arrival_s": j.arrival_s + 60.0}) for j in sc.jobs[:2]]
    sc = sc.model_copy(update={"jobs": [twins[1], *sc.jobs, twins[0]]})
    handed = []
    real = fanout.map_jobs
    monkeypatch.setattr(fanout, "map_jobs", lambda fn, items, on_done=None: handed.append(list(items)) or real(fn, items, on_done))
    par = compile_scenario(sc, "conservative", parallel=True)
    assert len(handed) == 1 and len(handed[0]) == len(sc.jobs) - 2
    together = [g for g in handed[0] if len(g) == 2]
    assert sorted(sorted(sc.jobs[k].name for k in g) for g in together) == sorted(
        sorted([t.name, t.name.removesuffix("-twin")]) for t in twins)
    assert par.model_dump() == compile_scenario(sc, "conservative").model_dump()
