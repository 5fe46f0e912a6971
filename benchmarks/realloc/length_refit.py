"""The start split refitted from telemetry: a job that declares the wrong response lengths, with and without the
refit, beside the same job declared right, all on the same samples.

    python -m benchmarks.realloc.length_refit [--scenario dynarl/math-7b-64gpu.yaml] [--iterations 2]
        [--out results/realloc/length-refit.md]

Each row is a truth the job's rollouts generate while the job declares the scenario's own distribution. The dynamic
policy with the completion decision runs three ways on seed 0: the declaration kept (``refit=False``), refitted at
each boundary (the default: :mod:`estimators.length_refit` tests the last iterations' lengths against the
declaration and, where they differ, the start split is searched again on the refitted lengths), and declared right
(the truth given to the planner: what a refit can at best reach). Iteration 0 runs on the declared lengths in the
first two; from iteration 1 the refit plans on what iteration 0 showed. Simulated times do not depend on the machine.
"""

from __future__ import annotations

import argparse
import os
import platform
import time
from dataclasses import replace
from pathlib import Path


def truths(scenario: str) -> dict:
    """The reproduction's held-out lengths (mean-matched: the refit must see the shape) and two of another mean."""
    from estimators.lengths import LengthDistribution
    from planner.sim.repro_dynarl import mean_matched
    from planner.sim.repro_dynarl_math import HEAVY_SIGMA, heavy_tail
    from planner.sim.repro_jobs import _job_setup

    _, s = _job_setup(scenario)
    base = s.workload.lengths
    return {
        f"heavy tail (log-normal sigma {HEAVY_SIGMA:g}), mean-matched": LengthDistribution(**heavy_tail(scenario)),
        "light tail (log-normal sigma 0.7), mean-matched": LengthDistribution(**mean_matched(scenario, "light")),
        "ServeGen mixture, mean-matched": LengthDistribution(**mean_matched(scenario, "mixture")),
        "declared x 1.6 (longer reasoning)": replace(base, scale=base.scale * 1.6),
        "declared x 0.5 (shorter)": replace(base, scale=base.scale * 0.5),
    }


def run(scenario: str, truth, iterations: int) -> dict:
    from planner.instances.completion import CompletionPlannerDecision
    from planner.sim.repro_jobs import _job_setup
    from simulator.job import JobSim
    from simulator.policies import Policy

    sc, s = _job_setup(scenario)
    real = replace(s, workload=replace(s.workload, lengths=truth))
    out = {}
    for how, kw in (("kept", dict(refit=False, declared_lengths=s.workload.lengths)),
                    ("refit", dict(refit=True, declared_lengths=s.workload.lengths)), ("right", dict(refit=True))):
        t0 = time.perf_counter()
        d = CompletionPlannerDecision(sc, **kw)
        res = JobSim(real, Policy("dynamic", decision=d), seed=0, iterations=iterations).run()
        out[how] = {"iter_s": [it.duration_s for it in res.iterations], "starts": dict(d.starts), "refits": list(d.refits),
                    "wall_s": time.perf_counter() - t0}
    return out


def _split(a: dict) -> str:
    return f"{a['rollout']}+{a['reference']}+{a['trainer']}"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--scenario", default="dynarl/math-7b-64gpu.yaml")
    ap.add_argument("--iterations", type=int, default=2)
    ap.add_argument("--out", default="results/realloc/length-refit.md")
    args = ap.parse_args(argv)
    if args.iterations < 2:
        print("error: --iterations must be >= 2 (the refit reads the iterations before)", flush=True)
        return 2
    rows = []
    for name, t in truths(args.scenario).items():
        r = run(args.scenario, t, args.iterations)
        rows.append((name, r))
        print(name, {k: [round(x) for x in v["iter_s"]] for k, v in r.items()}, flush=True)
    load = os.getloadavg()[0]
    L = ["# The start split refitted from telemetry", "",
         f"Command: `python -m benchmarks.realloc.length_refit --scenario {args.scenario} --iterations {args.iterations}`  ",
         f"Machine: `{platform.platform()}`, {os.cpu_count()} CPUs, load average {load:.2f} (simulated times do not depend on it).", "",
         (__doc__ or "").split("\n\n", 2)[2].strip().replace("\n", " "), "",
         "Iteration times are simulated seconds, seed 0; `later` = the mean of iterations 1 and after (where the refit acts). "
         "KS = the boundary test's statistic against its critical value (level 0.001, groups as the sample size).", "",
         "| truth (declared: the scenario's) | KS / critical at iteration 1 | kept: start, iteration 0, later (s) | "
         "refit: start from iteration 1, later (s) | declared right: start, later (s) | **kept / refit** | refit / right |",
         "|---|---|---|---|---|---:|---:|"]
    for name, r in rows:
        k, f, g = r["kept"], r["refit"], r["right"]

        def later(x):
            v = x["iter_s"][1:]
            return sum(v) / len(v)

        rec = f["refits"][0] if f["refits"] else {}
        ks = f"{rec.get('ks', float('nan')):.3f} / {rec.get('critical', float('nan')):.3f}" + (" (refit)" if rec.get("refit") else "")
        L.append(f"| {name} | {ks} | {_split(k['starts'][0])}: {k['iter_s'][0]:.0f}, {later(k):.0f} | "
                 f"{_split(f['starts'].get(1, f['starts'][0]))}: {later(f):.0f} | {_split(g['starts'][0])}: {later(g):.0f} | "
                 f"**{later(k) / later(f):.3f}x** | {later(f) / later(g):.3f} |")
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text("\n".join(L) + "\n")
    print("\n".join(L))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
