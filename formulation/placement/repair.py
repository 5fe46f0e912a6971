"""Capacity-aware re-partitioning and the fast path's repair of jobs left out on a tight fleet.

The local search's exact step (:func:`formulation.placement.fast.repartition`) takes each subset of
its jobs on its *cheapest* configuration and checks the fleet only at the end. On a tight fleet
that fails: with a job that may be left out at the penalty, the cheapest partition places every
job in a group of its own, which needs more nodes than there are, so the move is refused and the
job stays out, although packing it with others on fewer nodes would place it (issue 26: the fast
path left 5 of 8 jobs out where every exact backend left 4; on 12 of 24 tight 8-job instances it
left more out than column generation).

:func:`capacity_repartition` is the same partition problem with the node budget in the search:
each subset keeps every configuration that is Pareto-minimal in ($/h, nodes per type), and a
depth-first search over "the lowest job not decided yet" (leave it out at the penalty, or put it
in a subset with one of that subset's configurations that fits the nodes left) memoised on (jobs
left, nodes left) finds the cheapest partition within the budget exactly (closed-form cycle
times, like the rest of the fast path). It is exponential in the number of jobs: for
neighbourhoods of at most ``EXACT_JOBS`` jobs.

:func:`repair` uses it on the jobs a construction left out: when every placeable job fits in one
neighbourhood (``REPAIR_ALL_JOBS``), one exact step over all of them and the groups; else
neighbourhoods of at most ``REPAIR_JOBS`` jobs: each job left out, a few others, and groups sharing
a GPU type with its configurations (randomised, until the deadline or ``STALE_ROUNDS`` rounds that
place nothing).
"""

from __future__ import annotations

import operator
import time
from typing import Optional, Sequence

import numpy as np

from formulation.placement.evaluate import REL_TOL, Group, Index, Solution

TOL = 1 + REL_TOL

#: the most jobs one capacity-aware re-partition of the local search takes (2^8 subsets: a few ms)
EXACT_JOBS = 8
#: the repair's neighbourhoods (2^10 subsets: 20-140 ms on a tight fleet) and the most placeable jobs
#: it re-partitions all at once, exactly (12 jobs on 3-4 nodes a type: 0.07-0.4 s of CPU)
REPAIR_JOBS = 10
REPAIR_ALL_JOBS = 12
#: neighbourhood rounds in a row that place no job before the repair stops
STALE_ROUNDS = 3
#: memoised states a re-partition may visit before it gives up (returns None)
MAX_STATES = 200_000


class _TooBig(Exception):
    pass


def feasible_subsets(idx: Index, jobs: Sequence[int], deadline: float = float("inf")
                     ) -> Optional[tuple[list[int], np.ndarray, np.ndarray]]:
    """The subsets of ``jobs`` that are a feasible group on some configuration (closed form, as
    :func:`formulation.placement.fast.subset_feasible`), grown a job at a time: a group that breaks
    a limit on a configuration (a ring, an own cycle, the DRAM) breaks it with more members, so
    only feasible subsets are extended -- on a tight fleet a few dozen of the 2^n. Returns (masks,
    the configurations ``ks`` considered, ``feas[row, i]`` on ``ks[i]``), or None past ``deadline``."""
    J = np.asarray(list(jobs), dtype=int)
    n = len(J)
    ks = np.flatnonzero(idx.ok[:, J].any(axis=1))
    ok = idx.ok[np.ix_(ks, J)].T  # (n, K')
    a = np.where(ok, idx.a[np.ix_(ks, J)].T, np.inf)  # ring weights (switches in)
    bs = np.where(ok, idx.bs[np.ix_(ks, J)].T, np.inf)
    tot = np.where(ok, idx.tot[np.ix_(ks, J)].T, np.inf)  # own cycles (no switches)
    w = idx.rollout_w(ks[None, :], J[:, None])  # (n, K'): rollout-node DRAM, or a member slot (pinned)
    st, slo = idx.state_t[J], idx.slo[J]
    cap_r, cap_t = idx.dram_cap_r[ks] * TOL, idx.dram_cap_t[ks] * TOL
    # the level's rows: mask, last job, ring sums, largest own cycle, smallest SLO, DRAM sums, feasible
    masks = 1 << np.arange(n)
    last = np.arange(n)
    sA, sB, mT, lim, dr, sT = a.copy(), bs.copy(), tot.copy(), slo.copy(), w.astype(float), st.copy()

    def feasible(sA, sB, mT, lim, dr, sT, base):
        lt = (lim * TOL)[:, None]
        return base & (sA <= lt) & (sB <= lt) & (mT <= lt) & (dr <= cap_r[None, :]) & (sT[:, None] <= cap_t[None, :])

    feas = feasible(sA, sB, mT, lim, dr, sT, ok)
    out_m: list[np.ndarray] = []
    out_f: list[np.ndarray] = []
    while len(masks):
        if time.perf_counter() > deadline:
            return None
        keep = feas.any(axis=1)
        masks, last, sA, sB, mT, lim, dr, sT, feas = (x[keep] for x in (masks, last, sA, sB, mT, lim, dr, sT, feas))
        out_m.append(masks)
        out_f.append(feas)
        nxt = []
        for i in range(n):
            sel = np.flatnonzero(last < i)
            if not len(sel):
                continue
            l2 = np.minimum(lim[sel], slo[i])
            args = (sA[sel] + a[i], sB[sel] + bs[i], np.maximum(mT[sel], tot[i]), l2, dr[sel] + w[i], sT[sel] + st[i])
            nxt.append((masks[sel] | (1 << i), np.full(len(sel), i), *args, feasible(*args, feas[sel] & ok[i])))
        if not nxt:
            break
        masks, last, sA, sB, mT, lim, dr, sT, feas = (np.concatenate(parts) for parts in zip(*nxt))
    if not out_m:
        return [], ks, np.zeros((0, len(ks)), dtype=bool)
    return np.concatenate(out_m).tolist(), ks, np.concatenate(out_f)


