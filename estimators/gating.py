"""GRPO group gating: the trainer's remaining time when it receives a prompt's samples only once the
whole group is through the rollout and the log-prob (reference) pass.

Without gating the trainer can take every sample as it comes, so while it is backlogged its
remaining time is its remaining work over its rate. With gating it starves early in the iteration
(a group of ``G`` heavy-tailed responses is only complete when its longest one is) and receives
most of its work late, so it ends well after ``work / rate``. A fluid model over a representative
batch (``n_prompts x G`` lengths of :func:`estimators.lengths.sample_grouped`, a fixed seed):

* **rollout**: samples finish in length order. The shortest ``p_roll`` of them are done; a sample
  of length ``L`` still running finishes at ``A(L) = T_roll (L - L_cut) / (L_max - L_cut)``
  (``L_cut``: the length at the ``p_roll`` quantile, ``L_max`` the longest; ``T_roll`` the
  rollout's predicted remaining time);
* **reference** (log-prob passes, streamed, first come first served at ``r_ref`` FLOP/s): the
  first ``p_ref`` samples in that order are through; the others leave at
  ``D_i = C_i / r_ref + max_{j <= i} (A_j - C_{j-1} / r_ref)`` (``C``: cumulative log-prob FLOPs in
  arrival order; the work-conserving fluid queue);
* **gate**: a group reaches the trainer at ``a_k = max`` of its samples' ``D_i`` (0 for samples
  already through); the trainer has done the first ``p_tr`` samples in that order;
* **trainer** at ``r`` FLOP/s: ``T = max_i (a_i + S_i / r)``, samples in arrival order, ``S_i``
  the training FLOPs of sample ``i`` and every later one.

Per-sample intake is the same model with each sample its own group (``G = 1``).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

import numpy as np

BATCH_SEED = 12345  # the representative batch's draw (fixed: the same batch for every call)


@lru_cache(maxsize=32)
def grouped_batch(dist, n_prompts: int, group_size: int, prompt_spread: float) -> np.ndarray:
    """``n_prompts x group_size`` response lengths (GRPO groups; ``dist`` capped at its maximum)."""
    from estimators.lengths import sample_grouped

    rng = np.random.default_rng(BATCH_SEED)
    out = sample_grouped(dist, n_prompts, group_size, rng, prompt_spread).reshape(n_prompts, group_size)
    out.setflags(write=False)
    return out


@dataclass(frozen=True)
class GatedArrivals:
    """The trainer's remaining samples in arrival order: ``arrive_s`` (seconds from now, ascending)
    and ``suffix_flops[i]``: training FLOPs of sample ``i`` and every later one."""

    arrive_s: np.ndarray
    suffix_flops: np.ndarray

    def remaining_s(self, flops_per_s: float) -> float:
        """Seconds until the trainer, at ``flops_per_s``, has trained every remaining sample."""
        if self.arrive_s.size == 0:
            return 0.0
        if flops_per_s <= 0:
            return float("inf")
        return float(np.max(self.arrive_s + self.suffix_flops / flops_per_s))


def gated_arrivals(lengths: np.ndarray, sample_flops, *, p_roll: float, p_ref: float, p_tr: float, t_roll_s: float,
                   ref_flops_per_s: float, ref_passes: float, train_passes: float) -> GatedArrivals:
    """Arrivals at the trainer (see the module docstring).

    ``lengths``: the representative batch (prompts x G); ``sample_flops(lengths)``: forward FLOPs of
    one pass over samples of these response lengths (element-wise); the log-prob stage runs
    ``ref_passes`` of them per sample, the trainer ``train_passes`` (3 x updates);
    ``ref_flops_per_s`` <= 0 or infinite: no log-prob stage between rollout and trainer."""
    L = np.asarray(lengths, dtype=float)
    n_prompts, G = L.shape
    flat = L.ravel()
    n = flat.size
    order = np.argsort(flat, kind="stable")  # the rollout's finishing order
    Ls = flat[order]
    n_roll = int(round(min(1.0, max(0.0, p_roll)) * n))
    n_ref = min(n_roll, int(round(min(1.0, max(0.0, p_ref)) * n)))
    n_tr = int(round(min(1.0, max(0.0, p_tr)) * n))
    # rollout finishing times (0: already finished)
    A = np.zeros(n)
    if n_roll < n:
        cut = Ls[n_roll - 1] if n_roll > 0 else 0.0
        span = max(1e-9, Ls[-1] - cut)
        A[n_roll:] = max(0.0, t_roll_s) * np.clip((Ls[n_roll:] - cut) / span, 0.0, 1.0)
    # log-prob pass, first come first served
    D = np.zeros(n)
    f_flat = np.asarray(sample_flops(flat), dtype=float)  # one call; in finishing order below
    f = f_flat[order]
    if n_ref < n:
        if ref_flops_per_s <= 0 or not np.isfinite(ref_flops_per_s):
            D[n_ref:] = A[n_ref:]
        else:
            w = ref_passes * f[n_ref:] / ref_flops_per_s  # seconds each
            C = np.cumsum(w)
            D[n_ref:] = C + np.maximum.accumulate(A[n_ref:] - (C - w))
    # the gate: a group arrives when its last sample is through
    done_at = np.empty(n)
    done_at[order] = D
    group_at = done_at.reshape(n_prompts, G).max(axis=1)
    arrive = np.repeat(group_at, G)
    work = train_passes * f_flat
    by = np.argsort(arrive, kind="stable")
    arrive, work = arrive[by][n_tr:], work[by][n_tr:]
    suffix = np.cumsum(work[::-1])[::-1]
    return GatedArrivals(arrive, suffix)
