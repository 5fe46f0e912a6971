"""Would serving a shared training node first-come-first-served pack better than the ring? (a command, never part of the test run)

    python -m benchmarks.placement.training_discipline [--moments 30] [--out results/placement/training-discipline.md]

Pinned groups share a training node among members that keep rollout nodes of their own, and the
node serves them in a fixed ring (Weave's round-robin meta-iteration): every member trains once a
round, so all iterate at the group's period, and a member whose rollout is much shorter than the
others' waits for theirs. First-come-first-served (FCFS) sets no common period: a member that ends
its rollout queues behind at most one training of every other member (each has at most one
outstanding), so its iteration is at most its rollout + sync + every member's training and switch
(its own included). That bound holds for every interleaving; the expected wait is shorter, but an
SLO on every iteration needs the bound. This measures which discipline packs the jobs of each trace
onto fewer training nodes: at evenly spaced moments (the jobs present by arrival and Solo-D
duration), for each Solo-D pool shape, the exact least number of groups (a subset DP over the jobs
present, at most 16 per shape) such that

* ``ring``: every member meets its SLO by Howard's cycle time on its pins
  (:func:`formulation.placement.cycle.cycle_times`, the checker's method, warm switches included);
* ``fcfs``: every member meets its SLO by the FCFS bound above;

phase times the jobs' simulated p90 (the ``simulator`` tables' SLOs). Host DRAM is not checked (both
columns alike). Training nodes = groups x the shape's training nodes; Solo-D holds one training pool
per job.
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np

from benchmarks.placement.rollout_sharing import _feasible, _jobs

TRACES = ("weave-like-60.yaml", "weave-trace-60.yaml")
MAX_SHAPE_JOBS = 16


def fcfs_ok(J: dict, names: tuple[str, ...]) -> bool:
    """Every member's FCFS bound (module docstring) within its SLO."""
    if len(names) == 1:
        return _feasible(J, [[names[0]]])
    train = sum(J[n]["b"] + J[n]["s"] + J[n]["st"] for n in names)  # every member's training, sync and switch once
    return all(J[n]["a"] + J[n]["sr"] + train <= J[n]["slo"] * (1 + 1e-9) for n in names)


def ring_ok(J: dict, names: tuple[str, ...]) -> bool:
    return _feasible(J, [[n] for n in names])


def least_groups(names: list[str], ok) -> int:
    """The least number of groups covering ``names`` with every group ``ok`` (exact subset DP; a
    subset with an infeasible subset one member smaller is infeasible: adding a member never
    shortens another's iteration under either discipline)."""
    n = len(names)
    full = (1 << n) - 1
    feas = bytearray(1 << n)
    for s in range(1, 1 << n):
        bits = [i for i in range(n) if s >> i & 1]
        if len(bits) > 1 and any(not feas[s ^ (1 << i)] for i in bits):
            continue
        feas[s] = bool(ok(tuple(names[i] for i in bits)))

    @lru_cache(maxsize=None)
    def best(s: int) -> int:
        if s == 0:
            return 0
        low = s & -s
        out, sub = n + 1, s
        while sub:
            if sub & low and feas[sub]:
                out = min(out, 1 + best(s ^ sub))
            sub = (sub - 1) & s
        return out

    return best(full)


def measure(scenario: str, moments: int) -> dict:
    J = _jobs(scenario, "p90")
    end = max(v["arr"] + v["dur"] for v in J.values())
    tot = {"moments": 0, "jobs": 0, "solo": 0, "ring": 0, "fcfs": 0, "skipped": 0}
    for t in np.linspace(0.0, end, moments + 2)[1:-1]:
        present = sorted(n for n, v in J.items() if v["arr"] <= t < v["arr"] + v["dur"] and _feasible(J, [[n]]))
        if not present:
            continue
        tot["moments"] += 1
        tot["jobs"] += len(present)
        for pool in sorted({J[n]["pool"] for n in present}):
            ids = [n for n in present if J[n]["pool"] == pool]
            if len(ids) > MAX_SHAPE_JOBS:
                tot["skipped"] += len(ids)
                continue
            nodes = pool[3]
            tot["solo"] += nodes * len(ids)
            tot["ring"] += nodes * least_groups(ids, lambda g: ring_ok(J, g))
            tot["fcfs"] += nodes * least_groups(ids, lambda g: fcfs_ok(J, g))
    return tot


def main(argv=None) -> int:
    from benchmarks.placement import moment_report

    args = moment_report.parse(__doc__ or "", "results/placement/training-discipline.md", argv)
    lines = moment_report.head("The training node's discipline: ring against first-come-first-served (an exact packing per moment)",
                               "benchmarks.placement.training_discipline", args.moments, __doc__ or "",
                               ["trace", "moments", "mean jobs", "Solo-D training nodes", "ring", "FCFS", "**ring / Solo-D**",
                                "**FCFS / Solo-D**"], ["---"] + ["---:"] * 7)
    for sc in TRACES:
        r = measure(sc, args.moments)
        lines.append(f"| {sc} | {r['moments']} | {r['jobs'] / max(1, r['moments']):.1f} | {r['solo']} | {r['ring']} | {r['fcfs']} | "
                     f"{r['ring'] / r['solo']:.2f} | {r['fcfs'] / r['solo']:.2f} |"
                     + (f" ({r['skipped']} jobs in shapes over {MAX_SHAPE_JOBS} left out)" if r["skipped"] else ""))
        print(lines[-1], flush=True)
    moment_report.write(args.out, lines)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
