"""An independent first-fit / best-fit decreasing baseline and checker (benchmarks only).

Written from the instance file alone -- no import from ``formulation.placement`` beyond the
instance model -- so that a plan's cost judged against it is not judged by the code under test.

Configurations: every whole-pool ``(p, n_R, q, n_T)`` some job's tables allow, within the fleet
(``n_R + n_T <= count`` when ``p == q``); cost ``n_R g_p price_p + n_T g_q price_q``. A set ``S``
of jobs is a feasible group on it when each member's tables have the pool sizes and (warm
switches added uncapped, which is at least the capped ring weight, so the test is conservative)

    max( sum_S (a + sr),  sum_S (b + s + st),  max_S (a + b + s) ) <= min_S slo,
    sum_S dram_r <= D_p,   sum_S state <= n_T D_q.

Orders: decreasing ``size_j = min_k c_k max(a_kj, b_kj + s_kj) / slo_j`` (the $/h of the pools it
keeps busy on its most efficient configuration), largest first; or tightest SLO first (each
group's limit is then its first member's). Each job then goes

* ``first``: into the first open group (in opening order) that takes it on *some* configuration
  whose extra cost is below the job's cheapest group of its own (the group moves to the cheapest
  such configuration), else into a new group on its cheapest configuration;
* ``best``: into the group of least extra cost (ties: the earliest), same rule otherwise.

Node counts are respected (a group may change configuration only within the free nodes). Jobs
that fit nowhere alone are left out (and counted). Vectorised over groups x configurations.
"""

from __future__ import annotations

from typing import Optional

import numpy as np

from formulation.placement.instance import PlacementInstance

TOL = 1 + 1e-9


class Tables:
    """Whole-pool configurations and per-configuration job arrays, computed from the instance."""

    def __init__(self, inst: PlacementInstance):
        self.inst = inst
        jobs = inst.jobs
        self.n = len(jobs)
        types = sorted(inst.pool_types)
        self.types = types
        cap = {t: inst.pool_types[t].count for t in types}
        rs: dict[str, set] = {t: set() for t in types}
        ts: dict[str, set] = {t: set() for t in types}
        for j in jobs:
            for t, row in j.rollout_s.items():
                rs[t].update(n for n in row if n <= cap[t])
            for t, row in j.train_s.items():
                ts[t].update(n for n in row if n <= cap[t])
        confs = [(p, nr, q, nt) for p in types for nr in sorted(rs[p]) for q in types for nt in sorted(ts[q])
                 if not (p == q and nr + nt > cap[p])]
        self.confs = confs
        K, n = len(confs), self.n
        pt = inst.pool_types
        self.cost = np.array([nr * pt[p].gpus_per_node * pt[p].price_per_gpu_hour + nt * pt[q].gpus_per_node * pt[q].price_per_gpu_hour
                              for p, nr, q, nt in confs])
        self.nodes = np.zeros((K, len(types)))
        for k, (p, nr, q, nt) in enumerate(confs):
            self.nodes[k, types.index(p)] += nr
            self.nodes[k, types.index(q)] += nt
        self.cap = np.array([cap[t] for t in types], dtype=float)
        self.A = np.full((K, n), np.inf)
        self.BS = np.full((K, n), np.inf)
        self.TOT = np.full((K, n), np.inf)
        for i, j in enumerate(jobs):
            for k, (p, nr, q, nt) in enumerate(confs):
                a = j.rollout_s.get(p, {}).get(nr)
                b = j.train_s.get(q, {}).get(nt)
                if a is None or b is None:
                    continue
                s = j.sync(p, q)
                sr, st = j.switches(p, nr, q, nt)
                self.A[k, i] = a + sr
                self.BS[k, i] = b + s + st
                self.TOT[k, i] = a + b + s
        self.slo = np.array([j.slo_s for j in jobs])
        self.dr = np.array([j.dram_rollout_node_gb for j in jobs])
        self.st = np.array([j.train_state_gb for j in jobs])
        self.Dp = np.array([pt[p].dram_gb for p, _, _, _ in confs])
        self.Dq = np.array([pt[q].dram_gb * nt for _, _, q, nt in confs])
        self.ok = ((self.TOT <= self.slo * TOL) & (self.A <= self.slo * TOL) & (self.BS <= self.slo * TOL)
                   & (self.dr[None, :] <= self.Dp[:, None] * TOL) & (self.st[None, :] <= self.Dq[:, None] * TOL))

    def group_ok(self, k: int, members) -> bool:
        m = list(members)
        if not m or not self.ok[k, m].all():
            return False
        lim = self.slo[m].min() * TOL
        return bool(self.A[k, m].sum() <= lim and self.BS[k, m].sum() <= lim and self.TOT[k, m].max() <= lim
                    and self.dr[m].sum() <= self.Dp[k] * TOL and self.st[m].sum() <= self.Dq[k] * TOL)


