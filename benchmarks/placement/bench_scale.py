"""Placement at fleet scale judged from outside (a command, never part of the test run).

    python -m benchmarks.placement.bench_scale [--families distinct-loose,distinct-tight-fleet,two-types,classes]
        [--sizes 500,2000] [--seed 3] [--limits 1,5,60] [--long 300] [--long-sizes 2000]
        [--big 10000] [--big-limit 2] [--out results/placement/scale] [--work /tmp/bench_scale]

For each instance family (:func:`benchmarks.placement.bench_backends.families`; ``distinct`` is
the one the fast path and its search were tuned on, the others are held out) and size, the
instance is written as JSON and

* the independent packings (:mod:`benchmarks.placement.independent`: first fit and best fit in
  decreasing-size and tightest-SLO order, written from the instance alone) give the baseline:
  the cheapest of the four, over the jobs that fit somewhere alone;
* ``python -m planner plan FILE --time-limit L --allow-unplaced`` runs as its own process for
  every limit, timed from outside (wall, and CPU from the child's resource usage), and its plan
  is judged by ``planner validate-plan`` (the solver-free checker, another process);
* a longer search (``--backend fast --time-limit LONG``) at ``--long-sizes``;
* the best known plan is the cheapest of all of these that leaves out the fewest jobs; each
  row's certified bound is compared with it: ``(best - bound) / best``.

``--big N`` adds one ``N``-job instance (the first family) under ``--big-limit``, timed only
(the independent packings take minutes there). Rows are appended to ``OUT/scale.json`` as they
finish (a rerun skips the rows there), and ``OUT/scale.md`` is written with the command, the
machine and its load average; each row names the commit it ran (``BENCH_COMMIT`` or ``git rev-parse``).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _cpu_children() -> float:
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def plan_row(path: Path, limit: float, work: Path, backend: str = "auto") -> dict:
    out = work / f"{path.stem}-{backend}-{limit:g}.plan.json"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    c0, t0 = _cpu_children(), time.perf_counter()
    p = subprocess.run([sys.executable, "-m", "planner", "plan", str(path), "--backend", backend, "--time-limit", f"{limit:g}",
                        "--allow-unplaced", "--out", str(out)], capture_output=True, text=True, env=env)
    wall, cpu = time.perf_counter() - t0, _cpu_children() - c0
    row = {"backend": backend, "limit_s": limit, "rc": p.returncode, "wall_s": round(wall, 3), "cpu_s": round(cpu, 3)}
    if p.returncode != 0:
        row["error"] = p.stderr.strip().splitlines()[-3:]
        return row
    v = subprocess.run([sys.executable, "-m", "planner", "validate-plan", str(path), str(out)], capture_output=True, text=True,
                       env=env)
    doc = json.loads(out.read_text())
    body = doc["body"]
    row.update(cost=body["cost_per_hour"], bound=body.get("lower_bound_per_hour"), unplaced=len(body["unplaced"]),
               valid=v.returncode == 0, message=str((doc.get("solver") or {}).get("message", ""))[:300])
    return row


def independent_row(inst) -> dict:
    from benchmarks.placement.independent import Tables, pack

    t = time.process_time()
    tb = Tables(inst)
    best = None
    for order in ("size", "slo"):
        for rule in ("first", "best"):
            c, _, left = pack(inst, rule, tb, order=order)
            if best is None or (len(left), c) < (best[0], best[1]):
                best = (len(left), c, f"{rule}/{order}")
    assert best is not None
    return {"cost": best[1], "left_out": best[0], "rule": best[2], "cpu_s": round(time.process_time() - t, 2)}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--families", default="distinct-loose,distinct-tight-fleet,two-types,classes,distinct")
    ap.add_argument("--sizes", default="500,2000")
    ap.add_argument("--seed", type=int, default=3)
    ap.add_argument("--limits", default="1,5,60")
    ap.add_argument("--long", type=float, default=300.0)
    ap.add_argument("--long-sizes", default="2000")
    ap.add_argument("--big", type=int, default=0)
    ap.add_argument("--big-limit", type=float, default=2.0)
    ap.add_argument("--out", default=str(ROOT / "results" / "placement" / "scale"))
    ap.add_argument("--work", default="/tmp/bench_scale")
    ap.add_argument("--render-only", action="store_true", help="write OUT/scale.md from OUT/scale.json and stop")
    a = ap.parse_args(argv)
    if a.render_only:
        Path(a.out, "scale.md").write_text(render(json.loads(Path(a.out, "scale.json").read_text())))
        return 0
    from benchmarks.placement.bench_backends import families

    fams = families()
    out, work = Path(a.out), Path(a.work)
    out.mkdir(parents=True, exist_ok=True)
    work.mkdir(parents=True, exist_ok=True)
    store = out / "scale.json"
    data = json.loads(store.read_text()) if store.exists() else {"rows": []}
    data.setdefault("runs", []).append({"command": "python -m benchmarks.placement.bench_scale " + " ".join(argv or sys.argv[1:]),
                                        "machine": f"{platform.node()} {platform.platform()} python {platform.python_version()}, "
                                                   f"{os.cpu_count()} CPUs",
                                        "start_utc": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
                                        "load_start": os.getloadavg()[0]})
    done = {(r["family"], r["n"], r["what"]) for r in data["rows"]}

    commit = os.environ.get("BENCH_COMMIT") or subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"],
                                                               capture_output=True, text=True).stdout.strip() or "unknown"

    def add(row: dict) -> None:
        row["commit"] = commit
        data["rows"].append(row)
        store.write_text(json.dumps(data, indent=1))
        print(json.dumps({k: v for k, v in row.items() if k != "message"}), flush=True)

    jobs = [(f, int(n), float(lim), "auto") for f in a.families.split(",") for n in a.sizes.split(",")
            for lim in a.limits.split(",")]
    jobs += [(f, int(n), a.long, "fast") for f in a.families.split(",") for n in a.long_sizes.split(",") if n and a.long > 0]
    if a.big:
        jobs.append((a.families.split(",")[0], a.big, a.big_limit, "auto"))
    written: dict = {}
    for fam, n, lim, backend in jobs:
        key = (fam, n)
        if key not in written:
            inst = fams[fam](n, a.seed)
            path = work / f"{fam}-{n}-{a.seed}.json"
            path.write_text(inst.model_dump_json())
            written[key] = (inst, path)
            if n <= 2000 and (fam, n, "independent") not in done:
                add({"family": fam, "n": n, "what": "independent", **independent_row(inst)})
        inst, path = written[key]
        what = f"{backend} {lim:g}"
        if (fam, n, what) in done:
            continue
        add({"family": fam, "n": n, "what": what, "load": round(os.getloadavg()[0], 2), **plan_row(path, lim, work, backend)})
    data["runs"][-1]["load_end"] = os.getloadavg()[0]
    store.write_text(json.dumps(data, indent=1))
    (out / "scale.md").write_text(render(data))
    return 0


def render(data: dict) -> str:
    rows = data["rows"]
    lines = ["# Placement at fleet scale, judged from outside", ""]
    for run in data.get("runs", []):
        lines.append(f"    {run['command']}")
        lines.append(f"    # {run['machine']}; {run['start_utc']}; load average {run['load_start']:.1f} at the start"
                     + (f", {run['load_end']:.1f} at the end" if "load_end" in run else ""))
        if run.get("note"):
            lines.append(f"    # {run['note']}")
    lines += ["", "Independent: the cheapest of first/best fit in size/SLO order (`benchmarks/placement/independent.py`). "
              "best known: the cheapest plan of any row of the instance with the fewest jobs left out. "
              "bound gap: (best known - bound) / best known. valid: `planner validate-plan` in another process.", "",
              "| family | jobs | run | wall s | CPU s | load | $/h | left out | x independent | x best known | bound | bound gap | valid | commit |",
              "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    keys = sorted({(r["family"], r["n"]) for r in rows}, key=lambda k: (k[0], k[1]))
    for fam, n in keys:
        rs = [r for r in rows if (r["family"], r["n"]) == (fam, n)]
        ind = next((r for r in rs if r["what"] == "independent"), None)
        plans = [r for r in rs if r["what"] != "independent" and r.get("rc") == 0 and r.get("valid")]
        fewest = min((r["unplaced"] for r in plans), default=None)
        best = min((r["cost"] for r in plans if r["unplaced"] == fewest), default=None)
        if ind:
            lines.append(f"| {fam} | {n} | independent ({ind['rule']}) | | {ind['cpu_s']} | | {ind['cost']:,.0f} | "
                         f"{ind['left_out']} | 1.000 | {ind['cost'] / best:.3f} | | | | {ind.get('commit', '')} |" if best else "")
        for r in rs:
            if r["what"] == "independent":
                continue
            if r.get("rc") != 0:
                lines.append(f"| {fam} | {n} | {r['what']} | {r['wall_s']} | {r['cpu_s']} | {r.get('load', '')} | "
                             f"error rc {r['rc']} | | | | | | | {r.get('commit', '')} |")
                continue
            xi = f"{r['cost'] / ind['cost']:.3f}" if ind and ind["cost"] else "—"
            xb = f"{r['cost'] / best:.3f}" if best else "—"
            b = r.get("bound")
            gap = f"{(best - b) / best:.1%}" if b is not None and best and r["unplaced"] == fewest else "—"
            lines.append(f"| {fam} | {n} | {r['what']} | {r['wall_s']} | {r['cpu_s']} | {r.get('load', '')} | {r['cost']:,.0f} | "
                         f"{r['unplaced']} | {xi} | {xb} | {'—' if b is None else f'{b:,.0f}'} | {gap} | {r['valid']} | "
                         f"{r.get('commit', '')} |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    raise SystemExit(main())
