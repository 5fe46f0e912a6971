"""planner plan INPUT: place jobs into co-execution groups at the lowest $/h."""

from __future__ import annotations

NAME = "plan"
QUICK_EXIT = True  # no thread or process; files written durably before run returns (cli.entry)
HELP = "co-execution group placement: groups, pools, node pins, cycle times, cost (Weave)"
DESCRIPTION = """Pack the jobs of a scenario (or of a numbers-only placement instance file, see
docs/placement.md) into co-execution groups that share a rollout pool and a training pool, at the
lowest provisioning cost ($/h) with every member's cycle time within its SLO and every node's
resident job state within its host DRAM.

Backends: auto (with more than 600 distinct job classes the fast path, then from --time-limit 40 at
2,000 classes box-stabilised rounds for a certified bound and a plan from their groups; the fast
path alone under --time-limit 2 with more than 30; else the fast path as the warm start of column
generation), fast (first-fit-decreasing
and tightest-SLO-first best fit over pool-type pairs, a load bound, local search that re-solves a
few groups at a time exactly, until the limit), colgen (set partitioning over group patterns by column generation:
certified lower bound, proven optimal on small inputs), highs (compact job x group MILP through
Pyomo, small inputs), cpsat (compact CP-SAT model, small inputs), greedy (Weave's three admission
moves; also the warm start and the baseline every plan reports beside its cost).

With --current PLAN the re-optimisation starts from that plan: its groups keep their nodes, and
each job it moves costs the move price ($/h per moved job; the scenario's
solver.move_price_per_job or --move-price). Jobs that cannot be placed are explained (SLO below
the solo time on every pool, no node with enough DRAM, fleet short by N nodes of a type) and the
command exits 2 without writing a plan, unless --allow-unplaced; jobs that fit nowhere alone are
refused before any solve.

--time-limit covers the whole command. A scenario's phase times are estimated by simulation first
(seconds a job; kept in a cache, per job, for later runs): they stop at the limit's deadline, and
when they cannot finish in it the command exits 2 with no plan, naming the least --time-limit that
would do; the solver gets what they leave."""


def add_arguments(p) -> None:
    from planner.commands import _args

    p.add_argument("input", type=_args.path, metavar="INPUT", help="scenario YAML, or a numbers-only placement instance (YAML/JSON)")
    p.add_argument("--backend", choices=["auto", "fast", "colgen", "highs", "cpsat", "greedy"], default=None,
                   help="solver (default: the scenario's solver.backend, else auto)")
    p.add_argument("--time-limit", type=_args.number(hi=_args.TIME_LIMIT_S), default=None, metavar="S",
                   help="wall-clock limit in seconds for the whole command, loading, a scenario's phase-time estimates "
                        "and writing included: estimates that cannot finish in it are refused (exit 2) naming the least "
                        "limit that would do (default: the scenario's solver.time_limit_s, else 60)")
    p.add_argument("--mip-gap", type=_args.number(hi=1.0), default=None, help="relative gap at which a solve may stop (default 1e-4)")
    p.add_argument("--threads", type=_args.number(1, _args.MAX_THREADS, kind=int), default=None, help="solver threads (default: the scenario's, else 1)")
    p.add_argument("--current", type=_args.path, metavar="CURRENT_PLAN",
                   help="the current PlacementPlan (a plan file, not a scenario): warm start, keep its groups' nodes, price moves")
    p.add_argument("--move-price", type=_args.number(0.0, 1e4), default=None, metavar="USD_PER_H", help="$/h charged per moved job")
    p.add_argument("--mode", choices=["conservative", "sampled", "p90", "p99", "max"], default=None, help="phase-time estimate (scenarios only)")
    p.add_argument("--json", action="store_true", help="print the plan document as JSON on stdout (also with --out)")
    p.add_argument("--margin", type=_args.number(0.0, 1.0), default=0.0, metavar="F",
                   help="explicit headroom: every phase time x (1 + F) on the same model, SLOs unchanged (scenarios only)")
    p.add_argument("--out", "-o", type=_args.path, metavar="FILE", help="write the plan document here (.json: JSON, else YAML); default: "
                                                       "NAME.plan.yaml in the current folder (named in the summary); '-': stdout only")
    p.add_argument("--plot", type=_args.path, metavar="PNG", help="write a timeline of one meta-iteration per group (rollout and training lanes)")
    p.add_argument("--save-instance", type=_args.path, metavar="FILE",
                   help="also write the numbers-only instance the plan was computed from (with the plan; a refused command writes neither)")
    p.add_argument("--allow-unplaced", action="store_true", help="write the plan even when some jobs cannot be placed (exit 0)")
    p.add_argument("--slo-curve", action="store_true", help="scenarios: also plan on each phase-time estimate (sampled, p90, p99, "
                   "max), simulate each plan and print its $/h against its simulated SLO attainment (recorded in the plan); "
                   "within --time-limit: the plan gets a fifth of the solver's time, the points share the rest (a point that "
                   "cannot finish says so)")
    p.add_argument("--slo-curve-plot", type=_args.path, metavar="PNG", help="with --slo-curve: draw the curve")


