"""Pricing for the pattern model: the most valuable feasible group on one configuration.

Given duals ``pi_c >= 0`` of the class cover rows and the fixed price ``f_k`` of configuration
``k`` (its $/h plus the capacity duals of its nodes), find a multiset of classes ``m_c <= d_c``
maximising ``sum_c pi_c m_c`` such that ``m`` is a feasible group on ``k``
(:mod:`formulation.placement.evaluate`). Its reduced cost is ``f_k - max``.

Branch and bound, depth first, over the classes sorted by SLO descending: adding a class can
only lower the group's SLO limit ``theta`` (the smallest SLO of its members), so ``theta`` is the
SLO of the class added last. The bound at a node is the current value plus, for each resource
(rollout seconds and training seconds against ``theta``, rollout-node and training-pool DRAM),
the fractional knapsack over the classes still allowed; the smallest of those is a valid upper
bound because each resource alone limits the group. A node budget caps the search; the largest
bound left open is then reported so that the caller still has a valid bound on the reduced cost.
"""

from __future__ import annotations

from dataclasses import dataclass
from itertools import islice
from typing import Any, Optional

import numpy as np

from formulation.placement.evaluate import REL_TOL


@dataclass
class PricingItems:
    """Classes usable on one configuration, sorted by SLO descending."""

    cls: np.ndarray  # class ids
    value: np.ndarray  # pi
    demand: np.ndarray
    a: np.ndarray
    bs: np.ndarray
    tot: np.ndarray
    slo: np.ndarray
    w: np.ndarray
    s: np.ndarray
    cap_w: float
    cap_s: float


@dataclass
class PricingResult:
    columns: list[tuple[float, dict[int, int]]]  # (value, {class: count}) best first
    upper_bound: float  # no feasible group on this configuration is worth more
    exact: bool


