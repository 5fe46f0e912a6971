"""CP-SAT model for the reallocation decision (OR-Tools).

Sets and parameters as in :mod:`formulation.realloc.milp`. CP-SAT needs integers, so throughput
and migration cost are scaled by ``1/q`` with ``q = max(|values|) / RESOLUTION`` and rounded; the
objective reported back is recomputed in floating point from the chosen candidates.

Variables
    ``x_{s,c}`` Boolean; ``z`` integer in ``[0, max_{s,c} F_{s,c}]``.
Objective
    ``max z − Σ_{s,c} M_{s,c} x_{s,c}`` with ``M = round(m / q)``.
Constraints
    * ``define_choice``:     ``ExactlyOne(x_{s,·})``                               ∀s
    * ``define_capacity``:   ``Σ_{s,c} G_{s,c,p} x_{s,c} ≤ cap_p``                 ∀p
    * ``define_bottleneck``: ``z ≤ Σ_c F_{s,c} x_{s,c}``                  ∀s in the pipeline
Linearisation
    the curves enter as a table: ``F_{s,c} = round(f_s(G_{s,c}) / q)``, the candidate's exact
    throughput (the MILP writes the curve as the minimum of its segments instead, so the two
    backends are independent formulations of one problem).

Warm start: the current allocation as a solution hint.
"""

from __future__ import annotations

import time

from formulation.common import SolveOptions, SolveRecord, from_cpsat
from formulation.realloc.instance import ReallocInstance, Solution

RESOLUTION = 1e7


def _scale(inst: ReallocInstance, table: list[list[float]]) -> float:
    vals = [v for row in table for v in row] + [c.migration_cost for st in inst.stages for c in st.candidates]
    top = max([abs(v) for v in vals] + [1e-12])
    return top / RESOLUTION


def define_choice(m, inst: ReallocInstance, x) -> None:
    for s in range(len(inst.stages)):
        m.add_exactly_one(x[s])


def define_capacity(m, inst: ReallocInstance, x) -> None:
    from ortools.sat.python import cp_model

    for p, users in inst.arrays().users():
        m.add(cp_model.LinearExpr.weighted_sum([x[s][c] for s, c, _ in users], [int(g) for _, _, g in users])
              <= int(inst.pools[p].gpus))


def define_bottleneck(m, inst: ReallocInstance, x, z, F) -> None:
    from ortools.sat.python import cp_model

    for s in inst.pipeline_stages():
        m.add(z <= cp_model.LinearExpr.weighted_sum(x[s], F[s]))


def build(inst: ReallocInstance, options: SolveOptions | None = None):
    from ortools.sat.python import cp_model

    table = inst.throughput_table()
    q = _scale(inst, table)
    F = [[int(round(v / q)) for v in row] for row in table]
    M = [[int(round(c.migration_cost / q)) for c in st.candidates] for st in inst.stages]
    m = cp_model.CpModel()
    x = [[m.new_bool_var(f"x[{s},{c}]") for c in range(len(st.candidates))] for s, st in enumerate(inst.stages)]
    z = m.new_int_var(0, max(max(r) for r in F), "z")
    define_choice(m, inst, x)
    define_capacity(m, inst, x)
    define_bottleneck(m, inst, x, z, F)
    flat_x = [v for row in x for v in row]
    flat_m = [c for row in M for c in row]
    m.maximize(z - cp_model.LinearExpr.weighted_sum(flat_x, flat_m))
    return m, x, q


def solve(inst: ReallocInstance, options: SolveOptions | None = None) -> tuple[Solution, SolveRecord]:
    from ortools.sat.python import cp_model

    opts = options or SolveOptions()
    t0 = time.perf_counter()
    m, x, q = build(inst, opts)
    hint = opts.warm_start or [0] * len(inst.stages)
    for s, row in enumerate(x):
        for c, v in enumerate(row):
            m.add_hint(v, 1 if c == hint[s] else 0)
    solver = cp_model.CpSolver()
    p = solver.parameters
    p.max_time_in_seconds = float(opts.time_limit_s)
    p.num_workers = max(1, int(opts.threads))
    p.random_seed = int(opts.seed)
    p.relative_gap_limit = float(opts.mip_gap)
    p.log_search_progress = bool(opts.verbose)
    code = solver.solve(m)
    status = from_cpsat(solver.status_name(code))
    choice = [0] * len(inst.stages)
    obj = bound = None
    if status.has_solution:
        choice = [next(c for c, v in enumerate(row) if solver.boolean_value(v)) for row in x]
        obj = inst.objective(choice)
        bound = float(solver.best_objective_bound) * q
    rec = SolveRecord("cpsat", status, obj, bound, time.perf_counter() - t0, opts.time_limit_s,
                      opts.warm_start_name or "current-allocation", f"CP-SAT {solver.status_name(code)}")
    return Solution(choice, obj, bound), rec
