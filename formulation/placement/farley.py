"""A certified bound of the pattern model at any duals: Farley's scaling, stabilised by the load bound.

Column generation's LP bound needs converged duals, and on distinct jobs it does not converge at
a few hundred jobs within the time limits (:mod:`formulation.placement.colgen`). This bound holds
at *any* round.

Model without capacity rows (dropping rows can only lower the optimum): cover every job class
``c`` (demand ``d_c``) by patterns ``p`` (a configuration ``k`` and a feasible group, cost
``c_k``) or by a slack of cost ``P`` (the unplaced-job penalty). Its LP dual is
``max pi.d  s.t.  sum_c m_cp pi_c <= c_k  (every pattern),  pi_c <= P,  pi >= 0``.

Farley's scaling. For any ``pi >= 0`` let ``V_k(pi)`` bound from above the most a feasible group
on ``k`` is worth, ``max_S pi(S)``, and ``r = max(1, max_k V_k / c_k, max_c pi_c / P)``. Then
``pi / r`` is dual feasible, so every plan costs at least ``pi.d / r``.

``V_k`` comes from pricing's branch and bound (:func:`formulation.placement.pricing.price`,
whose ``upper_bound`` is valid also when its node budget or deadline cuts it short), asked only
to beat ``r c_k`` (the configurations that cannot raise ``r`` are dismissed by the root bounds);
configurations whose cheap bound (below) is already at most ``r c_k`` are not searched at all,
and when the deadline comes the cheap bound stands in for the rest.

Cheap bound on ``V_k``: a feasible group ``S`` on ``k`` has ``sum_S a_kj <= min_S slo <= slo_j``
for each member, so ``sum_S a_kj / slo_j <= 1``; likewise for ``bs / slo`` and the two DRAM
shares. Each of these four is a fractional knapsack of capacity 1 (items ``c`` with ``d_c``
copies), and the smallest of the four optima bounds ``V_k``.

Stabilisation. Restricted-master duals before convergence are far from feasible (at 500
distinct jobs ``r`` was 2.0: the scaled bound half the LP). The load bound's per-job values
(:func:`formulation.placement.fast.load_bound`) are nearly feasible (``r`` about 1) but weak. A
convex combination ``lambda pi_LP + (1 - lambda) pi_load`` is scaled instead; measured on
``distinct 500:0`` (restricted LP 8,386 after 150 s, load duals 6,377): 6,377 / 6,980 / 7,215 /
6,934 / 6,663 at ``lambda`` = 0 / 0.3 / 0.5 / 0.7 / 0.85. Every value is a valid bound; the
best one is kept.
"""

from __future__ import annotations

import time
from typing import Optional, Sequence

import numpy as np

from formulation.placement.evaluate import Index
from formulation.placement.pricing import PricingItems, fractional_fills, price

#: mixing weights of the LP duals tried, in this order (module docstring)
LAMBDAS = (0.5, 0.3)


def _compiled() -> bool:
    """The compiled pricing is loaded in this process (:mod:`formulation.placement.pricing_jit`, which
    compiles the cheap bounds with it): the cheap bounds run compiled too (2,000 distinct-loose jobs,
    1,088 configurations: 0.24-0.38 s a call in numpy, 0.06 s compiled; the same values to 1e-15)."""
    from formulation.placement import pricing_jit

    return pricing_jit._KERNEL is not None


def cheap_value_bounds(idx: Index, reps: np.ndarray, demand: np.ndarray, pi: np.ndarray) -> np.ndarray:
    """For every configuration ``k``: an upper bound on the worth ``sum pi`` of any feasible group
    on ``k`` (the smallest of four fractional knapsacks of capacity 1, module docstring).
    ``reps[c]`` is a job of class ``c``, ``demand[c]`` its copies, ``pi[c]`` its value."""
    K = len(idx.configs)
    out = np.zeros(K)
    pos = pi > 1e-12
    if not pos.any():
        return out
    r, d, v = reps[pos], demand[pos].astype(float), pi[pos]
    slo = idx.slo[r]
    if _compiled():
        from formulation.placement.pricing_kernel import cheap_bounds

        f64 = lambda x: np.ascontiguousarray(x, dtype=np.float64)  # noqa: E731
        own_k = np.where(idx.own, idx.k_own, -1).astype(np.int64)
        own_w = f64(idx.WO) if len(idx.WO) else np.zeros((1, idx.n))
        return cheap_bounds(np.ascontiguousarray(idx.ok, dtype=np.bool_), f64(idx.a), f64(idx.bs), np.ascontiguousarray(idx.pinned_m > 0),
                            own_k, own_w, f64(idx.dram_cap_r),
                            f64(idx.dram_cap_t), np.ascontiguousarray(r, dtype=np.int64), f64(slo), f64(idx.dram_r),
                            f64(idx.state_t), f64(v), f64(d))
    for k in range(K):
        ok = idx.ok[k, r]
        if not ok.any():
            continue
        vk, dk = v[ok], d[ok]
        rk = r[ok]
        best = np.inf
        for w in (idx.a[k, rk] / slo[ok], idx.bs[k, rk] / slo[ok], idx.rollout_w(k, rk) / idx.dram_cap_r[k],
                  idx.state_t[rk] / idx.dram_cap_t[k]):
            best = min(best, float(fractional_fills(vk, w, dk[None, :], np.ones(1))[0]))
        out[k] = best
    return out


