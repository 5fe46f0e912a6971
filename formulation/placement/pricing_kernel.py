"""The compiled kernel of :mod:`formulation.placement.pricing_jit` (imported on first use: it imports numba).

Plain functions of numpy arrays and scalars, compiled by numba (cached on disk); each mirrors a
piece of :func:`formulation.placement.pricing.price`, as named in its docstring.
"""

from __future__ import annotations

import numpy as np
from numba import njit



@njit(cache=True, nogil=True)
def _lt(hv, hk, x, y):
    """Heap entry ``x`` < entry ``y`` as Python compares ``(value, counts tuple)``."""
    if hv[x] != hv[y]:
        return hv[x] < hv[y]
    for i in range(hk.shape[1]):
        if hk[x, i] != hk[y, i]:
            return hk[x, i] < hk[y, i]
    return False


@njit(cache=True, nogil=True)
def _put(hv, hk, dst, src):
    hv[dst] = hv[src]
    hk[dst, :] = hk[src, :]


@njit(cache=True, nogil=True)
def _siftdown(hv, hk, tmp, startpos, pos):
    """``heapq._siftdown`` with the new item held in slot ``tmp``."""
    while pos > startpos:
        parentpos = (pos - 1) >> 1
        if _lt(hv, hk, tmp, parentpos):
            _put(hv, hk, pos, parentpos)
            pos = parentpos
            continue
        break
    _put(hv, hk, pos, tmp)


@njit(cache=True, nogil=True)
def _siftup(hv, hk, tmp, endpos):
    """``heapq._siftup(heap, 0)`` with the new item held in slot ``tmp``."""
    pos = 0
    childpos = 1
    while childpos < endpos:
        rightpos = childpos + 1
        if rightpos < endpos and not _lt(hv, hk, childpos, rightpos):
            childpos = rightpos
        _put(hv, hk, pos, childpos)
        pos = childpos
        childpos = 2 * pos + 1
    # (heapq puts the new item here and sifts it down from here to the root)
    _siftdown(hv, hk, tmp, 0, pos)


@njit(cache=True, nogil=True)
def _record(hv, hk, hl, max_columns, counts, value):
    """Keep group ``counts`` of worth ``value`` among the best ``max_columns``; the new heap length.
    A group already kept is skipped (Python's ``seen`` holds also the groups pushed out, but those
    are worth at most the heap's least and never pass the caller's test again)."""
    n = counts.shape[0]
    for h in range(hl):
        same = True
        for i in range(n):
            if hk[h, i] != counts[i]:
                same = False
                break
        if same:
            return hl
    tmp = max_columns
    hv[tmp] = value
    hk[tmp, :] = counts
    if hl < max_columns:
        _siftdown(hv, hk, tmp, 0, hl)
        return hl + 1
    _siftup(hv, hk, tmp, hl)
    return hl


@njit(cache=True, nogil=True)
def _frac(order, start, m, pos, p, val, dem, counts, size, cap, A, B, W, S, sa, sb, sw, ss, lim, limw, lims, enough):
    """The fractional fill of ``cap`` over the classes of ``order[start:m]`` at position >= ``p``
    that still fit the group (one more copy within all four limits: the others cannot join it,
    so leaving them out keeps the bound valid; the Python search keeps them, a weaker bound).
    Stops as soon as the fill exceeds ``enough`` (then it returns what it has: more than
    ``enough``, at most the fill)."""
    total = 0.0
    left = cap
    for q in range(start, m):
        if total > enough:
            return total
        i = order[q]
        if pos[i] < p:
            continue
        av = dem[i] - counts[i]
        if av <= 0:
            continue
        if sa + A[i] > lim or sb + B[i] > lim or sw + W[i] > limw or ss + S[i] > lims:
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


