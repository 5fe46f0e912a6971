"""The fast path for distinct jobs: first-fit/best-fit decreasing packing, a load bound, local search.

Nothing here needs identical jobs (job classes) or a solver; it is numpy over the instance's
:class:`~formulation.placement.evaluate.Index`.

Packing (:func:`pack`)
    Jobs in decreasing *size* -- the cost share of the job on its most efficient configuration,
    ``min_k c_k max(a_kj, bs_kj) / slo_j`` ($/h of the pools it keeps busy; the GPU-seconds per
    cycle priced) -- each go where they add the least $/h: into an existing group of the same
    (rollout type, training type) *pair* on any pool sizes of that pair (both pools may grow:
    the greedy's groups only grow their rollout pool, which is what makes it weak when jobs need
    different training-pool sizes), or into a new group. A new group opens on the job's most
    *efficient* configuration, the one of least ``c_k x load`` (its load the largest of its
    shares of the cycle and of the nodes' DRAM), not on the cheapest one, so that later jobs fill
    it. Ties go to the group the job fills best (best fit). State per pair and group:
    ``sumA[g, r]`` (rollout seconds plus warm switches of the members at each rollout size),
    ``sumBS[g, t]`` (training + sync + switches), ``maxTOT[g, r, t]`` (own cycles, no switches), the smallest SLO and the DRAM sums,
    so one insertion is a few array operations over the pair's groups.

Load bound (:func:`load_bound`) -- a proof without classes
    A group on configuration ``k`` with members ``S`` meets ``sum_S a <= min_S slo <= slo_j``
    for every member, so with loads ``L1 = a/slo``, ``L2 = bs/slo``, ``L3 = dram_r / D_p``,
    ``L4 = state / (n_T D_q)`` every group has ``sum_S L_d <= 1`` in each dimension ``d``. For any
    weights ``theta_k`` on the simplex, ``c_k >= sum_{j in S} c_k theta_k . L_kj``; and with
    node prices ``mu >= 0`` on the capacity rows, summing over the groups of any plan::

        cost >= sum_j min_k (c_k + mu n_k) theta_k . L_kj  -  mu . cap

    (the minimum over the configurations job ``j`` may use alone). Every ``(theta, mu)`` gives a
    valid bound -- it is the dual of the vector-packing LP relaxation -- so the weights are
    improved by a few multiplicative-weight steps and the best value is kept. Plans cost whole
    multiples of the cost unit, so the bound is rounded up to one. With partner caps
    (:mod:`formulation.placement.partners`, :func:`bound_with_partners`) a job's ring loads are
    over the SLO its loosest possible partner allows, a fifth load counts members, and a job that
    can share a configuration with nobody pays all of it there (the proof is in that module).

Local search (:func:`improve`)
    Re-solves a few groups at a time exactly: the members of 2-3 groups of one pair are
    re-partitioned by a DP over their subsets (each subset on its cheapest feasible configuration
    of any pair, closed form, pinned configurations included: this is where the fast path forms
    groups whose members keep rollout nodes of their own), kept when cheaper and within the free
    nodes. The load bound covers pinned configurations too (their rollout row counts members).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Optional, Sequence

import numpy as np

from formulation.placement.evaluate import REL_TOL, Group, Index, Solution
from formulation.placement.partners import Partners, partners as partner_caps
from formulation.placement.pairs import _Pair, _pairs  # noqa: F401 (the packings' pair grids)
from formulation.placement.subsets import repartition, subset_costs, subset_feasible  # noqa: F401 (re-exported)

TOL = 1 + REL_TOL
#: multiplicative-weight steps of the load bound (within 15% of the time left): at 500 distinct jobs
#: 12 steps gave 6,377, 30 gave 6,439, 60 and 120 gave 6,469 (the relaxation's optimum, solved as an
#: LP by HiGHS in 39 s: 6,637)
LOAD_BOUND_STEPS = 60
#: the load bound's set-up and first step cost about this many seconds per (job, configuration) pair
#: a job may use (distinct-loose 2,000: 375,887 pairs, 0.05 s for two steps, 0.03 s for the first
#: step alone, which needs no pairs; 2026-12-05): with less time than that the first step alone runs
LOAD_BOUND_S_PER_PAIR = 1.3e-7
#: beyond this many jobs the fast path packs the first fit only and gives the rest to the search
LNS_FROM_FIRST_FIT = 200
#: ... and when the search has at most this many seconds and its state would have at least
#: ``SHORT_LNS_CELLS`` configurations x jobs, it begins over each job's cheapest configurations
#: (:func:`formulation.placement.lns.improve_short`). Measured from the first fit (2026-12-05,
#: ratios to the independent packing): on the distinct-job families at 2,000 jobs (1,088
#: configurations) further in 0.2-1 s (distinct-loose 0.3 s: 0.93 against 0.955); on classes
#: (68 configurations, 5-9 kept) further in 0.3 s at 2,000 jobs but stuck early: 0.907 against 0.809
#: at 500 jobs under `--time-limit 1`, 0.907 against 0.884 at 2,000 under 2 s, 0.90 against 0.80 in
#: 5 s. So only where the whole state is large: the distinct-job families at 2,000 jobs
SHORT_LNS_S = 0.8
SHORT_LNS_CELLS = 1_000_000
#: the first fit opens groups on the configuration of least ``c_k max(load_kj, OPEN_FLOOR)``
#: (:mod:`formulation.placement.flatfit`), not the cheapest one
OPEN_FLOOR = 0.5
LEFTOVER_S_PER_JOB = 4e-4  # the work after the deadline for each job a plan leaves out (:func:`_finish`)
LNS_SPAN_X = 2.0  # ... when the fast path's time is over this many times what the first fit took
#: the flat best fit runs when the constructions' time left is at least this many times what the flat
#: first fit took (2,000 jobs, four families, load ~2.4: 0.13-0.30 s of CPU, 1.9-3.0x the first fit's)
FLAT_BEST_X = 2.5


class _Groups:
    """The groups of one pair: member sums over the pair's pool sizes."""

    def __init__(self, pair: _Pair):
        self.pair = pair
        nR, nT = len(pair.rs), len(pair.ts)
        cap = 16
        self.n = 0
        self.sumA = np.zeros((cap, nR))
        self.sumBS = np.zeros((cap, nT))
        self.maxTOT = np.zeros((cap, nR, nT))
        self.lim = np.zeros(cap)
        self.dr = np.zeros(cap)
        self.st = np.zeros(cap)
        self.cur = np.zeros((cap, 2), dtype=int)
        self.cur_cost = np.zeros(cap)
        self.open = np.zeros(cap, dtype=bool)  # some job could still join (else closed for good)
        self.minA = np.zeros(cap)  # least rollout sum over the pool sizes (a screen)
        self.minBS = np.zeros(cap)
        self.members: list[list[int]] = []

    def grow(self) -> None:
        for name in ("sumA", "sumBS", "maxTOT", "lim", "dr", "st", "cur", "cur_cost", "open", "minA", "minBS"):
            arr = getattr(self, name)
            setattr(self, name, np.concatenate([arr, np.zeros_like(arr)]))


