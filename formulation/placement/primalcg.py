"""Groups for a plan at fleet scale: column generation at the master's own duals, in chunks.

Why. The box-stabilised rounds (:mod:`formulation.placement.boxstab`) price near the load bound's
duals so that every round proves a bound; their groups are what the dive
(:mod:`formulation.placement.dive`) builds a plan from, but as a basis for a plan they converge
slowly. On 2,000 distinct-loose jobs (seed 3) the pattern LP over the groups of 30 s of rounds (and a
singleton per class) is 28,910 $/h, over those of 220 s 23,751; this phase takes the first to 22,141
in 13 s (in process, 2026-12-06), and the dive and search from its groups gave 23,212 $/h where the
same 26 s of dive and search from the rounds' groups gave 23,982 (two-types: 37,444 against 38,512).

Method. The master of :mod:`formulation.placement.colgen` (cover and capacity rows) over the given
groups and a singleton per class, solved by HiGHS's interior point method with crossover (0.3-0.8 s
at 2,000 classes and 15,000 groups, where the dual simplex took 2-5 s: the re-solves after new
columns were nearly as long as a first solve). Its duals ``(pi, mu)`` are priced in *chunks*: the
configurations in order of their cheap bound over their fixed price
(:func:`formulation.placement.farley.cheap_value_bounds`; those whose cheap bound is below it hold no
group of negative reduced cost and are skipped), each by the branch and bound of
:func:`formulation.placement.pricing.price` with a small node budget (:data:`NODE_BUDGET`: it proves
nothing here, the groups are what count; :data:`COLUMNS_PER_CONFIG` groups each), until :data:`CHUNK` new
groups, then the master again.
Whole passes over every configuration before each re-solve took the LP to 22,828 in the same 13 s;
chunks of 400 to 22,485. It stops at its deadline, or when a whole pass finds nothing (the LP's
optimum to the search's budget).

What it returns is the support of the last LP solved to optimality (a basic solution: no more groups
than rows, ~1,900 at 2,000 classes), the groups the dive starts from; the dive over every
group priced (15,000) spent its time in LP re-solves and was stopped before it fixed most jobs.
It proves nothing: the bound is the rounds'.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Optional

import numpy as np

from formulation.placement.colgen import Classes, PatternModel
from formulation.placement.evaluate import Index
from formulation.placement.farley import cheap_value_bounds
from formulation.placement.master import Column
from formulation.placement.pricing import price

#: new groups between two solves of the master (module docstring: 800 against whole passes and 400)
CHUNK = 800
#: branch-and-bound nodes per configuration (2,000 and 5,000 gave the same plans; 20,000 fewer chunks)
NODE_BUDGET = 5000
#: groups kept per configuration and chunk (2,000 jobs from 30 s of rounds, 15 s of this then 12 s of dive and search,
#: in process: two-types 36,976-36,992 $/h with 10 or 15 against 37,288-37,360 with 5; distinct-loose 23,142-23,230
#: with 10 against 23,116-23,250 with 5, 23,564 with 15; distinct 31,242 with 10, 31,178 with 5)
COLUMNS_PER_CONFIG = 10
#: the last solve needs this many times the longest solve so far, and at least MIN_SOLVE_S, before the deadline
SOLVE_MARGIN = 2.0
MIN_SOLVE_S = 0.5


@dataclass
class PrimalColumns:
    """``columns``: the support of the last optimal LP, as (configuration, {class: copies});
    ``lp``: that LP's value (None when no LP was solved), ``first_lp``: the value over the groups
    given; ``priced``: the groups added; ``solves``: the master's solves; ``converged``: a whole
    pass found nothing."""

    columns: list[tuple[int, dict[int, int]]] = field(default_factory=list)
    lp: Optional[float] = None
    first_lp: Optional[float] = None
    priced: int = 0
    solves: int = 0
    converged: bool = False


def primal_columns(idx: Index, classes: Classes, columns: list[tuple[int, dict[int, int]]], deadline: float,
                   chunk: int = CHUNK, node_budget: int = NODE_BUDGET) -> PrimalColumns:
    """Column generation at the master's duals over ``columns`` (e.g. the box rounds' groups) until
    ``deadline`` (module docstring); the groups of the last optimal LP's support."""
    out = PrimalColumns()
    pm = PatternModel(idx, classes)
    for k, counts in columns:
        pm.master.add(Column(int(k), counts, float(idx.cost[k])))
    pm.add_singletons()
    master = pm.master
    master.h.setOptionValue("solver", "ipm")
    master.h.setOptionValue("run_crossover", "on")  # a basic solution: its support is a few groups per row
    longest = 0.0
    x: Optional[np.ndarray] = None
    while True:
        t = time.perf_counter()
        if t >= deadline:
            break
        value, pi, mu = master.solve_lp(deadline)
        longest = max(longest, time.perf_counter() - t)
        out.solves += 1
        if not master.lp_optimal or master.last_primal is None:
            break  # (the deadline stopped it: the last optimal LP stands)
        x = np.array(master.last_primal)
        out.lp = value
        if out.first_lp is None:
            out.first_lp = value
        stop_pricing = deadline - max(MIN_SOLVE_S, SOLVE_MARGIN * longest)
        if time.perf_counter() >= stop_pricing:
            break
        new, whole = price_chunk(pm, pi, mu, stop_pricing, chunk, node_budget)
        out.priced += new
        if not new:
            out.converged = whole
            break
    if x is not None:
        cols = master.columns
        out.columns = [(c.config, dict(c.counts)) for i, c in enumerate(cols[: len(x)]) if c is not None and x[i] > 1e-6]
    return out


def price_chunk(pm: PatternModel, pi: np.ndarray, mu: np.ndarray, deadline: float, chunk: int = CHUNK,
                node_budget: int = NODE_BUDGET) -> tuple[int, bool]:
    """One chunk (module docstring): the configurations in order of cheap bound over fixed price at
    the duals ``(pi, mu)``, each priced, their groups joined to ``pm``'s master, until ``chunk`` new
    groups or ``deadline``; (new groups, whether every configuration that could hold one was priced)."""
    idx, classes, master = pm.idx, pm.cl, pm.master
    fixed = idx.cost + idx.node_matrix @ mu
    cheap = cheap_value_bounds(idx, classes.rep, classes.demand, pi)
    order = np.argsort(-(cheap / fixed), kind="stable")
    new = 0
    for k in order.tolist():
        if cheap[k] <= fixed[k] * (1 + 1e-9):
            return new, True  # (descending: none further can hold a group worth its fixed price)
        if new >= chunk or time.perf_counter() >= deadline:
            return new, False
        res = price(pm._items(k, pi, False), float(fixed[k]), max_columns=COLUMNS_PER_CONFIG,
                    node_budget=node_budget, deadline=deadline)
        for _v, counts in res.columns:
            if master.add(Column(k, counts, float(idx.cost[k]))) is not None:
                new += 1
    return new, True