@njit(cache=True, nogil=True)
def _bound(filt, m, pos, p, val, dem, counts, AB, A, B, W, S, theta, capw, caps, sa, sb, sw, ss, v, thr, lim, limw,
           lims, exact):
    """``(pruned, bound)`` as the Python search's ``bound_prunes`` (the main order's fill from
    position ``p`` on, which is its suffix). Unless ``exact``, each fill stops once it cannot
    prune (more than ``thr - v``): the bound returned is then only good for that test."""
    enough = np.inf if exact else thr - v
    b = _frac(filt[0], p, m, pos, p, val, dem, counts, AB, 2 * theta - sa - sb, A, B, W, S, sa, sb, sw, ss, lim, limw,
              lims, enough)
    if v + b <= thr:
        return True, b
    for which in range(1, 5):
        if which == 1:
            size, cap = A, theta - sa
        elif which == 2:
            size, cap = B, theta - sb
        elif which == 3:
            size, cap = W, capw - sw
        else:
            size, cap = S, caps - ss
        if cap == np.inf:
            continue
        b = min(b, _frac(filt[which], 0, m, pos, p, val, dem, counts, size, cap, A, B, W, S, sa, sb, sw, ss, lim, limw,
                         lims, enough))
        if v + b <= thr:
            return True, b
    return False, b


