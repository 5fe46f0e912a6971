"""Solving the points of a what-if sweep: one point, and many in parallel.

A point is solved by :func:`evaluate`: the forecast compiled for its values (cached per worker:
only a ``response`` value needs the estimators again), each requested deployment style solved,
the co-execution solve warm-started from the neighbouring point's groups and column patterns.

The points are split into ``W`` contiguous *chains* (one per worker) in sweep order; inside a
chain each point waits for the one before and starts from its result, and the chains run side by
side: on local worker processes (``concurrent.futures``, forked) by default, or as Ray tasks on
the cluster at ``--ray-address`` (each task receives the previous task's result as an object
reference, so Ray runs a chain in order and the chains in parallel). ``on_done`` is called in
the main process as each point finishes (the progress bar).
"""

from __future__ import annotations

import logging
import os
import socket
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Callable, Optional

from formulation.capacity.solve import Warm

if TYPE_CHECKING:
    from formulation.capacity.result import StyleResult
    from formulation.common import SolveRecord
    from planner.schema.scenario import Scenario


@dataclass
class Context:
    """What every point needs: the scenario (max_nodes at the sweep's largest), how to solve."""

    scenario: Scenario
    mode: str
    styles: tuple[str, ...]
    time_limit_s: float
    mip_gap: float
    threads: int = 1
    first_factor: float = 2.0  # a chain's first point starts cold: this many times the time limit
    polish_radius: int = 10  # after the chains, each point tries the groups of the points this close on both sides
    #: the types the user's scenario buys without limit (no max_nodes, none swept): ``scenario`` holds a
    #: bound for the largest job mix on them (:func:`planner.whatif.sweep.compile_limits`), no limit to report
    unlimited: tuple[str, ...] = ()


@dataclass
class StyleSummary:
    style: str
    status: str
    served: bool
    cost_per_hour: Optional[float]
    lower_bound_per_hour: Optional[float]
    new_cost_per_hour: Optional[float]
    fleet: dict[str, int]
    used: dict[str, int]
    busy: dict[str, float]
    gpus: int
    unplaced: list[str]
    binding: list[str]
    note: str
    wall_s: float


@dataclass
class PointResult:
    index: int
    values: dict[str, float]
    styles: list[StyleSummary]
    plan: dict  # the co-execution CapacityPlan body (JSON data)
    record: dict  # its solve record
    warm: Optional[Warm] = None
    compile_s: float = 0.0
    wall_s: float = 0.0
    worker: str = ""
    jobs: int = 0
    extra: dict = field(default_factory=dict)

    def style(self, name: str) -> Optional[StyleSummary]:
        return next((s for s in self.styles if s.style == name), None)


_COMPILED: dict = {}


def _instance(ctx: Context, values: dict[str, float]):
    from planner.instances.capacity import compile_capacity
    from planner.plandoc import scenario_digest
    from planner.whatif.sweep import instance_for, scenario_for

    sc = scenario_for(ctx.scenario, values)
    key = (scenario_digest(sc), ctx.mode)
    t0 = time.perf_counter()
    base = _COMPILED.get(key)
    if base is None:
        base = compile_capacity(sc, ctx.mode)
        if ctx.unlimited:
            base = base.model_copy(update={"unlimited": sorted(set(base.unlimited) | (set(ctx.unlimited) & set(base.types)))})
        _COMPILED[key] = base
        if len(_COMPILED) > 8:
            _COMPILED.pop(next(iter(_COMPILED)))
    return instance_for(base, values), time.perf_counter() - t0


def _record(res: StyleResult) -> SolveRecord:
    """The solve record of a style's result (:func:`formulation.capacity.solve.solve` always sets one)."""
    if res.record is None:
        raise RuntimeError(f"the {res.style} solve returned no solve record")
    return res.record


def _summarise(inst, res: StyleResult):
    """(StyleSummary, plan body) of one style's result."""
    from formulation.capacity.explain import binding
    from formulation.capacity.plan import build_capacity_plan

    body = build_capacity_plan(inst, res)
    binds = binding(inst, res, body) if res.served else []
    body.binding = binds
    summary = StyleSummary(
        style=res.style, status=res.status.value, served=res.served,
        cost_per_hour=res.cost_per_hour if res.served else None, lower_bound_per_hour=res.lower_bound,
        new_cost_per_hour=res.cost_per_hour - inst.owned_cost() if res.served else None,
        fleet=dict(res.fleet), used=dict(res.used), busy={f.gpu_type: f.busy for f in body.fleet}, gpus=body.gpus(),
        unplaced=[u.job for u in body.unplaced], binding=[f"{b.kind}:{b.where}" for b in binds],
        note=res.note or (body.unplaced[0].message if body.unplaced else ""), wall_s=_record(res).wall_time_s)
    return summary, body