def farley_bound(idx: Index, reps: np.ndarray, demand: np.ndarray, pi: np.ndarray, penalty: float,
                 items_of, deadline: float = float("inf"), node_budget: int = 20000) -> tuple[float, float, bool]:
    """``(pi.d / r, r, searched)``: Farley's bound at ``pi`` (module docstring). ``items_of(k, pi)``
    gives pricing's items of configuration ``k`` at these values; ``searched`` is False when the
    deadline left some configuration with its cheap bound only (the result is valid either way)."""
    pi = np.maximum(np.asarray(pi, dtype=float), 0.0)
    total = float(pi @ demand)
    if total <= 0:
        return 0.0, 1.0, True
    cost = idx.cost
    cheap = cheap_value_bounds(idx, reps, demand, pi)
    with np.errstate(divide="ignore", invalid="ignore"):
        ratio = np.where(cost > 0, cheap / cost, np.where(cheap > 0, np.inf, 0.0))
    r = max(1.0, float(pi.max()) / penalty if penalty > 0 else 1.0)
    searched = True
    for k in np.argsort(-ratio, kind="stable"):
        k = int(k)
        if ratio[k] <= r * (1 + 1e-12):
            break  # (descending: no configuration left can raise r)
        if time.perf_counter() > deadline:
            searched = False
            r = max(r, float(ratio[k]))  # the cheap bounds of the rest: the largest is this one
            break
        res = price(items_of(k, pi), cost[k] * r, max_columns=1, node_budget=node_budget, deadline=deadline)
        r = max(r, min(float(ratio[k]), res.upper_bound / cost[k]))
    return total / r, r, searched


def stabilised_bound(idx: Index, reps: np.ndarray, demand: np.ndarray, pi_lp: Optional[np.ndarray], penalty: float,
                     items_of, deadline: float, lambdas: Sequence[float] = LAMBDAS) -> Optional[float]:
    """The best Farley bound over the convex combinations ``lambda pi_lp + (1 - lambda) pi_load`` of
    restricted-master duals with the load bound's per-job values, for the ``lambdas`` that time
    allows (None if none); without ``pi_lp``, the bound at ``pi_load``. When some class fits nowhere alone (no load bound), the
    bound at ``pi_lp`` alone, or None without it."""
    from formulation.placement.fast import load_bound

    duals: list = []
    if load_bound(idx, jobs=reps, duals=duals) is None or not duals:  # a class fits nowhere alone
        if pi_lp is None:
            return None
        return farley_bound(idx, reps, demand, pi_lp, penalty, items_of, deadline)[0]
    pi_load = np.asarray(duals[0], dtype=float)  # per class (the order of ``reps``)
    if pi_lp is None:
        return farley_bound(idx, reps, demand, pi_load, penalty, items_of, deadline)[0]
    best = None  # (lambda = 0 is about the load bound itself, which the caller has: not repeated)
    for lam in lambdas:
        if time.perf_counter() > deadline:
            break
        b, _, _ = farley_bound(idx, reps, demand, lam * np.asarray(pi_lp, dtype=float) + (1 - lam) * pi_load, penalty,
                               items_of, deadline)
        best = b if best is None else max(best, b)
    return best


def items_for(idx: Index, reps: np.ndarray, demand: np.ndarray):
    """``items_of(k, pi)`` over classes ``reps`` (jobs) with ``demand`` copies, for :func:`farley_bound`."""
    order_by_k = [np.flatnonzero(idx.ok[k, reps]) for k in range(len(idx.configs))]

    def items_of(k: int, pi: np.ndarray) -> PricingItems:
        o = order_by_k[k]
        o = o[pi[o] > 1e-9]
        o = o[np.argsort(-idx.slo[reps[o]], kind="stable")]
        j = reps[o]
        return PricingItems(o, pi[o], demand[o].astype(int), idx.a[k, j], idx.bs[k, j], idx.tot[k, j], idx.slo[j],
                            idx.rollout_w(k, j), idx.state_t[j], float(idx.dram_cap_r[k]), float(idx.dram_cap_t[k]))

    return items_of
