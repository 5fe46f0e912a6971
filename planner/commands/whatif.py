"""planner whatif SCENARIO: the cheapest GPU fleet for a forecast job mix, and how it moves."""

from __future__ import annotations

NAME = "whatif"
HELP = "capacity planning: the cheapest fleet (nodes per GPU type) that serves a forecast within its SLOs, with sweeps"
DESCRIPTION = """Decide how many nodes of each GPU type to buy or rent so that a forecast job mix meets
every SLO at the lowest $/h (placement in co-execution groups with the fleet as a decision). The
scenario's node groups are the nodes owned today (count: they are paid for used or idle and are
always in the fleet), gpu_types.<T>.max_nodes the most that can be bought on top (no max_nodes:
no limit), gpu_types.<T>.price_per_gpu_hour the prices, budget_per_hour an optional cap on the
fleet's $/h. The answer: the fleet, its cost with a certified lower bound, how busy each type's
GPUs are, the constraints that bind, and per type the fewest nodes that still serve every job with
which jobs miss their SLOs (and by how much) with one node fewer.

--styles adds the deployment styles side by side: one job per disaggregated pool pair (Solo-D),
everything colocated on the best single GPU type, and co-execution groups.

--sweep KEY=START:STOP:STEPS (repeatable: a grid) solves the question at each point, each point
warm-started from its neighbour, in parallel (--workers local processes, or the Ray cluster at
--ray-address; 'local' starts one here), and writes a table, CSV and plots (cost against the swept
value, the fleet mix as stacked bars). Keys: price.<T>, max_nodes.<T>, budget, slo (factor on every
SLO), jobs (job-mix growth factor), response (response-length growth factor).

With no fleet that serves the forecast (availability, budget, SLOs below what any GPU can do) the
command explains why and exits 2 without writing anything."""


def add_arguments(p) -> None:
    from planner.commands import _args

    p.add_argument("scenario", type=_args.path, metavar="SCENARIO", help="scenario YAML (node groups = owned nodes, gpu_types.<T>.max_nodes, prices)")
    p.add_argument("--sweep", action="append", default=[], metavar="KEY=START:STOP:STEPS",
                   help="sweep a key over STEPS values from START to STOP (repeat for a grid)")
    p.add_argument("--styles", action="store_true", help="also solve Solo-D and colocated deployments for comparison")
    par = p.add_mutually_exclusive_group()
    par.add_argument("--workers", type=_args.number(1, _args.MAX_WORKERS, kind=int), default=None, metavar="N",
        help="local worker processes for a sweep (default: CPU count)")
    par.add_argument("--ray-address", metavar="ADDR", help="run the sweep's points as tasks on this Ray cluster ('local': start one here)")
    p.add_argument("--out", "-o", type=_args.path, metavar="DIR", help="write the plan, table, CSV and plots into this folder")
    p.add_argument("--time-limit", type=_args.number(hi=_args.TIME_LIMIT_S), default=None, metavar="S",
                   help="wall-clock limit per solve (default: the scenario's solver.time_limit_s)")
    p.add_argument("--mip-gap", type=_args.number(hi=1.0), default=None, help="relative gap at which a solve may stop (default: the scenario's)")
    p.add_argument("--mode", choices=["conservative", "sampled", "p90", "p99", "max"], default=None, help="phase-time estimate (default: the scenario's)")
    p.add_argument("--json", action="store_true",
                   help="print the answer (the CapacityPlan document; with --sweep the table's rows) as JSON on stdout instead of the text")
    p.add_argument("--no-minimums", action="store_true", help="skip the minimum count per type and the one-node-fewer analysis")


#: the files --out gets: a single question's answer (and styles.csv with --styles), a sweep's (and its points/ folder)
ANSWER_FILES = ("capacity-plan.yaml", "answer.md", "fleet.png")
SWEEP_FILES = ("sweep.csv", "sweep.md", "cost.png", "fleet.png")


