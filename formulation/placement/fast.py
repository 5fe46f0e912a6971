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
    ``sumA[g, r]`` (rollout seconds of the members at each rollout size), ``sumBS[g, t]``,
    ``maxTOT[g, r, t]``, the smallest SLO and the DRAM sums, so one insertion is a few array
    operations over the pair's groups.

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
    multiples of the cost unit, so the bound is rounded up to one.

Local search (:func:`improve`)
    Re-solves a few groups at a time exactly: the members of 2-3 groups of one pair are
    re-partitioned by a DP over their subsets (each subset on its cheapest feasible configuration
    of any pair, closed form), kept when cheaper and within the free nodes.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Optional, Sequence

import numpy as np

from formulation.placement.evaluate import REL_TOL, Group, Index, Solution

TOL = 1 + REL_TOL


@dataclass
class _Pair:
    """Configurations of one (rollout type, training type) as a grid over pool sizes."""

    p: str
    q: str
    rs: np.ndarray  # rollout sizes
    ts: np.ndarray  # training sizes
    r_rows: np.ndarray  # rows of idx.R per rollout size
    t_rows: np.ndarray  # rows of idx.T per training size
    s_row: int
    grid: np.ndarray  # (nR, nT) configuration id or -1
    cost: np.ndarray  # (nR, nT) $/h, inf where no configuration
    dram_r: float
    dram_t: np.ndarray  # (nT,) training-pool DRAM (per node x nodes)
    tp: int  # type positions in idx.types
    tq: int


def _pairs(idx: Index) -> list[_Pair]:
    out = []
    by: dict[tuple[str, str], list[int]] = {}
    for k, c in enumerate(idx.configs):
        by.setdefault((c.rollout_type, c.train_type), []).append(k)
    r_row = {key: i for i, key in enumerate(idx.r_keys)}
    t_row = {key: i for i, key in enumerate(idx.t_keys)}
    pools = idx.inst.pool_types
    for (p, q), ks in by.items():
        rs = np.array(sorted({idx.configs[k].rollout_nodes for k in ks}))
        ts = np.array(sorted({idx.configs[k].train_nodes for k in ks}))
        grid = np.full((len(rs), len(ts)), -1)
        for k in ks:
            c = idx.configs[k]
            grid[np.searchsorted(rs, c.rollout_nodes), np.searchsorted(ts, c.train_nodes)] = k
        cost = np.where(grid >= 0, idx.cost[np.maximum(grid, 0)], np.inf)
        out.append(_Pair(p, q, rs, ts, np.array([r_row[(p, int(n))] for n in rs]), np.array([t_row[(q, int(n))] for n in ts]),
                         idx.pair_row[(p, q)], grid, cost, float(pools[p].dram_gb), pools[q].dram_gb * ts.astype(float),
                         idx.types.index(p), idx.types.index(q)))
    return out


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
        self.members: list[list[int]] = []

    def grow(self) -> None:
        for name in ("sumA", "sumBS", "maxTOT", "lim", "dr", "st", "cur", "cur_cost"):
            arr = getattr(self, name)
            setattr(self, name, np.concatenate([arr, np.zeros_like(arr)]))


class FastPacker:
    """Best-fit-decreasing packing over pairs of pool types, both pools free to grow."""

    def __init__(self, idx: Index, capacity: Optional[dict[str, int]] = None):
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
        if K:
            for j in range(idx.n):
                ks = idx.job_configs[j]
                self.job_pairs[j] = sorted(set(pair_of_k[ks].tolist()))
        self.placed: dict[int, tuple[int, int]] = {}

    # ---------------------------------------------------------------- job data on a pair
    def _job(self, pr: _Pair, j: int):
        idx = self.idx
        a = idx.R[pr.r_rows, j]
        bs = idx.T[pr.t_rows, j] + idx.S[pr.s_row, j]
        return a, bs

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
            a, bs = self._job(pr, j)
            n = G.n
            lim = np.minimum(G.lim[:n], slo) * TOL
            # cheap 1-D screens first: DRAM on the rollout nodes, some rollout size and training size
            ok = G.dr[:n] + idx.dram_r[j] <= pr.dram_r * TOL
            A = G.sumA[:n] + a[None, :]
            BS = G.sumBS[:n] + bs[None, :]
            okA = A <= lim[:, None]
            okB = (BS <= lim[:, None]) & (G.st[:n, None] + idx.state_t[j] <= pr.dram_t[None, :] * TOL)
            ok &= okA.any(axis=1) & okB.any(axis=1)
            rows = np.flatnonzero(ok)
            if len(rows) == 0:
                continue
            tot = np.maximum(G.maxTOT[rows], a[:, None] + bs[None, :])
            feas = okA[rows][:, :, None] & okB[rows][:, None, :] & (tot <= lim[rows, None, None]) & np.isfinite(pr.cost)[None]
            cur = G.cur[rows]
            ep, eq = self._extra_nodes(pr, pr.rs[cur[:, 0]], pr.ts[cur[:, 1]])
            feas &= self._fits_free(pr, ep, eq)
            if not feas.any():
                continue
            marg = np.where(feas, pr.cost[None] - G.cur_cost[rows][:, None, None], np.inf)
            flat = marg.reshape(len(rows), -1)
            m = flat.min()
            cand = np.argwhere(marg <= m + 1e-9)
            fill = np.maximum(A[rows[cand[:, 0]], cand[:, 1]], BS[rows[cand[:, 0]], cand[:, 2]]) / lim[rows[cand[:, 0]]]
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
        a, bs = self._job(G.pair, j)
        G.sumA[g] += a
        G.sumBS[g] += bs
        G.maxTOT[g] = np.maximum(G.maxTOT[g], a[:, None] + bs[None, :])
        G.lim[g] = min(G.lim[g], self.idx.slo[j])
        G.dr[g] += self.idx.dram_r[j]
        G.st[g] += self.idx.state_t[j]
        G.members[g].append(j)
        self.placed[j] = (pi, g)

    def admit(self, j: int, efficient: bool = True) -> bool:
        join = self.best_join(j)
        new = self.best_open(j, efficient)
        if join is None and new is None:
            return False
        # join when it adds less than the cheapest group of its own would cost
        solo = self.best_open(j, False) if efficient else new
        if join is not None and (solo is None or join[0] < solo[0] - 1e-9):
            self.join(j, *join[2:])
        else:
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


