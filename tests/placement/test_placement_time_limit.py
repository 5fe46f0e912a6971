"""Time limits are wall-clock limits the caller can rely on, and an early stop still returns a plan."""

from __future__ import annotations

import time

import pytest

from formulation.common import SolveOptions
from formulation.placement.check import check
from benchmarks.placement.generate import generate, templates_from
from planner.instances.placement import load_instance
from tests.conftest import SCENARIOS

TRACE = SCENARIOS / "instances" / "weave-trace-60.yaml"


def _slowdown() -> float:
    """How many wall seconds a CPU second of this thread takes now: 1 on an idle machine, about 2
    when other processes keep every core busy (a short busy loop, wall time over thread CPU time)."""
    w0, c0 = time.perf_counter(), time.thread_time()
    x = 0
    for i in range(1_000_000):
        x += i
    return max(1.0, (time.perf_counter() - w0) / max(time.thread_time() - c0, 1e-3))


@pytest.mark.parametrize("backend, jobs, limit", [("colgen", 400, 2.0), ("highs", 60, 1.5), ("cpsat", 60, 1.5), ("fast", -800, 1.0),
                                                  ("auto", -300, 3.0)])
def test_solve_returns_within_its_limit_with_a_checked_plan(backend, jobs, limit):
    from benchmarks.placement.generate import generate_distinct
    from formulation.placement.solve import solve

    # jobs < 0: that many distinct jobs (generate_distinct)
    inst = generate(jobs, 3, templates_from(load_instance(TRACE))) if jobs > 0 else generate_distinct(-jobs, 3)
    slow = _slowdown()
    t0 = time.perf_counter()
    res = solve(inst, SolveOptions(time_limit_s=limit), backend)
    wall = time.perf_counter() - t0
    slow = max(slow, _slowdown())
    # the limit covers the solve; building the plan document (cycle times per group) comes on top.
    # The margin is wide because the machine is shared (the benchmark measures the real overrun)
    # and scales with how much other processes slow this one down now (1 on an idle machine, so
    # the bound is then 2 x limit + 2 s); what this catches is a solve that ignores its limit
    # (before the build guard: 7 s for 1.5 s).
    allowed = limit + (limit + 2.0) * slow
    assert wall <= allowed, f"{backend} took {wall:.2f} s under a {limit} s limit (allowed {allowed:.2f} s at slowdown {slow:.2f})"
    assert res.plan.groups and check(inst, res.plan) == []
    if jobs < 0:  # the fast path reports a bound whenever it places every job that fits alone
        assert res.record.best_bound is not None or any(u.reason == "capacity" for u in res.plan.unplaced)
    if res.record.best_bound is not None:
        assert res.record.best_bound <= res.record.objective + 1e-6
    assert res.record.status.value in ("optimal", "feasible")


def test_the_watchdog_interrupts_highs_before_its_own_limit():
    # a market-split feasibility problem (4 equalities over 30 binaries): far beyond 0.3 s for
    # HiGHS, so the run ends by the watchdog (status), not by HiGHS's own 20 s limit
    import highspy
    import numpy as np

    from formulation.placement.master import Watchdog, new_highs

    rng = np.random.default_rng(0)
    m, n = 4, 30
    a = rng.integers(0, 100, (m, n)).astype(float)
    b = np.floor(a.sum(axis=1) / 2)
    h = new_highs()
    h.addVars(n, np.zeros(n), np.ones(n))
    h.changeColsIntegrality(n, np.arange(n, dtype=np.int32), np.ones(n, dtype=np.uint8))
    for i in range(m):
        h.addRow(b[i], b[i], n, np.arange(n, dtype=np.int32), a[i])
    h.setOptionValue("time_limit", 20.0)
    with Watchdog(h, time.perf_counter() + 0.3) as wd:
        h.run()
    assert wd.fired
    assert h.getModelStatus() == highspy.HighsModelStatus.kInterrupt
    # the next run on the same model is not interrupted by the last one's watchdog
    h.setOptionValue("time_limit", 0.2)
    h.run()
    assert h.getModelStatus() == highspy.HighsModelStatus.kTimeLimit
