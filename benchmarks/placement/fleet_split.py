"""Where a fleet-scale ``auto`` plan loses: the fleet phases run by hand with a chosen split of the time.

    python -m benchmarks.placement.fleet_split FAMILY N FAST_S ROUNDS_S COLUMNS_S DIVE_S [--seed 3]

One line of JSON: the fast path's plan, the box-stabilised bound (``ROUNDS_S`` 0: no rounds; column
generation then starts from the fast path's groups), column generation's LP (``COLUMNS_S`` at the master's
duals, :mod:`formulation.placement.primalcg`), and the plan of the dive and search (``DIVE_S``) over its
groups, with the CPU seconds the process got. The jobs that fit nowhere alone are left out first, as
``planner plan`` does. Families: :func:`benchmarks.placement.bench_backends.families`.

Session 55 (2026-12-07, 2,000 distinct-loose jobs, seed 3, a machine shared with other work: 38-56 CPU s of
each run's wall time): ``4 28 18 8`` (today's 60 s split) LP 22,554, plan 23,054; ``4 0 46 8`` 22,599 /
23,230; ``4 14 32 8`` 22,907 / 23,444; ``4 0 100 8`` 22,473 / 23,164. The dive and search stay within ~2%
of the LP; the LP stalls near 22,500 whatever the split, where the 300 s plan is 21,960.
"""

from __future__ import annotations

import argparse
import json
import time
from collections import Counter


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("family")
    ap.add_argument("n", type=int)
    ap.add_argument("fast_s", type=float)
    ap.add_argument("rounds_s", type=float)
    ap.add_argument("columns_s", type=float)
    ap.add_argument("dive_s", type=float)
    ap.add_argument("--seed", type=int, default=3)
    a = ap.parse_args(argv)

    import numpy as np

    from benchmarks.placement.bench_backends import families
    from formulation.placement.boxstab import fleet_bound
    from formulation.placement.colgen import job_classes
    from formulation.placement.evaluate import Index
    from formulation.placement.explain import placeable_alone
    from formulation.placement.fast import fast_solve
    from formulation.placement.solve import _dive_and_search

    inst = families()[a.family](a.n, a.seed)
    cpu0, t0 = time.process_time(), time.perf_counter()
    idx = Index(inst)
    keep = np.flatnonzero(placeable_alone(idx))
    inst = inst.model_copy(update={"jobs": [inst.jobs[j] for j in keep]})
    idx = idx.restrict(inst, keep)
    cl = job_classes(idx)
    warm, _ = fast_solve(idx, t0 + a.fast_s)
    t1 = time.perf_counter()
    bound = None
    if a.rounds_s > 0:
        bound, res = fleet_bound(idx, cl.rep, cl.demand, cl.of_job, warm.groups, t1 + a.rounds_s)
        columns = res.columns if res is not None else []
    else:
        columns = [(int(g.config), dict(Counter(int(cl.of_job[j]) for j in g.members))) for g in warm.groups if g.members]
    t2 = time.perf_counter()
    found, words = _dive_and_search(idx, cl, columns, warm, t2 + a.columns_s + a.dive_s, 0, None, bound,
                                    columns_until=t2 + a.columns_s)
    print(json.dumps({"family": a.family, "n": a.n, "split_s": [a.fast_s, a.rounds_s, a.columns_s, a.dive_s],
                      "fast_path": warm.cost(idx), "bound": bound, "plan": found.cost(idx), "left_out": len(found.unplaced),
                      "wall_s": round(time.perf_counter() - t0, 2), "cpu_s": round(time.process_time() - cpu0, 2),
                      "phases": words.strip("; ")}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
