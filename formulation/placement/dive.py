"""A plan from the bound phase's groups at fleet scale: an LP-guided dive, then the local search.

Why. Beyond column generation's reach (:mod:`formulation.placement.solve`: over 600 job classes)
the fast path's search from a first fit stalls well above the pattern LP: on 2,000 distinct-loose
jobs it gives 25,508 $/h after 60 s and 25,436 after a 15-minute search, while the LP over the
groups the box-stabilised rounds priced (:func:`formulation.placement.boxstab.fleet_bound`, 200 s)
is 23,751 and the certified bound 19,232. The groups the LP picks are what the search never builds.

The dive rounds that LP (the master of :mod:`formulation.placement.colgen`, capacity rows
included, over the rounds' groups, a singleton per class and the groups of a plan when the caller
gives one; the fleet-scale solve gives none: a plan's integral groups were often the LP's optimum
when the rounds had priced few groups, and the dive then returned that plan):

1. solve the LP;
2. fix to one copy every group at ``x >= FIX_AT`` (at most ``TOP`` when none is), largest first,
   and drop every group that shares a job class with a fixed one (a job is placed once) or needs
   more nodes than the fixed ones leave (two groups at 0.8 may fit the fleet where two at 1 do not);
   each group the LP used (``x > 0``) that shares a job class with a fixed one leaves a *shrunk*
   copy: its other classes on its configuration at its price (a group with members removed is
   still feasible), so the jobs it held keep partners in the next LP;
3. repeat until no group is fractional or the deadline comes.

The jobs no fixed group holds are admitted by the greedy
(:meth:`formulation.placement.colgen.PatternModel.round_and_repair`), each group's nodes counted
against the fleet, so the plan is valid by construction. The dive's
first groups are the LP's; its last ones are poor (the LP's value climbs from 23,751 to 29,794 as
it fixes), and the local search (:func:`formulation.placement.lns.improve`) then eliminates them
into the others' slack: 23,466 $/h after 30 s of search on that instance (in process, by hand), 7.7%
below the 15-minute search's plan. (A dive stopped after fixing 156 groups, the other 787 jobs
admitted by the greedy: 32,030 $/h, then 25,118 after the same 30 s of search.)

Shrunk copies (2026-12-06, in process, 2,000 jobs, from the groups of 30 s of rounds and 15 s of
:mod:`formulation.placement.primalcg`, LP 22,919 / 36,627 $/h): without them the dive dropped the
groups that shared a job with a fixed one, the jobs they held were left with few groups and the
LP climbed to 29,704 $/h (distinct-loose; two-types 42,304); with them the dive ends at 25,224
(39,040), and 6 s of search from it gave 23,292-23,304 against 23,524-23,634 (seeds 0-2;
two-types 37,108-37,140 against 37,216-37,228). The dive takes 0.1-0.8 s longer (more groups).
On the same configuration, not the cheapest that holds the rest: choosing that for ~2,000 copies
cost the dive its deadline (distinct-loose 25,436 after the search).
"""

from __future__ import annotations

import time
from typing import Optional

import numpy as np

from formulation.placement.colgen import Classes, PatternModel
from formulation.placement.evaluate import Group, Index, Solution
from formulation.placement.master import Column

#: groups at this share of a copy or more are fixed together
FIX_AT = 0.8
#: ... and when none is, this many of the largest
TOP = 20


def dive(idx: Index, classes: Classes, columns: list[tuple[int, dict[int, int]]], seed_groups: list[Group],
         deadline: float, fix_at: float = FIX_AT, top: int = TOP, finish_by: Optional[float] = None,
         shrink: bool = True) -> Optional[Solution]:
    """The plan of the dive in the module docstring over ``columns`` ((configuration, {class:
    copies}), e.g. the box rounds' groups) and ``seed_groups`` (a plan's), for the job classes
    ``classes`` of ``idx``. When ``deadline`` stops the dive after it fixed some groups, the plan
    is those groups and the greedy's admission of the other jobs; None when it stops the first
    LP. The greedy admits until ``finish_by`` (by default ``deadline``; the jobs left then open
    groups of their own). ``shrink``: the shrunk copies of step 2 (False: the groups are only dropped)."""
    pm = PatternModel(idx, classes)
    pm.add_groups(seed_groups, {})
    for k, counts in columns:
        pm.master.add(Column(int(k), counts, float(idx.cost[k])))
    pm.add_singletons()
    master = pm.master
    cols = master.columns
    covered: set[int] = set()
    room = np.array(pm.cap, dtype=float)  # nodes per type the fixed groups leave
    chosen: list[int] = []  # the columns fixed at one copy
    pm.deadline = deadline if finish_by is None else max(deadline, finish_by)
    # the first LP by the interior point method with crossover (a fresh master: 0.2-0.3 s at 2,000
    # classes and ~5,700 groups where the dual simplex took 1.2 s), the re-solves by the dual simplex
    # from its basis
    master.h.setOptionValue("solver", "ipm")
    master.h.setOptionValue("run_crossover", "on")
    while True:
        if time.perf_counter() < deadline:
            master.solve_lp(deadline)
            master.h.setOptionValue("solver", "choose")
        if time.perf_counter() >= deadline or not master.lp_optimal or master.last_primal is None:
            # stopped: the groups fixed so far (every LP since held them at one copy, within the
            # capacity rows) and the greedy for the rest; 2,000 distinct jobs with 6,000 groups
            # (dive cut short after 7.5 s) gave no plan at all before this
            if not chosen:
                return None
            x = np.zeros(len(cols))
            x[chosen] = 1.0
            return pm.round_and_repair(x, {})
        x = master.last_primal
        live = [i for i in np.flatnonzero(x > 1e-6).tolist() if cols[i] is not None and not set(cols[i].counts) <= covered]
        if not any(abs(x[i] - round(x[i])) > 1e-6 for i in live):
            break
        fixed = 0
        for i in sorted(live, key=lambda i: -x[i]):
            if x[i] < fix_at and fixed >= top:
                break
            cs = set(cols[i].counts)
            nodes = idx.node_matrix[cols[i].config]
            if cs & covered or (nodes > room + 1e-9).any():
                master.h.changeColBounds(i, 0.0, 0.0)  # shares a job class with a fixed group, or no room left
                continue
            covered |= cs
            room -= nodes
            master.h.changeColBounds(i, 1.0, 1.0)
            chosen.append(i)
            fixed += 1
            if shrink:
                _shrunk_copies(master, idx, live, i, cs, covered)
        if not fixed:
            break
    # the fixed groups (the LP's capacity rows hold them), then the greedy admits the jobs they leave
    return pm.round_and_repair(master.last_primal, {})


def _shrunk_copies(master, idx: Index, live: list[int], fixed: int, classes_fixed: set[int], covered: set[int]) -> int:
    """Step 2's shrunk copies: each LP group of ``live`` but ``fixed`` that shares a class with the
    group just fixed, without the classes ``covered`` now, on its configuration at its price (a
    subset of a feasible group is feasible); the copies added (``master.add`` skips duplicates)."""
    cols = master.columns
    added = 0
    for o in live:
        col = cols[o]
        if o == fixed or col is None or not classes_fixed.intersection(col.counts):
            continue
        rest = {c: n for c, n in col.counts.items() if c not in covered}
        if rest and master.add(Column(col.config, rest, float(idx.cost[col.config]))) is not None:
            added += 1
    return added
