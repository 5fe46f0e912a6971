"""Where the 60 s plan at 2,000 jobs loses against a long run (issue 26's "60 s within 2%"): a probe.

    python -m benchmarks.placement.primal_probe [--family distinct-loose] [--seed 3] [--limit 60]
        [--out results/placement/scale/primal-probe.md]

Runs the fleet-scale phases of ``planner plan --time-limit LIMIT`` in process with the limit's split
(:func:`formulation.placement.solve.fleet_shares`: fast path, box-stabilised rounds, column
generation at the master's duals, then the dive and its local search), on the instance
:func:`benchmarks.placement.bench_backends.families` writes, then from the same columns compares
ways to turn them into a plan in the primal phase's seconds:

* ``dive`` (what the planner does), with other fixing rules (``fix_at`` / ``top``);
* the same dive searched on for longer (twice and about four times the seconds);
* HiGHS on the restricted integer master (half the seconds, then the search);
* column generation priced at smoothed duals (Neame: ``pi_s = a pi_s + (1 - a) pi``) in place of the
  master's duals, then the dive and search;
* the columns of ``--long`` seconds of the same phases (the LP they reach, and the dive and search from them).

Each row: the LP over the columns, the plan's $/h after its construction and after the search. The
machine's load shifts every time-limited figure: compare rows of one run only.
"""

from __future__ import annotations

import argparse
import os
import platform
import time
from pathlib import Path

import numpy as np


def _index(family: str, n: int, seed: int):
    from benchmarks.placement.bench_backends import families
    from formulation.placement.evaluate import Index
    from formulation.placement.explain import placeable_alone

    inst = families()[family](n, seed)
    idx = Index(inst)
    keep = np.flatnonzero(placeable_alone(idx))  # (as the planner does: jobs that fit nowhere alone are left out first)
    return idx.restrict(inst.model_copy(update={"jobs": [inst.jobs[j] for j in keep]}), keep)


def phases(idx, classes, limit: float, alpha: float = 0.0):
    """(box columns, box bound, primal columns, its LP) after the fleet phases' split of ``limit`` (``alpha``:
    the smoothing of the duals column generation prices at; 0: the master's own, as the planner)."""
    from formulation.placement.boxstab import fleet_bound
    from formulation.placement.fast import fast_solve
    from formulation.placement.solve import FINISH_S_PER_JOB, fleet_columns_s, fleet_shares

    t0 = time.perf_counter()
    fast_s, primal_s = fleet_shares(limit)
    deadline = t0 + limit - min(0.3 * limit, FINISH_S_PER_JOB * idx.n + 0.02)
    warm, _ = fast_solve(idx, t0 + fast_s, None, seed=0)
    bound, res = fleet_bound(idx, classes.rep, classes.demand, classes.of_job, warm.groups, deadline - primal_s)
    assert res is not None, "a job fits nowhere alone (they were left out first)"
    dive_s = primal_s - fleet_columns_s(limit)  # the dive's and its search's seconds
    cols, lp = columns(idx, classes, res.columns, deadline - dive_s, alpha)
    return res.columns, bound, cols, lp, dive_s


def columns(idx, classes, start, deadline: float, alpha: float, every: bool = False):
    """Column generation at the master's (``alpha`` = 0: :func:`formulation.placement.primalcg.primal_columns`)
    or smoothed duals from ``start`` until ``deadline``: (the last LP's support, its value), and with ``every``
    every column the master holds as a third item."""
    from formulation.placement import primalcg as P
    from formulation.placement.colgen import PatternModel
    from formulation.placement.master import Column

    if alpha == 0.0 and not every:
        pc = P.primal_columns(idx, classes, start, deadline)
        return pc.columns, pc.lp
    pm = PatternModel(idx, classes)
    for k, counts in start:
        pm.master.add(Column(int(k), counts, float(idx.cost[k])))
    pm.add_singletons()
    m = pm.master
    m.h.setOptionValue("solver", "ipm")
    m.h.setOptionValue("run_crossover", "on")
    longest, lp, x, smooth = 0.0, None, None, None
    while time.perf_counter() < deadline:
        t = time.perf_counter()
        value, pi, mu = m.solve_lp(deadline)
        longest = max(longest, time.perf_counter() - t)
        if not m.lp_optimal or m.last_primal is None:
            break
        x, lp = np.array(m.last_primal), value
        stop = deadline - max(P.MIN_SOLVE_S, P.SOLVE_MARGIN * longest)
        if time.perf_counter() >= stop:
            break
        smooth = (pi, mu) if smooth is None else (alpha * smooth[0] + (1 - alpha) * pi, alpha * smooth[1] + (1 - alpha) * mu)
        new, _ = P.price_chunk(pm, smooth[0], smooth[1], stop)
        if not new and alpha > 0:  # a mispricing: the master's own duals
            smooth = (pi, mu)
            new, _ = P.price_chunk(pm, pi, mu, stop)
        if not new:
            break
    cols = [] if x is None else [(c.config, dict(c.counts)) for i, c in enumerate(m.columns[: len(x)]) if c is not None and x[i] > 1e-6]
    if every:
        return cols, lp, [(c.config, dict(c.counts)) for c in m.columns if c is not None]
    return cols, lp


def master_mip(idx, classes, sol, every, span: float) -> float:
    """$/h of HiGHS's integer master over ``every`` column and the plan ``sol``'s groups, started from ``sol``, in ``span`` s."""
    from formulation.placement.colgen import PatternModel
    from formulation.placement.master import Column

    pm = PatternModel(idx, classes)
    ids = pm.add_groups(sol.groups, {})
    for k, counts in every:
        pm.master.add(Column(int(k), counts, float(idx.cost[k])))
    pm.add_singletons()
    x0 = np.zeros(len(pm.master.columns))
    for i in ids:
        if i is not None:
            x0[i] += 1.0
    x, _, _ = pm.master.solve_mip(time.perf_counter() + span, None, 1e-4, fresh_start=x0)
    if x is None:
        return float("nan")
    got = pm.to_solution(x, {})
    return got.cost(idx) if not got.unplaced else float("nan")


