"""Reproduce the published results with the simulator; each writes results/reproductions/<name>.md.

    python -m planner.sim.reproduce NAME [--decision planner|threshold] [--seeds N] [--out DIR]
                                         [--workers N | --ray-address ADDR] [--check [--budget-s S]]

NAME is one of (``all`` runs every one, and writes ``README.md``, the summary, from their rows):

* ``dynarl-math``: DynaRL math RL, 1.5B / 7B / 32B on 64 and 128 H100s (and 7B-64 on a held-out
  heavy-tailed length distribution of the same mean): dynamic reallocation against the scenario's
  static split, the best static split of the same nodes (every rollout/training node split
  simulated), the simulator's threshold baseline, static without streaming, per-sample intake and
  colocated (published 1.27-1.98x);
* ``agentic``: agentic RL with and without request priority, static and dynamic (published
  1.27-1.64x), and a set-up where priority is the mechanism (KV pressure, tool calls, cached
  prefixes; rollout-bound), with and without priority on the same split;
* ``sweep``: the U_low and T sensitivity of the dynamic policy (published: a plateau for U_low
  0.1-0.3 and T 2-8 s);
* ``weave-equal-cost``: Weave's throughput per dollar against Solo-D and colocated pools on
  ``scenarios/weave-micro.yaml`` (published 1.82-1.99x and 1.35-1.47x);
* ``trace-cost``: cost of a multi-job trace (``scenarios/weave-trace-60.yaml``) under groups
  versus Solo-D, with SLO attainment (published 1.84x lower at 100% SLO);
* ``consolidation``: long-tail consolidation in groups (published 1.06-1.28x);
* ``sync``: topology-aware weight sync (scatter across clusters, broadcast inside) versus flat;
* ``trace-baselines``: groups against Solo-D, veRL and a Gavel+-like placer on the Pollux-derived
  and the Weave-like trace (:mod:`planner.sim.trace_baselines`);
* ``slo-curve``: the cost-SLO curve over phase-time estimates on both traces (:mod:`planner.sim.slo_curve`).

Each reproduction lives in its own module, which this driver registers in :data:`REPRODUCTIONS` and
:data:`TASKS` (none imports the driver back): :mod:`planner.sim.repro_jobs` (the DynaRL job tasks and
baselines they share), :mod:`planner.sim.repro_dynarl_math`, :mod:`planner.sim.repro_agentic`,
:mod:`planner.sim.repro_sweep`, :mod:`planner.sim.repro_weave` (weave-equal-cost, trace-cost,
consolidation), :mod:`planner.sim.repro_sync`, :mod:`planner.sim.trace_baselines`, :mod:`planner.sim.slo_curve`;
:mod:`planner.sim.repro_common` holds the paths and the table header.

Every simulation is a :class:`planner.sim.parallel.Task` (plain-data arguments, JSON result); the
tasks of all requested reproductions run side by side (``--workers`` local processes, default one
per CPU, or Ray tasks with ``--ray-address``; :mod:`planner.sim.parallel`), duplicates once. Each
``NAME.json`` keeps every task's result and wall time, the rows and the arguments; each ``NAME.md``
carries the command that made it, the machine, the paper's figure beside ours, and the wall time of
every simulation.

``--check`` re-computes every task of the committed files (with the arguments recorded in them),
rebuilds rows and Markdown, and fails (exit 1) on any difference beyond a relative 1e-6 for numbers
(the machine line and the wall times excepted); nothing is written. ``--budget-s S`` checks only the
cheapest tasks (by their recorded wall time) up to S seconds, and the rows of reproductions whose
tasks all fit: the default test run's subset. After a change that moves simulated numbers,
``python -m planner.sim.reproduce all`` regenerates everything.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from pathlib import Path

from planner.sim import slo_curve, trace_analysis, trace_baselines, trace_optimum
from planner.sim.parallel import Task, normalise, run_tasks
from planner.sim.repro_agentic import PRIORITY_SCENARIO, agentic, agentic_tasks
from planner.sim.repro_common import OUT, ROOT
from planner.sim import repro_dynarl
from planner.sim.repro_dynarl import oracle_task
from planner.sim.repro_dynarl_math import dynarl_math, dynarl_tasks
from planner.sim.repro_jobs import job_task, pair_task
from planner.sim.repro_sweep import sweep, sweep_tasks
from planner.sim.repro_sync import sync, sync_task, sync_tasks
from planner.sim.repro_weave import (consolidation, consolidation_tasks, trace_cost, trace_cost_tasks, trace_task,
                                     weave_equal_cost, weave_equal_cost_tasks)

NAMES = ("dynarl-math", "agentic", "sweep", "weave-equal-cost", "trace-cost", "consolidation", "sync", "trace-baselines", "slo-curve")
REL_TOL = 1e-6
WALL_MARK = "## Wall time of each simulation"


def pair(scenario: str, decision: str, seeds: int, iterations: int, lengths=None) -> dict:
    """The ``pair`` task: static and dynamic on the same seeds; ``--decision completion`` runs
    :func:`planner.sim.repro_dynarl.pair_completion` (the dispatch lives here, in the driver, so that
    neither reproduction module imports the other back)."""
    if decision == "completion":
        return repro_dynarl.pair_completion(scenario, seeds, iterations, lengths)
    return pair_task(scenario, decision, seeds, iterations, lengths)


def dynarl_math_tasks(args) -> list[Task]:
    return repro_dynarl.tasks(args) if args.decision == "completion" else dynarl_tasks(args)


def dynarl_math_report(args, cmd, R) -> tuple[list[str], list[dict]]:
    return repro_dynarl.report(args, cmd, R) if args.decision == "completion" else dynarl_math(args, cmd, R)


TASKS = {"job": job_task, "pair": pair, "trace": trace_task, "policy": trace_baselines.policy_task, "curve": slo_curve.curve_task,
         "online": trace_optimum.online_task, "instant": trace_optimum.instant_task}
TASKS["misses"] = trace_analysis.misses_task
TASKS["ceiling"] = trace_analysis.ceiling_task
TASKS["sync"] = sync_task
TASKS["oracle"] = oracle_task


# ------------------------------------------------------------------------------------ driver
REPRODUCTIONS = {"dynarl-math": (dynarl_math_tasks, dynarl_math_report), "agentic": (agentic_tasks, agentic),
                 "sweep": (sweep_tasks, sweep), "weave-equal-cost": (weave_equal_cost_tasks, weave_equal_cost),
                 "trace-cost": (trace_cost_tasks, trace_cost), "consolidation": (consolidation_tasks, consolidation),
                 "sync": (sync_tasks, sync), "trace-baselines": (trace_baselines.tasks, trace_baselines.report),
                 "slo-curve": (slo_curve.tasks, slo_curve.report)}
RUN_ARGS = ("decision", "seeds", "iterations", "trace_iterations")


class Results:
    """Task results by key; calling it with a task's function name and arguments gives its result."""

    def __init__(self, done: dict) -> None:
        self.done = done
        self.used: list[str] = []

    def __call__(self, _fn: str, **kwargs):
        key = Task(_fn, kwargs).key
        self.used.append(key)
        return self.done[key]["result"]