def _check_args(args) -> None:
    from pathlib import Path

    from planner.commands._args import check_solver_args
    from planner.errors import Problem, UserError

    check_solver_args(args)
    if args.workers is not None and args.workers < 1:
        raise UserError(Problem("--workers", f"must be at least 1, got {args.workers}", "pass e.g. --workers 2"))
    if not args.sweep:  # (they run a sweep's points: without --sweep they were ignored in silence, exit 0)
        for opt, given in (("--workers", args.workers is not None), ("--ray-address", bool(args.ray_address))):
            if given:
                raise UserError(Problem(opt, "does nothing without --sweep (it runs the sweep's points; one question is one solve here)",
                                        f"drop {opt}, or add --sweep KEY=START:STOP:STEPS"))
    if args.out:
        out = Path(args.out)
        if out.is_symlink() and not out.exists():  # (its mkdir failed with FileExistsError after the whole search)
            raise UserError(Problem("--out", f"{out} is a dangling symbolic link", "pass a folder (remove the link first)"))
        if out.exists() and not out.is_dir():
            raise UserError(Problem("--out", f"{out} exists and is not a folder", "pass a folder (it is created if missing)"))
        if not out.exists() and not out.resolve().parent.is_dir():
            raise UserError(Problem("--out", f"the folder above {out} does not exist", "create it or pick another path"))
        from planner.safewrite import probe_folder

        probe_folder(out, "--out")  # (/proc/x passed the checks above; its mkdir failed after the whole search)
        from planner.commands._args import same_file

        # the files the answer is written to (a single question's or a sweep's): one of them the scenario itself would
        # be replaced by the answer (`whatif DIR/answer.md --out DIR`; an outside audit)
        for name in (SWEEP_FILES if args.sweep else ANSWER_FILES + ("styles.csv",)):
            if (out / name).exists() and same_file(str(out / name), args.scenario):
                raise UserError(Problem("--out", f"{out / name} is the scenario given ({args.scenario}): the answer's "
                                                 f"{name} would replace it", "pass another --out folder, or move the scenario"))


def run(args) -> int:
    import sys

    from planner.schema import load_scenario
    from planner.whatif import sweep as sw

    from planner.dockind import SCENARIO, expect

    _check_args(args)
    found = expect(args.scenario, [SCENARIO], "SCENARIO", "whatif")
    sc = load_scenario(args.scenario, parsed=found.doc, buys_nodes=True)  # no job is short of nodes: whatif buys them
    from planner.instances.capacity import fleet_limits

    types = sorted(fleet_limits(sc))
    sweeps = sw.parse_all(args.sweep, types)
    sw.check_limits(sc, sweeps)
    styles = ("co-execution", "solo-disaggregated", "colocated") if args.styles else ("co-execution",)
    mode = args.mode or sc.solver.phase_time_estimate
    time_limit = args.time_limit or sc.solver.time_limit_s
    gap = args.mip_gap if args.mip_gap is not None else sc.solver.mip_gap
    command = "planner whatif " + " ".join(_quote(a) for a in sys.argv[sys.argv.index("whatif") + 1:]) if "whatif" in sys.argv else "planner whatif"
    if not sweeps:
        return _single(args, sc, styles, mode, time_limit, gap, command)
    return _sweep(args, sc, sweeps, styles, mode, time_limit, gap, types, command)


def _quote(a: str) -> str:
    import shlex

    return shlex.quote(a)


# What one type's minimum count costs, in units of the first solve's wall time: measured on
# scenarios/procurement.yaml (2 types used; first solve 0.31 s, the minimums 144 s in 27 solves on a
# loaded 2-core machine): about 230. The searches prove counts infeasible, which is much harder than
# the first solve, so this is a rough guide (the status line says so), not a promise.
MINIMUM_COST_PER_TYPE = 230.0


