"""Compact job x group model in CP-SAT (OR-Tools), for small instances.

The same sets, variables and constraint groups as :mod:`formulation.placement.milp` (slots with a
representative job, anchor slots for the current plan), written with CP-SAT's enforcement
literals instead of big-Ms:

    slo_limit   x_js => L_s <= slo_j
    slo_rollout z_sk => sum_j a_kj x_js <= L_s
    slo_train   z_sk => sum_j bs_kj x_js <= L_s
    slo_solo    x_js and z_sk => tot_kj <= L_s

CP-SAT needs integers: seconds are scaled to milliseconds and DRAM to MB, loads rounded up and
limits rounded down (a plan it accepts is feasible in the real numbers; a group within a
millisecond of its limit may be refused), costs to milli-dollars. The time limit is CP-SAT's own
plus a watchdog that stops the search at the deadline.
"""

from __future__ import annotations

import math
import threading
import time
from typing import Optional

from formulation.common import SolveOptions, SolveStatus, from_cpsat
from formulation.placement.compact import BuildTimeout, deadline_guard, decode, make_slots, too_big
from formulation.placement.evaluate import Index, Solution

TIME_SCALE = 1000  # ms
DRAM_SCALE = 1000  # MB
COST_SCALE = 1000


def _up(x: float, scale: int) -> int:
    return int(math.ceil(x * scale - 1e-9))


def _down(x: float, scale: int) -> int:
    return int(math.floor(x * scale + 1e-9))


def define_assign(m, x, u, sl):
    for j in sl.jobs:
        m.Add(sum(x[j, s] for s in range(len(sl.slots)) if (j, s) in x) + u[j] == 1)


def define_one_config(m, x, z, sl):
    for s, (kind, rep) in enumerate(sl.slots):
        total = sum(z[s, k] for k in sl.configs[s])
        if kind == "rep":
            m.Add(total == x[rep, s])
            for j in sl.members[s]:
                if j != rep:
                    m.AddImplication(x[j, s], x[rep, s])
        else:
            m.Add(total <= 1)


def define_compat(m, x, z, sl, idx):
    for (j, s), var in x.items():
        m.AddBoolOr([z[s, k] for k in sl.configs[s] if idx.ok[k, j]] + [var.Not()])


def define_slo(m, x, z, L, sl, idx, guard=lambda: None):
    for (j, s), var in x.items():
        guard()
        m.Add(L[s] <= _down(idx.slo[j], TIME_SCALE)).OnlyEnforceIf(var)
        for k in sl.configs[s]:
            if idx.ok[k, j]:
                m.Add(L[s] >= _up(idx.tot[k, j], TIME_SCALE)).OnlyEnforceIf([var, z[s, k]])
    for s in range(len(sl.slots)):
        for k in sl.configs[s]:
            mem = [j for j in sl.members[s] if idx.ok[k, j]]
            m.Add(sum(_up(idx.a[k, j], TIME_SCALE) * x[j, s] for j in mem) <= L[s]).OnlyEnforceIf(z[s, k])
            m.Add(sum(_up(idx.bs[k, j], TIME_SCALE) * x[j, s] for j in mem) <= L[s]).OnlyEnforceIf(z[s, k])


def define_dram(m, x, z, sl, idx):
    for s in range(len(sl.slots)):
        # rollout-node DRAM binds on whole pools (a pinned member is alone on its nodes: ``ok``);
        # a pinned configuration holds at most its m members (evaluate: the rollout-side row)
        big = sum(_up(idx.dram_r[j], DRAM_SCALE) for j in sl.members[s])
        m.Add(sum(_up(idx.dram_r[j], DRAM_SCALE) * x[j, s] for j in sl.members[s])
              <= sum((big if idx.pinned_m[k] else _down(idx.dram_cap_r[k], DRAM_SCALE)) * z[s, k] for k in sl.configs[s]))
        m.Add(sum(x[j, s] for j in sl.members[s])
              <= sum(int(idx.pinned_m[k] or len(sl.members[s])) * z[s, k] for k in sl.configs[s]))
        for k in sl.configs[s]:  # own-sized: the members' own node counts fill the rollout pool
            if idx.own[k]:
                mem = [j for j in sl.members[s] if idx.ok[k, j]]
                m.Add(sum(int(idx.WO[idx.k_own[k], j]) * x[j, s] for j in mem) <= int(idx.rollout_cap[k])).OnlyEnforceIf(z[s, k])
        m.Add(sum(_up(idx.state_t[j], DRAM_SCALE) * x[j, s] for j in sl.members[s])
              <= sum(_down(idx.dram_cap_t[k], DRAM_SCALE) * z[s, k] for k in sl.configs[s]))


