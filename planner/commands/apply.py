"""planner apply PLAN: diff the plan against the running cluster and carry the steps out."""

from __future__ import annotations

from contextlib import contextmanager

NAME = "apply"
HELP = "apply a plan to a cluster (Ray or the in-process sim): diff to safe steps, journaled"
DESCRIPTION = """Apply a plan document (ExecutorTarget, ReallocPlan, or PlacementPlan with --scenario).

The plan is diffed against what runs: every change becomes ordered steps, each with its cause,
that create before they destroy and never overfill a node's GPUs or host DRAM. --dry-run prints
them. Otherwise each step is journaled (intent before acting, outcome after) in --journal; a
failed step rolls its migration back, and an apply interrupted by a crash resumes when the same
plan is applied again (or is undone with --rollback).

Exit status: 0 applied (or nothing to do), 1 the apply failed and was rolled back, 2 bad input
or a plan that cannot be reached safely (the reason is printed), 143 stopped by SIGTERM after the
step in progress (apply the plan again to resume it)."""


def add_arguments(p) -> None:
    from planner.commands import _args

    p.add_argument("plan", type=_args.path, metavar="PLAN", nargs="?", help="plan document (YAML or JSON)")
    p.add_argument("--backend", choices=["ray", "sim"], default="sim", help="where workers run (default: sim)")
    p.add_argument("--address", help="Ray cluster address (default: auto); 'local' starts one from the plan's nodes")
    p.add_argument("--dry-run", action="store_true", help="print the steps with their causes; change nothing")
    p.add_argument("--json", action="store_true", help="print the diff (--dry-run) or the outcome as JSON on stdout")
    p.add_argument("--verbose", "-v", action="store_true", help="a line per step outcome (default: only failed or compensated steps)")
    p.add_argument("--journal", type=_args.path, help="SQLite journal (default: beside the sim state, SIM_STATE.journal; with Ray, one per cluster "
                                     "address under ~/.rl-planner/journals)")
    p.add_argument("--sim-state", type=_args.path, help="sim backend: the saved cluster (default: .rl-planner/sim-state.sqlite)")
    p.add_argument("--scenario", type=_args.path, help="the scenario a PlacementPlan was made from")
    p.add_argument("--rollback", action="store_true", help="undo the unfinished migration of an interrupted apply")
    p.add_argument("--stage", action="store_true",
                   help="when no capacity-safe order of the migrations exists (e.g. groups that swap nodes), stop the fewest "
                        "components needed first and restart them from their saved state once the others made room")
    p.add_argument("--allow-stop-all", action="store_true",
                   help="apply a target that runs nothing, or keeps none of the running components (it stops every worker)")
    p.add_argument("--mode", choices=["conservative", "sampled", "p90", "p99", "max"], default=None,
                   help="PlacementPlan: the phase-time estimate the plan check uses (as in validate-plan; default: the one the "
                        "plan records, with its margin)")
    p.add_argument("--start-timeout", type=_args.seconds(_args.TIME_LIMIT_S), default=60.0, help="seconds a worker may take to be placed and ready")
    p.add_argument("--call-timeout", type=_args.seconds(_args.TIME_LIMIT_S), default=30.0, help="seconds any call to a worker may take")


def run(args) -> int:
    import sys
    from contextlib import ExitStack

    from executor.journal import Fenced

    # Every journal and the simulated cluster's connection opened by the command is closed when it
    # ends, also on an error (run in process, planner.cli.main left them open until a collection).
    with ExitStack() as held:
        try:
            return _run(args, held)
        except Fenced as exc:  # another controller changed the cluster meanwhile: this one stopped without writing
            print(f"error: {exc}. Fix: check 'planner status'; the apply that changed it holds the cluster now", file=sys.stderr)
            return 1