def _check_args(args) -> None:
    from planner.commands._args import check_outputs, check_solver_args
    from planner.errors import Problem, UserError

    check_solver_args(args)
    check_outputs(args, "out", "plot", "save_instance", "slo_curve_plot", inputs=[("INPUT", args.input)])
    if args.current:  # --out may replace the current plan (a re-optimisation in place); the other outputs may not
        from argparse import Namespace

        check_outputs(Namespace(plot=args.plot, save_instance=args.save_instance, slo_curve_plot=args.slo_curve_plot),
                      "plot", "save_instance", "slo_curve_plot", inputs=[("--current", args.current)])
    if args.slo_curve_plot and not args.slo_curve:
        raise UserError(Problem("--slo-curve-plot", "draws the curve --slo-curve computes", "add --slo-curve"))
    if args.move_price is not None and args.move_price < 0:
        raise UserError(Problem("--move-price", f"must be >= 0 $/h, got {args.move_price}", "pass e.g. --move-price 0.5"))
    for opt in ("out", "plot", "save_instance", "slo_curve_plot"):
        path = getattr(args, opt)
        if path:
            from pathlib import Path

            parent = Path(path).resolve().parent
            if not parent.is_dir():
                raise UserError(Problem(f"--{opt.replace('_', '-')}", f"folder {parent} does not exist", "create it or pick another path"))


MIN_SOLVE_S = 0.05  # what the solver gets when loading took the whole limit (a plan is always written)
#: with ``--slo-curve``, the plan's share of the solver's time: the curve's points (each estimated, planned and
#: simulated, :func:`planner.sim.slo_curve.curve`) share the rest of the command's limit
PLAN_SHARE_WITH_CURVE = 0.2
#: kept from the curve's time for drawing it (``--slo-curve-plot``; matplotlib's first figure: ~0.5-1 s)
CURVE_PLOT_S = 1.5
#: of the limit, kept from a scenario's phase-time estimates for what follows them (the index, the solve
#: and its summary; writing the plan is kept besides, :func:`_write_s`): estimates that cannot finish
#: before the rest of the limit are refused (:func:`_compile_refusal`)
AFTER_COMPILE_SHARE = 0.1
#: what a refusal's minimum --time-limit allows for the index, a short solve and the summary after the
#: estimates (the fast path's first plan of 60 jobs: 0.1-0.3 s), and the margin on the estimates' projected time
AFTER_COMPILE_S = 1.0
PROJECTION_MARGIN = 1.25


def _clock() -> float:
    """The command's clock (``time.perf_counter``); tests replace it to check the phases' deadlines."""
    import time

    return time.perf_counter()


def solver_share(limit: float, loaded_s: float, n_jobs: int, json_out: bool) -> tuple[float, str]:
    """The solver's share of the command's ``limit``: what loading took (``loaded_s``) and an
    estimate of writing the plan (JSON: ``0.03 ms n + 0.03 s``, at most 30% of the limit; YAML:
    ``max(0.03 ms n + 0.04 s, 0.045 ms n - 0.01 s)``, at most 40% of it; measured 2026-12-05 on an
    idle machine, text and file: 2,000 jobs as JSON in 0.03-0.05 s, as YAML in 0.07-0.08 s
    (planner.yamlemit; 0.42 s with PyYAML's libyaml emitter), 10,000 jobs in 0.2-0.32 s and
    0.37 s) come off it. Returns (seconds, what was cut short or "")."""
    left = limit - loaded_s - _write_s(limit, n_jobs, json_out)
    if left >= MIN_SOLVE_S:
        return left, ""
    return MIN_SOLVE_S, (f"loading the input took {loaded_s:.2f} s of the {limit:g} s limit: the solver had "
                         f"{MIN_SOLVE_S:g} s (its fastest plan)")