class FastPacker:
    """Best-fit-decreasing packing over pairs of pool types, both pools free to grow."""

    def __init__(self, idx: Index, capacity: Optional[dict[str, int]] = None, max_pairs: int = 3):
        self.idx = idx
        self.pairs = _pairs(idx)
        self.groups = [_Groups(pr) for pr in self.pairs]
        cap = capacity if capacity is not None else idx.capacity
        self.free = np.array([cap[t] for t in idx.types], dtype=float)
        # per job, per pair: rollout seconds per rollout size, occupancy per training size
        self.job_pairs: list[list[int]] = [[] for _ in range(idx.n)]
        K = len(idx.configs)
        pair_of_k = np.zeros(K, dtype=int)
        for i, pr in enumerate(self.pairs):
            pair_of_k[pr.grid[pr.grid >= 0]] = i
        if K and idx.n:
            # per job, its pairs by the cost of its cheapest configuration there; the first max_pairs
            cheapest = np.full((len(self.pairs), idx.n), np.inf)
            for i, pr in enumerate(self.pairs):
                ks = pr.grid[pr.grid >= 0]
                cheapest[i] = np.where(idx.ok[ks], idx.cost[ks][:, None], np.inf).min(axis=0)
            order = np.lexsort((np.arange(len(self.pairs))[:, None].repeat(idx.n, axis=1), cheapest), axis=0)
            for j in range(idx.n):
                col = order[:, j]
                self.job_pairs[j] = [int(p) for p in col[:max_pairs] if np.isfinite(cheapest[p, j])]
        self.placed: dict[int, tuple[int, int]] = {}

    # ---------------------------------------------------------------- job data on a pair
    def _job(self, pr: _Pair, j: int):
        """(ring rollout per rollout size, ring training per training size, own cycle per (r, t)).

        The ring weights add the warm switches uncapped (``a + sigma_r``, ``b + s + sigma_t``): the
        cap ``min(sigma_r, b + s)`` of :mod:`formulation.placement.cycle` couples the two sizes, and
        uncapped sums are at least the capped ones, so a group this path accepts is feasible (equal
        unless a switch outlasts the other phase)."""
        idx = self.idx
        a = idx.R[pr.r_rows, j]
        bs = idx.T[pr.t_rows, j] + idx.S[pr.s_row, j]
        return a + idx.SR[pr.r_rows, j], bs + idx.ST[pr.t_rows, j], a[:, None] + bs[None, :]

    def _extra_nodes(self, pr: _Pair, rs_old: np.ndarray, ts_old: np.ndarray):
        """Nodes of (p, q) needed beyond the current pools for each (r, t): shape (G, nR, nT) x 2."""
        dr = pr.rs[None, :, None] - rs_old[:, None, None]
        dt = pr.ts[None, None, :] - ts_old[:, None, None]
        if pr.p == pr.q:
            return dr + dt, None
        return np.broadcast_to(dr, (len(rs_old), len(pr.rs), len(pr.ts))), np.broadcast_to(dt, (len(rs_old), len(pr.rs), len(pr.ts)))

    def _fits_free(self, pr: _Pair, ep, eq) -> np.ndarray:
        if eq is None:
            return ep <= self.free[pr.tp]
        return (ep <= self.free[pr.tp]) & (eq <= self.free[pr.tq])

    # ---------------------------------------------------------------- moves
    def best_join(self, j: int):
        """(marginal $/h, fill, pair, group, r, t) of the cheapest existing group for ``j`` or None."""
        idx = self.idx
        slo = idx.slo[j]
        best = None
        for pi in self.job_pairs[j]:
            G = self.groups[pi]
            if G.n == 0:
                continue
            pr = G.pair
            a, bs, own = self._job(pr, j)
            cand_rows = np.flatnonzero(G.open[:G.n])
            if len(cand_rows) == 0:
                continue
            lim_all = np.minimum(G.lim[cand_rows], slo) * TOL
            # cheap 1-D screens first: DRAM on the rollout nodes, room for its quickest phases
            ok = ((G.dr[cand_rows] + idx.dram_r[j] <= pr.dram_r * TOL) & (G.minA[cand_rows] + a.min() <= lim_all)
                  & (G.minBS[cand_rows] + bs.min() <= lim_all))
            cand_rows = cand_rows[ok]
            if len(cand_rows) == 0:
                continue
            lim_c = lim_all[ok]
            A = G.sumA[cand_rows] + a[None, :]
            BS = G.sumBS[cand_rows] + bs[None, :]
            okA = A <= lim_c[:, None]
            okB = (BS <= lim_c[:, None]) & (G.st[cand_rows, None] + idx.state_t[j] <= pr.dram_t[None, :] * TOL)
            ok = okA.any(axis=1) & okB.any(axis=1)
            sel = np.flatnonzero(ok)
            if len(sel) == 0:
                continue
            rows = cand_rows[sel]
            A, BS, okA, okB = A[sel], BS[sel], okA[sel], okB[sel]
            lim = lim_c[sel]
            tot = np.maximum(G.maxTOT[rows], own)
            feas = okA[:, :, None] & okB[:, None, :] & (tot <= lim[:, None, None]) & np.isfinite(pr.cost)[None]
            cur = G.cur[rows]
            ep, eq = self._extra_nodes(pr, pr.rs[cur[:, 0]], pr.ts[cur[:, 1]])
            feas &= self._fits_free(pr, ep, eq)
            if not feas.any():
                continue
            marg = np.where(feas, pr.cost[None] - G.cur_cost[rows][:, None, None], np.inf)
            flat = marg.reshape(len(rows), -1)
            m = flat.min()
            cand = np.argwhere(marg <= m + 1e-9)
            fill = np.maximum(A[cand[:, 0], cand[:, 1]], BS[cand[:, 0], cand[:, 2]]) / lim[cand[:, 0]]
            c = int(np.argmax(fill))
            f = float(fill[c])
            if best is None or m < best[0] - 1e-9 or (m <= best[0] + 1e-9 and f > best[1]):
                g, r, t = int(rows[cand[c, 0]]), int(cand[c, 1]), int(cand[c, 2])
                best = (float(m), f, pi, g, r, t)
        return best

    def best_open(self, j: int, efficient: bool = True):
        """(cost, pair, r, t) of the configuration a new group for ``j`` opens on, or None."""
        idx = self.idx
        ks = idx.job_configs[j]
        ks = ks[idx.pinned_m[ks] == 0]
        if len(ks) == 0:
            return None
        fits = (idx.node_matrix[ks] <= self.free[None, :]).all(axis=1)
        ks = ks[fits]
        if len(ks) == 0:
            return None
        if efficient:
            load = np.maximum.reduce([idx.a[ks, j] / idx.slo[j], idx.bs[ks, j] / idx.slo[j],
                                      idx.dram_r[j] / idx.dram_cap_r[ks], idx.state_t[j] / idx.dram_cap_t[ks]])
            score = idx.cost[ks] * np.maximum(load, 1e-9)
            k = int(ks[np.lexsort((idx.cost[ks], score))[0]])
        else:
            k = int(ks[np.argmin(idx.cost[ks])])
        c = idx.configs[k]
        for pi, pr in enumerate(self.pairs):
            if pr.p == c.rollout_type and pr.q == c.train_type:
                return float(idx.cost[k]), pi, int(np.searchsorted(pr.rs, c.rollout_nodes)), int(np.searchsorted(pr.ts, c.train_nodes))
        return None

    def _take(self, pr: _Pair, dp: float, dq: float) -> None:
        self.free[pr.tp] -= dp
        self.free[pr.tq] -= dq

    def open_group(self, j: int, pi: int, r: int, t: int) -> None:
        G = self.groups[pi]
        pr = G.pair
        if G.n == len(G.lim):
            G.grow()
        g = G.n
        G.n += 1
        G.members.append([])
        G.sumA[g] = 0.0
        G.sumBS[g] = 0.0
        G.maxTOT[g] = 0.0
        G.lim[g] = np.inf
        G.dr[g] = G.st[g] = 0.0
        G.cur[g] = (r, t)
        G.cur_cost[g] = pr.cost[r, t]
        self._take(pr, pr.rs[r], pr.ts[t])
        self._add(pi, g, j)

    def join(self, j: int, pi: int, g: int, r: int, t: int) -> None:
        G = self.groups[pi]
        pr = G.pair
        r0, t0 = G.cur[g]
        self._take(pr, pr.rs[r] - pr.rs[r0], pr.ts[t] - pr.ts[t0])
        G.cur[g] = (r, t)
        G.cur_cost[g] = pr.cost[r, t]
        self._add(pi, g, j)

    def _add(self, pi: int, g: int, j: int) -> None:
        G = self.groups[pi]
        a, bs, own = self._job(G.pair, j)
        G.sumA[g] += a
        G.sumBS[g] += bs
        G.maxTOT[g] = np.maximum(G.maxTOT[g], own)
        G.lim[g] = min(G.lim[g], self.idx.slo[j])
        G.dr[g] += self.idx.dram_r[j]
        G.st[g] += self.idx.state_t[j]
        G.members[g].append(j)
        self.placed[j] = (pi, g)
        # closed for good when not even the quickest job fits at the largest pools
        lim = G.lim[g] * TOL
        G.minA[g], G.minBS[g] = G.sumA[g].min(), G.sumBS[g].min()
        G.open[g] = bool(G.minA[g] + G.pair.min_a <= lim and G.minBS[g] + G.pair.min_bs <= lim)

    def admit(self, j: int, efficient: bool = True) -> bool:
        join = self.best_join(j)
        solo = self.best_open(j, False)
        new = self.best_open(j, True) if efficient else solo
        if join is None and new is None:
            return False
        # join when it adds less than the cheapest group of its own would cost
        if join is not None and (solo is None or join[0] < solo[0] - 1e-9):
            self.join(j, *join[2:])
        else:
            self.open_group(j, *new[1:])
        return True

    def admit_next_fit(self, j: int) -> bool:
        """Next fit, for when time is up: join the group last opened for the job's cheapest pair if it
        fits there on that group's pools (scalar checks, no search), else open a group on the job's
        cheapest configuration."""
        new = self.best_open(j, False)
        if new is None:
            return False
        _, pi, r, t = new
        G = self.groups[pi]
        g = G.n - 1
        if g >= 0 and G.members[g] and self._fits_as_is(G, np.array([g]), j)[0]:
            self.join(j, pi, g, int(G.cur[g, 0]), int(G.cur[g, 1]))
            return True
        self.open_group(j, pi, r, t)
        return True

    def _fits_as_is(self, G: _Groups, rows: np.ndarray, j: int) -> np.ndarray:
        """For each group of ``rows``: whether ``j`` joins it on its current pools (both rings, the
        largest own cycle and both DRAM sums within the limits)."""
        idx = self.idx
        pr = G.pair
        a, bs, own = self._job(pr, j)
        gr, gt = G.cur[rows, 0], G.cur[rows, 1]
        lim = np.minimum(G.lim[rows], idx.slo[j]) * TOL
        return ((G.sumA[rows, gr] + a[gr] <= lim) & (G.sumBS[rows, gt] + bs[gt] <= lim)
                & (np.maximum(G.maxTOT[rows, gr, gt], own[gr, gt]) <= lim)
                & (G.dr[rows] + idx.dram_r[j] <= pr.dram_r * TOL) & (G.st[rows] + idx.state_t[j] <= pr.dram_t[gt] * TOL))

    def admit_first_fit(self, j: int, window: int = 1024) -> bool:
        """Join, without growing its pools, the fullest of the last ``window`` open groups of the
        job's first pair where it fits as the group stands (scalar rows, no search over pool
        sizes: a join then costs nothing), else open a group on the job's cheapest configuration."""
        for pi in self.job_pairs[j]:
            G = self.groups[pi]
            if G.n == 0:
                continue
            rows = np.arange(max(0, G.n - window), G.n)
            rows = rows[G.open[rows]]
            if not len(rows):
                continue
            ok = self._fits_as_is(G, rows, j)
            if ok.any():
                sel = rows[ok]
                sr, st = G.cur[sel, 0], G.cur[sel, 1]
                g = int(sel[np.argmax(np.maximum(G.sumA[sel, sr], G.sumBS[sel, st]) / G.lim[sel])])
                self.join(j, pi, g, int(G.cur[g, 0]), int(G.cur[g, 1]))
                return True
        new = self.best_open(j, False)
        if new is None:
            return False
        self.open_group(j, *new[1:])
        return True

    def solution(self) -> Solution:
        groups = []
        for G in self.groups:
            pr = G.pair
            for g in range(G.n):
                if G.members[g]:
                    groups.append(Group(int(pr.grid[tuple(G.cur[g])]), tuple(G.members[g])))
        return Solution(groups, [j for j in range(self.idx.n) if j not in self.placed])


