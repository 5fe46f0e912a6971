"""Printing a step plan, and the live progress display of an apply (rich)."""

from __future__ import annotations

from typing import Any, TextIO

from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress as RichProgress, TextColumn, TimeElapsedColumn
from rich.table import Table

from executor.diff import StepPlan


def print_plan(plan: StepPlan, out: TextIO) -> None:
    if not plan.steps:
        out.write("nothing to do: the cluster already matches the plan\n")
        return
    out.write(f"{len(plan.steps)} step(s) in {len(plan.units)} unit(s):\n")
    for note in plan.notes:
        out.write(f"note: {note}\n")
    for u in plan.units:
        out.write(f"\n[{u.kind}] {u.component}: {u.cause}\n")
        for s in u.steps:
            out.write(s.describe() + "\n")
    t = totals(plan)
    out.write(f"\ntotals: {len(plan.steps)} step(s): " + ", ".join(f"{n} {k}" for k, n in t["steps"].items())
              + f"; {len(plan.units)} unit(s): " + ", ".join(f"{n} {k}" for k, n in t["units"].items()) + "\n")


def totals(plan: StepPlan) -> dict:
    """How many steps and units of each kind the diff holds (most first): its last line."""
    from collections import Counter

    def ordered(c: Counter) -> dict:
        return dict(sorted(c.items(), key=lambda kv: (-kv[1], kv[0])))

    return {"steps": ordered(Counter(s.kind for s in plan.steps)), "units": ordered(Counter(u.kind for u in plan.units))}


def plan_json(plan: StepPlan) -> dict:
    """The diff as data (``planner apply --dry-run --json``): units with their cause and steps in order."""
    return {"steps": len(plan.steps), "notes": list(plan.notes), "totals": totals(plan),
            "units": [{"id": u.id, "component": u.component, "kind": u.kind, "cause": u.cause, "after": list(u.after),
                       "steps": [{"seq": s.seq, "id": s.id, "kind": s.kind, "cause": s.cause} for s in u.steps]}
                      for u in plan.units]}


def state_table(rows: list[dict], title: str) -> Table:
    t = Table(title=title)
    for col in ("node", "gpu_type", "alive", "GPUs", "DRAM GB", "workers"):
        t.add_column(col)
    for r in rows:
        known = r["alive"] or bool(r["gpu_type"])  # (Ray reports a dead node without its resources: '?', not '/0')
        t.add_row(r["node"], r["gpu_type"] or "?", "yes" if r["alive"] else "DEAD", f"{r['gpus_used']}/{r['gpus'] if known else '?'}",
                  f"{r['dram_used_gb']:.1f}/{r['dram_gb']:g}" if known else f"{r['dram_used_gb']:.1f}/?",
                  r["workers"])  # GB to 0.1: --json has the exact figure
    return t


class Progress:
    """One bar over the steps; a line per failed or compensated step and per event with its cause
    (``verbose``: a line per step outcome too)."""

    def __init__(self, steps: list, verbose: bool = False) -> None:
        self.verbose = verbose
        self.console = Console(stderr=True)
        # the bar on a terminal only: piped or written to a file, stderr holds the failures and events alone
        self.bar = RichProgress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                                console=self.console, transient=False, disable=not self.console.is_terminal)
        self.task = self.bar.add_task("applying", total=len(steps))

    def __enter__(self) -> "Progress":
        self.bar.__enter__()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.bar.__exit__(*exc)

    def update(self, step, status: str, data: Any = None) -> None:
        if status == "running":
            self.bar.update(self.task, description=escape(f"{step.kind} {step.id}"))
            return
        if status in ("done", "skipped (done before)"):
            self.bar.advance(self.task)
        extra = f": {data}" if status in ("failed", "compensated") and data else ""
        if not (self.verbose or status in ("failed", "compensated")):
            return
        # plain text: a failure's message is not rich markup (gloo's '[/path/pair.cc:537] Read error' was
        # a MarkupError raised from this callback, which cut the failed unit's rollback short)
        self.console.print(f"  {status:<22} {step.id}{extra}", highlight=False, markup=False)

    def event(self, e: dict) -> None:
        if e["what"] in ("declared dead", "rolled back", "rehomed", "adopted"):
            self.console.print(f"  ! {e['what']}: {e.get('worker', e.get('unit', ''))} because {e['cause']}", highlight=False, markup=False)
