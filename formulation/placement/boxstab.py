"""A certified bound on many distinct jobs: column generation held in a box around the load bound's duals.

Why. On distinct jobs the pattern LP (:mod:`formulation.placement.colgen`) is 1.6-1.8x the load
bound (:func:`formulation.placement.fast.load_bound`), but plain column generation converges
slowly there: a restricted master that holds a plan's groups and singletons has degenerate duals,
far from feasible (at 500 distinct jobs one exact pricing pass at them took 42 s and Farley's
scaling of them gave half the load bound), and most rounds go to pricing at those duals. The
load bound's per-job values are dual feasible and cheap; this module starts there and keeps the
master's duals near them (Marsten's box step with Wentges' smoothing), so that every round prices
near a feasible point and gives a proof.

Model (as :mod:`formulation.placement.farley`, capacity rows dropped: that only lowers the
optimum). Classes ``c`` with demand ``d_c``; patterns ``p`` = a configuration ``k`` and a feasible
group, cost ``c_k``; slack of cost ``P`` (the unplaced-job penalty). Dual:
``max pi.d  s.t.  sum_c m_cp pi_c <= c_k (every pattern),  0 <= pi_c <= P``.

The master, restricted to the patterns found so far, gets one *box column* per class: it covers
``c`` once at price ``u_c = min(P, (1 + delta) z_c + eps)``, ``z`` the stabilisation centre. In the
dual that is ``pi_c <= u_c``: the master's duals ``pi`` stay in a box above the centre.

A round:

1. solve the master's LP: duals ``pi``;
2. price at ``s = alpha z + (1 - alpha) pi`` (Wentges): for every configuration whose cheap bound
   (:func:`formulation.placement.farley.cheap_value_bounds`) exceeds ``c_k``, the exact branch and
   bound (:func:`formulation.placement.pricing.price`) returns the groups worth more than ``c_k`` at
   ``s`` and an upper bound ``V_k`` on any group's worth;
3. scaling per class (Farley's scaling, refined): with ``rho_k = max(1, V_k / c_k)`` (configurations
   the deadline leaves unsearched count with their cheap bound), each class gets
   ``r_c = max(1, s_c / P, max of rho_k over the configurations it may use)``; a group on ``k``
   holds only classes that may use ``k``, so ``s / r`` (element-wise) is dual feasible and every
   plan costs at least ``sum_c d_c s_c / r_c`` (:func:`class_scales`). Farley's single
   ``r = max_c r_c`` scales every class by the worst configuration; classes that cannot use it
   keep more here (2,000 distinct-loose jobs, two processes on the 2 CPUs: 18,461 after 63 s and
   19,109 after 133 s, against 17,700 and 18,650 with the single scale). When that beats the best
   so far, ``s / r`` becomes the centre (and the box moves with it);
4. the groups found join the master. A round that finds none prices at ``pi`` itself next
   (``alpha = 0``, Wentges' misprice rule): either ``pi`` is feasible (then the bound is the
   master's value) or pricing finds groups for the master;
5. (``column_rounds``, :func:`fleet_bound`) that many *column rounds* follow: the master solved
   again, then priced at its own duals ``pi`` over only the configurations that gave groups in
   step 2 (26-67 of ~380 at 2,000 distinct jobs), their groups joining the master. They prove
   nothing (the bound and the centre stay) and cost a fraction of a round; they are for the plan
   built from the groups (:mod:`formulation.placement.dive`), which the rounds' groups decide.

The bound only grows: the caller's ``start`` (what it proved the first centre worth), then ``z.d``
for every centre a round sets (those are dual feasible, as ``s / r`` above). When a
round at ``alpha = 0`` finds nothing, ``pi`` is dual feasible and ``pi.d`` is the master's value;
and when the master's value is the centre's (to ``rel_gap``), no dual point in the box beats the
centre, so none does (the dual is concave, the box a neighbourhood of the centre): the centre is
the pattern LP's optimum (``converged``).

Every bound is a proof at any round: the deadline may stop it anywhere. Coverage: the same group
model as Farley's bound (whole-pool and pinned configurations, closed form), no move charges.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Callable, Optional

import highspy
import numpy as np

from formulation.placement.evaluate import Index
from formulation.placement.farley import cheap_value_bounds, items_for
from formulation.placement.master import Watchdog, new_highs, set_time_left
from formulation.placement.pricing import price

#: box half-width above the centre, relative (module docstring)
DELTA = 0.25
#: Wentges' smoothing weight on the centre (0.5 and 0.7 within noise at 500 distinct jobs; at 2,000
#: distinct-loose jobs, 87 s in process: 0.5 -> 17,970, 0.7 -> 18,396, 0.85 -> 18,328)
ALPHA = 0.7
#: groups kept per configuration and round
COLUMNS_PER_CONFIG = 5
#: ... in :func:`fleet_bound`, whose groups are also the dive's (:mod:`formulation.placement.dive`):
#: more of them per round make its plan (2,000 jobs, seed 3, in process, 2026-12-05: two-types under
#: 60 s 38,520 $/h against 39,312 with 5, distinct-loose 24,008 against 24,178; under 300 s
#: two-types 36,704 and bound 34,079 against 36,736 and 33,711, distinct-loose 23,112 and 19,295
#: against 22,934 and 19,453: within the runs' noise there, ~1%)
FLEET_COLUMNS_PER_CONFIG = 15
#: ... and column rounds after each round there (module docstring, step 5). 2,000 jobs, seed 3, in
#: process, 41 s of rounds then 15 s of dive and search (2026-12-05), none -> two: distinct-loose
#: 24,076 -> 23,798 $/h, two-types 38,892 -> 37,860, distinct 31,980 -> 31,944, distinct-tight-fleet
#: 31,946 -> 32,026 (one: distinct-loose 23,908; four: 24,068); the rounds' bound on distinct
#: 28,528 -> 27,442 (fewer rounds: 16 -> 7)
FLEET_COLUMN_ROUNDS = 2
#: stop when the bound is within this share of the master's value (the LP's optimum to that share)
REL_GAP = 2e-3
#: branch-and-bound nodes per configuration and round (at 500 distinct jobs 20,000 left a few
#: configurations unproven every round, and their root bounds put r at 1.2-1.3 instead of 1.02-1.07)
NODE_BUDGET = 200_000
#: ... with the compiled search (:mod:`formulation.placement.pricing_jit`), whose 200,000 nodes take
#: milliseconds: at 2,000 distinct jobs 200,000 left 7-18 configurations unproven a round and their
#: open bounds held r at 1.27-1.53 (no round improved on the load bound); 5M proved every one
#: (r 1.01-1.10)
NODE_BUDGET_JIT = 5_000_000


@dataclass
class BoxResult:
    """``bound``: every plan of the jobs ``reps`` (with ``demand`` copies) costs at least this;
    ``duals``: a dual-feasible point with ``duals.d == bound``; ``columns``: the groups found, as
    (configuration, {class: copies}); ``converged``: the bound is the pattern LP's optimum (to ``rel_gap``)."""

    bound: float
    duals: np.ndarray
    columns: list[tuple[int, dict[int, int]]] = field(default_factory=list)
    rounds: int = 0
    column_rounds: int = 0  # rounds at the master's own duals that proved nothing (module docstring, step 5)
    converged: bool = False
    master_value: Optional[float] = None