def _options(ctx: Context, first: bool = False):
    from formulation.common import SolveOptions

    return SolveOptions(time_limit_s=ctx.time_limit_s * (ctx.first_factor if first else 1.0), mip_gap=ctx.mip_gap, threads=ctx.threads)


def evaluate(ctx: Context, index: int, values: dict[str, float], warm: Optional[Warm] = None):
    """Solve one point in every requested style (a chain's first point, with no warm start, gets
    ``ctx.first_factor`` times the time limit)."""
    from formulation.capacity.solve import solve

    t0 = time.perf_counter()
    inst, compile_s = _instance(ctx, values)
    opts = _options(ctx, first=warm is None)
    styles: list[StyleSummary] = []
    plan: dict = {}
    record: dict = {}
    out_warm: Optional[Warm] = None
    for style in ctx.styles:
        res = solve(inst, opts, style, warm if style == "co-execution" else None)
        summary, body = _summarise(inst, res)
        styles.append(summary)
        if style == "co-execution":
            plan, record, out_warm = body.model_dump(mode="json"), _record(res).as_dict(), res.warm
    return PointResult(index, dict(values), styles, plan, record, out_warm, compile_s, time.perf_counter() - t0,
                       f"{socket.gethostname()}:{os.getpid()}", len(inst.placement.jobs))


def polish(ctx: Context, r: PointResult, candidates: list) -> Optional[PointResult]:
    """``r`` with its co-execution answer replaced by a neighbour's groups where those are cheaper here."""
    from formulation.capacity.warm import improve

    co = r.style("co-execution")
    if co is None or not candidates:
        return None
    inst, _ = _instance(ctx, r.values)
    better = improve(inst, co.cost_per_hour, co.lower_bound_per_hour, r.record.get("message", ""), candidates, _options(ctx))
    if better is None:
        return None
    rec = _record(better)
    rec.wall_time_s = r.record.get("wall_time_s", 0.0)
    rec.time_limit_s = r.record.get("time_limit_s")
    summary, body = _summarise(inst, better)
    summary.wall_s = co.wall_s
    styles = [summary if s.style == "co-execution" else s for s in r.styles]
    return PointResult(r.index, r.values, styles, body.model_dump(mode="json"), rec.as_dict(), better.warm, r.compile_s,
                       r.wall_s, r.worker, r.jobs, {"polished_from": rec.warm_start})


def neighbours(results: list, i: int, radius: int) -> list:
    return [(f"point {j}", results[j].warm) for j in range(max(0, i - radius), min(len(results), i + radius + 1))
            if j != i and results[j] is not None and results[j].warm is not None]


def chains(n_points: int, workers: int) -> list[list[int]]:
    """Point indices split into ``workers`` contiguous chains of near-equal length."""
    w = max(1, min(workers, n_points))
    base, extra = divmod(n_points, w)
    out, start = [], 0
    for i in range(w):
        size = base + (1 if i < extra else 0)
        out.append(list(range(start, start + size)))
        start += size
    return out


def _solved(results: list[Optional[PointResult]]) -> list[PointResult]:
    """The results once every point has one (the chains solve every point before the polish)."""
    missing = [i for i, r in enumerate(results) if r is None]
    if missing:
        raise RuntimeError(f"what-if points {missing} were never solved")
    return [r for r in results if r is not None]


def _apply_polish(results: list[PointResult], polished: list[Optional[PointResult]]) -> list[PointResult]:
    for new in polished:
        if new is not None:
            results[new.index] = new
    return results


def run_local(ctx: Context, points: list[dict], workers: int, on_done: Callable[[PointResult], None]) -> list[PointResult]:
    results: list[Optional[PointResult]] = [None] * len(points)
    if workers <= 1 or len(points) == 1:
        warm = None
        for i, values in enumerate(points):
            res = evaluate(ctx, i, values, warm)
            warm = res.warm
            results[i] = res
            on_done(res)
        solved = _solved(results)
        return _apply_polish(solved, [polish(ctx, r, neighbours(solved, r.index, ctx.polish_radius)) for r in list(solved)])
    import multiprocessing as mp
    from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait

    method = "fork" if "fork" in mp.get_all_start_methods() else "spawn"
    todo = chains(len(points), workers)
    with ProcessPoolExecutor(max_workers=len(todo), mp_context=mp.get_context(method)) as pool:
        running = {}
        for c, chain in enumerate(todo):
            running[pool.submit(evaluate, ctx, chain[0], points[chain[0]], None)] = (c, 0)
        while running:
            done, _ = wait(list(running), return_when=FIRST_COMPLETED)
            for fut in done:
                c, pos = running.pop(fut)
                res = fut.result()
                results[res.index] = res
                on_done(res)
                if pos + 1 < len(todo[c]):
                    i = todo[c][pos + 1]
                    running[pool.submit(evaluate, ctx, i, points[i], res.warm)] = (c, pos + 1)
        solved = _solved(results)
        futs = [pool.submit(polish, ctx, r, neighbours(solved, r.index, ctx.polish_radius)) for r in list(solved)]
        return _apply_polish(solved, [f.result() for f in futs])


