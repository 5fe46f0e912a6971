"""Anytime large-neighbourhood search over a plan's groups (the fast path's improvement phase).

State. For every group ``g`` and every configuration ``k`` the member sums the closed form needs
(:mod:`formulation.placement.evaluate`): ``SA[g, k] = sum a_kj``, ``SB[g, k] = sum bs_kj``,
``MT[g, k] = max tot_kj``, ``DR[g, k] = sum w_kj`` (rollout-row weight: DRAM, or 1 per member on
a pinned configuration), ``ST[g] = sum state_j``, ``LIM[g] = min slo_j`` and ``OK[g, k]`` (every
member may use ``k``), each stored configuration-major (``K x groups``: a job's configurations are
then contiguous rows). A job ``j`` joins ``g`` on ``k`` iff ``OK[g, k] & ok[k, j]`` and

    max(SA + a_kj, SB + bs_kj, max(MT, tot_kj)) <= min(LIM, slo_j),
    DR + w_kj <= cap_r[k],   ST + state_j <= cap_t[k],

and the nodes ``k`` needs beyond ``g``'s configuration are free -- one vectorised test over every
group and every configuration the job may use. Removing members never breaks a group.

Moves (eliminate and re-pack are kept only when the plan gets cheaper, sideways at the same cost;
the plan stays valid throughout):

* *Eliminate* a group: release its nodes, insert its members one by one (largest first) where
  they add the least $/h (any group, any configuration it can grow or change to), the ones that
  fit nowhere cheaper stay, on the cheapest configuration that holds them. Kept when
  ``sum of extra $/h + cost(rest) < cost(g)``, else every touched row is restored. Groups are
  tried least-filled first (fill = the largest of the two rings' sums over the limit): a group
  whose members fit the others' slack is removed for free.
  A group none of whose members can leave is still moved to a cheaper configuration when one
  holds them (a group that lost members to earlier moves).
* *Re-pack* a few related groups exactly: the members of 2-3 groups (of one pool-type pair with
  the nearest SLOs, or sharing a pool type, at random; at most ``max_jobs``) re-partitioned by
  the subset DP of :func:`formulation.placement.subsets.repartition` (pinned configurations
  included).
* *Sideways*: members that another group takes as it stands (no extra $/h) leave for the fullest
  such group; the cost is unchanged, the least-filled groups empty out for later eliminations.
  Not counted as an improvement, so the search still ends.

Each group of a sweep (least-filled first) gets the three in this order; the search ends at the
deadline or after ``4 x groups + 50`` tries in a row without a cheaper plan.

Anchored groups (a current plan's) are neither removed nor grown.
"""

from __future__ import annotations

import time
from typing import Optional

import numpy as np

from formulation.placement.evaluate import REL_TOL, Group, Index, Solution
from formulation.placement.subsets import repartition

TOL = 1 + REL_TOL
#: the search's state costs about this many seconds per configuration x placed job to set up (its
#: fresh memory: 1,088 configurations x 1,944 jobs took 0.1-0.2 s on the 2-CPU VM, 2026-12-05, and
#: 0.06-0.07 s once gathered a block at a time, ``BLOCK_CELLS``); the search does not start when
#: less time than that is left
SETUP_S_PER_CELL = 3.5e-8
#: choosing the short search's configurations (:func:`short_configs`, with the matrices ``a`` and
#: ``bs`` when they are not built yet) costs up to about this many seconds per configuration x job
#: (0.04 s at 1,088 x 1,944 with the matrices built; 10,000 jobs without them passed a 2 s limit by
#: 0.8 s before this guard); the short search does not start when less time than that is left
SHORT_PICK_S_PER_CELL = 4e-8
#: cells (configurations x members) of the buffer the state's set-up gathers into
BLOCK_CELLS = 1 << 17