def price(items: PricingItems, min_value: float, max_columns: int = 5, node_budget: int = 20000,
          deadline: float = float("inf"), tolerance: float = 0.0, enumerate_all: Optional[bool] = None) -> PricingResult:
    """Groups worth more than ``min_value`` (best first), and an upper bound on any group's worth.

    The SLO coupling is taken apart by thresholds: for each distinct SLO ``theta`` the classes with
    ``slo >= theta`` form a knapsack with the fixed capacity ``theta`` on both the rollout and the
    training side (and the two DRAM limits). Every feasible group is feasible for the threshold of
    its smallest SLO, and every group found under a threshold is feasible, so the best over the
    thresholds is the exact answer. Thresholds go in order of their root bound, and the search
    stops when no remaining root bound can beat the incumbents.

    Each knapsack is a depth-first branch and bound over the classes in order of value per unit of
    (rollout + training) time, with the fractional fill of each resource as the bound (the smallest
    of them is valid: each resource alone limits the group), in pure Python: groups hold a handful
    of members, so the fills stop after a few classes. ``tolerance`` prunes nodes that cannot beat
    the threshold by more than it (far fewer nodes when many groups are worth about the same, as
    with the degenerate duals near the LP optimum); the bound returned grows by it.

    ``enumerate_all``: return *every* group worth more than ``min_value`` (``exact`` is False when
    they are more than ``max_columns`` or the search is cut short) instead of the best
    ``max_columns``; by default it is on when ``max_columns >= 1000``.
    """
    import heapq
    import time

    n = len(items.cls)
    if n == 0:
        return PricingResult([], max(0.0, min_value), True)
    if not (max_columns >= 1000 if enumerate_all is None else enumerate_all):
        from formulation.placement import pricing_jit  # (imports numba only when it runs)

        if pricing_jit.use_jit(n, deadline):  # the same search compiled (pricing_jit's docstring)
            res = pricing_jit.price_jit(items, min_value, max_columns, node_budget, deadline, tolerance)
            if res is not None:
                return PricingResult(*res)
    tol = 1 + REL_TOL
    val = [float(v) for v in items.value]
    dem = [int(d) for d in items.demand]
    A = [float(x) for x in items.a]
    B = [float(x) for x in items.bs]
    TOT = [float(x) for x in items.tot]
    SLO = [float(x) for x in items.slo]
    W = [float(x) for x in items.w]
    S = [float(x) for x in items.s]
    capw, caps = items.cap_w, items.cap_s
    counts = [0] * n
    best: list[tuple[float, tuple]] = []  # min-heap of the best groups (a plain list when enumerating)
    seen: set[tuple] = set()
    if enumerate_all is None:
        enumerate_all = max_columns >= 1000
    state: dict[str, Any] = {"open": 0.0, "nodes": 0, "cut": False}

    def threshold() -> float:
        if enumerate_all:
            return min_value
        return best[0][0] if len(best) >= max_columns else min_value

    def record(value: float) -> None:
        key = tuple(counts)
        if key in seen:
            return
        seen.add(key)
        if enumerate_all:
            best.append((value, key))
            if len(best) > max_columns:
                state["cut"] = True
                state["nodes"] = node_budget + 1  # stop: too many to enumerate
        elif len(best) < max_columns:
            heapq.heappush(best, (value, key))
        else:
            heapq.heapreplace(best, (value, key))

    def frac(order, size, cap) -> float:
        total, left = 0.0, cap
        for i in order:
            av = dem[i] - counts[i]
            if av <= 0:
                continue
            sz = size[i]
            if sz <= 1e-12:
                total += val[i] * av
                continue
            if left <= 0:
                break
            need = sz * av
            if need <= left:
                total += val[i] * av
                left -= need
            else:
                total += val[i] * left / sz
                break
        return total

    def solve_threshold(theta: float, elig: list[int], root_ub: float, forced: int = -1) -> None:
        lim = theta * tol
        inf = float("inf")
        # the five orders of the threshold's classes: each whole order (sorted once, from the
        # SLO-descending list as ``elig`` is) filtered to them, the same lists as sorting ``elig``
        ok = [False] * n
        for i in elig:
            ok[i] = True
        main, by_a, by_b, by_w, by_s = ([i for i in order if ok[i]] for order in orders)
        m = len(main)
        pos = {i: r for r, i in enumerate(main)}
        # only groups with a member whose SLO is theta: the others have a larger smallest SLO and are
        # found under their own threshold (each group is searched once)
        at_theta = [SLO[i] <= theta * (1 + 1e-12) for i in range(n)]
        last = max((pos[i] for i in elig if at_theta[i]), default=-1)
        AB = [A[i] + B[i] for i in range(n)]
        cache: dict[tuple[int, int], list[int]] = {}

        def suffix(which: int, order: list[int], p: int) -> list[int]:
            if which == 0:
                return main[p:]
            lst = cache.get((which, p))
            if lst is None:
                lst = [i for i in order if pos[i] >= p]
                if m <= 400:
                    cache[(which, p)] = lst
            return lst

        def bound_prunes(p, sa, sb, sw, ss, v, thr):
            b = frac(islice(main, p, None), AB, 2 * theta - sa - sb)
            if v + b <= thr:
                return True, b
            for which, order, size, cap in ((1, by_a, A, theta - sa), (2, by_b, B, theta - sb), (3, by_w, W, capw - sw),
                                            (4, by_s, S, caps - ss)):
                if cap == inf:
                    continue
                b = min(b, frac(suffix(which, order, p), size, cap))
                if v + b <= thr:
                    return True, b
            return False, b

        def dfs(p, sa, sb, sw, ss, v, has) -> None:
            state["nodes"] += 1
            if p == m or (not has and p > last):
                return
            thr = threshold() + 1e-12 + tolerance
            if v <= thr:  # (above the threshold already, every group below is worth more: nothing to prune)
                pruned, b = bound_prunes(p, sa, sb, sw, ss, v, thr)
                if pruned:
                    return
            if state["nodes"] > node_budget or (state["nodes"] & 255 == 0 and time.perf_counter() > deadline):
                if v > thr:
                    b = bound_prunes(p, sa, sb, sw, ss, v, thr)[1]
                state["open"] = max(state["open"], v + b)
                state["cut"] = True
                return
            i = main[p]
            base = 1 if i == forced else 0  # (the forced member's first copy is in already)
            c_max = 0
            for c in range(1, dem[i] - base + 1):
                if sa + c * A[i] > lim or sb + c * B[i] > lim or sw + c * W[i] > capw * tol or ss + c * S[i] > caps * tol:
                    break
                c_max = c
            has_i = has or at_theta[i]
            for c in range(c_max, 0, -1):
                counts[i] = base + c
                if has_i and v + c * val[i] > threshold() + 1e-12:
                    record(v + c * val[i])
                dfs(p + 1, sa + c * A[i], sb + c * B[i], sw + c * W[i], ss + c * S[i], v + c * val[i], has_i)
            counts[i] = base
            dfs(p + 1, sa, sb, sw, ss, v, has)

        if forced >= 0:
            # the one class whose SLO is theta is in every group of this threshold: start with it
            counts[forced] = 1
            if val[forced] > threshold() + 1e-12:
                record(val[forced])
            dfs(0, A[forced], B[forced], W[forced], S[forced], val[forced], True)
            counts[forced] = 0
        elif last >= 0:
            dfs(0, 0.0, 0.0, 0.0, 0.0, 0.0, False)

    # thresholds and their root bounds (every threshold at once, :func:`_root_bounds`)
    jobs_by_slo = sorted(range(n), key=lambda i: -SLO[i])
    def by_density(size: list[float]) -> list[int]:
        return sorted(jobs_by_slo, key=lambda i: -(val[i] / size[i]) if size[i] > 1e-12 else -float("inf"))

    orders = [by_density(size) for size in ([A[i] + B[i] for i in range(n)], A, B, W, S)]
    plans = [(ub, theta, forced) for theta, forced, ub in _root_bounds(items, tol)]
    plans.sort(key=lambda t: -t[0])
    for ub, theta, forced in plans:
        if ub <= threshold() + 1e-12 + tolerance:
            break
        if state["cut"]:
            state["open"] = max(state["open"], ub)
            continue
        elig = [i for i in jobs_by_slo if SLO[i] >= theta * (1 - 1e-12) and TOT[i] <= theta * tol]
        solve_threshold(theta, elig, ub, forced)
    best.sort(key=lambda t: -t[0])
    cols = [(v, {int(items.cls[i]): int(c) for i, c in enumerate(key) if c}) for v, key in best if v > min_value + 1e-12]
    top = best[0][0] if best else 0.0
    # a pruned node was worth at most the threshold (+ tolerance) then, which never exceeds
    # max(top, min_value) + tolerance
    return PricingResult(cols, max(top, state["open"], min_value) + tolerance, not state["cut"])