def size_key(idx: Index) -> np.ndarray:
    """$/h share of each job on its most efficient configuration (0 for a job that fits nowhere)."""
    out = np.zeros(idx.n)
    if not len(idx.configs):
        return out
    with np.errstate(invalid="ignore", divide="ignore"):
        share = idx.cost[:, None] * np.maximum(idx.a, idx.bs) / idx.slo[None, :]
    share = np.where(idx.ok, share, np.inf)
    best = share.min(axis=0)
    return np.where(np.isfinite(best), best, 0.0)


def pack(idx: Index, order: Optional[Sequence[int] | np.ndarray] = None, efficient: bool = False,
         capacity: Optional[dict[str, int]] = None, max_pairs: int = 16, deadline: float = float("inf")) -> Solution:
    """Best-fit decreasing (by :func:`size_key`) unless ``order`` is given. Past ``deadline`` the
    remaining jobs each open a group on their cheapest configuration (no search), so the call
    returns a complete plan about on time."""
    pk = FastPacker(idx, capacity, max_pairs)
    seq = ffd_order(idx) if order is None else order
    for i, j in enumerate(seq):
        if i % 32 == 0 and time.perf_counter() > deadline:
            for jj in seq[i:]:
                pk.admit_next_fit(int(jj))
            break
        pk.admit(int(j), efficient)
    return pk.solution()