def plan_from(idx, classes, cols, bound, span: float, how: str = "dive", fix_at: float = 0.8, top: int = 20, keep=None):
    """(construction $/h, after the search $/h) in ``span`` seconds from ``cols`` (``keep``: a list the searched plan
    is appended to)."""
    from formulation.placement.colgen import PatternModel
    from formulation.placement.dive import dive
    from formulation.placement.lns import improve
    from formulation.placement.master import Column

    t1 = time.perf_counter()
    sol = None
    if how == "mip":
        pm = PatternModel(idx, classes)
        for k, counts in cols:
            pm.master.add(Column(int(k), counts, float(idx.cost[k])))
        pm.add_singletons()
        pm.deadline = t1 + 0.5 * span
        x, _, _ = pm.master.solve_mip(t1 + 0.5 * span, None, 1e-4)
        sol = pm.round_and_repair(x, {}) if x is not None else None
    if sol is None:
        sol = dive(idx, classes, cols, [], t1 + 0.65 * span, finish_by=t1 + 0.8 * span, fix_at=fix_at, top=top)
    if sol is None:
        return float("nan"), float("nan")  # (the dive's first LP did not finish)
    built = sol.cost(idx)
    found, _ = improve(idx, sol, t1 + span, seed=0, progress=None, bound=bound)
    if keep is not None:
        keep.append(found)
    return built, found.cost(idx)


def main(argv=None) -> int:
    from formulation.placement.colgen import job_classes

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--family", default="distinct-loose")
    ap.add_argument("--n", type=int, default=2000)
    ap.add_argument("--seed", type=int, default=3)
    ap.add_argument("--limit", type=float, default=60.0)
    ap.add_argument("--long", type=float, default=300.0)
    ap.add_argument("--out", default="results/placement/scale/primal-probe.md")
    a = ap.parse_args(argv)
    load0 = os.getloadavg()[0]
    idx = _index(a.family, a.n, a.seed)
    classes = job_classes(idx)
    box, bound, cols, lp, span = phases(idx, classes, a.limit)
    rows = []

    def row(what, lp_, built_found):
        rows.append((what, lp_, *built_found))
        print(rows[-1], flush=True)

    row(f"dive (fix_at 0.8, top 20), search: {span:g} s", lp, plan_from(idx, classes, cols, bound, span))
    from formulation.placement.solve import fleet_columns_s

    # the same phases keeping every column priced: the searched plan, then HiGHS's integer master over all of them
    c_all, lp_all, every = columns(idx, classes, box, time.perf_counter() + fleet_columns_s(a.limit), 0.0, every=True)
    kept: list = []
    built, found = plan_from(idx, classes, c_all, bound, span / 2, keep=kept)
    row(f"dive, search: {span / 2:g} s (every column kept)", lp_all, (built, found))
    row(f"... then HiGHS over the {len(every)} columns and the plan's groups, from it: {span / 2:g} s", lp_all,
        (found, master_mip(idx, classes, kept[0], every, span / 2)))
    for fix, top in ((0.95, 5), (0.6, 50)):
        row(f"dive (fix_at {fix}, top {top}), search: {span:g} s", lp, plan_from(idx, classes, cols, bound, span, fix_at=fix, top=top))
    for x in (2, 4):
        row(f"dive, search: {x * span:g} s", lp, plan_from(idx, classes, cols, bound, x * span))
    row(f"HiGHS on the restricted master ({0.5 * span:g} s), search: {span:g} s in all", lp,
        plan_from(idx, classes, cols, bound, span, how="mip"))
    for alpha in (0.5, 0.8):
        c2, lp2 = columns(idx, classes, box, time.perf_counter() + fleet_columns_s(a.limit), alpha)
        row(f"duals smoothed at {alpha}, then dive and search: {span:g} s", lp2, plan_from(idx, classes, c2, bound, span))
    box_l, bound_l, cols_l, lp_l, span_l = phases(idx, classes, a.long)
    row(f"the columns of {a.long:g} s; dive, search: {span:g} s", lp_l, plan_from(idx, classes, cols_l, bound_l, span))
    row(f"the columns of {a.long:g} s; dive, search: {span_l:g} s", lp_l, plan_from(idx, classes, cols_l, bound_l, span_l))
    cmd = "python -m benchmarks.placement.primal_probe " + " ".join(argv if argv is not None else __import__("sys").argv[1:])
    L = [f"# The primal phase at fleet scale: {a.family} {a.n} (seed {a.seed}), limit {a.limit:g} s", "",
         f"    {cmd}", f"    # {platform.node()} {platform.platform()}, {os.cpu_count()} CPUs; "
         f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}; load average {load0:.1f} at the start, {os.getloadavg()[0]:.1f} at the end",
         "", f"Box-stabilised bound after the {a.limit:g} s split: {bound:,.1f} $/h; after {a.long:g} s: {bound_l:,.1f}.", "",
         "| from the columns | LP over them ($/h) | construction ($/h) | after the search ($/h) |", "|---|---:|---:|---:|"]
    L += [f"| {w} | {v:,.1f} | {b:,.0f} | {f:,.0f} |" for w, v, b, f in rows]
    Path(a.out).parent.mkdir(parents=True, exist_ok=True)
    Path(a.out).write_text("\n".join(L) + "\n")
    print(f"written {a.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
