"""planner status: what runs where (nodes, components, workers, leases) and the last applies."""

from __future__ import annotations

NAME = "status"
HELP = "show what runs where: per node GPUs/DRAM in use and workers, per component its workers and leases"
DESCRIPTION = """Show the cluster as the executor sees it: per node the GPUs and host DRAM in use and
which components' workers run there; per component its role, layout, workers (node, status, lease
epoch); the request ledger; and the last applies in the journal. --json prints the same as JSON."""


def add_arguments(p) -> None:
    from planner.commands import _args

    p.add_argument("--backend", choices=["ray", "sim"], default="sim")
    p.add_argument("--address", help="Ray cluster address (default: auto)")
    p.add_argument("--sim-state", type=_args.path, help="sim backend: the saved cluster (default: .rl-planner/sim-state.sqlite)")
    p.add_argument("--journal", type=_args.path, help="SQLite journal (default: beside the sim state; with Ray, one per cluster address)")
    p.add_argument("--json", action="store_true", help="machine-readable output")


def run(args) -> int:
    import json
    import sys

    from rich.console import Console
    from rich.table import Table

    from executor.backends.base import observe
    from executor.journal import Journal
    from executor.progress import state_table
    from executor.session import journal_path, open_backend
    from planner.commands._args import check_backend_flags

    check_backend_flags(args)
    if args.backend == "sim":
        from executor.session import missing_modules, sim_state_path

        from planner.errors import Problem, UserError

        path = sim_state_path(args.sim_state)
        if not path.exists():
            raise UserError(Problem("--sim-state", f"no simulated cluster at {path}: nothing was applied with --backend sim here",
                                    "apply a plan first (planner apply PLAN --scenario SCENARIO --backend sim"
                                    + ("; a real apply needs the executor extra: pip install 'rl-planner[executor]'"
                                       if missing_modules("sim") else "")
                                    + "), or pass --sim-state of an existing cluster" + _daemon_hint(args.sim_state)))
        if path.is_file() and path.stat().st_size == 0:
            raise UserError(Problem("--sim-state", f"{path} is empty: no simulated cluster was saved in it",
                                    "pass --sim-state of an existing cluster (status reads it and never writes it)"))
    from planner.commands.apply import close_backend

    backend = open_backend(args.backend, address=args.address, sim_state=args.sim_state, observe_only=True)
    try:  # the saved cluster's and the journal's connections are closed when the command ends (run in process too)
        st = observe(backend)
        ledger = backend.coord("ledger_summary")
        jp = journal_path(args.journal, args.backend, sim_state=args.sim_state, address=args.address)
        history = []
        wal = jp.with_name(jp.name + "-wal")
        if jp.exists() and not (jp.is_file() and jp.stat().st_size == 0 and not wal.exists()):  # (an empty file: no applies yet)
            journal = Journal(jp, readonly=True)
            try:
                history = journal.history(5)
            finally:
                journal.close()
    finally:
        close_backend(backend)
    if args.json:
        print(json.dumps({"state": st.to_dict(), "nodes": st.table(), "ledger": ledger, "applies": history}, indent=2, default=str))
        return 0
    con = Console(file=sys.stdout, width=120)
    con.print(state_table(st.table(), f"{backend.name} cluster"))
    t = Table(title="components")
    for col in ("component", "role", "layout", "gen", "workers (node status epoch)"):
        t.add_column(col)
    for c in sorted(st.components.values(), key=lambda c: c.name):
        ws = "; ".join(f"{w.id}@{w.node} {w.status} e{w.epoch}" for w in sorted(c.workers, key=lambda w: w.index))
        t.add_row(c.name, c.role, str(c.layout) if c.role == "trainer" else "-", str(c.generation), ws)
    con.print(t)
    con.print(f"requests: {ledger['done']}/{ledger['requests']} finished, {ledger['handoffs']} handoffs, "
              f"{ledger['rejected_effects']} stale or duplicate effects refused")
    for h in history:  # plain text: a plan named with brackets (or the backend's '[ray]') is not rich markup
        said = ("interrupted (its process is gone): apply the same plan again to resume it, or planner apply "
                "--rollback to undo its unfinished migration") if h.get("interrupted") else f"{h['status']} {h['message']}"
        con.print(f"apply #{h['id']} {h['plan']} [{h['backend']}]: {said}", markup=False, highlight=False)
    return 0


def _daemon_hint(sim_state) -> str:
    """A ``planner daemon --backend sim`` keeps the cluster it applies to in ``STATE.executor-sim`` and
    its journal in ``STATE.journal`` (not beside the cluster, where status looks by default): say so,
    naming the daemon's files when they are in the working folder."""
    if sim_state is not None:
        return ""
    import shlex
    from pathlib import Path

    found = sorted(p.name for p in Path(".").glob("*.executor-sim") if p.is_file())
    if not found:
        return "; a planner daemon's cluster: --sim-state STATE.executor-sim --journal STATE.journal"
    state = found[0][: -len(".executor-sim")]
    return (f"; the planner daemon's here (--state {shlex.quote(state)}): planner status --sim-state "
            f"{shlex.quote(state + '.executor-sim')} --journal {shlex.quote(state + '.journal')}")