def first_fit(idx: Index, order: Optional[Sequence[int] | np.ndarray] = None, max_pairs: int = 2,
              deadline: float = float("inf")) -> tuple[Solution, bool]:
    """First fit on the groups as they stand (:meth:`FastPacker.admit_first_fit`), tightest SLO
    first unless ``order``: each group's limit is then its first member's SLO, and looser jobs fill
    it. About 2.5x quicker than :func:`pack` and, on distinct jobs, cheaper (module docstring).
    Past ``deadline`` it goes on over the last 8 groups of a pair only: about as quick as next fit
    (at 10,000 distinct jobs next fit saved 0.15 s but opened twice the groups, which cost more
    than that to build and write, at 1.5x the $/h). Returns (solution, whether the deadline
    narrowed it)."""
    pk = FastPacker(idx, None, max_pairs)
    seq = slo_order(idx) if order is None else order
    window, cut = 1024, False
    for i, j in enumerate(seq):
        if not cut and i % 32 == 0 and time.perf_counter() > deadline:
            window, cut = 8, True
        pk.admit_first_fit(int(j), window)
    return pk.solution(), cut


def ffd_order(idx: Index) -> np.ndarray:
    """Decreasing size key (GPU-seconds per cycle priced, :func:`size_key`), ties by position."""
    return np.lexsort((np.arange(idx.n), -size_key(idx)))