@njit(cache=True, nogil=True)
def search(val, dem, A, B, TOT, SLO, W, S, capw, caps, tol, orders, rank, by_slo, prefix, ubs, thetas, forceds,
           min_value, max_columns, node_budget, tolerance):
    """The search of :func:`formulation.placement.pricing.price` over the thresholds in the order
    given; returns the heap (values, count rows, length), the largest bound left open, whether the
    node budget cut it, the nodes and the thresholds searched. ``rank[r, i]``: the place of class
    ``i`` in ``orders[r]``; ``prefix[t]``: how many classes of ``by_slo`` (SLO descending) have an
    SLO of at least ``thetas[t]`` (the threshold's classes are among them)."""
    n = val.shape[0]
    AB = A + B
    counts = np.zeros(n, dtype=np.int64)
    hv = np.zeros(max_columns + 1)
    hk = np.zeros((max_columns + 1, n), dtype=np.int64)
    hl = 0
    open_ = 0.0
    cut = False
    nodes = 0
    searched = 0
    stamp = np.full(n, -1, dtype=np.int64)  # stamp[i] == t: class i is eligible at threshold t
    elig = np.zeros(n, dtype=np.int64)
    pos = np.zeros(n, dtype=np.int64)
    filt = np.zeros((5, n), dtype=np.int64)
    # the explicit stack of the depth-first search: a frame per depth
    st_p = np.zeros(n + 2, dtype=np.int64)
    st_sa, st_sb, st_sw, st_ss, st_v = (np.zeros(n + 2), np.zeros(n + 2), np.zeros(n + 2), np.zeros(n + 2),
                                        np.zeros(n + 2))
    st_has = np.zeros(n + 2, dtype=np.bool_)
    st_hasi = np.zeros(n + 2, dtype=np.bool_)
    st_i = np.zeros(n + 2, dtype=np.int64)
    st_base = np.zeros(n + 2, dtype=np.int64)
    st_c = np.zeros(n + 2, dtype=np.int64)
    st_open = np.zeros(n + 2, dtype=np.bool_)  # frame entered (its children under way)
    for t in range(ubs.shape[0]):
        thr0 = hv[0] if hl >= max_columns else min_value
        if ubs[t] <= thr0 + 1e-12 + tolerance:
            break
        if cut:
            open_ = max(open_, ubs[t])
            continue
        theta = thetas[t]
        forced = forceds[t]
        searched += 1
        lim = theta * tol
        # the threshold's classes (SLO at least theta: a prefix of by_slo; within it, those whose
        # solo cycle fits theta), then each order filtered to them: by sorting their places in it
        # when they are few, else by one pass over the order
        m = 0
        for q in range(prefix[t]):
            i = by_slo[q]
            if SLO[i] >= theta * (1 - 1e-12) and TOT[i] <= theta * tol:
                elig[m] = i
                stamp[i] = t
                m += 1
        few = m * 12 < n
        for r in range(5):
            if few:
                e = elig[:m]
                o = np.argsort(rank[r, e])
                for q in range(m):
                    filt[r, q] = e[o[q]]
            else:
                c = 0
                for q in range(n):
                    i = orders[r, q]
                    if stamp[i] == t:
                        filt[r, c] = i
                        c += 1
        last = -1
        hi_slo = theta * (1 + 1e-12)
        for q in range(m):
            i = filt[0, q]
            pos[i] = q
            if SLO[i] <= hi_slo and q > last:
                last = q
        sp = 0
        if forced >= 0:
            counts[forced] = 1
            thr0 = hv[0] if hl >= max_columns else min_value
            if val[forced] > thr0 + 1e-12:
                hl = _record(hv, hk, hl, max_columns, counts, val[forced])
            st_p[0], st_sa[0], st_sb[0], st_sw[0], st_ss[0], st_v[0] = 0, A[forced], B[forced], W[forced], S[forced], val[forced]
            st_has[0] = True
            st_open[0] = False
            sp = 1
        elif last >= 0:
            st_p[0], st_sa[0], st_sb[0], st_sw[0], st_ss[0], st_v[0] = 0, 0.0, 0.0, 0.0, 0.0, 0.0
            st_has[0] = False
            st_open[0] = False
            sp = 1
        while sp > 0:
            f = sp - 1
            p, sa, sb, sw, ss, v, has = st_p[f], st_sa[f], st_sb[f], st_sw[f], st_ss[f], st_v[f], st_has[f]
            if not st_open[f]:
                nodes += 1
                if p == m or (not has and p > last):
                    sp -= 1
                    continue
                thr = (hv[0] if hl >= max_columns else min_value) + 1e-12 + tolerance
                b = 0.0
                if v <= thr:
                    pruned, b = _bound(filt, m, pos, p, val, dem, counts, AB, A, B, W, S, theta, capw, caps,
                                       sa, sb, sw, ss, v, thr, lim, capw * tol, caps * tol, False)
                    if pruned:
                        sp -= 1
                        continue
                if nodes > node_budget:  # (the whole fills: the bound left open must be one)
                    b = _bound(filt, m, pos, p, val, dem, counts, AB, A, B, W, S, theta, capw, caps,
                               sa, sb, sw, ss, v, thr, lim, capw * tol, caps * tol, True)[1]
                    open_ = max(open_, v + b)
                    cut = True
                    sp -= 1
                    continue
                # classes that cannot join (not one more copy fits): only their "none" branch, taken
                # here without a node of its own (it holds the same group; pruning there is optional)
                while True:
                    i = filt[0, p]
                    base = 1 if i == forced else 0
                    c_max = 0
                    for c in range(1, dem[i] - base + 1):
                        if (sa + c * A[i] > lim or sb + c * B[i] > lim or sw + c * W[i] > capw * tol
                                or ss + c * S[i] > caps * tol):
                            break
                        c_max = c
                    if c_max > 0 or p + 1 == m or (not has and p + 1 > last):
                        break
                    p += 1
                st_p[f] = p
                st_i[f], st_base[f], st_c[f] = i, base, c_max
                st_hasi[f] = has or SLO[i] <= theta * (1 + 1e-12)
                st_open[f] = True
            i, base, c = st_i[f], st_base[f], st_c[f]
            if c >= 1:
                st_c[f] = c - 1
                counts[i] = base + c
                vc = v + c * val[i]
                if st_hasi[f] and vc > (hv[0] if hl >= max_columns else min_value) + 1e-12:
                    hl = _record(hv, hk, hl, max_columns, counts, vc)
                st_p[sp], st_sa[sp], st_sb[sp], st_sw[sp], st_ss[sp], st_v[sp] = (
                    p + 1, sa + c * A[i], sb + c * B[i], sw + c * W[i], ss + c * S[i], vc)
                st_has[sp] = st_hasi[f]
                st_open[sp] = False
                sp += 1
            elif c == 0:
                st_c[f] = -1
                counts[i] = base
                st_p[sp], st_sa[sp], st_sb[sp], st_sw[sp], st_ss[sp], st_v[sp] = p + 1, sa, sb, sw, ss, v
                st_has[sp] = has
                st_open[sp] = False
                sp += 1
            else:
                sp -= 1
        if forced >= 0:
            counts[forced] = 0
    return hv[:max_columns], hk[:max_columns], hl, open_, cut, nodes, searched


