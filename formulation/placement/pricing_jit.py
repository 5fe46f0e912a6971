"""Pricing's branch and bound compiled with numba: the same search as :func:`formulation.placement.pricing.price`.

Why. At 2,000 distinct jobs one round of the box-stabilised bound (:mod:`formulation.placement.boxstab`)
prices ~370 configurations, each with ~400 SLO thresholds whose root bound beats its cost; in
pure Python that round took 90-200 s, almost all of it in the depth-first search's fractional
fills (27M calls in one profiled round). The kernel below is that search, line for line, as an
iterative loop numba compiles to machine code.

Same search. The thresholds (their root bounds from :func:`formulation.placement.pricing._root_bounds`,
in the same order), the five density orders (sorted here with numpy's stable sort, as Python's
``sorted`` is stable), the depth-first order of the branches (copies of a class from the most down
to none), the pruning tests and the ``heapq`` layout of the best groups (ties broken by the
groups' count vectors, as Python compares tuples) are the same, so the groups and the bound are
the same as the Python search's (``tests/placement/test_placement_pricing_jit.py`` compares them on
random instances, besides brute force). Two differences: the deadline is checked before the search
and not inside it (the node budget bounds a call: 200,000 nodes are milliseconds here), and the
enumerating mode (every group above a value) stays in Python.

When. numba is imported on first use only (0.2 s), and compiling costs a few seconds the first time
on a machine (then numba's on-disk cache loads it). :func:`use_jit` therefore picks the kernel only
for searches worth it: at least :data:`MIN_ITEMS` classes and at least :data:`MIN_TIME_LEFT_S`
seconds before the caller's deadline, or when a compiled kernel is already loaded in this process.
``RL_PLANNER_JIT=0`` turns it off; without numba installed the Python search runs.
"""

from __future__ import annotations

import os
import time
from typing import Any, Callable, Optional

import numpy as np

#: classes below which the Python search is quick enough (and compiling would cost more)
MIN_ITEMS = 150
#: seconds left before the deadline below which a first compile is not started
MIN_TIME_LEFT_S = 15.0

_KERNEL: Optional[Callable] = None
_MISSING = False


def available() -> bool:
    """numba importable and not turned off (``RL_PLANNER_JIT=0``)."""
    global _MISSING
    if os.environ.get("RL_PLANNER_JIT", "1") == "0" or _MISSING:
        return False
    try:
        import numba  # noqa: F401
    except ImportError:
        _MISSING = True
        return False
    return True


def use_jit(n_items: int, deadline: float) -> bool:
    """Whether :func:`formulation.placement.pricing.price` should run the compiled search (module docstring)."""
    if not available():
        return False
    if _KERNEL is not None:
        return n_items >= 16
    return n_items >= MIN_ITEMS and deadline - time.perf_counter() >= MIN_TIME_LEFT_S


def ready(n_items: int, deadline: float) -> bool:
    """:func:`use_jit`, and the kernel loaded now (compiled or from the cache): a caller that sizes
    its work for the compiled search (e.g. its node budget) knows it will run."""
    return use_jit(n_items, deadline) and _load() is not None


def _load() -> Optional[Callable]:
    """The kernel, or None when it cannot be built here (e.g. numba finds no writable cache
    directory): a warning, and this process does not try again."""
    global _MISSING
    try:
        return kernel()
    except Exception as exc:  # noqa: BLE001 - any failure to build the kernel: the Python search instead
        _MISSING = True
        import warnings

        warnings.warn(f"compiled pricing unavailable ({type(exc).__name__}: {exc}); the Python search runs",
                      RuntimeWarning, stacklevel=3)
        return None


def kernel() -> Callable:
    """The compiled search (compiled, or loaded from numba's cache, on first call)."""
    global _KERNEL
    if _KERNEL is None:
        from formulation.placement.pricing_kernel import cheap_bounds, search

        # :func:`formulation.placement.farley.cheap_value_bounds` runs compiled once the search is
        # loaded: compiled (or loaded from the cache) here, with the search, on a tiny input of its types
        f, i = np.zeros((1, 1)), np.zeros(1, dtype=np.int64)
        cheap_bounds(np.ones((1, 1), dtype=np.bool_), f, f, np.zeros(1, dtype=np.bool_), np.full(1, -1, dtype=np.int64), f,
                     np.ones(1), np.ones(1), i,
                     np.ones(1), np.zeros(1), np.zeros(1), np.ones(1), np.ones(1))
        _KERNEL = search
    return _KERNEL