def slo_order(idx: Index) -> np.ndarray:
    """Tightest SLO first (measured better than the size key on distinct jobs, docs/placement.md)."""
    return np.argsort(idx.slo, kind="stable")


@dataclass
class FastStats:
    ffd_cost: Optional[float] = None
    constructed: str = ""
    lns_moves: int = 0
    lns_gain: float = 0.0
    bound: Optional[float] = None
    bound_method: str = "load bound"  # which bound gave ``bound`` (the record's message names it)
    repaired: int = 0  # jobs the packing left out that the repair placed
    short_search: bool = False  # the search began on the configurations lns.short_configs keeps
    cut_short: list[str] = field(default_factory=list)  # phases the deadline cut short

    def continued_from(self, earlier: "FastStats") -> "FastStats":
        """These stats of a search that went on from ``earlier``'s plan, with ``earlier``'s
        construction, repairs, moves and cut-short phases counted in."""
        self.ffd_cost = earlier.ffd_cost
        self.repaired += earlier.repaired
        self.lns_moves += earlier.lns_moves
        self.lns_gain += earlier.lns_gain
        self.cut_short = (earlier.cut_short or []) + (self.cut_short or [])
        return self

    def message(self) -> str:
        parts = [f"fast path: {self.constructed}"]
        if self.ffd_cost is not None:
            parts.append(f"FFD {self.ffd_cost:.6g} $/h")
        if self.repaired:
            parts.append(f"repair placed {self.repaired} job(s) the packing left out")
        change = (f"-{self.lns_gain:.6g} $/h" if self.lns_gain >= 0
                  else f"+{-self.lns_gain:.6g} $/h for the jobs it placed")  # (placing left-out jobs costs more)
        parts.append(f"local search {self.lns_moves} improving re-partitions ({change})"
                     + (", first over each job's cheapest configurations" if self.short_search else ""))
        parts.append(f"{self.bound_method} {self.bound:.6g}" if self.bound is not None else "no bound")
        if self.cut_short:
            parts.append("cut short by the time limit: " + ", ".join(self.cut_short))
        return "; ".join(parts)


def _score(idx: Index, sol: Solution) -> float:
    return sol.cost(idx) + idx.penalty * len(sol.unplaced)


