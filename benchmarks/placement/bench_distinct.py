"""Distinct-job placement benchmark (a command, never part of the test run).

    python -m benchmarks.placement.bench_distinct [--sizes 13,100,500,2000] [--seeds 0] [--out results/placement]

For each size, a distinct-job instance (:func:`benchmarks.placement.generate.generate_distinct`:
every job different, lognormal phase times, tight SLOs, uneven DRAM, four priced GPU types, 2%
of the jobs fitting nowhere) written as a JSON instance file, then side by side in one run:

* **FFD**: first-fit decreasing by the size key (GPU-seconds per cycle priced,
  :func:`formulation.placement.fast.size_key`), best fit over pool-type pairs, no search;
* **greedy**: Weave's three admission moves in arrival order (the baseline every plan reported);
* **fast path**: ``planner plan INSTANCE --time-limit 1 --out plan.json`` (auto picks the fast
  path under 2 s);
* **anytime**: ``planner plan INSTANCE --time-limit L`` with the size's limit (auto: column
  generation after the fast path up to 600 job classes, the fast path's local search beyond).

The two commands run as separate processes and are timed from outside (the whole command:
interpreter start, loading, solving, writing); CPU seconds and peak memory (max RSS) come from
the child's own resource usage (``wait4``). Every plan is judged by the solver-free checker. Writes
``bench_distinct.md`` and ``bench_distinct.json`` with the command, the machine and the load
average at the start and the end (the machine is shared: wall times are inflated by its load,
CPU seconds much less).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Optional

from benchmarks.placement.bench import fmt_cell as _fmt

ROOT = Path(__file__).resolve().parents[2]
LIMITS = {13: 1.0, 100: 10.0, 500: 30.0, 2000: 60.0, 10000: 120.0}


def fleet_cap() -> int:
    from benchmarks.placement.generate import DISTINCT_TYPES
    from planner.instances.placement_files import MAX_INSTANCE_NODES

    return MAX_INSTANCE_NODES // len(DISTINCT_TYPES)


def fleet(n: int) -> Optional[dict[str, int]]:
    """Nodes per GPU type: the generator's 1.5 per job and type, capped so that the instance stays
    within what an instance file may hold (``MAX_INSTANCE_NODES`` over the four types; at 131,072
    nodes that is 32,768 a type, which binds only beyond about 21,000 jobs)."""
    from benchmarks.placement.generate import DISTINCT_TYPES

    per = max(2, int(round(1.5 * n)))
    cap = fleet_cap()
    return None if per <= cap else {t: cap for t in DISTINCT_TYPES}


def inprocess(spec: str) -> dict:
    """FFD and the greedy, in this (child) process."""
    from formulation.placement.evaluate import Index
    from formulation.placement.explain import placeable_alone
    from formulation.placement.fast import ffd_order, pack
    from formulation.placement.greedy import greedy
    from formulation.placement.instance import PlacementInstance

    data = json.loads(Path(spec).read_text())
    data.pop("kind", None)
    inst = PlacementInstance.model_validate(data)
    idx = Index(inst)
    out: dict[str, Any] = {"jobs": idx.n, "unplaceable_alone": int((~placeable_alone(idx)).sum())}
    for name, fn in (("ffd", lambda: pack(idx, ffd_order(idx))), ("greedy", lambda: greedy(idx, "arrival"))):
        t0 = time.perf_counter()
        s = fn()
        out[name] = {"cost": s.cost(idx), "unplaced": len(s.unplaced), "wall_s": time.perf_counter() - t0}
    return out


def run_cli(inst_path: Path, plan_path: Path, limit: float, backend: str = "auto") -> dict:
    """The real executable (``python -m planner``), timed from outside; its own peak RSS and CPU
    seconds come from ``wait4`` on it."""
    cmd = [sys.executable, "-m", "planner", "plan", str(inst_path),
           "--backend", backend, "--time-limit", str(limit), "--out", str(plan_path), "--allow-unplaced"]
    t0 = time.perf_counter()
    with tempfile.TemporaryFile("w+") as err:
        proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=err, text=True,
                                env={**os.environ, "PYTHONPATH": str(ROOT)})
        _, status, usage = os.wait4(proc.pid, 0)
        wall = time.perf_counter() - t0
        rc = proc.returncode = os.waitstatus_to_exitcode(status)  # (so Popen does not wait again)
        err.seek(0)
        stderr = err.read()
    out = {"command": f"planner plan {inst_path.name} --backend {backend} --time-limit {limit:g} --out {plan_path.name} --allow-unplaced",
           "wall_s": wall, "cpu_s": usage.ru_utime + usage.ru_stime, "rc": rc,
           "peak_rss_mb": round(usage.ru_maxrss / 1024, 1)}
    if rc != 0:
        out["error"] = stderr.strip().splitlines()[-3:]
        return out
    from formulation.placement.check import check
    from formulation.placement.plan import PlacementPlan
    from planner.instances.placement_files import load_instance

    doc = json.loads(plan_path.read_text())
    plan = PlacementPlan.model_validate(doc["body"])
    inst = load_instance(inst_path)
    rec = doc["solver"]
    out.update(cost=plan.cost_per_hour, unplaced=len(plan.unplaced), bound=rec.get("best_bound"), gap=rec.get("gap"),
               backend=rec.get("backend"), status=rec.get("status"), solve_s=rec.get("wall_time_s"),
               violations=len(check(inst, plan)), message=rec.get("message", ""))
    return out


def main(argv=None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] == "--inprocess":
        print(json.dumps(inprocess(argv[1])))
        return 0
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sizes", default="13,100,500,2000")
    ap.add_argument("--seeds", default="0")
    ap.add_argument("--fast-limit", type=float, default=1.0)
    ap.add_argument("--out", default=str(ROOT / "results" / "placement"))
    ap.add_argument("--work", default="/tmp/rl-planner-bench-distinct")
    args = ap.parse_args(argv)
    from benchmarks.placement.generate import generate_distinct

    work = Path(args.work)
    work.mkdir(parents=True, exist_ok=True)
    started = time.strftime("%Y-%m-%d %H:%M:%S %Z")
    load0 = os.getloadavg()
    rows = []
    for n in map(int, args.sizes.split(",")):
        for seed in map(int, args.seeds.split(",")):
            inst = generate_distinct(n, seed, counts=fleet(n))
            p = work / f"distinct-{n}-{seed}.json"
            p.write_text(json.dumps({"kind": "PlacementInstance", **inst.model_dump(mode="json")}))
            base = json.loads(subprocess.run([sys.executable, "-m", "benchmarks.placement.bench_distinct", "--inprocess", str(p)],
                                             cwd=ROOT, capture_output=True, text=True,
                                             env={**os.environ, "PYTHONPATH": str(ROOT)}).stdout.strip().splitlines()[-1])
            limit = LIMITS.get(n, 60.0)
            fast = run_cli(p, work / f"fast-{n}-{seed}.json", args.fast_limit)
            anytime = run_cli(p, work / f"anytime-{n}-{seed}.json", limit)
            row = {"instance": f"{n}:{seed}", "jobs": n, "limit_s": limit, **base, "fast": fast, "anytime": anytime}
            rows.append(row)
            print(json.dumps(row), flush=True)
    load1 = os.getloadavg()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    machine = f"{platform.uname().system} {platform.uname().release} {platform.machine()}, {os.cpu_count()} CPUs, python {platform.python_version()}"
    command = "python -m benchmarks.placement.bench_distinct " + " ".join(argv)
    meta = {"command": command.strip(), "machine": machine, "started": started, "load_average_start": load0, "load_average_end": load1}
    (out / "bench_distinct.json").write_text(json.dumps({"meta": meta, "rows": rows}, indent=2) + "\n")
    lines = [
        "# Placement benchmark: distinct jobs", "",
        f"Command: `{meta['command']}`  ", f"Machine: {machine}  ",
        f"Started: {started}; load average at start {load0[0]:.2f} {load0[1]:.2f} {load0[2]:.2f}, at end "
        f"{load1[0]:.2f} {load1[1]:.2f} {load1[2]:.2f} (a shared machine: wall times include waiting for a core)", "",
        "Instances: `N:seed` = `generate_distinct(N, seed)` (every job different; 2% fit nowhere alone and are left out of "
        "the bound; fleet `bench_distinct.fleet`: 1.5 nodes per job and type, capped by the instance files' node limit "
        f"(`MAX_INSTANCE_NODES`, {fleet_cap():,} a type, not reached at these sizes)). $/h of the placed jobs; every plan places the same jobs "
        "unless `unpl` says otherwise. FFD and greedy "
        "are timed in process (no loading); fast and anytime are whole `planner plan` commands timed from outside "
        "(wall) with their CPU seconds and peak RSS. bound = certified lower bound over the placeable jobs; gap = "
        "(cost - bound) / cost; x bound = cost / bound; vs FFD = cost / FFD cost. viol = checker violations.", "",
        "| instance | limit s | FFD $/h (s) | greedy $/h (s) | fast $/h | fast bound | fast x bound | fast vs FFD | fast wall s (CPU s) "
        "| fast MB | anytime $/h | anytime bound | anytime gap % | anytime vs FFD | anytime wall s (CPU s) | anytime MB | backend "
        "| unpl (FFD/fast/any) | viol |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        f, a, ffd, g = r["fast"], r["anytime"], r["ffd"], r["greedy"]
        xb = lambda d: _fmt(d["cost"] / d["bound"], 3) if d.get("bound") else "-"  # noqa: E731
        vs = lambda d, ffd=ffd: _fmt(d["cost"] / ffd["cost"], 3) if d.get("cost") is not None and ffd["cost"] else "-"  # noqa: E731
        lines.append(
            f"| {r['instance']} | {r['limit_s']:g} | {_fmt(ffd['cost'], 0)} ({_fmt(ffd['wall_s'])}) | {_fmt(g['cost'], 0)} ({_fmt(g['wall_s'])}) | "
            f"{_fmt(f.get('cost'), 0)} | {_fmt(f.get('bound'), 0)} | {xb(f)} | {vs(f)} | {_fmt(f.get('wall_s'))} ({_fmt(f.get('cpu_s'))}) | "
            f"{_fmt(f.get('peak_rss_mb'), 0)} | {_fmt(a.get('cost'), 0)} | {_fmt(a.get('bound'), 0)} | "
            f"{_fmt(100 * a['gap'] if a.get('gap') is not None else None)} | {vs(a)} | {_fmt(a.get('wall_s'))} ({_fmt(a.get('cpu_s'))}) | "
            f"{_fmt(a.get('peak_rss_mb'), 0)} | {a.get('backend', a.get('error'))} | {ffd['unplaced']}/{f.get('unplaced')}/{a.get('unplaced')} | "
            f"{f.get('violations')}/{a.get('violations')} |")
    lines += ["", "Solver messages:", ""]
    for r in rows:
        for k in ("fast", "anytime"):
            lines.append(f"- {r['instance']} {k} (`{r[k]['command']}`): {r[k].get('message') or r[k].get('error')}")
    (out / "bench_distinct.md").write_text("\n".join(lines) + "\n")
    print(f"wrote {out / 'bench_distinct.md'} and {out / 'bench_distinct.json'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