def define_capacity(m, z, sl, idx):
    for t, name in enumerate(idx.types):
        terms = [int(idx.node_matrix[k, t]) * var for (s, k), var in z.items() if idx.node_matrix[k, t]]
        if terms:
            m.Add(sum(terms) <= idx.capacity[name])


def define_objective(m, x, z, u, sl, idx):
    move = _up(idx.inst.move_price_per_job, COST_SCALE)
    m.Minimize(sum(_up(idx.cost[k], COST_SCALE) * var for (s, k), var in z.items())
               + _up(sl.penalty, COST_SCALE) * sum(u.values())
               + move * sum(1 - x[j, s] for j, s in sl.home.items() if (j, s) in x))


def build(idx: Index, cur=None, deadline: float = float("inf")):
    """The CP-SAT model; raises BuildTimeout when building it passes ``deadline``."""
    from ortools.sat.python import cp_model

    sl = make_slots(idx, cur)
    m = cp_model.CpModel()
    x = {(j, s): m.new_bool_var(f"x_{j}_{s}") for s in range(len(sl.slots)) for j in sl.members[s]}
    z = {(s, k): m.new_bool_var(f"z_{s}_{k}") for s in range(len(sl.slots)) for k in sl.configs[s]}
    u = {j: m.new_bool_var(f"u_{j}") for j in sl.jobs}
    slo_max = _down(float(idx.slo.max()), TIME_SCALE) if idx.n else 0
    L = {s: m.new_int_var(0, max(0, slo_max), f"L_{s}") for s in range(len(sl.slots))}
    define_assign(m, x, u, sl)
    define_one_config(m, x, z, sl)
    define_compat(m, x, z, sl, idx)
    define_slo(m, x, z, L, sl, idx, deadline_guard(deadline))
    define_dram(m, x, z, sl, idx)
    define_capacity(m, z, sl, idx)
    define_objective(m, x, z, u, sl, idx)
    return m, sl, x, z


def solve_compact(idx: Index, options: SolveOptions, deadline: float, warm: Optional[Solution], cur=None):
    """(solution or None, status, lower bound or None, message)."""
    from ortools.sat.python import cp_model

    t0 = time.perf_counter()
    why = too_big(idx, cur, "cpsat", deadline - t0)
    if why:
        return None, SolveStatus.NOT_SOLVED, None, f"compact CP-SAT: {why}; the colgen or fast backend scales to this size"
    try:
        m, sl, x, z = build(idx, cur, deadline)
    except BuildTimeout:
        return None, SolveStatus.NOT_SOLVED, None, (f"compact CP-SAT: building the model outlasted the time limit "
                                                    f"({time.perf_counter() - t0:.1f} s); the colgen backend scales to this size")
    if warm is not None:
        vals = sl.warm_values(idx, warm)
        if vals is not None:
            xv, zv = vals
            for key, var in x.items():
                m.AddHint(var, xv.get(key, 0))
            for key, var in z.items():
                m.AddHint(var, zv.get(key, 0))
    solver = cp_model.CpSolver()
    solver.parameters.max_time_in_seconds = max(0.01, deadline - time.perf_counter())
    solver.parameters.num_workers = max(1, int(options.threads))
    solver.parameters.random_seed = int(options.seed)
    solver.parameters.relative_gap_limit = float(options.mip_gap)
    stop = threading.Event()
    fired = []

    def watch():
        while not stop.wait(0.01):
            if time.perf_counter() >= deadline:
                fired.append(True)
                solver.StopSearch()
                return

    th = threading.Thread(target=watch, daemon=True)
    th.start()
    try:
        code = solver.Solve(m)
    finally:
        stop.set()
        th.join()
    name = solver.StatusName(code)
    status = from_cpsat(name)
    sol = None
    if status.has_solution:
        sol = decode(idx, sl, lambda j, s: solver.BooleanValue(x[j, s]), lambda s, k: solver.BooleanValue(z[s, k]))
    lb = solver.BestObjectiveBound() / COST_SCALE if status.has_solution else None
    msg = (f"compact CP-SAT: {len(sl.slots)} slots, {len(x)} x-literals, {len(z)} z-literals; {solver.NumBranches()} branches; "
           f"{name}{'; stopped by the watchdog' if fired else ''}; {time.perf_counter() - t0:.2f} s")
    if status is SolveStatus.OPTIMAL and lb is not None:
        lb = None  # scaled and rounded: the solve layer takes the plan's exact cost as the bound
    return sol, status, lb, msg