def _single(args, sc, styles, mode, time_limit, gap, command) -> int:
    import sys
    import time

    from formulation.capacity.explain import binding, minimums
    from formulation.capacity.plan import build_capacity_plan, style_line
    from formulation.capacity.solve import solve
    from formulation.capacity.warm import improve
    from formulation.common import SolveOptions
    from planner.errors import UserError
    from planner.instances.capacity import compile_capacity
    from planner.whatif import infeasible, report

    info = report.machine()
    t0 = time.perf_counter()
    from planner.statusline import eta, note, status

    with status(f"what-if: estimating the phase times of {len(sc.jobs)} job(s) on every GPU type and pool size"):
        inst = compile_capacity(sc, mode)

    opts = SolveOptions(time_limit_s=time_limit, mip_gap=gap, threads=sc.solver.threads, seed=sc.solver.seed)
    with status(f"what-if: the cheapest fleet for {len(inst.placement.jobs)} job(s) over {len(inst.types)} GPU type(s)"):
        t1 = time.perf_counter()
        res = solve(inst, opts, "co-execution")
        first_s = time.perf_counter() - t1
    if not res.served:  # jobs left out, or owned nodes that alone cost more than the budget (with no jobs, none left out)
        why = (f"{len(res.unplaced)} of {len(inst.placement.jobs)} jobs left out" if res.unplaced else
               "the owned nodes alone are over the budget")
        raise UserError(infeasible.problems(sc, inst, res, opts, mode),
                        title=f"{sc.name}: no fleet within the limits serves the forecast ({why}); nothing written")
    mins = []
    used = [t for t in inst.types if res.used.get(t, 0) > 0]
    if not args.no_minimums and used:
        # each minimum is a search over node counts of one type, each step a solve that may have to prove infeasibility
        guess = eta(MINIMUM_COST_PER_TYPE * len(used) * first_s)
        note(f"what-if: next the fewest nodes of each type used ({', '.join(used)}): up to roughly {guess}; --no-minimums skips it")
        with status(f"what-if: fewest nodes of {', '.join(used)}") as st:
            def on_type(t: str) -> None:
                st.update(f"what-if: fewest {t} nodes (type {used.index(t) + 1} of {len(used)}; up to roughly {guess} in all; "
                          "--no-minimums skips it)")

            for _ in range(3):
                found: list = []
                mins = minimums(inst, res, opts, found, on_type)
                assert res.record is not None  # a solve that served every job has its record
                better = improve(inst, res.cost_per_hour, res.lower_bound, res.record.message, found, opts)
                if better is None:
                    break
                res = better  # a minimum count came with a cheaper fleet than the first solve: that is the answer
            else:
                mins = minimums(inst, res, opts)
    plan = build_capacity_plan(inst, res)
    plan.binding = binding(inst, res, plan)
    plan.minimums = mins
    others = [solve(inst, opts, s) for s in styles if s != "co-execution"]
    plan.styles = [style_line(r, inst) for r in [res] + others] if others else []
    assert res.record is not None
    record = res.record.as_dict()
    record["wall_time_s"] = time.perf_counter() - t0
    lines = report.answer_lines(plan, record, plan.styles)
    if args.json:
        from planner import plandoc

        doc = plandoc.PlanDocument(kind="CapacityPlan", scenario=sc.name, scenario_digest=plandoc.scenario_digest(sc),
                                   solver=plandoc.SolverRecord(**record), body=plan.model_dump(mode="json"))
        print(plandoc.dumps(doc, "json"), end="")
    else:
        print("\n".join(lines))
    if args.out:
        _write_single(args.out, sc, plan, record, lines, inst.types, command, info)
        print(f"wrote {args.out}/capacity-plan.yaml, answer.md, fleet.png" + (", styles.csv" if plan.styles else ""), file=sys.stderr)
    return 0


