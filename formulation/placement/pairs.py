"""The packings' view of an index: the configurations of each (rollout type, training type) pair as a grid over pool
sizes (:class:`_Pair`, :func:`_pairs`), shared by the fast path (:mod:`formulation.placement.fast`) and the flat best
fit (:mod:`formulation.placement.flatbest`)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from formulation.placement.evaluate import Index


@dataclass
class _Pair:
    """Configurations of one (rollout type, training type) as a grid over pool sizes."""

    p: str
    q: str
    rs: np.ndarray  # rollout sizes
    ts: np.ndarray  # training sizes
    r_rows: np.ndarray  # rows of idx.R per rollout size
    t_rows: np.ndarray  # rows of idx.T per training size
    s_row: int
    grid: np.ndarray  # (nR, nT) configuration id or -1
    cost: np.ndarray  # (nR, nT) $/h, inf where no configuration
    dram_r: float
    dram_t: np.ndarray  # (nT,) training-pool DRAM (per node x nodes)
    tp: int  # type positions in idx.types
    tq: int
    min_a: float = 0.0  # the quickest rollout / training occupancy of any job on this pair
    min_bs: float = 0.0


def _pairs(idx: Index) -> list[_Pair]:
    out = []
    by: dict[tuple[str, str], list[int]] = {}
    for k, c in enumerate(idx.configs):
        if not c.pinned:  # the packings grow whole pools; pinned groups come from the local search
            by.setdefault((c.rollout_type, c.train_type), []).append(k)
    r_row = {key: i for i, key in enumerate(idx.r_keys)}
    t_row = {key: i for i, key in enumerate(idx.t_keys)}
    pools = idx.inst.pool_types
    for (p, q), ks in by.items():
        rs = np.array(sorted({idx.configs[k].rollout_nodes for k in ks}))
        ts = np.array(sorted({idx.configs[k].train_nodes for k in ks}))
        grid = np.full((len(rs), len(ts)), -1)
        for k in ks:
            c = idx.configs[k]
            grid[np.searchsorted(rs, c.rollout_nodes), np.searchsorted(ts, c.train_nodes)] = k
        cost = np.where(grid >= 0, idx.cost[np.maximum(grid, 0)], np.inf)
        pr = _Pair(p, q, rs, ts, np.array([r_row[(p, int(n))] for n in rs]), np.array([t_row[(q, int(n))] for n in ts]),
                   idx.pair_row[(p, q)], grid, cost, float(pools[p].dram_gb), pools[q].dram_gb * ts.astype(float),
                   idx.types.index(p), idx.types.index(q))
        ra, tb = idx.R[pr.r_rows], idx.T[pr.t_rows]
        pr.min_a = float(ra[np.isfinite(ra)].min()) if np.isfinite(ra).any() else np.inf
        pr.min_bs = float(tb[np.isfinite(tb)].min()) if np.isfinite(tb).any() else np.inf
        out.append(pr)
    return out