def pareto_options(idx: Index, jobs: Sequence[int], deadline: float = float("inf")
                   ) -> Optional[dict[int, list[tuple[float, int, tuple[int, ...]]]]]:
    """For each subset ``mask`` of ``jobs`` that is a feasible group somewhere: its configurations
    that no other is cheaper-or-equal on with no more nodes of any type, as ($/h, k, nodes),
    cheapest first (None past ``deadline``)."""
    found = feasible_subsets(idx, jobs, deadline)
    if found is None:
        return None
    masks, ks, feas = found
    nm = idx.node_matrix[ks] if len(ks) else np.zeros((0, len(idx.types)))
    cost = idx.cost[ks] if len(ks) else np.zeros(0)
    out: dict[int, list[tuple[float, int, tuple[int, ...]]]] = {}
    for row, mask in enumerate(masks):
        cand = np.flatnonzero(feas[row])
        cand = cand[np.lexsort((nm[cand].sum(axis=1), cost[cand]))]
        v = nm[cand]
        # dom[i, j]: candidate i (earlier: no dearer) uses no more nodes of any type than j
        dom = (v[:, None, :] <= v[None, :, :]).all(axis=2) & np.tri(len(cand), k=-1, dtype=bool).T
        keep = ~dom.any(axis=0)
        out[mask] = [(float(cost[i]), int(ks[i]), tuple(int(x) for x in nm[i])) for i in cand[keep]]
    return out


def capacity_repartition(idx: Index, jobs: Sequence[int], budget: np.ndarray, penalty: Optional[float] = None,
                         deadline: float = float("inf")):
    """The cheapest partition of ``jobs`` (at most ~``EXACT_JOBS``) into feasible groups using at
    most ``budget`` nodes per type (``idx.types`` order), a job left out at ``penalty`` when given;
    (cost, [(k, members)]) as :func:`~formulation.placement.fast.repartition` returns (``k = -1``: left
    out), or None when there is none, or the search outgrew ``MAX_STATES`` or the deadline."""
    jobs = list(jobs)
    n = len(jobs)
    if n == 0:
        return 0.0, []
    opts = pareto_options(idx, jobs, deadline)
    if opts is None:
        return None
    by_low: list[list[int]] = [[] for _ in range(n)]
    for m in sorted(opts):
        by_low[(m & -m).bit_length() - 1].append(m)
    top = np.zeros(len(idx.types), dtype=int)  # the most nodes of a type one group here uses
    for lst in opts.values():
        for _, _, use in lst:
            top = np.maximum(top, use)
    # nodes beyond what the jobs left could use make no difference: one memo entry for them
    room = [tuple(cnt * int(t) for t in top) for cnt in range(n + 1)]
    memo: dict[tuple[int, tuple[int, ...]], tuple[float, int, int, tuple[int, ...]]] = {}
    calls = [0]
    inf = float("inf")
    sub = operator.sub

    def clip(mask: int, left: tuple[int, ...]) -> tuple[int, ...]:
        return tuple(map(min, left, room[mask.bit_count()]))

    def best(mask: int, left: tuple[int, ...]) -> float:
        if mask == 0:
            return 0.0
        key = (mask, tuple(map(min, left, room[mask.bit_count()])))
        hit = memo.get(key)
        if hit is not None:
            return hit[0]
        calls[0] += 1
        if len(memo) >= MAX_STATES or (calls[0] % 256 == 0 and time.perf_counter() > deadline):
            raise _TooBig
        low = mask & -mask
        out = (inf, 0, -1, left)
        if penalty is not None:
            out = (penalty + best(mask ^ low, left), low, -1, left)
        for s in by_low[low.bit_length() - 1]:
            if s & ~mask:
                continue
            for c, k, use in opts[s]:
                if c >= out[0]:
                    break  # cheapest first: the rest cost more on their own
                rest = tuple(map(sub, left, use))
                if min(rest) < 0:
                    continue
                v = c + best(mask ^ s, rest)
                if v < out[0]:
                    out = (v, s, k, rest)
        memo[key] = out
        return out[0]

    full = (1 << n) - 1
    start = tuple(int(x) for x in np.floor(np.asarray(budget, dtype=float) + 1e-9))
    try:
        value = best(full, start)
    except (_TooBig, RecursionError):
        return None
    if not np.isfinite(value):
        return None
    parts = []
    mask, left = full, start
    while mask:
        _, s, k, rest = memo[(mask, clip(mask, left))]
        parts.append((k, [jobs[i] for i in range(n) if s >> i & 1]))
        mask, left = mask & ~s, rest
    return float(value), parts