def fast_solve(idx: Index, deadline: float, warm: Optional[Solution] = None, seed: int = 0,
               progress=None, warm_name: str = "the previous plan with the new jobs admitted") -> tuple[Solution, FastStats]:
    """Construction (tightest-SLO-first and FFD packings, the better one; the warm start if
    cheaper), the load bound, then local search until ``deadline``. With ``warm`` (named
    ``warm_name`` in the message) the search goes on from it instead of a construction."""
    t0 = time.perf_counter()
    span = max(0.0, deadline - t0)
    st = FastStats(cut_short=[])
    if warm is not None:  # a re-optimisation: keep the current plan's groups, improve the others
        return _finish(idx, warm, warm_name, st, deadline, seed, progress)
    many = idx.n > 500
    # tightest-SLO first fit first (quickest, and the cheapest construction on distinct jobs),
    # then first-fit decreasing best fit (the plan is never worse than it) and tightest-SLO-first
    # best fit, each when the time left allows it to finish (a packing cut short is dropped)
    build_by = t0 + 0.85 * span  # the constructions' share; local search gets the rest
    # the first fit over every pair at once (:mod:`formulation.placement.flatfit`): the plans of
    # ``first_fit(max_pairs=16)`` in 0.25-0.4x its time (2,000 distinct jobs: 39,002 $/h in 0.1 s of
    # CPU, where two pairs a job gave 40,358 in 0.16 s)
    from formulation.placement.flatfit import flat_first_fit

    sol, cut = flat_first_fit(idx, slo_order(idx), deadline=build_by, open_floor=OPEN_FLOOR)
    st.constructed = "tightest-SLO-first first fit"
    if cut:
        st.cut_short.append("packing (the rest went first fit on the last few groups)")
    took = time.perf_counter() - t0
    lns_first = idx.n > LNS_FROM_FIRST_FIT and span > LNS_SPAN_X * took
    # best fit takes about 2.5x the first fit (docs/placement.md). Beyond 200 jobs, when the limit is
    # over 8x what the first fit took, the large-neighbourhood search starts from the first fit
    # instead (with less time best fit is the better plan): its many small groups are what the
    # elimination move empties (distinct 2000:0, 8 s of search: 37,762 $/h from the first fit's
    # 42,282, 39,664 from best fit's 41,852; 500:0, 3 s: 9,400 against 9,620). Beyond 500 jobs the
    # tightest-SLO-first best fit is the flat one over every pair (:mod:`formulation.placement.flatbest`:
    # the plans of ``pack(slo_order(idx), max_pairs=16)`` in 0.25-0.55x its CPU, 2.0-2.7x the flat
    # first fit's), where two pairs a job were tried before. It stays second: tried first it took the
    # time of FFD best fit and the search (classes 2,000, --time-limit 1.5, load 2.8: 29,144 $/h and
    # no improving move, against FFD best fit's 29,192 and 29 moves to 28,496)
    for name, order in (("FFD best fit", ffd_order), ("tightest-SLO-first best fit", slo_order)):
        left = build_by - time.perf_counter()
        flat = many and order is slo_order
        if cut or lns_first or left < (FLAT_BEST_X if flat else 2.5) * took:
            continue
        if flat:
            from formulation.placement.flatbest import flat_best_fit

            found = flat_best_fit(idx, slo_order(idx), deadline=build_by)
            if found is None:
                continue  # cut short
            other, name = found, "tightest-SLO-first best fit (every pair)"
        else:
            other = pack(idx, order(idx), max_pairs=2 if many else 16, deadline=build_by)
            if time.perf_counter() > build_by:
                continue  # cut short: its tail opened groups of their own
        if name == "FFD best fit":
            st.ffd_cost = other.cost(idx)
        if _score(idx, other) < _score(idx, sol) - 1e-9:
            sol, st.constructed = other, name
    return _finish(idx, sol, st.constructed, st, deadline, seed, progress)


def _finish(idx: Index, sol: Solution, constructed: str, st: FastStats, deadline: float, seed: int, progress):
    st.constructed = constructed
    if progress:
        progress("construct", sol.cost(idx), None)
    exact = False
    if sol.unplaced:  # jobs a packing left out on a tight fleet: capacity-aware exact re-partitions
        from formulation.placement.repair import repair

        sol, st.repaired, exact = repair(idx, sol, time.perf_counter() + 0.5 * max(0.0, deadline - time.perf_counter()), seed)
    if True:  # a bound over every job (None when one of them fits nowhere alone)
        st.bound = bound_with_partners(idx, st, time.perf_counter() + 0.15 * max(0.0, deadline - time.perf_counter()))
        if progress:
            progress("bound", sol.cost(idx), st.bound)
    before = sol.cost(idx)
    # after a repair that re-partitioned every group at once the local search has nothing to find
    # the large-neighbourhood search (:mod:`formulation.placement.lns`: eliminate groups into the
    # others' slack, re-pack related groups exactly); jobs still left out get the old search's
    # neighbourhoods, which may take them in
    from formulation.placement.lns import improve as lns_improve

    # the jobs still left out are tried again and explained after the solver's deadline
    # (solve.place_leftovers, explain): ~0.4 ms each, reserved here (a tight fleet's 270 left out of
    # 2,000 took --time-limit 1 to 1.1 s, 1,000 of 10,000 --time-limit 2 to 2.8 s)
    end = max(time.perf_counter(), (time.perf_counter() if exact else deadline) - LEFTOVER_S_PER_JOB * len(sol.unplaced))
    moves = 0
    if sol.unplaced:
        sol, moves = improve(idx, sol, time.perf_counter() + 0.5 * max(0.0, end - time.perf_counter()), seed=seed,
                             progress=progress, bound=st.bound)
    placed = sum(len(g.members) for g in sol.groups)
    if (idx.n > LNS_FROM_FIRST_FIT and end - time.perf_counter() <= SHORT_LNS_S
            and len(idx.cost) * placed >= SHORT_LNS_CELLS):
        # a short search gets further over fewer configurations (lns.improve_short); when it stops
        # on its own before the deadline the whole search goes on from its plan
        from formulation.placement.lns import improve_short, short_fits

        if short_fits(idx, end):
            st.short_search = True
            sol, more = improve_short(idx, sol, end, seed=seed, progress=progress, bound=st.bound, floor=OPEN_FLOOR)
            moves += more
    sol, more = lns_improve(idx, sol, end, seed=seed, progress=progress, bound=st.bound)
    st.lns_moves = moves + more
    st.lns_gain = before - sol.cost(idx)
    return sol, st