def fractional_fills(val: np.ndarray, size: np.ndarray, avail: np.ndarray, cap: np.ndarray) -> np.ndarray:
    """Row ``t``: ``max sum val x  s.t.  sum size x <= cap[t], 0 <= x <= avail[t]`` (the fractional
    knapsack, items of size 0 free), every row at once."""
    free_items = size <= 1e-12
    total = (avail[:, free_items] * val[free_items]).sum(axis=1)
    v, z, av = val[~free_items], size[~free_items], avail[:, ~free_items]
    if not len(v):
        return total
    o = np.argsort(-(v / z), kind="stable")
    v, z, av = v[o], z[o], av[:, o]
    cum = np.cumsum(av * z, axis=1)
    full = cum <= cap[:, None]  # (cumulative sizes only grow: a prefix of each row)
    total = total + (av * v * full).sum(axis=1)
    rest = ~full & (av > 0)
    has = rest.any(axis=1)
    first = rest.argmax(axis=1)
    rows = np.arange(len(cap))
    before = np.where(first > 0, cum[rows, np.maximum(first - 1, 0)], 0.0)
    left = cap - before
    return total + np.where(has & (left > 0), v[first] * np.maximum(left, 0.0) / z[first], 0.0)


def _root_bounds(items: PricingItems, tol: float) -> list[tuple[float, int, float]]:
    """``(theta, forced, bound)`` for every SLO threshold with a class of that SLO that fits it:
    ``forced`` is that class when it is the only one (then every group of the threshold holds it,
    and the bound is its value plus the fractional fill of what it leaves on each of the four
    resources), else -1 (the smaller of the rollout and training fills of ``theta``). Bounds are
    rounded up by 1e-12 (relative and absolute): the sums run in another order than the search's."""
    slo, tot = np.asarray(items.slo, dtype=float), np.asarray(items.tot, dtype=float)
    val, dem = np.asarray(items.value, dtype=float), np.asarray(items.demand, dtype=float)
    A, B = np.asarray(items.a, dtype=float), np.asarray(items.bs, dtype=float)
    W, S = np.asarray(items.w, dtype=float), np.asarray(items.s, dtype=float)
    thetas = np.unique(slo)[::-1]
    ok = (slo[None, :] >= thetas[:, None] * (1 - 1e-12)) & (tot[None, :] <= thetas[:, None] * tol)
    at = ok & (slo[None, :] <= thetas[:, None] * (1 + 1e-12))
    n_at = at.sum(axis=1)
    first_at = at.argmax(axis=1)
    avail = dem[None, :] * ok
    out: list[tuple[float, int, float]] = []
    single = np.flatnonzero(n_at == 1)
    multi = np.flatnonzero(n_at > 1)
    if len(multi):
        th = thetas[multi]
        ub = np.minimum(fractional_fills(val, A, avail[multi], th), fractional_fills(val, B, avail[multi], th))
        out += [(float(t), -1, float(u)) for t, u in zip(th, ub)]
    if len(single):
        f = first_at[single]
        th = thetas[single]
        fits = ((A[f] <= th * tol) & (B[f] <= th * tol) & (W[f] <= items.cap_w * tol) & (S[f] <= items.cap_s * tol))
        single, f, th = single[fits], f[fits], th[fits]
        av = avail[single].copy()
        av[np.arange(len(single)), f] -= 1.0  # (its other copies stay available to the fills)
        rest = np.minimum.reduce([fractional_fills(val, A, av, th - A[f]), fractional_fills(val, B, av, th - B[f]),
                                  fractional_fills(val, W, av, items.cap_w - W[f]), fractional_fills(val, S, av, items.cap_s - S[f])])
        out += [(float(t), int(i), float(u)) for t, i, u in zip(th, f, val[f] + rest)]
    return [(t, i, u * (1 + 1e-12) + 1e-12) for t, i, u in out]