def _run(args, held) -> int:
    import sys

    from planner.errors import Problem, UserError

    from executor.backends.base import Deadlines, observe
    from executor.controller import Executor, reap
    from executor.diff import diff
    from executor import session
    from executor.journal import Journal
    from executor.progress import Progress, print_plan
    from executor.session import crash_hook_from_env, journal_path
    from planner.apply.documents import check_kind, plan_digest, read_target

    def open_journal(path) -> Journal:  # each one made is closed when the command ends
        j = Journal(path)
        held.callback(j.close)
        return j

    def open_backend(*a, **k):
        b = session.open_backend(*a, **k)
        held.callback(close_backend, b)
        return b

    from planner.commands._args import check_backend_flags

    check_backend_flags(args)
    for name in ("start_timeout", "call_timeout"):
        if getattr(args, name) <= 0:
            raise UserError(Problem(f"--{name.replace('_', '-')}", f"must be > 0, got {getattr(args, name)}", "give seconds, e.g. 30"))
    deadlines = Deadlines(start_s=args.start_timeout, call_s=args.call_timeout)
    if args.backend == "ray" and args.address != "local" and not args.journal:
        session.connect_ray(args.address)  # the journal is the cluster's, whichever alias --address names it by
    if args.rollback:
        jp = journal_path(args.journal, args.backend, sim_state=args.sim_state, address=args.address)
        _check_writable(args, jp)
        if args.backend == "sim":
            from executor.session import sim_state_path

            where = sim_state_path(args.sim_state)
            if not where.exists():  # (the journal never names an apply before its cluster's file exists: ensure_saved)
                print(f"nothing to roll back: no simulated cluster at {where} yet")
                return 0
        backend = open_backend(args.backend, address=args.address, sim_state=args.sim_state, deadlines=deadlines)
        res = Executor(backend, open_journal(jp)).rollback_unfinished()
        if res is None:  # no journaled apply: what the cluster itself says about an interrupted one
            from executor.recover import settle

            notes = settle(backend)
            print("nothing to roll back" if not notes else "no journaled apply; from the cluster itself:\n  " + "\n  ".join(notes))
            return 0
        if res.status == "failed":  # (a unit past its commit point rolled forward, and a step of it failed)
            print(f"error: apply #{res.apply_id} {res.status}: {res.message}", file=sys.stderr)
            return 1
        print(f"apply #{res.apply_id}: {res.message}")
        return 0
    if not args.plan:
        raise UserError(Problem("PLAN", "missing", "give a plan file, or --rollback"))
    backend = None
    # Nodes named in the plan let the sim (or a local Ray cluster) be created from it.
    from executor.target import KIND

    from planner import plandoc

    from planner.apply import precheck

    check_kind(args.plan)
    doc = plandoc.read(args.plan)
    # the plan check (as validate-plan's) before anything is opened or changed
    if doc.kind == "PlacementPlan" and args.scenario:
        precheck.check_placement_doc(doc, args.plan, args.scenario, args.mode)
    if doc.kind in (KIND, "PlacementPlan") and not args.dry_run and not args.allow_stop_all:
        precheck.check_not_empty(len(doc.body.get("components") or []) if doc.kind == KIND else len(doc.body.get("groups") or []))
    nodes = None
    listed = None
    if doc.kind == KIND and doc.body.get("nodes"):
        listed = doc.body["nodes"]
    elif doc.kind == "PlacementPlan" and args.scenario:
        # a fresh simulated (or local Ray) cluster is made of the scenario's nodes, named as the planner names them
        from planner.apply.placement import scenario_nodes
        from planner.schema import load_scenario

        listed = scenario_nodes(load_scenario(args.scenario))
    if listed:
        from executor.state import Node

        nodes = [Node(n["name"], n["gpu_type"], n["gpus"], n["dram_gb"], n.get("alive", True)) for n in listed]
    jp = journal_path(args.journal, args.backend, sim_state=args.sim_state, address=args.address)
    if not args.dry_run:
        _check_writable(args, jp)
    unfinished = open_journal(jp).unfinished() if jp.exists() else None
    if unfinished and args.backend == "sim":
        from executor.session import sim_state_path

        sp = sim_state_path(args.sim_state)
        if not sp.exists():
            raise UserError(Problem("--sim-state", f"the journal {jp} holds the interrupted apply #{unfinished['id']} of "
                                    f"{unfinished['plan_name']!r}, but the simulated cluster it was applied to ({sp}) is gone",
                                    "restore that file (or pass the right --sim-state); starting an empty cluster would drop "
                                    "the interrupted apply and everything that ran"))
    if unfinished and unfinished["plan_digest"] != plan_digest(doc) and not args.dry_run:
        # Refused before touching the cluster: another plan's apply is half done.
        open_journal(jp).open_apply(plan_digest(doc), args.plan, args.backend, [])
    backend = open_backend(args.backend, address=args.address, sim_state=args.sim_state, nodes=nodes, deadlines=deadlines,
                           observe_only=args.dry_run)
    target, name, digest = read_target(args.plan, lambda: observe(backend), args.scenario)
    if unfinished and unfinished["plan_digest"] == digest and not args.dry_run:
        # An interrupted apply of this very plan: finish the journaled steps, do not re-diff.
        from executor.diff import StepPlan

        plan = StepPlan([], unfinished["steps"], observe(backend), target)
    else:
        if not args.dry_run:  # no journaled apply: settle a migration the cluster itself shows half done (journal lost)
            from executor.recover import settle

            for note in settle(backend):
                print(f"recovered: {note}")
        observed = observe(backend)
        if not args.dry_run and not args.allow_stop_all:
            precheck.check_not_all_stopping(observed, target)
        plan = diff(observed, target, stage=args.stage)
    if args.dry_run:
        if args.json:
            import json

            from executor.progress import plan_json

            print(json.dumps({"plan": name, "dry_run": True, **plan_json(plan)}, indent=2))
        else:
            print_plan(plan, sys.stdout)
        return 0
    if not plan.steps:
        if args.json:
            import json

            print(json.dumps({"plan": name, "status": "done", "steps": 0}))
        else:
            print("nothing to do: the cluster already matches the plan")
        return 0
    journal = open_journal(jp)
    try:
        with Progress(plan.steps, verbose=args.verbose) as prog, _stop_on_sigterm(prog.update) as on_step:
            ex = Executor(backend, journal, faults=crash_hook_from_env(), on_step=on_step, on_event=prog.event)
            res = ex.apply(plan.steps, name, digest)
    except _Stopped:
        if hasattr(backend, "save"):
            backend.save(whole=True)
        print(f"stopped on SIGTERM after the step in progress: the apply of {name} is interrupted (journal {jp}). Fix: "
              f"apply {name} again to resume it, or 'planner apply --rollback' to undo its unfinished migration", file=sys.stderr)
        if args.json:
            import json

            print(json.dumps({"plan": name, "status": "interrupted", "steps": len(plan.steps), "journal": str(jp)}))
        return 143
    reaped = reap(backend)
    if hasattr(backend, "save"):
        backend.save(whole=True)  # the simulated cluster's file is left with its coordinator in one row
    for r in reaped:
        print(f"reaped {r}")
    from executor.session import sim_state_path

    gone = [str(p) for p in ([jp] + ([sim_state_path(args.sim_state)] if args.backend == "sim" else [])) if not p.exists()]
    if gone:  # written through descriptors of files removed meanwhile: nothing of the apply is kept
        print(f"error: apply #{res.apply_id}: {', '.join(gone)} was removed while the apply ran: what it did is not kept "
              "(the simulated cluster and the journal live in those files). Fix: restore them, or apply again to a new "
              "--sim-state", file=sys.stderr)
        return 1
    if args.json:
        import json

        print(json.dumps({"plan": name, "apply_id": res.apply_id, "status": res.status, "message": res.message,
                          "steps": len(plan.steps), "resumed": bool(res.resumed), "reaped": list(reaped),
                          "journal": str(jp)}, indent=2))
        return 0 if res.status == "done" else 1
    if res.status == "done":
        print(f"applied {name}: {len(plan.steps)} step(s){' (resumed)' if res.resumed else ''}; journal {jp}")
        return 0
    print(f"error: apply #{res.apply_id} {res.status}: {res.message}", file=sys.stderr)
    return 1


