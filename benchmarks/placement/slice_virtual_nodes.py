"""Rollout slices as virtual nodes: groups on half H20 nodes against Solo-D and veRL on whole ones (issue 22).

    python -m benchmarks.placement.slice_virtual_nodes [--admissions lifetime draining ...] [--verl-half] [--all-halves]
        [--pinned-scale 2] [--instant MOMENTS] [--skip-whole] [--out FILE.json] [--md FILE.md]

A measured experiment, never part of the test run. ``results/placement/half-node-rollouts.md`` bounds
what members on GPU *slices* of a rollout node could save (2.05x -> 2.47x against Solo-D on the
Weave-like trace). This tests the cheapest way to give the online groups that plan space: a slice
as a *virtual node*. Every 8-GPU node becomes two 4-GPU nodes with half its host DRAM and half its
$/h (a conservative split: two members on the two halves of one physical node each get half its
DRAM, so no per-physical-node coupling is needed).

What the product does with such a cluster (what this module works around, each in one place):

* the scenario checks refuse a trainer TP above a node's GPUs (``jobs[i].trainer.tp: trainer tp=8
  does not divide the 4 GPUs of a H800 node``): the 32B jobs train with TP 8;
* the phase-level simulator has one ``gpus_per_node`` for both pools (``simulator.job.JobSetup``,
  ``setup_from_profile``: "rollout and training nodes must have the same GPUs per node";
  ``planner.instances.simulate.gpus_per_node``; ``simulator.trace.TraceSim``): splitting the H20
  alone fails in ``trace_jobs``;
* the tables offer a job rollout pools from its own ``rollout.nodes`` up (``compile_scenario``'s
  ``_sizes``, ``simulated_instance``'s {own, 2 x own}): a job specified on two half nodes is never
  offered one, and a job specified on one half node gets its SLO (``ratio_to_solo``) and iteration
  count from a half-node solo run;
* the Packer's pinned-configuration limits count nodes (``formulation.placement.evaluate.PINNED_MAX_ROLLOUT_NODES``
  / ``PINNED_MAX_TRAIN_NODES``, 2 / 2): on half nodes the 32B jobs (4 + 4 virtual nodes) would lose every
  pinned configuration; ``--pinned-scale 2`` (the default) doubles them while the half-node packer is built.

So the experiment splits *both* GPU types into 4-GPU virtual nodes (loaded without the scenario
checks), doubles every job's ``rollout.nodes`` and ``trainer.nodes`` (the same GPUs as its Solo-D
pools: the same solo run, SLO and iteration count, checked below), and adds to the simulator's
tables one rollout size below the job's own -- one half node -- for every job whose Solo-D rollout
pool is one physical node (TP 1-2 here; ``--all-halves`` also gives the 32B jobs, two physical
nodes, one physical node). Training tables keep the job's own (even) size only, so every training
pool is whole physical H800 nodes (a TP-8 trainer never spans two physical nodes): on the training
side this cluster is the whole-node one. The SLOs are the whole-node trace's ``simulator`` SLOs.

Solo-D and veRL run on the whole-node scenario as the paper sizes them (``planner.sim.trace_baselines``);
``--verl-half`` also runs veRL on the half-node cluster (its colocated H800 pool sized in 4-GPU steps,
each size a multiple of the trainer's TP). ``--instant N``: at N moments of the whole-node ``lifetime``
trace, the offline optimum of the jobs present on the whole-node and on the half-node tables. Results:
``results/placement/slice-virtual-nodes.md``.
"""

from __future__ import annotations

import argparse
import copy
import os
import platform
import re
import sys
import time
from dataclasses import replace
from pathlib import Path

import numpy as np

TRACE = "weave-like-60.yaml"
ADMISSIONS = ("lifetime", "draining")


def half_data(data: dict) -> dict:
    """The scenario's mapping with every node split in two 4-GPU virtual nodes (half the DRAM; the
    $/GPU-h unchanged, so half the node's $/h) and every job's pools doubled in nodes (the same GPUs)."""
    d = copy.deepcopy(data)
    for g in d["cluster"]["node_groups"]:
        if g["gpus_per_node"] % 2:
            raise ValueError(f"node group {g['name']}: {g['gpus_per_node']} GPUs do not split in two")
        g["count"] *= 2
        g["gpus_per_node"] //= 2
        g["host_dram_gb"] = g["host_dram_gb"] / 2
    for j in d["jobs"]:
        j["rollout"]["nodes"] *= 2
        j["trainer"]["nodes"] *= 2
    d["name"] = d["name"] + "-half-nodes"
    return d