def repair(idx: Index, sol: Solution, deadline: float, seed: int = 0) -> tuple[Solution, int, bool]:
    """Place jobs ``sol`` left out (those that fit somewhere alone) by capacity-aware exact
    re-partitions of them with groups of the plan (anchored groups stay as they are); a move is
    kept when it lowers $/h + penalty x jobs left out. Returns (solution, jobs placed, whether the
    result is the optimum of the closed-form model over every group not anchored: at most
    ``REPAIR_ALL_JOBS`` jobs, re-partitioned at once)."""
    out = [j for j in sol.unplaced if len(idx.job_configs[j])]
    if not out:
        return sol, 0, False
    lost = [j for j in sol.unplaced if not len(idx.job_configs[j])]
    groups = [Group(g.config, tuple(g.members), g.anchor) for g in sol.groups]
    nm = idx.node_matrix
    cap = np.array([idx.capacity[t] for t in idx.types], dtype=float)
    P = idx.penalty
    rng = np.random.default_rng(seed)
    n_out0 = len(out)

    def apply(pick: list[int], take: list[int]) -> Optional[bool]:
        """Re-partition the groups ``pick`` with the jobs ``take``: whether it was kept (None: the
        search gave up)."""
        nonlocal groups, out
        used = sum((nm[g.config] for g in groups), np.zeros(len(idx.types)))
        used_before = sum((nm[groups[b].config] for b in pick), np.zeros(len(idx.types)))
        jobs = [j for b in pick for j in groups[b].members] + take
        before = sum(float(idx.cost[groups[b].config]) for b in pick) + P * len(take)
        res = capacity_repartition(idx, jobs, cap - used + used_before, P, deadline)
        if res is None:
            return None
        if res[0] >= before - 1e-9:
            return False
        new = [Group(k, tuple(m)) for k, m in res[1] if k >= 0]
        left = [j for k, m in res[1] if k < 0 for j in m]
        groups = [g for i, g in enumerate(groups) if i not in pick] + new
        out = [j for j in out if j not in take] + left
        return True

    free_groups = [i for i, g in enumerate(groups) if not g.anchor]
    exact = False
    if sum(len(groups[i].members) for i in free_groups) + len(out) <= REPAIR_ALL_JOBS:
        exact = apply(free_groups, list(out)) is not None  # the whole (small) instance at once: exact
    if not exact:
        # neighbourhoods: a job left out, up to two others, groups sharing a GPU type with the
        # job's configurations (random), more jobs left out in the room left; rounds until the
        # deadline or STALE_ROUNDS rounds in a row place nothing
        stale = 0
        while out and stale < STALE_ROUNDS and time.perf_counter() < deadline:
            n_before = len(out)
            for j in list(out):
                if time.perf_counter() > deadline:
                    break
                if j not in out:
                    continue
                types = nm[idx.job_configs[j]].sum(axis=0) > 0  # the GPU types the job may use
                near = [i for i, g in enumerate(groups) if not g.anchor and (nm[g.config][types] > 0).any()]
                others = [out[int(i)] for i in rng.permutation(len(out)) if out[int(i)] != j]
                take = [j] + others[:2]
                pick: list[int] = []
                size = len(take)
                for i in rng.permutation(len(near)).tolist():
                    g = groups[near[i]]
                    if size + len(g.members) <= REPAIR_JOBS:
                        pick.append(near[i])
                        size += len(g.members)
                take += others[2:2 + REPAIR_JOBS - size]
                apply(pick, take)
            stale = stale + 1 if len(out) == n_before else 0
    return Solution(groups, sorted(out + lost), sol.lower_bound, list(sol.moved)), n_out0 - len(out), exact
