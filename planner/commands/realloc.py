"""planner realloc SNAPSHOT: the in-iteration reallocation decision for one job's telemetry."""

from __future__ import annotations

PLANNER_HOLD_S = 5.0  # --decision planner's T: formulation.realloc.donors.DonorConfig's default (the daemon's)

NAME = "realloc"
HELP = "decide an in-iteration GPU reallocation (DynaRL) from a telemetry snapshot and write it as a plan"
DESCRIPTION = """Read a telemetry snapshot file (one snapshot, a list of them in time order, or JSON
lines), feed every snapshot to the donor detector, and decide at the last one: donors with their
evidence, candidate allocations per component with predicted throughput and migration cost, the
chosen allocation (committed only if it beats the current one by --margin), and the migration
steps (Workload, P2P or Reboot) with predicted duration and bytes. --scenario gives model sizes,
the GPU catalogue and node groups, so curves come from the estimators; without it they come from
the snapshot's own throughput. A donor needs more than --theta of its engines below --u-low KV
utilisation for --hold-s seconds, so a single snapshot never shows one: pass a stream, --hold-s 0,
or --force to plan without a donor."""


def add_arguments(p) -> None:
    from planner.commands import _args
    from simulator.defaults import WINDOW_S

    p.add_argument("snapshot", type=_args.path, metavar="SNAPSHOT", help="YAML/JSON snapshot, a list of snapshots, or .jsonl")
    p.add_argument("--scenario", type=_args.path, help="scenario YAML for model sizes, GPU types and node groups")
    p.add_argument("--backend", choices=["bnb", "highs", "cpsat", "dp", "pyomo"], default="bnb",
                   help="bnb (exact branch and bound, default), highs (highspy), cpsat, dp (exact, single pool only), "
                        "pyomo (Pyomo + HiGHS reference)")
    p.add_argument("--out", type=_args.path, help="write the plan document here (.json: JSON, else YAML)")
    p.add_argument("--margin", type=_args.number(hi=1e3), default=0.05,
        help="commit only when the objective beats the current throughput by this fraction (default 0.05)")
    p.add_argument("--candidates", type=_args.number(hi=1024, kind=int), default=8,
        help="candidates per component, the current allocation included (default 8)")
    p.add_argument("--theta", type=_args.number(), default=0.5, help="donor: fraction of engines that must stay low (default 0.5)")
    p.add_argument("--u-low", type=_args.number(), default=0.2, help="donor: KV utilisation threshold (default 0.2)")
    p.add_argument("--u-low-percentile", type=_args.number(), default=None, help="donor: U_low as this percentile of the component's history")
    p.add_argument("--hold-s", type=_args.number(hi=_args.SECONDS), default=None,
                   help=f"donor: seconds the engines must stay low (T; default {WINDOW_S:g} with --decision completion, as "
                        f"simulate --window-s; {PLANNER_HOLD_S:g} with --decision planner, the donor detector's)")
    p.add_argument("--force", action="store_true", help="plan even when no donor is detected")
    p.add_argument("--horizon-s", type=_args.number(hi=_args.SECONDS), default=None, help="seconds left in the iteration (default: from progress)")
    p.add_argument("--time-limit-s", type=_args.number(hi=_args.TIME_LIMIT_S), default=5.0, help="solver time limit (default 5)")
    p.add_argument("--json", action="store_true", help="print the plan document as JSON instead of tables")
    p.add_argument("--decision", choices=["planner", "completion"], default="planner",
                   help="planner (default: the min-over-stages throughput planner, a ReallocPlan with steps) or completion "
                        "(the decision `planner simulate --policy dynamic` makes: moves judged on the iteration's predicted "
                        "completion time; needs --scenario and --context; prints or writes the decision record)")
    p.add_argument("--context", type=_args.path, help="with --decision completion: the job's reallocation context at the last snapshot (JSON: "
                                     "components' GPUs, rates, queued work and the rollout's unfinished requests; "
                                     "planner.instances.completion_io)")
    p.add_argument("--verbose", "-v", action="store_true",
                   help="every donor's evidence and every stage's candidates (default: the donors, the chosen candidates, the steps)")


