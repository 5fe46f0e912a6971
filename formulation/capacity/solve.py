"""The cheapest fleet for a forecast, in each deployment style.

``solve(instance, options, style, warm)`` returns a :class:`StyleResult`: the fleet (nodes per
type, owned nodes included), what it costs, a certified lower bound, and how the jobs run on it.

Styles
------
``co-execution``
    Weave's co-execution groups (any number of members per group): the pattern model of
    :mod:`formulation.capacity.patterns`, warm-started with the Weave greedy and, in a sweep,
    with the neighbouring point's groups and patterns.
``solo-disaggregated``
    Solo-D: every job alone on its own rollout pool and training pool. The same master with one
    column per job class and configuration; only the configurations with the fewest nodes of a
    (rollout type, training type) pair on which the job meets its SLO matter (any other uses more
    nodes of the same types and costs more), so the integer master over them is exact.
``colocated``
    Every job on its own nodes of one GPU type, rollout and training taking turns on them (one
    iteration = rollout + training + the in-place weight reshard, from ``instance.colocated``);
    the best single type. On one type a job's cost grows with its nodes, so each job takes the
    fewest nodes on which it meets its SLO; the type is the cheapest whose total fits its
    availability (and the budget). Exact by construction.

Every style reports the fleet's full hourly cost: the owned nodes (paid for whether used or not)
plus the nodes it buys.

This module solves co-execution and dispatches; :mod:`formulation.capacity.styles` holds Solo-D
and colocated, :mod:`formulation.capacity.warm` the warm starts between sweep points,
:mod:`formulation.capacity.result` the result type and the steps every style shares.
"""

from __future__ import annotations

import time
from typing import Optional

from formulation.capacity.instance import CapacityInstance
from formulation.capacity.patterns import FleetPatternModel
from formulation.capacity.result import Colocation, StyleResult, Warm, group_result, start  # noqa: F401 (Colocation, Warm: re-exported)
from formulation.capacity.styles import solve_colocated, solve_solo
from formulation.capacity.warm import export_warm, warm_patterns, warm_solution
from formulation.common import SolveOptions
from formulation.placement.colgen import job_classes
from formulation.placement.greedy import best_greedy
from formulation.placement.solve import tighten

STYLES = ("co-execution", "solo-disaggregated", "colocated")


def solve(inst: CapacityInstance, options: SolveOptions, style: str = "co-execution", warm: Optional[Warm] = None,
          prune: bool = True) -> StyleResult:
    t0 = time.perf_counter()
    if style == "co-execution":
        res = solve_coexec(inst, options, warm, prune)
    elif style == "solo-disaggregated":
        res = solve_solo(inst, options)
    elif style == "colocated":
        res = solve_colocated(inst, options)
    else:
        raise ValueError(f"unknown deployment style {style!r}; use one of {', '.join(STYLES)}")
    assert res.record is not None  # every style's result carries its solve record
    res.record.wall_time_s = time.perf_counter() - t0
    res.record.time_limit_s = options.time_limit_s
    return res


def solve_coexec(inst: CapacityInstance, options: SolveOptions, warm: Optional[Warm], prune: bool) -> StyleResult:
    deadline = time.perf_counter() + options.time_limit_s
    idx, budget_new, early = start(inst, "co-execution")
    if early is not None:
        return early
    model = FleetPatternModel(idx, job_classes(idx), inst.owned, budget_new, options.threads, prune)
    cands = [(best_greedy(idx)[0], "greedy")]
    carried = 0
    if warm is not None:
        cands.append((warm_solution(idx, warm), "neighbour"))
        carried = model.add_patterns(warm_patterns(idx, model, warm))
    first, warm_name = min(cands, key=lambda c: model.score(c[0]))
    found, st = model.solve(deadline, first, {}, options.mip_gap)
    sol = found if found is not None and model.score(found) <= model.score(first) + 1e-9 else first
    sol = tighten(idx, sol)
    lb_new = st.lower_bound if st.lower_bound is not None and st.lower_bound > -1e300 else None
    lp_txt = f"LP {st.lp_value:.6g}" if st.lp_value is not None else "no LP solved in time"
    message = (f"column generation: {st.rounds} rounds, {st.columns} columns, {int(model.active.sum())} of "
               f"{len(idx.configs)} configurations priced, {lp_txt}{' (converged)' if st.lp_converged else ''}"
               + (f"; optimality proven over {st.enumerated} enumerated patterns" if st.proven and st.enumerated is not None
                  else "; optimality proven by the LP bound" if st.proven else "")
               + (f"; integer master: {st.mip_status}" if st.mip_status else "")
               + (f"; {carried} columns from the neighbouring point" if warm is not None else ""))
    res = group_result(inst, "co-execution", idx, sol, lb_new, st.proven, options, message, warm_name)
    if res.unplaced and lb_new is not None and lb_new >= model.penalty * (1 - 1e-9):
        res.note = "proven: every plan within the limits leaves a job out"
    res.warm = export_warm(idx, model, sol)
    res.lp_duals = model.master.last_duals
    return res
