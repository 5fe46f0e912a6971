"""``planner simulate SCENARIO --plan PLAN``: simulate a placement plan as written (groups, pools,
node pins, round-robin orders) and report planned against simulated cycle per group and SLO
attainment per job (:mod:`planner.sim.planrun`)."""

from __future__ import annotations

import json
from pathlib import Path


def run_plan(args, sc, out, console, write_files) -> int:
    from formulation.placement.plan import PlacementPlan
    from planner import plandoc
    from planner.errors import Problem, UserError
    from planner.sim.planrun import GROUP_HEADER, JOB_HEADER, simulate_plan, table_rows
    from simulator.defaults import PLAN_ITERATIONS

    kind = plandoc.peek_kind(args.plan)
    if kind is not None and kind != "PlacementPlan":
        raise UserError(Problem("--plan", f"{args.plan} is a {kind}; --plan simulates a PlacementPlan (groups, pools, pins)",
                                "pass the output of `planner plan` (or `planner admit`); simulate one job's "
                                "reallocation with --policy dynamic"))
    doc = plandoc.read(args.plan, expect_kind="PlacementPlan")
    plan = doc.body_as(PlacementPlan)  # validated once, by plandoc.read
    assert isinstance(plan, PlacementPlan)
    notes = []
    if doc.scenario and doc.scenario != sc.name:
        raise UserError(Problem("--plan", f"the plan was made from scenario '{doc.scenario}', not '{sc.name}'",
                                "pass the scenario the plan was made from"))
    from planner.commands._placement import digest_problem

    unknown = digest_problem(doc.scenario_digest, args.plan, args.scenario)
    changed = unknown is None and doc.scenario_digest != plandoc.scenario_digest(sc)
    if changed:
        notes.append("the scenario changed since the plan was made (digest differs): phase times are today's")
    elif unknown is not None:  # nothing says which input it was made for: held to every rule on today's scenario
        notes.append(f"{unknown.message}: it is checked in full against today's scenario and simulated on today's phase times")
    if not plan.groups:
        raise UserError(Problem("--plan", "the plan has no groups to simulate", "plan at least one job"))
    inst = check_plan(args, doc, plan, changed)
    # each job is scored against the SLO of the scenario simulated (compiled as the planner does, on the plan's
    # estimate), not the plan's claim: a plan of a changed scenario (or an edited instance file) may record another
    slo_now = {j.name: float(j.slo_s) for j in inst.jobs}
    from planner.statusline import status

    with status(f"simulate: the plan's {len(plan.groups)} group(s), request by request"):
        res = simulate_plan(sc, plan, seed=args.seed, iterations=args.iterations or PLAN_ITERATIONS,
                            replications=getattr(args, "replications", None) or 1, slo_s=slo_now)
    for j in res.jobs:
        if j.slo_differs:
            notes.append(f"{j.job}: SLO {j.slo_s:.1f} s in the scenario today, {j.plan_slo_s:.1f} s in the plan: its attainment "
                         "and margin are against today's SLO")
    if plan.unplaced:
        names = ", ".join(f"{u.job} ({u.reason})" for u in plan.unplaced[:10]) + (" ..." if len(plan.unplaced) > 10 else "")
        notes.append(f"{len(plan.unplaced)} job(s) the plan leaves unplaced, not simulated: {names}")
    if res.groups and all(g.replications == 1 for g in res.groups):
        notes.append(f"one replication per group (seed {args.seed}): a group's simulated cycle varies from seed to seed, most "
                     "with multi-turn jobs and few requests; --replications 8 gives the mean and its standard error")
    d = res.to_dict()
    d.update(command="planner simulate " + " ".join(_argv(args)), plan=str(args.plan), notes=notes,
             unplaced=[{"job": u.job, "reason": u.reason, "message": u.message, "fix": u.fix} for u in plan.unplaced])
    if args.json:
        print(json.dumps(d, indent=2, default=float, allow_nan=False))
    else:
        from rich.table import Table

        grows, jrows = table_rows(res)
        for title, header, rows in ((f"{sc.name}: plan {args.plan}, planned vs simulated cycle per group", GROUP_HEADER, grows),
                                    ("SLO attainment per job", JOB_HEADER, jrows)):
            t = Table(title=title, title_justify="left")
            rows = _short_names(rows, header)
            for i, h in enumerate(header):
                t.add_column(h, justify="right" if i >= len(header) - 4 else "left", overflow="fold")
            for r in rows:
                t.add_row(*r)
            console.print(t)
        for n in notes:
            console.print(f"note: {n}")
    if out is not None:
        write_files(out, {"summary.json": lambda p: Path(p).write_text(json.dumps(d, indent=2, default=float, allow_nan=False) + "\n")})
        if not args.json:
            console.print(f"wrote {out / 'summary.json'}")
    return 0


# what a plan of a changed scenario is still checked for (its phase times, cycles, SLOs and costs
# are yesterday's, and the simulation uses today's): the structure the simulator walks
STRUCTURE = frozenset({"placed-once", "group-id", "unknown-job", "pool-nodes", "node-exclusive", "capacity", "pins", "job-pool", "dram",
                       "pool-gpus", "totals"})


def check_plan(args, doc, plan, changed: bool):
    """The solver-free plan check (as ``planner validate-plan``) before a single request is
    simulated: a plan that fails it is refused (exit 2), each violated rule named with where it
    is. A plan of a changed scenario (another digest) is held to its structure only. Returns the
    scenario's placement instance (on the plan's phase-time estimate and margin): its SLOs are
    the ones the simulation is scored against."""
    from formulation.placement.check import check
    from planner.apply.precheck import refusal
    from planner.commands._placement import load_input
    from planner.statusline import status

    rec = doc.solver
    mode = rec.phase_time_estimate if rec.phase_time_estimate in ("conservative", "sampled", "p90", "p99", "max") else None
    with status("simulate: checking the plan (estimating every job's phase times)") as st:
        inst, _name, _digest, _sc = load_input(args.scenario, mode, rec.margin or 0.0, command="simulate", progress=st)
    violations = check(inst, plan, rec, slo_claims=True)
    if changed:
        violations = [v for v in violations if v.rule in STRUCTURE]
    if violations:
        raise refusal("--plan", violations, args.plan, args.scenario,
                      "re-plan with `planner plan` (or edit the fields named)")
    return inst


def _argv(args) -> list[str]:
    import sys

    return sys.argv[2:] if len(sys.argv) > 2 and sys.argv[1] == "simulate" else [args.scenario, "--plan", str(args.plan)]


NAME_WIDTH = 14  # job names in the tables: shortened (head~tail, unique) to this, one name a line


def _short_names(rows, header):
    """Job names shortened uniquely (:func:`planner.commands._plan_summary.abbreviate`), a members
    cell one name a line: on an 80-column terminal rich would otherwise cut or break them mid-name."""
    from planner.commands._plan_summary import abbreviate

    cols = [i for i, h in enumerate(header) if h.startswith(("job", "members"))]
    names = sorted({n for r in rows for i in cols for n in str(r[i]).split(", ")})
    short = abbreviate(names, NAME_WIDTH)
    return [tuple("\n".join(short.get(n, n) for n in str(v).split(", ")) if i in cols else v for i, v in enumerate(r)) for r in rows]
