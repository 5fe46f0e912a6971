"""Compact job x group MILP (Pyomo -> HiGHS), for small instances.

Sets: jobs ``J`` (placeable), slots ``S`` (:mod:`formulation.placement.compact`), configurations
``K_s`` allowed in slot ``s``, GPU types ``T``.
Parameters: ``a_kj, bs_kj, tot_kj`` (rollout and training+sync ring weights, warm switches in,
and the job's own cycle a + b + s on ``k``, :mod:`formulation.placement.evaluate`; 0 where ``j``
may not use ``k``), ``slo_j``, ``w_j`` (DRAM per rollout node), ``S_j`` (training state), ``D_k^R``
(DRAM of a rollout node of ``k``), ``D_k^T`` (DRAM of ``k``'s training pool), ``c_k`` ($/h),
``n_tk`` (nodes of type ``t``), ``cap_t``, penalty ``P``, move price ``mu``.
Variables: ``x_js`` (job in slot), ``z_sk`` (slot uses configuration), ``u_j`` (unplaced),
``L_s >= 0`` (the slot's SLO limit).

    min  sum_sk c_k z_sk + P sum_j u_j + mu sum_{j placed now} (1 - x_{j,home(j)})
    assign      sum_s x_js + u_j = 1
    one_config  sum_k z_sk <= 1   (rep slot g: = x_gg; x_js <= x_gg)
    compat      x_js <= sum_{k in K_s, ok_kj} z_sk
    slo_limit   L_s <= slo_j + Mslo (1 - x_js)
    slo_rollout sum_j a_kj x_js <= L_s + M^a_k (1 - z_sk)
    slo_train   sum_j bs_kj x_js <= L_s + M^b_k (1 - z_sk)
    slo_solo    sum_k tot_kj z_sk <= L_s + Mtot (1 - x_js)
    dram        sum_j w_j x_js <= sum_k D_k^R z_sk ;  sum_j S_j x_js <= sum_k D_k^T z_sk
    capacity    sum_sk n_tk z_sk <= cap_t

Linearisation: the group's cycle time max(sum a, sum bs, max tot) must not exceed the smallest
member SLO; ``L_s`` carries that minimum and the big-Ms switch the rows off for unused
configurations (``M^a_k = sum_j a_kj``, ``Mslo = max slo``, ``Mtot = max tot``). The LP bound is
weak and the slots are many: this model is for small instances and as a cross-check of the
pattern model (:mod:`formulation.placement.colgen`).

Time limit: HiGHS's own plus a watchdog that cancels the run at the deadline.
"""

from __future__ import annotations

import time
from typing import Optional

from formulation.common import SolveOptions, SolveStatus, from_pyomo
from formulation.placement.compact import BuildTimeout, big_m, deadline_guard, decode, make_slots, too_big
from formulation.placement.evaluate import Index, Solution


def define_assign(m, pe, sl):
    m.assign = pe.Constraint(m.J, rule=lambda m, j: sum(m.x[j, s] for s in m.S if (j, s) in m.XS) + m.u[j] == 1)


def define_one_config(m, pe, sl):
    def rule(m, s):
        kind, rep = sl.slots[s]
        total = sum(m.z[s, k] for k in sl.configs[s])
        return total == m.x[rep, s] if kind == "rep" else total <= 1
    m.one_config = pe.Constraint(m.S, rule=rule)

    def rep_rule(m, j, s):
        kind, rep = sl.slots[s]
        return m.x[j, s] <= m.x[rep, s] if kind == "rep" and j != rep else pe.Constraint.Skip
    m.representative = pe.Constraint(m.XS, rule=rep_rule)


def define_compat(m, pe, sl, idx):
    m.compat = pe.Constraint(m.XS, rule=lambda m, j, s: m.x[j, s] <= sum(m.z[s, k] for k in sl.configs[s] if idx.ok[k, j]))


def define_slo(m, pe, sl, idx, M):
    m.slo_limit = pe.Constraint(m.XS, rule=lambda m, j, s: m.L[s] <= idx.slo[j] + M["slo_max"] * (1 - m.x[j, s]))

    def side(key):
        def rule(m, s, k):
            coef = M[key][k]
            bigm = float(sum(coef[j] for j in sl.members[s]))
            return sum(float(coef[j]) * m.x[j, s] for j in sl.members[s]) <= m.L[s] + bigm * (1 - m.z[s, k])
        return rule
    m.slo_rollout = pe.Constraint(m.SK, rule=side("a"))
    m.slo_train = pe.Constraint(m.SK, rule=side("bs"))
    mtot = float(M["tot"].max()) if M["tot"].size else 0.0
    m.slo_solo = pe.Constraint(m.XS, rule=lambda m, j, s: sum(float(M["tot"][k, j]) * m.z[s, k] for k in sl.configs[s])
                               <= m.L[s] + mtot * (1 - m.x[j, s]))


