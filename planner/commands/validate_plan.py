"""planner validate-plan INPUT PLAN: run the solver-free checker on a placement plan."""

from __future__ import annotations

NAME = "validate-plan"
QUICK_EXIT = True  # no thread or process; files written durably before run returns (cli.entry)
MAX_VIOLATIONS = 200  # printed (a pool of 100,000 nodes named nowhere gave 100,004 lines); the count says how many in all
HELP = "check a placement plan against its scenario or instance; list each violated constraint by name"
DESCRIPTION = """Recompute everything a placement plan claims from the scenario (or the numbers-only
instance) without any solver: every job placed exactly once, pools made of existing nodes of the
right type, no node in two pools, capacity per GPU type, pins inside the group's pools, phase
times from the tables, each member's cycle time (max cycle ratio of the round-robin schedule)
within its SLO, host DRAM per node, and every claim that can be recomputed: cycle times, costs,
SLOs and slack, GPUs per node and per pool, nodes and GPUs used per type, each group's critical
cycle, the moved jobs against the members' moved flags, the lower bound, the solve record's gap
and its phase-time estimate (one of the estimates, the --mode given). Each violation is printed as
rule[where]: message (the first 200, then how many more). Exit status 0 when the plan is valid, 2 otherwise. A plan made for another
input (its recorded digest differs from INPUT's), or recording no digest or a malformed one, is
refused in one line unless --force."""


def add_arguments(p) -> None:
    from planner.commands import _args

    p.add_argument("input", type=_args.path, metavar="INPUT", help="scenario YAML, or a numbers-only placement instance")
    p.add_argument("plan", type=_args.path, metavar="PLAN", help="a PlacementPlan document")
    p.add_argument("--mode", choices=["conservative", "sampled", "p90", "p99", "max"], default=None,
                   help="phase-time estimate (scenarios only; default: the one the plan records, with its margin)")
    p.add_argument("--json", action="store_true", help="print the verdict as JSON on stdout: ok, the plan's totals, each violation")
    p.add_argument("--force", action="store_true",
                   help="check the plan even when it was made for another input (its digest differs from INPUT's)")


def estimate_violations(recorded, mode, *, scenario: bool, same: bool) -> list:
    """The solve record's ``phase_time_estimate`` (the estimate the plan's phase times come from)
    against what the check runs on: one of the estimates; with a scenario, the one ``--mode``
    names when given (``conservative`` and ``max`` are one estimate); and recorded, when the plan
    was made from this scenario (a plan made from an instance file records none: its times are
    the file's)."""
    from formulation.common.violation import Violation
    from planner.commands._placement import ESTIMATES
    from simulator.phasetimes import is_bound

    where, names = "solver.phase_time_estimate", ", ".join(ESTIMATES[:-1]) + f" or {ESTIMATES[-1]}"
    if recorded is not None and recorded not in ESTIMATES:
        return [Violation("solver", where, f"is {recorded!r}, not a phase-time estimate ({names}): the plan's phase times come "
                                           "from no estimate this planner knows (re-plan with `planner plan`)")]
    if not scenario:
        return []  # an instance file holds its own phase times
    if recorded is None:
        return [Violation("solver", where, "is missing, but a plan made from a scenario records the estimate its phase times "
                                           f"come from ({names}) (re-plan with `planner plan`)")] if same else []
    if mode is not None and mode != recorded and not (is_bound(mode) and is_bound(recorded)):
        return [Violation("solver", where, f"is {recorded!r}, but the plan is checked on the {mode!r} estimate (--mode): its phase "
                                           f"times are {recorded!r} ones (drop --mode to check it on its own estimate, or re-plan "
                                           f"with --mode {mode})")]
    return []


def run(args) -> int:
    import sys

    from estimators.errors import MAX_MESSAGE, safe_text
    from formulation.placement.check import check
    from planner.commands._placement import digest_problem, load_input, plan_and_estimate, same_input

    from planner.statusline import status

    doc, plan, mode, margin, plan_error = plan_and_estimate(args.plan, "validate-plan", args.mode)  # (the plan's unless --mode)
    with status("validate-plan: reading the input and estimating every job's phase times") as st:
        inst, name, digest, sc = load_input(args.input, mode, command="validate-plan", progress=st, recorded_margin=margin,
                                            asked_mode=args.mode)
    if plan_error is not None:
        raise plan_error
    assert doc is not None and plan is not None
    from planner.errors import Problem, UserError

    # an empty or edited digest says nothing about the input (an empty one used to skip the check)
    bad = digest_problem(doc.scenario_digest, args.plan, args.input,
                         "re-run `planner plan INPUT --out PLAN` (a plan records the digest of its input), "
                         "or --force to check it against this input anyway")
    if bad is not None and not args.force:
        raise UserError(bad)
    same = bad is None and same_input(doc.scenario_digest, digest, inst)
    if not same and not args.force:
        raise UserError(Problem("PLAN", f"{args.plan} was made for {doc.scenario or 'another input'} (digest {doc.scenario_digest}), "
                                        f"not for {args.input} (digest {digest}): its violations here would say nothing about it",
                                "give the input the plan was made from, or --force to check it against this one anyway"))
    violations = check(inst, plan, doc.solver, slo_claims=True) + estimate_violations(doc.solver.phase_time_estimate, args.mode,
                                                                                     scenario=sc is not None, same=same)
    if bad is not None:
        print(f"note: {bad.message}; checking it against this input (--force)", file=sys.stderr)
    elif not same:
        print(f"note: the plan was made for {safe_text(doc.scenario or 'another input')} (digest {safe_text(doc.scenario_digest)}), "
              f"not this input's content (digest {digest}); checking it against this input", file=sys.stderr)
    if args.json:
        import json

        print(json.dumps({"plan": args.plan, "input": args.input, "ok": not violations, "groups": len(plan.groups),
                          "jobs": sum(len(g.members) for g in plan.groups), "unplaced": len(plan.unplaced),
                          "cost_per_hour": plan.cost_per_hour, "violations": [safe_text(v, MAX_MESSAGE) for v in violations[:MAX_VIOLATIONS]],
                          "violations_total": len(violations)}, indent=2))
        return 2 if violations else 0
    if violations:
        print(f"{args.plan}: {len(violations)} violated constraint(s):", file=sys.stderr)
        for v in violations[:MAX_VIOLATIONS]:
            print(f"  {safe_text(v, MAX_MESSAGE)}", file=sys.stderr)
        if len(violations) > MAX_VIOLATIONS:
            print(f"  ... and {len(violations) - MAX_VIOLATIONS} more (the first {MAX_VIOLATIONS} are shown)", file=sys.stderr)
        print("Fix: re-plan with `planner plan` (or edit the plan) so that each rule holds.", file=sys.stderr)
        return 2
    on = ""
    if sc is not None:
        est = mode or sc.solver.phase_time_estimate
        on = f" on the {est} phase-time estimate" + (f" with a {margin:g} margin" if margin else "")
    print(f"ok: {args.plan}: {len(plan.groups)} group(s), {sum(len(g.members) for g in plan.groups)} job(s), "
          f"{len(plan.unplaced)} unplaced, {plan.cost_per_hour:.2f} $/h; every constraint holds{on}")
    return 0
