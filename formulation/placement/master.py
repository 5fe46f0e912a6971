"""The restricted master of the pattern model, on highspy directly.

Rows: one cover row per job class (``sum_p m_cp lambda_p >= d_c``) and one capacity row per GPU
type (``sum_p n_tp lambda_p <= cap_t``). Columns: patterns (a configuration and a multiset of
classes, cost = its $/h plus any move charges) and one slack per class (cost ``penalty``: a job
left unplaced). The LP gives the duals for pricing; the same model with integer columns gives
the plan.

highspy is used directly rather than through Pyomo: the master changes by a few columns per
round, which Pyomo would rebuild and re-send each time (measured in ``results/placement/``).
"""

from __future__ import annotations

import os
import threading
import time
from dataclasses import dataclass
from typing import Any, Callable, Optional

import highspy
import numpy as np
from highspy import cb as _cb


def set_time_left(h: highspy.Highs, seconds: float) -> None:
    """HiGHS's ``time_limit`` for the next ``run`` to stop ``seconds`` (at least 0.01) from now.

    HiGHS measures its limit against the run time the object has *accumulated* over all its runs
    (``getRunTime``), not from the run's start: a master re-solved round after round with the time
    left as its limit stopped at once, status time limit and 0 iterations, once its solves had
    added up to the time left (2,000 distinct jobs: the box-stabilised rounds ended 38 s early)."""
    h.setOptionValue("time_limit", float(h.getRunTime()) + max(0.01, float(seconds)))


def new_highs() -> highspy.Highs:
    """A silent ``highspy.Highs``: its constructor prints a banner on the C-level stdout, which would
    corrupt a plan written to stdout, so file descriptor 1 points at /dev/null while it runs."""
    import os
    import sys

    sys.stdout.flush()
    saved = os.dup(1)
    try:
        with open(os.devnull, "wb") as null:
            os.dup2(null.fileno(), 1)
            h = highspy.Highs()
    finally:
        os.dup2(saved, 1)
        os.close(saved)
    h.setOptionValue("output_flag", False)
    return h


@dataclass
class Column:
    config: int
    counts: dict[int, int]  # class -> members
    cost: float
    anchor: Optional[str] = None


#: integer masters with more columns run without HiGHS's sub-MIP heuristics (:meth:`Master.solve_mip`)
SUBMIP_MAX_COLUMNS = 20000


MIP_EVENT = _cb.HighsCallbackType.kCallbackMipInterrupt


class Watchdog:
    """Stop a HiGHS run at a wall-clock deadline, whatever phase it is in.

    A thread marks the deadline; HiGHS's interrupt callbacks (simplex, IPM, MIP) then interrupt
    the run. (``Highs.cancelSolve`` alone does nothing unless ``HandleUserInterrupt`` is on, and
    its flag is never reset by ``run``: a MIP under a 2 s watchdog ran its own 30 s limit.)

    Every event writes the interrupt flag, set or clear: HiGHS keeps it from one run to the next,
    so a run after an interrupted one stopped at its first event (session 50: a ladder's second
    integer master ended at once with no bound). ``stop(event)``: a further reason to stop (the
    caller's target reached)."""

    KINDS = ("cbSimplexInterrupt", "cbIpmInterrupt", "cbMipInterrupt")

    def __init__(self, h: highspy.Highs, deadline: float, stop: Optional[Callable[[Any], bool]] = None):
        self.h = h
        self.deadline = deadline
        self.stop = stop
        self.fired = False
        self._stop = threading.Event()
        self._t = threading.Thread(target=self._watch, daemon=True)

    def _watch(self) -> None:
        if os.environ.get("RL_PLANNER_NO_WATCHDOG") == "1":  # the benchmark measures HiGHS's own limit alone
            return
        while not self._stop.wait(0.01):
            if time.perf_counter() >= self.deadline:
                self.fired = True
                return

    def _interrupt(self, event) -> None:
        event.interrupt(bool(self.fired or (self.stop is not None and self.stop(event))))

    def __enter__(self):
        for kind in self.KINDS:
            getattr(self.h, kind).subscribe(self._interrupt)
        self._t.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._t.join()
        for kind in self.KINDS:
            getattr(self.h, kind).unsubscribe(self._interrupt)