def define_dram(m, pe, sl, idx):
    # rollout-node DRAM binds on whole pools (a pinned member is alone on its nodes: ``ok``); the
    # members of a pinned configuration are at most its m (evaluate: the rollout-side row)
    big = {s: float(sum(idx.dram_r[j] for j in sl.members[s])) for s in range(len(sl.slots))}
    m.dram_rollout = pe.Constraint(m.S, rule=lambda m, s: sum(float(idx.dram_r[j]) * m.x[j, s] for j in sl.members[s])
                                   <= sum((big[s] if idx.pinned_m[k] else float(idx.dram_cap_r[k])) * m.z[s, k]
                                          for k in sl.configs[s]))
    m.pinned_members = pe.Constraint(m.S, rule=lambda m, s: sum(m.x[j, s] for j in sl.members[s])
                                     <= sum(float(idx.pinned_m[k] or len(sl.members[s])) * m.z[s, k] for k in sl.configs[s]))
    # own-sized: the members' own node counts fill the rollout pool (enforced when the slot takes k)
    own = [(s, k) for (s, k) in m.SK if idx.own[k]]

    def own_rule(m, s, k):
        mem = [j for j in sl.members[s] if idx.ok[k, j]]
        w = {j: float(idx.WO[idx.k_own[k], j]) for j in mem}
        return sum(w[j] * m.x[j, s] for j in mem) <= float(idx.rollout_cap[k]) + sum(w.values()) * (1 - m.z[s, k])
    m.own_nodes = pe.Constraint(own, rule=own_rule)
    m.dram_train = pe.Constraint(m.S, rule=lambda m, s: sum(float(idx.state_t[j]) * m.x[j, s] for j in sl.members[s])
                                 <= sum(float(idx.dram_cap_t[k]) * m.z[s, k] for k in sl.configs[s]))


def define_capacity(m, pe, sl, idx):
    def rule(m, t):
        terms = [(s, k) for (s, k) in m.SK if idx.node_matrix[k, t]]
        if not terms:
            return pe.Constraint.Skip  # no configuration uses this type
        return sum(float(idx.node_matrix[k, t]) * m.z[s, k] for (s, k) in terms) <= idx.capacity[idx.types[t]]
    m.capacity = pe.Constraint(range(len(idx.types)), rule=rule)


def define_objective(m, pe, sl, idx):
    move = idx.inst.move_price_per_job
    m.cost = pe.Objective(expr=sum(float(idx.cost[k]) * m.z[s, k] for (s, k) in m.SK) + sl.penalty * sum(m.u[j] for j in m.J)
                          + move * sum(1 - m.x[j, s] for j, s in sl.home.items() if j in sl.jobs), sense=pe.minimize)


class _GuardedPyomo:
    """``pyomo.environ`` whose ``Constraint`` checks the build deadline before each rule call."""

    def __init__(self, pe, guard):
        self._pe = pe
        outer = self

        class Constraint:  # noqa: D401 - mirrors pyomo.environ.Constraint, rules guarded
            Skip = pe.Constraint.Skip

            def __new__(cls, *index, rule):
                def guarded(*args):
                    guard()
                    return rule(*args)
                return outer._pe.Constraint(*index, rule=guarded)

        self.Constraint = Constraint

    def __getattr__(self, name):
        return getattr(self._pe, name)


def build(idx: Index, cur=None, deadline: float = float("inf"), symmetry_breaking: bool = True):
    """The Pyomo model; raises BuildTimeout when building it passes ``deadline``."""
    import pyomo.environ as pyomo_env

    pe = _GuardedPyomo(pyomo_env, deadline_guard(deadline))
    sl = make_slots(idx, cur, symmetry_breaking)
    M = big_m(idx)
    m = pe.ConcreteModel(name="placement-compact")
    m.J = pe.Set(initialize=sl.jobs)
    m.S = pe.Set(initialize=range(len(sl.slots)))
    m.XS = pe.Set(dimen=2, initialize=[(j, s) for s in range(len(sl.slots)) for j in sl.members[s]])
    m.SK = pe.Set(dimen=2, initialize=[(s, k) for s in range(len(sl.slots)) for k in sl.configs[s]])
    m.x = pe.Var(m.XS, domain=pe.Binary)
    m.z = pe.Var(m.SK, domain=pe.Binary)
    m.u = pe.Var(m.J, domain=pe.Binary)
    m.L = pe.Var(m.S, domain=pe.NonNegativeReals, bounds=(0, M["slo_max"]))
    define_assign(m, pe, sl)
    define_one_config(m, pe, sl)
    define_compat(m, pe, sl, idx)
    define_slo(m, pe, sl, idx, M)
    define_dram(m, pe, sl, idx)
    define_capacity(m, pe, sl, idx)
    define_objective(m, pe, sl, idx)
    return m, sl


