"""The reallocation planner in the simulation loop: solving every second against the cache.

    python -m planner.sim.bench_planner [--scenario scenarios/dynarl/math-32b-64gpu.yaml] [--out results/simulator]

One iteration of the job under the dynamic policy with :class:`planner.instances.simulate.PlannerDecision`,
``cache=False`` (build the context and solve at every one-second snapshot once a donor is seen) and
``cache=True`` (re-solve only when the donors or the allocation changed or progress moved by more
than 2% since the last solve that kept the allocation), side by side in one run: wall seconds and CPU
seconds of the whole simulation, seconds and count of the planner's solves, snapshots answered from
the cache, the simulated iteration time and the moves. Target: <= 5 s wall with the planner.
Writes ``planner-loop.md`` and ``planner-loop.json`` with the command and the machine.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def run_once(scenario: str, cache: bool, seed: int = 0) -> dict:
    from planner.instances.simulate import PlannerDecision, cluster_view, job_setup, pick_job
    from planner.schema import load_scenario
    from simulator.job import JobSim
    from simulator.policies import Policy

    sc = load_scenario(scenario)
    idx, job = pick_job(sc, None)
    setup = job_setup(sc, idx, job, cluster_view(sc), seed)
    dec = PlannerDecision(sc, cache=cache)
    w0, c0 = time.perf_counter(), time.process_time()
    res = JobSim(setup, Policy("dynamic", decision=dec), seed=seed, iterations=1).run()
    return {"cache": cache, "wall_s": time.perf_counter() - w0, "cpu_s": time.process_time() - c0,
            "planner_s": sum(dec.solve_ms) / 1e3, "solves": dec.calls, "cached": dec.skipped, "moves": dec.committed,
            "iteration_s": res.iterations[0].duration_s}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--scenario", default="scenarios/dynarl/math-32b-64gpu.yaml")
    ap.add_argument("--out", default=str(ROOT / "results" / "simulator"))
    args = ap.parse_args(argv)
    cmd = "python -m planner.sim.bench_planner " + " ".join(argv if argv is not None else sys.argv[1:])
    load0 = os.getloadavg()
    rows = [run_once(args.scenario, cache) for cache in (False, True)]
    load1 = os.getloadavg()
    a, b = rows
    L = ["# The reallocation planner in the simulation loop", "", f"Command: `{cmd.strip()}`  ",
         f"Machine: `{' '.join(platform.uname())}`, {os.cpu_count()} CPUs, load average {load0[0]:.2f} at the start, "
         f"{load1[0]:.2f} at the end (a shared machine: CPU seconds are the steadier figure).  ",
         f"Set-up: `{args.scenario}`, one iteration, dynamic policy with the reallocation planner (HiGHS), seed 0.", "",
         "| planner | wall (s) | CPU (s) | planner (s) | solves | snapshots from the cache | moves | simulated iteration (s) |",
         "|---|---:|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        L.append(f"| {'cached' if r['cache'] else 'solve every second'} | {r['wall_s']:.1f} | {r['cpu_s']:.1f} | "
                 f"{r['planner_s']:.1f} | {r['solves']:,} | {r['cached']:,} | {r['moves']} | {r['iteration_s']:.0f} |")
    L += ["", f"Side by side: the cache takes {a['cpu_s'] / max(b['cpu_s'], 1e-9):.1f}x less CPU time and "
          f"{a['wall_s'] / max(b['wall_s'], 1e-9):.1f}x less wall time for the whole simulation, with "
          f"{b['solves']:,} solves instead of {a['solves']:,}; the simulated iteration is "
          f"{abs(b['iteration_s'] / a['iteration_s'] - 1):.1%} {'longer' if b['iteration_s'] > a['iteration_s'] else 'shorter'} "
          "(the cache keeps the last verdict until the state moves by 2%, so a move can come up to that much later).", ""]
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "planner-loop.md").write_text("\n".join(L) + "\n")
    (out / "planner-loop.json").write_text(json.dumps({"command": cmd, "load": [load0, load1], "rows": rows}, indent=1) + "\n")
    print("\n".join(L))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