def _check_targets(d, names: list[str]) -> None:
    """Every file the answer will be written to, checked before the first is written (a symbolic
    link among them is refused with nothing written, not after two files are)."""
    import os
    import stat

    from planner.safewrite import target_kind

    if not d.exists():
        return
    for name in names:
        p = d / name
        if name == "points":
            if p.is_symlink() or (p.exists() and not p.is_dir()):
                from planner.errors import Problem, UserError

                raise UserError(Problem("--out", f"{p} is a symbolic link or not a folder", "remove it, or pass another --out folder"))
            continue
        if target_kind(p, "--out") == "stream" or (p.exists() and not stat.S_ISREG(os.lstat(p).st_mode)):
            from planner.errors import Problem, UserError

            raise UserError(Problem("--out", f"{p} is not a regular file", "remove it, or pass another --out folder"))


def _write_single(out, sc, plan, record, lines, types, command, info) -> None:
    """Every file to a temporary name first, then all moved in place (an interruption or a failed
    plot leaves the previous answer whole, not some of its files replaced)."""
    import contextlib
    from pathlib import Path

    from planner import plandoc
    from planner.safewrite import replacing
    from planner.whatif import report

    d = Path(out)
    _check_targets(d, [*ANSWER_FILES] + (["styles.csv"] if plan.styles else []))
    d.mkdir(exist_ok=True)
    with contextlib.ExitStack() as stack:
        def tmp(name: str) -> Path:
            return stack.enter_context(replacing(d / name, where="--out", suffix=Path(name).suffix))

        doc = plandoc.PlanDocument(kind="CapacityPlan", scenario=sc.name, scenario_digest=plandoc.scenario_digest(sc),
                                   solver=plandoc.SolverRecord(**{k: v for k, v in record.items()}), body=plan.model_dump(mode="json"))
        plandoc.write(doc, tmp("capacity-plan.yaml"))
        md = report.header(command, info) + "\n```\n" + "\n".join(lines) + "\n```\n"
        report.write_atomic(tmp("answer.md"), md)
        if plan.styles:
            head = ["style", "status", "cost_per_hour", "lower_bound_per_hour", "gpus", "busy"] + [f"nodes_{t}" for t in types] + ["note"]
            rows = [",".join(head)]
            for s in plan.styles:
                vals = [s.style, s.status, "" if s.cost_per_hour is None else f"{s.cost_per_hour:.6g}",
                        "" if s.lower_bound_per_hour is None else f"{s.lower_bound_per_hour:.6g}", str(s.gpus),
                        "" if s.busy is None else f"{s.busy:.4f}"] + [str(s.fleet.get(t, 0)) for t in types] + ['"' + s.note.replace('"', "'") + '"']
                rows.append(",".join(vals))
            report.write_atomic(tmp("styles.csv"), "\n".join(rows) + "\n")
            labels = [s.style for s in plan.styles]
            fleets = [s.fleet if s.cost_per_hour is not None else {} for s in plan.styles]
            report.plot_fleet(labels, fleets, types, tmp("fleet.png"), f"{sc.name}: fleet by deployment style", "style")
        else:
            report.plot_fleet([plan.style], [{f.gpu_type: f.total for f in plan.fleet}], types, tmp("fleet.png"), f"{sc.name}: fleet", "style")


