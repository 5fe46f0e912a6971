"""Every backend as a whole command on families the fast path was not tuned on (a command, never
part of the test run).

    python -m benchmarks.placement.bench_backends [--sizes 60,600,2000] [--seed 7] [--limit 2]

The instance families of :mod:`benchmarks.placement.bench_construct` (the distinct-job
generator, the same with looser SLOs, a fleet of 0.8 nodes per job and type, the class-based
generator) plus ``two-types`` (distinct jobs on two GPU types only: a cheap H20-like type with
1 TB of host DRAM and a dear H800-like one). Each instance is written as a JSON instance file;
then ``python -m planner plan FILE --backend B --time-limit L`` runs for every backend (the
compact ``highs`` and ``cpsat`` models up to 60 jobs), timed from outside, and its plan is judged
by ``planner validate-plan`` (the solver-free checker, another process). Beside each: FFD on the
placeable jobs in process. Checks per row: exit 0, wall <= L + max(1 s, 5%), the plan valid, a
bound at most the plan's cost. Writes ``results/placement/backends.md`` and ``.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import time
from pathlib import Path
from typing import Callable

ROOT = Path(__file__).resolve().parents[2]
OUT = ROOT / "results" / "placement"
BACKENDS = ("auto", "fast", "colgen", "greedy", "highs", "cpsat")
COMPACT_MAX_JOBS = 60


def families() -> dict[str, Callable]:
    from benchmarks.placement.bench_construct import _families
    from benchmarks.placement.generate import generate_distinct

    out = dict(_families())
    out["two-types"] = lambda n, s: generate_distinct(
        n, s, types={"H20": (8, 1.0, 1024.0, 1.0, 0.45), "H800": (8, 2.5, 2048.0, 1.7, 1.0)})
    return out


def _ffd(inst) -> tuple[float, int]:
    """FFD's $/h and jobs left out, over the jobs that fit somewhere alone (as the solvers)."""
    import numpy as np

    from formulation.placement.evaluate import Index
    from formulation.placement.explain import placeable_alone
    from formulation.placement.fast import ffd_order, pack

    idx = Index(inst)
    keep = np.flatnonzero(placeable_alone(idx))
    sub = idx.restrict(inst.model_copy(update={"jobs": [inst.jobs[j] for j in keep]}), keep)
    sol = pack(sub, ffd_order(sub))
    return sol.cost(sub), len(sol.unplaced) + idx.n - len(keep)


def run_row(path: Path, backend: str, limit: float, work: Path) -> dict:
    out = work / f"{path.stem}-{backend}.json"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    t0 = time.perf_counter()
    p = subprocess.run([sys.executable, "-m", "planner", "plan", str(path), "--backend", backend, "--time-limit",
                        f"{limit:g}", "--allow-unplaced", "--out", str(out)], capture_output=True, text=True, env=env)
    wall = time.perf_counter() - t0
    row = {"backend": backend, "rc": p.returncode, "wall_s": round(wall, 3)}
    if p.returncode != 0:
        row["error"] = p.stderr.strip().splitlines()[-2:]
        return row
    v = subprocess.run([sys.executable, "-m", "planner", "validate-plan", str(path), str(out)], capture_output=True,
                       text=True, env=env)
    body = json.loads(out.read_text())["body"]
    cost, lb = body["cost_per_hour"], body.get("lower_bound_per_hour")
    row.update(cost=cost, bound=lb, unplaced=len(body["unplaced"]), valid=v.returncode == 0,
               in_time=wall <= limit + max(1.0, 0.05 * limit), bound_ok=lb is not None and lb <= cost + 1e-6)
    return row


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sizes", default="60,600,2000")
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--limit", type=float, default=2.0)
    ap.add_argument("--out", default=str(OUT))
    ap.add_argument("--work", default="/tmp/rl-planner-bench-backends")
    args = ap.parse_args(argv)
    work = Path(args.work)
    work.mkdir(parents=True, exist_ok=True)
    load0 = os.getloadavg()
    started = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime())
    cases: list[dict] = []
    for fam, gen in families().items():
        for n in (int(x) for x in args.sizes.split(",")):
            inst = gen(n, args.seed)
            path = work / f"{fam}-{n}.json"
            path.write_text(json.dumps({"kind": "PlacementInstance", **inst.model_dump(mode="json")}))
            ffd_cost, ffd_unplaced = _ffd(inst)
            rows = [run_row(path, b, args.limit, work) for b in BACKENDS
                    if b not in ("highs", "cpsat") or n <= COMPACT_MAX_JOBS]
            case: dict = {"family": fam, "jobs": n, "ffd_cost": ffd_cost, "ffd_unplaced": ffd_unplaced, "rows": rows}
            cases.append(case)
            print(json.dumps(case), flush=True)
    load1 = os.getloadavg()
    command = "python -m benchmarks.placement.bench_backends " + " ".join(argv if argv is not None else sys.argv[1:])
    machine = f"{platform.uname().system} {platform.uname().release} {platform.machine()}, {os.cpu_count()} CPUs, python {platform.python_version()}"
    lines = ["# Every backend on instance families beyond the tuning generator", "",
             f"Command: `{command.strip()}`  ", f"Machine: {machine}  ",
             f"Started: {started}; load average at start {' '.join(f'{x:.2f}' for x in load0)}, at end "
             f"{' '.join(f'{x:.2f}' for x in load1)} (a shared machine: wall times include waiting for a core)", "",
             f"Whole `planner plan --time-limit {args.limit:g}` commands timed from outside; `valid` = `planner "
             "validate-plan` (the solver-free checker, another process) accepts the plan; `in time` = wall <= limit + "
             "max(1 s, 5%); bound = the plan's certified lower bound (over the jobs it places); x FFD = cost / FFD's cost "
             "(FFD in process on the placeable jobs; when the two leave out different numbers of jobs the ratio compares "
             "different job sets). Seed " + str(args.seed) + ".", "",
             "| family | jobs | backend | $/h | x FFD | bound | unplaced (plan / FFD) | wall s | valid | in time | bound <= cost |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    bad = 0
    for c in cases:
        for r in c["rows"]:
            if r["rc"] != 0:
                bad += 1
                lines.append(f"| {c['family']} | {c['jobs']} | {r['backend']} | exit {r['rc']} | | | | {r['wall_s']:.2f} | | | |")
                continue
            bad += not (r["valid"] and r["in_time"] and r["bound_ok"])
            bound_txt = "-" if r["bound"] is None else f"{r['bound']:.0f}"
            lines.append(f"| {c['family']} | {c['jobs']} | {r['backend']} | {r['cost']:.0f} | {r['cost'] / c['ffd_cost']:.3f} | "
                         f"{bound_txt} | {r['unplaced']} / {c['ffd_unplaced']} | "
                         f"{r['wall_s']:.2f} | {'yes' if r['valid'] else 'NO'} | {'yes' if r['in_time'] else 'NO'} | "
                         f"{'yes' if r['bound_ok'] else 'NO'} |")
    lines += ["", f"Rows failing a check: {bad}."]
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "backends.md").write_text("\n".join(lines) + "\n")
    (out / "backends.json").write_text(json.dumps({"command": command.strip(), "machine": machine, "started": started,
                                                   "load_start": load0, "load_end": load1, "cases": cases}, indent=1) + "\n")
    print(f"wrote {out / 'backends.md'}")
    return 0 if bad == 0 else 1


if __name__ == "__main__":
    raise SystemExit(main())
