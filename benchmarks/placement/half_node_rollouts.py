"""Would half a rollout node per member lift the trace ceiling? A bound estimate (a command, never part of the test run).

    python -m benchmarks.placement.half_node_rollouts [--out results/placement/half-node-rollouts.md] [TRACE ...]

Pinned groups give each member rollout nodes of its own, as many as its Solo-D pools, and share
the training pool; ``trace-baselines.md`` ("How cheap groups could be at all") bounds that plan
space on the Weave-like trace at 2.05x cheaper than Solo-D (``own rollout``: members at solo speed,
the training side busy only), and free re-packing at every moment reaches 1.62x: below issue 22's
1.6x-at-100% only by the online policy's loss. Rollouts are long-tailed: most of a rollout's time
a few long responses run while most engines idle, so a member on *half* a node (4 of 8 GPUs, its
engines at the same TP) loses little speed. This measures how little, and what it would do to
that bound: for each job of each trace (its Solo-D pools: one rollout node of 8 GPUs),

* the rollout's p90 and mean on 4 GPUs of the same node type against 8
  (:func:`simulator.phasetimes.rollout_s`, the request-level model the planner and simulator use);
* ``half`` when the job's p90 iteration on half a node (that p90 rollout plus its p90 training
  and sync) is within its SLO (the trace's own ``simulator`` SLOs);
* the ``own rollout`` bound as in ``trace-baselines.md`` (mean phase times, the trace's iteration
  counts, members at solo speed, the training side busy only), and the same bound with each
  ``half`` job on half a node at its half-node mean speed.

It is a bound on a plan space the planner does not have yet (members pinned to GPU slices of a
rollout node, running side by side), not a plan: the ratio of the two bounds is the evidence.
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
import time
from pathlib import Path

import numpy as np

TRACES = ("weave-like-60.yaml", "weave-trace-60.yaml", "weave-like-200-2w.yaml")


def trace_bounds(scenario: str) -> dict:
    from estimators.phases import PoolShape
    from planner.instances import simulate as inst
    from planner.instances.common import ClusterView, estimate_job, resolve_gpu_types
    from planner.schema import load_scenario
    from planner.sim.trace_analysis import solo_costs
    from planner.sim.trace_baselines import SC
    from simulator.phasetimes import rollout_s

    sc = load_scenario(SC / scenario)
    view = ClusterView(sc, resolve_gpu_types(sc))
    jobs = inst.trace_jobs(sc, 0)
    slo = {j.name: j.slo_s for j in inst.simulated_instance(sc, jobs).jobs}
    prices, gpn = inst.prices(sc), inst.gpus_per_node(sc)
    spec = {j.name: j for j in sc.jobs}
    solo = own = half = 0.0
    n_half = n_able = 0
    slow_p90, slow_mean = [], []
    for j in jobs:
        p, a, bs, cr, ct = solo_costs(j, prices, gpn)
        solo += j.iterations * (a + bs) * (cr + ct)
        own += j.iterations * ((a + bs) * cr + bs * ct)
        best = (a + bs) * cr
        s = spec[j.name]
        if j.solo.rollout_nodes == 1 and (gpn // 2) % s.rollout.tp == 0:
            n_able += 1
            prof = estimate_job(s, view, "sampled").profile
            full = view.pool(j.solo.rollout_type, 1)
            hp = PoolShape(full.gpu, 1, gpn // 2)
            h90, hmean = rollout_s(prof, hp, "p90"), rollout_s(prof, hp, "sampled")
            f90, fmean = rollout_s(prof, full, "p90"), rollout_s(prof, full, "sampled")
            slow_p90.append(h90 / f90)
            slow_mean.append(hmean / fmean)
            if h90 + float(np.quantile(p.train_s, 0.9)) + p.sync_s <= slo[j.name]:
                best = (hmean * a / fmean + bs) * cr / 2  # the trace's mean, scaled by the half node's slowdown
                n_half += 1
        half += j.iterations * (best + bs * ct)
    return {"scenario": scenario, "jobs": len(jobs), "able": n_able, "half": n_half,
            "slow_p90": (min(slow_p90), float(np.median(slow_p90)), max(slow_p90)) if slow_p90 else None,
            "slow_mean": (min(slow_mean), float(np.median(slow_mean)), max(slow_mean)) if slow_mean else None,
            "solo_over_own": solo / own, "solo_over_half": solo / half}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("traces", nargs="*", default=list(TRACES))
    ap.add_argument("--out", default="results/placement/half-node-rollouts.md")
    args = ap.parse_args(argv)
    t0 = time.perf_counter()
    rows = []
    for tr in args.traces:
        rows.append(trace_bounds(tr))
        print(rows[-1], file=sys.stderr, flush=True)
    cmd = "python -m benchmarks.placement.half_node_rollouts" + ("" if args.traces == list(TRACES) else " " + " ".join(args.traces))
    L = ["# Half a rollout node per member: how much slower, and the bound it would lift", "",
         f"Command: `{cmd}`  ",
         f"Machine: `{' '.join(platform.uname())}`, {os.cpu_count()} CPUs; {time.perf_counter() - t0:.0f} s (the numbers are "
         "the request-level model's, not the machine's).", "",
         "Every job's Solo-D rollout pool is one node of 8 GPUs; `4/8 GPUs` is the rollout time on 4 GPUs of that node "
         "over the time on all 8 (min / median / max over the jobs whose TP divides 4); a job goes on half a node when "
         "its p90 iteration there is within its SLO. Bounds as in `results/reproductions/trace-baselines.md` (\"How cheap "
         "groups could be at all\"): members at solo speed, the training side busy only; Solo-D over the bound.", "",
         "| trace | jobs | TP fits half a node | within SLO on half a node | 4/8 GPUs, p90 rollout | 4/8 GPUs, mean rollout | "
         "**Solo-D / own-rollout bound** | **... with half nodes** |",
         "|---|---:|---:|---:|---|---|---:|---:|"]

    def rng(t):
        return "-" if t is None else f"{t[0]:.2f} / {t[1]:.2f} / {t[2]:.2f}"

    for r in rows:
        L.append(f"| {r['scenario']} | {r['jobs']} | {r['able']} | {r['half']} | {rng(r['slow_p90'])} | {rng(r['slow_mean'])} | "
                 f"{r['solo_over_own']:.2f}x | {r['solo_over_half']:.2f}x |")
    L += ["", "A bound on a plan space the planner does not have (members pinned to GPU slices of a rollout node, side by "
          "side), not a plan; see the module docstring."]
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text("\n".join(L) + "\n")
    print(f"wrote {args.out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
