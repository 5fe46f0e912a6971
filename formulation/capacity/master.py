"""The restricted master of the capacity model: the placement master with the fleet as a decision.

Rows and columns on top of :class:`formulation.placement.master.Master` (cover rows per job
class, capacity rows ``sum_p n_tp lambda_p <= L_t`` with ``L_t`` the availability of type ``t``,
slack columns for unplaced jobs)::

    credit_t:  w_t - sum_p n_tp lambda_p <= 0          (owned nodes in use)
    budget:    sum_p c_p lambda_p - sum_t P_t w_t <= B - sum_t P_t o_t      (only with a budget)

with a credit column ``w_t`` per type that has owned nodes: ``0 <= w_t <= o_t``, cost ``-P_t``
($/h of a node), ``+1`` in ``credit_t`` and ``-P_t`` in ``budget``. A pattern column ``p`` keeps
its placement cost ``c_p`` (the $/h of its nodes) and gets ``-n_tp`` in ``credit_t`` and ``c_p``
in ``budget``. At an optimum ``w_t = min(o_t, used_t)``, so the objective is
``sum_t P_t max(0, used_t - o_t)``: the $/h of the nodes to buy (the owned nodes are paid for
anyway and are added back as a constant).

Duals: with ``mu_t >= 0`` (capacity), ``rho_t >= 0`` (credit) and ``beta >= 0`` (budget), a
pattern's reduced cost is ``c_p + (mu - rho + beta P) . n_p - pi . m_p``. :meth:`solve_lp` returns
``mu - rho + beta P`` in place of the placement master's capacity duals, so the placement pricing
(``c_k + mu . n_k`` as the price to beat) prices the capacity model unchanged.
"""

from __future__ import annotations

from typing import Optional

import highspy
import numpy as np

from formulation.placement.master import Column, Master


class FleetMaster(Master):
    def __init__(self, demand: np.ndarray, capacity: np.ndarray, node_matrix: np.ndarray, penalty: float, threads: int,
                 config_cost: np.ndarray, node_price: np.ndarray, owned: np.ndarray, budget_new: Optional[float]):
        super().__init__(demand, capacity, node_matrix, penalty, threads)
        inf = highspy.kHighsInf
        nt = self.nt
        self.config_cost = np.asarray(config_cost, dtype=float)
        self.node_price = np.asarray(node_price, dtype=float)
        self.owned = np.asarray(owned, dtype=float)
        self.budget_new = budget_new
        self.credit_row0 = self.nc + nt
        self.h.addRows(nt, np.full(nt, -inf), np.zeros(nt), 0, np.zeros(nt, dtype=np.int32), np.zeros(0, dtype=np.int32), np.zeros(0))
        self.budget_row: Optional[int] = None
        if budget_new is not None:
            self.budget_row = self.nc + 2 * nt
            self.h.addRow(-inf, float(budget_new), 0, np.zeros(0, dtype=np.int32), np.zeros(0))
        for t in range(nt):
            if self.owned[t] > 0:
                rows, vals = [self.credit_row0 + t], [1.0]
                if self.budget_row is not None:
                    rows.append(self.budget_row)
                    vals.append(-float(self.node_price[t]))
                self.h.addCol(-float(self.node_price[t]), 0.0, float(self.owned[t]), len(rows), np.array(rows, dtype=np.int32),
                              np.array(vals))
                self.columns.append(None)
        self.last_obj: Optional[float] = None
        self.last_pi: Optional[np.ndarray] = None
        self.last_mu: Optional[np.ndarray] = None
        self.last_duals: Optional[tuple[np.ndarray, np.ndarray, float]] = None

    def extra_coefficients(self, col: Column) -> tuple[list[int], list[float]]:
        rows, vals = [], []
        for t in range(self.nt):
            n = float(self.node_matrix[col.config, t])
            if n:
                rows.append(self.credit_row0 + t)
                vals.append(-n)
        if self.budget_row is not None:
            rows.append(self.budget_row)
            vals.append(float(self.config_cost[col.config]))
        return rows, vals

    def solve_lp(self, deadline: float) -> tuple[float, np.ndarray, np.ndarray]:
        """LP optimum, class duals ``pi`` and the combined node duals ``mu - rho + beta P``."""
        obj, pi, rest = super().solve_lp(deadline)
        nt = self.nt
        mu, rho = rest[:nt], rest[nt:2 * nt]
        beta = float(rest[2 * nt]) if self.budget_row is not None else 0.0
        self.last_obj = obj
        self.last_duals = (mu, rho, beta)
        self.last_pi, self.last_mu = pi, mu - rho + beta * self.node_price
        return obj, pi, self.last_mu