def load_half(trace: str = TRACE):
    """The half-node scenario (validated by the schema; the cross-checks skipped: they refuse trainer TP 8 on
    4-GPU nodes, which the experiment keeps on whole physical nodes)."""
    import yaml

    from planner.schema import load_scenario
    from planner.sim.trace_baselines import SC

    path = Path(os.environ.get("TMPDIR", "/tmp")) / f"slice-virtual-nodes-{os.getpid()}-{trace}"
    path.write_text(yaml.safe_dump(half_data(yaml.safe_load((SC / trace).read_text())), sort_keys=False))
    try:
        return load_scenario(path, check=False)
    finally:
        path.unlink()


def sliced_instance_fn(orig_fn, slos: dict, spec_tp: dict, all_halves: bool):
    """``simulated_instance`` with one more rollout size, half the job's own, where the job's own pool is one
    physical node (two virtual ones; ``all_halves``: any even count whose half still holds an engine), and
    the SLOs ``slos`` (the whole-node trace's)."""

    def fn(sc, jobs, quantile=0.9):
        from simulator.trace import PoolConfig

        inst = orig_fn(sc, jobs, quantile)
        by = {j.name: j for j in jobs}
        gpn = {t: p.gpus_per_node for t, p in inst.pool_types.items()}
        out = []
        for pj in inst.jobs:
            j = by[pj.name]
            c0 = j.solo
            own = c0.rollout_nodes
            half = own // 2
            ok = own % 2 == 0 and (own == 2 or all_halves) and (gpn[c0.rollout_type] * half) % spec_tp[pj.name] == 0
            r_s, sw = dict(pj.rollout_s), dict(pj.rollout_switch_s)
            if ok and half >= 1:
                p = j.profile(PoolConfig(c0.rollout_type, half, c0.train_type, c0.train_nodes))
                r_s[c0.rollout_type] = {half: float(np.quantile(p.rollout_s, quantile)), **r_s[c0.rollout_type]}
                row = sw.get(c0.rollout_type, {})
                if own in row:
                    sw[c0.rollout_type] = {half: row[own], **row}  # the per-GPU weights from DRAM: the same per node
            out.append(pj.model_copy(update={"rollout_s": r_s, "rollout_switch_s": sw, "slo_s": slos[pj.name]}))
        return inst.model_copy(update={"jobs": out})

    return fn


class pinned_limits:
    """``formulation.placement.evaluate``'s pinned-configuration size limits (``PINNED_MAX_ROLLOUT_NODES``,
    ``PINNED_MAX_TRAIN_NODES``: 2 and 2, in *nodes*) at ``scale`` x (2: the same GPUs on half nodes) while
    in the block; ``scale`` 1: unchanged."""

    def __init__(self, scale: int) -> None:
        self.scale = scale

    def __enter__(self):
        from formulation.placement import evaluate as ev

        self.old = ev.PINNED_MAX_ROLLOUT_NODES, ev.PINNED_MAX_TRAIN_NODES
        ev.PINNED_MAX_ROLLOUT_NODES, ev.PINNED_MAX_TRAIN_NODES = (x * self.scale for x in self.old)
        return self

    def __exit__(self, *exc) -> None:
        from formulation.placement import evaluate as ev

        ev.PINNED_MAX_ROLLOUT_NODES, ev.PINNED_MAX_TRAIN_NODES = self.old


def _member_nodes(label: str):
    """A member's rollout nodes in a configuration label (``1xH20+2xH800``, ``3x(1xH20)+2xH800``; None: own sizes)."""
    if "own sizes" in label:
        return None
    m = re.match(r"(?:\d+x\()?(\d+)x", label)
    return int(m.group(1)) if m else None