class _BoxMaster:
    """The restricted master with the box columns, on highspy (cover rows only)."""

    def __init__(self, demand: np.ndarray, upper: np.ndarray, threads: int = 1):
        self.C = len(demand)
        self.h = new_highs()
        self.h.setOptionValue("threads", int(threads))
        # primal simplex: a round adds columns, which keeps the last basis primal feasible, so the
        # re-solve starts from it (HiGHS's default dual simplex took 12 of 41 s of rounds over 17
        # solves at 2,000 distinct-loose jobs, the primal 4 s; the freed time went to pricing)
        self.h.setOptionValue("simplex_strategy", 4)
        inf = highspy.kHighsInf
        self.h.addRows(self.C, np.asarray(demand, dtype=float), np.full(self.C, inf), 0,
                       np.zeros(self.C, dtype=np.int32), np.zeros(0, dtype=np.int32), np.zeros(0))
        for c in range(self.C):
            self.h.addCol(float(upper[c]), 0.0, inf, 1, np.array([c], dtype=np.int32), np.array([1.0]))
        self.keys: set = set()

    def set_box(self, upper: np.ndarray) -> None:
        self.h.changeColsCost(self.C, np.arange(self.C, dtype=np.int32), np.asarray(upper, dtype=float))

    def add(self, k: int, cost: float, counts: dict[int, int]) -> bool:
        key = (k, tuple(sorted(counts.items())))
        if key in self.keys:
            return False
        self.keys.add(key)
        rows = sorted(counts)
        self.h.addCol(float(cost), 0.0, highspy.kHighsInf, len(rows), np.array(rows, dtype=np.int32),
                      np.array([float(counts[c]) for c in rows]))
        return True

    def solve(self, deadline: float) -> Optional[tuple[float, np.ndarray]]:
        """(value, duals), or None when the deadline stopped it."""
        set_time_left(self.h, deadline - time.perf_counter())
        with Watchdog(self.h, deadline):
            self.h.run()
        if self.h.getModelStatus() != highspy.HighsModelStatus.kOptimal:
            return None
        duals = np.asarray(self.h.getSolution().row_dual)[: self.C]
        return float(self.h.getInfo().objective_function_value), np.maximum(duals, 0.0)