def _command(name: str, args) -> str:
    return (f"python -m planner.sim.reproduce {name} --decision {args.decision} --seeds {args.seeds} "
            f"--iterations {args.iterations} --trace-iterations {args.trace_iterations}")


def render(name: str, args, done: dict) -> tuple[str, dict]:
    """(Markdown, JSON document) of one reproduction from the task results ``done``."""
    tasks_fn, report = REPRODUCTIONS[name]
    cmd = _command(name, args)
    R = Results(done)
    lines, rows = report(args, cmd, R)
    planned = {t.key: t for t in tasks_fn(args)}
    walls = [(k, done[k]["wall_s"]) for k in planned]
    lines += ["", WALL_MARK, "", f"{len(walls)} simulations, {sum(w for _, w in walls):.0f} s of CPU wall time in all (run side by "
              "side: see `--workers`); each, longest first:", "", "| simulation | wall (s) |", "|---|---:|"]
    for k, w in sorted(walls, key=lambda kw: -kw[1]):
        lines.append(f"| `{k}` | {w:.1f} |")
    doc = {"command": cmd, "args": {a: getattr(args, a) for a in RUN_ARGS}, "rows": normalise(rows),
           "tasks": {k: {"fn": t.fn, "kwargs": t.kwargs, **done[k]} for k, t in planned.items()}}
    return "\n".join(lines) + "\n", doc


# ------------------------------------------------------------------------------------ check
WALL_CLOCK_KEYS = frozenset({"search_s"})  # result fields that time the machine (the oracle's search), not the model