@njit(cache=True, nogil=True)
def _fill(order, slo, tot, theta, tol, dem, forced, val, size, cap):
    """:func:`formulation.placement.pricing.fractional_fills` of one row: the classes eligible at
    ``theta`` (all copies; one fewer of ``forced``), ``order`` = size-free classes first, then by
    value per size descending. The walk stops at the class that overflows ``cap``."""
    total = 0.0
    cum = 0.0
    lo = theta * (1 - 1e-12)
    hi = theta * tol
    for q in range(order.shape[0]):
        i = order[q]
        if slo[i] < lo or tot[i] > hi:
            continue
        av = dem[i] - (1 if i == forced else 0)
        if av <= 0:
            continue
        z = size[i]
        if z <= 1e-12:
            total += av * val[i]
            continue
        need = av * z
        if cum + need <= cap:
            total += av * val[i]
            cum += need
        else:
            left = cap - cum
            if left > 0:
                total += val[i] * left / z
            break
    return total


@njit(cache=True, nogil=True)
def root_bounds(val, dem, A, B, W, S, tot, slo, capw, caps, tol, thetas, at_lo, at_hi, by_slo, orders):
    """:func:`formulation.placement.pricing._root_bounds` for every threshold ``thetas[t]`` (its
    classes of that SLO: ``by_slo[at_lo[t]:at_hi[t]]`` before the ``tot`` test): ``(forced, bound,
    kind)`` per threshold, kind 0 none, 1 several classes at the SLO, 2 one (``forced``)."""
    T = thetas.shape[0]
    forced = np.full(T, -1, dtype=np.int64)
    ub = np.zeros(T)
    kind = np.zeros(T, dtype=np.int64)
    for t in range(T):
        th = thetas[t]
        n_at = 0
        first = -1
        for q in range(at_lo[t], at_hi[t]):
            i = by_slo[q]
            if tot[i] <= th * tol:
                n_at += 1
                if first < 0 or i < first:
                    first = i
        if n_at == 0:
            continue
        if n_at > 1:
            u = min(_fill(orders[1], slo, tot, th, tol, dem, -1, val, A, th),
                    _fill(orders[2], slo, tot, th, tol, dem, -1, val, B, th))
            ub[t] = u * (1 + 1e-12) + 1e-12
            kind[t] = 1
            continue
        f = first
        if A[f] <= th * tol and B[f] <= th * tol and W[f] <= capw * tol and S[f] <= caps * tol:
            rest = _fill(orders[1], slo, tot, th, tol, dem, f, val, A, th - A[f])
            rest = min(rest, _fill(orders[2], slo, tot, th, tol, dem, f, val, B, th - B[f]))
            rest = min(rest, _fill(orders[3], slo, tot, th, tol, dem, f, val, W, capw - W[f]))
            rest = min(rest, _fill(orders[4], slo, tot, th, tol, dem, f, val, S, caps - S[f]))
            ub[t] = (val[f] + rest) * (1 + 1e-12) + 1e-12
            forced[t] = f
            kind[t] = 2
    return forced, ub, kind


