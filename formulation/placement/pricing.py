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
          deadline: float = float("inf")) -> PricingResult:
    """Groups worth more than ``min_value`` (best first), and an upper bound on any group's worth.

    Pure-Python depth-first branch and bound (groups hold a handful of members, so the bound's
    fractional fills stop after a few classes; numpy calls per node would cost more than they save).
    """
    import time

    n = len(items.cls)
    if n == 0:
        return PricingResult([], max(0.0, min_value), True)
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
    # Bound: whatever the group's final SLO limit theta_f is, every member has slo >= theta_f, so
    # sum a_i / slo_i <= sum a_i / theta_f <= 1: a knapsack with sizes a_i / slo_i (likewise for
    # the training side and any mix of the two) whose capacity is 1 - (what is in) / theta_now.
    NA = [A[i] / SLO[i] for i in range(n)]
    NB = [B[i] / SLO[i] for i in range(n)]
    NM = [(A[i] + B[i]) / (2 * SLO[i]) for i in range(n)]
    sizes = (NA, NB, NM, W, S)
    orders = [sorted(range(n), key=lambda i, sz=sz: -(val[i] / sz[i]) if sz[i] > 1e-12 else -float("inf")) for sz in sizes]
    counts = [0] * n
    best: list[tuple[float, tuple]] = []
    state = {"open": 0.0, "nodes": 0, "cut": False}

    def threshold() -> float:
        return best[-1][0] if len(best) >= max_columns else min_value

    main = orders[2]  # branch in order of value per unit of (normalised) time, best first
    rank = [0] * n
    for r, i in enumerate(main):
        rank[i] = r

    def frac(order, size, p, theta, cap) -> float:
        total = 0.0
        left = cap
        for i in order:
            if rank[i] < p or TOT[i] > theta * tol:
                continue
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
                left = 0.0
                break
        return total

    def bound(p, theta, sa, sb, sw, ss) -> float:
        b = frac(orders[2], NM, p, theta, 1.0 - (sa + sb) / (2 * theta))
        b = min(b, frac(orders[0], NA, p, theta, 1.0 - sa / theta))
        b = min(b, frac(orders[1], NB, p, theta, 1.0 - sb / theta))
        if capw < float("inf"):
            b = min(b, frac(orders[3], W, p, theta, capw - sw))
        if caps < float("inf"):
            b = min(b, frac(orders[4], S, p, theta, caps - ss))
        return b

    inf = float("inf")

    def dfs(p, theta, sa, sb, mt, sw, ss, v) -> None:
        state["nodes"] += 1
        if p == n:
            return
        ub = v + bound(p, theta, sa, sb, sw, ss)
        if ub <= threshold() + 1e-12:
            return
        if state["nodes"] > node_budget or (state["nodes"] & 255 == 0 and time.perf_counter() > deadline):
            state["open"] = max(state["open"], ub)
            state["cut"] = True
            return
        i = main[p]
        th = theta if theta < SLO[i] else SLO[i]
        lim = th * tol
        nt = mt if mt > TOT[i] else TOT[i]
        if nt <= lim:
            c_max = dem[i]
            for c in range(1, dem[i] + 1):
                if (sa + c * A[i] > lim or sb + c * B[i] > lim or sw + c * W[i] > capw * tol or ss + c * S[i] > caps * tol):
                    c_max = c - 1
                    break
            for c in range(c_max, 0, -1):
                counts[i] = c
                if v + c * val[i] > threshold() + 1e-12:  # a new group (each is reached once: by including i)
                    best.append((v + c * val[i], tuple(counts)))
                    best.sort(key=lambda t: -t[0])
                    del best[max_columns:]
                dfs(p + 1, th, sa + c * A[i], sb + c * B[i], nt, sw + c * W[i], ss + c * S[i], v + c * val[i])
            counts[i] = 0
        dfs(p + 1, theta, sa, sb, mt, sw, ss, v)

    dfs(0, inf, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0)
    cols = [(v, {int(items.cls[i]): int(c) for i, c in enumerate(key) if c}) for v, key in best if v > min_value + 1e-12]
    top = best[0][0] if best else 0.0
    # a pruned node was worth at most the threshold then, which never exceeds max(top, min_value)
    price.last_nodes = state["nodes"]
    return PricingResult(cols, max(top, state["open"], min_value), not state["cut"])


def price_heuristic(items: PricingItems, min_value: float, max_columns: int = 3, thresholds: int = 64) -> list[tuple[float, dict[int, int]]]:
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
    for theta in slo_vals:
        theta = float(theta)
        elig = np.flatnonzero((items.slo >= theta * (1 - 1e-12)) & (items.tot <= theta * tol))
        if len(elig) == 0:
            continue
        at = elig[np.abs(items.slo[elig] - theta) <= 1e-9 * theta]
        if len(at) == 0:
            continue
        first = int(at[np.argmax(val_all[at])])
        for size in (items.a[elig], items.bs[elig], np.maximum(items.a[elig], items.bs[elig])):
            order = elig[np.argsort(-(val_all[elig] / (size + 1e-12)), kind="stable")]
            order = [first] + [int(i) for i in order if i != first]
            sa = sb = sw = ss = 0.0
            val = 0.0
            counts: dict[int, int] = {}
            for i in order:
                for _ in range(int(items.demand[i])):
                    na, nb, nw, ns = sa + items.a[i], sb + items.bs[i], sw + items.w[i], ss + items.s[i]
                    if na <= theta * tol and nb <= theta * tol and nw <= items.cap_w * tol and ns <= items.cap_s * tol:
                        sa, sb, sw, ss = na, nb, nw, ns
                        val += float(val_all[i])
                        counts[int(items.cls[i])] = counts.get(int(items.cls[i]), 0) + 1
                    else:
                        break
            if val > min_value + 1e-12 and counts:
                key = tuple(sorted(counts.items()))
                out[key] = max(out.get(key, 0.0), val)
    best = sorted(out.items(), key=lambda kv: -kv[1])[:max_columns]
    return [(v, dict(k)) for k, v in best]