def diff(a, b, path: str = "") -> list[str]:
    """Differences between two JSON values: numbers beyond a relative :data:`REL_TOL`, anything else unequal; fields
    named in :data:`WALL_CLOCK_KEYS` measure the machine and are not compared."""
    if isinstance(a, bool) or isinstance(b, bool) or a is None or b is None or isinstance(a, str) or isinstance(b, str):
        return [] if a == b else [f"{path or '.'}: committed {b!r}, now {a!r}"]
    if isinstance(a, (int, float)) and isinstance(b, (int, float)):
        if (isinstance(a, float) and math.isnan(a)) and (isinstance(b, float) and math.isnan(b)):
            return []
        return [] if math.isclose(a, b, rel_tol=REL_TOL, abs_tol=1e-9) else [f"{path}: committed {b!r}, now {a!r}"]
    if isinstance(a, dict) and isinstance(b, dict):
        out = [f"{path}.{k}: missing now" for k in b if k not in a] + [f"{path}.{k}: not committed" for k in a if k not in b]
        for k in a:
            if k in b and k not in WALL_CLOCK_KEYS:
                out += diff(a[k], b[k], f"{path}.{k}")
        return out
    if isinstance(a, list) and isinstance(b, list):
        if len(a) != len(b):
            return [f"{path}: {len(b)} committed entries, {len(a)} now"]
        return [d for i, (x, y) in enumerate(zip(a, b)) for d in diff(x, y, f"{path}[{i}]")]
    return [f"{path}: committed {b!r}, now {a!r}"]


def _stable(md: str) -> list[str]:
    """The Markdown without what depends on the machine: the machine line and the wall-time section."""
    body = md.split(WALL_MARK)[0]
    return [ln for ln in body.splitlines() if not ln.startswith("Machine:")]


def check(names, out: Path, workers, ray_address, budget_s) -> int:
    """Re-compute the committed tasks (all, or the cheapest within ``budget_s``) and compare."""
    committed = {}
    for n in names:
        p = out / f"{n}.json"
        if not p.exists():
            print(f"FAIL {n}: {p} is missing (run python -m planner.sim.reproduce {n})")
            return 1
        committed[n] = json.loads(p.read_text())
    todo: dict[str, tuple[str, Task, float]] = {}
    for n, doc in committed.items():
        for key, t in doc.get("tasks", {}).items():
            todo.setdefault(key, (n, Task(t["fn"], t["kwargs"]), float(t["wall_s"])))
    chosen = sorted(todo.values(), key=lambda v: v[2])
    if budget_s is not None:
        picked: list[tuple] = []
        spent = 0.0
        for v in chosen:
            if spent + v[2] > budget_s and picked:  # at least the cheapest one
                break
            picked.append(v)
            spent += v[2]
        chosen = picked
    t0 = time.perf_counter()
    done = run_tasks(TASKS, [v[1] for v in chosen], workers, ray_address)
    problems = []
    for n, doc in committed.items():
        for key, t in doc["tasks"].items():
            if key in done:
                problems += [f"{n}: {key}{d}" for d in diff(done[key]["result"], t["result"])]
        if all(k in done for k in doc["tasks"]):
            args = argparse.Namespace(**doc["args"])
            full = {**doc["tasks"], **done}
            md, new = render(n, args, full)
            problems += [f"{n}: rows{d}" for d in diff(new["rows"], doc["rows"])]
            old_md = (out / f"{n}.md").read_text() if (out / f"{n}.md").exists() else ""
            if _stable(md) != _stable(old_md):
                a, b = _stable(md), _stable(old_md)
                first = next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))
                problems.append(f"{n}.md differs from what the code generates, first at line {first + 1}: "
                                f"{(b[first] if first < len(b) else '<end>')[:160]!r} vs {(a[first] if first < len(a) else '<end>')[:160]!r}")
    checked = len(chosen)
    print(f"checked {checked} of {len(todo)} simulations in {time.perf_counter() - t0:.1f} s: "
          + ("all match" if not problems else f"{len(problems)} difference(s)"))
    for prob in problems:
        print("  " + prob)
    return 1 if problems else 0


