"""Exact reduction of a reallocation instance before a solver sees it.

Three rules, each keeping at least one optimal choice (so a solver on the reduced instance returns
an optimum of the full one; the DP and exhaustive oracles run on the full instance and the tests
compare):

1. **Cap**: the objective never exceeds ``U = min_{s in pipeline} max_c F_{s,c}`` (every pipeline
   stage must reach it), so a candidate's throughput counts as ``F' = min(F, U)``.
2. **Beat the current allocation**: the current allocation (candidate 0 everywhere) is feasible
   with value ``V0``; any choice that includes ``c`` has value ``<= F'_{s,c} - m_{s,c}`` (migration
   costs are non-negative), so a candidate with ``F'_{s,c} - m_{s,c} <= V0`` can only tie the
   current allocation and is dropped (candidate 0 is never dropped).
3. **Dominance**: ``c`` is dropped when another candidate ``c'`` of the same stage has
   ``F'_{c'} >= F'_c``, ``m_{c'} <= m_c`` and no more GPUs on any pool (swapping ``c`` for ``c'``
   in any feasible choice stays feasible and is no worse). Exact duplicates keep the first.
   A stage outside the pipeline compares on cost and GPUs only.

With the cap, the larger candidates of one fill order all reach ``U`` and are dominated by the
smallest that does, which is where most of the reduction comes from on large instances.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from formulation.realloc.instance import ReallocInstance


def reduce(inst: ReallocInstance) -> tuple[ReallocInstance, list[list[int]]]:
    """The reduced instance and, per stage, the original index of each kept candidate."""
    thr_all = inst.throughput_arrays()
    arr = inst.arrays()
    pipe = set(inst.pipeline_stages())
    cap = min(float(thr_all[s].max()) for s in pipe)
    current = min(float(thr_all[s][0]) for s in pipe)
    stages, keep_idx = [], []
    for s, st in enumerate(inst.stages):
        n = len(st.candidates)
        thr = np.minimum(thr_all[s], cap) if s in pipe else np.zeros(n)
        cost = arr.cost[s]
        alive = np.ones(n, dtype=bool)
        if s in pipe:
            alive[1:] = thr[1:] - cost[1:] > current + 1e-12 * max(1.0, abs(current))
        idx = np.nonzero(alive)[0]
        if len(idx) > 1:
            sub_t, sub_m, sub_g = thr[idx], cost[idx], arr.gpus[s][idx]
            sub_g = sub_g[:, sub_g.any(axis=0)]  # pools no kept candidate uses cannot tell them apart
            if sub_g.size and sub_g.max() < 256:
                sub_g = sub_g.astype(np.uint8)  # GPUs per node: the n x n x pools comparison on bytes
            # dom[i, j]: j dominates i
            dom = (sub_t[None, :] >= sub_t[:, None]) & (sub_m[None, :] <= sub_m[:, None]) & \
                  (sub_g[None, :, :] <= sub_g[:, None, :]).all(axis=2)
            np.fill_diagonal(dom, False)
            strict = dom & ~dom.T  # j strictly better somewhere, or equal: tie-break below
            equal = dom & dom.T
            drop = strict.any(axis=1) | np.triu(equal, k=0).T.any(axis=1)  # among equals keep the first
            drop[idx == 0] = False  # never drop the current allocation
            idx = idx[~drop]
        keep_idx.append([int(i) for i in idx])
        stages.append(replace(st, candidates=[st.candidates[i] for i in idx]))
    red = ReallocInstance(inst.pools, stages, margin=inst.margin, horizon_s=inst.horizon_s, job=inst.job, time_s=inst.time_s,
                          notes=inst.notes, unit=inst.unit, validated=False)  # a subset of a validated instance
    red._arrays = arr.subset(keep_idx)
    red._thr = [thr_all[s][k] for s, k in enumerate(keep_idx)]
    red._table = [t.tolist() for t in red._thr]
    return red, keep_idx


def expand(choice: list[int], keep_idx: list[list[int]]) -> list[int]:
    """A choice on the reduced instance as indices of the full one."""
    return [keep_idx[s][c] for s, c in enumerate(choice)]