def _options(args):
    from formulation.common import SolveOptions
    from formulation.realloc.decide import ReallocOptions
    from formulation.realloc.donors import DonorConfig
    from planner.errors import Problem, UserError

    if args.hold_s is None:
        from simulator.defaults import WINDOW_S

        args.hold_s = WINDOW_S if getattr(args, "decision", "planner") == "completion" else PLANNER_HOLD_S
    checks = [
        ("--margin", args.margin >= 0, "use a fraction >= 0, e.g. 0.05"),
        ("--candidates", args.candidates >= 1, "use at least 1 (the current allocation)"),
        ("--theta", 0 <= args.theta < 1, "use a fraction in [0, 1)"),
        ("--u-low", 0 < args.u_low < 1, "use a KV utilisation strictly between 0 and 1 (as simulate --u-low), e.g. 0.2"),
        ("--hold-s", args.hold_s >= 0, "use seconds >= 0"),
        ("--time-limit-s", args.time_limit_s > 0, "use seconds > 0"),
        ("--horizon-s", args.horizon_s is None or args.horizon_s > 0, "use seconds > 0"),
        ("--u-low-percentile", args.u_low_percentile is None or 0 < args.u_low_percentile < 100, "use a percentile in (0, 100)"),
    ]
    bad = [Problem(flag, "value out of range", fix) for flag, ok, fix in checks if not ok]
    if bad:
        raise UserError(bad)
    donors = DonorConfig(theta=args.theta, u_low=args.u_low, hold_s=args.hold_s, u_low_percentile=args.u_low_percentile)
    return donors, ReallocOptions(backend=args.backend, margin=args.margin, max_candidates=args.candidates, require_donor=not args.force,
                                  solve=SolveOptions(time_limit_s=args.time_limit_s, mip_gap=1e-6))


def run(args) -> int:
    from formulation.realloc.decide import decide
    from formulation.realloc.donors import DonorDetector
    from planner import plandoc
    from planner.errors import Problem, UserError
    from planner.instances.realloc import build_context, check_against_scenario, check_time_order, load_snapshots

    from planner.commands._args import check_outputs
    from planner.dockind import SCENARIO, SNAPSHOT, expect

    donor_cfg, opts = _options(args)
    check_outputs(args, "out", inputs=[("SNAPSHOT", args.snapshot), ("--scenario", args.scenario),
                                    ("--context", getattr(args, "context", None))])
    if getattr(args, "decision", "planner") == "completion":
        return _run_completion(args)
    if getattr(args, "context", None):
        raise UserError(Problem("--context", "given without --decision completion", "add --decision completion, or drop --context"))
    expect(args.snapshot, [SNAPSHOT], "SNAPSHOT", "realloc")
    snaps = load_snapshots(args.snapshot)
    scenario = None
    if args.scenario:
        from planner.schema import load_scenario

        found = expect(args.scenario, [SCENARIO], "--scenario", "realloc")
        scenario = load_scenario(args.scenario, parsed=found.doc)
    check_time_order(snaps, str(args.snapshot))
    jobs = sorted({s.job for s in snaps})
    if len(jobs) > 1:
        raise UserError(Problem("SNAPSHOT", f"snapshots of several jobs ({', '.join(jobs)})", "pass one job's snapshots per call"))
    det = DonorDetector(donor_cfg)
    for s in snaps[:-1]:
        det.observe(s)
    last = snaps[-1]
    if scenario is not None and any(j.name == last.job for j in scenario.jobs):  # (another job's scenario: build_context says so)
        check_against_scenario(snaps, scenario, source=str(args.snapshot))  # the scenario's nodes, not the snapshot's word for them
    ctx = build_context(last, scenario, horizon_s=args.horizon_s)
    if opts.backend == "dp" and len(ctx.pools) != 1:
        raise UserError(Problem("--backend", f"the dp backend solves the single-pool case; this snapshot has {len(ctx.pools)} nodes",
                                "use --backend bnb, highs or cpsat (dp is the oracle for one pool)"))
    dec = decide(last, ctx, opts, det)
    doc = plandoc.PlanDocument(
        kind="ReallocPlan",
        scenario=scenario.name if scenario is not None else "",
        scenario_digest=plandoc.scenario_digest(scenario) if scenario is not None else "",
        solver=plandoc.SolverRecord(**dec.record.as_dict()),
        body=dec.body(),
    )
    if args.out:
        plandoc.write(doc, args.out)
    if args.json:
        print(plandoc.dumps(doc, "json"), end="")
        return 0
    _print(dec, doc, args)
    return 0