def _sweep(args, sc, sweeps, styles, mode, time_limit, gap, types, command) -> int:
    import os
    import sys

    from rich.console import Console

    from planner.whatif import report, run as runner
    from planner.whatif import sweep as sw

    info = report.machine()
    pts = sw.points(sweeps)
    keys = [s.key for s in sweeps]
    from planner.instances.capacity import unlimited_types

    swept = {s.key.split(".", 1)[1] for s in sweeps if s.key.startswith("max_nodes.")}
    ctx = runner.Context(scenario=sw.compile_limits(sc, sweeps), mode=mode, styles=styles, time_limit_s=time_limit,
                         mip_gap=gap, threads=1, unlimited=tuple(sorted(unlimited_types(sc) - swept)))
    workers = args.workers or os.cpu_count() or 1
    err = Console(stderr=True)
    import time

    t0 = time.perf_counter()
    done = [0]
    if err.is_terminal:
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

        progress = Progress(TextColumn("[bold]what-if"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                            TextColumn("{task.description}"), console=err, transient=False)
        task = progress.add_task("", total=len(pts))

        def on_done(r):
            co = r.style("co-execution")
            progress.update(task, advance=1, description=f"last: #{r.index} " + (f"{co.cost_per_hour:.0f} $/h" if co and co.served else "no fleet"))
    else:
        progress = None

        def on_done(r):
            done[0] += 1
            co = r.style("co-execution")
            print(f"what-if: {done[0]}/{len(pts)} points (#{r.index}: " + (f"{co.cost_per_hour:.2f} $/h" if co and co.served else "no fleet")
                  + f", {r.wall_s:.1f} s)", file=sys.stderr, flush=True)

    try:
        if progress:
            progress.start()
        if args.ray_address:
            results = runner.run_ray(ctx, pts, None, args.ray_address, on_done)
        else:
            results = runner.run_local(ctx, pts, workers, on_done)
    finally:
        if progress:
            progress.stop()
    wall = time.perf_counter() - t0
    head, body = report.table_rows(results, keys, styles)
    if args.json:  # the table as rows of {column: value}
        import json

        print(json.dumps([dict(zip(head, row)) for row in body], indent=2, default=str))
    else:
        report.print_table(head, body, Console(width=max(120, Console().width)))
    where = f"{len(pts)} points in {wall:.1f} s on " + (f"Ray ({args.ray_address})" if args.ray_address else f"{min(workers, len(pts))} local worker(s)")
    print(where, file=sys.stderr)
    if args.out:
        _write_sweep(args.out, sc, results, keys, styles, types, head, body, command, info, where)
        print(f"wrote {args.out}/sweep.csv, sweep.md, cost.png, fleet.png, points/", file=sys.stderr)
    return 0


def _write_sweep(out, sc, results, keys, styles, types, head, body, command, info, where) -> None:
    """Every file (the points too) to a temporary name first, then all moved in place, and only
    then the previous sweep's other points removed: an interruption (Ctrl-C, SIGTERM) or a failed
    plot left the new table beside the previous sweep's plots, its points already deleted."""
    import contextlib
    from pathlib import Path

    from planner import plandoc
    from planner.safewrite import replacing
    from planner.whatif import report

    d = Path(out)
    _check_targets(d, [*SWEEP_FILES, "points"])
    d.mkdir(exist_ok=True)
    pts = d / "points"
    pts.mkdir(exist_ok=True)
    names = set()
    with contextlib.ExitStack() as stack:
        def tmp(path: Path) -> Path:
            return stack.enter_context(replacing(path, where="--out", suffix=path.suffix))

        for r in results:
            if not r.plan:
                continue
            doc = plandoc.PlanDocument(kind="CapacityPlan", scenario=sc.name, scenario_digest=plandoc.scenario_digest(sc),
                                       solver=plandoc.SolverRecord(**r.record), body=r.plan)
            names.add(f"point-{r.index:03d}.yaml")
            plandoc.write(doc, tmp(pts / f"point-{r.index:03d}.yaml"))
        report.write_atomic(tmp(d / "sweep.csv"), report.csv_text(results, keys, types))
        md = report.header(command, info, extra=where) + "\n" + report.markdown(head, body)
        report.write_atomic(tmp(d / "sweep.md"), md)
        report.plot_cost(results, keys, styles, tmp(d / "cost.png"))
        labels = [", ".join(f"{r.values[k]:.3g}" for k in keys) for r in results]
        fleets = [r.style("co-execution").fleet if r.style("co-execution").served else {} for r in results]
        report.plot_fleet(labels, fleets, types, tmp(d / "fleet.png"), f"{sc.name}: co-execution fleet",
                          ", ".join(report.axis_label(k) for k in keys))
    for old in pts.glob("point-*.yaml"):  # a previous sweep's points that this one does not have
        if old.name not in names:
            old.unlink()