def price_jit(items: Any, min_value: float, max_columns: int = 5, node_budget: int = 20000,
              deadline: float = float("inf"), tolerance: float = 0.0) -> Optional[tuple[list, float, bool]]:
    """:func:`formulation.placement.pricing.price` (not enumerating) on the compiled search, as its
    result's fields ``(columns, upper_bound, exact)``; None when the kernel cannot be compiled or loaded here (e.g. numba finds no writable cache
    directory): the caller runs the Python search, and this process does not try again."""
    search = _load()
    if search is None:
        return None
    from formulation.placement.evaluate import REL_TOL

    n = len(items.cls)
    if n == 0:
        return [], max(0.0, min_value), True
    tol = 1 + REL_TOL
    val = np.asarray(items.value, dtype=np.float64)
    A, B = np.asarray(items.a, dtype=np.float64), np.asarray(items.bs, dtype=np.float64)
    W, S = np.asarray(items.w, dtype=np.float64), np.asarray(items.s, dtype=np.float64)
    slo = np.asarray(items.slo, dtype=np.float64)
    by_slo = np.argsort(-slo, kind="stable")
    orders = np.empty((5, n), dtype=np.int64)
    with np.errstate(divide="ignore", invalid="ignore"):
        for r, size in enumerate((A + B, A, B, W, S)):
            key = np.where(size > 1e-12, -(val / np.where(size > 1e-12, size, 1.0)), -np.inf)
            orders[r] = by_slo[np.argsort(key[by_slo], kind="stable")]
    dem = np.asarray(items.demand, dtype=np.int64)
    tot = np.asarray(items.tot, dtype=np.float64)
    ubs, thetas, forced = _root_bounds_jit(val, dem, A, B, W, S, tot, slo, float(items.cap_w), float(items.cap_s), tol,
                                           by_slo, orders)
    o = np.argsort(-ubs, kind="stable")
    ubs, thetas, forced = ubs[o], thetas[o], forced[o]
    if time.perf_counter() > deadline:  # cut before the first node: every threshold's root bound stays open
        top = max(float(ubs.max()) if len(ubs) else 0.0, min_value)
        return [], top + tolerance, len(ubs) == 0 or top <= min_value
    rank = np.empty_like(orders)
    for r in range(5):
        rank[r, orders[r]] = np.arange(n)
    prefix = np.searchsorted(-slo[by_slo], -thetas * (1 - 1e-12), side="right").astype(np.int64)
    hv, hk, hl, open_, cut, _nodes, _searched = search(
        val, dem, A, B, tot, slo, W, S, float(items.cap_w), float(items.cap_s), float(tol), orders, rank,
        by_slo.astype(np.int64), prefix, ubs, thetas, forced, float(min_value),
        int(max_columns), int(node_budget), float(tolerance))
    best = np.argsort(-hv[:hl], kind="stable")  # (Python sorts its heap list by value, stably)
    cls = np.asarray(items.cls)
    cols = []
    for h in best:
        v = float(hv[h])
        if v > min_value + 1e-12:
            nz = np.flatnonzero(hk[h])
            cols.append((v, {int(cls[i]): int(hk[h, i]) for i in nz}))
    top = float(hv[best[0]]) if hl else 0.0
    return cols, max(top, float(open_), min_value) + tolerance, not bool(cut)


def _root_bounds_jit(val, dem, A, B, W, S, tot, slo, cap_w, cap_s, tol, by_slo, orders):
    """``(bounds, thetas, forced)`` of :func:`formulation.placement.pricing._root_bounds`, in its
    order (thresholds with several classes at their SLO first, then those with one), compiled."""
    from formulation.placement.pricing_kernel import root_bounds

    thetas = np.unique(slo)[::-1]
    desc = -slo[by_slo]  # ascending
    at_lo = np.searchsorted(desc, -thetas * (1 + 1e-12), side="left")
    at_hi = np.searchsorted(desc, -thetas * (1 - 1e-12), side="right")
    forced, ub, kind = root_bounds(val, dem, A, B, W, S, tot, slo, cap_w, cap_s, tol, thetas, at_lo.astype(np.int64),
                                   at_hi.astype(np.int64), by_slo.astype(np.int64), orders)
    keep = np.concatenate((np.flatnonzero(kind == 1), np.flatnonzero(kind == 2)))
    return ub[keep], thetas[keep], forced[keep]
