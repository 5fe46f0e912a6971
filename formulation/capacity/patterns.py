"""The pattern model of placement with the fleet as a decision (column generation).

:class:`FleetPatternModel` is the placement pattern model
(:class:`formulation.placement.colgen.PatternModel`: job classes, pricing by SLO thresholds,
integer master, optimality proof by enumeration) on the master of
:mod:`formulation.capacity.master`. What differs is set through the placement model's hooks:

* ``new_master``: the fleet master (credit and budget rows);
* ``score``: an integer solution costs the $/h of the nodes it buys,
  ``sum_t P_t max(0, used_t - o_t)``, plus the unplaced-job penalty; one that breaks an
  availability limit or the budget scores as if no job were placed;
* ``dual_value``: the LP objective (equal to the Lagrangian value at LP-optimal duals);
* ``lagrangian_bound``: the bound below, valid for any duals;
* ``priced_configs``: only the *active* configurations (dominance, below).

Dominance (exact, lazy)
-----------------------
Configuration ``k'`` *dominates* ``k`` when every job class that may use ``k`` may use ``k'``
with no more rollout seconds and no more training (+ sync) seconds, and ``k'`` has at least the
host DRAM per rollout node and on its training pool. Every group feasible on ``k`` is then
feasible on ``k'`` with the same members, so the most a pattern of ``k`` can be worth at duals
``pi`` is at most what ``k'``'s is: ``V_k <= V_k'``. Pricing runs only over the active
configurations (initially those no cheaper active configuration dominates); for an inactive
``k`` the bound ``rc_k >= f_k - V_k'`` (``f`` the price to beat, ``V_k'`` from the exact pricing
of an active dominator) stands in for its own pricing. When that bound is negative at the LP
duals, ``k`` is woken up and priced; the LP is declared optimal only when no inactive
configuration can have a negative reduced cost, so the LP bound is exact whatever the
availability limits and owned nodes (under which a dominated configuration may well be used).

Lagrangian bound
----------------
For duals ``pi >= 0`` and combined node duals ``m`` (any sign), take ``mu = max(m, 0)``,
``rho = max(-m, 0)``, ``beta = 0``: with ``U_k`` the most groups of ``k`` in any plan,
``LB = pi.d - mu.L + sum_k U_k min(0, rc*_k) + sum_c d_c min(0, P - pi_c) + sum_t o_t min(0, rho_t - P_t)``,
the Lagrangian dual of the master at those multipliers (weak duality), ``rc*_k`` a lower bound
on the reduced cost of every pattern of ``k``.
"""

from __future__ import annotations

import time
from typing import Optional

import numpy as np

from formulation.capacity.master import FleetMaster
from formulation.placement.colgen import Classes, PatternModel
from formulation.placement.evaluate import Index, Solution
from formulation.placement.master import Column


def dominance(idx: Index, reps: np.ndarray) -> np.ndarray:
    """``dom[k2, k]``: configuration ``k2`` dominates ``k`` for the job classes ``reps`` (``k2 != k``)."""
    K = len(idx.configs)
    ok = idx.ok[:, reps]
    a = np.where(ok, idx.a[:, reps], np.inf)
    bs = np.where(ok, idx.bs[:, reps], np.inf)
    dom = np.zeros((K, K), dtype=bool)
    for k in np.flatnonzero(ok.any(axis=1)):
        d = (a <= a[k]).all(axis=1) & (bs <= bs[k]).all(axis=1)
        d &= (idx.dram_cap_r >= idx.dram_cap_r[k]) & (idx.dram_cap_t >= idx.dram_cap_t[k])
        d &= (idx.pinned_m > 0) == (idx.pinned_m[k] > 0)  # the rollout row is DRAM on one, members on the other
        d &= (idx.own == idx.own[k]) & (~idx.own | (idx.k_own == idx.k_own[k]))  # or the same own counts
        d[k] = False
        dom[:, k] = d
    return dom


