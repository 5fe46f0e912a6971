"""Decision-latency benchmark for the reallocation planner (not a test).

    python -m formulation.realloc.bench [--decisions 100] [--out results/realloc] [--quick]

Two cases, each over ``--decisions`` distinct synthetic snapshots (seeded):

* ``128gpu``: 16 nodes x 8 H100, 7 components (rollout, tool agent, reference, critic, reward,
  judge, trainer), up to 10 candidates per component;
* ``1024gpu``: 128 nodes x 8 GPUs of 4 types (H100, H800, H20, H200; 32 nodes each), the same
  7 components, up to 64 candidates per component.

Per decision it measures ``decide()`` end to end (graph, donor detection, candidates and
migrations, model build, solve, checker) per backend (``bnb``, the default exact branch and bound;
``highs``; ``cpsat``; ``pyomo``; ``highs/python``: HiGHS with the Python reference candidate
generator, the path before the numpy generator), and, on the same instance, the model build
alone (highspy arrays vs Pyomo components vs CP-SAT) so that the cost of Pyomo's model
construction is measured beside highspy's. Reports p50 / p99 / max, ratios side by side, the
machine (``uname -a``, CPUs, load average at start and end) and the exact command. A full garbage
collection runs (untimed) before each timed call, so that one backend's garbage is not collected
on the next one's clock (with Pyomo in the same process this otherwise shows in the others' p99). Writes
``latency.md`` and ``latency.json`` under ``--out``.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import platform
import sys
import time
from pathlib import Path
from typing import Optional

import numpy as np

from formulation.common import SolveOptions
from formulation.realloc.context import ComponentContext, Links, ReallocContext, pools_from_snapshot
from formulation.realloc.decide import ReallocOptions, decide
from formulation.realloc.donors import DonorConfig, DonorDetector
from formulation.realloc.instance import Curve
from formulation.realloc.telemetry import TelemetrySnapshot

# relative speed per type: decode (HBM bandwidth) and forward/backward (FLOP/s), from the catalogue figures
HBM = {"H100": 3.35, "H800": 3.35, "H20": 4.0, "H200": 4.8}
FLOPS = {"H100": 989.0, "H800": 989.0, "H20": 148.0, "H200": 989.0}
COMPONENTS = [  # name, kind, share of the GPUs, GPUs per worker
    ("rollout", "rollout", 0.50, 1),
    ("agent", "tool_agent", 0.08, 1),
    ("ref", "reference", 0.10, 1),
    ("critic", "critic", 0.10, 2),
    ("reward", "reward", 0.04, 1),
    ("judge", "reward", 0.02, 1),
    ("actor", "trainer", 0.16, 2),
]


def synthetic(seed: int, types: tuple, nodes_per_type: int, gpus_per_node: int = 8):
    """A snapshot late in rollout (tail) and its context: the trainer and critic each on one GPU type
    (H100-class first), rollout and tool agent preferring H20, a few GPUs left free."""
    rng = np.random.default_rng(seed)
    nodes = [(f"{t.lower()}-{i}", t) for t in types for i in range(nodes_per_type)]
    free = {n: gpus_per_node for n, _ in nodes}
    node_type = dict(nodes)
    total = len(nodes) * gpus_per_node
    order = [c for c in COMPONENTS if c[1] in ("trainer", "critic")] + [c for c in COMPONENTS if c[1] not in ("trainer", "critic")]
    workers: list[dict] = []
    by_name: dict[str, dict] = {}
    for name, kind, share, unit in order:
        want = max(unit, int(round(share * total * float(rng.uniform(0.9, 1.0)) / unit)) * unit)
        if kind in ("trainer", "critic"):
            fast = [t for t in ("H100", "H800", "H200") if t in types] or list(types)
            t_best = max(fast, key=lambda t: sum(free[n] for n, tt in nodes if tt == t))
            cand_nodes = [n for n, t in nodes if t == t_best]
        else:
            pref = {"H20": 0} if kind in ("rollout", "tool_agent") else {}
            cand_nodes = sorted((n for n, _ in nodes), key=lambda n: (pref.get(node_type[n], 1), -free[n], n))
        got, i = 0, 0
        for node in cand_nodes:
            while got < want and free[node] >= unit:
                reqs = int(rng.integers(0, 3)) if kind in ("rollout", "tool_agent") else 0
                workers.append({"worker_id": f"{name}-{i}", "component": name, "node": node, "gpu_type": node_type[node],
                                "gpus": unit, "kv_used_tokens": reqs * float(rng.uniform(3e3, 9e3)), "kv_capacity_tokens": 4e5,
                                "requests_in_flight": reqs, "tokens_per_s": 40.0 * reqs})
                free[node] -= unit
                got += unit
                i += 1
        by_name[name] = {"name": name, "kind": kind, "progress": float(rng.uniform(0.1, 0.9)),
                         "interruptible": bool(rng.random() < 0.9) or kind == "rollout"}
    comps = [by_name[c[0]] for c in COMPONENTS]
    snap = TelemetrySnapshot.model_validate({
        "job": "bench", "time_s": 100.0, "components": comps, "workers": workers,
        "nodes": [{"node": n, "gpu_type": t, "gpus": gpus_per_node} for n, t in nodes]})
    pools = pools_from_snapshot(snap)
    per_type = {t: sum(p.gpus for p in pools if p.gpu_type == t) for t in types}
    cctx = {}
    for name, kind, _share, unit in COMPONENTS:
        curves = {}
        for t in types:
            if kind in ("rollout", "tool_agent"):
                reqs = max(1, sum(w["requests_in_flight"] for w in workers if w["component"] == name))
                xs = sorted({1, 2, 4, 8, reqs, per_type[t]})
                xs = [x for x in xs if x <= per_type[t]]
                ys = [HBM[t] * reqs * min(x, reqs) / (min(x, reqs) + 0.1 * reqs) for x in xs]
                curves[t] = Curve(tuple(float(x) for x in xs), tuple(ys))
            else:
                curves[t] = Curve.linear(FLOPS[t] / 100.0 * float(rng.uniform(0.5, 1.5)) * (0.3 if kind == "reward" else 1.0))
        allowed: Optional[tuple[str, ...]] = None
        if kind in ("trainer", "critic") and "H100" in types:
            allowed = tuple(t for t in ("H100", "H800", "H200") if t in types)
        cctx[name] = ComponentContext(curves, unit, allowed, weight_bytes=14e9,
                                      sharded_state_bytes=84e9 if kind in ("trainer", "critic") else 0.0,
                                      kv_bytes_per_token=57_344.0)
    links = Links({t: 450.0 for t in types}, {t: 50.0 for t in types}, 50.0)
    return snap, ReallocContext(pools, cctx, links, horizon_s=600.0)


def _pct(v: list[float], q: float) -> float:
    return float(np.percentile(v, q)) if v else float("nan")


def _build_ms(inst, backend: str) -> float:
    """The model construction alone (NaN for the branch and bound, which builds no model)."""
    from formulation.realloc import cpsat, milp

    if backend not in ("highs", "pyomo", "cpsat"):
        return float("nan")
    t0 = time.perf_counter()
    if backend == "highs":
        milp.build(inst, SolveOptions())
    elif backend == "pyomo":
        milp.build_pyomo(inst)
    elif backend == "cpsat":
        cpsat.build(inst, SolveOptions())
    return (time.perf_counter() - t0) * 1e3


def _variant(label: str) -> tuple[str, str]:
    """``backend`` or ``backend/generator`` -> (backend, candidate generator)."""
    backend, _, generator = label.partition("/")
    return backend, generator or "numpy"


def run_case(name: str, types: tuple, nodes_per_type: int, max_candidates: int, decisions: int, backends: list[str],
             pyomo_every: int) -> dict:
    res: dict = {"case": name, "types": list(types), "nodes": nodes_per_type * len(types), "max_candidates": max_candidates,
                 "decisions": decisions, "backends": {}}
    donors = DonorConfig(theta=0.5, u_low=0.2, hold_s=0.0, kinds=("rollout", "tool_agent"))
    sizes: list = []
    objs: dict[str, list] = {b: [] for b in backends}
    warm_snap, warm_ctx = synthetic(10_000, types, nodes_per_type)
    for b in backends:
        backend, generator = _variant(b)
        # the first call in a process pays one-off costs (library initialisation): timed apart
        t0 = time.perf_counter()
        decide(warm_snap, warm_ctx, ReallocOptions(backend=backend, generator=generator, max_candidates=max_candidates),
               DonorDetector(donors))
        first = (time.perf_counter() - t0) * 1e3
        res["backends"][b] = {"first_call_ms": first, "total_ms": [], "cpu_ms": [], "candidates_ms": [], "build_and_solve_ms": [],
                              "build_ms": [], "committed": 0, "status": {}}
    for d in range(decisions):
        snap, ctx = synthetic(d, types, nodes_per_type)
        for b in backends:
            backend, generator = _variant(b)
            if backend == "pyomo" and d % pyomo_every:
                continue
            opts = ReallocOptions(backend=backend, generator=generator, margin=0.02, max_candidates=max_candidates,
                                  solve=SolveOptions(time_limit_s=5.0, mip_gap=1e-6))
            gc.collect()  # untimed: the previous backend's garbage (Pyomo's models above all) is not collected on this one's clock
            c0 = time.process_time()
            dec = decide(snap, ctx, opts, DonorDetector(donors))
            r = res["backends"][b]
            r["cpu_ms"].append((time.process_time() - c0) * 1e3)
            r["total_ms"].append(dec.timings_ms["total"])
            r["candidates_ms"].append(dec.timings_ms.get("candidates", 0.0))
            r["build_and_solve_ms"].append(dec.timings_ms.get("build_and_solve", 0.0))
            r["build_ms"].append(_build_ms(dec.instance, backend))
            r["committed"] += int(dec.committed)
            r["status"][dec.record.status.value] = r["status"].get(dec.record.status.value, 0) + 1
            objs[b].append(dec.objective)
            if b == backends[0] and dec.instance is not None:
                sizes.append(dec.instance.size())
            if dec.violations:
                raise RuntimeError(f"checker rejected a {b} decision: {dec.violations}")
    res["instance"] = {k: int(np.median([s[k] for s in sizes])) for k in sizes[0]}
    base = objs[backends[0]]
    for b in backends[1:]:
        n = len(objs[b])
        step = pyomo_every if _variant(b)[0] == "pyomo" else 1
        pairs = list(zip([base[i * step] for i in range(n)], objs[b]))
        res["backends"][b]["max_rel_objective_diff_vs_" + backends[0]] = max(
            (abs(x - y) / max(1e-12, abs(x)) for x, y in pairs), default=0.0)
    for r in res["backends"].values():
        for key in ("total_ms", "cpu_ms", "candidates_ms", "build_and_solve_ms", "build_ms"):
            v = [x for x in r.pop(key) if x == x]  # NaN: not measured
            r[key.replace("_ms", "")] = {"n": len(v), "p50_ms": _pct(v, 50), "p99_ms": _pct(v, 99), "max_ms": max(v) if v else None,
                                         "mean_ms": float(np.mean(v)) if v else None}
    return res


def _machine() -> dict:
    return {"uname": " ".join(platform.uname()), "cpus": os.cpu_count(), "python": sys.version.split()[0]}


def _ms(v, fmt: str = "{:.1f}") -> str:
    return "–" if v is None or v != v else fmt.format(v)


def _markdown(report: dict) -> str:
    before = report.get("before")
    lines = ["# Reallocation decision latency", "", f"Command: `{report['command']}`", "",
             f"Machine: `{report['machine']['uname']}`, {report['machine']['cpus']} CPUs, Python {report['machine']['python']}; "
             f"load average at start {report['load_start']}, at end {report['load_end']}. Shared machine: wall times are "
             "noisy (other users' jobs share the 2 CPUs), ratios are measured side by side in the same run, on the same "
             "snapshots, one backend after the other per snapshot; a full garbage collection runs, untimed, before each "
             "timed call.", "",
             "Latency is one `decide()` call: component graph, donor detection, candidate generation with migration "
             "plans, model build, solve, solver-free check (wall clock; CPU time of this process beside it, which other "
             "users' load disturbs less). Targets: p50 <= 20 ms, p99 <= 50 ms. A label `backend/python` generates the "
             "candidates with the Python reference generator (one migration plan per candidate: the path before the numpy "
             "generator); the others use the numpy generator. `bnb` is the exact branch and bound on the bottleneck level "
             "(the default backend). \"build only\" is the model construction alone on the same (unreduced) instance: "
             "highspy arrays, CP-SAT's Python API, Pyomo components (the branch and bound builds no model). Each "
             "backend's first call in the process (library initialisation) is timed apart, on a snapshot outside the "
             "measured set.", ""]
    for case in report["cases"]:
        inst = case["instance"]
        ref = before if before in case["backends"] else None
        lines += [f"## {case['case']}: {inst['gpus']} GPUs of {inst['gpu_types']} type(s) on {inst['pools']} nodes, "
                  f"{inst['stages']} components, {inst['candidates']} candidates in all (median), {case['decisions']} decisions", "",
                  "| backend | n | decide p50 ms | decide p99 ms | max ms | CPU p50 / p99 ms | candidates p50 ms | build+solve p50 ms | "
                  f"build only p50 ms | p50 vs highs | CPU p50 vs {ref or 'before'} | first call ms | committed | status |",
                  "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
        hb = case["backends"].get("highs")
        for b, r in case["backends"].items():
            ratio = r["total"]["p50_ms"] / hb["total"]["p50_ms"] if hb else float("nan")
            cratio = r["cpu"]["p50_ms"] / case["backends"][ref]["cpu"]["p50_ms"] if ref else float("nan")
            lines.append(f"| {b} | {r['total']['n']} | {r['total']['p50_ms']:.1f} | {r['total']['p99_ms']:.1f} | "
                         f"{r['total']['max_ms']:.1f} | {r['cpu']['p50_ms']:.1f} / {r['cpu']['p99_ms']:.1f} | "
                         f"{r['candidates']['p50_ms']:.1f} | {r['build_and_solve']['p50_ms']:.1f} | "
                         f"{_ms(r['build']['p50_ms'], '{:.2f}')} | {_ms(ratio, '{:.2f}x')} | {_ms(cratio, '{:.3f}x')} | "
                         f"{r['first_call_ms']:.0f} | {r['committed']} | {', '.join(f'{k}: {v}' for k, v in r['status'].items())} |")
        diffs = {b: r[k] for b, r in case["backends"].items() for k in r if k.startswith("max_rel_objective_diff")}
        if diffs:
            first = next(iter(case["backends"]))
            lines += ["", f"Largest relative difference of the objective against {first} on the same snapshots: "
                      + ", ".join(f"{b} {v:.1e}" for b, v in diffs.items()) + "."]
        lines.append("")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m formulation.realloc.bench", description=__doc__.split("\n\n")[0])
    ap.add_argument("--decisions", type=int, default=100)
    ap.add_argument("--out", default="results/realloc")
    ap.add_argument("--backends", default="bnb,highs,cpsat,pyomo,highs/python",
                    help="backends to run, comma-separated; backend/python: with the Python reference candidate generator")
    ap.add_argument("--before", default="highs/python", help="the variant the CPU ratio column compares against")
    ap.add_argument("--pyomo-every", type=int, default=1, help="run the Pyomo reference on every k-th snapshot")
    ap.add_argument("--quick", action="store_true", help="10 decisions per case (a smoke run)")
    args = ap.parse_args(argv)
    if args.decisions < 1:
        print("error: --decisions: need at least 1. Fix: pass --decisions 100", file=sys.stderr)
        return 2
    n = 10 if args.quick else args.decisions
    backends = [b.strip() for b in args.backends.split(",") if b.strip()]
    report = {"command": "python -m formulation.realloc.bench " + " ".join(argv if argv is not None else sys.argv[1:]),
              "machine": _machine(), "load_start": " ".join(f"{x:.2f}" for x in os.getloadavg()), "before": args.before,
              "cases": []}
    report["cases"].append(run_case("128gpu", ("H100",), 16, 10, n, backends, args.pyomo_every))
    print(f"128gpu done ({time.strftime('%X')})", file=sys.stderr)
    report["cases"].append(run_case("1024gpu", ("H100", "H800", "H20", "H200"), 32, 64, n, backends, args.pyomo_every))
    report["load_end"] = " ".join(f"{x:.2f}" for x in os.getloadavg())
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    md = _markdown(report)
    for name, text in (("latency.json", json.dumps(report, indent=2) + "\n"), ("latency.md", md)):
        tmp = out / f".{name}.tmp"
        tmp.write_text(text)
        tmp.replace(out / name)
    print(md)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