class GroupState:
    """Per-group sums over every configuration (module docstring)."""

    def __init__(self, idx: Index, groups: list[Group], free: np.ndarray):
        self.idx = idx
        # the index's own matrices, not copies: where a job may not use a configuration its entry
        # is whatever it is (a time or inf), and every test masks it (``OK``, ``ok``); the least
        # training-ring sum over *all* configurations is still at most the least over those a
        # group may use, so the screen on it stays a necessary condition
        self.a0, self.bs0, self.tot0 = idx.a, idx.bs, idx.tot
        self.pinned = idx.pinned_m > 0  # the rollout row counts members there, DRAM elsewhere
        self.all_k = np.arange(len(idx.configs))
        self.nm = idx.node_matrix
        self.free = free.astype(float).copy()
        K = len(idx.configs)
        cap = max(16, 2 * len(groups))
        # configuration-major (K x groups): a join test reads the job's configurations as whole rows
        self.SA = np.zeros((K, cap))
        self.SB = np.zeros((K, cap))
        self.MT = np.zeros((K, cap))
        self.DR = np.zeros((K, cap))
        self.OK = np.zeros((K, cap), dtype=bool)
        self.ST = np.zeros(cap)
        self.minSB = np.zeros(cap)  # least training-ring sum over the configurations (a screen)
        self.LIM = np.full(cap, np.inf)
        self.conf = np.full(cap, -1)
        self.live = np.zeros(cap, dtype=bool)  # holds members and may take more (not anchored)
        self.members: list[list[int]] = [list(g.members) for g in groups]
        self.anchor: list[Optional[str]] = [g.anchor for g in groups]
        self.conf[:len(groups)] = [g.config for g in groups]
        self._fill_all()

    def _fill_all(self) -> None:
        """Every row at once (:meth:`_fill` of each; one segmented reduction per array over the
        members in group order). 796 groups of 1,944 jobs over 1,088 configurations: 0.34 s row by
        row before, now 0.07-0.1 s on memory used before and ~0.2 s on fresh memory (page faults)."""
        G = len(self.members)
        if not G:
            return
        lens = np.fromiter((len(m) for m in self.members), dtype=np.intp, count=G)
        if not lens.all():  # an empty group (none in a solution's groups): row by row
            for g in range(G):
                self._fill(g)
            return
        order = np.fromiter((j for m in self.members for j in m), dtype=np.intp, count=int(lens.sum()))
        starts = np.concatenate([[0], np.cumsum(lens)[:-1]])
        # the members' columns gathered a block of configurations at a time into one small buffer,
        # the sums written in place (fresh memory is most of this at fleet scale: every new page is
        # a fault, and a whole configurations x members buffer was 17 MB of them at 2,000 jobs)
        K = len(self.idx.cost)
        rows = max(1, min(K, BLOCK_CELLS // max(1, len(order))))
        buf = np.empty((rows, len(order)))
        for src, dst, op in ((self.a0, self.SA, np.add), (self.bs0, self.SB, np.add), (self.tot0, self.MT, np.maximum)):
            for r0 in range(0, K, rows):
                r1 = min(K, r0 + rows)
                np.take(src[r0:r1], order, axis=1, out=buf[:r1 - r0])
                op.reduceat(buf[:r1 - r0], starts, axis=1, out=dst[r0:r1, :G])
        del buf
        self.DR[:, :G] = np.add.reduceat(self.idx.dram_r[order], starts)[None, :]
        self.DR[self.pinned, :G] = lens[None, :]
        own = np.flatnonzero(self.idx.own)
        if len(own):  # own-sized: the members' own node counts (inf where one has none: not OK there)
            self.DR[own, :G] = np.add.reduceat(self.idx.WO[self.idx.k_own[own]][:, order], starts, axis=1)
        self.OK[:, :G] = np.logical_and.reduceat(self.idx.ok[:, order], starts, axis=1)
        self.ST[:G] = np.add.reduceat(self.idx.state_t[order], starts)
        self.LIM[:G] = np.minimum.reduceat(self.idx.slo[order], starts)
        self.minSB[:G] = self.SB[:, :G].min(axis=0)
        self.live[:G] = [a is None for a in self.anchor]

    # ------------------------------------------------------------------ rows
    def _new_row(self, members: list[int], k: int, anchor: Optional[str] = None) -> int:
        G = len(self.members)
        if G == len(self.LIM):
            for name in ("SA", "SB", "MT", "DR", "OK", "ST", "minSB", "LIM", "conf", "live"):
                arr = getattr(self, name)
                setattr(self, name, np.concatenate([arr, np.zeros_like(arr)], axis=arr.ndim - 1))
        self.members.append(members)
        self.anchor.append(anchor)
        self.conf[G] = k
        self._fill(G)
        return G

    def _fill(self, g: int) -> None:
        m = self.members[g]
        if not m:
            self.SA[:, g] = self.SB[:, g] = self.MT[:, g] = self.DR[:, g] = 0.0
            self.OK[:, g] = True
            self.ST[g], self.LIM[g], self.minSB[g] = 0.0, np.inf, 0.0
            self.live[g] = False
            return
        self.SA[:, g] = self.a0[:, m].sum(axis=1)
        self.SB[:, g] = self.bs0[:, m].sum(axis=1)
        self.MT[:, g] = self.tot0[:, m].max(axis=1)
        self.DR[:, g] = self._w_sum(m)
        self.OK[:, g] = self.idx.ok[:, m].all(axis=1)
        self.ST[g] = self.idx.state_t[m].sum()
        self.LIM[g] = self.idx.slo[m].min()
        self.minSB[g] = self.SB[:, g].min()
        self.live[g] = self.anchor[g] is None

    def _w_sum(self, members: list[int]) -> np.ndarray:
        """The rollout-row sum of ``members`` on every configuration."""
        w = np.where(self.pinned, float(len(members)), float(self.idx.dram_r[members].sum()))
        own = np.flatnonzero(self.idx.own)
        if len(own) and members:
            w[own] = self.idx.WO[self.idx.k_own[own]][:, members].sum(axis=1)
        return w

    def _snapshot(self, g: int):
        return (list(self.members[g]), int(self.conf[g]), self.SA[:, g].copy(), self.SB[:, g].copy(),
                self.MT[:, g].copy(), self.DR[:, g].copy(), self.OK[:, g].copy(), float(self.ST[g]), float(self.minSB[g]), float(self.LIM[g]),
                bool(self.live[g]))

    def _restore(self, g: int, snap) -> None:
        (self.members[g], self.conf[g], self.SA[:, g], self.SB[:, g], self.MT[:, g], self.DR[:, g], self.OK[:, g],
         self.ST[g], self.minSB[g], self.LIM[g], self.live[g]) = snap

    def cost_of(self, g: int) -> float:
        return float(self.idx.cost[self.conf[g]]) if self.members[g] else 0.0

    def fill(self) -> np.ndarray:
        """Per group: the larger ring sum on its configuration over its limit (inf for empty rows)."""
        G = len(self.members)
        rows = np.arange(G)
        k = np.maximum(self.conf[:G], 0)
        with np.errstate(invalid="ignore", divide="ignore"):
            f = np.maximum(self.SA[k, rows], self.SB[k, rows]) / self.LIM[:G]
        return np.where([bool(m) for m in self.members], f, np.inf)

    # ------------------------------------------------------------------ moves
    def best_insert(self, j: int, exclude: int) -> Optional[tuple[float, int, int]]:
        """(extra $/h, group, configuration) of the cheapest place for ``j`` in a live group other
        than ``exclude`` (its configuration may change within the free nodes), or None."""
        idx = self.idx
        G = len(self.members)
        ks = idx.job_configs[j]
        if not len(ks) or G == 0:
            return None
        lim_all = np.minimum(self.LIM[:G], idx.slo[j]) * TOL + 1e-12
        # first the groups that take it on their configuration as it stands (no extra $/h: one
        # number per group), the fullest one after the join (best fit)
        g_all = np.arange(G)
        cur = np.maximum(self.conf[:G], 0)
        sa, sb = self.SA[cur, g_all] + self.a0[cur, j], self.SB[cur, g_all] + self.bs0[cur, j]
        as_is = (self.live[:G] & self.OK[cur, g_all] & idx.ok[cur, j] & (sa <= lim_all) & (sb <= lim_all)
                 & (np.maximum(self.MT[cur, g_all], self.tot0[cur, j]) <= lim_all)
                 & (self.DR[cur, g_all] + idx.rollout_w(cur, j) <= idx.dram_cap_r[cur] * TOL)
                 & (self.ST[:G] + idx.state_t[j] <= idx.dram_cap_t[cur] * TOL))
        if 0 <= exclude < G:
            as_is[exclude] = False
        if as_is.any():
            cand = np.flatnonzero(as_is)
            best = int(cand[np.argmax(np.maximum(sa[cand], sb[cand]) / lim_all[cand])])
            return 0.0, best, int(cur[best])
        # screens on one number per group (necessary for a join on any configuration): the
        # training ring's least sum plus the job's least training occupancy, the training DRAM
        screen = self.live[:G] & (self.minSB[:G] + self.bs0[ks, j].min() <= lim_all)
        screen &= self.ST[:G] + idx.state_t[j] <= idx.dram_cap_t[ks].max() * TOL
        if 0 <= exclude < G:
            screen[exclude] = False
        if not screen.any():
            return None
        # every condition over every group (columns, the screen masks them) at the job's
        # configurations (rows): a view of the whole arrays when it may use a third of the
        # configurations or more, else its rows copied (contiguous; gathering groups x
        # configurations on both axes was 80% of the search's time)
        if 3 * len(ks) >= len(idx.cost):
            cols, view = self.all_k, (lambda arr: arr[:, :G])
            feas = view(self.OK) & idx.ok[:, j][:, None] & screen
        else:
            cols, view = ks, (lambda arr: arr[ks, :G])
            feas = view(self.OK) & screen
        lim = lim_all[None, :]
        feas &= view(self.SA) + self.a0[cols, j][:, None] <= lim
        feas &= view(self.SB) + self.bs0[cols, j][:, None] <= lim
        feas &= np.maximum(view(self.MT), self.tot0[cols, j][:, None]) <= lim
        feas &= view(self.DR) + idx.rollout_w(cols, j)[:, None] <= (idx.dram_cap_r[cols] * TOL)[:, None]
        feas &= (self.ST[:G] + idx.state_t[j])[None, :] <= (idx.dram_cap_t[cols] * TOL)[:, None]
        g_i, c_i = np.nonzero(feas.T)  # group-major: the (group, configuration) order of a dense argmin
        if not len(g_i):
            return None
        K = cols[c_i]
        cur = self.conf[g_i]
        fits = ((self.nm[K] - self.nm[cur]) <= self.free[None, :] + 1e-9).all(axis=1)
        if not fits.any():
            return None
        R, K, cur = g_i[fits], K[fits], cur[fits]
        i = int(np.argmin(idx.cost[K] - idx.cost[cur]))  # the first cheapest
        return float(idx.cost[K[i]] - idx.cost[cur[i]]), int(R[i]), int(K[i])

    def cheapest_for(self, members: list[int], budget: np.ndarray) -> Optional[int]:
        """The cheapest configuration on which ``members`` are a feasible group within ``budget`` nodes."""
        idx = self.idx
        m = members
        lim = idx.slo[m].min() * TOL + 1e-12
        feas = (idx.ok[:, m].all(axis=1) & (self.a0[:, m].sum(axis=1) <= lim) & (self.bs0[:, m].sum(axis=1) <= lim)
                & (self.tot0[:, m].max(axis=1) <= lim) & (self._w_sum(m) <= idx.dram_cap_r * TOL)
                & (idx.state_t[m].sum() <= idx.dram_cap_t * TOL) & (self.nm <= budget[None, :] + 1e-9).all(axis=1))
        if not feas.any():
            return None
        ks = np.flatnonzero(feas)
        return int(ks[np.argmin(idx.cost[ks])])

    def move_to(self, j: int, g: int, k: int) -> None:
        self.free -= self.nm[k] - self.nm[self.conf[g]]
        self.conf[g] = k
        self.members[g].append(j)
        idx = self.idx
        self.SA[:, g] += self.a0[:, j]
        self.SB[:, g] += self.bs0[:, j]
        self.MT[:, g] = np.maximum(self.MT[:, g], self.tot0[:, j])
        self.DR[:, g] += self.idx.rollout_w(self.all_k, j)
        self.OK[:, g] &= idx.ok[:, j]
        self.ST[g] += idx.state_t[j]
        self.minSB[g] = self.SB[:, g].min()
        self.LIM[g] = min(self.LIM[g], idx.slo[j])

    def eliminate(self, g: int, sideways: bool = False) -> float:
        """Try to remove group ``g`` (module docstring); the $/h saved (0 when rejected or sideways)."""
        idx = self.idx
        ms = list(self.members[g])
        if not ms or self.anchor[g] is not None:
            return 0.0
        old = self.cost_of(g)
        saved = {g: self._snapshot(g)}
        free0 = self.free.copy()
        self.free += self.nm[self.conf[g]]
        self.live[g] = False
        spent = 0.0
        stay = []
        size = np.array([self.a0[self.conf[g], j] + self.bs0[self.conf[g], j] for j in ms])
        for j in (ms[i] for i in np.argsort(-size, kind="stable")):
            ins = self.best_insert(j, g)
            if ins is None or spent + ins[0] >= old - 1e-9 or (sideways and ins[0] > 1e-9):
                stay.append(j)
                continue
            m, h, k = ins
            if h not in saved:
                saved[h] = self._snapshot(h)
            self.move_to(j, h, k)
            spent += m
        if stay:
            k_rest = self.cheapest_for(stay, self.free)
            total = spent + (idx.cost[k_rest] if k_rest is not None else np.inf)
        else:
            k_rest, total = None, spent
        # kept when cheaper; with ``sideways``, also at the same cost when members left (into
        # fuller groups: the best fit), which empties the least-filled groups for later moves
        if total > old + 1e-9 or (total >= old - 1e-9 and (not sideways or len(stay) == len(ms))):
            for h, snap in saved.items():
                self._restore(h, snap)
            self.free = free0
            return 0.0
        self.members[g] = stay
        if k_rest is not None:
            self.conf[g] = k_rest
            self.free -= self.nm[k_rest]
        self._fill(g)
        return old - total

    def replace(self, rows: list[int], new: list[tuple[int, list[int]]]) -> None:
        """Groups ``rows`` become the groups ``new`` ([(configuration, members)]); nodes follow."""
        for g in rows:
            self.free += self.nm[self.conf[g]]
            self.members[g] = []
            self._fill(g)
        slots = list(rows)
        for k, m in new:
            self.free -= self.nm[k]
            if slots:
                g = slots.pop()
                self.members[g], self.conf[g] = list(m), k
                self._fill(g)
            else:
                self._new_row(list(m), k)

    def groups(self) -> list[Group]:
        return [Group(int(self.conf[g]), tuple(self.members[g]), self.anchor[g]) for g in range(len(self.members))
                if self.members[g]]


def improve(idx: Index, sol: Solution, deadline: float, seed: int = 0, max_jobs: int = 7, progress=None,
            bound: Optional[float] = None) -> tuple[Solution, int]:
    """Eliminate and re-pack moves (module docstring) until ``deadline``; (solution, improving moves).
    Jobs the solution left out stay out (the repair is :mod:`formulation.placement.repair`'s)."""
    rng = np.random.default_rng(seed)
    cap = np.array([idx.capacity[t] for t in idx.types], dtype=float)
    used = sum((idx.node_matrix[g.config] for g in sol.groups), np.zeros(len(idx.types)))
    placed = sum(len(g.members) for g in sol.groups)
    if not sol.groups or time.perf_counter() + SETUP_S_PER_CELL * len(idx.cost) * placed >= deadline:
        return sol, 0  # no time for the search's state, let alone a move: the limit is kept
    st = GroupState(idx, list(sol.groups), cap - used)
    moves, last, fails = 0, time.perf_counter(), 0
    queue: list[int] = []
    pair = np.array([idx.types.index(c.rollout_type) * len(idx.types) + idx.types.index(c.train_type) for c in idx.configs])
    while time.perf_counter() < deadline:
        G = len(st.members)
        if not queue:  # a sweep, least-filled first (pop takes from the end)
            if not st.live[:G].any():
                break  # every group anchored (or empty): nothing to move
            queue = [int(g) for g in np.argsort(st.fill(), kind="stable")[::-1]]
        g = queue.pop()
        if not st.members[g] or st.anchor[g] is not None:
            continue
        gain = st.eliminate(g)
        if gain <= 0:
            gain = _repack(st, g, pair, max_jobs, rng, deadline)
        if gain <= 0:  # members that fit elsewhere as the groups stand leave for fuller groups
            gain = st.eliminate(g, sideways=True)
        if gain > 0:
            moves += 1
            fails = 0
        else:
            fails += 1
        if fails > 4 * G + 50:
            break
        if progress and time.perf_counter() - last > 0.5:
            last = time.perf_counter()
            progress("local search", idx.groups_cost(st.groups()), bound)
    return Solution(st.groups(), list(sol.unplaced), sol.lower_bound, list(sol.moved)), moves


def short_configs(idx: Index, sol: Solution, per_job: int = 2, floor: float = 0.5, rows: int = 128) -> np.ndarray:
    """The configurations the short search keeps (:func:`improve_short`): every one a group of
    ``sol`` uses, and each job's ``per_job`` of least floored share ``c_k max(a_kj, bs_kj) /
    slo_j`` floored at ``floor`` (the first fit's opening rule, :mod:`formulation.placement.flatfit`)
    among those it may use. A block of configurations at a time (no configurations x jobs
    temporaries); sorted indices."""
    K, n = len(idx.cost), idx.n
    keep = {g.config for g in sol.groups}
    if n and K:
        m = min(per_job, K)
        best = np.full((m + rows, n), np.inf)
        arg = np.zeros((m + rows, n), dtype=np.intp)
        buf = np.empty((rows, n))
        inv = 1.0 / idx.slo
        a, bs, ok = idx.a, idx.bs, idx.ok
        with np.errstate(invalid="ignore"):
            for r0 in range(0, K, rows):
                r1 = min(K, r0 + rows)
                h = r1 - r0
                b = buf[:h]
                np.maximum(a[r0:r1], bs[r0:r1], out=b)
                b *= inv
                np.maximum(b, floor, out=b)
                b *= idx.cost[r0:r1, None]
                b[~ok[r0:r1]] = np.inf
                best[m:m + h] = b
                arg[m:m + h] = np.arange(r0, r1)[:, None]
                sel = np.argpartition(best[:m + h], m - 1, axis=0)[:m]
                best[:m] = np.take_along_axis(best[:m + h], sel, 0)
                arg[:m] = np.take_along_axis(arg[:m + h], sel, 0)
        keep.update(arg[:m][np.isfinite(best[:m])].tolist())
    return np.array(sorted(keep), dtype=int)


def short_fits(idx: Index, deadline: float) -> bool:
    """Whether choosing the short search's configurations fits before ``deadline``."""
    return time.perf_counter() + SHORT_PICK_S_PER_CELL * len(idx.cost) * idx.n < deadline


def improve_short(idx: Index, sol: Solution, deadline: float, seed: int = 0, progress=None,
                  bound: Optional[float] = None, floor: float = 0.5) -> tuple[Solution, int]:
    """:func:`improve` over the configurations :func:`short_configs` keeps (the groups stay on
    configurations of ``idx``; every move is one the whole search could make). For short limits:
    at 2,000 jobs on 1,088 configurations the state over ~240-380 of them sets up 3-4x quicker
    and each move tests fewer rows, and from the first fit it gets further in 0.2-1 s than the
    whole search (distinct-loose, 0.2 / 0.3 s: 0.92-0.96 / 0.92-0.93x the independent packing
    against 0.97 / 0.955); with more time, or few configurations to begin with, the whole search
    gets further (classes, 68 configurations of which 5-9 kept: 0.80 against 0.90 in 5 s; see
    :data:`formulation.placement.fast.SHORT_LNS_S`)."""
    if not short_fits(idx, deadline):
        return sol, 0  # choosing the configurations alone would pass the deadline
    keep = short_configs(idx, sol, floor=floor)
    if len(keep) >= len(idx.cost):
        return improve(idx, sol, deadline, seed=seed, progress=progress, bound=bound)
    sub = idx.restrict_configs(keep)
    pos = {int(k): i for i, k in enumerate(keep)}
    mapped = Solution([Group(pos[g.config], g.members, g.anchor) for g in sol.groups], list(sol.unplaced),
                      sol.lower_bound, list(sol.moved))
    got, moves = improve(sub, mapped, deadline, seed=seed, progress=progress, bound=bound)
    return Solution([Group(int(keep[g.config]), g.members, g.anchor) for g in got.groups], list(got.unplaced),
                    got.lower_bound, list(got.moved)), moves


def _repack(st: GroupState, g: int, pair: np.ndarray, max_jobs: int, rng, deadline: float) -> float:
    """Re-pack ``g`` with 1-2 live groups of its pool-type pair nearest in SLO (at most ``max_jobs``
    jobs) exactly; the $/h saved (0 when nothing cheaper)."""
    G = len(st.members)
    if rng.random() < 0.5:  # groups of its pool-type pair nearest in SLO
        live = np.flatnonzero(st.live[:G] & (pair[np.maximum(st.conf[:G], 0)] == pair[st.conf[g]]))
        live = live[live != g]
        near = live[np.argsort(np.abs(st.LIM[live] - st.LIM[g]), kind="stable")[:6]]
    else:  # groups sharing a pool type with it, at random
        T = len(st.idx.types)
        cp = pair[np.maximum(st.conf[:G], 0)]
        p0, q0 = divmod(int(pair[st.conf[g]]), T)
        rp, tq = cp // T, cp % T
        live = np.flatnonzero(st.live[:G] & ((rp == p0) | (rp == q0) | (tq == p0) | (tq == q0)))
        live = live[live != g]
        near = live[rng.permutation(len(live))[:40]] if len(live) else live
    if not len(near):
        return 0.0
    near = near.copy()
    rng.shuffle(near)
    pick, size = [g], len(st.members[g])
    for h in near:
        if size + len(st.members[h]) <= max_jobs:
            pick.append(int(h))
            size += len(st.members[h])
            if len(pick) == 3:
                break
    if len(pick) < 2:
        return 0.0
    jobs = [j for h in pick for j in st.members[h]]
    before = sum(st.cost_of(h) for h in pick)
    used_before = sum(st.nm[st.conf[h]] for h in pick)
    res = repartition(st.idx, jobs, st.free, used_before, None, deadline)
    if res is None or res[0] >= before - 1e-9:
        return 0.0
    st.replace(pick, [(k, m) for k, m in res[1]])
    return before - res[0]