def initial_active(idx: Index, reps: np.ndarray, dom: np.ndarray) -> np.ndarray:
    """Configurations some job class may use that no cheaper (or equal, earlier) active one dominates."""
    K = len(idx.configs)
    usable = idx.ok[:, reps].any(axis=1)
    active = np.zeros(K, dtype=bool)
    for k in np.lexsort((np.arange(K), idx.cost)):
        if usable[k] and not (dom[:, k] & active & (idx.cost <= idx.cost[k])).any():
            active[k] = True
    return active


class FleetPatternModel(PatternModel):
    master: FleetMaster  # what new_master builds (its duals and objective are read below)

    def __init__(self, idx: Index, classes: Classes, owned: dict[str, int], budget_new: Optional[float] = None,
                 threads: int = 1, prune: bool = True):
        pools = idx.inst.pool_types
        self.node_price = np.array([pools[t].gpus_per_node * pools[t].price_per_gpu_hour for t in idx.types], dtype=float)
        self.owned = np.array([int(owned.get(t, 0)) for t in idx.types], dtype=float)
        self.budget_new = budget_new
        super().__init__(idx, classes, 0.0, threads)
        K = len(idx.configs)
        self.usable = idx.ok[:, classes.rep].any(axis=1) if len(classes.rep) else np.zeros(K, dtype=bool)
        self.dom: Optional[np.ndarray]
        if prune and len(classes.rep):
            self.dom = dominance(idx, classes.rep)
            self.active = initial_active(idx, classes.rep, self.dom)
        else:
            self.dom = None
            self.active = self.usable.copy()
        self.wake: list[int] = []

    # ------------------------------------------------------------------ hooks
    def new_master(self, demand: np.ndarray, cap: np.ndarray, threads: int) -> FleetMaster:
        return FleetMaster(demand, cap, self.idx.node_matrix, self.penalty, threads, self.idx.cost, self.node_price, self.owned,
                           self.budget_new)

    def priced_configs(self):
        return [int(k) for k in np.flatnonzero(self.active)]

    def new_cost(self, used: dict[str, int]) -> float:
        """$/h of the nodes to buy for ``used`` nodes per type."""
        return float(sum(p * max(0.0, used.get(t, 0) - o) for t, p, o in zip(self.idx.types, self.node_price, self.owned)))

    def admissible(self, used: dict[str, int]) -> bool:
        """Within the availability limits and the budget."""
        if any(used.get(t, 0) > self.idx.capacity[t] for t in self.idx.types):
            return False
        return self.budget_new is None or self.new_cost(used) <= self.budget_new * (1 + 1e-9) + 1e-9

    def score(self, sol: Solution) -> float:
        used = self.idx.nodes_used(sol.groups)
        bad = 0 if self.admissible(used) else self.idx.n
        return self.new_cost(used) + self.penalty * (len(sol.unplaced) + bad)

    def dual_value(self, pi: np.ndarray, mu: np.ndarray) -> float:
        return float(self.master.last_obj) if self.master.last_obj is not None else -np.inf

    # ------------------------------------------------------------------ bound and dominance
    def lagrangian_bound(self, pi, mu, rc_lb) -> float:
        K = len(self.idx.configs)
        fixed = self.idx.cost + self.idx.node_matrix @ mu
        rc = np.array(rc_lb, dtype=float)
        rc[~self.usable] = np.maximum(fixed[~self.usable], 0.0)  # no class may use them: no pattern at all
        inactive = np.flatnonzero(self.usable & ~self.active)
        self.wake = []
        if len(inactive):
            assert self.dom is not None  # without pruning every usable configuration is active
            worth = fixed - rc  # the most a pattern of each priced configuration is worth (inf where unknown)
            worth[~np.isfinite(rc)] = np.inf
            for k in inactive:
                doms = self.dom[:, k] & self.active
                best = float(worth[doms].min()) if doms.any() else np.inf
                rc[k] = fixed[k] - best
                if rc[k] < -1e-9 * max(1.0, abs(fixed[k])):
                    self.wake.append(int(k))
        m_pos, m_neg = np.maximum(mu, 0.0), np.maximum(-mu, 0.0)
        d = self.cl.demand
        neg = (rc < 0) & (self.U > 0)
        cols = float(np.sum(self.U[neg] * rc[neg])) if K else 0.0
        value = (float(pi @ d) - float(m_pos @ self.cap) + cols + float(d @ np.minimum(0.0, self.penalty - pi))
                 + float(self.owned @ np.minimum(0.0, m_neg - self.node_price)))
        return value if np.isfinite(value) else -np.inf

    def column_generation(self, st, t0, deadline, lp_deadline, node_budget):
        """The placement column generation, repeated while inactive configurations wake up."""
        pi = mu = None
        best = -np.inf
        while True:
            p, m, lb = super().column_generation(st, t0, deadline, lp_deadline, node_budget)
            if p is not None:
                pi, mu = p, m
            best = max(best, lb)
            if not (st.lp_converged and self.wake):
                return pi, mu, best
            self.active[self.wake] = True
            self.wake = []
            st.lp_converged = False
            if time.perf_counter() > lp_deadline:
                return pi, mu, best

    # ------------------------------------------------------------------ columns from elsewhere
    def feasible_patterns(self, patterns: list[tuple[int, dict[int, int]]]) -> np.ndarray:
        """Which (configuration, {class: count}) patterns are feasible groups here (vectorised
        :meth:`Index.feasible` over class counts)."""
        idx, rep = self.idx, self.cl.rep
        n = len(patterns)
        if n == 0:
            return np.zeros(0, dtype=bool)
        M = np.zeros((n, len(rep)))
        ks = np.array([k for k, _ in patterns], dtype=int)
        for i, (_, counts) in enumerate(patterns):
            for c, m in counts.items():
                M[i, c] = m
        present = M > 0
        ok = idx.ok[ks][:, rep]
        a = np.where(ok, idx.a[ks][:, rep], 0.0)
        bs = np.where(ok, idx.bs[ks][:, rep], 0.0)
        tot = np.where(present & ok, idx.tot[ks][:, rep], 0.0)
        slo = np.where(present, idx.slo[rep][None, :], np.inf).min(axis=1)
        period = np.maximum(np.maximum((M * a).sum(axis=1), (M * bs).sum(axis=1)), tot.max(axis=1))
        tol = 1 + 1e-9
        good = (present & ~ok).sum(axis=1) == 0
        good &= period <= slo * tol + 1e-12
        # an absent class weighs nothing: its weight may be inf (an own-sized configuration's count
        # for a job that no count serves), and 0 x inf is NaN, which failed every such pattern
        w = np.where(present, idx.rollout_w(np.asarray(ks)[:, None], rep[None, :]), 0.0)
        good &= (M * w).sum(axis=1) <= idx.dram_cap_r[ks] * tol + 1e-12
        good &= M @ idx.state_t[rep] <= idx.dram_cap_t[ks] * tol + 1e-12
        good &= (M <= self.cl.demand[None, :]).all(axis=1) & present.any(axis=1)
        return good

    def add_patterns(self, patterns: list[tuple[int, dict[int, int]]]) -> int:
        """Columns for the (configuration, {class: count}) patterns that are feasible groups here;
        returns how many were new."""
        added = 0
        for (k, counts), good in zip(patterns, self.feasible_patterns(patterns)):
            if good:
                added += self.master.add(Column(k, counts, self.column_cost(k, counts))) is not None
                self.active[k] = True
        return added

    def best_patterns(self, limit: int) -> list[tuple[int, dict[int, int]]]:
        """Columns worth handing on: those the last LP uses, then the rest by reduced cost at its duals."""
        pi, mu, x = self.master.last_pi, self.master.last_mu, self.master.last_primal
        scored = []
        for i, col in enumerate(self.master.columns):
            if col is None:
                continue
            if pi is None:
                rc = 0.0
            else:
                rc = col.cost + float(mu @ self.idx.node_matrix[col.config]) - sum(pi[c] * m for c, m in col.counts.items())
            used = x is not None and i < len(x) and x[i] > 1e-9
            scored.append((not used, rc, i))
        scored.sort()
        out = []
        for _, _, i in scored[:limit]:
            col = self.master.columns[i]
            assert col is not None  # only live columns were scored
            out.append((col.config, dict(col.counts)))
        return out