def _reachable(address: str, timeout_s: float = 5.0) -> None:
    """An address of a cluster (``HOST:PORT`` or ``ray://HOST:PORT``) that nothing answers on fails
    within ``timeout_s``, exit 2 (``ray.init`` alone keeps retrying for a minute and more)."""
    import socket

    from planner.errors import Problem, UserError

    if address in ("local", "auto", ""):
        return
    hostport = address.split("://", 1)[-1].split("/", 1)[0]
    host, sep, port = hostport.rpartition(":")
    if not sep or not port.isdigit():
        raise UserError(Problem("--ray-address", f"'{address}' is not HOST:PORT",
                                "pass the head node's address, e.g. 10.0.0.1:6379, or 'local' to start a cluster here"))
    try:
        with socket.create_connection((host.strip("[]") or "127.0.0.1", int(port)), timeout=timeout_s):
            pass
    except (OSError, ValueError) as exc:
        raise UserError(Problem("--ray-address", f"nothing answers at {address} ({exc})",
                                "start a cluster there (ray start --head) or pass its right address, or 'local' to start one here")) from None


def run_ray(ctx: Context, points: list[dict], workers: Optional[int], address: str,
            on_done: Callable[[PointResult], None]) -> list[PointResult]:
    """The chains as Ray tasks on the cluster at ``address`` (``local``: start one on this machine);
    ``workers`` chains, by default one per CPU of the cluster."""
    with ray_session(address, workers) as ray:
        if workers is None:
            workers = max(1, int(ray.cluster_resources().get("CPU", 1)))
        remote = ray.remote(num_cpus=1)(_evaluate_ray)
        ctx_ref = ray.put(ctx)
        refs = {}
        for chain in chains(len(points), workers):
            prev = None
            for i in chain:
                prev = remote.remote(ctx_ref, i, points[i], prev)
                refs[prev] = i
        results: list[Optional[PointResult]] = [None] * len(points)
        pending = list(refs)
        while pending:
            done, pending = ray.wait(pending, num_returns=1)
            res = ray.get(done[0])
            results[res.index] = res
            on_done(res)
        polish_remote = ray.remote(num_cpus=1)(polish)
        solved = _solved(results)
        return _apply_polish(solved, ray.get([polish_remote.remote(ctx_ref, r, neighbours(solved, r.index, ctx.polish_radius))
                                              for r in list(solved)]))


@contextmanager
def ray_session(address: str, workers: Optional[int] = None, modules: tuple = ()):
    """The ``ray`` module connected to the cluster at ``address`` (``local``: start one here with
    ``workers`` CPUs), shipping this project's packages (and ``modules``) to the workers; a
    cluster started here is shut down on exit. An unreachable cluster is a :class:`UserError`."""
    import ray

    import estimators
    import formulation
    import planner
    import simulator

    from planner.errors import Problem, UserError

    started = False
    if not ray.is_initialized():
        _reachable(address)
        try:
            ray.init(address=address, runtime_env={"py_modules": [planner, formulation, estimators, simulator, *modules]},
                     include_dashboard=False, log_to_driver=False, logging_level=logging.ERROR,
                     num_cpus=max(1, workers or os.cpu_count() or 1) if address == "local" else None)
        except (ConnectionError, ValueError, RuntimeError) as exc:
            raise UserError(Problem("--ray-address", f"cannot use the Ray cluster at '{address}': {exc}",
                                    "start one (ray start --head) and pass its address, or pass 'local' to start one here")) from None
        started = True
    try:
        yield ray
    finally:
        if started:
            ray.shutdown()


def _evaluate_ray(ctx: Context, index: int, values: dict, prev: Optional[PointResult]) -> PointResult:
    return evaluate(ctx, index, values, prev.warm if prev is not None else None)
