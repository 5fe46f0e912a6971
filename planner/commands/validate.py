"""planner validate SCENARIO...: check scenario files (schema and cross-field checks)."""

from __future__ import annotations

NAME = "validate"
HELP = "check scenario files: schema, names, parallelism, memory fit, SLOs"
DESCRIPTION = """Check one or more scenario files.

Every problem is reported with its file and line, the field path (e.g.
jobs[3].rollout.max_response_tokens), the bad value, and how to fix it. Beyond the checks every
command makes, validate reports a job that no plan can place whatever the other jobs do: one whose
host DRAM (per rollout node, or its training state per training node) fits no node it may use.
`planner plan` refuses such a scenario unless --allow-unplaced; so does validate, which with
--allow-unplaced prints those jobs as warnings and passes the file. Exit status 0 when every file
is valid, 2 otherwise."""


def add_arguments(p) -> None:
    from planner.commands import _args

    p.add_argument("scenarios", nargs="+", type=_args.path, metavar="SCENARIO", help="scenario YAML file(s)")
    p.add_argument("--quiet", "-q", action="store_true", help="print nothing on success")
    p.add_argument("--json", action="store_true", help="print one JSON object per file: ok, name, jobs, nodes or the problems")
    p.add_argument("--allow-unplaced", action="store_true",
                   help="pass a file whose only problems are jobs no plan can place (as planner plan --allow-unplaced plans the "
                        "others); they are printed as warnings")


def run(args) -> int:
    import sys

    from planner.errors import UserError
    from planner.dockind import SCENARIO, expect
    from planner.schema import load_scenario
    from planner.schema.checks import placeable_problems

    failed = 0
    report = []
    for path in args.scenarios:
        try:
            found = expect(path, [SCENARIO], "SCENARIO", "validate")
            sc = load_scenario(path, parsed=found.doc)
            unplaceable = placeable_problems(sc, found.doc)
            if unplaceable and not args.allow_unplaced:
                raise UserError(unplaceable, title=f"{path}: invalid scenario")
        except UserError as exc:
            if args.json:
                report.append({"file": path, "ok": False, "error": exc.render()})
            else:
                print(f"error: {exc.render()}", file=sys.stderr)
            failed += 1
            continue
        nodes = sum(g.count for g in sc.cluster.node_groups)
        if args.json:
            entry = {"file": path, "ok": True, "scenario": sc.name, "jobs": len(sc.jobs), "nodes": nodes}
            if unplaceable:
                entry["warnings"] = [p.render() for p in unplaceable]
            report.append(entry)
            continue
        for p in unplaceable:  # only with --allow-unplaced
            print(f"warning: {p.render()}", file=sys.stderr)
        if not args.quiet:
            print(f"ok: {path}: scenario '{sc.name}', {len(sc.jobs)} job(s), {nodes} node(s)")
    if args.json:
        import json

        print(json.dumps(report, indent=2))
    return 2 if failed else 0