def _write_s(limit: float, n_jobs: int, json_out: bool) -> float:
    """The estimate of writing the plan :func:`solver_share` keeps from the limit."""
    return (min(3e-5 * n_jobs + 0.03, 0.3 * limit) if json_out
            else min(max(3e-5 * n_jobs + 0.04, 4.5e-5 * n_jobs - 0.01), 0.4 * limit))


def compile_deadline(t_start: float, limit: float, n_jobs: int, json_out: bool) -> float:
    """When a scenario's phase-time estimates must be done (a :func:`_clock` value): what the limit
    leaves after writing the plan, the fastest solve and :data:`AFTER_COMPILE_SHARE` of the limit."""
    return t_start + limit - _write_s(limit, n_jobs, json_out) - MIN_SOLVE_S - AFTER_COMPILE_SHARE * limit


def _compile_refusal(cut, limit: float, from_option: bool, spent_s: float, json_out: bool):
    """The UserError (exit 2) for phase-time estimates that cannot finish in the limit
    (:class:`planner.instances.placement.CompileCut`): what was done, and the least --time-limit that
    would finish them and plan (the time before them, the rest projected with
    :data:`PROJECTION_MARGIN`, :data:`AFTER_COMPILE_S` and writing)."""
    import math

    from planner.errors import Problem, UserError
    from planner.instances import cache

    before_s = max(0.0, spent_s - cut.elapsed_s)  # start-up and reading the scenario
    kept = cache.enabled()
    compile_s = cut.rest_s if kept or cut.before else cut.elapsed_s + cut.rest_s  # (without the cache: all again)
    need = before_s + PROJECTION_MARGIN * compile_s + AFTER_COMPILE_S + _write_s(1e9, cut.total, json_out)
    least = max(math.ceil(need), math.floor(limit) + 1)
    given = f"--time-limit {limit:g}" if from_option else f"the scenario's solver.time_limit_s ({limit:g} s)"

    def secs(x: float) -> str:  # (under 0.1 s: "needs about 0.0 s ..., more than the 0.0 s" read as a contradiction)
        return f"{x:.1f}" if x >= 0.1 or x <= 0 else f"{x:.2g}"

    if cut.before:
        what = (f"estimating the phase times of its {cut.total} job(s) by simulation needs about {secs(cut.rest_s)} s on "
                f"this machine (projected from the jobs' sizes), more than the {secs(max(0.0, limit - before_s))} s "
                f"{given} leaves for it after start-up; nothing was estimated")
    else:
        what = (f"estimating the phase times of its {cut.total} job(s) by simulation did not finish in the "
                f"{cut.elapsed_s:.1f} s {given} left for it: {cut.total - cut.missing} estimated"
                + (" (kept in the cache: the next run estimates only the others)" if kept and cut.total > cut.missing else "")
                + f", {cut.missing} not; they need about {cut.rest_s:.1f} s more "
                + ("at the pace measured" if cut.measured else "(projected from the jobs' sizes)"))
    fix = (f"pass --time-limit {least} or more (the plan then gets what the estimates leave of it)"
           + ("; once estimated, a scenario's phase times are read from the cache" if kept else ""))
    return UserError(Problem("--time-limit", what, fix), title="the time limit is too short to estimate this scenario's "
                                                              "phase times; nothing solved, no plan written")


def _refuse_jobs_alone_nowhere(idx, name: str) -> None:
    """Exit 2 (a UserError naming each job, why and the fix) when some job fits nowhere alone
    (:func:`formulation.placement.explain.placeable_alone`: no plan can place it)."""
    import numpy as np

    from formulation.placement.explain import explain, placeable_alone
    from planner.commands._placement import unplaced_error

    lost = np.flatnonzero(~placeable_alone(idx)).tolist()
    if lost:
        raise unplaced_error([explain(idx, j) for j in lost],
                             f"{len(lost)} job(s) of '{name}' cannot be placed by any plan; nothing solved, no plan written "
                             "(--allow-unplaced plans the others)")