@njit(cache=True, nogil=True)
def _knapsack_one(items, m, v, d, w, best, taken, rest):
    """The fractional knapsack of capacity 1 over ``items[:m]`` (values ``v``, copies ``d``, sizes
    ``w``; items of size 0 are free), as :func:`formulation.placement.pricing.fractional_fills`
    fills it (best ratio first), stopped once its value reaches ``best`` (it cannot lower a
    minimum then). The best items are taken one at a time, each by a pass over the items: a group
    holds a few jobs, so a few passes fill the capacity; past 24 the rest are sorted instead."""
    total = 0.0
    for t in range(m):
        i = items[t]
        taken[i] = False
        if w[i] <= 1e-12:
            total += v[i] * d[i]
    cap = 1.0
    for _step in range(24):
        if cap <= 0.0 or total >= best:
            return total
        top, ratio = -1, -1.0
        for t in range(m):
            i = items[t]
            if not taken[i] and w[i] > 1e-12 and v[i] / w[i] > ratio:
                top, ratio = i, v[i] / w[i]
        if top < 0:
            return total
        taken[top] = True
        if d[top] * w[top] <= cap:
            total += v[top] * d[top]
            cap -= d[top] * w[top]
        else:
            return total + v[top] * cap / w[top]
    # many small items: the rest in ratio order
    n_rest = 0
    for t in range(m):
        i = items[t]
        if not taken[i] and w[i] > 1e-12:
            rest[n_rest] = i
            n_rest += 1
    keys = np.empty(n_rest)
    for t in range(n_rest):
        keys[t] = -v[rest[t]] / w[rest[t]]
    order = np.argsort(keys, kind="mergesort")
    for t in range(n_rest):
        if cap <= 0.0 or total >= best:
            return total
        i = rest[order[t]]
        if d[i] * w[i] <= cap:
            total += v[i] * d[i]
            cap -= d[i] * w[i]
        else:
            return total + v[i] * cap / w[i]
    return total


@njit(cache=True, nogil=True)
def cheap_bounds(ok, a, bs, pinned, own_k, own_w, dram_cap_r, dram_cap_t, reps, slo, dram_r, state_t, v, d):
    """:func:`formulation.placement.farley.cheap_value_bounds` for every configuration ``k``: the
    smallest of four fractional knapsacks of capacity 1 over the classes (a job ``reps[c]`` each,
    value ``v[c]``, copies ``d[c]``) feasible on ``k`` (``ok[k, job]``), whose sizes are the job's
    share of the SLO on either side (``a[k, job] / slo[c]``, ``bs[k, job] / slo[c]``) and of either
    side's DRAM (``dram_r[job] / dram_cap_r[k]``, a member slot ``1 / dram_cap_r[k]`` where
    ``pinned[k]``, its own node count ``own_w[own_k[k], job] / dram_cap_r[k]`` where ``own_k[k] >= 0``,
    and ``state_t[job] / dram_cap_t[k]``); 0 where no class is feasible."""
    K = ok.shape[0]
    n = len(reps)
    out = np.zeros(K)
    items = np.empty(n, dtype=np.int64)
    rest = np.empty(n, dtype=np.int64)
    taken = np.zeros(n, dtype=np.bool_)
    w = np.zeros(n)
    for k in range(K):
        m = 0
        for c in range(n):
            if ok[k, reps[c]]:
                items[m] = c
                m += 1
        if m == 0:
            continue
        best = np.inf
        for r in range(4):
            for t in range(m):
                c = items[t]
                j = reps[c]
                if r == 0:
                    w[c] = a[k, j] / slo[c]
                elif r == 1:
                    w[c] = bs[k, j] / slo[c]
                elif r == 2:
                    if own_k[k] >= 0:
                        w[c] = own_w[own_k[k], j] / dram_cap_r[k]
                    else:
                        w[c] = (1.0 if pinned[k] else dram_r[j]) / dram_cap_r[k]
                else:
                    w[c] = state_t[j] / dram_cap_t[k]
            best = min(best, _knapsack_one(items, m, v, d, w, best, taken, rest))
        out[k] = best
    return out
