"""Whole-command time limits and admission at fleet scale (a command, never part of the test run).

    python -m benchmarks.placement.bench_limits [--sizes 2000,10000] [--repeat 2] [--before /path/to/old/checkout]

For distinct-job instances (:func:`benchmarks.placement.generate.generate_distinct`, seed 0,
written as JSON as the distinct-job benchmark does) it times whole ``planner plan`` and
``planner admit`` commands from outside, as separate processes (interpreter start, loading,
solving, writing): wall seconds and CPU seconds (user + system, from the child's resource usage),
the best of ``--repeat`` runs, and what the plan's record says was cut short. ``plan``: auto under
``--time-limit 1`` at every size, and every backend under ``--time-limit 2`` at the first size.
``admit``: three jobs are left out of the instance the plan is made for (``--backend fast
--time-limit 5``), then one of them is admitted against that plan. With ``--before`` the same
commands run side by side on another checkout (``PYTHONPATH`` pointing there) for a ratio. Writes
``limits_admit.md`` and ``limits_admit.json`` with the command, the machine and its load average
at the start and the end (a shared machine: wall seconds include waiting for a core, CPU seconds
much less).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
BACKENDS = ("auto", "fast", "greedy", "colgen", "highs", "cpsat")


def _cpu_children() -> float:
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def timed(args: list[str], code: Path, timeout: float = 300.0) -> dict:
    c0, t0 = _cpu_children(), time.perf_counter()
    try:
        proc = subprocess.run([sys.executable, "-m", "planner.cli", *args], cwd=code, capture_output=True, text=True,
                              env={**os.environ, "PYTHONPATH": str(code)}, timeout=timeout)
        rc, err = proc.returncode, proc.stderr
    except subprocess.TimeoutExpired:
        rc, err = -1, f"timed out after {timeout:g} s"
    return {"wall_s": time.perf_counter() - t0, "cpu_s": _cpu_children() - c0, "rc": rc,
            "stderr": err.strip().splitlines()[-2:] if rc else []}


def best(args: list[str], code: Path, repeat: int, out: Path | None = None) -> dict:
    runs = [timed(args, code) for _ in range(repeat)]
    r = min(runs, key=lambda d: d["wall_s"])
    r["cpu_s"] = min(d["cpu_s"] for d in runs)
    if out is not None and r["rc"] == 0 and out.exists():
        rec = json.loads(out.read_text())["solver"]
        msg = rec.get("message", "")
        r["record"] = {k: rec.get(k) for k in ("backend", "status", "objective", "best_bound", "wall_time_s")}
        r["cut_short"] = msg[msg.find("cut short"):][:200] if "cut short" in msg else ""
        r["admit"] = msg.split(";")[0] if msg.startswith("admitted") else ""
    return r


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sizes", default="2000,10000")
    ap.add_argument("--repeat", type=int, default=2)
    ap.add_argument("--before", default=None, help="another checkout to run the same commands with, side by side")
    ap.add_argument("--backends", default=",".join(BACKENDS))
    ap.add_argument("--out", default=str(ROOT / "results" / "placement"))
    ap.add_argument("--work", default="/tmp/rl-planner-bench-limits")
    args = ap.parse_args(argv)
    from benchmarks.placement.generate import generate_distinct

    work = Path(args.work)
    work.mkdir(parents=True, exist_ok=True)
    codes = {"after": ROOT} | ({"before": Path(args.before).resolve()} if args.before else {})
    load0, started = os.getloadavg(), time.strftime("%Y-%m-%d %H:%M:%S %Z")
    rows: list[dict] = []
    sizes = [int(s) for s in args.sizes.split(",")]
    for n in sizes:
        inst = generate_distinct(n, 0)
        data = {"kind": "PlacementInstance", **inst.model_dump(mode="json")}
        full, base = work / f"distinct-{n}.json", work / f"distinct-{n}-base.json"
        full.write_text(json.dumps(data))
        arriving = [j["name"] for j in data["jobs"][5:8]]
        base.write_text(json.dumps(dict(data, jobs=[j for j in data["jobs"] if j["name"] not in arriving])))
        cases = [("plan auto --time-limit 1", ["plan", str(full), "--time-limit", "1", "--allow-unplaced", "-o", "-"])]
        if n == sizes[0]:
            cases += [(f"plan --backend {b} --time-limit 2", ["plan", str(full), "--backend", b, "--time-limit", "2", "--allow-unplaced", "-o", "-"])
                      for b in args.backends.split(",") if b != "auto"]
        for label, cmd in cases:
            row: dict = {"jobs": n, "command": "planner " + " ".join(cmd).replace(str(work) + "/", "")}
            for name, code in codes.items():
                out = work / f"plan-{name}-{n}.json"
                out.unlink(missing_ok=True)
                row[name] = best(cmd + ["--out", str(out)], code, args.repeat, out)
            rows.append({"case": label, **row})
            print(json.dumps(rows[-1]), flush=True)
        for name, code in codes.items():  # admission: a plan without the arriving jobs, per checkout
            plan = work / f"admit-plan-{name}-{n}.json"
            made = timed(["plan", str(base), "--backend", "fast", "--time-limit", "5", "--out", str(plan), "--allow-unplaced"], code)
            if made["rc"] != 0:
                plan.unlink(missing_ok=True)
        for job in arriving:
            cmd = ["admit", str(full), "--current", "PLAN", "--job", job]
            row = {"case": f"admit {job}", "jobs": n, "command": "planner " + " ".join(cmd).replace(str(work) + "/", "")}
            for name, code in codes.items():
                plan, out = work / f"admit-plan-{name}-{n}.json", work / f"admitted-{name}-{n}.json"
                out.unlink(missing_ok=True)
                row[name] = (best(["admit", str(full), "--current", str(plan), "--job", job, "--out", str(out)], code, args.repeat, out)
                             if plan.exists() else {"rc": -2, "stderr": ["no plan to admit against (planning failed)"]})
            rows.append(row)
            print(json.dumps(row), flush=True)
            if row["after"].get("rc") == 0:
                break  # one admitted job per size (the first arriving one may fit nowhere)
    load1 = os.getloadavg()
    machine = f"{platform.uname().system} {platform.uname().release} {platform.machine()}, {os.cpu_count()} CPUs, python {platform.python_version()}"
    command = "python -m benchmarks.placement.bench_limits " + " ".join(argv if argv is not None else sys.argv[1:])
    meta = {"command": command.strip(), "machine": machine, "started": started, "load_average_start": load0, "load_average_end": load1,
            "before": str(codes.get("before", ""))}
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "limits_admit.json").write_text(json.dumps({"meta": meta, "rows": rows}, indent=2) + "\n")

    def cell(r: dict | None) -> str:
        if not r:
            return "-"
        if r.get("rc") != 0:
            return f"exit {r.get('rc')}: {' '.join(r.get('stderr') or [])[:80]}"
        return f"{r['wall_s']:.2f} ({r['cpu_s']:.2f})"

    lines = ["# Whole-command time limits and admission at fleet scale", "",
             f"Command: `{meta['command']}`  ", f"Machine: {machine}  ",
             f"Started: {started}; load average at start {load0[0]:.2f} {load0[1]:.2f} {load0[2]:.2f}, at end "
             f"{load1[0]:.2f} {load1[1]:.2f} {load1[2]:.2f} (a shared machine: wall seconds include waiting for a core)", "",
             "Whole commands timed from outside (interpreter start, loading, solving, writing): wall s (CPU s), the best of "
             f"{args.repeat} runs. Instances: `generate_distinct(N, 0)` as JSON. admit: the plan is made without 3 jobs, then one "
             "of them is admitted." + (" before = the checkout at `--before`, after = this one." if args.before else ""), "",
             "| case | jobs | " + " | ".join(f"{k} wall s (CPU s)" for k in codes) + " | after: cut short / decision |",
             "|---|---|" + "---|" * len(codes) + "---|"]
    for r in rows:
        a = r["after"]
        note = a.get("cut_short") or a.get("admit") or ""
        lines.append(f"| {r['case']} | {r['jobs']} | " + " | ".join(cell(r.get(k)) for k in codes) + f" | {note[:160]} |")
    (out / "limits_admit.md").write_text("\n".join(lines) + "\n")
    print(f"wrote {out / 'limits_admit.md'} and {out / 'limits_admit.json'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