def decreasing(tb: Tables, order: str = "size") -> np.ndarray:
    """Largest size first (``size``) or tightest SLO first (``slo``), ties by position."""
    if order == "slo":
        return np.lexsort((np.arange(tb.n), tb.slo))
    with np.errstate(invalid="ignore"):
        share = tb.cost[:, None] * np.maximum(tb.A, tb.BS) / tb.slo[None, :]
    size = np.where(tb.ok, share, np.inf).min(axis=0)
    size = np.where(np.isfinite(size), size, 0.0)
    return np.lexsort((np.arange(tb.n), -size))


def pack(inst: PlacementInstance, rule: str = "best", tables: Optional[Tables] = None, window: int = 4000,
         order: str = "size"):
    """(cost $/h, groups [(configuration, members)], jobs left out) of the ``rule`` packing
    (``first`` or ``best``) in decreasing order; ``window``: only the last so many groups are tried."""
    tb = tables or Tables(inst)
    K = len(tb.confs)
    cap0 = 64
    sumA = np.zeros((cap0, K))
    sumBS = np.zeros((cap0, K))
    maxT = np.zeros((cap0, K))
    lim = np.zeros(cap0)
    dr = np.zeros(cap0)
    st = np.zeros(cap0)
    allok = np.zeros((cap0, K), dtype=bool)
    conf = np.zeros(cap0, dtype=int)
    members: list[list[int]] = []
    used = np.zeros(len(tb.types))
    left: list[int] = []
    G = 0
    for j in decreasing(tb, order):
        j = int(j)
        free = tb.cap - used
        solo_ok = tb.ok[:, j] & (tb.nodes <= free[None, :]).all(axis=1)
        if not solo_ok.any():
            left.append(j)
            continue
        solo_k = int(np.flatnonzero(solo_ok)[np.argmin(tb.cost[solo_ok])])
        chosen = None
        lo = max(0, G - window)
        if G > lo:
            s = slice(lo, G)
            L = np.minimum(lim[s], tb.slo[j]) * TOL
            A = sumA[s] + tb.A[:, j]
            B = sumBS[s] + tb.BS[:, j]
            T = np.maximum(maxT[s], tb.TOT[:, j])
            feas = (allok[s] & tb.ok[:, j][None, :] & (A <= L[:, None]) & (B <= L[:, None]) & (T <= L[:, None])
                    & ((dr[s] + tb.dr[j])[:, None] <= tb.Dp[None, :] * TOL)
                    & ((st[s] + tb.st[j])[:, None] <= tb.Dq[None, :] * TOL))
            # node budget: the new configuration's nodes minus the group's current ones
            extra = tb.nodes[None, :, :] - tb.nodes[conf[s]][:, None, :]
            feas &= (extra <= free[None, None, :] + 1e-9).all(axis=2)
            marg = np.where(feas, tb.cost[None, :] - tb.cost[conf[s]][:, None], np.inf)
            best_k = marg.argmin(axis=1)
            best_m = marg[np.arange(G - lo), best_k]
            good = np.flatnonzero(best_m < tb.cost[solo_k] - 1e-9)
            if len(good):
                g = int(good[0]) if rule == "first" else int(good[np.argmin(best_m[good])])
                chosen = (lo + g, int(best_k[g]))
        if chosen is None:
            if G == len(lim):
                sumA, sumBS, maxT = (np.concatenate([x, np.zeros_like(x)]) for x in (sumA, sumBS, maxT))
                lim, dr, st, conf = (np.concatenate([x, np.zeros_like(x)]) for x in (lim, dr, st, conf))
                allok = np.concatenate([allok, np.zeros_like(allok)])
            g, k = G, solo_k
            G += 1
            members.append([])
            sumA[g] = sumBS[g] = maxT[g] = 0.0
            lim[g] = np.inf
            dr[g] = st[g] = 0.0
            allok[g] = True
            conf[g] = k
            used += tb.nodes[k]
        else:
            g, k = chosen
            used += tb.nodes[k] - tb.nodes[conf[g]]
            conf[g] = k
        sumA[g] += np.where(tb.ok[:, j], tb.A[:, j], 0.0)
        sumBS[g] += np.where(tb.ok[:, j], tb.BS[:, j], 0.0)
        maxT[g] = np.maximum(maxT[g], np.where(tb.ok[:, j], tb.TOT[:, j], 0.0))
        allok[g] &= tb.ok[:, j]
        lim[g] = min(lim[g], tb.slo[j])
        dr[g] += tb.dr[j]
        st[g] += tb.st[j]
        members[g].append(j)
    groups = [(int(conf[g]), members[g]) for g in range(G)]
    for k, m in groups:  # the packing checked against the closed form, group by group
        assert tb.group_ok(k, m), (k, m)
    return float(tb.cost[[k for k, _ in groups]].sum()) if groups else 0.0, groups, left


def best_of(inst: PlacementInstance, tables: Optional[Tables] = None,
            orders: tuple[str, ...] = ("size", "slo")) -> tuple[float, str, int]:
    """The cheapest of first fit and best fit in each order: ($/h, "rule/order", jobs left out)."""
    tb = tables or Tables(inst)
    out = []
    for order in orders:
        for rule in ("first", "best"):
            c, _, left = pack(inst, rule, tb, order=order)
            out.append((len(left), c, f"{rule}/{order}"))
    n_left, c, rule = min(out)
    return c, rule, n_left
