"""Decision latency of the completion-time reallocation (``planner simulate --policy dynamic``'s default) at 64 and
128 GPUs: every solve of one simulated iteration per DynaRL math set-up, wall and CPU milliseconds (state built from
the telemetry, every candidate allocation scored with the request-level model), p50 / p99 / max.

    python -m benchmarks.realloc.completion_latency [--out results/realloc/completion-latency.md]

DynaRL reports its scheduler deciding within 200 ms; the simulated times themselves do not depend on the machine.
"""

from __future__ import annotations

import argparse
import os
import platform
import time
from pathlib import Path

import numpy as np

SETUPS = ["dynarl/math-1.5b-128gpu.yaml", "dynarl/math-7b-128gpu.yaml", "dynarl/math-32b-128gpu.yaml",
          "dynarl/math-7b-64gpu.yaml"]


def measure(scenario: str, seed: int = 0) -> dict:
    from planner.sim.repro_jobs import _job_setup, _policy
    from simulator.job import JobSim

    sc, setup = _job_setup(scenario)
    pol = _policy({"name": "dynamic", "decision": "completion"}, sc)
    t0 = time.perf_counter()
    JobSim(setup, pol, seed=seed, iterations=1).run()
    d = pol.decision
    w, c = np.asarray(d.solve_ms), np.asarray(d.solve_cpu_ms)
    q = lambda a, p: float(np.percentile(a, p)) if a.size else float("nan")  # noqa: E731
    return {"scenario": scenario, "gpus": setup.total_gpus, "solves": int(w.size), "wall_p50": q(w, 50), "wall_p99": q(w, 99),
            "wall_max": float(w.max()) if w.size else float("nan"), "cpu_p50": q(c, 50), "cpu_p99": q(c, 99),
            "run_s": time.perf_counter() - t0}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default="results/realloc/completion-latency.md")
    args = ap.parse_args(argv)
    rows = [measure(s) for s in SETUPS]
    load = os.getloadavg()[0]
    L = ["# Completion-time decision latency", "",
         "Command: `python -m benchmarks.realloc.completion_latency`  ",
         f"Machine: `{platform.platform()}`, {os.cpu_count()} CPUs, load average {load:.2f} at the end (wall times grow with "
         "other users' load; CPU times less so).", "",
         "One simulated iteration (seed 0) of the dynamic policy per set-up; every solve it made (at most one per 5 s of "
         "the iteration once the tail trigger fired): building the state from the telemetry and scoring every candidate "
         "allocation with the request-level model (`formulation/realloc/tail.py`). DynaRL: within 200 ms.", "",
         "| set-up | GPUs | solves | wall p50 (ms) | wall p99 (ms) | wall max (ms) | CPU p50 (ms) | CPU p99 (ms) |",
         "|---|---:|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        L.append(f"| {r['scenario']} | {r['gpus']} | {r['solves']} | {r['wall_p50']:.1f} | {r['wall_p99']:.1f} | "
                 f"{r['wall_max']:.1f} | {r['cpu_p50']:.1f} | {r['cpu_p99']:.1f} |")
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text("\n".join(L) + "\n")
    print("\n".join(L))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