# ------------------------------------------------------------------------------------- the bound
#: the partner caps (:mod:`formulation.placement.partners`) are computed up to this many
#: configurations x jobs (their two dense arrays; 2,000 distinct jobs x 1,088 configurations: ~2 s)
PARTNER_CELLS_MAX = 3_000_000
#: ... and when the bound's share of the time is at least this many seconds
PARTNER_MIN_S = 2.0


def bound_with_partners(idx: Index, st: FastStats, deadline: float, jobs=None) -> Optional[float]:
    """The load bound over ``jobs`` (default all), with the partner caps when they fit the time
    (half of it) and the size limit: the larger of the two (each is a proof); ``st.bound_method``
    names the one that gave it."""
    t0 = time.perf_counter()
    J = np.arange(idx.n) if jobs is None else np.asarray(list(jobs), dtype=int)
    # (the plain bound keeps the whole share when the caps will not run: under 5 s a third of it
    # cost a quarter of the bound at 2,000 jobs)
    try_caps = deadline - t0 >= PARTNER_MIN_S and len(idx.configs) * len(J) <= PARTNER_CELLS_MAX
    plain = load_bound(idx, jobs=jobs, iterations=LOAD_BOUND_STEPS,
                       deadline=t0 + (0.4 if try_caps else 1.0) * max(0.0, deadline - t0))
    st.bound_method = "load bound"
    left = deadline - time.perf_counter()
    if plain is None or not try_caps:
        return plain
    P = partner_caps(idx, J, deadline=time.perf_counter() + 0.6 * left)
    capped = load_bound(idx, jobs=J, iterations=LOAD_BOUND_STEPS, deadline=deadline, partners=P)
    if capped is not None and capped > plain:
        st.bound_method = ("load bound with partner caps" if P.done.all()
                           else f"load bound with partner caps ({int(P.done.sum())} of {len(P.done)} configurations)")
        return capped
    return plain


def load_bound(idx: Index, jobs: Optional[Sequence[int] | np.ndarray] = None, iterations: int = 12,
               deadline: float = float("inf"), duals: Optional[list] = None,
               partners: Optional["Partners"] = None) -> Optional[float]:
    """A lower bound on the cost of every plan that places ``jobs`` (default: all of them); None
    when some of them fits nowhere alone. See the module docstring for the proof. With
    ``partners`` (:func:`formulation.placement.partners.partners` of the same ``jobs``) the shares
    are the partner-capped ones of :mod:`formulation.placement.partners` (never weaker)."""
    jobs = np.arange(idx.n) if jobs is None else np.asarray(list(jobs), dtype=int)
    if partners is not None and not np.array_equal(partners.jobs, jobs):
        partners = None  # computed for other jobs: the plain loads
    if len(jobs) == 0:
        return 0.0
    if iterations <= 1 or time.perf_counter() > deadline:
        return _load_bound_first_step(idx, jobs, duals)
    ok = idx.ok[:, jobs]
    if not ok.any(axis=0).all():
        return None
    if time.perf_counter() + LOAD_BOUND_S_PER_PAIR * int(np.count_nonzero(ok)) > deadline:
        return _load_bound_first_step(idx, jobs, duals)  # the steps' set-up alone would pass the deadline
    jj, kk = np.nonzero(ok.T)  # the (job, configuration) pairs a job may use alone, by job
    js = jobs[jj]
    starts = np.flatnonzero(np.r_[True, jj[1:] != jj[:-1]])
    slo = idx.slo[js] if partners is None else partners.effective_slo(idx, kk, jj)
    loads = [idx.a[kk, js] / slo, idx.bs[kk, js] / slo, idx.rollout_w(kk, js) / idx.dram_cap_r[kk],
             idx.state_t[js] / idx.dram_cap_t[kk]]
    alone = None
    if partners is not None:  # the member bound's load, and groups of one (partners.py)
        m = partners.m[kk, jj]
        loads.append(1.0 / m)
        alone = m <= 1.0
    L = np.stack(loads, axis=1)  # (P, 4 or 5)
    D = L.shape[1]
    K, T = len(idx.configs), len(idx.types)
    theta = np.zeros((K, D))
    theta[:, :2] = 0.5
    mu = np.zeros(T)
    cap = np.array([idx.capacity[t] for t in idx.types], dtype=float)
    nm = idx.node_matrix
    best = -np.inf
    step = 0.7
    for it in range(iterations):
        price = idx.cost + nm @ mu
        w = (L * theta[kk]).sum(axis=1)
        if alone is not None:  # a share is at most the whole group; a partnerless job's is all of it
            w = np.where(alone, 1.0, np.minimum(w, 1.0))
        v = price[kk] * w
        vmin = np.minimum.reduceat(v, starts)
        val = float(vmin.sum() - mu @ cap)
        if val > best and duals is not None:  # the per-job values: dual feasible for the pattern LP
            duals[:] = [vmin.copy(), mu.copy()]
        best = max(best, val)
        if time.perf_counter() > deadline or it == iterations - 1:
            break
        pick = np.flatnonzero(v <= vmin[jj] * (1 + 1e-12))
        # multiplicative weights: more weight on the dimensions the chosen configurations fill most
        g = np.zeros((K, D))
        np.add.at(g, kk[pick], L[pick])
        used = g.sum(axis=1) > 0
        scale = g[used].max(axis=1, keepdims=True)
        upd = theta[used] * np.exp(step * (g[used] / np.maximum(scale, 1e-12) - 1.0))
        theta[used] = upd / upd.sum(axis=1, keepdims=True)
        frac = np.zeros(K)
        np.add.at(frac, kk[pick], w[pick])
        mu = np.maximum(0.0, mu + step * (frac @ nm - cap) / max(1.0, len(jobs)))
    return float(best)


