"""The multi-job half of ``planner simulate`` (phase-level model): trace run, summary, Gantt."""

from __future__ import annotations

import json
from pathlib import Path


def run_trace(args, sc, out, console, write_files) -> int:
    from planner.instances import simulate as inst
    from planner.sim.planrun import finite
    from simulator.trace import SoloPlacer, TraceSim

    cons = args.consolidate_at
    jobs = inst.trace_jobs(sc, args.seed, consolidate_at=cons if cons is not None else 0.8)
    cap = inst.capacity(sc)
    if args.policy == "groups":
        placer = inst.placement_placer(sc, jobs)
    else:
        placer = SoloPlacer({j.name: j for j in jobs}, cap, colocated=args.policy == "colocated-jobs")
    never = {u.job: u for u in _never_placeable(placer, args.policy)}
    if never and len(never) == len(jobs):
        from planner.commands._placement import unplaced_error

        raise unplaced_error([never[j.name] for j in jobs],
                             f"none of the {len(jobs)} job(s) of '{sc.name}' can ever be admitted under --policy {args.policy}; "
                             "nothing simulated, nothing written")
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
    # every job that never started, with the reason: no admission can place it (the placer's explanation), still
    # waiting when the trace stopped (its horizon), or arriving after that
    not_admitted = []
    for r in res.jobs.values():
        if r.admitted_s is not None:
            continue
        u = never.get(r.name)
        if u is not None:
            not_admitted.append({"job": r.name, "reason": u.reason, "message": u.message, "fix": u.fix})
        elif r.arrival_s > res.end_s:
            not_admitted.append({"job": r.name, "reason": "not-arrived",
                                 "message": f"arrives at {r.arrival_s:,.0f} s, after the trace stopped at {res.end_s:,.0f} s",
                                 "fix": "a longer --horizon-s"})
        else:
            not_admitted.append({"job": r.name, "reason": "waiting",
                                 "message": f"still waiting for admission when the trace stopped at {res.end_s:,.0f} s",
                                 "fix": "a longer --horizon-s, or a larger cluster"})
    doc = {"scenario": sc.name, "command": "planner simulate " + " ".join(_argv(args)), "summary": summ, "jobs": per_job,
           "not_admitted": not_admitted,
           "groups": {g: {"created_s": a, "ended_s": b, "pools": c.label()} for g, (a, b, c) in res.group_spans.items()},
           "provisioned": [{"t_s": t, "gpu_type": typ, "gpus": lv} for t, typ, lv in res.provisioned]}
    doc = finite(doc)  # strict JSON: an unknown figure (no job ran, no cost) is null, never NaN
    if args.json:
        print(json.dumps(doc, indent=2, allow_nan=False, default=float))
    else:
        _table(summ, sc.name, console)
        _print_not_admitted(not_admitted, res.end_s, console)
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

        write_files(out, {"summary.json": lambda p: Path(p).write_text(json.dumps(doc, indent=2, allow_nan=False, default=float) + "\n"),
                          "gantt.png": gantt})
        if not args.json:
            console.print(f"wrote {out / 'summary.json'}, {out / 'gantt.png'}")
    return 0


def _never_placeable(placer, policy: str) -> list:
    """The jobs ``placer`` can never admit, as ``Unplaced`` (job, reason, message, fix): the placement
    planner's own explanation (``groups``), or the nodes a job's own pools need beyond the fleet
    (``solo-d``, ``colocated-jobs``)."""
    from formulation.placement.plan import Unplaced

    if hasattr(placer, "never_placeable"):
        return list(placer.never_placeable())
    out = []
    for name in placer.jobs:
        short = placer.shortage(name)
        if short:
            c = placer._config(name)
            what = ", ".join(f"{n} node(s) of {t}" for t, n in sorted(short.items()))
            pools = (f"one colocated pool of {c.train_nodes} {c.train_type} node(s) (rollout.nodes + trainer.nodes)" if placer.colocated
                     else f"{c.rollout_nodes} {c.rollout_type} rollout + {c.train_nodes} {c.train_type} training node(s)")
            out.append(Unplaced(job=name, reason="capacity", message=f"under {policy} it needs {pools}; the fleet is short by {what}",
                                fix=f"add {what} to the cluster, or give the job fewer nodes (rollout.nodes, trainer.nodes)"))
    return out


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
    t.add_row("tokens per $", _fmt(s["tokens_per_dollar"], "{:,.0f}"))
    ran = f"{s['jobs_ran']} of {s['jobs']}"
    t.add_row(f"SLO attainment (mean over the jobs that ran: {ran})", _fmt(s["slo_attainment_mean"], "{:.1%}", "n/a (none ran)"))
    t.add_row(f"jobs meeting their SLO every iteration (of {ran})", _fmt(s["jobs_meeting_slo"], "{:.1%}", "n/a (none ran)"))
    if s["jobs_not_admitted"]:
        t.add_row("jobs not admitted", f"{s['jobs_not_admitted']} (below)")
    t.add_row("wait for admission (mean / max)", f"{_fmt(s['mean_wait_s'], '{:.0f} s')} / {_fmt(s['max_wait_s'], '{:.0f} s')}")
    console.print(t)


def _print_not_admitted(rows: list, end_s: float, console) -> None:
    """Each job no admission can place, with its reason and fix; the jobs still waiting or arriving after
    the trace stopped, one line each kind."""
    for u in rows:
        if u["reason"] not in ("waiting", "not-arrived"):
            console.print(f"job {u['job']}: never admitted ({u['reason']}): {u['message']}. Fix: {u['fix']}", soft_wrap=True)
    for reason, what in (("waiting", f"still waiting for admission when the trace stopped at {end_s:,.0f} s (a longer --horizon-s)"),
                         ("not-arrived", f"arriving after the trace stopped at {end_s:,.0f} s, not simulated (a longer --horizon-s)")):
        names = [u["job"] for u in rows if u["reason"] == reason]
        if names:
            console.print(f"{len(names)} job(s) {what}: {', '.join(names[:8])}{' ...' if len(names) > 8 else ''}", soft_wrap=True)


def _fmt(x, spec: str, unknown: str = "n/a") -> str:
    """``x`` formatted, or ``unknown`` where it is not a finite number (nothing to average)."""
    import math

    return spec.format(x) if x is not None and math.isfinite(x) else unknown
