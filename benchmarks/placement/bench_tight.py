"""Tight fleets: jobs the fast path leaves out against column generation (a command, never part of
the test run; issue 26).

    python -m benchmarks.placement.bench_tight [--jobs 8,14] [--seeds 12] [--out results/placement]

Per size and seed, two instance families on a fleet that cannot hold every job: the tests' small
generator (two GPU types, ``capacity`` 2-4 nodes a type) and ``generate_distinct`` (four types, 2-4
nodes a type, every job placeable alone). Each instance is solved in this process by the fast
path (``--fast-limit``, default 1 s) and by column generation (``--exact-limit``, default 10 s);
the table lists, per size and family, on how many instances the fast path left out more jobs
than column generation, and cost more at the same count, with the fast path's CPU seconds.
Writes ``tight.md`` and ``tight.json``.
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


def instances(n: int, seeds: int):
    from benchmarks.placement.generate import generate_distinct

    import importlib

    sys.path.insert(0, str(ROOT))
    # the tests' small generator (imported by name: the tests are outside the type-checked packages)
    small_instance = importlib.import_module("tests.placement.placement_helpers").small_instance

    for seed in range(seeds):
        c = 2 + seed % 2 if n <= 8 else 3 + seed % 2
        yield "small", seed, small_instance(seed, n, capacity=(c, c))
        yield "distinct", seed, generate_distinct(n, seed, counts={t: c for t in ("H20", "H800", "A100", "L40S")}, unplaceable=0.0)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--jobs", default="8,14")
    ap.add_argument("--seeds", type=int, default=12)
    ap.add_argument("--fast-limit", type=float, default=1.0)
    ap.add_argument("--exact-limit", type=float, default=10.0)
    ap.add_argument("--out", default=str(ROOT / "results" / "placement"))
    args = ap.parse_args(argv)
    from formulation.common import SolveOptions
    from formulation.placement.check import check
    from formulation.placement.solve import solve

    started, load0 = time.strftime("%Y-%m-%d %H:%M:%S %Z"), os.getloadavg()
    rows = []
    for n in map(int, args.jobs.split(",")):
        for family, seed, inst in instances(n, args.seeds):
            c0 = time.process_time()
            fast = solve(inst, SolveOptions(time_limit_s=args.fast_limit), "fast")
            cpu = time.process_time() - c0
            exact = solve(inst, SolveOptions(time_limit_s=args.exact_limit), "colgen")
            rows.append({"jobs": n, "family": family, "seed": seed, "fast_unplaced": len(fast.plan.unplaced),
                         "fast_cost": fast.plan.cost_per_hour, "fast_cpu_s": round(cpu, 3),
                         "fast_valid": check(inst, fast.plan) == [], "colgen_unplaced": len(exact.plan.unplaced),
                         "colgen_cost": exact.plan.cost_per_hour, "colgen_status": exact.record.status.value})
            print(json.dumps(rows[-1]), flush=True)
    cmd = "python -m benchmarks.placement.bench_tight " + " ".join(argv if argv is not None else sys.argv[1:])
    lines = ["# Tight fleets: the fast path against column generation\n", f"    {cmd.strip()}\n",
             f"{started}, {platform.node()} ({os.cpu_count()} CPUs, shared), load average {load0[0]:.1f} at the start, "
             f"{os.getloadavg()[0]:.1f} at the end; fast path {args.fast_limit:g} s, colgen {args.exact_limit:g} s, in process.\n",
             "| jobs | family | instances | fast leaves more out | same count, fast dearer | fast CPU s (max) | every fast plan valid |",
             "|---:|---|---:|---:|---:|---:|---|"]
    for n in sorted({r["jobs"] for r in rows}):
        for fam in ("small", "distinct"):
            rs = [r for r in rows if r["jobs"] == n and r["family"] == fam]
            more = sum(r["fast_unplaced"] > r["colgen_unplaced"] for r in rs)
            dearer = sum(r["fast_unplaced"] == r["colgen_unplaced"] and r["fast_cost"] > r["colgen_cost"] + 1e-6 for r in rs)
            lines.append(f"| {n} | {fam} | {len(rs)} | {more} | {dearer} | {max(r['fast_cpu_s'] for r in rs):.2f} | "
                         f"{'yes' if all(r['fast_valid'] for r in rs) else 'NO'} |")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "tight.md").write_text("\n".join(lines) + "\n")
    (out / "tight.json").write_text(json.dumps({"command": cmd.strip(), "started": started, "rows": rows}, indent=1) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