def class_scales(idx: Index, reps: np.ndarray, rho: np.ndarray, pi: np.ndarray, penalty: float) -> np.ndarray:
    """Per class ``c``: ``r_c = max(1, pi_c / P, max of rho_k over the configurations k class c may use)``,
    where ``rho_k >= V_k(pi) / c_k`` (``V_k``: the most any feasible group on ``k`` is worth at
    ``pi``). Then ``pi / r`` (element-wise) is dual feasible: a group ``S`` on ``k`` holds only
    classes that may use ``k``, each with ``r_c >= rho_k``, so it is worth at most
    ``pi(S) / rho_k <= c_k``. Never above Farley's single ``r = max_k rho_k`` (module docstring), and
    below it for the classes no violated configuration can hold."""
    rc = np.ones(len(reps))
    hot = np.flatnonzero(rho > 1.0)
    if len(hot):
        ok = idx.ok[np.ix_(hot, reps)]  # (configurations over 1) x classes
        rc = np.maximum(rc, np.where(ok, rho[hot][:, None], 1.0).max(axis=0))
    if penalty > 0 and len(pi):
        rc = np.maximum(rc, np.asarray(pi, dtype=float) / penalty)
    return rc


def box_bound(idx: Index, reps: np.ndarray, demand: np.ndarray, center: np.ndarray, penalty: float,
              columns: list[tuple[int, dict[int, int]]], deadline: float, delta: float = DELTA, alpha: float = ALPHA,
              columns_per_config: int = COLUMNS_PER_CONFIG, node_budget: Optional[int] = None, rel_gap: float = REL_GAP,
              start: Optional[float] = None, threads: int = 1, column_rounds: int = 0,
              log: Optional[Callable[[str], None]] = None) -> BoxResult:
    """The bound of the module docstring over classes ``reps`` (a job each) with ``demand`` copies,
    from the centre ``center`` (e.g. the load bound's per-job values), the master seeded with
    ``columns`` (configuration, {class: copies}), until ``deadline``.

    ``start``: what the caller has proven the centre is worth; by default ``center.d``, which
    needs the centre to be dual feasible (the load bound's values are, without node prices).
    With ``start = -inf`` the centre need not be feasible: only the rounds' own proofs count.
    ``node_budget``: per configuration and round, by default :data:`NODE_BUDGET` or, where the
    compiled search runs, :data:`NODE_BUDGET_JIT`. ``column_rounds``: after each round, that many
    rounds at the master's own duals over the configurations that round found groups on (module
    docstring, step 5)."""
    from formulation.placement.pricing_jit import ready

    reps = np.asarray(reps, dtype=int)
    demand = np.asarray(demand, dtype=float)
    cost = idx.cost
    z = np.minimum(np.maximum(np.asarray(center, dtype=float), 0.0), penalty)
    best = float(z @ demand) if start is None else float(start)
    scale = max(1e-9, float(z.mean()) if len(z) else 1.0)

    def box(zc: np.ndarray) -> np.ndarray:
        return np.minimum(penalty, zc * (1 + delta) + 1e-3 * scale)

    master = _BoxMaster(demand, box(z), threads)
    out = BoxResult(best, z.copy() if start is None else np.zeros_like(z))
    for k, counts in columns:
        master.add(int(k), float(cost[k]), counts)
    items_of = items_for(idx, reps, demand)
    a = alpha
    if node_budget is None:
        node_budget = NODE_BUDGET_JIT if ready(len(reps), deadline) else NODE_BUDGET
    while time.perf_counter() < deadline:
        solved = master.solve(deadline)
        if solved is None:
            break
        value, pi = solved
        out.master_value = value
        if best >= value * (1 - rel_gap):
            # no dual point in the box beats the centre by more than rel_gap, so none anywhere (the
            # dual is concave and the box is a neighbourhood of the centre): the LP's optimum
            out.converged = True
            break
        s = a * z + (1 - a) * pi
        cheap = cheap_value_bounds(idx, reps, demand, s)
        rho = np.ones(len(cost))  # rho_k >= V_k / c_k, at least 1
        new = 0
        gave: list[int] = []  # the configurations this round found groups on
        order = np.argsort(-(cheap / cost), kind="stable")
        for i, k in enumerate(order):
            k = int(k)
            if cheap[k] <= cost[k] * (1 + 1e-9):
                break  # (descending: no configuration left has a group worth more than its cost)
            if time.perf_counter() > deadline:
                rest = order[i:]  # the cheap bounds of the rest
                rho[rest] = np.maximum(1.0, cheap[rest] / cost[rest])
                break
            res = price(items_of(k, s), float(cost[k]), max_columns=columns_per_config, node_budget=node_budget,
                        deadline=deadline)
            rho[k] = max(1.0, min(float(cheap[k]), res.upper_bound) / float(cost[k]))
            if res.columns:
                gave.append(k)
            new += _join(master, k, float(cost[k]), res.columns, out)
        for _ in range(column_rounds if gave else 0):
            found = _column_round(master, gave, items_of, cost, columns_per_config, node_budget, deadline, out)
            if found is None:
                break
            out.column_rounds += 1
            if log is not None:
                log(f"  column round {out.column_rounds}: {found} new groups over {len(gave)} configurations")
            if not found:
                break
        rc = class_scales(idx, reps, rho, s, penalty)
        r = float(rc.max()) if len(rc) else 1.0
        lb = float((s / rc) @ demand)
        improved = lb > best * (1 + 1e-12)
        if improved:
            best, z = lb, s / rc
            out.bound, out.duals = best, z.copy()
            master.set_box(box(z))
        out.rounds += 1
        if log is not None:
            log(f"round {out.rounds}: master {value:.6g}, r {r:.4f}, bound {lb:.6g} (best {best:.6g}), "
                f"{new} new groups, alpha {a}")
        # nothing new: the smoothed point was feasible (the centre moved there) or mispriced; either
        # way the master's own duals next, which either prove the LP or give it new groups
        a = alpha if new else 0.0
    return out