def _load_bound_first_step(idx: Index, jobs: np.ndarray, duals: Optional[list] = None) -> Optional[float]:
    """:func:`load_bound`'s first step alone (``theta = (1/2, 1/2, 0, 0)``, ``mu = 0``), for when
    the time is up: the same value, computed one configuration's row at a time from the index's
    per-(type, size) rows (:meth:`~formulation.placement.evaluate.Index.phase_rows`), a running
    minimum over the configurations, so that neither the configurations x jobs arrays ``a`` and
    ``bs`` (0.25 s to build at 10,000 jobs) nor a (job, configuration) gather is built."""
    ok = idx.ok[:, jobs]
    if not ok.any(axis=0).all():
        return None
    slo = idx.slo[jobs]
    vmin = np.full(len(jobs), np.inf)
    w = np.empty(len(jobs))
    tmp = np.empty(len(jobs))
    with np.errstate(invalid="ignore"):
        for k, a_k, bs_k, _ in idx.phase_rows(jobs):
            # the terms in the order of the general step: (a/slo) 1/2 + (bs/slo) 1/2, times the cost
            np.divide(a_k, slo, out=w)
            w *= 0.5
            np.divide(bs_k, slo, out=tmp)
            tmp *= 0.5
            w += tmp
            w *= idx.cost[k]
            w[~ok[k]] = np.inf
            np.minimum(vmin, w, out=vmin)
    if duals is not None:
        duals[:] = [vmin, np.zeros(len(idx.types))]
    return float(vmin.sum())


# ------------------------------------------------------------------------------------- local search
def improve(idx: Index, sol: Solution, deadline: float, seed: int = 0, max_jobs: int = 7, progress=None,
            bound: Optional[float] = None) -> tuple[Solution, int]:
    """Large-neighbourhood search: re-partition the members of 2-3 groups sharing a pool type
    exactly (:func:`repartition`), keep the result when it is cheaper, until the deadline.
    Anchored groups (a current plan's) are left as they are. Returns (solution, improving moves)."""
    rng = np.random.default_rng(seed)
    groups = [Group(g.config, tuple(g.members), g.anchor) for g in sol.groups]
    nm = idx.node_matrix
    cap = np.array([idx.capacity[t] for t in idx.types], dtype=float)
    used = sum((nm[g.config] for g in groups), np.zeros(len(idx.types)))
    fails = 0
    moves = 0
    cost = idx.groups_cost(groups)
    last = time.perf_counter()
    # jobs left out that fit somewhere alone: every neighbourhood may take one or two of them in
    out = [j for j in sol.unplaced if len(idx.job_configs[j])]
    lost = [j for j in sol.unplaced if not len(idx.job_configs[j])]
    P = idx.penalty
    while time.perf_counter() < deadline and len(groups) + len(out) >= 2 and fails < 50 * (len(groups) + len(out)):
        take = [out[int(i)] for i in rng.permutation(len(out))[:2]] if out else []
        if not groups:
            break
        a = int(rng.integers(len(groups)))
        if groups[a].anchor:
            fails += 1
            continue
        ca = idx.configs[groups[a].config]
        pick = [a]
        size = len(groups[a].members) + len(take)
        for b in rng.permutation(len(groups))[:40]:
            b = int(b)
            if b in pick or groups[b].anchor:
                continue
            cb = idx.configs[groups[b].config]
            if {cb.rollout_type, cb.train_type} & {ca.rollout_type, ca.train_type} and size + len(groups[b].members) <= max_jobs:
                pick.append(b)
                size += len(groups[b].members)
                if len(pick) == 3:
                    break
        if len(pick) + len(take) < 2:
            fails += 1
            continue
        jobs = [j for b in pick for j in groups[b].members] + take
        before = sum(idx.cost[groups[b].config] for b in pick) + P * len(take)
        used_before = sum(nm[groups[b].config] for b in pick)
        res = repartition(idx, jobs, cap - used, used_before, P, deadline)
        if res is None or res[0] >= before - 1e-9:
            fails += 1
            continue
        fails = 0
        moves += 1
        new = [Group(k, tuple(m)) for k, m in res[1] if k >= 0]
        left = [m[0] for k, m in res[1] if k < 0]
        out = [j for j in out if j not in take] + left
        cost = cost - sum(idx.cost[groups[b].config] for b in pick) + sum(idx.cost[g.config] for g in new)
        used = used - used_before + sum((nm[g.config] for g in new), np.zeros(len(idx.types)))
        groups = [g for i, g in enumerate(groups) if i not in pick] + new
        if progress and time.perf_counter() - last > 0.5:
            last = time.perf_counter()
            progress("local search", cost, bound)
    return Solution(groups, sorted(out + lost), sol.lower_bound, list(sol.moved)), moves
