"""The scalable formulation: set partitioning over group patterns, by column generation.

Sets: job classes ``c`` (jobs with identical phase tables, DRAM, SLO and current-plan status,
``d_c`` jobs each); configurations ``k``; GPU types ``t``; patterns ``p`` (a configuration
``k_p`` and class counts ``m_cp`` forming a feasible group, :mod:`formulation.placement.evaluate`).

Master (restricted to the patterns generated so far; :mod:`formulation.placement.master`)::

    min  sum_p (c_{k_p} + move_p) lambda_p + P sum_c u_c
    s.t. sum_p m_cp lambda_p + u_c >= d_c        (cover_c: every job placed; u_c: left unplaced)
         sum_p n_{t,k_p} lambda_p <= cap_t       (capacity_t)
         lambda_p, u_c >= 0 (integer in the final solve)

``move_p`` charges ``move_price_per_job`` for every member that was placed in the current plan
and is not kept in its own group (*anchored* columns keep a current group's nodes and members).
Classes make the model independent of the number of identical jobs and remove the symmetry
between them; the cover rows are ``>=`` because a group stays feasible when a member is dropped.

Pricing (:mod:`formulation.placement.pricing`): for each configuration, the group of largest
dual value; its reduced cost is ``c_k + sum_t mu_t n_tk - value``.

Certified lower bound (Lagrangian): for duals ``pi, mu >= 0`` and ``U_k`` = the most groups of
configuration ``k`` any plan can hold (capacity, jobs),
``LB = sum_c pi_c d_c - sum_t mu_t cap_t + sum_k U_k min(0, rc*_k) + sum_c d_c min(0, P - pi_c)``,
where ``rc*_k`` is a lower bound on the reduced cost of every pattern of ``k`` computed without
move charges (so it holds for anchored columns too). When pricing finds no negative reduced cost
this is the LP optimum. When it has not converged on many classes (distinct jobs), Farley's
scaling of the duals mixed with the load bound's (:mod:`formulation.placement.farley`) is tried
as well: a proof at any duals.

Beyond the LP (:class:`Ladder`): with LP-optimal duals every pattern in a plan of cost ``<= D + G``
has reduced cost ``<= G`` (``D`` the LP value); with every such pattern in the master, the
integer master's dual bound ``B`` gives ``OPT >= min(B, D + G)``. ``G`` grows a cost unit at a
time while the enumeration fits the time; ``G = UB - D`` proves the best plan optimal.

Integer solutions: the LP's integral part repaired by the greedy, the integer master over every
column (until its bound reaches what the ladder certifies), and small integer masters over the
patterns of least reduced cost (plans), under the time limit; the greedy plan is the fallback.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Optional

import numpy as np

from formulation.placement.evaluate import Group, Index, Solution, cost_unit
from formulation.placement.master import Column, Master
import os

from formulation.placement.pricing import PricingItems, price, price_heuristic


TRACE = os.environ.get("RL_PLANNER_TRACE") == "1"
# Exact pricing stops proving once a configuration's groups cannot beat its price by more than
# this share of it: the bound gives up at most that share, the search gets much shorter.
PRICING_TOLERANCE = 0.0
# Share of the time left (after the LP) that enumerating patterns for the ladder may take; the
# integer master gets the rest.
ENUMERATE_SHARE = 0.45
# Share of the time left that the integer master over every enumerated pattern may take to reach
# the ladder's bound (it usually gets there in a fraction of a second); plans take the rest.
BOUND_SHARE = 0.4
# With move prices the ladder certifies nothing (see Ladder); its patterns only feed the integer
# master, and past a few thousand they slow it more than they help (a re-optimisation of 30 jobs
# enumerated 60,878 and its master ran out of time). Capped by count, not time, so the same
# inputs give the same plan on a loaded machine (the daemon's restart replay relies on it).
UNCERTIFIED_PATTERNS = 4000
# Sizes (columns of least reduced cost) of the small integer masters that look for plans.
PRIMAL_SIZES = (500, 1500, 4500)
# When the LP has not converged by the end of its share of the time, Farley's bound
# (:mod:`formulation.placement.farley`) gets this share of what is left: half beyond
# ANYTIME_MIN_CLASSES job classes (distinct jobs), a fifth below, where the integer masters that
# follow still find better plans (measured choices: docs/placement.md; at 100 distinct jobs under
# 3.5-5 s the bound went from the load bound's 1,364-1,434 to 1,668-1,960).
ANYTIME_MIN_CLASSES = 150
ANYTIME_BOUND_SHARE = 0.5
ANYTIME_BOUND_SHARE_FEW = 0.2
# Beyond this many job classes the LP phase starts with box-stabilised rounds from the load bound's
# duals (:mod:`formulation.placement.boxstab`), for this share of it (they stop when they converge).
# At 100 distinct jobs plain column generation converged in 23 s, the box rounds in 4 s; at 500
# distinct jobs, 60 s of box rounds alone reached a bound 0.77 of the plan (the plain rounds proved
# nothing beyond the load bound, 0.61)
BOX_MIN_CLASSES = 60
# At 100 distinct jobs (distinct and distinct-loose, seeds 1-3, auto under 5 and 10 s, one run at a
# time) every plan was as cheap or cheaper than with the plain rounds alone (0-4.7%) and every bound
# higher (gaps 5.7-31% -> 0.6-12.2%); half the LP phase for the box rounds gave worse plans in 9 of
# the 12 cases (2 equal)
BOX_SHARE = 0.9


@dataclass
class Classes:
    rep: np.ndarray  # a representative job per class
    jobs: list[list[int]]  # jobs of each class
    placed: np.ndarray  # bool: the class's jobs are in the current plan
    of_job: np.ndarray

    @property
    def demand(self) -> np.ndarray:
        return np.array([len(j) for j in self.jobs], dtype=float)


def job_classes(idx: Index, placed: Optional[set[int]] = None, jobs: Optional[list[int]] = None, merge: bool = True) -> Classes:
    """Jobs with identical tables, DRAM, SLO and current-plan status form one class
    (``merge=False``: one class per job, for the benchmark's comparison). Classes are numbered in
    the order of their first job, which is their representative.

    Equal jobs have equal SLOs, DRAM and state (:func:`_fingerprint_shared`), so only jobs that
    share those are compared column by column: on distinct jobs that is none of them (10,000
    distinct jobs: 0.01 s, against 0.13-0.2 s for hashing every job's columns)."""
    placed = placed or set()
    order = np.arange(idx.n) if jobs is None else np.asarray(list(jobs), dtype=int)
    shared = _fingerprint_shared(idx, order, placed) if merge else np.zeros(len(order), dtype=bool)
    keys: dict[Any, int] = {}
    rep: list[int] = []
    members: list[list[int]] = []
    flags: list[bool] = []
    of_job = np.full(idx.n, -1)
    for i, j in enumerate(order.tolist()):
        if shared[i]:
            key: Any = b"".join([idx.a[:, j].tobytes(), idx.bs[:, j].tobytes(), idx.tot[:, j].tobytes(), idx.ok[:, j].tobytes(),
                                 np.array([idx.slo[j], idx.dram_r[j], idx.state_t[j], float(j in placed)]).tobytes()])
        else:  # no other job has its fingerprint: a class of its own
            key = j
        c = keys.get(key)
        if c is None:
            c = keys[key] = len(rep)
            rep.append(j)
            members.append([])
            flags.append(j in placed)
        members[c].append(j)
        of_job[j] = c
    return Classes(np.array(rep, dtype=int), members, np.array(flags, dtype=bool), of_job)


def _fingerprint_shared(idx: Index, order: np.ndarray, placed: set[int]) -> np.ndarray:
    """For each job of ``order``: whether another job of ``order`` has the same SLO, DRAM, state
    and current-plan status (equal jobs have; a job that shares none of them is in a class of its own)."""
    n = len(order)
    if n < 2:
        return np.zeros(n, dtype=bool)
    fp = np.stack([idx.slo[order], idx.dram_r[order], idx.state_t[order],
                   np.array([j in placed for j in order.tolist()], dtype=float)], axis=1)
    fp = np.ascontiguousarray(fp + 0.0)  # -0.0 as 0.0: a coarser key only compares more jobs
    _, inverse, counts = np.unique(fp.view(np.dtype((np.void, 32))).ravel(), return_inverse=True, return_counts=True)
    return counts[inverse.ravel()] > 1


def _small_lp(c: np.ndarray, A: np.ndarray, b: np.ndarray, upper: np.ndarray) -> Optional[float]:
    """min c y s.t. A y <= b, 0 <= y <= upper (HiGHS); None when it fails."""
    import highspy

    from formulation.placement.master import new_highs

    h = new_highs()
    inf = highspy.kHighsInf
    n, m = len(c), len(b)
    h.addVars(n, np.zeros(n), np.asarray(upper, dtype=float))
    h.changeColsCost(n, np.arange(n, dtype=np.int32), np.asarray(c, dtype=float))
    rows, cols = np.nonzero(A)
    for i in range(m):
        idx = cols[rows == i].astype(np.int32)
        h.addRow(-inf, float(b[i]), len(idx), idx, A[i, idx].astype(float))
    h.run()
    if h.modelStatusToString(h.getModelStatus()) != "Optimal":
        return None
    return float(h.getInfo().objective_function_value)


@dataclass
class ColgenStats:
    rounds: int = 0
    columns: int = 0
    lp_value: Optional[float] = None
    lower_bound: Optional[float] = None
    lp_converged: bool = False
    enumerated: Optional[int] = None  # patterns enumerated by the ladder (every one of reduced cost <= ladder_gap)
    ladder_gap: Optional[float] = None  # the ladder's gap G behind the certified bound
    proven: bool = False
    mip_status: str = ""
    watchdog_fired: bool = False
    farley_bound: Optional[float] = None  # the anytime bound, when the LP did not converge
    box_rounds: int = 0  # rounds of the box-stabilised phase (:mod:`formulation.placement.boxstab`)
    box_bound: Optional[float] = None  # its certified bound
    box_converged: bool = False  # whether it reached the capacity-free pattern LP's optimum
    phase_s: dict = field(default_factory=dict)


class PatternModel:
    def __init__(self, idx: Index, classes: Classes, move_price: float = 0.0, threads: int = 1):
        self.deadline = float("inf")
        self.progress = None  # progress(phase, incumbent, bound): the CLI's status line
        self.progress_incumbent: Optional[float] = None
        self.progress_bound: Optional[float] = None  # the certified bound while the integer masters look for plans
        self.converged: Optional[tuple[np.ndarray, np.ndarray, np.ndarray]] = None  # set by column_generation
        self.promise = np.zeros(len(idx.configs))
        self.idx = idx
        self.cl = classes
        self.move_price = move_price
        self.threads = threads
        self.penalty = idx.penalty
        cap = np.array([idx.capacity[t] for t in idx.types], dtype=float)
        self.cap = cap
        self.master = self.new_master(classes.demand, cap, threads)
        r = classes.rep
        self.items_static = []
        for k in range(len(idx.configs)):
            use = np.flatnonzero(idx.ok[k, r])
            order = use[np.argsort(-idx.slo[r[use]], kind="stable")]
            self.items_static.append(order)
        # most groups of configuration k in any plan
        dem = classes.demand
        self.U = np.zeros(len(idx.configs))
        for k in range(len(idx.configs)):
            jobs_k = dem[self.items_static[k]].sum()
            nodes = idx.node_matrix[k]
            caps = [cap[t] // nodes[t] for t in range(len(cap)) if nodes[t] > 0]
            self.U[k] = min([jobs_k] + caps)

    # ------------------------------------------------------------------ hooks
    # The capacity planner (:mod:`formulation.capacity`) subclasses this model with the fleet as a
    # decision; these are the places where its master differs. Placement uses them as they are.
    def new_master(self, demand: np.ndarray, cap: np.ndarray, threads: int) -> Master:
        """The restricted master."""
        return Master(demand, cap, self.idx.node_matrix, self.penalty, threads)

    def fixed_price(self, k: int, mu: np.ndarray) -> float:
        """What a pattern of configuration ``k`` must be worth to have a negative reduced cost."""
        return float(self.idx.cost[k] + mu @ self.idx.node_matrix[k])

    def score(self, sol: Solution) -> float:
        """The objective of an integer solution (the unplaced-job penalty included)."""
        return sol.cost(self.idx) + self.move_price * len(sol.moved) + self.penalty * len(sol.unplaced)

    def dual_value(self, pi: np.ndarray, mu: np.ndarray) -> float:
        """The LP dual objective at LP-optimal duals (the lower bound the proof's gap is measured from)."""
        return float(pi @ self.cl.demand - mu @ self.cap)

    def priced_configs(self):
        """Configurations that column generation prices (all of them here)."""
        return range(len(self.idx.configs))

    def cost_unit(self) -> Optional[float]:
        """Every plan that places all jobs costs a whole multiple of this (None: no such unit): the
        greatest common divisor of the node prices (and the move price), since a plan pays whole
        nodes. The ladder's rungs are a unit apart."""
        pools = self.idx.inst.pool_types
        node = [pools[t].gpus_per_node * pools[t].price_per_gpu_hour for t in self.idx.types]
        return cost_unit(node + ([self.move_price] if self.move_price > 0 else []))

    # ------------------------------------------------------------------ columns
    def column_cost(self, k: int, counts: dict[int, int], anchor_classes: Optional[dict[int, int]] = None) -> float:
        moved = sum(n for c, n in counts.items() if self.cl.placed[c])
        if anchor_classes:
            moved -= sum(min(n, anchor_classes.get(c, 0)) for c, n in counts.items())
        return float(self.idx.cost[k] + self.move_price * max(0, moved))

    def counts_of(self, members) -> dict[int, int]:
        out: dict[int, int] = {}
        for j in members:
            c = int(self.cl.of_job[j])
            out[c] = out.get(c, 0) + 1
        return out

    def add_groups(self, groups: list[Group], anchors: dict[str, list[int]]) -> list[Optional[int]]:
        """Columns for concrete groups (a warm start); returns their column ids (None when known)."""
        ids = []
        for g in groups:
            counts = self.counts_of(g.members)
            anchor_counts = self.counts_of(anchors[g.anchor]) if g.anchor and g.anchor in anchors else None
            col = Column(g.config, counts, self.column_cost(g.config, counts, anchor_counts), g.anchor if anchor_counts else None)
            ids.append(self.master.add(col, 1.0 if col.anchor else np.inf))
        return ids

    def _items(self, k: int, pi: np.ndarray, charge_moves: bool, every_class: bool = False) -> PricingItems:
        """The classes pricing may put in a group of configuration ``k``: those of positive value
        (``every_class``: all of them, as enumerating *every* pattern below a reduced cost needs)."""
        idx, r = self.idx, self.cl.rep
        order = self.items_static[k]
        val = pi[order] - (self.move_price * self.cl.placed[order] if charge_moves else 0.0)
        keep = np.ones(len(val), dtype=bool) if every_class else val > 1e-9
        o = order[keep]
        j = r[o]
        return PricingItems(o, val[keep], self.cl.demand[o].astype(int), idx.a[k, j], idx.bs[k, j], idx.tot[k, j], idx.slo[j],
                            idx.rollout_w(k, j), idx.state_t[j], float(idx.dram_cap_r[k]), float(idx.dram_cap_t[k]))

    def price_all(self, pi, mu, charge_moves: bool, node_budget: int, max_columns: int = 3, exact: bool = True,
                  stop_after: Optional[int] = None):
        """Columns with negative reduced cost, and a lower bound on every pattern's reduced cost per k.

        ``exact=False`` runs only the heuristic (``rc_lb`` is ``-inf``). ``stop_after``: stop once
        that many columns are found (partial pricing, most promising configurations first); the
        bound is then incomplete (``self.last_full`` is False).
        """
        K = len(self.idx.configs)
        cols, rc_lb = [], np.full(K, -np.inf)
        self.last_exact = exact
        self.last_full = True
        for k in sorted(self.priced_configs(), key=lambda k: -self.promise[k]):
            if not exact and time.perf_counter() > self.deadline:
                # the heuristic pass (it proves nothing) stops at the pricing deadline; an exact pass
                # goes on, each configuration's search stopped at its root, whose bound still holds
                self.last_full = False
                break
            fixed = self.fixed_price(k, mu)
            items = self._items(k, pi, charge_moves)
            found = list(price_heuristic(items, fixed, max_columns=max_columns))
            if exact:
                start = max([fixed] + [v for v, _ in found])
                res = price(items, start, max_columns=max_columns, node_budget=node_budget, deadline=self.deadline,
                            tolerance=PRICING_TOLERANCE * fixed)
                rc_lb[k] = fixed - res.upper_bound
                self.last_exact &= res.exact
                found += res.columns
            self.promise[k] = 0.5 * self.promise[k] + len(found)
            for _value, counts in found:
                cols.append(Column(k, counts, self.column_cost(k, counts)))
            if stop_after is not None and len(cols) >= stop_after:
                self.last_full = False
                break
        return cols, rc_lb

    def add_singletons(self) -> None:
        """One column per class on its cheapest configuration: a feasible start and sensible first duals."""
        for c, j in enumerate(self.cl.rep):
            ks = self.idx.job_configs[j]
            if len(ks):
                k = int(ks[np.argmin(self.idx.cost[ks])])
                self.master.add(Column(k, {c: 1}, self.column_cost(k, {c: 1})))

    def lagrangian_bound(self, pi, mu, rc_lb) -> float:
        """Lagrangian bound with the cover rows priced by ``pi`` and the capacity rows kept.

        ``rc_lb[k]`` bounds the reduced cost (with ``mu``) of every pattern of ``k`` from below, so
        ``rc_lb[k] - mu n_k`` bounds ``c_k - value``. The plan's groups ``y_k`` must fit the
        fleet, hence ``LB = pi d + min { sum_k y_k (rc_lb_k - mu n_k) : N y <= cap, y <= U }`` (an LP
        over the configurations; its optimum is at least the bound with capacity dualised by ``mu``).
        """
        d = self.cl.demand
        base = float(pi @ d + d @ np.minimum(0.0, self.penalty - pi))
        r = rc_lb - self.idx.node_matrix @ mu
        neg = np.flatnonzero(r < 0)
        if len(neg) == 0:
            return base
        fun = _small_lp(r[neg], self.idx.node_matrix[neg].T, self.cap, self.U[neg])
        dualised = float(pi @ d - mu @ self.cap + self.U @ np.minimum(0.0, rc_lb) + d @ np.minimum(0.0, self.penalty - pi))
        best = dualised if fun is None else max(dualised, base + fun)
        return max(best, self.farley_bound(pi, mu, rc_lb))

    def farley_bound(self, pi, mu, rc_lb) -> float:
        """Farley's bound: ``pi / r`` is dual feasible for the model without capacity rows when ``r``
        is the largest value-to-cost ratio of any pattern (``UB_k / c_k`` from pricing), so
        ``pi d / r`` bounds the optimum (dropping rows only lowers it). Far tighter than the
        Lagrangian bound while pricing still finds columns of slightly negative reduced cost."""
        ub_value = self.idx.cost + self.idx.node_matrix @ mu - rc_lb  # most any pattern of k is worth at pi
        with np.errstate(divide="ignore", invalid="ignore"):
            ratio = np.where(self.idx.cost > 0, ub_value / self.idx.cost, np.inf)
        r = max(1.0, float(np.max(ratio)) if len(ratio) else 1.0, float(np.max(pi / self.penalty)) if len(pi) else 1.0)
        if not np.isfinite(r):
            return -np.inf
        return float(pi @ self.cl.demand) / r

    @property
    def anytime_bound(self) -> bool:
        """Whether the Farley bound stands in for an unconverged LP: placement's own model (the
        capacity planner's objective is not a sum of configuration costs)."""
        return type(self) is PatternModel

    @property
    def box_stabilised(self) -> bool:
        """Whether the LP phase starts with the box-stabilised rounds: placement's own model, no move
        charges (the box bound prices groups at their configuration's cost), many job classes."""
        return type(self) is PatternModel and self.move_price == 0 and len(self.cl.rep) > BOX_MIN_CLASSES

    def box_phase(self, st: ColgenStats, deadline: float) -> float:
        """The box-stabilised rounds (:func:`formulation.placement.boxstab.box_bound`) from the load
        bound's per-class values (partner-capped when they fit the time); their groups join the
        master. Returns the certified bound (``-inf`` when the load bound has none)."""
        from formulation.placement.boxstab import box_bound
        from formulation.placement.fast import LOAD_BOUND_STEPS, load_bound
        from formulation.placement.partners import partners as partner_caps

        t0 = time.perf_counter()
        reps, demand = self.cl.rep, self.cl.demand
        P = partner_caps(self.idx, reps, deadline=t0 + 0.1 * max(0.0, deadline - t0))
        duals: list = []
        lb = load_bound(self.idx, jobs=reps, iterations=LOAD_BOUND_STEPS, duals=duals,
                        partners=P if P.done.all() else None, deadline=t0 + 0.3 * max(0.0, deadline - t0))
        if lb is None or not duals:
            return -np.inf  # a class fits nowhere alone
        center, mu = np.asarray(duals[0], dtype=float), np.asarray(duals[1], dtype=float)
        start = float(center @ demand) if not np.any(mu > 0) else -np.inf  # (with node prices: not a feasible point)
        seed = [(c.config, dict(c.counts)) for c in self.master.columns if c is not None and c.anchor is None]
        res = box_bound(self.idx, reps, demand, center, self.penalty, seed, deadline, start=start, threads=self.threads)
        for k, counts in res.columns:
            self.master.add(Column(k, counts, self.column_cost(k, counts)))
        st.box_rounds, st.box_bound, st.box_converged = res.rounds, res.bound, res.converged
        return max(res.bound, lb)

    def farley(self, pi: Optional[np.ndarray], deadline: float) -> Optional[float]:
        """The stabilised Farley bound at the restricted master's duals ``pi`` (:mod:`formulation.placement.farley`)."""
        from formulation.placement.farley import stabilised_bound

        return stabilised_bound(self.idx, self.cl.rep, self.cl.demand, pi, self.penalty,
                                lambda k, p: self._items(k, p, False), deadline)

    # ------------------------------------------------------------------ solve
    def solve(self, deadline: float, warm: Optional[Solution], anchors: dict[str, list[int]], mip_gap: float,
              node_budget: int = 200000, enumerate_limit: int = 200000) -> tuple[Optional[Solution], ColgenStats]:
        st = ColgenStats()
        t0 = time.perf_counter()
        self.deadline = deadline
        if warm:
            self.add_groups(warm.groups, anchors)
        self.add_singletons()
        # phase 1: column generation until no negative reduced cost or a share of the time is used
        lp_deadline = t0 + 0.75 * (deadline - t0)
        box_lb = -np.inf
        if self.box_stabilised:
            # on many distinct jobs: first the box-stabilised rounds from the load bound's duals
            # (:mod:`formulation.placement.boxstab`), whose groups then seed the plain rounds
            t1 = time.perf_counter()
            box_lb = self.box_phase(st, t1 + BOX_SHARE * max(0.0, lp_deadline - t1))
            st.phase_s["box"] = time.perf_counter() - t1
        pi, mu, best_lb = self.column_generation(st, t0, deadline, lp_deadline, node_budget)
        best_lb = max(best_lb, box_lb)
        self.deadline = deadline
        if not st.lp_converged and self.anytime_bound:
            # not converged, so the LP is no bound: Farley's scaling of the duals mixed with the load
            # bound's (a proof at any duals, :mod:`formulation.placement.farley`)
            t1 = time.perf_counter()
            share = ANYTIME_BOUND_SHARE if len(self.cl.rep) > ANYTIME_MIN_CLASSES else ANYTIME_BOUND_SHARE_FEW
            fb = self.farley(pi, t1 + share * max(0.0, deadline - t1))
            st.phase_s["farley"] = time.perf_counter() - t1
            if fb is not None and fb > best_lb:
                best_lb, st.farley_bound = fb, fb
        st.lower_bound = best_lb
        st.phase_s["colgen"] = time.perf_counter() - t0
        # phase 2: integer solutions: the LP's integral part repaired by the greedy, then the integer
        # master over the columns so far and every pattern of small reduced cost (the ladder below)
        # a tenth of the time for turning the columns into plans afterwards (the plan body has its own
        # share before ``deadline``); no floor: a floor of 0.3 s took most of a 1 s command's solve on
        # 13 distinct jobs, whose integer master was then stopped at once (534 $/h instead of 410)
        reserve = 0.1 * max(0.0, deadline - t0)
        score = self.score
        cands: list[Solution] = [warm] if warm else []
        x_lp = self.master.last_primal
        if x_lp is not None:
            cands.append(self.round_and_repair(x_lp, anchors))
        ladder = Ladder(self, enumerate_limit) if st.lp_converged and self.converged is not None else None
        best = lambda: min((score(c) for c in cands), default=np.inf)  # noqa: E731
        first = True
        target = None
        skip_full = False
        while True:
            if ladder is not None and ladder.proves(st.lower_bound, best()):
                st.proven = True  # (the LP bound alone, rounded up, may prove a plan optimal)
                break
            grew = False
            if ladder is not None:
                t1 = time.perf_counter()
                grew = ladder.climb(best(), t1 + ENUMERATE_SHARE * max(0.0, deadline - reserve - t1))
                st.enumerated = ladder.columns if ladder.gap is not None else None
                self._report(f"ladder: patterns of reduced cost <= {ladder.gap:.4g} enumerated ({ladder.columns})"
                             if ladder.gap is not None else "ladder", best(), st.lower_bound)
                st.phase_s["enumerate"] = st.phase_s.get("enumerate", 0.0) + time.perf_counter() - t1
            if not (first or grew):
                break
            first = False
            # the integer master over every column so far; with a certified ladder it runs only until
            # its dual bound reaches what the ladder can certify (LP + G), the plans come after
            target = ladder.reach() if ladder is not None else None
            t2 = time.perf_counter()
            if (ladder is not None and ladder.certify and target is None
                    and len(self.master.columns) - self.master.nc > PRIMAL_SIZES[-1]):
                # no rung certified (the enumeration was cut at its limit) and a master of up to
                # ``enumerate_limit`` patterns: too slow to help (two-types 500, 60 s: stopped by
                # the watchdog with the warm start's 10,344 $/h); the small masters of phase 3
                # get the time instead (9,832-9,868)
                skip_full = True
                st.mip_status = (f"not over all {len(self.master.columns) - self.master.nc} patterns (no ladder rung "
                                 "certified); over those of least reduced cost")
                break
            share = 1.0 if target is None or ladder is None or ladder.at_proof(best()) else BOUND_SHARE
            x, status, fired = self.master.solve_mip(t2 + share * max(0.0, deadline - reserve - t2), None, mip_gap,
                                                     stop_at_bound=target)
            st.phase_s["mip"] = st.phase_s.get("mip", 0.0) + time.perf_counter() - t2
            st.mip_status, st.watchdog_fired = status, st.watchdog_fired or fired
            if x is not None:
                cands.append(self.to_solution(x, anchors))
            if ladder is None:
                self._report(f"integer master ({len(self.master.columns)} columns): {status}", best(), st.lower_bound)
                break
            bound = ladder.bound(self.master.last_mip_bound)
            if bound is not None and bound > (st.lower_bound if st.lower_bound is not None else -np.inf):
                st.lower_bound, st.ladder_gap = bound, ladder.gap
            st.proven = ladder.proves(st.lower_bound, best())
            self._report(f"integer master ({len(self.master.columns)} columns): {status}", best(), st.lower_bound)
            # the integer master finished before the time limit without a proof: climb further
            if st.proven or status != "Optimal" or ladder.exhausted or time.perf_counter() > deadline - 2 * reserve:
                break
        # phase 3: plans from the integer master over the patterns of least reduced cost (a few
        # hundred to a few thousand: small masters find good plans fast, where the full one is slow)
        if ladder is not None and (target is not None or skip_full) and not st.proven:
            self.progress_bound = st.lower_bound
            t3 = time.perf_counter()
            cands += self.primal_masters(anchors, deadline - reserve, mip_gap, ladder.proven_at(st.lower_bound), best())
            st.phase_s["plans"] = time.perf_counter() - t3
            st.proven = ladder.proves(st.lower_bound, best())
        st.columns = len(self.master.columns) - self.master.nc
        cands = [c for c in cands if c is not warm]
        if not cands:
            return None, st
        return min(cands, key=score), st

    def _report(self, phase: str, incumbent: float, bound: Optional[float]) -> None:
        """The status line (``self.progress``, set by the CLI): the phase, the best plan so far (or
        the warm start's), the bound."""
        if self.progress is None:
            return
        inc = self.progress_incumbent if self.progress_incumbent is not None else np.inf
        inc = min(inc, incumbent)
        self.progress(phase, inc if np.isfinite(inc) else None, bound if bound is not None else self.progress_bound)

    def primal_masters(self, anchors: dict[str, list[int]], deadline: float, mip_gap: float, optimal: float = -np.inf,
                       incumbent: float = np.inf) -> list[Solution]:
        """Integer masters over the columns of least reduced cost at the LP-optimal duals (anchored
        columns always), growing through ``PRIMAL_SIZES`` while time is left; their plans. They
        stop at a plan costing ``optimal`` (the bound: nothing is cheaper). The status line shows
        the best of their plans and the caller's ``incumbent``."""
        assert self.converged is not None, "plans from the ladder's patterns need the converged duals"
        pi, mu, _ = self.converged
        cols = [c for c in self.master.columns if c is not None]
        rc = np.array([c.cost + float(mu @ self.idx.node_matrix[c.config]) - sum(pi[k] * m for k, m in c.counts.items())
                       for c in cols])
        order = sorted(range(len(cols)), key=lambda i: (cols[i].anchor is None, rc[i]))
        out: list[Solution] = []
        last = 0
        start = None  # the last master's best plan (its columns come first in the next one)
        for r, size in enumerate(PRIMAL_SIZES):
            now = time.perf_counter()
            if now >= deadline - 0.05 or last >= len(cols):
                break
            take = order[:size]
            last = len(take)
            sub = self.new_master(self.cl.demand, self.cap, self.threads)
            for i in take:
                sub.add(cols[i], 1.0 if cols[i].anchor else np.inf)
            final = r == len(PRIMAL_SIZES) - 1 or size >= len(cols)
            x, status, _ = sub.solve_mip(deadline if final else now + 0.5 * (deadline - now), None, mip_gap,
                                         stop_at_objective=optimal + 1e-9 * max(1.0, abs(optimal)),
                                         fresh_start=None if start is None else np.concatenate([start, np.zeros(len(sub.columns) - len(start))]))
            if x is not None:
                start = np.round(x)
                out.append(self.to_solution(x, anchors, sub.columns))
            self._report(f"integer master over {len(take)} patterns: {status}",
                         min([incumbent] + [self.score(s) for s in out]), None)
            if x is not None:
                if self.score(out[-1]) <= optimal + 1e-9 * max(1.0, abs(optimal)):
                    break
            if TRACE:
                print(f"plans: {len(take)} columns, {status}, {self.score(out[-1]) if x is not None else None} "
                      f"in {time.perf_counter() - now:.2f} s")
        return out

    def column_generation(self, st: ColgenStats, t0: float, deadline: float, lp_deadline: float, node_budget: int):
        """Phase 1: the LP of the master by column generation; returns (pi, mu, best lower bound)."""
        pi = mu = None
        best_lb = -np.inf
        center: Optional[tuple[np.ndarray, np.ndarray]] = None  # duals with the best Lagrangian bound so far (Wentges smoothing)
        alpha = 0.5
        budget = node_budget
        force_full = False  # a partial pricing pass found only columns already in the master: price every configuration
        while True:
            if time.perf_counter() > lp_deadline and st.rounds:
                break
            obj, pi, mu = self.master.solve_lp(deadline)
            st.rounds += 1
            if not self.master.lp_optimal:
                break  # the deadline stopped the LP: no LP value, and no convergence to claim
            st.lp_value = obj
            self.deadline = lp_deadline
            cols, _ = self.price_all(pi, mu, True, budget, exact=False)
            if [c for c in cols if self.master.add(c) is not None] and time.perf_counter() < lp_deadline:
                continue  # the heuristic still finds columns: no need for the exact pricing yet
            smooth = center is not None and alpha > 0
            ps, ms = ((alpha * center[0] + (1 - alpha) * pi, alpha * center[1] + (1 - alpha) * mu)
                      if center is not None and alpha > 0 else (pi, mu))
            self.deadline = lp_deadline
            tp = time.perf_counter()
            cols, rc_lb = self.price_all(ps, ms, True, budget, stop_after=None if force_full else 8)
            full, exact = self.last_full, self.last_exact
            force_full = False
            useful = [c for c in cols if c.cost - pi[list(c.counts)] @ np.array(list(c.counts.values()), dtype=float)
                      - mu @ self.idx.node_matrix[c.config] < -1e-9 * max(1.0, abs(obj))]
            new = [c for c in useful if self.master.add(c) is not None]
            if full:
                if self.move_price > 0:  # the bound must hold for anchored columns: price without move charges
                    _, rc_lb = self.price_all(ps, ms, False, budget, max_columns=1)
                    exact &= self.last_exact
                lb = self.lagrangian_bound(ps, ms, rc_lb)
                if lb > best_lb:
                    best_lb, center = lb, (ps, ms)
            if self.progress is not None:
                self.progress(f"column generation round {st.rounds} (LP {obj:.6g})", self.progress_incumbent,
                              best_lb if np.isfinite(best_lb) else None)
            if TRACE:
                print(f"round {st.rounds} t={time.perf_counter() - t0:.2f} lp={obj:.3f} exact pricing {time.perf_counter() - tp:.2f} s "
                      f"full={full} exact={exact} new={len(new)} lb={best_lb:.3f} alpha={alpha if smooth else 0}")
            if not new:
                if smooth:  # mispricing: the smoothed duals found nothing for the LP; price at the LP duals
                    alpha = 0.0
                    continue
                if not full and time.perf_counter() < lp_deadline:
                    force_full = True  # the partial pass stopped at columns the master has: not a proof
                    continue
                if full and not exact and time.perf_counter() < lp_deadline:
                    budget *= 4  # the search was cut short: a larger budget for a tighter bound
                    continue
                st.lp_converged = full and exact
                if st.lp_converged:  # LP-optimal duals and what pricing proved about every pattern under them
                    self.converged = (pi, mu, rc_lb)
                break
            alpha = 0.5
            if time.perf_counter() > lp_deadline:
                break
        return pi, mu, best_lb

    def lp_bound(self, deadline: float, warm: Optional[Solution], node_budget: int = 200000) -> float:
        """Only the certified lower bound (the LP phase), e.g. of the move-free problem."""
        st = ColgenStats()
        t0 = time.perf_counter()
        self.deadline = deadline
        if warm is not None:
            self.add_groups(warm.groups, {})
        self.add_singletons()
        _, _, lb = self.column_generation(st, t0, deadline, deadline, node_budget)
        self.deadline = deadline
        return lb

    def round_and_repair(self, x_lp: np.ndarray, anchors: dict[str, list[int]]) -> Solution:
        """The LP solution's integral part (``floor`` of each pattern's copies), then the greedy admits
        the jobs left over. Close to the LP bound when the groups are many and the fractions few."""
        from formulation.placement.greedy import Packer, arrival_order

        floor = np.floor(np.asarray(x_lp) + 1e-6)
        base = self.to_solution(floor, anchors)
        pk = Packer(self.idx)
        for g in base.groups:
            if all(pk.free.get(t, 0) >= n for t, n in self.idx.config_nodes(g.config).items()):
                pk.add_group(g.config, list(g.members), g.anchor)
        left = set(j for j in range(self.idx.n) if j not in pk.job_group and self.cl.of_job[j] >= 0)
        deadline = getattr(self, "deadline", float("inf"))
        for j in arrival_order(self.idx):
            if j in left:  # past the deadline (thousands of jobs left over) the rest open groups of their own
                if time.perf_counter() > deadline:
                    pk.open_alone(j)
                else:
                    pk.admit(j)
        return pk.solution()

    def to_solution(self, x: np.ndarray, anchors: dict[str, list[int]], columns: Optional[list[Optional[Column]]] = None) -> Solution:
        """The plan of the master's column values ``x`` (``columns``: those of another master)."""
        columns = self.master.columns if columns is None else columns
        pool = [list(js) for js in self.cl.jobs]
        taken: set[int] = set()
        groups: list[tuple[Column, list[int]]] = []
        chosen: list[tuple[Column, int]] = []
        for i, v in enumerate(x):
            col_i = columns[i]
            if v > 0.5 and col_i is not None:  # (None: a slack, a job left unplaced)
                chosen.append((col_i, int(round(v))))
        chosen.sort(key=lambda t: t[0].anchor is None)  # anchored first: they take their own jobs
        for col, copies in chosen:
            for _ in range(copies):
                members: list[int] = []
                own = [j for j in anchors.get(col.anchor, [])] if col.anchor else []
                for c, n in sorted(col.counts.items()):
                    mine = [j for j in own if self.cl.of_job[j] == c and j not in taken][:n]
                    rest = [j for j in pool[c] if j not in taken and j not in mine][: n - len(mine)]
                    for j in mine + rest:
                        taken.add(j)
                        members.append(j)
                if members:
                    groups.append((col, members))
        out = []
        for col, members in groups:
            members.sort()
            out.append(Group(col.config, tuple(members), col.anchor))
        unplaced = [j for j in range(self.idx.n) if j not in taken and self.cl.of_job[j] >= 0]
        return Solution(out, unplaced)


class Ladder:
    """Every pattern of small reduced cost, for a certified bound above the LP and for plans.

    With LP-optimal duals ``(pi, mu)`` (column generation converged), every pattern ``p`` has a
    reduced cost ``rc_p = c_p + mu n_p - pi m_p >= -w`` (``w``: what the last exact pricing left
    open, about zero), and any plan costs ``sum_p rc_p + D`` or more (``D = pi d - mu cap``, the
    LP value: the plan covers ``d`` and fits ``cap``). So a plan that uses a pattern of reduced
    cost above ``G`` costs more than ``D + G - eps`` (``eps = n w``: at most ``n`` groups). If the
    master holds *every* pattern of reduced cost ``<= G``, a plan either lies in the master --
    it costs at least the integer master's dual bound ``B`` -- or costs more than ``D + G - eps``:

        OPT >= min(B, D + G - eps).

    ``G = UB - D`` gives the classical optimality proof; smaller rungs already lift the bound:
    plans cost whole multiples of a unit ``u`` (:func:`formulation.placement.evaluate.cost_unit`),
    so the rung ``G = T - D + eps`` with ``T`` the first multiple of ``u`` at or above ``D`` shows
    that nothing costs ``T`` or less once ``B > T``: the bound moves up by a unit, the next rung
    by another. The patterns grow fast with ``G`` (about 20x per unit of 8 $/h at 100 jobs), so
    the ladder climbs while the next rung's predicted enumeration fits the time. With move prices
    the bound is not claimed (the master lacks the anchored variants of the enumerated patterns);
    the patterns still feed the integer master.
    """

    def __init__(self, model: "PatternModel", limit: int):
        self.model = model
        assert model.converged is not None, "the ladder starts from LP-optimal duals (column generation converged)"
        pi, mu, rc_lb = model.converged
        self.pi, self.mu = pi, mu
        self.value = model.dual_value(pi, mu)
        finite = rc_lb[np.isfinite(rc_lb)]
        open_rc = max(0.0, -float(finite.min()) if len(finite) else 0.0,
                      float(np.max(pi - model.penalty)) if len(pi) else 0.0)  # slack columns: rc = P - pi_c
        self.eps = max(1, model.idx.n) * open_rc + 1e-9 * max(1.0, abs(self.value))
        self.unit = model.cost_unit()
        self.certify = model.move_price == 0
        self.limit = limit if self.certify else min(limit, UNCERTIFIED_PATTERNS)
        self.gap: Optional[float] = None  # every pattern of reduced cost <= gap is in the master
        self.columns = 0
        self.history: list[tuple[int, float]] = []  # (patterns, seconds) of each complete enumeration
        self.exhausted = False

    def rungs(self, ub: float) -> list[float]:
        """Gaps to climb to, ascending; the last one proves the best plan (cost ``ub``) optimal."""
        D, eps = self.value, self.eps
        if not np.isfinite(ub) or ub <= D:
            return []
        if self.unit is None or ub >= self.model.penalty:  # (plans that leave a job out are off the unit's lattice)
            return [(ub - D) * f + eps for f in (0.125, 0.25, 0.5, 1.0)]
        u = self.unit
        margin = 1e-4 * u  # the bound lands this far above a multiple, which rounds up to the next
        top = u * (np.ceil(ub / u - 1e-6) - 1)  # the dearest cost a better plan can have
        T = u * np.ceil(D / u - 1e-6)
        step = u * max(1.0, np.ceil(1e-4 * abs(D) / u - 1e-9))  # (a unit, unless units are tiny)
        out = []
        while T < top - 1e-9 * u:
            out.append(T - D + eps + margin)
            T += step
        if top >= u * np.ceil(D / u - 1e-6) - 1e-9 * u:  # the proof rung
            out.append(top - D + eps + margin)
        return out

    def bound(self, mip_bound: float) -> Optional[float]:
        """The certified lower bound ``min(B, D + G - eps)``, None before the first rung or with move prices."""
        if self.gap is None or not self.certify:
            return None
        return min(mip_bound, self.value + self.gap - self.eps)

    def reach(self) -> Optional[float]:
        """The most the ladder certifies now (``D + G - eps``): the integer master's dual bound need
        not go beyond it. None when it certifies nothing."""
        if self.gap is None or not self.certify:
            return None
        return self.value + self.gap - self.eps

    def at_proof(self, ub: float) -> bool:
        """The master holds every pattern of every plan cheaper than ``ub``."""
        rungs = self.rungs(ub)
        return self.gap is not None and (not rungs or self.gap >= rungs[-1])

    def proven_at(self, bound: Optional[float]) -> float:
        """The cost at which a plan is proven optimal by ``bound`` (rounded up to the unit), or -inf."""
        if bound is None or not self.certify or not np.isfinite(bound):
            return -np.inf
        if self.unit is not None:
            rounded = self.unit * np.ceil(bound / self.unit - 1e-6)
            if rounded <= self.model.penalty:
                return float(rounded)
        return float(bound)

    def proves(self, bound: Optional[float], best: float) -> bool:
        """The bound shows that no plan is cheaper than ``best`` (rounded up to the cost unit where
        that stays below the unplaced-job penalty: plans that leave a job out cost more)."""
        if not np.isfinite(best):
            return False
        return self.proven_at(bound) >= best - 1e-9 * max(1.0, abs(best))

    def climb(self, ub: float, deadline: float) -> bool:
        """Enumerate rung after rung until the predicted next one does not fit the deadline; every
        pattern found goes to the master. Returns whether the gap grew."""
        grew = False
        for G in self.rungs(ub):
            if self.gap is not None and G <= self.gap:
                continue
            left = deadline - time.perf_counter()
            if self.history:
                n, secs = self.history[-1]
                # the time grows like the patterns, about 7-20x per unit at 100 jobs (the first rung says little)
                growth = max(2.0, n / max(1, self.history[-2][0])) if len(self.history) > 1 else 10.0
                if n * growth > (4 if self.certify else 1) * self.limit or (self.certify and secs * growth > left):
                    self.exhausted = True
                    break
            if left <= 0:
                break
            t0 = time.perf_counter()
            pool, complete = self.enumerate(G, deadline)
            for col in pool:  # (those of an incomplete enumeration still make plans)
                self.model.master.add(col)
            if not complete:
                self.exhausted = True
                break
            self.history.append((len(pool), time.perf_counter() - t0))
            self.gap, self.columns, grew = G, len(pool), True
        return grew

    def enumerate(self, gap: float, deadline: float) -> tuple[list[Column], bool]:
        """Every pattern of reduced cost <= gap (move charges not counted), and whether that is all
        of them (False when they are more than the limit or the deadline passes first)."""
        m = self.model
        pool: list[Column] = []
        for k in range(len(m.idx.configs)):
            fixed = m.fixed_price(k, self.mu)
            res = price(m._items(k, self.pi, False, every_class=True), fixed - gap, max_columns=self.limit - len(pool),
                        node_budget=1 << 62, deadline=deadline, enumerate_all=True)
            pool += [Column(k, counts, m.column_cost(k, counts)) for _, counts in res.columns]
            if not res.exact:
                return pool, False
        return pool, True
