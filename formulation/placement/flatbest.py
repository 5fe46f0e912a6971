"""Best fit over every pair of pool types at once, groups free to grow their pools.

:func:`formulation.placement.fast.pack` (best fit, both pools free to grow) tests a job pair by
pair: at fleet scale and a short limit it runs over two pairs a job, or not at all. Here every
open whole-pool group, of any pair, is one slot of flat arrays padded to the largest pair's pool
sizes (``nR`` rollout sizes x ``nT`` training sizes), so a job is tested against all of them at
once:

* 1-D screens per slot (DRAM on the rollout nodes and the largest training pool, room for the
  job's quickest phases), then the rings over the slot's pair's sizes,
  ``sumA[g, r] + (a_r + sigma_r) <= L`` and ``sumBS[g, t] + (b_t + s + sigma_t) <= L`` with
  ``L = min(lim, slo_j)`` (warm switches added uncapped, as :mod:`formulation.placement.fast`:
  a group accepted here is feasible by :meth:`formulation.placement.evaluate.Index.feasible`),
  training DRAM per size, and every member's own cycle ``max(maxTOT[g, r, t], a_r + b_t + s) <= L``;
* the pools a group grows into must be within the free nodes.

The job joins the slot and sizes of least extra $/h (ties: the fullest), when that is below the
cheapest group of its own; else it opens a group on its cheapest configuration within the free
nodes. Groups no job could join any more leave the slots every few jobs. Past ``deadline`` the
packing stops and returns None (a cut-short best fit is not worth its tail).
"""

from __future__ import annotations

import time
from typing import Optional, Sequence

import numpy as np

from formulation.placement.evaluate import REL_TOL, Group, Index, Solution

TOL = 1 + REL_TOL


