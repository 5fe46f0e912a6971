"""The multi-job half of ``planner simulate`` (phase-level model): trace run, summary, Gantt."""

from __future__ import annotations

import json
from pathlib import Path


def run_trace(args, sc, out, console, write_files) -> int:
    from planner.instances import simulate as inst
    from simulator.trace import SoloPlacer, TraceSim

    cons = args.consolidate_at
    jobs = inst.trace_jobs(sc, args.seed, consolidate_at=cons if cons is not None else 0.8)
    cap = inst.capacity(sc)
    if args.policy == "groups":
        placer = inst.placement_placer(sc, jobs)
    else:
        placer = SoloPlacer({j.name: j for j in jobs}, cap, colocated=args.policy == "colocated-jobs")
    sim = TraceSim(jobs, placer, inst.prices(sc), inst.gpus_per_node(sc), consolidate=cons is not None, seed=args.seed,
                   horizon_s=args.horizon_s, policy=args.policy, record_phases=out is not None,
                   node_dram_gb=inst.node_dram_gb(sc))
    from planner.statusline import status

    with status(f"simulate: {len(jobs)} job(s), policy {args.policy}"):
        res = sim.run()
    summ = res.summary()
    per_job = [{"job": r.name, "group": r.group, "arrival_s": r.arrival_s, "admitted_s": r.admitted_s, "done_s": r.done_s,
                "iterations": len(r.iteration_s), "mean_iteration_s": (sum(r.iteration_s) / len(r.iteration_s)) if r.iteration_s else None,
                "slo_s": r.slo_s, "slo_attainment": r.slo_attainment} for r in res.jobs.values()]
    doc = {"scenario": sc.name, "command": "planner simulate " + " ".join(_argv(args)), "summary": summ, "jobs": per_job,
           "groups": {g: {"created_s": a, "ended_s": b, "pools": c.label()} for g, (a, b, c) in res.group_spans.items()},
           "provisioned": [{"t_s": t, "gpu_type": typ, "gpus": lv} for t, typ, lv in res.provisioned]}
    if args.json:
        print(json.dumps(doc, indent=2, default=_num))
    else:
        _table(summ, sc.name, console)
    if out is not None:
        from simulator.plots import gantt_png

        def gantt(p):
            lanes = []
            for gid, run in sorted(res.groups.items()):
                for side in ("rollout", "train"):
                    bars = []
                    for ph in run.phases:
                        on_rollout = str(ph.nodes[0]).rsplit("-", 1)[-1].startswith("r") if ph.nodes else False
                        if on_rollout != (side == "rollout"):
                            continue
                        kind = ph.kind if ph.kind in ("switch", "tail") else ("rollout" if on_rollout else "train")
                        bars.append((ph.start_s, ph.end_s, ph.member, kind))
                    lanes.append((f"{gid} {side}", bars))
            horizon = min(res.end_s, 6 * 3600.0)
            return gantt_png(lanes[:60], p, f"{sc.name}: {args.policy} (first {horizon / 3600:.1f} h, up to 30 groups)", t_max=horizon)

        write_files(out, {"summary.json": lambda p: Path(p).write_text(json.dumps(doc, indent=2, default=_num) + "\n"),
                          "gantt.png": gantt})
        if not args.json:
            console.print(f"wrote {out / 'summary.json'}, {out / 'gantt.png'}")
    return 0


def _num(x):
    return float(x)


def _argv(args):
    from planner.commands._args import command_argv  # not from simulate.py: that imports this module

    return command_argv(args, "simulate")


def _table(s: dict, name: str, console) -> None:
    from rich.table import Table

    t = Table(title=f"{name}: {s['policy']}", title_justify="left")
    t.add_column("quantity")
    t.add_column("value", justify="right")
    t.add_row("jobs (done / total)", f"{s['jobs_done']} / {s['jobs']}")
    t.add_row("simulated span", f"{s['end_s'] / 3600:.1f} h")
    t.add_row("groups (pools provisioned)", f"{s['groups']}")
    t.add_row("cost ($)", f"{s['cost']:,.0f}")
    for typ, h in s["gpu_hours"].items():
        t.add_row(f"{typ} GPU-hours", f"{h:,.0f}")
    t.add_row("tokens per $", f"{s['tokens_per_dollar']:,.0f}")
    t.add_row("SLO attainment (mean over jobs)", f"{100 * s['slo_attainment_mean']:.1f}%")
    t.add_row("jobs meeting their SLO every iteration", f"{100 * s['jobs_meeting_slo']:.1f}%")
    t.add_row("wait for admission (mean / max)", f"{s['mean_wait_s']:.0f} s / {s['max_wait_s']:.0f} s")
    console.print(t)