# ------------------------------------------------------------------------------------ README
def readme(rows_by: dict) -> str:
    """The summary table of ``README.md``, from the reproductions' rows."""
    def rng(v, fmt="{:.2f}x"):
        return fmt.format(min(v)) if max(v) - min(v) < 5e-3 else (fmt + "-" + fmt).format(min(v), max(v)).replace("x-", "-")

    L = ["# Published results, reproduced with the simulator", "",
         "Generated by `python -m planner.sim.reproduce all` from the rows of each file (the exact command heads each "
         "file); `python -m planner.sim.reproduce all --check` re-computes every simulation and fails on any difference. "
         "Simulated times do not depend on the machine; wall times do (each file lists every simulation's).", "",
         "| what | paper | ours | file |", "|---|---|---|---|"]
    d = rows_by.get("dynarl-math")
    if d:
        L.append(f"| DynaRL math RL, dynamic vs static (1.5B/7B/32B, 64 and 128 H100; 7B-64 heavy tail) | 1.27-1.98x | "
                 f"{rng([r['static'] / r['dynamic'] for r in d])} over the scenario's split; "
                 f"{rng([r['best_static'] / r['dynamic'] for r in d])} over the best static split of the same nodes; "
                 f"{rng([r['threshold'] / r['dynamic'] for r in d])} over the threshold baseline | `dynarl-math.md` |")
    a = rows_by.get("agentic")
    if a:
        by = {(r["scenario"], r["policy"], r["queue"]): r for r in a}
        kv = [r for r in a if r["scenario"] == PRIORITY_SCENARIO]
        pr = by[(PRIORITY_SCENARIO, "static", "fifo")]["iter_s"] / by[(PRIORITY_SCENARIO, "static", "priority")]["iter_s"] if kv else math.nan
        dy = [r["speedup"] for r in a if r["policy"] == "dynamic"]
        vb = [r["best_static"] / r["iter_s"] for r in a if "best_static" in r]
        L.append(f"| DynaRL agentic RL with / without request priority | 1.27-1.64x | priority on the same split: "
                 f"{pr:.2f}x on the rollout-bound `{PRIORITY_SCENARIO}`; dynamic over static FIFO {rng(dy)}"
                 + (f", over the best static split {rng(vb)}" if vb else "") + " | `agentic.md` |")
    s = rows_by.get("sweep")
    if s:
        best = min(r["iteration_s"] for r in s)
        inside = [best / r["iteration_s"] for r in s if 0.1 <= r["u_low"] <= 0.3 and 2.0 <= r["window_s"] <= 8.0]
        L.append(f"| DynaRL U_low / T sensitivity | plateau for U_low 0.1-0.3, T 2-8 s | {rng(inside, '{:.2f}')} relative "
                 f"throughput inside that range; the cells {rng([r['static_s'] / r['iteration_s'] for r in s])} over static, "
                 f"{rng([r['best_static_s'] / r['iteration_s'] for r in s])} over the best static split | `sweep.md` |")
    w = rows_by.get("weave-equal-cost")
    if w:
        g = max(r["tokens_per_dollar"] for r in w if r["policy"] == "groups")
        solo = next(r for r in w if r["policy"] == "solo-d")["tokens_per_dollar"]
        colo = next(r for r in w if r["policy"] == "colocated-jobs")["tokens_per_dollar"]
        L.append(f"| Weave throughput at equal cost vs Solo-D / colocated | 1.82-1.99x / 1.35-1.47x | {g / solo:.2f}x / "
                 f"{g / colo:.2f}x (weave-micro) | `weave-equal-cost.md` |")
    t = rows_by.get("trace-cost")
    if t:
        base = next(r for r in t if r["policy"] == "solo-d")["cost"]
        best = max((base / r["cost"], r["jobs_meeting_slo"]) for r in t if r["policy"] == "groups")
        L.append(f"| Weave cost on a multi-job trace vs Solo-D at 100% SLO | 1.84x lower | {best[0]:.2f}x lower, "
                 f"{100 * best[1]:.0f}% of jobs meeting their SLO (weave-trace-60) | `trace-cost.md` |")
    c = rows_by.get("consolidation")
    if c:
        gains = ", ".join(f"{r['with'] / r['without']:.2f}x ({r['scenario'].removesuffix('.yaml')}, {r['tables']})" for r in c)
        L.append(f"| Weave long-tail consolidation | 1.06-1.28x | {gains} | `consolidation.md` |")
    y = rows_by.get("sync")
    if y:
        L.append(f"| Weave topology-aware weight sync | (no figure quoted) | {rng([r['flat_s'] / r['topo_s'] for r in y], '{:.1f}x')} "
                 "faster sync | `sync.md` |")
    L += trace_baselines.readme_rows(rows_by.get("trace-baselines")) + slo_curve.readme_rows(rows_by.get("slo-curve"))
    L += ["", "Each file says where ours differs and why. Calibration: `../simulator/calibration.md`; speed: "
          "`../simulator/bench.md`."]
    return "\n".join(L) + "\n"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("name", choices=NAMES + ("all",))
    ap.add_argument("--decision", choices=["planner", "threshold", "completion"], default="completion")
    ap.add_argument("--seeds", type=int, default=1)
    ap.add_argument("--iterations", type=int, default=2, help="iterations per request-level run")
    ap.add_argument("--trace-iterations", type=int, default=30, help="iterations per job in the fixed-mix Weave runs")
    ap.add_argument("--out", default=str(OUT))
    ap.add_argument("--workers", type=int, default=None, help="local worker processes (default: one per CPU)")
    ap.add_argument("--ray-address", default=None, help="run the simulations as Ray tasks on this cluster ('local': start one)")
    ap.add_argument("--check", action="store_true", help="re-compute the committed results and fail on any difference")
    ap.add_argument("--budget-s", type=float, default=None, help="with --check: only the cheapest simulations up to this many seconds")
    ap.add_argument("--resume", action="store_true", help=f"reuse the results of an interrupted run ({RESUME_FILE.relative_to(ROOT)}; "
                    "only if the code has not changed since)")
    args = ap.parse_args(argv)
    if min(args.seeds, args.iterations, args.trace_iterations) < 1 or (args.workers is not None and args.workers < 1):
        print("error: --seeds, --iterations, --trace-iterations and --workers must be >= 1", file=sys.stderr)
        return 2
    names = NAMES if args.name == "all" else (args.name,)
    out = Path(args.out)
    from planner.errors import UserError

    try:
        if args.check:
            return check(names, out, args.workers, args.ray_address, args.budget_s)
        return generate(names, args, out, args.resume)
    except UserError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2