def price_heuristic(items: PricingItems, min_value: float, max_columns: int = 3, thresholds: int = 8) -> list[tuple[float, dict[int, int]]]:
    """Fast columns: for each SLO threshold (a sample when there are many), fill a group greedily.

    The class that sets the threshold goes in first; then classes with at least that SLO in order
    of value per unit of rollout time, of training time, and of the larger of the two (three
    fills), as many copies as fit.
    """
    n = len(items.cls)
    if n == 0:
        return []
    tol = 1 + REL_TOL
    slo_vals = np.unique(items.slo)
    if len(slo_vals) > thresholds:
        slo_vals = slo_vals[np.unique(np.linspace(0, len(slo_vals) - 1, thresholds).round().astype(int))]
    out: dict[tuple, float] = {}
    val_all = items.value
    # plain floats in the fill loops (numpy scalars there cost several times more, same arithmetic)
    A, B, W, S = items.a.tolist(), items.bs.tolist(), items.w.tolist(), items.s.tolist()
    V, D, C = val_all.tolist(), [int(d) for d in items.demand], [int(c) for c in items.cls]
    lim_w, lim_s = items.cap_w * tol, items.cap_s * tol
    for theta in slo_vals:
        theta = float(theta)
        elig = np.flatnonzero((items.slo >= theta * (1 - 1e-12)) & (items.tot <= theta * tol))
        if len(elig) == 0:
            continue
        at = elig[np.abs(items.slo[elig] - theta) <= 1e-9 * theta]
        if len(at) == 0:
            continue
        first = int(at[np.argmax(val_all[at])])
        lim = theta * tol
        for size in (items.a[elig], items.bs[elig], np.maximum(items.a[elig], items.bs[elig])):
            order = elig[np.argsort(-(val_all[elig] / (size + 1e-12)), kind="stable")].tolist()
            order = [first] + [i for i in order if i != first]
            sa = sb = sw = ss = 0.0
            val = 0.0
            counts: dict[int, int] = {}
            for i in order:
                a, b, w, s_, v = A[i], B[i], W[i], S[i], V[i]
                for _ in range(D[i]):
                    na, nb, nw, ns = sa + a, sb + b, sw + w, ss + s_
                    if na <= lim and nb <= lim and nw <= lim_w and ns <= lim_s:
                        sa, sb, sw, ss = na, nb, nw, ns
                        val += v
                        counts[C[i]] = counts.get(C[i], 0) + 1
                    else:
                        break
            if val > min_value + 1e-12 and counts:
                key = tuple(sorted(counts.items()))
                out[key] = max(out.get(key, 0.0), val)
    best = sorted(out.items(), key=lambda kv: -kv[1])[:max_columns]
    return [(v, dict(k)) for k, v in best]
