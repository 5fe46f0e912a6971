"""The fast path's constructions side by side (a command, never part of the test run).

    python -m benchmarks.placement.bench_construct [--sizes 2000,10000] [--seeds 0,1]

On several instance families -- the distinct-job generator the fast path was tuned on
(``distinct``), the same with looser SLOs (1.5-3.5x the solo time: ``distinct-loose``), on a
fleet of 0.8 nodes per job and type (``distinct-tight-fleet``) and the class-based generator drawn from the
trace's 13 job profiles (``classes``) -- every construction packs the placeable jobs of one
instance in one process, one after the other: next fit (what a cut-short packing used to do),
first fit as the groups stand (tightest SLO first, and in FFD order), and best fit with pool
growth (FFD order, tightest SLO first). Each gets its $/h, groups and CPU seconds and the ratio
to best-fit FFD, and the plan is checked group by group (closed form). Writes
``results/placement/constructions.md`` and ``.json`` with the command, the machine and its load.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Callable

import numpy as np

if TYPE_CHECKING:
    from formulation.placement.instance import PlacementInstance

ROOT = Path(__file__).resolve().parents[2]
OUT = ROOT / "results" / "placement"


def _families() -> dict[str, Callable[[int, int], "PlacementInstance"]]:
    from benchmarks.placement.bench import _instance
    from benchmarks.placement.bench_distinct import fleet
    from benchmarks.placement.generate import generate_distinct

    return {
        "distinct": lambda n, s: generate_distinct(n, s, counts=fleet(n)),
        "distinct-loose": lambda n, s: generate_distinct(n, s, counts=fleet(n), slo_ratio=(1.5, 3.5)),
        "distinct-tight-fleet": lambda n, s: generate_distinct(n, s, fleet_per_job=0.8),
        "classes": lambda n, s: _instance(f"{n}:{s}"),
    }


def constructions() -> dict[str, Callable]:
    from formulation.placement.fast import ffd_order, first_fit, pack, slo_order

    return {
        "next fit": lambda idx: pack(idx, slo_order(idx), max_pairs=2, deadline=-1.0),
        "first fit, SLO order": lambda idx: first_fit(idx, slo_order(idx), max_pairs=2)[0],
        "first fit, FFD order": lambda idx: first_fit(idx, ffd_order(idx), max_pairs=2)[0],
        "best fit, FFD order": lambda idx: pack(idx, ffd_order(idx), max_pairs=2),
        "best fit, SLO order": lambda idx: pack(idx, slo_order(idx), max_pairs=2),
    }


def run_case(family: str, n: int, seed: int) -> dict:
    from formulation.placement.evaluate import Index
    from formulation.placement.explain import placeable_alone

    inst = _families()[family](n, seed)
    idx = Index(inst)
    keep = np.flatnonzero(placeable_alone(idx))
    sub = idx.restrict(inst.model_copy(update={"jobs": [inst.jobs[j] for j in keep]}), keep)
    rows = {}
    for name, fn in constructions().items():
        c0 = time.process_time()
        sol = fn(sub)
        cpu = time.process_time() - c0
        bad = sum(not sub.feasible(g.config, g.members) for g in sol.groups)
        rows[name] = {"cost": sol.cost(sub), "groups": len(sol.groups), "unplaced": len(sol.unplaced), "cpu_s": cpu, "infeasible": bad}
    ref = rows["best fit, FFD order"]["cost"]
    for r in rows.values():
        r["vs_ffd"] = r["cost"] / ref if ref else None
    return {"family": family, "jobs": n, "seed": seed, "placeable": int(len(keep)), "rows": rows}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sizes", default="2000,10000")
    ap.add_argument("--seeds", default="0,1")
    ap.add_argument("--families", default=",".join(_families()))
    ap.add_argument("--out", default=str(OUT))
    args = ap.parse_args(argv)
    load0 = os.getloadavg()
    started = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime())
    cases = []
    for fam in args.families.split(","):
        for n in (int(x) for x in args.sizes.split(",")):
            for s in (int(x) for x in args.seeds.split(",")):
                case = run_case(fam, n, s)
                cases.append(case)
                print(json.dumps(case), flush=True)
    load1 = os.getloadavg()
    command = "python -m benchmarks.placement.bench_construct " + " ".join(argv if argv is not None else sys.argv[1:])
    machine = f"{platform.uname().system} {platform.uname().release} {platform.machine()}, {os.cpu_count()} CPUs, python {platform.python_version()}"
    names = list(constructions())
    lines = ["# The fast path's constructions side by side", "",
             f"Command: `{command.strip()}`  ", f"Machine: {machine}  ",
             f"Started: {started}; load average at start {' '.join(f'{x:.2f}' for x in load0)}, at end "
             f"{' '.join(f'{x:.2f}' for x in load1)} (CPU seconds of this process: waiting for a core is not counted)", "",
             "Each cell: $/h (x best-fit FFD) [groups] CPU s. Every construction places every placeable job; `infeasible` "
             "counts groups that fail the closed-form check (must be 0). Families: `distinct` (what the fast path was tuned "
             "on), `distinct-loose` (SLOs 1.5-3.5x solo), `distinct-tight-fleet` (0.8 nodes per job and type), `classes` "
             "(the class-based generator from the trace's job profiles).", "",
             "| instance | placeable | " + " | ".join(names) + " | infeasible |",
             "|---|---|" + "---|" * len(names) + "---|"]
    for c in cases:
        cells = []
        for nm in names:
            r = c["rows"][nm]
            cells.append(f"{r['cost']:.0f} ({r['vs_ffd']:.3f}) [{r['groups']}] {r['cpu_s']:.2f}"
                         + (f", {r['unplaced']} unplaced" if r["unplaced"] else ""))
        bad = sum(r["infeasible"] for r in c["rows"].values())
        lines.append(f"| {c['family']} {c['jobs']}:{c['seed']} | {c['placeable']} | " + " | ".join(cells) + f" | {bad} |")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "constructions.md").write_text("\n".join(lines) + "\n")
    (out / "constructions.json").write_text(json.dumps({"command": command.strip(), "machine": machine, "started": started,
                                                         "load_start": load0, "load_end": load1, "cases": cases}, indent=1) + "\n")
    print(f"wrote {out / 'constructions.md'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
