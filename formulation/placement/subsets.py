"""Exact re-partition of a few jobs: every subset's cheapest feasible configuration, then a DP.

For jobs ``J`` (at most about 10) and every non-empty subset ``S`` (bit ``i`` = ``J[i]``): the
configurations ``k`` on which ``S`` is a feasible group by the closed form of
:mod:`formulation.placement.evaluate` (every member may use ``k``, ``max(sum a, sum bs, max tot)
<= min slo``, the rollout-row and training-DRAM sums within the node), vectorised over subsets x
configurations as matrix products with the subsets' 0/1 membership matrix; the cheapest of them
``c(S)``. The cheapest partition is then the DP ``best(M) = min_{S subset of M, S contains the
lowest job of M} best(M - S) + c(S)`` over the masks ``M``. When that partition needs more nodes
than the budget, the capacity-aware search of :mod:`formulation.placement.repair` decides.
Used by the fast path's local searches (:mod:`formulation.placement.fast`,
:mod:`formulation.placement.lns`) and the greedy's re-pack move.
"""

from __future__ import annotations

from typing import Optional, Sequence

import numpy as np

from formulation.placement.evaluate import REL_TOL, Index

TOL = 1 + REL_TOL



def subset_costs(idx: Index, jobs: Sequence[int]) -> tuple[np.ndarray, np.ndarray]:
    """For every non-empty subset ``S`` of ``jobs`` (bit ``i`` = ``jobs[i]``; index ``mask - 1``):
    the cost of its cheapest configuration on which it is a feasible group (closed form, inf when
    none) and that configuration. Vectorised over subsets x configurations."""
    ks, feas = subset_feasible(idx, jobs)
    c = np.where(feas, idx.cost[ks][None, :], np.inf)
    n_masks = (1 << len(jobs)) - 1
    best = c.argmin(axis=1) if len(ks) else np.zeros(n_masks, dtype=int)
    cost = c[np.arange(n_masks), best] if len(ks) else np.full(n_masks, np.inf)
    return cost, (ks[best] if len(ks) else best)


def subset_feasible(idx: Index, jobs: Sequence[int]) -> tuple[np.ndarray, np.ndarray]:
    """The configurations ``ks`` some of ``jobs`` may use and ``feas[mask - 1, i]``: whether the
    subset ``mask`` of ``jobs`` is a feasible group on ``ks[i]`` (closed form).

    Every subset's sums are built from smaller ones, a bit at a time (the masks with highest bit
    ``i`` are those below ``1 << i`` plus job ``i``): ``2^n`` row operations over the
    configurations, where products with the subsets' membership matrix (inner size ``n``) took
    4-6x longer."""
    J = np.asarray(jobs, dtype=int)
    n = len(J)
    ks = np.flatnonzero(idx.ok[:, J].any(axis=1))
    ok = idx.ok[np.ix_(ks, J)]  # (K', n)
    a = np.where(ok, idx.a[np.ix_(ks, J)], 0.0)  # ring weights (switches in)
    bs = np.where(ok, idx.bs[np.ix_(ks, J)], 0.0)
    tot = np.where(ok, idx.tot[np.ix_(ks, J)], 0.0)  # own cycles (no switches)
    w = idx.rollout_w(ks[:, None], J[None, :])  # rollout-node DRAM, or 1 a member on a pinned configuration
    S, K = 1 << n, len(ks)
    all_ok = np.empty((S, K), dtype=bool)
    sumA, sumBS, maxT, dr = (np.empty((S, K)) for _ in range(4))
    lim, st = np.empty(S), np.empty(S)
    all_ok[0], sumA[0], sumBS[0], maxT[0], dr[0], lim[0], st[0] = True, 0.0, 0.0, 0.0, 0.0, np.inf, 0.0
    for i in range(n):
        lo, hi = 1 << i, 1 << (i + 1)
        np.logical_and(all_ok[:lo], ok[:, i], out=all_ok[lo:hi])
        np.add(sumA[:lo], a[:, i], out=sumA[lo:hi])
        np.add(sumBS[:lo], bs[:, i], out=sumBS[lo:hi])
        np.maximum(maxT[:lo], tot[:, i], out=maxT[lo:hi])
        np.add(dr[:lo], w[:, i], out=dr[lo:hi])
        np.minimum(lim[:lo], idx.slo[J[i]], out=lim[lo:hi])
        np.add(st[:lo], idx.state_t[J[i]], out=st[lo:hi])
    lim = lim[1:, None] * TOL
    feas = (all_ok[1:] & (sumA[1:] <= lim) & (sumBS[1:] <= lim) & (maxT[1:] <= lim)
            & (dr[1:] <= idx.dram_cap_r[ks][None, :] * TOL) & (st[1:, None] <= idx.dram_cap_t[ks][None, :] * TOL))
    return ks, feas


def repartition(idx: Index, jobs: list[int], free: np.ndarray, used_before: np.ndarray, penalty: Optional[float] = None,
                deadline: float = float("inf")):
    """The cheapest partition of ``jobs`` (<= ~10) into groups, each on its cheapest configuration,
    using at most ``used_before + free`` nodes per type; (cost, [(k, members)]) or None. With
    ``penalty``, a job may also be left out at that price (configuration -1). When the cheapest
    partition needs more nodes than that, the capacity-aware search
    (:func:`formulation.placement.repair.capacity_repartition`, up to its ``EXACT_JOBS``, until
    ``deadline``) decides."""
    n = len(jobs)
    full = (1 << n) - 1
    cost, conf = subset_costs(idx, jobs)
    if penalty is not None:
        for i in range(n):
            if cost[(1 << i) - 1] > penalty:
                cost[(1 << i) - 1], conf[(1 << i) - 1] = penalty, -1
    finite = np.isfinite(cost)
    # subsets by lowest member, feasible ones only
    by_low: list[list[int]] = [[] for _ in range(n)]
    for m in (np.flatnonzero(finite) + 1).tolist():
        by_low[(m & -m).bit_length() - 1].append(m)
    best_c = [np.inf] * (full + 1)
    best_p = [0] * (full + 1)
    best_c[0] = 0.0
    for mask in range(1, full + 1):
        low = (mask & -mask).bit_length() - 1
        b, bp = np.inf, 0
        for s in by_low[low]:
            if s & ~mask:
                continue
            v = best_c[mask ^ s] + cost[s - 1]
            if v < b:
                b, bp = v, s
        best_c[mask], best_p[mask] = b, bp
    if not np.isfinite(best_c[full]):
        return None
    parts = []
    m = full
    while m:
        parts.append(best_p[m])
        m ^= best_p[m]
    nm = idx.node_matrix
    use = sum((nm[conf[s - 1]] for s in parts if conf[s - 1] >= 0), np.zeros(nm.shape[1]))
    if (use > used_before + free + 1e-9).any():
        # the cheapest partition needs more nodes than there are (a tight fleet): the same problem
        # with the node budget in the search, on neighbourhoods small enough for it
        from formulation.placement.repair import EXACT_JOBS, capacity_repartition

        return capacity_repartition(idx, jobs, used_before + free, penalty, deadline) if n <= EXACT_JOBS else None
    return float(best_c[full]), [(int(conf[s - 1]), [jobs[i] for i in range(n) if s >> i & 1]) for s in parts]