RESUME_FILE = ROOT / "tmp" / "reproduce-tasks.jsonl"  # each finished simulation, as it finishes (git-ignored)


def generate(names, args, out: Path, resume: bool = False) -> int:
    tasks = [t for n in names for t in REPRODUCTIONS[n][0](args)]
    cached: dict = {}
    if resume and RESUME_FILE.exists():
        for line in RESUME_FILE.read_text().splitlines():
            try:
                d = json.loads(line)
            except json.JSONDecodeError:
                continue
            cached[d["key"]] = {"result": d["result"], "wall_s": d["wall_s"]}
    elif RESUME_FILE.exists():
        RESUME_FILE.unlink()
    RESUME_FILE.parent.mkdir(parents=True, exist_ok=True)
    todo = [t for t in tasks if t.key not in cached]
    hint = {}
    for n in names:
        p = out / f"{n}.json"
        if p.exists():
            hint.update({k: v.get("wall_s", 0.0) for k, v in json.loads(p.read_text()).get("tasks", {}).items()})
    n_all = len({t.key for t in tasks})
    t0 = time.perf_counter()

    finished = [len({t.key for t in tasks}) - len({t.key for t in todo})]  # simulations done so far (a cell the closure updates)

    def progress(key, wall):
        finished[0] += 1
        print(f"[{finished[0]}/{n_all}] {wall:6.1f} s  {key}", flush=True)

    with open(RESUME_FILE, "a") as log:
        def record(key, wall):
            progress(key, wall)

        done = run_tasks(TASKS, todo, args.workers, args.ray_address, hint, record, log)
    done.update(cached)
    out.mkdir(parents=True, exist_ok=True)
    rows_by = {}
    for n in names:
        md, doc = render(n, args, done)
        (out / f"{n}.md").write_text(md)
        (out / f"{n}.json").write_text(json.dumps(doc, indent=1, sort_keys=True) + "\n")
        rows_by[n] = doc["rows"]
        print(f"wrote {out / (n + '.md')}", flush=True)
    if set(names) == set(NAMES):
        (out / "README.md").write_text(readme(rows_by))
        print(f"wrote {out / 'README.md'}")
    print(f"{n_all} simulations in {time.perf_counter() - t0:.0f} s wall")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
