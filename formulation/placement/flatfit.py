"""First fit over every pair of pool types at once: one vectorised test per job over the open groups.

:func:`formulation.placement.fast.first_fit` keeps the groups of each (rollout type, training
type) pair in arrays of their own and tests a job pair by pair (``max_pairs`` of them, two at
fleet scale for its time). Here every open whole-pool group, of any pair, is one slot of flat
arrays holding its sums *at its current configuration* only (a first fit never grows a group's
pools: a join costs nothing), so a job is tested against all of them in a few array operations:

* rollout ring ``sumA + (a + sigma_r) <= L``, training ring ``sumBS + (b + s + sigma_t) <= L``
  with ``L = min(lim, slo_j)`` (warm switches added uncapped, as the fast path's packings: at least
  the capped ring weight, so a group accepted here is feasible by
  :meth:`formulation.placement.evaluate.Index.feasible`);
* the job's own cycle ``a + b + s <= L`` (the members' are already within the group's limit);
* DRAM on the rollout nodes and on the training pool.

The job's times on a group are gathered from the index's per-(type, size) rows (``R``, ``T``,
``S``, ``SR``, ``ST``), transposed once so that a job's rows are contiguous. Among the groups it
fits, the job joins one of its best-ranked pair (its pairs ranked by the cost of its cheapest
configuration there, as :class:`~formulation.placement.fast.FastPacker`), the fullest there;
else it opens a group on its cheapest configuration within the free nodes. Groups no job could
join any more are swept out of the slots every few jobs (their members stay in the plan).

**Opening on the configuration that leaves room** (``open_floor``, the fast path's 0.5). The
cheapest configuration that holds a job alone is usually one it just fits, and a first fit never
grows a group: the looser jobs after it find no room, and the plan is many groups of 2-3. With
``open_floor = f`` a job opens on the configuration of least ``c_k max(load_kj, f)``, where
``load_kj = max(rollout ring, training ring) / slo_j`` is the share of the group's cycle it takes
there: its own cost share on the configuration, as if the rest were filled by jobs like it, but
never counted below ``f`` (a group that the opener alone fills to a tenth is not one ten such jobs
will share). Measured on 2,000 jobs, seed 3 (in process; ratio to the independent packing,
construction alone / then 0.3 s of the large-neighbourhood search): distinct-loose 1.054 / 0.981
with the cheapest configuration, 1.027 / 0.955 with ``f = 0.5``; distinct 0.979 / 0.946 and
0.974 / 0.926; two-types 0.962 / 0.898 and 0.943 / 0.890; classes 1.017 / 0.968 and 1.017 / 0.970
(``f`` = 0.3 and 0.7 were within 0.02 of 0.5 on each).
"""

from __future__ import annotations

import time
from typing import Optional, Sequence

import numpy as np

from formulation.placement.evaluate import REL_TOL, Group, Index, Solution

TOL = 1 + REL_TOL
_FIELDS = ("gid", "k", "r", "t", "s", "pair", "sumA", "sumBS", "lim", "dr", "st", "drcap", "stcap", "minA", "minBS")