def pack(idx: Index, order: Optional[Sequence[int]] = None, efficient: bool = True,
         capacity: Optional[dict[str, int]] = None) -> Solution:
    """Best-fit decreasing (by :func:`size_key`) unless ``order`` is given."""
    pk = FastPacker(idx, capacity)
    if order is None:
        key = size_key(idx)
        order = np.lexsort((np.arange(idx.n), -key))
    for j in order:
        pk.admit(int(j), efficient)
    return pk.solution()


# ------------------------------------------------------------------------------------- the bound
def _loads(idx: Index, jobs: np.ndarray):
    """Sparse (k, j) pairs where job j may use k alone, and their four loads."""
    ok = idx.ok[:, jobs]
    ks, pos = np.nonzero(ok)
    js = jobs[pos]
    L = np.stack([idx.a[ks, js] / idx.slo[js], idx.bs[ks, js] / idx.slo[js],
                  idx.dram_r[js] / idx.dram_cap_r[ks], idx.state_t[js] / idx.dram_cap_t[ks]], axis=1)
    return ks, pos, L


def load_bound(idx: Index, jobs: Optional[Sequence[int]] = None, iterations: int = 40,
               deadline: float = float("inf")) -> Optional[float]:
    """A lower bound on the cost of every plan that places ``jobs`` (default: all of them); None
    when some of them fits nowhere alone. See the module docstring for the proof."""
    jobs = np.arange(idx.n) if jobs is None else np.asarray(list(jobs), dtype=int)
    if len(jobs) == 0:
        return 0.0
    if not idx.ok[:, jobs].any(axis=0).all():
        return None
    ks, pos, L = _loads(idx, jobs)
    K, T = len(idx.configs), len(idx.types)
    theta = np.full((K, 4), 0.25)
    theta[:, 2:] = 0.0
    theta[:, :2] = 0.5
    mu = np.zeros(T)
    cap = np.array([idx.capacity[t] for t in idx.types], dtype=float)
    nm = idx.node_matrix
    best = -np.inf
    step = 0.5
    n = len(jobs)
    for it in range(iterations):
        price = idx.cost + nm @ mu
        v = price[ks] * (L * theta[ks]).sum(axis=1)
        # per job: the least over its configurations
        order = np.lexsort((v, pos))
        first = np.ones(len(order), dtype=bool)
        first[1:] = pos[order][1:] != pos[order][:-1]
        pick = order[first]  # one (k, j) per job, the cheapest
        val = float(v[pick].sum() - mu @ cap)
        if val > best:
            best = val
        if time.perf_counter() > deadline or it == iterations - 1:
            break
        # multiplicative weights: more weight on the dimensions the chosen configurations fill most
        g = np.zeros((K, 4))
        np.add.at(g, ks[pick], L[pick])
        used = g.sum(axis=1) > 0
        scale = g[used].max(axis=1, keepdims=True)
        upd = theta[used] * np.exp(step * (g[used] / np.maximum(scale, 1e-12) - 1.0))
        theta[used] = upd / upd.sum(axis=1, keepdims=True)
        # node prices: subgradient on the capacity rows (only when the chosen groups overfill them)
        load_nodes = np.zeros(T)
        frac = np.zeros(K)
        np.add.at(frac, ks[pick], (L[pick] * theta[ks[pick]]).sum(axis=1))
        load_nodes = frac @ nm
        mu = np.maximum(0.0, mu + step * (load_nodes - cap) / max(1.0, n))
    return float(best)