def _run_completion(args) -> int:
    """``--decision completion``: the simulator's completion decision on the snapshots and the context."""
    import json

    from planner import safeload
    from planner.dockind import SCENARIO, SNAPSHOT, expect
    from planner.errors import Problem, UserError
    from planner.instances.completion_io import (ContextError, check_against_setup, check_against_snapshot, check_record,
                                                 context_from_data, decide_stream, make_decision)
    from planner.instances.realloc import check_against_scenario, check_time_order, load_snapshots
    from planner.instances.simulate import check_job_fits_cluster, cluster_view, job_setup
    from planner.schema import load_scenario

    if not args.scenario:
        raise UserError(Problem("--scenario", "missing", "--decision completion needs the job's scenario (its model and lengths)"))
    if not args.context:
        raise UserError(Problem("--context", "missing", "--decision completion needs the job's context at the last snapshot"))
    expect(args.snapshot, [SNAPSHOT], "SNAPSHOT", "realloc")
    snaps = load_snapshots(args.snapshot)
    check_time_order(snaps, str(args.snapshot))
    found = expect(args.scenario, [SCENARIO], "--scenario", "realloc")
    sc = load_scenario(args.scenario, parsed=found.doc)
    names = sorted({s.job for s in snaps})
    if len(names) > 1:
        raise UserError(Problem("SNAPSHOT", f"snapshots of several jobs ({', '.join(names)})", "pass one job's snapshots per call"))
    idx = next((i for i, j in enumerate(sc.jobs) if j.name == names[0]), None)
    if idx is None:
        raise UserError(Problem("SNAPSHOT", f"job {names[0]!r} is not in the scenario ({', '.join(j.name for j in sc.jobs)})",
                                "pass the scenario the job runs in"))
    text = safeload.read_text(args.context, what="context file", where="--context")
    try:
        data = json.loads(text)  # NaN / Infinity read as floats: context_from_data refuses them, naming the field
    except (json.JSONDecodeError, ValueError, RecursionError) as exc:  # ValueError: an integer of over 4,300 digits
        raise UserError(Problem("--context", f"not JSON: {str(exc)[:200]}", "write the context as JSON")) from None
    view = cluster_view(sc)
    setup = job_setup(sc, idx, sc.jobs[idx], view)
    check_job_fits_cluster(setup, idx, sc.jobs[idx], view)  # (the decision plans on the simulator's pools)
    # the snapshots' nodes must be the scenario's (or the simulator's names for this job's nodes, as its snapshots have
    # them); their fabrics (cluster) are not compared: the completion decision reads none, and the simulator writes 'default'
    check_against_scenario(snaps, sc, source=str(args.snapshot), setup=setup, clusters=False)
    try:
        ctx = context_from_data(data)
        check_against_setup(ctx, setup)
    except ContextError as exc:
        raise UserError(Problem(f"--context {exc.field}", exc.message, exc.fix)) from None
    if ctx.iteration != snaps[-1].iteration:
        raise UserError(Problem("--context iteration", f"{ctx.iteration}, the last snapshot's is {snaps[-1].iteration}",
                                "give the context taken at the last snapshot"))
    try:
        check_against_snapshot(ctx, snaps[-1])
    except ContextError as exc:
        raise UserError(Problem(f"--context {exc.field}", exc.message, exc.fix)) from None
    dec = make_decision(setup, sc, u_low=args.u_low, window_s=args.hold_s, theta=args.theta, margin=args.margin)
    out, rec = decide_stream(dec, snaps, ctx)
    try:
        check_record(rec)  # never print or write NaN / inf: a result that is not a finite time is refused
    except ContextError as exc:
        raise UserError(Problem("--context", exc.message, exc.fix)) from None
    doc = {"kind": "CompletionDecision", "job": names[0], "iteration": ctx.iteration, "time_s": snaps[-1].time_s,
           "fired": rec is not None, "committed": out is not None,
           "target": dict(out.target) if out is not None else None,
           "record": rec}
    if args.out:
        from planner.safewrite import write_atomic

        write_atomic(args.out, json.dumps(doc, indent=1, sort_keys=True, allow_nan=False) + "\n", where="--out")
    if args.json:
        print(json.dumps(doc, indent=1, sort_keys=True, allow_nan=False))
        return 0
    if rec is None:
        print(f"{names[0]} at t={snaps[-1].time_s:g} s (iteration {ctx.iteration}): the tail trigger has not fired "
              f"(θ={args.theta:g}, U_low={args.u_low:g}, T={args.hold_s:g} s, half the requests done); no decision")
    else:
        cur, tgt = rec["current"], rec["target"]
        print(f"{names[0]} at t={snaps[-1].time_s:g} s (iteration {ctx.iteration}): rollout+reference+trainer "
              f"{cur[0]}+{cur[1]}+{cur[2]} -> {tgt[0]}+{tgt[1]}+{tgt[2]}")
        print(f"predicted completion: {rec['completion_keep_s']:.1f} s if kept, {rec['completion_s']:.1f} s chosen; "
              f"min-over-stages proxy {rec['proxy_keep']:.4g} -> {rec['proxy']:.4g} per s")
        print(f"{'COMMITTED' if rec['committed'] else 'NOT COMMITTED'}: {rec['reason']}")
    if args.out:
        print(f"decision written to {args.out}")
    return 0


