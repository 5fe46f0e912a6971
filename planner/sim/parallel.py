"""Independent simulations side by side: local worker processes, or Ray tasks.

A :class:`Task` names a module-level function (``fn`` in the registry passed to :func:`run_tasks`)
and its keyword arguments (plain JSON data), so it can run in a forked worker or as a Ray task;
its result is JSON data too, normalised by a JSON round trip so that a result computed here and
one read back from a committed file compare alike. Each task's wall time is measured where it runs.

* local (default): ``concurrent.futures.ProcessPoolExecutor`` (forked) with ``workers`` processes,
  the longest tasks first (by a hint, e.g. their wall time last run); ``workers=1`` runs in process;
* Ray: ``ray_address`` (``local`` starts a cluster here), through the what-if runner's session
  (:func:`planner.whatif.run.ray_session`): one Ray task per simulation, one CPU each.
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass, field
from typing import Callable, Optional


@dataclass(frozen=True)
class Task:
    fn: str
    kwargs: dict = field(default_factory=dict)

    @property
    def key(self) -> str:
        args = ", ".join(f"{k}={json.dumps(v, sort_keys=True)}" for k, v in sorted(self.kwargs.items()))
        return f"{self.fn}({args})"


def normalise(obj):
    """``obj`` as it reads back from JSON (tuples become lists, numpy scalars numbers, keys strings)."""
    return json.loads(json.dumps(obj, default=_plain, sort_keys=True))


def _plain(x):
    import numpy as np

    if isinstance(x, (np.floating, np.integer)):
        return x.item()
    if isinstance(x, np.ndarray):
        return x.tolist()
    if isinstance(x, tuple):
        return list(x)
    return str(x)


def execute(registry: dict, task: Task) -> tuple[str, object, float]:
    t0 = time.perf_counter()
    res = registry[task.fn](**task.kwargs)
    return task.key, normalise(res), time.perf_counter() - t0


def run_tasks(registry: dict, tasks: list[Task], workers: Optional[int] = None, ray_address: Optional[str] = None,
              hint_s: Optional[dict] = None, on_done: Optional[Callable[[str, float], None]] = None, log=None) -> dict:
    """Run every task (duplicates once); ``{key: {"result": ..., "wall_s": ...}}``. ``log`` (a text
    file) receives each result as a JSON line as soon as it is in."""
    uniq: dict[str, Task] = {}
    for t in tasks:
        uniq.setdefault(t.key, t)
    hint_s = hint_s or {}
    order = sorted(uniq.values(), key=lambda t: -float(hint_s.get(t.key, 1e9)))  # unknown cost first, then longest
    out: dict = {}

    def done(key, res, wall):
        out[key] = {"result": res, "wall_s": wall}
        if log is not None:
            log.write(json.dumps({"key": key, "result": res, "wall_s": wall}) + "\n")
            log.flush()
        if on_done:
            on_done(key, wall)

    if ray_address:
        _run_ray(registry, order, workers, ray_address, done)
        return out
    workers = max(1, min(workers or os.cpu_count() or 1, len(order)))
    if workers == 1:
        for t in order:
            done(*execute(registry, t))
        return out
    import multiprocessing as mp
    from concurrent.futures import ProcessPoolExecutor, as_completed

    method = "fork" if "fork" in mp.get_all_start_methods() else "spawn"
    with ProcessPoolExecutor(max_workers=workers, mp_context=mp.get_context(method)) as pool:
        futs = [pool.submit(execute, registry, t) for t in order]
        for f in as_completed(futs):
            done(*f.result())
    return out


def _run_ray(registry, order, workers, address, done) -> None:
    from planner.whatif.run import ray_session

    with ray_session(address, workers) as ray:
        remote = ray.remote(num_cpus=1)(execute)
        reg = ray.put(registry)
        pending = [remote.remote(reg, t) for t in order]
        while pending:
            ready, pending = ray.wait(pending, num_returns=1)
            done(*ray.get(ready[0]))