class _Stopped(BaseException):
    """SIGTERM came: raised from the step callback once the step in progress is journaled done (a
    BaseException, outside the controller's error handling: nothing is rolled back)."""


@contextmanager
def _stop_on_sigterm(update):
    """While the apply runs, SIGTERM stops it after the step in progress (a second one kills it at once):
    it used to die mid-step (on Ray with the core's crash dump), leaving that step to be redone."""
    import os
    import signal
    import sys

    asked: list[int] = []

    def on_term(signum, frame) -> None:
        if asked:
            os._exit(143)
        asked.append(signum)
        print("SIGTERM: stopping after the step in progress (send it again to stop at once)", file=sys.stderr, flush=True)

    def on_step(step, status, data=None) -> None:
        update(step, status, data)
        if asked and status in ("done", "skipped (done before)"):
            raise _Stopped()

    try:
        before = signal.signal(signal.SIGTERM, on_term)
    except ValueError:  # not the main thread (planner.cli.main run in a thread): no handler
        yield update
        return
    try:
        yield on_step
    finally:
        signal.signal(signal.SIGTERM, before)


def _check_writable(args, journal) -> None:
    """Before the journal records anything (apply, resume, rollback): the journal and (on the sim
    backend) the simulated cluster's file, their folders (SQLite writes its -wal and -shm files there;
    a missing one is created, so the folder above must be writable) and their -wal and -shm files
    (left by a killed apply) are writable. A read-only one was an internal error in the middle of an
    apply, with the journal left naming a running apply."""
    from pathlib import Path

    from executor.session import sim_state_path
    from planner.safewrite import check_sqlite_writable

    who = "the user running planner apply"
    checks = [(Path(journal), "--journal", "apply journal")]
    if args.backend == "sim":  # (first when the journal's path is made from it: the refusal names the option given)
        sim = (sim_state_path(args.sim_state), "--sim-state", "simulated cluster's state")
        checks = [sim] + checks if args.journal is None else checks + [sim]
    for path, where, what in checks:
        check_sqlite_writable(path, where, what, who=who, make_folder=True)


def close_backend(backend) -> None:
    """The simulated cluster's connection is closed (without another save: a completed apply saved
    it, a failed command must not write). A Ray backend is left as it is: a cluster the user gave
    by --address is never shut down, and one started by --address local ends with the process."""
    if getattr(backend, "name", None) == "sim":
        backend.close(save=False)
