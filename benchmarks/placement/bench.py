"""Placement benchmark (a command, never part of the test run).

    python -m benchmarks.placement.bench [--sizes 13,100,500,2000] [--seeds 0] [--out results/placement]
    python -m benchmarks.placement.bench_distinct [--sizes 13,100,500,2000,10000]    # distinct jobs: its own command

For each size, a generated instance (:mod:`benchmarks.placement.generate`, templates from
``scenarios/instances/weave-trace-60.yaml``) and the shipped trace itself: the Weave greedy
(online arrival order: the baseline) and its wall time, one admission against the greedy plan of
the others (median over 20 jobs), the pattern model (colgen) under the size's time limit, and
the compact MILP (Pyomo -> HiGHS) and CP-SAT models where they are meant to run (<= 100 jobs).
Each solve runs in its own process so that its peak memory (max RSS) is its own. Writes
``bench.md`` and ``bench.json`` with the command, the machine and the load average at the start.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import resource
import statistics
import subprocess
import sys
import time
from typing import Any
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
TRACE = ROOT / "scenarios" / "instances" / "weave-trace-60.yaml"
LIMITS = {13: 1.0, 60: 10.0, 100: 10.0, 500: 30.0, 2000: 60.0}


def _instance(spec: str):
    from planner.instances.placement import load_instance  # the bench may read files; the library does not

    from benchmarks.placement.generate import generate, templates_from

    if spec == "trace":
        return load_instance(TRACE)
    n, seed = (int(x) for x in spec.split(":"))
    return generate(n, seed, templates_from(load_instance(TRACE)))


def run_one(spec: str, backend: str, limit: float) -> dict:
    """Runs in a child process: one solve (or the greedy and admission timings), as a dict."""
    from formulation.common import SolveOptions
    from formulation.placement.check import check
    from formulation.placement.evaluate import Index
    from formulation.placement.greedy import Packer, arrival_order, greedy
    from formulation.placement.solve import solve

    inst = _instance(spec)
    out: dict = {"instance": spec, "jobs": len(inst.jobs), "backend": backend}
    if backend == "greedy":
        t0 = time.perf_counter()
        idx = Index(inst)
        t1 = time.perf_counter()
        sol = greedy(idx, "arrival")
        t2 = time.perf_counter()
        out.update(cost=sol.cost(idx), unplaced=len(sol.unplaced), index_s=t1 - t0, greedy_s=t2 - t1, wall_s=t2 - t0)
        # admission: remove one job from the greedy plan, admit it back; median over 20 jobs
        order = arrival_order(idx)
        samples = []
        pk = Packer.from_groups(idx, sol.groups)
        for j in order[-20:]:
            if j not in pk.job_group:
                continue
            pk.remove_job(j)
            ta = time.perf_counter()
            pk.admit(j)
            samples.append(time.perf_counter() - ta)
        out["admit_ms_median"] = 1e3 * statistics.median(samples) if samples else None
        out["admit_ms_max"] = 1e3 * max(samples) if samples else None
    else:
        t0 = time.perf_counter()
        res = solve(inst, SolveOptions(time_limit_s=limit, mip_gap=1e-4), backend)
        wall = time.perf_counter() - t0
        rec = res.record.as_dict()
        out.update(cost=res.plan.cost_per_hour, unplaced=len(res.plan.unplaced), status=rec["status"], bound=rec["best_bound"],
                   gap=rec["gap"], wall_s=wall, limit_s=limit, greedy_cost=res.plan.greedy_cost_per_hour,
                   violations=len(check(inst, res.plan)), message=rec["message"])
        lp = re.search(r"LP ([-+0-9.e]+)", rec["message"] or "") if backend == "colgen" else None
        out["lp"] = float(lp.group(1)) if lp else None  # the LP value of the pattern model, for the bound beside it
    out["peak_rss_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    return out


def watchdog_case(n: int, limit: float, backend: str) -> dict:
    """A solve under a limit: its wall time with HiGHS's own time limit alone vs with the watchdog
    as well (the caller runs the two in separate processes)."""
    from formulation.common import SolveOptions
    from formulation.placement.solve import solve

    inst = _instance(f"{n}:0")
    t0 = time.perf_counter()
    res = solve(inst, SolveOptions(time_limit_s=limit), backend)
    return {"wall_s": time.perf_counter() - t0, "limit_s": limit, "status": res.record.status.value, "message": res.record.message}


def master_build_case(n: int) -> dict:
    """Time to build the same restricted master (the columns of a colgen run) in Pyomo (model +
    hand-over to HiGHS through appsi) and directly in highspy."""
    import pyomo.environ as pe
    from pyomo.contrib.appsi.solvers import Highs

    from formulation.placement.colgen import PatternModel, job_classes
    from formulation.placement.evaluate import Index
    from formulation.placement.greedy import best_greedy
    from formulation.placement.master import Master

    inst = _instance(f"{n}:0")
    idx = Index(inst)
    warm, _ = best_greedy(idx)
    pm = PatternModel(idx, job_classes(idx))
    pm.solve(time.perf_counter() + 20, warm, {}, 1e-4)
    cols = [c for c in pm.master.columns if c is not None]
    dem, cap = pm.cl.demand, pm.cap
    t0 = time.perf_counter()
    mm = Master(dem, cap, idx.node_matrix, pm.penalty)
    for c in cols:
        mm.add(c)
    t_highspy = time.perf_counter() - t0
    t0 = time.perf_counter()
    m = pe.ConcreteModel()
    m.P = pe.Set(initialize=range(len(cols)))
    m.C = pe.Set(initialize=range(len(dem)))
    m.lam = pe.Var(m.P, domain=pe.NonNegativeReals)
    m.u = pe.Var(m.C, domain=pe.NonNegativeReals)
    m.cover = pe.Constraint(m.C, rule=lambda m, c: sum(cols[p].counts.get(c, 0) * m.lam[p] for p in m.P if c in cols[p].counts) + m.u[c] >= dem[c])
    m.cap = pe.Constraint(range(len(cap)), rule=lambda m, t: sum(float(idx.node_matrix[cols[p].config, t]) * m.lam[p] for p in m.P) <= cap[t])
    m.obj = pe.Objective(expr=sum(cols[p].cost * m.lam[p] for p in m.P) + pm.penalty * sum(m.u[c] for c in m.C))
    opt = Highs()
    opt.set_instance(m)
    t_pyomo = time.perf_counter() - t0
    return {"columns": len(cols), "rows": int(len(dem) + len(cap)), "highspy_build_s": t_highspy, "pyomo_build_s": t_pyomo,
            "ratio": t_pyomo / max(t_highspy, 1e-9)}


def choices_case(what: str, limit: float) -> dict:
    """Measured design choices: symmetry breaking in the compact MILP; job classes in colgen."""
    from formulation.common import SolveOptions
    from formulation.placement.colgen import PatternModel, job_classes
    from formulation.placement.evaluate import Index
    from formulation.placement.greedy import best_greedy

    out = {}
    if what == "symmetry":
        from formulation.placement.milp import solve_compact

        inst = _instance("10:7")
        idx = Index(inst)
        warm, _ = best_greedy(idx)
        for flag in (True, False):
            t0 = time.perf_counter()
            sol, status, lb, msg = solve_compact(idx, SolveOptions(time_limit_s=limit), t0 + limit, warm, None, symmetry_breaking=flag)
            out["on" if flag else "off"] = {"wall_s": time.perf_counter() - t0, "status": status.value,
                                            "cost": sol.cost(idx) if sol else None, "bound": lb}
    else:
        inst = _instance("500:0")
        idx = Index(inst)
        warm, _ = best_greedy(idx)
        for merge in (True, False):
            cl = job_classes(idx, merge=merge)
            pm = PatternModel(idx, cl)
            t0 = time.perf_counter()
            sol, st = pm.solve(t0 + limit, warm, {}, 1e-4)
            out["classes" if merge else "per-job"] = {"classes": len(cl.rep), "wall_s": time.perf_counter() - t0,
                                                      "lp_s": st.phase_s.get("colgen"), "converged": st.lp_converged,
                                                      "cost": sol.cost(idx) if sol else None, "bound": st.lower_bound}
    return out


def _child(spec: str, backend: str, limit: float, env: dict | None = None) -> dict:
    cmd = [sys.executable, "-m", "benchmarks.placement.bench", "--one", spec, "--backend", backend, "--limit", str(limit)]
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, env={**os.environ, "PYTHONPATH": str(ROOT), **(env or {})})
    if proc.returncode != 0:
        return {"instance": spec, "backend": backend, "error": proc.stderr.strip().splitlines()[-1:]}
    return json.loads(proc.stdout.strip().splitlines()[-1])


def fmt_cell(x, nd=2):
    """A table cell: ``-`` for a missing value, floats to ``nd`` decimals."""
    if x is None:
        return "-"
    if isinstance(x, float):
        return f"{x:.{nd}f}"
    return str(x)


def main(argv=None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sizes", default="13,100,500,2000")
    ap.add_argument("--seeds", default="0")
    ap.add_argument("--out", default=str(ROOT / "results" / "placement"))
    ap.add_argument("--no-trace", action="store_true")
    ap.add_argument("--one", help=argparse.SUPPRESS)
    ap.add_argument("--backend", default="colgen", help=argparse.SUPPRESS)
    ap.add_argument("--limit", type=float, default=60.0, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.one:
        if args.one.startswith("watchdog:"):
            out = watchdog_case(int(args.one.split(":")[1]), args.limit, args.backend)
        elif args.one.startswith("choices:"):
            out = choices_case(args.one.split(":")[1], args.limit)
        elif args.one.startswith("masterbuild:"):
            out = master_build_case(int(args.one.split(":")[1]))
        else:
            out = run_one(args.one, args.backend, args.limit)
        print(json.dumps(out))
        return 0
    started = time.strftime("%Y-%m-%d %H:%M:%S %Z")
    load0 = os.getloadavg()
    specs = [(f"{n}:{s}", n) for n in map(int, args.sizes.split(",")) for s in map(int, args.seeds.split(","))]
    if not args.no_trace:
        specs.append(("trace", 60))
    rows: list[dict[str, Any]] = []
    for spec, n in specs:
        limit = LIMITS.get(n, 60.0)
        g = _child(spec, "greedy", limit)
        c = _child(spec, "colgen", limit)
        row: dict[str, Any] = {"instance": spec, "jobs": n, "limit_s": limit, "greedy": g, "colgen": c}
        if n <= 100:
            row["highs"] = _child(spec, "highs", limit)
            row["cpsat"] = _child(spec, "cpsat", limit)
        rows.append(row)
        print(json.dumps(row), flush=True)
    extra = {
        "watchdog": {"with": _child("watchdog:2000", "colgen", 20.0),
                     "without": _child("watchdog:2000", "colgen", 20.0, {"RL_PLANNER_NO_WATCHDOG": "1"}),
                     "compact_with": _child("watchdog:40", "highs", 2.0),
                     "compact_without": _child("watchdog:40", "highs", 2.0, {"RL_PLANNER_NO_WATCHDOG": "1"})},
        "master_build": _child("masterbuild:500", "colgen", 0),
        "symmetry": _child("choices:symmetry", "highs", 60.0),
        "classes": _child("choices:classes", "colgen", 30.0),
    }
    print(json.dumps(extra), flush=True)
    load1 = os.getloadavg()
    out_dir = Path(args.out)
    out_dir.mkdir(parents=True, exist_ok=True)
    machine = f"{platform.uname().system} {platform.uname().release} {platform.machine()}, {os.cpu_count()} CPUs, python {platform.python_version()}"
    command = "python -m benchmarks.placement.bench " + " ".join(argv if argv is not None else sys.argv[1:])
    meta = {"command": command.strip(), "machine": machine, "uname": " ".join(platform.uname()), "started": started,
            "load_average_start": load0, "load_average_end": load1}
    (out_dir / "bench.json").write_text(json.dumps({"meta": meta, "rows": rows, "extra": extra}, indent=2) + "\n")
    lines = [
        "# Placement benchmark", "",
        f"Command: `{meta['command']}`  ", f"Machine: {machine}  ", f"Started: {started}; load average at start "
        f"{load0[0]:.2f} {load0[1]:.2f} {load0[2]:.2f}, at end {load1[0]:.2f} {load1[1]:.2f} {load1[2]:.2f}", "",
        "Instances: `N:seed` = `benchmarks.placement.generate` with N jobs; `trace` = scenarios/instances/weave-trace-60.yaml. "
        "Costs in $/h; LP = the pattern model's LP value; bound = certified lower bound (the LP's, rounded up to the 8 $/h "
        "cost unit, or the reduced-cost ladder's above it, docs/placement.md); gap = (cost - bound) / cost; saving = 1 - cost / "
        "greedy cost (side by side in the same run); peak = max RSS of the solving process.", "",
        "| instance | jobs | limit s | greedy $/h | greedy plan s | admit ms (median / max) | colgen $/h | LP | bound | gap % | saving vs greedy % "
        "| colgen wall s | status | peak MB | highs $/h (s) | cpsat $/h (s) |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        g, c = r["greedy"], r["colgen"]
        saving = (1 - c["cost"] / g["cost"]) * 100 if c.get("cost") and g.get("cost") else None
        hs = r.get("highs")
        cs = r.get("cpsat")
        comp = lambda d: "-" if not d or "cost" not in d else f"{d['cost']:.1f} ({d['wall_s']:.1f}, {d['status']})"  # noqa: E731
        lines.append(
            f"| {r['instance']} | {r['jobs']} | {r['limit_s']:g} | {fmt_cell(g.get('cost'), 1)} | {fmt_cell(g.get('wall_s'), 3)} | "
            f"{fmt_cell(g.get('admit_ms_median'), 2)} / {fmt_cell(g.get('admit_ms_max'), 2)} | {fmt_cell(c.get('cost'), 1)} | {fmt_cell(c.get('lp'), 1)} | "
            f"{fmt_cell(c.get('bound'), 1)} | "
            f"{fmt_cell(100 * c['gap'] if c.get('gap') is not None else None, 2)} | {fmt_cell(saving, 1)} | {fmt_cell(c.get('wall_s'), 2)} | "
            f"{c.get('status', c.get('error'))} | {fmt_cell(c.get('peak_rss_mb'), 0)} | {comp(hs)} | {comp(cs)} |")
    wd, mb = extra["watchdog"], extra["master_build"]
    lines += ["", "Wall-clock limit, colgen on 2000 generated jobs with a 20 s limit: HiGHS's own time limit alone "
              f"{fmt_cell(wd['without'].get('wall_s'))} s, with the watchdog {fmt_cell(wd['with'].get('wall_s'))} s. Compact MILP on 40 jobs "
              f"with a 2 s limit (Pyomo build and hand-over included, which no watchdog can interrupt): alone "
              f"{fmt_cell(wd['compact_without'].get('wall_s'))} s, with the watchdog {fmt_cell(wd['compact_with'].get('wall_s'))} s.",
              "", "Restricted master build (the columns of a 500-job colgen run: "
              f"{mb.get('columns')} columns, {mb.get('rows')} rows): Pyomo + appsi hand-over {fmt_cell(mb.get('pyomo_build_s'), 3)} s, "
              f"highspy directly {fmt_cell(mb.get('highspy_build_s'), 3)} s ({fmt_cell(mb.get('ratio'), 1)}x); the master is rebuilt "
              "or extended every pricing round, so it uses highspy directly."]
    sy, cl = extra["symmetry"], extra["classes"]
    if "on" in sy:
        lines += ["", "Symmetry breaking in the compact MILP (10 generated jobs, 60 s limit): with the representative-member "
                  f"slots {fmt_cell(sy['on']['wall_s'])} s ({sy['on']['status']}, {fmt_cell(sy['on']['cost'], 1)} $/h), without "
                  f"{fmt_cell(sy['off']['wall_s'])} s ({sy['off']['status']}, {fmt_cell(sy['off']['cost'], 1)} $/h, bound {fmt_cell(sy['off']['bound'], 1)})."]
    if "classes" in cl:
        a, b = cl["classes"], cl["per-job"]
        lines += ["", f"Job classes in the pattern model (500 generated jobs, 30 s): {a['classes']} classes: LP "
                  f"{'converged' if a['converged'] else 'not converged'} in {fmt_cell(a['lp_s'])} s, {fmt_cell(a['cost'], 1)} $/h, bound "
                  f"{fmt_cell(a['bound'], 1)}; one class per job ({b['classes']}): LP {'converged' if b['converged'] else 'not converged'} "
                  f"in {fmt_cell(b['lp_s'])} s, {fmt_cell(b['cost'], 1)} $/h, bound {fmt_cell(b['bound'], 1)}."]
    lines += ["", "Solver messages:", ""]
    for r in rows:
        for b in ("colgen", "highs", "cpsat"):
            if b in r and r[b].get("message"):
                lines.append(f"- {r['instance']} {b}: {r[b]['message']}")
    (out_dir / "bench.md").write_text("\n".join(lines) + "\n")
    print(f"wrote {out_dir / 'bench.md'} and {out_dir / 'bench.json'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