def run(args) -> int:
    import sys

    # the command's start: when the process imported the planner (the executable), else now
    started = getattr(args, "_started", None)
    t_start = started if started is not None else _clock()

    from formulation.common import SolveOptions
    from formulation.placement.solve import solve
    from planner.commands._placement import default_out_for, load_input, read_plan, same_fleet, unplaced_error, write_plan
    from planner.commands._plan_summary import expected_cycles, summary
    from planner.errors import Problem, UserError
    from planner.instances.placement import CompileCut
    from planner.statusline import status

    _check_args(args)
    json_out = str(args.out or "").endswith(".json")

    def limit_of(scenario) -> float:
        return args.time_limit or (scenario.solver.time_limit_s if scenario is not None else 60.0)

    asked: list[float] = []  # the limit a scenario's estimates were given

    def until(scenario) -> float:  # the scenario's phase-time estimates count against the limit
        asked.append(limit_of(scenario))
        return compile_deadline(t_start, asked[-1], len(scenario.jobs), json_out)

    with status("plan: reading the input and estimating every job's phase times") as st:
        try:
            inst, name, digest, sc = load_input(args.input, args.mode, args.margin, progress=st, asked_mode=args.mode,
                                                deadline=until)
        except CompileCut as cut:
            raise _compile_refusal(cut, asked[-1], bool(args.time_limit), _clock() - t_start, json_out) from None
    out = args.out or default_out_for(name, args.input)  # (refused before any solve when it is the input)
    if args.slo_curve and sc is None:
        raise UserError(Problem("--slo-curve", f"{args.input} is a numbers-only instance file: its phase times are written in it, "
                                               "so there are no estimates to plan and simulate side by side",
                                "plan the scenario it was made from with --slo-curve, or drop --slo-curve"))
    if args.move_price is not None:
        inst = inst.model_copy(update={"move_price_per_job": args.move_price})
    solver = sc.solver if sc is not None else None
    limit = limit_of(sc)
    from formulation.placement.evaluate import Index

    idx = Index(inst)  # (before the solver's share is set: its time is the command's, like loading)
    # the limit is for the whole command: loading and writing come off the solver's share
    solve_limit, load_cut = solver_share(limit, _clock() - t_start, len(inst.jobs), json_out)
    curve = bool(getattr(args, "slo_curve", False) and sc is not None)
    if curve:  # the cost-SLO curve's points come out of the same limit (:data:`PLAN_SHARE_WITH_CURVE`)
        solve_limit = max(MIN_SOLVE_S, PLAN_SHARE_WITH_CURVE * solve_limit)
    opts = SolveOptions(
        time_limit_s=solve_limit,
        mip_gap=args.mip_gap if args.mip_gap is not None else (solver.mip_gap if solver else 1e-4),
        threads=args.threads or (solver.threads if solver else 1),
        seed=solver.seed if solver else 0,
    )
    backend = args.backend or (solver.backend if solver else "auto")
    current = read_plan(args.current)[1] if args.current else None
    if current is not None:
        same_fleet(args.current, args.input, current, inst)
        cur_jobs = {m.job for g in current.groups for m in g.members}
        gone = sorted(cur_jobs - {j.name for j in inst.jobs})
        if gone:
            print(f"note: the current plan's job(s) {', '.join(gone[:5])}{' ...' if len(gone) > 5 else ''} are not in "
                  f"{args.input}: their groups are re-planned without them", file=sys.stderr)
    # jobs that fit nowhere alone are known before any solve: refused at once (the solve would spend
    # its whole limit, 60 s by default, before the same refusal), unless --allow-unplaced
    if not args.allow_unplaced:
        _refuse_jobs_alone_nowhere(idx, name)
    from planner.statusline import enabled as status_enabled

    progress = _status_line() if status_enabled() else None  # a terminal, or RL_PLANNER_PROGRESS=1
    res = solve(inst, opts, backend, current, progress=progress, idx=idx)
    if progress:
        progress.done()
    record = res.record.as_dict()
    record["time_limit_s"] = limit
    if sc is not None:
        record["phase_time_estimate"] = args.mode or sc.solver.phase_time_estimate
        record["margin"] = args.margin or None
    if curve:
        from planner.commands._slo_curve import curve_record

        from planner.sim.slo_curve import same_estimate

        own = same_estimate(args.mode or sc.solver.phase_time_estimate, sc.solver.phase_time_estimate) and not args.margin
        curve_until = t_start + limit - _write_s(limit, len(inst.jobs), json_out) - (CURVE_PLOT_S if args.slo_curve_plot else 0.0)
        # (drawn below, once the plan is known to be written: a refused plan leaves no --slo-curve-plot file either)
        record["slo_curve"] = curve_record(sc, None, deadline=curve_until, given=(inst, res.plan) if own else None)
        lacking = [p["estimate"] for p in record["slo_curve"] if "time limit" in (p.get("note") or "")]
        if lacking:
            record["message"] = (record.get("message") or "") + (
                f"; the cost-SLO curve's {', '.join(lacking)} point(s) did not finish in the time limit (a longer --time-limit "
                "computes them; phase times estimated are kept in the cache)")
    if load_cut:
        record["message"] = (record.get("message") or "") + "; cut short by the time limit: " + load_cut
    if res.plan.unplaced and not args.allow_unplaced:
        if load_cut:  # the solve was cut short by the loading's time, not proven short of nodes

            err = unplaced_error(res.plan.unplaced, "")
            raise UserError([Problem("--time-limit", f"{load_cut}: the jobs below were left out by that short solve, "
                                                     "not proven unplaceable",
                                     "give a longer --time-limit (a second run reads the phase times from the cache)")]
                            + err.problems,
                            title=f"{len(res.plan.unplaced)} job(s) of '{name}' were not placed in the time left; no plan written")
        raise unplaced_error(res.plan.unplaced, f"{len(res.plan.unplaced)} job(s) of '{name}' cannot be placed; no plan written "
                                       "(--allow-unplaced writes the plan for the others)")
    if args.save_instance:  # with the plan: a refused command leaves an existing file as it was
        from pathlib import Path

        from planner.instances.placement import dump_instance
        from planner.safewrite import write_atomic

        write_atomic(Path(args.save_instance), dump_instance(inst, as_json=args.save_instance.lower().endswith(".json")),
                     where="--save-instance")
    if args.plot:
        from planner.placement_plot import plot_plan

        plot_plan(res.plan, args.plot)
    if curve and args.slo_curve_plot:
        from planner.commands._slo_curve import plot_record

        plot_record(record["slo_curve"], args.slo_curve_plot, sc.name)
    expected = None
    if sc is not None and record["phase_time_estimate"] in ("conservative", "max", "sampled", "p90", "p99") and res.plan.groups:
        # (on --mode sampled too: the expectation draws iterations the planner never saw, so a mean its own
        # draws got wrong shows here, with the warning below when a job then runs over its SLO)
        with status("plan: simulating each group's expected cycle (sampled phase times)"):
            expected = expected_cycles(sc, res.plan, deadline=t_start + 0.9 * limit, clock=_clock)  # within the limit
    if out != "-":  # the file first: a closed stderr (a pager quit early) must not lose the plan
        write_plan(res.plan, record, name, digest, out)
    print(summary(res.plan, record, name, out, expected), file=sys.stderr)
    if args.plot:
        print(f"timeline written to {args.plot}", file=sys.stderr)
    if curve and args.slo_curve_plot:
        print(f"cost-SLO curve drawn to {args.slo_curve_plot}", file=sys.stderr)
    sys.stderr.flush()
    if out == "-" or args.json:  # on stdout after the summary
        write_plan(res.plan, record, name, digest, "-", args.json)
    return 0


class _status_line:
    """A live status line on a terminal for solves longer than ~2 s: phase, incumbent, bound, gap.
    Quiet when stderr is not a terminal, unless RL_PLANNER_PROGRESS=1 (the caller does not create one then)."""

    AFTER_S = 2.0

    def __init__(self):
        import time

        self.t0 = time.perf_counter()
        self.shown = False

    def __call__(self, phase: str, incumbent, bound) -> None:
        import sys
        import time

        dt = time.perf_counter() - self.t0
        if dt < self.AFTER_S:
            return
        gap = (f", gap {100 * (incumbent - bound) / incumbent:.1f}%" if incumbent and bound is not None and incumbent > 0 else "")
        line = (f"[{dt:6.1f} s] {phase}" + (f": plan {incumbent:.2f} $/h" if incumbent is not None else "")
                + (f", bound {bound:.2f}" if bound is not None else "") + gap)
        sys.stderr.write("\r" + line[:120].ljust(80))
        sys.stderr.flush()
        self.shown = True

    def done(self) -> None:
        import sys

        if self.shown:
            sys.stderr.write("\n")
            sys.stderr.flush()