def _summary(res, placer=None, solo_nodes: dict | None = None) -> dict:
    r = res.summary()
    span_h = max(1e-9, r["end_s"] / 3600.0)
    r["mean_cost_per_hour"] = r["cost"] / span_h
    its = [d <= j.slo_s * (1 + 1e-9) for j in res.jobs.values() for d in j.iteration_s]
    r["iterations_within_slo"] = float(np.mean(its)) if its else float("nan")
    moves: dict = {}
    labels: dict = {}
    below = set()
    for job, move, label, _ in getattr(placer, "moves", []):
        moves[move] = moves.get(move, 0) + 1
        labels[label] = labels.get(label, 0) + 1
        n = _member_nodes(label)
        if solo_nodes and n is not None and n < solo_nodes[job]:
            below.add(job)
    r["moves"] = ", ".join(f"{k} {v}" for k, v in sorted(moves.items())) or "-"
    r["configs"] = labels
    if solo_nodes:
        r["jobs_below_solo_rollout"] = len(below)  # jobs that ran (at some point) on fewer rollout GPUs than their Solo-D pool
    return r


def whole_rows(admissions) -> dict:
    """Solo-D, veRL and groups on the whole-node trace (``planner.sim.trace_baselines.policy_task``)."""
    from planner.sim.trace_baselines import policy_task

    rows = {}
    for key in [("solo-d", "-", "weave"), ("verl", "-", "weave"), ("verl", "simulator", "weave")] + [
            ("groups", "simulator", a) for a in admissions]:
        t0 = time.perf_counter()
        rows[key] = policy_task(TRACE, key[0], key[1], key[2])
        rows[key]["wall_s"] = time.perf_counter() - t0
        print("whole", key, f"{rows[key]['cost']:.0f}", f"{rows[key]['wall_s']:.0f} s", file=sys.stderr, flush=True)
    return rows


def half_rows(admissions, verl_half: bool, all_halves: bool, pinned_scale: int = 2) -> dict:
    """Groups (and veRL) on the half-node cluster."""
    from planner.instances import simulate as inst
    from planner.schema import load_scenario
    from planner.sim.trace_baselines import SC, admission_options
    from simulator.trace import SoloPlacer, TraceSim

    sc0 = load_scenario(SC / TRACE)
    jobs0 = inst.trace_jobs(sc0, 0)
    slos = {j.name: j.slo_s for j in inst.simulated_instance(sc0, jobs0).jobs}  # the whole-node simulator SLOs
    sc = load_half()
    jobs = inst.trace_jobs(sc, 0)
    iters0 = {j.name: j.iterations for j in jobs0}
    jobs = [replace(j, iterations=iters0[j.name]) for j in jobs]  # (the same counts: checked in ``checks``)
    spec_tp = {j.name: j.rollout.tp for j in sc.jobs}
    checks = {"iterations_equal": sum(a.iterations == iters0[a.name] for a in inst.trace_jobs(sc, 0)),
              "solo_iteration_rel_diff_max": max(abs(a.profile(a.solo).mean_iteration_s / b.profile(b.solo).mean_iteration_s - 1)
                                                 for a, b in zip(jobs, jobs0))}
    rows = {}
    orig = inst.simulated_instance
    inst.simulated_instance = sliced_instance_fn(orig, slos, spec_tp, all_halves)
    try:
        for a in admissions:
            t0 = time.perf_counter()
            opts = admission_options(a)
            with pinned_limits(pinned_scale):  # (the packer's Index reads them when it is built)
                placer = inst.placement_placer(sc, jobs, "simulator", join_delay=False, repack=False,
                                               sampled=1.0 if opts["sampled"] else None, sampled_join=opts["sampled_join"],
                                               timed=opts["timed"], upper_end=opts["upper_end"], objective=opts["objective"],
                                               drain=opts["drain"])
            run_jobs = inst.with_simulated_slos(jobs, placer.inst)
            res = TraceSim(run_jobs, placer, inst.prices(sc), inst.gpus_per_node(sc), seed=0, policy="groups",
                           node_dram_gb=inst.node_dram_gb(sc)).run()
            solo_nodes = {j.name: j.solo.rollout_nodes for j in jobs}
            r = _summary(res, placer, solo_nodes)
            r["wall_s"] = time.perf_counter() - t0
            r["jobs_offered_half"] = sum(1 for j in placer.inst.jobs for row in j.rollout_s.values() if min(row) < solo_nodes[j.name])
            r["waits"] = sorted(((rec.admitted_s - rec.arrival_s, n) for n, rec in res.jobs.items() if rec.admitted_s is not None),
                                reverse=True)[:3]
            r["missing"] = [n for n, rec in res.jobs.items() if any(d > rec.slo_s * (1 + 1e-9) for d in rec.iteration_s)]
            rows[("groups", "simulator", a)] = r
            print("half", a, f"{r['cost']:.0f}", f"{100 * r['jobs_meeting_slo']:.0f}%", r["moves"], f"{r['wall_s']:.0f} s",
                  file=sys.stderr, flush=True)
    finally:
        inst.simulated_instance = orig
    if verl_half:
        t0 = time.perf_counter()
        vj = verl_half_jobs(sc, [replace(j, slo_s=slos[j.name]) for j in jobs])
        placer = SoloPlacer({j.name: j for j in vj}, inst.capacity(sc), colocated=True)
        res = TraceSim(vj, placer, inst.prices(sc), inst.gpus_per_node(sc), seed=0, policy="colocated-jobs",
                       node_dram_gb=inst.node_dram_gb(sc)).run()
        r = _summary(res)
        r["wall_s"] = time.perf_counter() - t0
        r["verl_sizes"] = {}
        for j in vj:
            k = f"{j.colocated.train_nodes} half nodes (Solo-D {j.solo.rollout_nodes}+{j.solo.train_nodes})"
            r["verl_sizes"][k] = r["verl_sizes"].get(k, 0) + 1
        rows[("verl", "simulator", "weave")] = r
        print("half verl", f"{r['cost']:.0f}", f"{100 * r['jobs_meeting_slo']:.0f}%", f"{r['wall_s']:.0f} s", file=sys.stderr, flush=True)
    return {"rows": rows, "checks": checks}