class Master:
    def __init__(self, demand: np.ndarray, capacity: np.ndarray, node_matrix: np.ndarray, penalty: float, threads: int = 1):
        self.lp_optimal = False  # whether the last solve_lp reached the LP's optimum
        self.h = new_highs()
        self.h.setOptionValue("threads", int(threads))
        self.h.setOptionValue("random_seed", 0)
        self.nc = len(demand)
        self.nt = len(capacity)
        self.node_matrix = node_matrix
        inf = highspy.kHighsInf
        self.h.addRows(self.nc, np.asarray(demand, dtype=float), np.full(self.nc, inf), 0,
                       np.zeros(self.nc, dtype=np.int32), np.zeros(0, dtype=np.int32), np.zeros(0))
        self.h.addRows(self.nt, np.full(self.nt, -inf), np.asarray(capacity, dtype=float), 0,
                       np.zeros(self.nt, dtype=np.int32), np.zeros(0, dtype=np.int32), np.zeros(0))
        self.columns: list[Optional[Column]] = []
        self.last_primal: Optional[np.ndarray] = None
        self.last_mip_bound = -np.inf  # the dual bound of the last integer solve
        self.keys: set = set()
        for c in range(self.nc):  # slack: class c left unplaced
            self.h.addCol(penalty, 0.0, inf, 1, np.array([c], dtype=np.int32), np.array([1.0]))
            self.columns.append(None)
        self.penalty = penalty

    def add(self, col: Column, upper: float = highspy.kHighsInf) -> Optional[int]:
        key = (col.config, tuple(sorted(col.counts.items())), col.anchor)
        if key in self.keys:
            return None
        self.keys.add(key)
        idx = [c for c in sorted(col.counts)]
        vals = [float(col.counts[c]) for c in idx]
        for t in range(self.nt):
            if self.node_matrix[col.config, t]:
                idx.append(self.nc + t)
                vals.append(float(self.node_matrix[col.config, t]))
        more_idx, more_vals = self.extra_coefficients(col)
        idx += more_idx
        vals += more_vals
        self.h.addCol(col.cost, 0.0, upper, len(idx), np.array(idx, dtype=np.int32), np.array(vals))
        self.columns.append(col)
        return len(self.columns) - 1

    def extra_coefficients(self, col: Column) -> tuple[list[int], list[float]]:
        """Coefficients of a pattern column in rows a subclass adds (none here; the capacity
        planner's master adds fleet rows, :mod:`formulation.capacity.master`)."""
        return [], []

    def solve_lp(self, deadline: float) -> tuple[float, np.ndarray, np.ndarray]:
        """LP optimum, class duals pi >= 0 and capacity duals mu >= 0."""
        set_time_left(self.h, deadline - time.perf_counter())
        with Watchdog(self.h, deadline):
            self.h.run()
        # stopped by the deadline: neither the value nor the duals are the LP's optimum
        self.lp_optimal = self.h.getModelStatus() == highspy.HighsModelStatus.kOptimal
        sol = self.h.getSolution()
        self.last_primal = np.asarray(sol.col_value)
        y = np.asarray(sol.row_dual)
        obj = self.h.getInfo().objective_function_value
        return float(obj), np.maximum(y[: self.nc], 0.0), np.maximum(-y[self.nc:], 0.0)

    def solve_mip(self, deadline: float, start: Optional[np.ndarray], mip_gap: float,
                  stop_at_bound: Optional[float] = None, stop_at_objective: Optional[float] = None,
                  fresh_start: Optional[np.ndarray] = None) -> tuple[Optional[np.ndarray], str, bool]:
        """The integer master under a wall-clock deadline: (columns' values or None, HiGHS's status,
        whether the watchdog stopped it). ``stop_at_bound``: stop as soon as HiGHS's dual bound
        reaches it (the caller needs no more of the bound; ``last_mip_bound`` has it); HiGHS's
        presolve is off then (at 100 jobs and 7,700 columns it took ~2 s of the ~2.5 s to reach
        the bound, without it 0.4 s). ``stop_at_objective``: stop at a solution that good (one
        the caller knows to be optimal). ``fresh_start``: a MIP start, only for a master that has
        never been solved (see below; on a fresh one the returned plans matched their objective)."""
        n = len(self.columns)
        self.h.setOptionValue("presolve", "choose" if stop_at_bound is None else "off")
        self.h.changeColsIntegrality(n, np.arange(n, dtype=np.int32), np.ones(n, dtype=np.uint8))
        self.h.setOptionValue("mip_rel_gap", float(mip_gap))
        # HiGHS's sub-MIP heuristics (RENS, RINS, root reduced cost) poll neither the interrupt
        # callbacks nor the time limit: on a master of 200,120 columns (classes 500, --time-limit 60)
        # one ran 106 s at the root, past the watchdog, and the command took 148-156 s
        big = n > SUBMIP_MAX_COLUMNS
        for name in ("mip_heuristic_run_rens", "mip_heuristic_run_rins", "mip_heuristic_run_root_reduced_cost"):
            self.h.setOptionValue(name, not big)
        # a sub-MIP's events reach the interrupt callback with the sub-MIP's own bounds: HiGHS
        # completes the last LP solution (kept as a user solution) by a sub-MIP with most columns
        # fixed, whose dual bound (120 $/h where the master's optimum was 104) stopped the whole
        # solve, which then had no bound at all (session 50). A stop at a bound starts without that
        # solution; the LP basis is put back afterwards.
        basis = None
        if stop_at_bound is not None and fresh_start is None:
            basis = self.h.getBasis()
            self.h.clearSolver()
        set_time_left(self.h, deadline - time.perf_counter())
        # ``start`` is not handed to HiGHS: with a MIP start set on this master after its LP
        # solves, HiGHS 1.16 reported "Optimal" with an objective that did not match the returned
        # columns (152 $/h returned, 56 reported, 104 optimal on weave-micro). The caller keeps
        # the better of the warm start and this solve instead.
        del start
        if fresh_start is not None and self.last_primal is None:
            sol = highspy.HighsSolution()
            sol.col_value = [float(v) for v in fresh_start]
            sol.value_valid = True
            self.h.setSolution(sol)
        lo = np.inf if stop_at_bound is None else stop_at_bound
        hi = -np.inf if stop_at_objective is None else stop_at_objective

        def enough(event) -> bool:  # (the MIP's events only: an LP's carry no MIP bounds)
            return event.callback_type == MIP_EVENT and (event.data_out.mip_dual_bound >= lo or event.data_out.mip_primal_bound <= hi)

        stops = stop_at_bound is not None or stop_at_objective is not None
        with Watchdog(self.h, deadline, enough if stops else None) as wd:
            self.h.run()
        status = self.h.modelStatusToString(self.h.getModelStatus())
        if status == "Interrupted by user":  # HiGHS's word for any interrupt callback: say whose
            status = "stopped by the watchdog" if wd.fired else "stopped at its target (bound or plan reached)"
        info = self.h.getInfo()
        # HiGHS's dual bound: no integer solution over these columns costs less (also when stopped early)
        self.last_mip_bound = float(info.mip_dual_bound) if np.isfinite(info.mip_dual_bound) else -np.inf
        has = info.primal_solution_status == 2  # kSolutionStatusFeasible
        x = np.asarray(self.h.getSolution().col_value) if has else None
        if basis is not None and basis.valid:
            self.h.setBasis(basis)
        return x, status, wd.fired