def solve_compact(idx: Index, options: SolveOptions, deadline: float, warm: Optional[Solution], cur=None,
                  symmetry_breaking: bool = True):
    """(solution or None, status, lower bound or None, message)."""
    from pyomo.contrib.appsi.solvers import Highs

    from formulation.placement.master import Watchdog, new_highs  # noqa: F401 (new_highs: silences the banner)

    t0 = time.perf_counter()
    why = too_big(idx, cur, "highs", 0.45 * (deadline - t0))
    if why:
        return None, SolveStatus.NOT_SOLVED, None, f"compact MILP: {why}; the colgen or fast backend scales to this size"
    try:
        # handing the model to HiGHS takes about as long as building it and cannot be interrupted:
        # the build may use a bit less than half of the time left
        m, sl = build(idx, cur, t0 + 0.45 * (deadline - t0), symmetry_breaking)
    except BuildTimeout:
        return None, SolveStatus.NOT_SOLVED, None, (f"compact MILP: building the Pyomo model outlasted the time limit "
                                                    f"({time.perf_counter() - t0:.1f} s); the colgen backend scales to this size")
    t_build = time.perf_counter() - t0
    if warm is not None:
        vals = sl.warm_values(idx, warm)
        if vals is not None:
            x, z = vals
            for key in m.XS:
                m.x[key].value = x.get(key, 0)
            for key in m.SK:
                m.z[key].value = z.get(key, 0)
            placed = {j for g in warm.groups for j in g.members}
            for j in m.J:
                m.u[j].value = 0 if j in placed else 1
            for s in m.S:
                mem = [j for (j, ss) in x if ss == s]
                m.L[s].value = float(min(idx.slo[mem])) if mem else 0.0
    opt = Highs()
    opt.config.load_solution = False
    opt.config.warmstart = False  # see master.solve_mip: HiGHS 1.16 MIP starts gave inconsistent results here
    opt.config.mip_gap = options.mip_gap
    opt.config.time_limit = max(0.01, deadline - time.perf_counter())
    opt.highs_options = {"threads": int(options.threads), "random_seed": int(options.seed)}
    import os
    import sys

    sys.stdout.flush()
    saved = os.dup(1)
    try:
        with open(os.devnull, "wb") as null:
            os.dup2(null.fileno(), 1)
            opt.set_instance(m)
    finally:
        os.dup2(saved, 1)
        os.close(saved)
    t_handover = time.perf_counter() - t0 - t_build
    if time.perf_counter() >= deadline:
        return None, SolveStatus.NOT_SOLVED, None, (f"compact MILP: building ({t_build:.1f} s) and handing the model to HiGHS "
                                                    f"({t_handover:.1f} s) outlasted the time limit; the colgen backend scales to this size")
    # HiGHS's own limit a little before the deadline, so that it normally stops itself and hands
    # back its incumbent; the watchdog at the deadline catches a run that overruns it (presolve)
    opt.config.time_limit = max(0.01, 0.9 * (deadline - time.perf_counter()))
    import logging

    quiet = logging.getLogger("pyomo.contrib.appsi.solvers.highs")
    level = quiet.level
    quiet.setLevel(logging.ERROR)  # an interrupted run is reported by our own message
    try:
        with Watchdog(opt._solver_model, deadline) as wd:
            res = opt.solve(m)
    finally:
        quiet.setLevel(level)
    tc = res.termination_condition.name
    has = res.best_feasible_objective is not None
    status = from_pyomo(tc, has)
    sol = None
    if has:
        res.solution_loader.load_vars()
        sol = decode(idx, sl, lambda j, s: m.x[j, s].value > 0.5, lambda s, k: m.z[s, k].value > 0.5)
    lb = res.best_objective_bound
    lb = float(lb) if lb is not None and abs(lb) < 1e300 else None
    if status is SolveStatus.OPTIMAL and sol is not None and sol.unplaced:
        status = SolveStatus.OPTIMAL  # optimal: those jobs cannot be placed together with the others
    msg = (f"compact MILP (Pyomo -> HiGHS): {len(sl.slots)} slots, {len(m.XS)} x-variables, {len(m.SK)} z-variables; "
           f"build {t_build:.2f} s, hand-over to HiGHS {t_handover:.2f} s; HiGHS: {tc}{'; stopped by the watchdog' if wd.fired else ''}")
    return sol, status, lb, msg