def verl_half_jobs(sc, jobs) -> list:
    """veRL on the half-node cluster: each job's colocated pool the fewest 4-GPU virtual nodes (from half its
    Solo-D training nodes, each size a multiple of its trainer's TP x PP) whose p90 iteration meets its SLO, as
    :func:`planner.sim.trace_baselines.verl_jobs` sizes it on whole nodes."""
    from planner.instances import simulate as inst
    from planner.sim.trace_baselines import verl_pool

    train_tp = {j.name: j.trainer.tp * (j.trainer.pp or 1) for j in sc.jobs}
    gpn = inst.gpus_per_node(sc)
    out = []
    for j in jobs:  # (a trainer TP group inside one physical node)
        out.append(replace(j, colocated=verl_pool(j, max(1, j.solo.train_nodes // 2), lambda n, j=j: (n * gpn) % train_tp[j.name] == 0)))
    return out


def instant_rows(samples: int, admission: str = "lifetime", all_halves: bool = False, time_limit_s: float = 20.0,
                 pinned_scale: int = 2) -> list:
    """At ``samples`` evenly spaced moments of the whole-node ``groups`` trace under ``admission``
    (as ``planner.sim.trace_optimum.instant_task``): the offline optimum of the jobs present (column generation,
    every job free to move) on the whole-node simulator tables and on the half-node ones (the same SLOs), and
    those jobs on Solo-D and on veRL (whole and half nodes)."""
    from formulation.common import SolveOptions
    from formulation.placement.solve import solve
    from planner.instances import simulate as inst
    from planner.schema import load_scenario
    from planner.sim.trace_baselines import SC, admission_options, run_policy, verl_jobs

    res = run_policy(TRACE, "groups", "simulator", **admission_options(admission))
    sc0 = load_scenario(SC / TRACE)
    jobs0 = inst.trace_jobs(sc0, 0)
    si0 = inst.simulated_instance(sc0, jobs0)
    slos = {j.name: j.slo_s for j in si0.jobs}
    sc = load_half()
    iters0 = {j.name: j.iterations for j in jobs0}
    jobs = [replace(j, iterations=iters0[j.name]) for j in inst.trace_jobs(sc, 0)]
    si = sliced_instance_fn(inst.simulated_instance, slos, {j.name: j.rollout.tp for j in sc.jobs}, all_halves)(sc, jobs)
    verl0 = {j.name: j.colocated for j in verl_jobs(inst.with_simulated_slos(jobs0, si0), sc0)}
    verlh = {j.name: j.colocated for j in verl_half_jobs(sc, [replace(j, slo_s=slos[j.name]) for j in jobs])}
    prices, g0, gh = inst.prices(sc0), inst.gpus_per_node(sc0), inst.gpus_per_node(sc)
    by0, byh, j0 = {j.name: j for j in si0.jobs}, {j.name: j for j in si.jobs}, {j.name: j for j in jobs0}
    out = []
    for t in np.linspace(0.0, res.end_s, samples + 2)[1:-1]:
        present = sorted(n for n, r in res.jobs.items() if r.admitted_s is not None and r.admitted_s <= t < (r.done_s or res.end_s))
        if not present:
            continue
        opt = {}
        for key, si_, by, scale in (("whole", si0, by0, 1), ("half", si, byh, pinned_scale)):
            with pinned_limits(scale):
                r = solve(si_.model_copy(update={"jobs": [by[n] for n in present]}),
                          SolveOptions(time_limit_s=time_limit_s, mip_gap=0.0), "colgen")
            gpus: dict = {}
            for g in r.plan.groups:
                for pool in (g.rollout_pool, g.train_pool):
                    gpus[pool.gpu_type] = gpus.get(pool.gpu_type, 0) + pool.gpus
            opt[key] = {"cost": r.plan.cost_per_hour, "status": r.record.status.value, "unplaced": len(r.plan.unplaced), "gpus": gpus}
        solo = sum(g0 * (j0[n].solo.rollout_nodes * prices[j0[n].solo.rollout_type]
                         + j0[n].solo.train_nodes * prices[j0[n].solo.train_type]) for n in present)
        out.append({"t": float(t), "jobs": len(present), "solo_d": solo,
                    "verl": sum(g0 * verl0[n].train_nodes * prices[verl0[n].train_type] for n in present),
                    "verl_half": sum(gh * verlh[n].train_nodes * prices[verlh[n].train_type] for n in present),
                    "opt_whole": opt["whole"], "opt_half": opt["half"]})
        print("instant", f"t={t:.0f}", len(present), f"solo {solo:.0f}", f"whole {opt['whole']['cost']:.1f} {opt['whole']['status']}",
              f"half {opt['half']['cost']:.1f} {opt['half']['status']}", file=sys.stderr, flush=True)
    return out


def render(out: dict, cmd: str) -> list[str]:
    """Markdown of one run: the trace rows (Solo-D and veRL on whole nodes the reference) and the moments' table."""
    a = out["args"]
    w, h = out["whole"], out["half"]
    solo, verl = w["solo-d / - / weave"]["cost"], w["verl / simulator / weave"]["cost"]
    verl_h = h.get("verl / simulator / weave", {}).get("cost")
    L = [f"### `{cmd}`", "",
         f"Machine: `{out['machine']}`, nproc {out['cpus']}, load average {' '.join(f'{x:.2f}' for x in out['load'])} at the end; "
         f"{out['date']}; {out['wall_s']:.0f} s in all. Half-node options: pinned size limits x{a['pinned_scale']}"
         + (", the 32B jobs also offered one physical node" if a["all_halves"] else "") + ".", ""]
    if w or h:
        L += ["| cluster | policy | tables | admission | moves | cost ($) | H20 GPU-h | H800 GPU-h | jobs meeting SLO | "
              "iterations within SLO | mean / longest wait (s) | jobs below their Solo-D rollout | **Solo-D / this** | "
              "**veRL / this** |" + (" veRL (half) / this |" if verl_h else "") + " wall (s) |",
              "|---|---|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|" + ("---:|" if verl_h else "") + "---:|"]
        for side, rows in (("whole", w), ("half", h)):
            for k, r in rows.items():
                p, t, adm = k.split(" / ")
                L.append(f"| {side} | {p} | {t} | {adm if p == 'groups' else '-'} | {r.get('moves', '-')} | {r['cost']:,.0f} | "
                         f"{r['gpu_hours'].get('H20', 0):,.0f} | {r['gpu_hours'].get('H800', 0):,.0f} | "
                         f"{100 * r['jobs_meeting_slo']:.1f}% | {100 * r['iterations_within_slo']:.2f}% | "
                         f"{r['mean_wait_s']:,.0f} / {r['max_wait_s']:,.0f} | {r.get('jobs_below_solo_rollout', '-')} | "
                         f"{solo / r['cost']:.3f}x | {verl / r['cost']:.3f}x |" + (f" {verl_h / r['cost']:.3f}x |" if verl_h else "")
                         + f" {r['wall_s']:.0f} |")
        if out["checks"]:
            c = out["checks"]
            L += ["", f"Half-node trace jobs against the whole-node ones: {c['iterations_equal']} of 60 with the same iteration "
                  f"count; solo mean iteration within {100 * c['solo_iteration_rel_diff_max']:.3f}% (the weight sync to twice "
                  "as many virtual rollout nodes); the SLOs are the whole-node `simulator` ones."]
    S = out["instant"]
    if S:
        def m(f):
            return float(np.mean([f(x) for x in S]))
        so, vw, vh = m(lambda x: x["solo_d"]), m(lambda x: x["verl"]), m(lambda x: x["verl_half"])
        ow, oh = m(lambda x: x["opt_whole"]["cost"]), m(lambda x: x["opt_half"]["cost"])
        unproven = sum(x[k]["status"] != "optimal" for x in S for k in ("opt_whole", "opt_half"))
        gp = {k: ", ".join(f"{t} {m(lambda x, t=t, k=k: x[k]['gpus'].get(t, 0)):.0f}" for t in ("H20", "H800")) for k in ("opt_whole", "opt_half")}
        L += ["", f"Offline optimum at {len(S)} evenly spaced moments of the whole-node `groups` / `lifetime` trace (mean "
              f"{m(lambda x: x['jobs']):.1f} jobs present; column generation, every job free to move, 20 s a solve, "
              f"{2 * len(S) - unproven} of {2 * len(S)} proven optimal); means of $/h over the moments:", "",
              "| plan space | optimum $/h | GPUs (mean) | **Solo-D / optimum** | **veRL / optimum** | veRL (half) / optimum |",
              "|---|---:|---|---:|---:|---:|",
              f"| whole nodes | {ow:.1f} | {gp['opt_whole']} | {so / ow:.2f}x | {vw / ow:.2f}x | {vh / ow:.2f}x |",
              f"| half-node slices | {oh:.1f} | {gp['opt_half']} | {so / oh:.2f}x | {vw / oh:.2f}x | {vh / oh:.2f}x |", "",
              f"Solo-D {so:.1f} $/h, veRL {vw:.1f} $/h on whole nodes, {vh:.1f} $/h on half nodes, the same jobs."]
    return L + [""]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--admissions", nargs="+", default=list(ADMISSIONS))
    ap.add_argument("--verl-half", action="store_true", help="also veRL on the half-node cluster")
    ap.add_argument("--all-halves", action="store_true", help="also offer the 32B jobs one physical node (two virtual ones)")
    ap.add_argument("--skip-whole", action="store_true", help="no whole-node groups rows (Solo-D and veRL still run: the reference)")
    ap.add_argument("--instant", type=int, default=0, help="moments of the offline-optimum comparison (0: none)")
    ap.add_argument("--pinned-scale", type=int, default=2, help="the packer's pinned size limits (nodes) x this on half nodes "
                    "(2: the same GPUs as on whole nodes; 1: the limits as they are)")
    ap.add_argument("--out", default=None, help="JSON of the run")
    ap.add_argument("--md", default=None, help="Markdown section of the run, appended to this file")
    args = ap.parse_args(argv)
    t0 = time.perf_counter()
    whole = whole_rows([] if args.skip_whole else args.admissions)
    half = half_rows(args.admissions, args.verl_half, args.all_halves, args.pinned_scale)
    instant = instant_rows(args.instant, all_halves=args.all_halves, pinned_scale=args.pinned_scale) if args.instant else []
    import json

    out = {"whole": {" / ".join(k): v for k, v in whole.items()}, "half": {" / ".join(k): v for k, v in half["rows"].items()},
           "checks": half["checks"], "instant": instant, "wall_s": time.perf_counter() - t0, "args": vars(args),
           "machine": " ".join(platform.uname()), "cpus": os.cpu_count(), "load": os.getloadavg(),
           "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())}
    text = json.dumps(out, indent=1, default=str)
    if args.out:
        Path(args.out).write_text(text)
    if args.md:
        cmd = "python -m benchmarks.placement.slice_virtual_nodes " + " ".join(argv if argv is not None else sys.argv[1:])
        with open(args.md, "a") as f:
            f.write("\n".join(render(out, cmd.strip())) + "\n")
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