class FlatFirstFit:
    """The flat first fit's state (see the module docstring)."""

    # per open slot (``_FIELDS``; set in ``__init__``, grown by doubling, compacted by :meth:`sweep`)
    gid: np.ndarray
    k: np.ndarray
    r: np.ndarray
    t: np.ndarray
    s: np.ndarray
    pair: np.ndarray
    sumA: np.ndarray
    sumBS: np.ndarray
    lim: np.ndarray
    dr: np.ndarray
    st: np.ndarray
    drcap: np.ndarray
    stcap: np.ndarray
    minA: np.ndarray
    minBS: np.ndarray

    def __init__(self, idx: Index, open_floor: Optional[float] = None):
        self.idx = idx
        self.open_floor = open_floor
        whole = np.flatnonzero(idx.pinned_m == 0)
        self.whole = whole
        K, n = len(whole), idx.n
        self.nodes = idx.node_matrix[whole] if K else np.zeros((0, len(idx.types)))
        self.cost = idx.cost[whole]
        self.free = np.array([idx.capacity[t] for t in idx.types], dtype=float)
        self.fits_nodes = (self.nodes <= self.free[None, :]).all(axis=1)
        # per configuration (of ``whole``): rows of the per-(type, size) arrays, pair, DRAM limits
        self.kr, self.kt, self.ks = idx.k_r[whole], idx.k_t[whole], idx.k_pair[whole]
        self.drcap_k = idx.node_dram_r[whole] * TOL
        self.stcap_k = idx.dram_cap_t[whole] * TOL
        pair_key = {p: i for i, p in enumerate(sorted({(idx.configs[k].rollout_type, idx.configs[k].train_type) for k in whole}))}
        self.kpair = np.array([pair_key[(idx.configs[k].rollout_type, idx.configs[k].train_type)] for k in whole], dtype=int)
        P = len(pair_key)
        # a job's rows, contiguous: rollout ring, rollout own, training own (+ switch), sync
        self.RA = np.ascontiguousarray((idx.R + idx.SR).T)
        self.RO = np.ascontiguousarray(idx.R.T)
        self.TT = np.ascontiguousarray(idx.T.T)
        self.TS = np.ascontiguousarray(idx.ST.T)
        self.SS = np.ascontiguousarray(idx.S.T)
        # ``ok`` of the whole-pool configurations (the first rows of the index: pinned ones follow)
        self.okW = idx.ok[:K] if K and (whole == np.arange(K)).all() else idx.ok[whole]
        # the quickest phases of any job per configuration, at most (a group closes when even they
        # do not fit): per (type, size) row, the sync's least value added on the training side
        with np.errstate(invalid="ignore"):
            ra_row = (idx.R + idx.SR).min(axis=1) if n else np.full(len(idx.R), np.inf)
            tb_row = (idx.T + idx.ST).min(axis=1) if n else np.full(len(idx.T), np.inf)
            s_row = idx.S.min(axis=1) if n else np.zeros(len(idx.S))
        self.minA_k = ra_row[self.kr]
        self.minBS_k = tb_row[self.kt] + s_row[self.ks]
        # per job, the rank of each pair by the cost of its cheapest configuration there
        cheapest = np.full((n, P), np.inf)
        if K and n:
            for pi in range(P):
                ks = np.flatnonzero(self.kpair == pi)
                ks = ks[np.argsort(self.cost[ks], kind="stable")]
                okp = self.okW[ks]
                first = okp.argmax(axis=0)
                cheapest[:, pi] = np.where(okp.any(axis=0), self.cost[ks][first], np.inf)
        self.rank = np.argsort(np.argsort(cheapest, axis=1, kind="stable"), axis=1, kind="stable").astype(float)
        self.by_cost = np.argsort(self.cost, kind="stable")
        self.cap = 64
        self.G = 0
        for name in _FIELDS:
            dtype = int if name in ("gid", "k", "r", "t", "s", "pair") else float
            setattr(self, name, np.zeros(self.cap, dtype=dtype))
        self.members: list[list[int]] = []
        self.configs: list[int] = []  # per group id, its configuration (of ``whole``)
        self.unplaced: list[int] = []

    def _grow(self) -> None:
        for name in _FIELDS:
            arr = getattr(self, name)
            setattr(self, name, np.concatenate([arr, np.zeros_like(arr)]))
        self.cap *= 2

    def sweep(self) -> None:
        """Drop the slots of groups no job could join any more (their members stay)."""
        G = self.G
        keep = (self.sumA[:G] + self.minA[:G] <= self.lim[:G]) & (self.sumBS[:G] + self.minBS[:G] <= self.lim[:G])
        if keep.all():
            return
        m = int(keep.sum())
        for name in _FIELDS:
            arr = getattr(self, name)
            arr[:m] = arr[:G][keep]
        self.G = m

    def admit(self, j: int, window: int = 1024) -> bool:
        lo = max(0, self.G - window)
        hi = self.G
        if hi > lo:
            r, t, s = self.r[lo:hi], self.t[lo:hi], self.s[lo:hi]
            ra, ro, tt, ts, ss = self.RA[j], self.RO[j], self.TT[j], self.TS[j], self.SS[j]
            L = np.minimum(self.lim[lo:hi], self.idx.slo[j] * TOL)
            bs = tt[t] + ss[s]
            ok = self.sumA[lo:hi] + ra[r] <= L
            ok &= self.sumBS[lo:hi] + (bs + ts[t]) <= L
            ok &= ro[r] + bs <= L
            ok &= self.dr[lo:hi] + self.idx.dram_r[j] <= self.drcap[lo:hi]
            ok &= self.st[lo:hi] + self.idx.state_t[j] <= self.stcap[lo:hi]
            sel = np.flatnonzero(ok)
            if len(sel):
                sel += lo
                fill = np.maximum(self.sumA[sel], self.sumBS[sel]) / self.lim[sel]
                g = int(sel[np.argmin(self.rank[j][self.pair[sel]] - 0.5 * fill)])
                self._add(g, j, float(ra[self.r[g]]), float(tt[self.t[g]] + ss[self.s[g]] + ts[self.t[g]]))
                return True
        cand = self.okW[:, j] & self.fits_nodes
        if not cand.any():
            self.unplaced.append(j)
            return False
        if self.open_floor is None:
            k = int(self.by_cost[cand[self.by_cost]][0])
        else:  # least c_k max(load, floor), ties to the cheaper configuration, then the first
            ks = np.flatnonzero(cand)
            kr, kt, kp = self.kr[ks], self.kt[ks], self.ks[ks]
            load = np.maximum(self.RA[j, kr], self.TT[j, kt] + self.SS[j, kp] + self.TS[j, kt]) / self.idx.slo[j]
            k = int(ks[np.lexsort((self.cost[ks], self.cost[ks] * np.maximum(load, self.open_floor)))[0]])
        self._open(k, j)
        return True

    def _open(self, k: int, j: int) -> None:
        if self.G == self.cap:
            self._grow()
        g = self.G
        self.G += 1
        gid = len(self.members)
        self.members.append([])
        self.configs.append(k)
        self.gid[g], self.k[g], self.r[g], self.t[g], self.s[g], self.pair[g] = gid, k, self.kr[k], self.kt[k], self.ks[k], self.kpair[k]
        self.sumA[g] = self.sumBS[g] = self.dr[g] = self.st[g] = 0.0
        self.lim[g] = np.inf
        self.drcap[g], self.stcap[g] = self.drcap_k[k], self.stcap_k[k]
        self.minA[g], self.minBS[g] = self.minA_k[k], self.minBS_k[k]
        self.free -= self.nodes[k]
        self.fits_nodes = (self.nodes <= self.free[None, :] + 1e-9).all(axis=1)
        self._add(g, j, float(self.RA[j, self.kr[k]]), float(self.TT[j, self.kt[k]] + self.SS[j, self.ks[k]] + self.TS[j, self.kt[k]]))

    def _add(self, g: int, j: int, a: float, bs: float) -> None:
        idx = self.idx
        self.sumA[g] += a
        self.sumBS[g] += bs
        self.lim[g] = min(self.lim[g], idx.slo[j] * TOL)
        self.dr[g] += idx.dram_r[j]
        self.st[g] += idx.state_t[j]
        self.members[int(self.gid[g])].append(j)

    def solution(self) -> Solution:
        groups = [Group(int(self.whole[k]), tuple(m)) for k, m in zip(self.configs, self.members) if m]
        return Solution(groups, sorted(self.unplaced))


def flat_first_fit(idx: Index, order: Optional[Sequence[int] | np.ndarray] = None,
                   deadline: float = float("inf"), sweep_every: int = 32,
                   open_floor: Optional[float] = None) -> tuple[Solution, bool]:
    """The flat first fit in ``order`` (default tightest SLO first). Past ``deadline`` only the last
    128 open groups are tried (a job's test costs about the same over 8 groups, which open more at
    1.4x the $/h; at 10,000 distinct jobs: 8 groups 253,910 $/h in 0.40 s of CPU, 64 198,104 in
    0.31 s, 256 187,472 in 0.33 s, 1,024 185,572 in 0.40 s). ``open_floor``: open groups on the
    configuration that leaves room (module docstring) instead of the cheapest. Returns (solution,
    whether the deadline narrowed it)."""
    ff = FlatFirstFit(idx, open_floor)
    seq = np.argsort(idx.slo, kind="stable") if order is None else order
    window, cut = 1024, False
    for i, j in enumerate(seq):
        if i % sweep_every == 0 and i:
            ff.sweep()
            if not cut and time.perf_counter() > deadline:
                window, cut = 128, True
        ff.admit(int(j), window)
    return ff.solution(), cut
