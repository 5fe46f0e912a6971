"""What a job's partners allow: per (configuration, job) caps that strengthen the load bound (issue 26).

The load bound (:func:`formulation.placement.fast.load_bound`) charges job ``j`` on configuration
``k`` the share ``s_kj = theta_k . L_kj`` of a group, with its ring loads over its *own* SLO
(``a_kj / slo_j``, ``bs_kj / slo_j``) and its two DRAM shares: every feasible group ``S`` on ``k``
has ``sum_S s_kj <= 1``, so ``c_k >= sum_S c_k s_kj`` and every plan costs at least
``sum_j min_k c_k s_kj``. Two things no per-job load can see are where it is weak on distinct
jobs: a loose member's ring seconds count against the *group's* smallest SLO, and groups are
whole (two to four members; a job that can share a configuration with nobody pays all of it).
This module computes, for every pair ``(k, j)`` with ``ok[k, j]``, from the jobs that can share
``k`` with ``j`` (its *partners*: ``{i, j}`` is a feasible group on ``k``, closed form and both
DRAM rows, with the index's tolerance):

* ``tau[k, j]``: the largest ``min(slo_i, slo_j)`` over its partners ``i`` (0 when it has none);
* ``m[k, j]``: an upper bound on the members of any feasible group on ``k`` containing ``j``:
  1 without partners, else ``1 + min(partners, c_a, c_bs, c_r, c_t)``, where ``c_a`` is the most
  jobs of those that may use ``k`` whose smallest ``a`` values sum to at most ``tau - a_kj`` (the
  other members' rollout seconds fit what the group's SLO leaves), likewise ``c_bs`` over ``bs``,
  ``c_r`` (rollout-row weights within ``D_p - w_j``) and ``c_t`` (training state within the
  training pool's DRAM less ``j``'s).

Proof that the strengthened shares are valid. Let ``S`` be a feasible group on ``k`` with
``|S| >= 2`` and ``T = min_S slo``. Every member ``j`` has a partner in ``S`` (any other member:
a subset of a feasible group is feasible), and ``T <= min(slo_i, slo_j)`` for it, so
``T <= tau[k, j]``; also ``T <= slo_j``. With ``e_kj = min(slo_j, tau[k, j])`` (``slo_j`` where
``tau = 0``), ``sum_S a_kj / e_kj <= sum_S a_kj / T <= 1`` and likewise for ``bs``. The other
members of ``S`` are at most ``m[k, j] - 1`` jobs that may use ``k`` whose ``a`` sum to at most
``T - a_kj <= tau - a_kj``; the smallest-first count over a superset of them is at least their
number, so ``|S| <= m[k, j]`` and ``sum_S 1 / m[k, j] <= sum_S 1 / |S| = 1``: a fifth load
``L5 = 1 / m`` with capacity 1. So for any ``theta_k`` on the simplex over the five loads
``(a / e, bs / e, dram_r / D_p, state / (n_T D_q), 1 / m)`` the shares ``theta_k . L_kj`` sum to at
most 1 over ``S``. A group of one member needs only ``s_kj <= 1``. Hence with

    s_kj = 1                          when j has no partner on k (every group on k holding j is {j}),
    s_kj = min(1, theta_k . L_kj)     otherwise,

``sum_S s_kj <= 1`` for every feasible group (``|S| >= 2``: no member is partnerless and the
``min`` only lowers the sum; ``|S| = 1``: one share of at most 1), and the load bound's argument
goes through unchanged: every plan costs at least ``sum_j min_k (c_k + mu n_k) s_kj - mu . cap``
for node prices ``mu >= 0``. The caps only raise shares (``e <= slo``), so at the same
``(theta, mu)`` with ``theta_5 = 0`` the value is never below the plain load bound's.

Partner tests are permissive (the index's ``within`` tolerance), which only makes ``tau`` and
``m`` larger, so the caps stay valid; a configuration the deadline leaves uncomputed keeps
``tau = slo`` and ``m = inf`` (the plain loads). Coverage: the same group model as the load bound
and every optimiser (whole-pool and pinned configurations of :mod:`formulation.placement.evaluate`,
closed form). Cost: one pairwise test per configuration over the jobs that may use it, in row
blocks (500 distinct jobs: ~0.3 s; 2,000: a few seconds of CPU).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Optional

import numpy as np

from formulation.placement.evaluate import REL_TOL, Index

#: rows of the pairwise test at a time (memory: ROWS x jobs per array)
ROWS = 256


@dataclass
class Partners:
    """Per configuration ``k`` and job: ``tau`` (0: no partner) and ``m`` (member bound), dense
    configurations x jobs arrays over the jobs ``jobs``; ``done[k]`` is False where the deadline
    left ``k`` uncomputed (there ``tau = slo``, ``m = inf``)."""

    jobs: np.ndarray
    tau: np.ndarray
    m: np.ndarray
    done: np.ndarray

    def effective_slo(self, idx: Index, kk: np.ndarray, jj: np.ndarray) -> np.ndarray:
        """``e = min(slo, tau)`` (``slo`` where ``tau = 0``) at positions ``(kk, jj)`` (``jj`` into ``jobs``)."""
        slo = idx.slo[self.jobs[jj]]
        t = self.tau[kk, jj]
        return np.where(t > 0, np.minimum(slo, t), slo)


def _le(x: np.ndarray, lim) -> np.ndarray:
    return x <= lim * (1 + REL_TOL) + 1e-12


def _fit_counts(values: np.ndarray, room: np.ndarray) -> np.ndarray:
    """For each ``room``: the most of ``values`` (smallest first) whose sum is within it."""
    cs = np.cumsum(np.sort(values))
    return np.searchsorted(cs, room * (1 + REL_TOL) + 1e-12, side="right")


def partners(idx: Index, jobs: Optional[np.ndarray] = None, deadline: float = float("inf")) -> Partners:
    """:class:`Partners` of ``jobs`` (default all) among themselves (module docstring)."""
    jobs = np.arange(idx.n) if jobs is None else np.asarray(jobs, dtype=int)
    K, n = len(idx.configs), len(jobs)
    slo_all = idx.slo[jobs]
    tau = np.tile(slo_all, (K, 1))
    m = np.full((K, n), np.inf)
    done = np.zeros(K, dtype=bool)
    ok_all = idx.ok[:, jobs]
    for k in range(K):
        if time.perf_counter() > deadline:
            break
        J = np.flatnonzero(ok_all[k])
        if len(J) == 0:
            done[k] = True
            continue
        j = jobs[J]
        a, bs, tt = idx.a[k, j], idx.bs[k, j], idx.tot[k, j]
        s, w, st = slo_all[J], idx.rollout_w(k, j).astype(float), idx.state_t[j]
        cap_r, cap_t = float(idx.dram_cap_r[k]), float(idx.dram_cap_t[k])
        t_k = np.zeros(len(J))
        cnt = np.zeros(len(J))
        for lo in range(0, len(J), ROWS):
            r = slice(lo, lo + ROWS)
            lim = np.minimum(s[r, None], s[None, :])
            f = _le(a[r, None] + a[None, :], lim)
            f &= _le(bs[r, None] + bs[None, :], lim)
            f &= _le(np.maximum(tt[r, None], tt[None, :]), lim)
            f &= _le(w[r, None] + w[None, :], cap_r)
            f &= _le(st[r, None] + st[None, :], cap_t)
            rows = np.arange(f.shape[0])
            f[rows, rows + lo] = False  # not its own partner
            t_k[r] = np.where(f, lim, 0.0).max(axis=1)
            cnt[r] = f.sum(axis=1)
        has = t_k > 0
        e = np.where(has, np.minimum(s, t_k), s)
        c = np.minimum.reduce([cnt, _fit_counts(a, e - a), _fit_counts(bs, e - bs), _fit_counts(w, cap_r - w),
                               _fit_counts(st, cap_t - st)]).astype(float)
        tau[k, J] = t_k
        m[k, J] = np.where(has, 1.0 + np.maximum(c, 1.0), 1.0)
        done[k] = True
    return Partners(jobs, tau, m, done)