def flat_best_fit(idx: Index, order: Optional[Sequence[int] | np.ndarray] = None,
                  deadline: float = float("inf"), sweep_every: int = 32) -> Optional[Solution]:
    """Best fit in ``order`` (default tightest SLO first) over every pair at once (module
    docstring); None when ``deadline`` passed before the last job."""
    from formulation.placement.pairs import _pairs

    pairs = _pairs(idx)
    n, P = idx.n, len(pairs)
    seq = np.argsort(idx.slo, kind="stable") if order is None else np.asarray(order)
    if P == 0 or n == 0:
        return Solution([], sorted(int(j) for j in seq))
    nR = max(len(pr.rs) for pr in pairs)
    nT = max(len(pr.ts) for pr in pairs)
    nRr, nTr = len(idx.r_keys), len(idx.t_keys)
    # per pair, padded: rows into the per-(type, size) arrays (the pad row: an extra inf row)
    rrow = np.full((P, nR), nRr)
    trow = np.full((P, nT), nTr)
    rsz = np.full((P, nR), 1e9)
    tsz = np.full((P, nT), 1e9)
    cost = np.full((P, nR, nT), np.inf)
    grid = np.full((P, nR, nT), -1)
    stcap = np.full((P, nT), -1.0)
    srow = np.zeros(P, dtype=int)
    drcap = np.zeros(P)
    tp = np.zeros(P, dtype=int)
    tq = np.zeros(P, dtype=int)
    minAB_p = np.zeros((P, 2))  # the quickest rollout / training ring weight of any job on the pair
    for i, pr in enumerate(pairs):
        a, b = len(pr.rs), len(pr.ts)
        rrow[i, :a], trow[i, :b] = pr.r_rows, pr.t_rows
        rsz[i, :a], tsz[i, :b] = pr.rs, pr.ts
        cost[i, :a, :b], grid[i, :a, :b] = pr.cost, pr.grid
        stcap[i, :b] = pr.dram_t * TOL
        srow[i], drcap[i], tp[i], tq[i] = pr.s_row, pr.dram_r * TOL, pr.tp, pr.tq
        minAB_p[i] = pr.min_a, pr.min_bs
    same = tp == tq
    # the most nodes of a type any growth takes (rollout plus training pool when they share a type)
    span = np.zeros(len(idx.types))
    for pr in pairs:
        span[pr.tp] = max(span[pr.tp], pr.rs.max() + (pr.ts.max() if pr.tp == pr.tq else 0))
        span[pr.tq] = max(span[pr.tq], pr.ts.max())
    stmax = stcap.max(axis=1)
    inf_r = np.full((1, n), np.inf)
    # per job and pair, padded (job-major, so a job's block is contiguous): ring weights, own phases
    RA = np.vstack([idx.R + idx.SR, inf_r]).T
    TB = np.vstack([idx.T + idx.ST, inf_r]).T
    SP = idx.S.T[:, srow][:, :, None]  # (n, P, 1) sync
    JA = np.ascontiguousarray(RA[:, rrow])  # (n, P, nR)
    JB = np.ascontiguousarray(TB[:, trow] + SP)  # (n, P, nT)
    JR = np.ascontiguousarray(np.vstack([idx.R, inf_r]).T[:, rrow])
    JT = np.ascontiguousarray(np.vstack([idx.T, inf_r]).T[:, trow] + SP)
    # the 1-D screens' job side per pair: rollout DRAM, training state, quickest ring weights
    JY = np.empty((n, P, 4))
    JY[:, :, 0], JY[:, :, 1] = idx.dram_r[:, None], idx.state_t[:, None]
    JY[:, :, 2], JY[:, :, 3] = JA.min(axis=2), JB.min(axis=2)
    free = np.array([idx.capacity[t] for t in idx.types], dtype=float)
    whole = np.flatnonzero(idx.pinned_m == 0)
    by_cost = whole[np.argsort(idx.cost[whole], kind="stable")]
    nodes_bc = idx.node_matrix[by_cost]
    okbc = np.ascontiguousarray(idx.ok[by_cost].T)  # job x configuration (cheapest first)
    fits = (nodes_bc <= free[None, :] + 1e-9).all(axis=1)
    pi_, ri_, ti_ = np.nonzero(grid >= 0)
    k_where = dict(zip(grid[pi_, ri_, ti_].tolist(), zip(pi_.tolist(), ri_.tolist(), ti_.tolist())))
    slo_tol = idx.slo * TOL
    lim_j = np.empty((n, 4))
    lim_j[:, :2], lim_j[:, 2], lim_j[:, 3] = np.inf, slo_tol, slo_tol

    cap = 64
    # per slot: pair, pools (rows of the pair's sizes), group id, $/h; X = (rollout DRAM, training
    # state, least rollout ring, least training ring) and C = their limits (rollout node DRAM,
    # largest training pool's DRAM, the group's SLO twice); rings per size, own cycles per (r, t)
    S = {"pair": np.zeros(cap, dtype=int), "cr": np.zeros(cap, dtype=int), "ct": np.zeros(cap, dtype=int),
         "gid": np.zeros(cap, dtype=int), "cost": np.zeros(cap), "X": np.zeros((cap, 4)), "C": np.zeros((cap, 4)),
         "sumA": np.zeros((cap, nR)), "sumBS": np.zeros((cap, nT)), "maxTOT": np.zeros((cap, nR, nT))}
    G = 0
    members: list[list[int]] = []
    where: list[tuple[int, int, int]] = []  # per group id: (pair, r, t) at the end
    unplaced: list[int] = []

    for i, j in enumerate(seq):
        j = int(j)
        if i % sweep_every == 0 and i:
            if time.perf_counter() > deadline:
                return None
            if G:  # slots no job could join any more
                keep = (S["X"][:G, 2:] + minAB_p[S["pair"][:G]] <= S["C"][:G, 2:]).all(axis=1)
                if not keep.all():
                    for arr in S.values():
                        arr[:int(keep.sum())] = arr[:G][keep]
                    G = int(keep.sum())
        jA, jB, jR, jT = JA[j], JB[j], JR[j], JT[j]
        # the cheapest group of its own within the free nodes
        cand = okbc[j] & fits
        solo_k = int(by_cost[int(np.argmax(cand))]) if cand.any() else -1
        solo_c = float(idx.cost[solo_k]) if solo_k >= 0 else np.inf
        chosen = None
        if G:
            pg = S["pair"][:G]
            lim = np.minimum(S["C"][:G], lim_j[j])
            rows = np.flatnonzero((S["X"][:G] + JY[j][pg] <= lim).all(axis=1))
            if len(rows):
                pr_ = pg[rows]
                Lr = lim[rows, 2][:, None]
                A = S["sumA"][rows] + jA[pr_]
                B = S["sumBS"][rows] + jB[pr_]
                okB = (B <= Lr) & ((S["X"][rows, 1] + idx.state_t[j])[:, None] <= stcap[pr_])
                feas = (A <= Lr)[:, :, None] & okB[:, None, :]
                feas &= np.maximum(S["maxTOT"][rows], jR[pr_][:, :, None] + jT[pr_][:, None, :]) <= Lr[:, :, None]
                if not (free >= span).all():  # the pools it grows into, within the free nodes
                    cr, ct = S["cr"][rows], S["ct"][rows]
                    ep = rsz[pr_] - rsz[pr_, cr][:, None]  # (m, nR)
                    eq = tsz[pr_] - tsz[pr_, ct][:, None]  # (m, nT)
                    fp, fq = free[tp[pr_]][:, None, None], free[tq[pr_]][:, None, None]
                    both = ep[:, :, None] + eq[:, None, :]
                    feas &= np.where(same[pr_][:, None, None], both <= fp + 1e-9,
                                     (ep[:, :, None] <= fp + 1e-9) & (eq[:, None, :] <= fq + 1e-9))
                # least extra $/h; among equals the fullest (extra $/h are whole multiples of cents
                # or more apart, so the fill, at most 1, only breaks ties)
                fill = np.minimum(np.maximum(A[:, :, None], B[:, None, :]) / Lr[:, :, None], 2.0)  # finite
                marg = np.where(feas, (cost[pr_] - S["cost"][rows][:, None, None]) - 1e-4 * fill, np.inf)
                c = int(marg.argmin())
                gi, rt = divmod(c, nR * nT)
                r, t = divmod(rt, nT)
                m = float(cost[pr_[gi], r, t] - S["cost"][rows[gi]]) if np.isfinite(marg.flat[c]) else np.inf
                if m < solo_c - 1e-9:
                    chosen = (int(rows[gi]), r, t)
        if chosen is not None:
            g, r, t = chosen
            p = int(S["pair"][g])
            dr_, dt_ = rsz[p, r] - rsz[p, S["cr"][g]], tsz[p, t] - tsz[p, S["ct"][g]]
            free[tp[p]] -= dr_
            free[tq[p]] -= dt_
            S["cr"][g], S["ct"][g], S["cost"][g] = r, t, cost[p, r, t]
            if dr_ or dt_:
                fits = (nodes_bc <= free[None, :] + 1e-9).all(axis=1)
        elif solo_k < 0:  # no group takes it and none of its own fits the free nodes
            unplaced.append(j)
            continue
        else:
            p, r, t = k_where[solo_k]
            if G == cap:
                for name, arr in S.items():
                    S[name] = np.concatenate([arr, np.zeros_like(arr)])
                cap *= 2
            g = G
            G += 1
            S["pair"][g], S["cr"][g], S["ct"][g], S["gid"][g], S["cost"][g] = p, r, t, len(members), cost[p, r, t]
            members.append([])
            where.append((p, r, t))
            S["X"][g] = 0.0
            S["C"][g] = (drcap[p], stmax[p], np.inf, np.inf)
            S["sumA"][g] = 0.0
            S["sumBS"][g] = 0.0
            S["maxTOT"][g] = 0.0
            free -= idx.node_matrix[solo_k]
            fits = (nodes_bc <= free[None, :] + 1e-9).all(axis=1)
        sa, sb = S["sumA"][g], S["sumBS"][g]
        sa += jA[p]
        sb += jB[p]
        np.maximum(S["maxTOT"][g], jR[p][:, None] + jT[p][None, :], out=S["maxTOT"][g])
        x = S["X"][g]
        x[0] += idx.dram_r[j]
        x[1] += idx.state_t[j]
        x[2], x[3] = sa.min(), sb.min()
        S["C"][g, 2:] = min(S["C"][g, 2], slo_tol[j])
        gid = int(S["gid"][g])
        members[gid].append(j)
        where[gid] = (p, int(S["cr"][g]), int(S["ct"][g]))
    groups = [Group(int(grid[p, r, t]), tuple(m)) for (p, r, t), m in zip(where, members) if m]
    return Solution(groups, sorted(unplaced))