# ------------------------------------------------------------------------------------- local search
def _cheapest(idx: Index, members: list[int]) -> tuple[float, int]:
    m = np.asarray(members)
    ok = idx.ok[:, m].all(axis=1)
    lim = idx.slo[m].min() * TOL
    feas = ok & (idx.a[:, m].sum(axis=1) <= lim) & (idx.bs[:, m].sum(axis=1) <= lim) & (idx.tot[:, m].max(axis=1) <= lim)
    feas &= (idx.dram_r[m].sum() <= idx.dram_cap_r * TOL) & (idx.state_t[m].sum() <= idx.dram_cap_t * TOL)
    if not feas.any():
        return np.inf, -1
    c = np.where(feas, idx.cost, np.inf)
    k = int(np.argmin(c))
    return float(c[k]), k


def repartition(idx: Index, jobs: list[int], free: np.ndarray, used_before: np.ndarray):
    """The cheapest partition of ``jobs`` (<= ~10) into groups, each on its cheapest configuration,
    using at most ``used_before + free`` nodes per type; (cost, [(k, members)]) or None."""
    n = len(jobs)
    full = (1 << n) - 1
    cost = {}
    conf = {}
    # subsets in increasing size; a subset is infeasible when one of its (size-1) subsets is
    for mask in range(1, full + 1):
        members = [jobs[i] for i in range(n) if mask >> i & 1]
        if len(members) > 1:
            low = mask & -mask
            if cost.get(mask ^ low, np.inf) == np.inf:
                cost[mask] = np.inf
                continue
        c, k = _cheapest(idx, members)
        cost[mask] = c
        conf[mask] = k
    best = {0: (0.0, ())}
    for mask in range(1, full + 1):
        low = mask & -mask
        rest = mask ^ low
        b = (np.inf, ())
        sub = rest
        while True:
            s = sub | low
            c = cost.get(s, np.inf)
            if c < np.inf:
                prev = best[mask ^ s]
                if prev[0] + c < b[0]:
                    b = (prev[0] + c, prev[1] + (s,))
            if sub == 0:
                break
            sub = (sub - 1) & rest
        best[mask] = b
    total, parts = best[full]
    if not np.isfinite(total):
        return None
    nm = idx.node_matrix
    use = sum(nm[conf[s]] for s in parts)
    if (use > used_before + free + 1e-9).any():
        return None
    return total, [(conf[s], [jobs[i] for i in range(n) if s >> i & 1]) for s in parts]


def improve(idx: Index, sol: Solution, deadline: float, seed: int = 0, max_jobs: int = 9) -> Solution:
    """Large-neighbourhood search: re-partition the members of 2-3 groups sharing a pool type
    exactly (:func:`repartition`), keep the result when it is cheaper, until the deadline."""
    rng = np.random.default_rng(seed)
    groups = [Group(g.config, tuple(g.members), g.anchor) for g in sol.groups]
    nm = idx.node_matrix
    cap = np.array([idx.capacity[t] for t in idx.types], dtype=float)
    used = sum((nm[g.config] for g in groups), np.zeros(len(idx.types)))
    fails = 0
    while time.perf_counter() < deadline and len(groups) >= 2 and fails < 50 * len(groups):
        a = int(rng.integers(len(groups)))
        ca = idx.configs[groups[a].config]
        # partners: groups sharing a pool type with a, members few enough
        pick = [a]
        size = len(groups[a].members)
        for b in rng.permutation(len(groups))[:40]:
            b = int(b)
            if b in pick or groups[b].anchor or groups[a].anchor:
                continue
            cb = idx.configs[groups[b].config]
            if {cb.rollout_type, cb.train_type} & {ca.rollout_type, ca.train_type} and size + len(groups[b].members) <= max_jobs:
                pick.append(b)
                size += len(groups[b].members)
                if len(pick) == 3:
                    break
        if len(pick) < 2:
            fails += 1
            continue
        jobs = [j for b in pick for j in groups[b].members]
        before = sum(idx.cost[groups[b].config] for b in pick)
        used_before = sum(nm[groups[b].config] for b in pick)
        res = repartition(idx, jobs, cap - used, used_before)
        if res is None or res[0] >= before - 1e-9:
            fails += 1
            continue
        fails = 0
        new = [Group(k, tuple(m)) for k, m in res[1]]
        used = used - used_before + sum(nm[g.config] for g in new)
        groups = [g for i, g in enumerate(groups) if i not in pick] + new
    return Solution(groups, list(sol.unplaced), sol.lower_bound, list(sol.moved))
