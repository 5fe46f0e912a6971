"""An outside check of every backend's claims: exhaustive optima of small instances in the widest plan space.

    python -m benchmarks.placement.outside_check [--out results/placement/outside-check.md] [--work DIR]

72 small numbers-only instances (4-8 jobs; 17 shapes: tight and loose SLOs, warm switches, tight host DRAM, one
and three GPU types, GPUs per node, ties, twins, empty types, member caps, jobs that fit nowhere), generated from
their names. For each, every partition of the jobs into groups and every configuration of each group is judged by
the solver-free checker (``formulation.placement.check``): whole pools, and members pinned to rollout nodes of
their own with *every* combination of the members' table counts (not only the own-sized counts the optimisers
build), sharing the training pool. The cheapest cover (fewest jobs left out first) is the optimum of that plan
space. Each backend then plans the instance through the CLI (``planner plan --backend B --time-limit 20``); its
plan must pass ``planner validate-plan`` in another process, must not beat the optimum, an ``optimal`` status must
equal it, and a reported lower bound must not exceed it.

Written by an outside probe in session 49 (which found 13 instances where every backend's "optimal" was beaten),
kept as a benchmark in session 50. The enumeration is exponential: minutes per run.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import platform
import random
import subprocess
import sys
import time
from functools import lru_cache
from pathlib import Path
from typing import Any

import yaml

from formulation.placement.check import check
from formulation.placement.instance import PlacementInstance
from formulation.placement.plan import GroupPlan, MemberPlan, PlacementPlan, Pool

ROOT = Path(__file__).resolve().parents[2]
BACKENDS = ("auto", "fast", "colgen", "highs", "cpsat", "greedy")
SHAPES = {  # shape -> seeds
    "distinct": 4, "fitnowhere": 4, "loose": 4, "onetype": 4, "switch": 4, "threetypes": 4, "ties": 4, "tight": 6,
    "tightdram": 4, "big8": 2, "bigswitch": 4, "dram2": 6, "gpn": 6, "capcap": 4, "pmax": 4, "twins": 4, "zerocount": 4,
}
TOL = 1e-6

IGNORE = {"placed-once", "cost", "cycle-time", "critical", "totals", "slo-claim", "bound", "moved", "solver", "capacity", "pool-gpus"}

SIZES = [1, 2, 4]


def _table(base, exp, sizes):
    return {n: round(base / n ** exp, 2) for n in sizes}


def gen(seed: int, shape: str) -> dict:
    rnd = random.Random(f"{shape}-{seed}")
    n = rnd.randint(4, 7) if shape not in ("big8",) else 8
    if shape == "pmax":
        n = rnd.randint(5, 7)
    types = {"onetype": ["G"], "capcap": ["G"], "threetypes": ["A", "B", "C"], "zerocount": ["A", "B", "C"]}.get(shape, ["R", "T"])
    pool_types: dict[str, dict[str, Any]] = {}
    for t in types:
        price = 1.0 if shape == "ties" else rnd.choice([1.0, 1.5, 2.0, 3.0])
        gpn = 8
        if shape == "gpn":
            gpn = rnd.choice([1, 2, 4, 8])
            price = rnd.choice([0.1, 0.3, 0.7, 1.1, 2.2])
        dram = 2048
        if shape == "tightdram":
            dram = rnd.choice([100, 160, 200])
        pool_types[t] = {"gpus_per_node": gpn, "price_per_gpu_hour": price, "dram_gb": dram, "count": rnd.randint(5, 14)}
    jobs: list[dict[str, Any]] = []
    for j in range(n):
        if len(types) == 1:
            rt, tt = types, types
        elif len(types) == 2:
            rt, tt = (["R"], ["T"]) if rnd.random() < 0.6 else (["R", "T"], ["R", "T"])
        else:
            rt = rnd.sample(types, rnd.randint(1, 3))
            tt = rnd.sample(types, rnd.randint(1, 3))
        if shape == "ties":
            ra = {t: {k: float(rnd.choice([4, 6, 8]) // k) for k in SIZES} for t in rt}
            tb = {t: {k: float(rnd.choice([4, 6, 8]) // k) for k in SIZES} for t in tt}
        else:
            sizes_r = sorted(rnd.sample(SIZES + [3], rnd.randint(1, 3)))
            sizes_t = sorted(rnd.sample(SIZES + [3], rnd.randint(1, 3)))
            ra = {t: _table(rnd.uniform(20, 300) * (1 + i * 0.3), rnd.uniform(0.3, 1.0), sizes_r) for i, t in enumerate(rt)}
            tb = {t: _table(rnd.uniform(20, 300) * (1 + i * 0.2), rnd.uniform(0.3, 1.0), sizes_t) for i, t in enumerate(tt)}
        solo = min(a + b for ta in ra.values() for a in ta.values() for tbb in tb.values() for b in tbb.values())
        if shape == "loose":
            slo = solo * 20
        elif shape == "tight":
            slo = solo  # exactly the best solo time: nothing can share
        elif shape == "ties":
            slo = float(rnd.choice([1, 2, 3])) * solo
        else:
            slo = solo * rnd.uniform(1.0, 2.5)
        job: dict[str, Any] = {"name": f"j{j}", "slo_s": round(slo, 6) if shape not in ("tight",) else slo,
               "rollout_s": ra, "train_s": tb}
        if rnd.random() < 0.5 and shape != "ties":
            job["sync_s"] = {p: {q: round(rnd.uniform(0, 5), 2) for q in tt} for p in rt}
        if shape == "bigswitch":
            job["rollout_switch_s"] = {p: {k: round(rnd.uniform(0.5, 3) * min(min(t.values()) for t in tb.values()), 2) for k in ra[p]} for p in rt}
            job["train_switch_s"] = {q: {k: round(rnd.uniform(0.5, 3) * min(min(t.values()) for t in ra.values()), 2) for k in tb[q]} for q in tt}
            job["slo_s"] = round(solo * rnd.uniform(1.5, 4), 6)
        if shape in ("switch", "distinct") and rnd.random() < 0.7:
            job["rollout_switch_s"] = {p: {k: round(rnd.uniform(0.5, 10), 2) for k in ra[p]} for p in rt}
            job["train_switch_s"] = {q: {k: round(rnd.uniform(0.5, 10), 2) for k in tb[q]} for q in tt}
        if shape == "dram2":
            job["dram_rollout_node_gb"] = float(rnd.choice([300, 500, 700]))
            job["train_state_gb"] = float(rnd.choice([900, 1500, 2500, 3500]))
        elif shape == "tightdram":
            job["dram_rollout_node_gb"] = float(rnd.choice([30, 60, 90]))
            job["train_state_gb"] = float(rnd.choice([60, 120, 200, 300]))
        else:
            job["dram_rollout_node_gb"] = float(rnd.choice([10, 20, 40]))
            job["train_state_gb"] = float(rnd.choice([50, 100, 200]))
        if shape == "fitnowhere" and j < 2:
            if j == 0:
                job["slo_s"] = round(solo * 0.9, 6)  # below every solo time
            else:
                job["dram_rollout_node_gb"] = 5000.0  # no node has the DRAM
        jobs.append(job)
    extra: dict[str, Any] = {}
    if shape == "pmax":
        extra["pinned_members_max"] = rnd.choice([0, 1, 2, 3])
    if shape == "zerocount":
        pool_types[types[rnd.randrange(len(types))]]["count"] = 0
    if shape == "twins":
        import copy as _c
        half = jobs[: (len(jobs) + 1) // 2]
        tw = []
        for jb in half:
            t2 = _c.deepcopy(jb)
            t2["name"] = jb["name"] + "t"
            f = rnd.choice(["dram", "state", "sw", "sync", "slo"])
            if f == "dram":
                t2["dram_rollout_node_gb"] = jb["dram_rollout_node_gb"] * 2
            elif f == "state":
                t2["train_state_gb"] = jb["train_state_gb"] * 3
            elif f == "sw":
                t2["train_switch_s"] = {q: {k: 30.0 for k in v} for q, v in jb["train_s"].items()}
            elif f == "sync":
                t2["sync_s"] = {p: {q: 20.0 for q in jb["train_s"]} for p in jb["rollout_s"]}
            else:
                t2["slo_s"] = jb["slo_s"] * 0.999
            tw.append(t2)
        jobs = half + tw
    if shape == "capcap":
        for pt in pool_types.values():
            pt["count"] = rnd.randint(3, 6)
    return {**extra, "kind": "PlacementInstance", "name": f"{shape}-{seed}", "pool_types": pool_types, "jobs": jobs}


def group_plan(inst, gid, members, p, q, rpins, nR, nT, order=None):
    """members: list of job names; rpins: list of lists of rollout-node indices per member (None = whole);
    training on the whole training pool. Returns a GroupPlan (model_construct: the checker recomputes)."""
    rnames = inst.node_names(p)
    tnames = inst.node_names(q)
    if p == q:
        rnodes, tnodes = rnames[:nR], tnames[nR:nR + nT]
    else:
        rnodes, tnodes = rnames[:nR], tnames[:nT]
    jobs = {j.name: j for j in inst.jobs}
    mps = []
    for name, pins in zip(members, rpins):
        job = jobs[name]
        rn = rnodes if pins is None else [rnodes[i] for i in pins]
        nr, nt = len(rn), len(tnodes)
        a = job.rollout_s.get(p, {}).get(nr, 1.0)
        b = job.train_s.get(q, {}).get(nt, 1.0)
        sr, st = job.switches(p, nr, q, nt)
        mps.append(MemberPlan.model_construct(job=name, rollout_nodes=rn, train_nodes=list(tnodes), rollout_s=a, train_s=b,
                                              sync_s=job.sync(p, q), rollout_switch_s=sr, train_switch_s=st,
                                              cycle_time_s=0.0, slo_s=job.slo_s, slack_s=0.0, moved=False))
    pr_gpn = inst.pool_types[p].gpus_per_node
    return GroupPlan.model_construct(id=gid, rollout_pool=Pool.model_construct(gpu_type=p, nodes=rnodes, size=nR, gpus_per_node=pr_gpn, gpus=0),
                                     train_pool=Pool.model_construct(gpu_type=q, nodes=tnodes, size=nT, gpus_per_node=inst.pool_types[q].gpus_per_node, gpus=0),
                                     order=list(order or members), members=mps, cycle_time_s=0.0, critical=[], rollout_busy=0.0,
                                     train_busy=0.0, cost_per_hour=0.0)


def feasible(inst, g):
    plan = PlacementPlan.model_construct(instance="x", cost_per_hour=0.0, move_cost_per_hour=0.0, lower_bound_per_hour=None,
                                         greedy_cost_per_hour=None, nodes_used={}, gpus_used={}, groups=[g], unplaced=[], moved_jobs=[])
    v = [x for x in check(inst, plan) if x.rule not in IGNORE]
    return not v


def group_options(inst, S, extended):
    """{usage tuple: min cost} of the feasible configurations of job set S."""
    types = list(inst.pool_types)
    jobs = {j.name: j for j in inst.jobs}
    out = {}

    def put(p, nR, q, nT):
        use = [0] * len(types)
        use[types.index(p)] += nR
        use[types.index(q)] += nT
        if any(u > inst.pool_types[t].count for u, t in zip(use, types)):
            return None
        cost = nR * inst.pool_types[p].gpus_per_node * inst.pool_types[p].price_per_gpu_hour + \
            nT * inst.pool_types[q].gpus_per_node * inst.pool_types[q].price_per_gpu_hour
        return tuple(use), cost

    def record(key, cost):
        if key not in out or cost < out[key]:
            out[key] = cost

    for p in types:
        rs = None
        for name in S:
            t = set(jobs[name].rollout_s.get(p, {}))
            rs = t if rs is None else rs & t
        for q in types:
            ts = None
            for name in S:
                t = set(jobs[name].train_s.get(q, {}))
                ts = t if ts is None else ts & t
            if not ts:
                continue
            for nT in sorted(ts):
                # whole pools
                for nR in sorted(rs or ()):
                    u = put(p, nR, q, nT)
                    if u and (u[0] not in out or u[1] < out[u[0]]):
                        if feasible(inst, group_plan(inst, "g", list(S), p, q, [None] * len(S), nR, nT)):
                            record(*u)
                # pinned, equal r
                if 2 <= len(S) <= inst.pinned_members_max:
                    for r in sorted(rs or ()):
                        nR = r * len(S)
                        u = put(p, nR, q, nT)
                        if u and (u[0] not in out or u[1] < out[u[0]]):
                            pins = [list(range(i * r, (i + 1) * r)) for i in range(len(S))]
                            if feasible(inst, group_plan(inst, "g", list(S), p, q, pins, nR, nT)):
                                record(*u)
                # extended: per-member own counts (a plan no optimiser builds)
                if extended and 2 <= len(S) <= inst.pinned_members_max:
                    tables = [sorted(jobs[name].rollout_s.get(p, {})) for name in S]
                    if all(tables):
                        for rr in itertools.product(*tables):
                            if len(set(rr)) == 1:
                                continue
                            nR = sum(rr)
                            u = put(p, nR, q, nT)
                            if not u or (u[0] in out and out[u[0]] <= u[1]):
                                continue
                            pins, k = [], 0
                            for r in rr:
                                pins.append(list(range(k, k + r)))
                                k += r
                            if feasible(inst, group_plan(inst, "g", list(S), p, q, pins, nR, nT)):
                                record(*u)
    return out


def optimum(inst, extended=False):
    names = [j.name for j in inst.jobs]
    n = len(names)
    types = list(inst.pool_types)
    cap = tuple(inst.pool_types[t].count for t in types)
    opts = {}
    for mask in range(1, 1 << n):
        S = [names[i] for i in range(n) if mask >> i & 1]
        # prune: a superset of an infeasible (size>=2... not monotone in general) -- no pruning
        o = group_options(inst, S, extended)
        # keep Pareto-minimal
        items = sorted(o.items(), key=lambda kv: kv[1])
        keep = []
        for use, c in items:
            if not any(all(a <= b for a, b in zip(u2, use)) and c2 <= c for u2, c2 in keep):
                keep.append((use, c))
        opts[mask] = keep

    @lru_cache(maxsize=None)
    def best(mask, left):
        if mask == 0:
            return (0, 0.0)
        low = mask & -mask
        rest = mask ^ low
        u0, c0 = best(rest, left)
        res = (u0 + 1, c0)  # the lowest job unplaced
        sub = rest
        while True:
            g = sub | low
            for use, c in opts[g]:
                if all(a <= b for a, b in zip(use, left)):
                    nl = tuple(b - a for a, b in zip(use, left))
                    uu, cc = best(mask ^ g, nl)
                    cand = (uu, round(cc + c, 9))
                    if cand < res:
                        res = cand
            if sub == 0:
                break
            sub = (sub - 1) & rest
        return res

    un, cost = best((1 << n) - 1, cap)
    # the best cost when placing all placeable-alone jobs may differ; return (unplaced, cost)
    return {"unplaced": un, "cost": cost}




def instances(work: Path) -> list[Path]:
    work.mkdir(parents=True, exist_ok=True)
    out = []
    for shape, seeds in SHAPES.items():
        for s in range(seeds):
            p = work / f"{shape}-{s}.yaml"
            p.write_text(yaml.safe_dump(gen(s, shape), sort_keys=False))
            out.append(p)
    return out


def judge(path: Path, backend: str, opt: dict, work: Path) -> dict:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    out = work / f"{path.stem}.{backend}.yaml"
    r = subprocess.run([sys.executable, "-m", "planner", "plan", str(path), "--backend", backend, "--time-limit", "20",
                        "--out", str(out), "--allow-unplaced"], capture_output=True, text=True, env=env)
    row: dict = {"instance": path.stem, "backend": backend, "issues": []}
    if r.returncode != 0 or not out.exists():
        row["issues"].append(f"plan exit {r.returncode}: {r.stderr[-300:]}")
        return row
    v = subprocess.run([sys.executable, "-m", "planner", "validate-plan", str(path), str(out)], capture_output=True, text=True, env=env)
    doc = yaml.safe_load(out.read_text())
    body, rec = doc["body"], doc["solver"]
    cost, left, lb = body["cost_per_hour"], len(body.get("unplaced") or []), body.get("lower_bound_per_hour")
    row.update(cost=cost, unplaced=left, bound=lb, status=rec.get("status"), valid=v.returncode == 0)
    same = left == opt["unplaced"]
    if not row["valid"]:
        row["issues"].append("invalid: " + (v.stdout + v.stderr)[-300:])
    if left < opt["unplaced"] or (same and cost < opt["cost"] - TOL):
        row["issues"].append(f"beats the enumeration ({cost} $/h, {left} left out): the enumeration missed a plan")
    if row["status"] == "optimal" and not (same and abs(cost - opt["cost"]) <= TOL * max(1.0, cost)):
        row["issues"].append(f"claims optimal at {cost} ({left} left out); the optimum is {opt['cost']} ({opt['unplaced']} left out)")
    if lb is not None and same and lb > opt["cost"] + TOL * max(1.0, lb):
        row["issues"].append(f"lower bound {lb} above the optimum {opt['cost']}")
    return row


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--out", default="results/placement/outside-check.md")
    ap.add_argument("--work", default="/tmp/outside-check")
    a = ap.parse_args(argv)
    t0 = time.time()
    rows, optima = [], {}
    for path in instances(Path(a.work)):
        d = yaml.safe_load(path.read_text())
        inst = PlacementInstance.model_validate({k: v for k, v in d.items() if k != "kind"})
        optima[path.stem] = opt = optimum(inst, extended=True)
        for b in BACKENDS:
            rows.append(row := judge(path, b, opt, Path(a.work)))
            print(path.stem, b, row.get("cost"), row.get("status"), opt, row["issues"], flush=True)
    lines = ["# Outside check: every backend against the exhaustive optimum of the widest plan space", "",
             "    python -m benchmarks.placement.outside_check",
             f"    # {platform.platform()} python {platform.python_version()}, {os.cpu_count()} CPUs; "
             f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}; {time.time() - t0:.0f} s", "",
             "The optimum: every partition and every configuration, members on rollout nodes of their own with every "
             "combination of their table counts, judged by the checker (module docstring). `cost x optimum`: the mean "
             "over the instances where the backend leaves out as many jobs as the optimum.", "",
             "| backend | instances | valid plans | optimal claims | of them equal to the optimum | bounds above the optimum "
             "| plans beating the optimum | same jobs left out | cost x optimum (mean) |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for b in BACKENDS:
        rs = [r for r in rows if r["backend"] == b and "cost" in r]
        same = [r for r in rs if r["unplaced"] == optima[r["instance"]]["unplaced"]]
        claims = [r for r in rs if r["status"] == "optimal"]
        exact = [r for r in claims if not any(i.startswith("claims optimal") for i in r["issues"])]
        above = [r for r in rs if any(i.startswith("lower bound") for i in r["issues"])]
        beat = [r for r in rs if any(i.startswith("beats") for i in r["issues"])]
        ratio = [r["cost"] / optima[r["instance"]]["cost"] for r in same if optima[r["instance"]]["cost"] > 0]
        lines.append(f"| {b} | {len([r for r in rows if r['backend'] == b])} | {sum(r['valid'] for r in rs)} | {len(claims)} | "
                     f"{len(exact)} | {len(above)} | {len(beat)} | {len(same)} | {sum(ratio) / max(1, len(ratio)):.4f} |")
    bad = [r for r in rows if r["issues"]]
    lines += ["", f"Rows with an issue: {len(bad)}" + (":" if bad else "."), ""]
    lines += [f"- {r['instance']} / {r['backend']}: {'; '.join(r['issues'])}" for r in bad]
    Path(a.out).parent.mkdir(parents=True, exist_ok=True)
    Path(a.out).write_text("\n".join(lines) + "\n")
    Path(a.out).with_suffix(".json").write_text(json.dumps({"optima": optima, "rows": rows}, indent=1) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
