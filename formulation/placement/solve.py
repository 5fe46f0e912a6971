"""One entry point for every backend: greedy, colgen (pattern model), highs (compact MILP), cpsat.

``solve(instance, options, backend, current)`` returns the plan body and the solve record. The
time limit is a wall-clock limit for the whole call: each backend gets a deadline; HiGHS gets its
own limit and a watchdog that interrupts it at the deadline through HiGHS's interrupt callbacks
(for a run that overruns its own limit), CP-SAT likewise with ``StopSearch``, and the compact models stop
building at the deadline (Pyomo's hand-over of a built model to HiGHS cannot be interrupted: the
MILP build is given under half of the time for that reason). A solve stopped early returns its
best plan, never worse than the greedy warm start, with the certified bound and gap.

``current`` (a plan body) warm-starts the re-optimisation: its groups that are still feasible are
kept as *anchored* groups (same nodes), the greedy admits the other jobs into them or new groups,
and ``move_price_per_job`` is charged for every job of the current plan that ends up elsewhere.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field, replace
from typing import Optional, cast

import numpy as np

from formulation.common import SolveOptions, SolveRecord, SolveStatus
from formulation.placement.evaluate import MODELLED, OWN_MAX_JOBS, OWN_MAX_ROLLOUT_NODES, Config, Group, Index, Solution, plan_cost_unit
from formulation.placement.explain import explain, placeable_alone
from formulation.placement.greedy import Packer, best_greedy, greedy
from formulation.placement.instance import PlacementInstance
from formulation.placement.plan import PlacementPlan, build_plan, config_of, own_config

BACKENDS = ("auto", "fast", "colgen", "highs", "cpsat", "greedy")
# auto: the fast path alone under a short limit (beyond 30 job classes) or with many distinct jobs; else the fast path as
# the warm start of column generation (measured choices: docs/placement.md)
FAST_ONLY_LIMIT_S = 2.0
FAST_ONLY_CLASSES = 600
SMALL_CLASSES = 30  # column generation proves these optimal in well under a second: also under a short limit
FAST_WARM_SHARE = 0.15  # of the limit, at most FAST_WARM_MAX_S, for the fast path before column generation
FAST_WARM_MAX_S = 3.0
#: beyond this many job classes column generation does not converge in the limits (docs/placement.md) and
#: the fast path's large-neighbourhood search gets LNS_SHARE of the limit before it (500 distinct jobs,
#: 30 s: 9,388 $/h with 3 s of search, 9,204 with the fast path alone)
LNS_CLASSES = 200
LNS_SHARE = 0.6
#: ... but from LNS_LONG_S on, LNS_SHARE_LONG: column generation's box-stabilised rounds
#: (:mod:`formulation.placement.boxstab`) then get time enough both to bound the plan and, through the
#: integer master over their groups, to improve it (500 distinct jobs under 60 s, seed 3: distinct-loose
#: 6,748 -> 6,396 $/h and bound gap 38.4% -> 21.5%; distinct 9,158 -> 8,860, gap 14.1%; under 5 s the
#: longer search still won: 6,930 against 7,014)
LNS_LONG_S = 30.0
LNS_SHARE_LONG = 0.3
#: beyond FAST_ONLY_CLASSES, from FLEET_PHASES_MIN_S on and with the compiled pricing
#: (:mod:`formulation.placement.pricing_jit`), the fleet-scale phases (:func:`fleet_shares`): the fast
#: path FLEET_FAST_SHARE of the limit, then the box-stabilised bound
#: (:func:`formulation.placement.boxstab.fleet_bound`), then column generation at the master's duals
#: from the rounds' groups (:mod:`formulation.placement.primalcg`, :func:`fleet_columns_s`), then, over
#: the last FLEET_PRIMAL_AFTER_COLUMNS_SHARE of the limit (FLEET_PRIMAL_SHARE without column generation), a plan from its groups
#: (:mod:`formulation.placement.dive`: the LP-guided dive, FLEET_DIVE_AFTER_COLUMNS_SHARE or FLEET_DIVE_SHARE of that time at most, then
#: the local search), kept when it beats the fast path's. The groups, not the search's time, make the
#: plan. Before column generation (session 40) the dive started from the rounds' groups:
#: 2,000 distinct-loose jobs (2026-12-05, in process, seed 3), fast / rounds / dive and
#: search in seconds: under 60 s the fast path alone 25,508 $/h, 8 / 37 / 15 24,230, 4 / 41 / 15 24,010,
#: 8 / 27 / 25 24,520, 5 / 20 / 35 24,772, 4 / 36 / 20 24,122; under 300 s 90 / 165 / 45 (the split
#: before) 23,406 $/h and bound 18,921, 20 / 220 / 60 23,202 and 19,208. A pricing node budget of
#: 200,000 (rounds of ~1 s) gave 24,414 under 60 s. From 35 s of the solver's share, so that a 40 s
#: command runs them (distinct-loose under 40 s: 24,928 against the fast path's 25,572; under 35 s
#: not measured). When the fast path's plan leaves jobs out after a second share, for capacity, the
#: search keeps the whole limit instead (a bound over every job bounds no plan of fewer)
#: (compared with the solver's share of the limit: `planner plan --time-limit T` reads and writes its
#: files out of the T s)
FLEET_PHASES_MIN_S = 35.0
#: ... at up to FLEET_PHASES_CLASSES job classes; beyond, that times the square of the ratio
#: (:func:`fleet_phases_min_s`): a round prices every configuration over every class, 3-4 s at 2,000
#: distinct jobs and over 40 s at 10,000, where under 60 s one round ran and the dive's plan
#: (236,648 $/h) lost to the fast path's (the command's plan 177,348 against 169,484 by the fast
#: path alone). Between 2,000 and 10,000 classes the threshold is not measured
FLEET_PHASES_CLASSES = 2000
FLEET_FAST_SHARE = 1 / 15
FLEET_PRIMAL_SHARE = 0.2
FLEET_DIVE_ALONE_MIN_S = 15.0  # (without column generation)
#: after column generation: FLEET_PRIMAL_AFTER_COLUMNS_SHARE of the limit, at least FLEET_PRIMAL_MIN_S
#: (under 60 s, 8 s for the dive and search; see FLEET_COLUMNS_SHARE)
FLEET_PRIMAL_AFTER_COLUMNS_SHARE = 0.13
FLEET_PRIMAL_MIN_S = 8.0
#: ... and before them column generation at the master's duals (:mod:`formulation.placement.primalcg`)
#: FLEET_COLUMNS_SHARE of the limit, at most FLEET_COLUMNS_MAX_S (:func:`fleet_columns_s`). 2,000 jobs,
#: seed 3, in process (2026-12-06), from the groups of 30 s of rounds, seconds of column generation +
#: dive and search, distinct-loose / two-types $/h: 0 + 26 (before) 23,982 / 38,512; 8 + 19 23,766 / -;
#: 12 + 15 23,204-23,392 / 37,556; 15 + 12 23,116 / 37,324; 17 + 10 23,214 / 37,212; 21 + 6 26,018 /
#: 37,188 (the search needs its seconds: the dive's plan is 29,000-31,000 before it). With the dive's shrunk
#: copies (session 42) its plan is 25,000-25,500 and the LP's value is what counts: 15 + 12 23,356 / 37,052,
#: 18 + 9 23,136 / 36,796, 20 + 7 23,112 / 36,720
FLEET_COLUMNS_SHARE = 0.32
FLEET_COLUMNS_MAX_S = 60.0
#: ... from this limit on: under 40 s (rounds 17 s, one round) it started from too few groups (distinct-loose:
#: LP 55,375 -> 47,864 in 10 s, 3 solves) and the fast path's plan was kept (26,360 $/h; the dive over the
#: rounds' groups alone gave 24,450 there in session 38)
FLEET_COLUMNS_MIN_LIMIT_S = 50.0
FLEET_DIVE_SHARE = 0.5
FLEET_DIVE_FINISH_SHARE = 0.75
#: ... after column generation: with the dive's shrunk copies (:mod:`formulation.placement.dive`) its plan is
#: within 10% of the LP and 2 s of search from it come within 0.2% of 8 s (distinct-loose, in process), so the
#: dive gets more of a shorter span and column generation the rest (FLEET_COLUMNS_SHARE)
FLEET_DIVE_AFTER_COLUMNS_SHARE = 0.65
FLEET_DIVE_AFTER_COLUMNS_FINISH_SHARE = 0.8
FINISH_S_PER_JOB = 4.5e-5  # measured (2026-12-05, idle): the plan body of 2,000 jobs 0.05 s, of 10,000 0.38 s
#: ... for the other backends, whose finish also runs the load bound past their deadline (at 4.5e-5
#: colgen's 2 s command took 2.2 s at 2,000 jobs, 1.93 s with this)
FINISH_OTHER_S_PER_JOB = 1.5e-4
COMPACT_MAX_JOBS = 30  # the compact models are for small instances: beyond this, auto uses colgen
SHORT_LIMIT_S = 2.0  # at or under this limit a solve runs one solver thread (CPU within the limit)


@dataclass
class Current:
    """The current plan as solver-neutral groups anchored to their ids, and their nodes."""

    groups: list[Group]
    nodes: dict[str, dict]  # group id -> {"rollout": nodes, "train": nodes, "members": {job: its rollout nodes}}
    members: dict[str, list[int]]  # anchor id -> job indices
    placed: set[int]
    dropped: list[str]  # current groups that cannot be kept (pools or members no longer fit)
    configs: dict[str, Config] = field(default_factory=dict)  # group id -> its configuration as read from its pins (config_of)


def read_current(idx: Index, plan: PlacementPlan) -> Current:
    """The current plan's groups on this index: those whose configuration exists and whose members
    are feasible on it (:meth:`Index.feasible`, all groups in one vectorised pass) are kept, the
    others dropped."""
    names = {n: i for i, n in enumerate(idx.names)}
    nodes, members, placed, dropped, configs = {}, {}, set(), [], {}
    cand: list[tuple[int, list[int], str]] = []
    for g in plan.groups:
        js = [names[m.job] for m in g.members if m.job in names]
        placed.update(js)
        nodes[g.id] = {"rollout": list(g.rollout_pool.nodes), "train": list(g.train_pool.nodes),
                       "members": {m.job: list(m.rollout_nodes) for m in g.members}}
        members[g.id] = js
        if not js:
            continue
        c = configs[g.id] = config_of(g)
        k = idx.config_id.get(c)
        if k is None and c.pinned and not c.own:  # equal counts the equal-count configurations do not hold
            k = idx.config_id.get(own_config(c.rollout_type, c.rollout_pool_nodes, c.train_type, c.train_nodes))
        cand.append((-1 if k is None else k, js, g.id))
    feas = idx.feasible_groups([max(k, 0) for k, _, _ in cand], [js for _, js, _ in cand])
    left = {g.id for g in plan.groups if len(members.get(g.id, ())) < len(g.members)}  # a member departed
    groups = []
    for (k, js, gid), ok in zip(cand, feas):
        if k < 0 or not ok:
            dropped.append(gid)
            continue
        if gid in left and idx.configs[k].pinned:
            k = _released(idx, k, js, cast(dict, nodes[gid]["members"]))
        groups.append(Group(k, tuple(js), gid))
    return Current(groups, nodes, members, placed, dropped, configs)


def _released(idx: Index, k: int, js: list[int], pins: dict) -> int:
    """A pinned group a member left: the cheapest configuration of the same pool types, on no more nodes, on which
    the staying members are feasible each on as many rollout nodes of its own as it holds (so none of them moves),
    else ``k`` (an outside probe, session 50: the leaver's nodes stayed paid for, 200 $/h where 160 held)."""
    c0, nodes = idx.configs[k], idx.node_matrix[k]
    held = [len(pins.get(idx.names[j], ())) for j in js]
    best = k
    for k2, c in enumerate(idx.configs):
        if (not c.pinned or (c.rollout_type, c.train_type, c.train_nodes) != (c0.rollout_type, c0.train_type, c0.train_nodes)
                or idx.cost[k2] >= idx.cost[best] - 1e-9 or not (idx.node_matrix[k2] <= nodes).all()):
            continue
        if [idx.own_nodes(k2, j) for j in js] == held and idx.feasible(k2, js):
            best = k2
    return best


def reanchor(idx: Index, sol: Solution, cur: Optional[Current]) -> Solution:
    """Each group of ``sol`` that no current group anchors takes the id and nodes of a current group that no group of
    ``sol`` anchors, on the same pool types and training pool and both pinned or both whole, where every member of
    both keeps at least the rollout nodes it holds (the one sharing the most members with it, at least one): its
    members who were there keep their nodes and do not move. A solver indifferent
    to moves (move price 0) returned such groups unanchored, and the plan said "moving 3 job(s)" where one had moved,
    the staying two put on other nodes (an outside probe, session 50)."""
    if cur is None:
        return sol

    def key(k: int) -> tuple:
        c = idx.configs[k]
        return c.rollout_type, c.train_type, c.train_nodes, c.pinned

    def keeps(g: Group, gid: str, c: Group) -> bool:
        """Every member of both holds at least the rollout nodes it holds now (a pool no smaller; its own count)."""
        new = idx.configs[g.config]
        if not new.pinned:
            return new.rollout_nodes >= len(cur.nodes[gid]["rollout"])
        held = cur.nodes[gid].get("members", {})
        return all(idx.own_nodes(g.config, j) == len(held.get(idx.names[j], ())) for j in set(g.members) & set(c.members))

    used = {g.anchor for g in sol.groups if g.anchor}
    free = {g.anchor: g for g in cur.groups if g.anchor and g.anchor not in used}
    out = []
    for g in sol.groups:
        if g.anchor is None and free:
            best = max(((len(set(g.members) & set(c.members)), gid) for gid, c in free.items()
                        if key(c.config) == key(g.config) and keeps(g, gid, c)), default=(0, ""))
            if best[0] > 0:
                g = Group(g.config, g.members, best[1])
                del free[best[1]]
        out.append(g)
    return replace(sol, groups=out)


def moved_jobs(sol: Solution, cur: Optional[Current]) -> list[int]:
    if cur is None:
        return []
    home = {j: gid for gid, js in cur.members.items() for j in js}
    out = []
    for g in sol.groups:
        for j in g.members:
            if j in home and g.anchor != home[j]:
                out.append(j)
    return sorted(out)


def tighten(idx: Index, sol: Solution, deadline: float = float("inf")) -> Solution:
    """Each group on the cheapest configuration that is feasible and uses no more nodes of any type
    (past ``deadline`` the remaining groups keep their configuration)."""
    out = []
    for i, g in enumerate(sol.groups):
        if i % 16 == 0 and clock() > deadline:
            out.extend(sol.groups[i:])
            break
        nodes = idx.node_matrix[g.config]
        best = g.config
        for k in range(len(idx.configs)):
            if idx.cost[k] < idx.cost[best] - 1e-9 and (idx.node_matrix[k] <= nodes).all() and idx.feasible(k, g.members):
                c, c0 = idx.configs[k], idx.configs[g.config]
                if g.anchor and (c.rollout_type, c.train_type) != (c0.rollout_type, c0.train_type):
                    continue
                best = k
        out.append(Group(best, g.members, g.anchor))
    return Solution(out, list(sol.unplaced), sol.lower_bound)


@dataclass
class Result:
    plan: PlacementPlan
    record: SolveRecord
    solution: Solution
    greedy: Solution
    idx: Optional[Index] = None  # the index the solutions' job and configuration numbers refer to


def warm_start(idx: Index, cur: Optional[Current], deadline: float = float("inf")) -> tuple[Solution, str]:
    """The Weave greedy's plan (the better of its two orders), or the current plan with the other
    jobs admitted; past ``deadline`` the jobs not reached open groups of their own (``cut_short``)."""
    if cur is None:
        return best_greedy(idx, deadline, clock)[0], "greedy"
    pk = Packer(idx)
    for g in cur.groups:
        pk.add_group(g.config, list(g.members), g.anchor)
    return greedy(idx, "arrival", packer=pk, deadline=deadline, clock=clock), "previous-plan"


def clock() -> float:
    """The solver's clock (``time.perf_counter``); tests replace it to check each phase's deadline."""
    return time.perf_counter()


def _jit_available() -> bool:
    from formulation.placement.pricing_jit import available

    return available()


def _dive_and_search(idx: Index, classes, columns: list, warm: Solution, deadline: float, seed: int, progress,
                     bound: Optional[float], columns_until: Optional[float] = None) -> tuple[Solution, str]:
    """The plan of the LP-guided dive over the bound phase's groups, improved by the local search
    until ``deadline`` (:mod:`formulation.placement.dive`), when it beats ``warm`` (the fast path's);
    and the record's words for it. With ``columns_until``, column generation at the master's duals
    (:mod:`formulation.placement.primalcg`) first goes on from those groups until then, and the dive
    starts from its last LP's groups."""
    from formulation.placement.dive import dive
    from formulation.placement.lns import improve as lns_improve

    cg_words = ""
    from_columns = False  # the dive starts from column generation's groups (not the bound phase's)
    if columns_until is not None and time.perf_counter() < columns_until:
        from formulation.placement.primalcg import primal_columns

        tc = time.perf_counter()
        pc = primal_columns(idx, classes, columns, columns_until)
        if pc.columns and pc.lp is not None:
            cg_words = (f"; column generation at the master's duals ({time.perf_counter() - tc:.0f} s, {pc.solves} LP "
                        f"solves, {pc.priced} groups priced" + (", converged" if pc.converged else "")
                        + f"): LP {pc.first_lp:.6g} -> {pc.lp:.6g} $/h over {len(pc.columns)} groups")
            columns, from_columns = pc.columns, True
    t1 = time.perf_counter()
    # the LP over the rounds' groups alone: with the fast path's plan among its columns that integral
    # plan was often the LP's optimum (60 s, 2,000 distinct-loose jobs: the dive returned it, 25,884 $/h,
    # and the search 25,634), without it the dive's plan searched on gave 24,230 (at 300 s 23,406
    # against 23,438 seeded)
    span = max(0.0, deadline - t1)
    # (cut short, the dive's fixed groups and the greedy's admission of the rest, which may run on
    # to FLEET_DIVE_FINISH_SHARE of the time)
    share, finish = ((FLEET_DIVE_AFTER_COLUMNS_SHARE, FLEET_DIVE_AFTER_COLUMNS_FINISH_SHARE) if from_columns
                     else (FLEET_DIVE_SHARE, FLEET_DIVE_FINISH_SHARE))
    dived = dive(idx, classes, columns, [], t1 + share * span, finish_by=t1 + finish * span)
    source = "those" if from_columns else "the bound phase's"
    if dived is None:
        return warm, cg_words + f"; LP-guided dive over {source} groups: cut short by the time limit"
    dive_cost = dived.cost(idx)
    left = len(dived.unplaced)
    if left:
        # jobs the greedy could not place in the nodes the dive's groups left (a tight fleet): the
        # search frees nodes, then the capacity-aware repair places them, then the search again
        # (two-types 2,000 under 60 s: 38,964 $/h with jobs left out, not kept, before this)
        from formulation.placement.repair import repair

        t2 = time.perf_counter()
        dived, _ = lns_improve(idx, dived, t2 + 0.4 * max(0.0, deadline - t2), seed=seed, progress=progress, bound=bound)
        t2 = time.perf_counter()
        dived, _, _ = repair(idx, dived, t2 + 0.3 * max(0.0, deadline - t2), seed)
    found, _ = lns_improve(idx, dived, deadline, seed=seed, progress=progress, bound=bound)
    took = time.perf_counter() - t1
    words = cg_words + (f"; LP-guided dive over {source} {len(columns)} groups ({dive_cost:.6g} $/h"
             + (f", {left} job(s) left for the repair" if left else "") + f"), then local search "
             f"({took:.0f} s in all): {found.cost(idx):.6g} $/h" + (f", {len(found.unplaced)} job(s) left out" if found.unplaced else ""))
    if _score(idx, found) < _score(idx, warm) - 1e-9:
        return found, words + f", kept (the fast path's plan: {warm.cost(idx):.6g} $/h)"
    return warm, words + ", not kept (the fast path's plan is as cheap)"


def fleet_phases_min_s(n_classes: int) -> float:
    """The least limit under which the fleet-scale phases run for ``n_classes`` job classes."""
    return FLEET_PHASES_MIN_S * max(1.0, n_classes / FLEET_PHASES_CLASSES) ** 2


def fleet_shares(limit_s: float) -> tuple[float, float]:
    """The fleet-scale phases' split of a limit of ``limit_s`` (module constants): (the fast
    path's seconds, the seconds of the plan's phases: column generation at the master's duals,
    :func:`fleet_columns_s`, then the dive and its search); the box rounds get what lies between."""
    columns_s = fleet_columns_s(limit_s)
    return FLEET_FAST_SHARE * limit_s, _fleet_dive_s(limit_s, columns_s > 0) + columns_s


def _fleet_dive_s(limit_s: float, after_columns: bool) -> float:
    """The dive's and its search's seconds: after column generation FLEET_PRIMAL_AFTER_COLUMNS_SHARE of
    the limit, at least FLEET_PRIMAL_MIN_S; without it FLEET_PRIMAL_SHARE, at least
    FLEET_DIVE_ALONE_MIN_S; at most half the limit."""
    least, share = ((FLEET_PRIMAL_MIN_S, FLEET_PRIMAL_AFTER_COLUMNS_SHARE) if after_columns
                    else (FLEET_DIVE_ALONE_MIN_S, FLEET_PRIMAL_SHARE))
    return min(max(least, share * limit_s), 0.5 * limit_s)


def fleet_columns_s(limit_s: float) -> float:
    """The seconds of column generation at the master's duals (:mod:`formulation.placement.primalcg`)
    within :func:`fleet_shares`' plan phases: none under FLEET_COLUMNS_MIN_LIMIT_S, else
    FLEET_COLUMNS_SHARE of the limit, at most FLEET_COLUMNS_MAX_S and at most as long as the box
    rounds get."""
    if limit_s < FLEET_COLUMNS_MIN_LIMIT_S:
        return 0.0
    rest = limit_s - FLEET_FAST_SHARE * limit_s - _fleet_dive_s(limit_s, True)
    return max(0.0, min(FLEET_COLUMNS_SHARE * limit_s, FLEET_COLUMNS_MAX_S, 0.5 * rest))


def _real(deadline: float) -> float:
    """A deadline on :func:`clock` as a ``time.perf_counter`` deadline (the backends' clock): the
    same time left."""
    return time.perf_counter() + (deadline - clock())


def solve(inst: PlacementInstance, options: SolveOptions, backend: str = "auto", current: Optional[PlacementPlan] = None,
          progress=None, idx: Optional[Index] = None) -> Result:
    """The plan for ``inst`` within ``options.time_limit_s`` of wall time.

    Jobs that fit nowhere alone (no configuration the fleet can hold meets their SLO with their
    DRAM: :func:`~formulation.placement.explain.placeable_alone`) are proven unplaceable; they are
    explained and left out of the solve, so the bound and the gap are over the jobs that can be
    placed and are reported whenever a plan places all of those.

    The limit covers every phase: the Weave greedy (warm start and baseline) stops at its share of
    it, the backend gets what is left minus an estimate of building the plan body
    (``FINISH_S_PER_JOB``), and what a deadline cut short is listed in the record's message
    ("cut short by the time limit: ...").

    ``progress(phase, incumbent, bound)``, when given, is called now and then during the fast path
    (the CLI shows it as a status line on a terminal). ``idx``: ``inst``'s index when the caller
    built it already (e.g. to refuse jobs that fit nowhere alone before solving)."""
    t0 = clock()
    note = ""
    if options.time_limit_s <= SHORT_LIMIT_S and options.threads > 1:
        # a short limit is a CPU budget too: solver threads beyond one would spend it several times over
        note = f"; {options.threads} solver threads cut to 1 (a limit of {SHORT_LIMIT_S:g} s or less holds in CPU time too)"
        options = replace(options, threads=1)
    res = _solve_all(inst, options, backend, current, t0, progress, idx)
    res.record.message += note
    return res


def _solve_all(inst: PlacementInstance, options: SolveOptions, backend: str, current: Optional[PlacementPlan], t0: float,
               progress, idx: Optional[Index] = None) -> Result:
    """:func:`solve` after the options are settled: the jobs that fit nowhere alone are left out."""
    idx = Index(inst) if idx is None else idx
    alone = placeable_alone(idx)
    if alone.all() or idx.n == 0:
        return _solve(inst, options, backend, current, t0, idx, progress)
    keep = np.flatnonzero(alone)
    sub = inst.model_copy(update={"jobs": [inst.jobs[j] for j in keep]})
    res = _solve(sub, options, backend, current, t0, idx.restrict(sub, keep), progress)
    sub_idx = res.idx
    assert sub_idx is not None  # _solve returns the index it solved on
    keep_l = keep.tolist()
    back = lambda js: [keep_l[j] for j in js]  # noqa: E731
    lost = [int(j) for j in np.flatnonzero(~alone)]
    conf = [idx.config_id[c] for c in sub_idx.configs]  # the sub-instance's configurations in the whole index
    remap = lambda s: Solution([Group(conf[g.config], tuple(back(g.members)), g.anchor)  # noqa: E731
                                for g in s.groups], back(s.unplaced) + lost, s.lower_bound, back(s.moved))
    res.solution, res.greedy, res.idx = remap(res.solution), remap(res.greedy), idx
    res.plan.unplaced = res.plan.unplaced + [explain(idx, j) for j in lost]
    res.record.message = (res.record.message + f"; {len(lost)} job(s) fit nowhere alone: explained and left out of the "
                          "bound (the gap is over the jobs that can be placed)")
    res.record.wall_time_s = clock() - t0
    return res


def _solve(inst: PlacementInstance, options: SolveOptions, backend: str, current: Optional[PlacementPlan], t0: float,
           idx: Optional[Index], progress=None) -> Result:
    idx = idx if idx is not None else Index(inst)
    # leave time to finish: the plan body (closed-form cycle times, node names), explanations
    per_job = FINISH_S_PER_JOB if backend in ("auto", "fast") else FINISH_OTHER_S_PER_JOB
    finish = min(0.3 * options.time_limit_s, per_job * idx.n + 0.02)
    deadline = t0 + options.time_limit_s - finish
    cur = read_current(idx, current) if current is not None else None
    if backend not in BACKENDS:
        raise ValueError(f"unknown backend {backend!r}; use one of {', '.join(BACKENDS)}")
    if idx.n == 0:  # nothing to place: the empty plan, whatever the backend
        plan = build_plan(idx, Solution([]), [], None, greedy_cost=0.0, lower_bound=0.0)
        record = SolveRecord(backend=backend, status=SolveStatus.OPTIMAL, objective=0.0, best_bound=0.0,
                             wall_time_s=clock() - t0, time_limit_s=options.time_limit_s, message="no jobs")
        return Result(plan, record, Solution([]), Solution([]), idx)
    fast_msg = ""
    cut_short: list[str] = []
    if backend in ("auto", "fast"):
        # the fast path: no Weave greedy over every job (seconds at thousands of jobs); the plan
        # reports the FFD's cost where the greedy's would be
        from formulation.placement.colgen import job_classes
        from formulation.placement.fast import fast_solve

        classes = job_classes(idx) if backend == "auto" and idx.n else None
        n_classes = len(classes.rep) if classes is not None else 0
        fast_only = backend == "fast" or n_classes > FAST_ONLY_CLASSES or (
            options.time_limit_s <= FAST_ONLY_LIMIT_S and n_classes > SMALL_CLASSES)
        lns_share = LNS_SHARE_LONG if options.time_limit_s >= LNS_LONG_S else LNS_SHARE
        warm_s = (lns_share * options.time_limit_s if n_classes > LNS_CLASSES
                  else min(FAST_WARM_MAX_S, FAST_WARM_SHARE * options.time_limit_s))
        share = deadline if fast_only else t0 + warm_s
        bound_phase = (backend == "auto" and cur is None and n_classes > FAST_ONLY_CLASSES
                       and options.time_limit_s >= fleet_phases_min_s(n_classes) and _jit_available())
        if bound_phase:
            fast_s, primal_s = fleet_shares(options.time_limit_s)
            share = t0 + fast_s
        if cur is not None:
            warm0, warm_name = warm_start(idx, cur, t0 + 0.5 * (share - t0))
            warm0.moved = moved_jobs(warm0, cur)
            if warm0.cut_short:
                cut_short.append(warm0.cut_short)
        else:
            warm0, warm_name = None, "fast path"
        warm, fst = fast_solve(idx, _real(share), warm0, seed=options.seed, progress=progress)
        # jobs left out: for capacity, or because the fast path's share ended before its repair
        # placed them (a busy machine: 1/15 of the limit is a few seconds; a CI run under load lost
        # the bound phase to one job left out, 2026-12-05). The search goes on from this plan for
        # another such share, and the bound phase runs if the plan then holds every job; jobs still
        # left out are left out for capacity: a bound over every job bounds no plan of fewer, so
        # the time the bound phase would have had goes to the search, on from this plan
        for until, instead in ((share + fast_s if bound_phase else 0.0, False), (deadline, True)):
            if not (bound_phase and warm.unplaced):
                break
            more, fst_more = fast_solve(idx, _real(until), warm, seed=options.seed, progress=progress,
                                        warm_name=fst.constructed + (", searched on in place of the bound phase" if instead else ""))
            warm, fst, bound_phase = more, fst_more.continued_from(fst), not instead
        warm.moved = moved_jobs(warm, cur)
        if warm0 is None:
            warm_name = "fast path"
        fast_msg = fst.message()
        cut_short += fst.cut_short or []
        # the Weave greedy is not run on the fast path alone (seconds at thousands of jobs): the
        # message has the FFD's cost instead
        base_greedy = warm if fast_only else greedy(idx, "arrival", deadline=t0 + 0.5 * (deadline - t0), clock=clock)
        if base_greedy.cut_short and not fast_only:
            cut_short.append(f"the Weave greedy baseline ({base_greedy.cut_short})")
        greedy_cost = None if fast_only or base_greedy.cut_short else base_greedy.cost(idx)
        fast_lb = fst.bound
        if bound_phase:
            # a bound worth reading at fleet scale: box-stabilised rounds from the load bound's duals
            from formulation.placement.boxstab import fleet_bound

            t1 = clock()
            assert classes is not None  # (the bound phase needs auto, which computed them)
            primal_from = deadline - primal_s
            blb, res = fleet_bound(idx, classes.rep, classes.demand, classes.of_job, warm.groups, _real(primal_from))
            if blb is not None and res is not None:
                fast_msg += (f"; box-stabilised bound from the load bound's duals ({clock() - t1:.0f} s): {res.rounds} "
                             f"rounds" + (f" (+{res.column_rounds} column rounds)" if res.column_rounds else "")
                             + f", bound {res.bound:.6g}")
                if fast_lb is None or blb > fast_lb:
                    fast_lb = blb
                columns_s = fleet_columns_s(options.time_limit_s)
                cg_until = _real(deadline - (primal_s - columns_s)) if columns_s > 0 else None
                warm, dive_words = _dive_and_search(idx, classes, res.columns, warm, _real(deadline), options.seed,
                                                    progress, fast_lb, columns_until=cg_until)
                fast_msg += dive_words
        backend = "fast" if fast_only else "colgen"
    else:
        # the Weave greedy: the whole limit for the greedy backend, else under half of it (the
        # backend's model and search get the rest); its arrival order is also the baseline
        warm_deadline = deadline if backend == "greedy" else t0 + 0.4 * (deadline - t0)
        warm, warm_name = warm_start(idx, cur, warm_deadline)
        warm.moved = moved_jobs(warm, cur)
        greedy_warm = warm
        if warm.cut_short:
            cut_short.append(warm.cut_short)
        if cur is None and backend != "greedy":
            # the fast path's constructions are cheaper than the Weave greedy on distinct jobs
            # (docs/placement.md) and take a fraction of its time: the backend starts from the
            # cheapest, so no backend returns worse than first-fit-decreasing when it had the time
            # (a greedy cut short opened a group per job: the first fit also costs less to write)
            warm, warm_name = _cheapest_construction(idx, warm, warm_name, deadline, cut_short)
        # the baseline: the arrival order again (the warm start may be the decreasing one), unless
        # the warm start was cut short already (then the deadline has passed: it is the baseline)
        base_greedy = (greedy_warm if greedy_warm.cut_short and cur is None
                       else greedy(idx, "arrival", deadline=warm_deadline, clock=clock))
        greedy_cost = None if base_greedy.cut_short else base_greedy.cost(idx)
        fast_lb = None
    lb = None
    pen_lb: Optional[float] = None  # the backend's own bound on the penalised objective (:func:`_score`)
    status = SolveStatus.FEASIBLE
    message = ""
    sol = warm
    if backend == "greedy":
        sol, status, message = warm, SolveStatus.FEASIBLE, f"Weave greedy admission ({warm_name} order)"
    elif backend == "fast":
        sol, status, message, lb = warm, SolveStatus.FEASIBLE, fast_msg, fast_lb
    elif backend == "colgen" and clock() >= deadline:
        lb = fast_lb  # the fast path's load bound still holds (None off the fast path: the load bound below)
        message = "column generation: not started, no time left (the warm start stands)"
        cut_short.append("the colgen backend (no time left to start it)")
    elif backend == "colgen":
        from formulation.placement.boxstab import REL_GAP as BOX_REL_GAP
        from formulation.placement.colgen import PatternModel, job_classes

        placed = cur.placed if cur else set()
        pm = PatternModel(idx, job_classes(idx, placed), inst.move_price_per_job, options.threads)
        anchors = cur.members if cur else {}
        bound_free = None
        if inst.move_price_per_job > 0 and cur is not None:
            # the bound under move charges prices against distorted duals; the move-free problem's
            # LP bound is also valid (moves only add cost) and usually much tighter
            share = clock() + 0.25 * (deadline - clock())
            free_model = PatternModel(idx, job_classes(idx), 0.0, options.threads)
            bound_free = free_model.lp_bound(_real(share), best_greedy(idx, share, clock)[0])
        pm.progress, pm.progress_incumbent = progress, warm.cost(idx)
        found, st = pm.solve(_real(deadline), warm, anchors, options.mip_gap)
        own = [b for b in (st.lower_bound, bound_free) if b is not None and b > -1e300]
        pen_lb = max(own) if own else None
        bounds = own + ([fast_lb] if fast_lb is not None else [])
        lb = max(bounds) if bounds else None
        if found is not None:
            found = tighten(idx, found, deadline)
            found.moved = moved_jobs(found, cur)
            if _score(idx, found) <= _score(idx, warm) + 1e-9:
                sol = found
        if fast_msg and cur is None and _score(idx, base_greedy) < _score(idx, sol) - 1e-9:
            sol = base_greedy  # a fast path cut short by a loaded machine: the Weave greedy is the floor
        status = SolveStatus.OPTIMAL if st.proven else SolveStatus.FEASIBLE
        lp_txt = f"LP {st.lp_value:.6g}" if st.lp_value is not None else "no LP solved to optimality in the time left"
        box_txt = (f"box-stabilised rounds from the load bound's duals: {st.box_rounds}, bound {st.box_bound:.6g}"
                   f"{f' (the capacity-free LP to {BOX_REL_GAP:.1%})' if st.box_converged else ''}; " if st.box_rounds else "")
        message = (f"column generation: {box_txt}{st.rounds} rounds, {st.columns} columns, {lp_txt}"
                   f"{' (converged)' if st.lp_converged else ''}; "
                   + (f"every pattern of reduced cost <= {st.ladder_gap:.4g} enumerated ({st.enumerated}); "
                      if st.ladder_gap is not None else "")
                   + ("optimality proven; " if st.proven else "")
                   + (f"integer master: {st.mip_status}" if st.mip_status else "no integer master needed")
                   + ("; stopped by the watchdog" if st.watchdog_fired and "watchdog" not in st.mip_status else ""))
    elif backend in ("highs", "cpsat"):
        import importlib

        compact = importlib.import_module("formulation.placement.milp" if backend == "highs" else "formulation.placement.cpsat")
        found, status, lb, message = compact.solve_compact(idx, options, _real(deadline), warm, cur)
        pen_lb = lb
        if found is None and status is not SolveStatus.INFEASIBLE:
            if status is SolveStatus.NOT_SOLVED:
                cut_short.append(f"the {backend} backend (no plan of its own in the time left)")
            status = SolveStatus.FEASIBLE
            message += f"; no plan from the solver in time: the {warm_name} plan is returned"
        if found is not None:
            found.moved = moved_jobs(found, cur)
            if status is SolveStatus.OPTIMAL and lb is None:
                pen_lb = _score(idx, found)  # CP-SAT's scaled bound is dropped: its proof is the plan's own score
            if _score(idx, found) <= _score(idx, warm) + 1e-9:
                sol = found
            else:  # stopped early with a worse incumbent than the warm start: keep the warm start
                status = SolveStatus.FEASIBLE
                message += f"; kept the {warm_name} plan (cheaper than the solver's incumbent)"
    if fast_msg and backend != "fast":
        message = fast_msg + "; then " + message
    if clock() > deadline and backend in ("colgen", "highs", "cpsat") and not any(backend in c for c in cut_short):
        cut_short.append(f"the {backend} backend (stopped at the deadline with its best plan)")
    extra = [c for c in cut_short if c not in message]
    if extra:
        message += "; cut short by the time limit: " + "; ".join(extra)
    if sol.unplaced:
        from formulation.placement.fast import LEFTOVER_S_PER_JOB

        # the three moves while the solver's time lasts, less what opening groups and explaining the
        # jobs then left out take (reserved by the fast path too)
        sol = place_leftovers(idx, sol, _real(deadline - LEFTOVER_S_PER_JOB * len(sol.unplaced)))
    sol = reanchor(idx, sol, cur)
    sol.moved = moved_jobs(sol, cur)
    free = dict(idx.capacity)
    for t, n in idx.nodes_used(sol.groups).items():
        free[t] -= n
    unplaced = [explain(idx, j, free) for j in sol.unplaced]
    obj = _objective(idx, sol)
    if idx.n and (sol.unplaced or (status is not SolveStatus.OPTIMAL and (lb is None or fast_lb is None))):
        # a bound with every plan, at least the load bound (cheap, and on distinct jobs often above
        # what column generation proved before converging; the only one of the greedy and of a
        # compact model too big to build); one step when the time is up (0.08 s at 10,000 jobs).
        # A plan that leaves jobs out for capacity (not the ones that fit nowhere alone: those were
        # taken out before) gets it over the jobs it places -- what placing exactly those costs at
        # least; every other bound covered all jobs.
        from formulation.placement.fast import LOAD_BOUND_STEPS, load_bound

        placed_jobs = sorted(set(range(idx.n)) - set(sol.unplaced))
        load_lb = load_bound(idx, jobs=placed_jobs, iterations=LOAD_BOUND_STEPS, deadline=_real(max(clock(), deadline)))
        if sol.unplaced:
            lb = load_lb
            if pen_lb is not None:
                # the backend's bound on cost + penalty x unplaced also bounds every plan that places
                # exactly these jobs: cost >= pen_lb - penalty x (jobs left out)
                over = pen_lb - idx.penalty * len(sol.unplaced)
                lb = over if lb is None or over > lb else lb
            message += (f"; bound over the {len(placed_jobs)} job(s) placed ({len(sol.unplaced)} left out for capacity: "
                        "the gap is over the jobs placed)")
        elif load_lb is not None and (lb is None or load_lb > lb):
            lb = load_lb
    if status is SolveStatus.OPTIMAL and not sol.unplaced:
        lb = obj if lb is None or lb > obj - 1e-6 * max(1.0, obj) or backend == "colgen" else lb
    lb, status, note = certify(idx, obj, lb, status, bool(sol.unplaced), options.mip_gap)
    message += note
    if greedy_cost is not None and len(base_greedy.unplaced) > len(sol.unplaced):
        # a greedy plan that leaves more jobs out is cheaper for it: its cost is no baseline for this plan
        message += (f"; Weave's greedy admission leaves {len(base_greedy.unplaced) - len(sol.unplaced)} more job(s) out "
                    f"({greedy_cost:.6g} $/h for the rest: no baseline)")
        greedy_cost = None
    plan = build_plan(idx, sol, unplaced, cur.nodes if cur else None, greedy_cost=greedy_cost,
                      lower_bound=lb, moved=sol.moved)
    record = SolveRecord(backend=backend, status=status, objective=obj, best_bound=lb,
                         wall_time_s=clock() - t0, time_limit_s=options.time_limit_s, warm_start=warm_name, message=message)
    return Result(plan, record, sol, base_greedy, idx)


def gap_of(obj: float, lb: float) -> float:
    """The record's relative gap (:attr:`formulation.common.SolveRecord.gap`)."""
    return abs(obj - lb) / max(abs(obj), 1e-9)


#: what an optimal status and a bound cover, said in the record of every optimal plan (a valid plan outside the
#: modelled configurations may cost less: :data:`formulation.placement.evaluate.MODELLED`)
SCOPE_NOTE = (f"; optimal among the configurations the optimisers build ({MODELLED}); valid plans outside them "
              "(a member on more rollout nodes than its own count, or on part of a training pool) are not covered")


def scope_size_note(n_jobs: int) -> str:
    """What the instance's size takes out of :data:`SCOPE_NOTE`: beyond ``evaluate.OWN_MAX_JOBS`` jobs the
    own-sized configurations are not built (``n_jobs``: ``Index.own_left_out``, 0 when they are)."""
    if not n_jobs:
        return ""
    return (f"; at {n_jobs} jobs (over {OWN_MAX_JOBS}) the own-sized configurations are left out: members on "
            "different rollout counts of their own are not covered")


def scope_cap_note(pinned_members_max: int) -> str:
    """What the instance's ``pinned_members_max`` takes out of :data:`SCOPE_NOTE`: the own-sized pools hold at most
    that many rollout nodes (each member at least one), so a group of that many members or fewer on more rollout
    nodes of their own (valid: the cap counts members) is outside the claim; 0: no pinned member at all."""
    if pinned_members_max >= OWN_MAX_ROLLOUT_NODES:
        return ""
    if pinned_members_max == 0:
        return "; this instance's pinned_members_max 0 leaves out every pinned configuration"
    return (f"; this instance's pinned_members_max {pinned_members_max} caps those pools at {pinned_members_max} "
            f"rollout node(s): groups of up to {pinned_members_max} pinned members on more rollout nodes than that "
            "are not covered")


def certify(idx: Index, obj: float, lb: Optional[float], status: SolveStatus, left_out: bool,
            mip_gap: float) -> tuple[Optional[float], SolveStatus, str]:
    """The bound rounded up to the cost unit and capped at ``obj``, and a status that agrees with
    the gap they give: optimal only when the gap (over the jobs placed, the record's objective) is
    within ``mip_gap`` (at least 1e-9), a plan placing every job within it is optimal. A backend's
    "optimal" that the record's bound does not certify (a proof on the penalised objective, the
    gap over the jobs placed) becomes feasible, and the note says so."""
    if lb is not None:
        lb = _round_up_to_cost_unit(idx, lb)
    if lb is not None and lb > obj:  # rounding: a bound never exceeds the plan it certifies
        lb = obj
    tol = max(mip_gap, 1e-9)
    within_gap = lb is not None and gap_of(obj, lb) <= tol
    if within_gap and not left_out:
        return lb, SolveStatus.OPTIMAL, SCOPE_NOTE + scope_cap_note(idx.inst.pinned_members_max) + scope_size_note(idx.own_left_out)
    if status is SolveStatus.OPTIMAL and not within_gap:
        gap = "no bound" if lb is None else f"gap {100 * gap_of(obj, lb):.4g}%"
        return lb, SolveStatus.FEASIBLE, (f"; the solver's optimality (with the penalty for the jobs left out) is not "
                                          f"certified on the cost of the jobs placed ({gap}): status feasible")
    return lb, status, ""


def _cheapest_construction(idx: Index, warm: Solution, warm_name: str, deadline: float,
                           cut_short: list[str]) -> tuple[Solution, str]:
    """The cheapest of the Weave greedy's plan ``warm``, the first fit (tightest SLO first),
    best-fit FFD and beyond 500 jobs the flat best fit (tightest SLO first, every pair). A best fit runs only
    when the time left is at least 2.5x what the first fit took (:func:`formulation.placement.fast.fast_solve`'s
    rule) and is dropped when the deadline cut it short; what replaced a cut-short greedy is said in ``cut_short``."""
    from formulation.placement.fast import FLAT_BEST_X, ffd_order, pack
    from formulation.placement.flatbest import flat_best_fit
    from formulation.placement.flatfit import flat_first_fit

    t = clock()
    ff, ff_cut = flat_first_fit(idx, deadline=_real(deadline))
    took = clock() - t
    best, name = warm, warm_name
    if _score(idx, ff) < _score(idx, best) - 1e-9:
        best, name = ff, "first fit"
    if not ff_cut and deadline - clock() >= 2.5 * took:
        ffd = pack(idx, ffd_order(idx), max_pairs=2 if idx.n > 500 else 16, deadline=_real(deadline))
        if clock() <= deadline and _score(idx, ffd) < _score(idx, best) - 1e-9:
            best, name = ffd, "FFD best fit"
    if idx.n > 500 and not ff_cut and deadline - clock() >= FLAT_BEST_X * took:
        # tightest-SLO-first best fit over every pair, pools free to grow (formulation.placement.flatbest)
        bf = flat_best_fit(idx, deadline=_real(deadline))
        if bf is not None and _score(idx, bf) < _score(idx, best) - 1e-9:
            best, name = bf, "best fit"
    if warm.cut_short and best is not warm:
        cut_short.append(f"the warm start: the {name.replace('FFD best fit', 'best-fit FFD')} replaced the cut-short greedy"
                         + (" (itself narrowed past the deadline)" if ff_cut and best is ff else ""))
    return best, name


def place_leftovers(idx: Index, sol: Solution, deadline: float = float("inf")) -> Solution:
    """Try every job a solver left out in what its plan leaves: the three admission moves against
    its groups and the free nodes (joins into own-sized groups too: ``Packer(own_joins=True)``), until ``deadline`` (``time.perf_counter``); past it only the
    third, a new group on the free nodes, so a job that fits alone in the free nodes is always
    placed. Only then are the jobs still left out explained, so no explanation is a shortage of
    nothing. (The three moves cost ~0.7 ms a job at 2,000 jobs and ~0.8 ms at 10,000, and placed 12
    of 182 and 6 of 736 jobs a tight fleet's fast path left out (2026-12-06): after the deadline
    they took the whole command past its limit.)"""
    pk = Packer(idx, own_joins=True)
    pk.add_groups(sol.groups)
    for j in sol.unplaced:
        if time.perf_counter() < deadline:
            pk.admit(j)
        else:
            pk.open_alone(j)
    out = pk.solution()
    return Solution(out.groups, out.unplaced, sol.lower_bound, sol.moved)


def _round_up_to_cost_unit(idx: Index, lb: float) -> float:
    """Every plan that places all jobs costs a sum of configuration costs (and move prices): a whole
    multiple of their greatest common divisor. A bound below the unplaced-job penalty can therefore
    be rounded up to that multiple (plans leaving a job out cost more than the penalty anyway)."""
    import math

    unit = plan_cost_unit(idx)
    if unit is None or not math.isfinite(lb):
        return lb
    # the tolerance keeps a bound a rounding error above a multiple (an LP optimum that is one) from
    # jumping to the next multiple
    rounded = math.ceil(lb / unit - 1e-6) * round(unit * 1000) / 1000
    return rounded if rounded <= idx.penalty else lb


def _objective(idx: Index, sol: Solution) -> float:
    return idx.groups_cost(sol.groups) + idx.inst.move_price_per_job * len(sol.moved)


def _score(idx: Index, sol: Solution) -> float:
    return _objective(idx, sol) + idx.penalty * len(sol.unplaced)