def _gb(b: float) -> str:
    return f"{b / 1e9:,.1f}"


def _thr(v: float, unit: str) -> str:
    """A throughput for people: seconds to finish when normalised by remaining work, else per second."""
    if unit == "1/s":
        return f"{1.0 / v:,.1f} s" if v > 0 else "never"
    return f"{v:,.1f}/s"


def _print(dec, doc, args) -> None:
    from rich.console import Console
    from rich.table import Table

    con = Console()
    body = doc.body
    unit = body["throughput_unit"]
    con.print(f"[bold]{dec.job}[/bold] at t={dec.time_s:g} s (iteration {dec.iteration}), backend {dec.record.backend}, "
              f"status {dec.record.status.value}, {dec.timings_ms.get('total', 0):.1f} ms")
    if not any(st["pipeline"] for st in body["stages"]):  # every component has finished: no bottleneck, no candidates
        con.print(f"[bold]NOT COMMITTED[/bold]: {body['reason']}")
        if args.out:
            con.print(f"plan written to {args.out}")
        return
    verbose = getattr(args, "verbose", False)
    shown = [d for d in body["donors"] if verbose or d["donor"]]
    t = Table(title="donors" + ("" if verbose else f" ({len(shown)} of {len(body['donors'])} components; --verbose: all, with evidence)"),
              title_justify="left")
    for col in ("component", "donor", "engines low / held ≥ T / all", "U_low", "evidence"):
        t.add_column(col, overflow="fold")
    for d in shown:
        t.add_row(d["component"], "yes" if d["donor"] else "no", f"{d['engines_low']} / {d['engines_low_held']} / {d['engines']}",
                  f"{d['u_low']:.3f} ({d['u_low_source']})", d["cause"])
    con.print(t)
    if not verbose:
        t = Table(title=f"chosen candidate per stage (--verbose: all {sum(len(s['candidates']) for s in body['stages'])} candidates)",
                  title_justify="left")
        for col in ("stage", "candidate", "GPUs by type", "finishes in" if unit == "1/s" else "predicted", "migration"):
            t.add_column(col, overflow="fold")
        for st in body["stages"]:
            for c in st["candidates"]:
                if c["chosen"]:
                    t.add_row(st["name"], c["name"], ", ".join(f"{k}: {v}" for k, v in c["gpus_by_type"].items()),
                              _thr(c["predicted_throughput"], unit) if st["pipeline"] else "done", c["migration_kind"])
        con.print(t)
    for st in body["stages"] if verbose else []:
        t = Table(title=f"{st['name']} ({st['kind']}, {'dynamic' if st['dynamic'] else 'static'}"
                        f"{', donor' if st['donor'] else ''}{'' if st['interruptible'] else ', not interruptible'}"
                        f"{'' if st['pipeline'] else ', done'}; curves: {st['curve_source'] or '-'})", title_justify="left")
        for col in ("", "candidate", "GPUs by type", "finishes in" if unit == "1/s" else "predicted", "migration", "s", "GB",
                    "cost (of the objective)"):
            t.add_column(col, overflow="fold")
        for c in st["candidates"]:
            t.add_row("→" if c["chosen"] else "", c["name"], ", ".join(f"{k}: {v}" for k, v in c["gpus_by_type"].items()),
                      _thr(c["predicted_throughput"], unit) if st["pipeline"] else "done", c["migration_kind"], f"{c['migration_s']:.1f}",
                      _gb(c["migration_bytes"]), f"{c['migration_cost'] / max(1e-300, body['current_throughput']):.2%}")
        con.print(t)
    what = "slowest component finishes in" if unit == "1/s" else "pipeline throughput"
    con.print(f"{what}: now {_thr(body['current_throughput'], unit)}; chosen {_thr(body['predicted_throughput'], unit)}, "
              f"with migration cost {_thr(body['objective'], unit)} ({body['improvement']:.3f}x)")
    con.print(f"[bold]{'COMMITTED' if body['committed'] else 'NOT COMMITTED'}[/bold]: {body['reason']}")
    if body["allocation"]:
        t = Table(title="chosen allocation" + ("" if verbose else " (--verbose: GPUs per node)"), title_justify="left")
        for col in ("component", "migration", "from", "to", "finishes in" if unit == "1/s" else "predicted"):
            t.add_column(col, overflow="fold")
        where = _workers if verbose else _workers_by_type
        done = {st["name"] for st in body["stages"] if not st["pipeline"]}  # finished: no time to finish ("never" was false)
        for a in body["allocation"]:
            t.add_row(a["component"], a["migration_kind"], where(a["from_workers"]), where(a["to_workers"]),
                      "done" if a["component"] in done else
                      f"{_thr(a['predicted_throughput_before'], unit)} → {_thr(a['predicted_throughput_after'], unit)}")
        con.print(t)
    if body["steps"] and not verbose:
        kinds: dict[str, int] = {}
        for s in body["steps"]:
            kinds[s["kind"]] = kinds.get(s["kind"], 0) + 1
        con.print(f"migration steps: {len(body['steps'])} (" + ", ".join(f"{n} {k}" for k, n in sorted(kinds.items()))
                  + f"), {sum(s['duration_s'] for s in body['steps']):.1f} s and {_gb(sum(s['bytes_moved'] for s in body['steps']))} GB "
                  "in all; --verbose lists each step with its cause")
    if body["steps"] and verbose:
        t = Table(title="migration steps", title_justify="left")
        for col in ("#", "component", "kind", "node (type)", "GPUs", "s", "GB", "cause"):
            t.add_column(col, overflow="fold")
        for s in body["steps"]:
            t.add_row(str(s["order"]), s["component"], s["kind"], f"{s['node']} ({s['gpu_type']})", f"{s['gpus_from']} → {s['gpus_to']}",
                      f"{s['duration_s']:.1f}", _gb(s["bytes_moved"]), s["cause"])
        con.print(t)
    for n in body["notes"]:
        con.print(f"note: {n}")
    if args.out:
        con.print(f"plan written to {args.out}")


def _workers_by_type(ws: list) -> str:
    """GPUs per type and on how many nodes (the terse allocation; --verbose lists each node)."""
    gpus: dict[str, int] = {}
    nodes: dict[str, set] = {}
    for w in ws:
        gpus[w["gpu_type"]] = gpus.get(w["gpu_type"], 0) + w["gpus"]
        nodes.setdefault(w["gpu_type"], set()).add(w["node"])
    return ", ".join(f"{t}: {g} on {len(nodes[t])} node{'s' if len(nodes[t]) != 1 else ''}" for t, g in sorted(gpus.items())) or "-"


def _workers(ws: list) -> str:
    by: dict[tuple, int] = {}
    for w in ws:
        key = (w["node"], w["gpu_type"])
        by[key] = by.get(key, 0) + w["gpus"]
    return ", ".join(f"{n} ({t}): {g}" for (n, t), g in sorted(by.items()))
