"""Exact oracles: a dynamic program for the single-pool case, and exhaustive enumeration.

**Dynamic program** (one pool of ``G`` GPUs; DynaRL's homogeneous setting). The objective
``min_s F_{s,c_s} − Σ_s m_{s,c_s}`` is not additive, so the program fixes a threshold ``τ``: for
every ``τ`` among the candidates' throughputs ``F_{s,c}``, a knapsack over stages finds the least
migration cost of a choice whose every stage reaches ``τ`` within ``G`` GPUs::

    D_0(g) = 0 for g = 0 (else +inf);   D_s(g) = min_{c: F_{s,c} >= τ} D_{s-1}(g − G_{s,c}) + m_{s,c}

and ``best(τ) = τ − min_{g <= G} D_S(g)``. The answer is ``max_τ best(τ)``: every choice feasible
for ``τ`` has objective ``>= best(τ)``, and the optimal choice's own bottleneck ``τ*`` attains the
optimum. Cost ``O(|τ| · S · C · G)``, vectorised over ``g``.

**Exhaustive enumeration**: every combination of candidates, the capacity of every pool checked;
for small instances with several pools and GPU types.

Neither imports a solver; tests judge the MILP and CP-SAT backends with them.
"""

from __future__ import annotations

import itertools
import time

import numpy as np

from formulation.common import SolveOptions, SolveRecord, SolveStatus
from formulation.realloc.instance import ReallocInstance, Solution


def solve(inst: ReallocInstance, options: SolveOptions | None = None) -> tuple[Solution, SolveRecord]:
    """Exact optimum of a single-pool instance."""
    if not inst.is_single_pool():
        raise ValueError(f"the dynamic program needs a single pool, this instance has {len(inst.pools)}: "
                         "use the highs or cpsat backend (or exhaustive() on small instances)")
    t0 = time.perf_counter()
    pool = inst.pools[0]
    cap = int(pool.gpus)
    table = inst.throughput_table()
    G = [[int(c.gpus.get(pool.name, 0)) for c in st.candidates] for st in inst.stages]
    M = [[c.migration_cost for c in st.candidates] for st in inst.stages]
    best_val, best_choice = -np.inf, None
    pipe = set(inst.pipeline_stages())
    for tau in sorted({v for s, row in enumerate(table) if s in pipe for v in row}, reverse=True):
        dp = np.full(cap + 1, np.inf)
        dp[0] = 0.0
        picks = []
        for s in range(len(inst.stages)):
            new = np.full(cap + 1, np.inf)
            arg = np.full(cap + 1, -1)
            for c, (g, m) in enumerate(zip(G[s], M[s])):
                if (s in pipe and table[s][c] < tau) or g > cap:
                    continue
                cand = dp[: cap + 1 - g] + m
                better = cand < new[g:]
                new[g:][better] = cand[better]
                arg[g:][better] = c
            dp = new
            picks.append(arg)
            if not np.isfinite(dp).any():
                break
        else:
            g_end = int(np.argmin(dp))
            if tau - dp[g_end] <= best_val:
                continue
            choice = [0] * len(inst.stages)
            g = g_end
            for s in range(len(inst.stages) - 1, -1, -1):
                c = int(picks[s][g])
                choice[s] = c
                g -= G[s][c]
            val = inst.objective(choice)
            if val > best_val:
                best_val, best_choice = val, choice
    if best_choice is None:
        rec = SolveRecord("dp", SolveStatus.INFEASIBLE, None, None, time.perf_counter() - t0, None, None,
                          "no combination of candidates fits the pool")
        return Solution([0] * len(inst.stages)), rec
    rec = SolveRecord("dp", SolveStatus.OPTIMAL, best_val, best_val, time.perf_counter() - t0, None, None, "exact dynamic program")
    return Solution(best_choice, best_val, best_val), rec


def exhaustive(inst: ReallocInstance, limit: int = 200_000) -> Solution:
    """Best feasible combination by enumeration (``limit``: most combinations it will try)."""
    sizes = [len(st.candidates) for st in inst.stages]
    if int(np.prod(sizes, dtype=float)) > limit:
        raise ValueError(f"{int(np.prod(sizes, dtype=float))} combinations exceed the enumeration limit {limit}")
    table = inst.throughput_table()
    caps = {p.name: p.gpus for p in inst.pools}
    best, best_val = None, -np.inf
    for choice in itertools.product(*[range(n) for n in sizes]):
        use: dict[str, int] = {}
        for s, c in enumerate(choice):
            for p, g in inst.stages[s].candidates[c].gpus.items():
                use[p] = use.get(p, 0) + g
        if any(v > caps[p] for p, v in use.items()):
            continue
        val = min(table[s][c] for s, c in enumerate(choice) if inst.stages[s].pipeline) - sum(inst.stages[s].candidates[c].migration_cost
                                                                     for s, c in enumerate(choice))
        if val > best_val + 1e-12:
            best, best_val = list(choice), val
    return Solution(best or [0] * len(sizes), None if best is None else best_val, None if best is None else best_val)
