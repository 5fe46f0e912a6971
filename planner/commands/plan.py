"""planner plan INPUT: place jobs into co-execution groups at the lowest $/h."""

from __future__ import annotations

NAME = "plan"
HELP = "co-execution group placement: groups, pools, node pins, cycle times, cost (Weave)"
DESCRIPTION = """Pack the jobs of a scenario (or of a numbers-only placement instance file, see
docs/placement.md) into co-execution groups that share a rollout pool and a training pool, at the
lowest provisioning cost ($/h) with every member's cycle time within its SLO and every node's
resident job state within its host DRAM.

Backends: auto (= colgen), colgen (set partitioning over group patterns by column generation:
certified lower bound, proven optimal on small inputs), highs (compact job x group MILP through
Pyomo, small inputs), cpsat (compact CP-SAT model, small inputs), greedy (Weave's three admission
moves; also the warm start and the baseline every plan reports beside its cost).

With --current PLAN the re-optimisation starts from that plan: its groups keep their nodes, and
each job it moves costs the move price ($/h per moved job; the scenario's
solver.move_price_per_job or --move-price). Jobs that cannot be placed are explained (SLO below
the solo time on every pool, no node with enough DRAM, fleet short by N nodes of a type) and the
command exits 2 without writing a plan, unless --allow-unplaced."""


def add_arguments(p) -> None:
    p.add_argument("input", metavar="INPUT", help="scenario YAML, or a numbers-only placement instance (YAML/JSON)")
    p.add_argument("--backend", choices=["auto", "colgen", "highs", "cpsat", "greedy"], default=None,
                   help="solver (default: the scenario's solver.backend, else auto)")
    p.add_argument("--time-limit", type=float, default=None, metavar="S",
                   help="wall-clock limit in seconds for the whole solve (default: the scenario's solver.time_limit_s, else 60)")
    p.add_argument("--mip-gap", type=float, default=None, help="relative gap at which a solve may stop (default 1e-4)")
    p.add_argument("--threads", type=int, default=None, help="solver threads (default: the scenario's, else 1)")
    p.add_argument("--current", metavar="PLAN", help="the current plan: warm start, keep its groups' nodes, price moves")
    p.add_argument("--move-price", type=float, default=None, metavar="USD_PER_H", help="$/h charged per moved job")
    p.add_argument("--mode", choices=["conservative", "sampled"], default=None, help="phase-time estimate (scenarios only)")
    p.add_argument("--margin", type=float, default=0.0, metavar="F",
                   help="explicit headroom: every phase time x (1 + F) on the same model, SLOs unchanged (scenarios only)")
    p.add_argument("--out", "-o", metavar="FILE", help="write the plan document here (.json: JSON, else YAML); default: stdout")
    p.add_argument("--plot", metavar="PNG", help="write a timeline of one meta-iteration per group (rollout and training lanes)")
    p.add_argument("--save-instance", metavar="FILE", help="also write the numbers-only instance the plan was computed from")
    p.add_argument("--allow-unplaced", action="store_true", help="write the plan even when some jobs cannot be placed (exit 0)")


def _check_args(args) -> None:
    from planner.commands._args import check_solver_args
    from planner.errors import Problem, UserError

    check_solver_args(args)
    if args.move_price is not None and args.move_price < 0:
        raise UserError(Problem("--move-price", f"must be >= 0 $/h, got {args.move_price}", "pass e.g. --move-price 0.5"))
    for opt in ("out", "plot", "save_instance"):
        path = getattr(args, opt)
        if path:
            from pathlib import Path

            parent = Path(path).resolve().parent
            if not parent.is_dir():
                raise UserError(Problem(f"--{opt.replace('_', '-')}", f"folder {parent} does not exist", "create it or pick another path"))


def run(args) -> int:
    import sys

    from formulation.common import SolveOptions
    from formulation.placement.solve import solve
    from planner.commands._placement import load_input, read_plan, summary, unplaced_error, write_plan

    _check_args(args)
    inst, name, digest, sc = load_input(args.input, args.mode, args.margin)
    if args.move_price is not None:
        inst = inst.model_copy(update={"move_price_per_job": args.move_price})
    solver = sc.solver if sc is not None else None
    opts = SolveOptions(
        time_limit_s=args.time_limit or (solver.time_limit_s if solver else 60.0),
        mip_gap=args.mip_gap if args.mip_gap is not None else (solver.mip_gap if solver else 1e-4),
        threads=args.threads or (solver.threads if solver else 1),
        seed=solver.seed if solver else 0,
    )
    backend = args.backend or (solver.backend if solver else "auto")
    current = read_plan(args.current)[1] if args.current else None
    if args.save_instance:
        from pathlib import Path

        from planner.instances.placement import dump_instance

        p = Path(args.save_instance)
        tmp = p.with_name(f".{p.name}.tmp")
        tmp.write_text(dump_instance(inst))
        tmp.replace(p)
    res = solve(inst, opts, backend, current)
    record = res.record.as_dict()
    if res.plan.unplaced and not args.allow_unplaced:
        raise unplaced_error(res.plan, f"{len(res.plan.unplaced)} job(s) of '{name}' cannot be placed; no plan written "
                                       "(--allow-unplaced writes the plan for the others)")
    if args.plot:
        from planner.placement_plot import plot_plan

        plot_plan(res.plan, args.plot)
    where = write_plan(res.plan, record, name, digest, args.out)
    print(summary(res.plan, record), file=sys.stderr)
    if where != "-":
        print(f"wrote {where}" + (f" and {args.plot}" if args.plot else ""), file=sys.stderr)
    return 0
