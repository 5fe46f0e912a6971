"""Per-job phase-time estimates side by side, in forked worker processes.

Estimating a job's phase times runs the request-level model (:mod:`simulator.phasetimes`) on every
pool size the job may get: up to seconds a job in the ``sampled`` and quantile estimates (110
distinct jobs, conservative: 9.4 s in one process), and each job's tables depend on that job, its
seed and the pools only. So :func:`map_jobs` hands the jobs to :func:`planned_workers` processes
and gathers the results in job order: the same numbers as one process computes, in a fraction
of the wall time on a machine with CPUs to spare.

Forked only, so the workers start with the parent's imports, memoised samples and anything a test
patched; and only where that is safe:

* never while another thread runs (a fork copies the calling thread and whatever locks the others
  held: the daemon's server, a test's HTTP server);
* never nested: inside a worker of this module or of :mod:`planner.sim.parallel` it runs in
  process;
* ``RL_PLANNER_WORKERS=N`` caps the processes (``1``: in process); by default, the CPUs this
  process may run on.

A job whose estimate fails in a worker is estimated again in the parent, which raises its error
as the serial path does (the same message, exit status 2 for a bad input).
"""

from __future__ import annotations

import os
import threading
from typing import Any, Callable, Optional, Sequence

MIN_JOBS = 4  # fewer jobs: in process (a fork costs ~10 ms, a conservative job's tables ~0.1 s)
_WORK: Optional[tuple[Callable[[Any], Any], Sequence[Any]]] = None  # what the forked workers read


def usable_cpus() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def _threads() -> int:
    """Threads alive in this process (a fork copies only the calling one, with any lock another holds)."""
    return threading.active_count()


def planned_workers(n_jobs: int) -> int:
    """Worker processes for ``n_jobs`` independent estimates (1: in process); see the module docstring."""
    import multiprocessing as mp

    if n_jobs < MIN_JOBS or "fork" not in mp.get_all_start_methods() or mp.parent_process() is not None:
        return 1
    if _threads() > 1:
        return 1
    cap = usable_cpus()
    env = os.environ.get("RL_PLANNER_WORKERS", "").strip()
    if env:
        try:
            cap = min(cap, max(1, int(env)))
        except ValueError:
            cap = 1  # a value that is not a number: the safe reading
    return max(1, min(cap, n_jobs))


def _one(k: int):
    assert _WORK is not None
    fn, items = _WORK
    try:
        return k, True, fn(items[k])
    except Exception:  # noqa: BLE001 - the parent recomputes it and raises the real error
        return k, False, None


def map_jobs(fn: Callable[[Any], Any], items: Sequence[Any], on_done: Optional[Callable[[int, int], None]] = None) -> list:
    """``[fn(x) for x in items]``, in :func:`planned_workers` forked processes when that is safe;
    ``on_done(k, done)`` after item ``k`` is in (``done`` items so far). ``fn`` must be a function
    of its item alone (no state it changes), as the estimates are."""
    global _WORK
    n = len(items)
    workers = planned_workers(n)
    out: list = [None] * n
    if workers == 1:
        for k, x in enumerate(items):
            out[k] = fn(x)
            if on_done is not None:
                on_done(k, k + 1)
        return out
    import multiprocessing as mp
    from concurrent.futures import ProcessPoolExecutor

    failed: list[int] = []
    _WORK = (fn, items)
    try:
        with ProcessPoolExecutor(max_workers=workers, mp_context=mp.get_context("fork")) as pool:
            for done, (k, ok, res) in enumerate(pool.map(_one, range(n)), 1):
                if ok:
                    out[k] = res
                else:
                    failed.append(k)
                if on_done is not None:
                    on_done(k, done)
    finally:
        _WORK = None
    for k in failed:  # the serial path's error (or, if it was the worker's own trouble, the value)
        out[k] = fn(items[k])
    return out