def _column_round(master: _BoxMaster, configs: list[int], items_of, cost: np.ndarray, columns_per_config: int,
                  node_budget: int, deadline: float, out: BoxResult) -> Optional[int]:
    """One column round (module docstring, step 5): the master again, then the exact search at its
    own duals on ``configs``; the groups it found (joined to the master and ``out.columns``), or
    None when the deadline stopped the master."""
    solved = master.solve(deadline)
    if solved is None:
        return None
    _value, pi = solved
    found = 0
    for k in configs:
        if time.perf_counter() > deadline:
            break
        res = price(items_of(k, pi), float(cost[k]), max_columns=columns_per_config, node_budget=node_budget,
                    deadline=deadline)
        found += _join(master, k, float(cost[k]), res.columns, out)
    return found


def _join(master: _BoxMaster, k: int, cost: float, columns: list, out: BoxResult) -> int:
    """Add pricing's groups ``columns`` ((value, {class: copies})) on configuration ``k`` to the
    master and to ``out.columns``; how many were new to the master."""
    new = 0
    for _v, counts in columns:
        if master.add(k, cost, counts):
            new += 1
            out.columns.append((k, counts))
    return new


def fleet_bound(idx: Index, reps: np.ndarray, demand: np.ndarray, of_job: np.ndarray, groups: list, deadline: float,
                threads: int = 1, log: Optional[Callable[[str], None]] = None) -> tuple[Optional[float], Optional[BoxResult]]:
    """The box-stabilised bound over every job of ``idx``, in job classes (``reps``: a job per class,
    ``demand``: its jobs, ``of_job[j]``: job ``j``'s class; :func:`formulation.placement.colgen.job_classes`),
    from the partner-capped load bound's per-class values, the master seeded with a plan's ``groups``
    (:class:`formulation.placement.evaluate.Group`), until ``deadline``: ``(bound, rounds)``, the bound
    at least the load bound's; ``(None, None)`` when some job fits nowhere alone. For the fast path
    beyond column generation's reach (:mod:`formulation.placement.solve`), where the compiled search
    makes rounds affordable."""
    from collections import Counter

    from formulation.placement.fast import LOAD_BOUND_STEPS, load_bound
    from formulation.placement.partners import partners as partner_caps

    t0 = time.perf_counter()
    reps, demand = np.asarray(reps, dtype=int), np.asarray(demand, dtype=float)
    P = partner_caps(idx, reps, deadline=t0 + 0.1 * max(0.0, deadline - t0))
    duals: list = []
    lb = load_bound(idx, jobs=reps, iterations=LOAD_BOUND_STEPS, duals=duals, partners=P if P.done.all() else None,
                    deadline=t0 + 0.2 * max(0.0, deadline - t0))
    if lb is None or not duals:
        return None, None
    center, mu = np.asarray(duals[0], dtype=float), np.asarray(duals[1], dtype=float)
    start = float(center @ demand) if not np.any(mu > 0) else -np.inf  # (with node prices: not a feasible point)
    seed = [(int(g.config), dict(Counter(int(of_job[j]) for j in g.members))) for g in groups if len(g.members)]
    res = box_bound(idx, reps, demand, center, idx.penalty, seed, deadline, start=start, threads=threads, log=log,
                    columns_per_config=FLEET_COLUMNS_PER_CONFIG, column_rounds=FLEET_COLUMN_ROUNDS)
    return max(res.bound, lb), res
