"""`planner admit` with and without `--repack` against the proven offline optimum (a command, never part of the test run).

    python -m benchmarks.placement.bench_admit_repack [--seeds 200:220] [--jobs 9] [--first 5] [--fleets 2.0,1.0] [--out DIR]

For each seed and fleet size, an instance of distinct jobs (:func:`benchmarks.placement.generate.generate_distinct`,
``unplaceable=0``; the placement code was not tuned on these seeds): ``planner plan`` makes the plan of its first
``--first`` jobs, then the others arrive, in order, in one ``planner admit`` with Weave's three moves and in one with
``--repack``; ``planner plan`` of all the jobs gives the offline optimum (column generation, proven unless said).
Every command runs as a separate process, as a user runs it; every admitted plan is checked by ``planner
validate-plan`` in another process. Writes ``admit-repack.md`` and ``admit-repack.json`` (the command, the machine).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]


def _cli(*args: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    return subprocess.run([sys.executable, "-m", "planner", *args], capture_output=True, text=True, env=env, timeout=900)


def _cost(path: Path) -> float:
    return float(yaml.safe_load(path.read_text())["body"]["cost_per_hour"])


def one(seed: int, n_jobs: int, first: int, fleet: float, work: Path) -> dict | None:
    from benchmarks.placement.generate import generate_distinct
    from planner.instances.placement import dump_instance

    inst = generate_distinct(n_jobs, seed, fleet_per_job=fleet, unplaceable=0.0)
    full, head = work / "all.yaml", work / "first.yaml"
    full.write_text(dump_instance(inst))
    part = inst.model_copy(deep=True)
    part.jobs = inst.jobs[:first]
    head.write_text(dump_instance(part))
    cur, opt = work / "current.yaml", work / "optimum.yaml"
    if _cli("plan", str(head), "--out", str(cur)).returncode or _cli("plan", str(full), "--out", str(opt)).returncode:
        return None  # (the first jobs or all of them do not fit this fleet: no row)
    row = {"seed": seed, "fleet_per_job": fleet, "jobs": n_jobs, "arriving": n_jobs - first, "optimum": _cost(opt),
           "optimum_status": yaml.safe_load(opt.read_text())["solver"]["status"]}
    jobs = [a for j in inst.jobs[first:] for a in ("--job", j.name)]
    for key, flag in (("three_moves", []), ("repack", ["--repack"])):
        out = work / f"{key}.yaml"
        t = time.perf_counter()
        r = _cli("admit", str(full), "--current", str(cur), *jobs, *flag, "--out", str(out))
        row[f"{key}_wall_s"] = round(time.perf_counter() - t, 2)
        if r.returncode:
            row[key] = None  # no move placed some arriving job
            continue
        v = _cli("validate-plan", str(full), str(out))
        if v.returncode:
            raise SystemExit(f"seed {seed}: the {key} plan fails validate-plan:\n{v.stdout}{v.stderr}")
        row[key] = _cost(out)
        row[f"{key}_moved"] = len(yaml.safe_load(out.read_text())["body"].get("moved_jobs") or [])
    return row


def _ratio(x, opt) -> str:
    return "-" if x is None else f"{x / opt:.3f}"


def report(rows: list[dict], command: str, machine: str) -> str:
    L = ["# `planner admit` with and without `--repack`, against the proven offline optimum", "", f"Command: `{command}`  ",
         f"Machine: {machine}", "",
         "Each row: a plan of an instance's first jobs (`planner plan`), the rest admitted in order by one `planner admit` "
         "(Weave's three moves) and by one `planner admit --repack`; optimum: `planner plan` of all the jobs. Every admitted "
         "plan passed `planner validate-plan` in another process. `-`: some arriving job was not placed.", "",
         "| seed | fleet per job | jobs (arriving) | optimum $/h | three moves $/h | --repack $/h (jobs moved) | "
         "**three moves / optimum** | **--repack / optimum** |", "|---:|---:|---|---:|---:|---:|---:|---:|"]
    for r in rows:
        opt = r["optimum"] if r["optimum_status"] == "optimal" else None
        L.append(f"| {r['seed']} | {r['fleet_per_job']} | {r['jobs']} ({r['arriving']}) | {r['optimum']:,.0f}"
                 f"{'' if opt else ' (' + r['optimum_status'] + ')'} | "
                 f"{'-' if r['three_moves'] is None else format(r['three_moves'], ',.0f')} | "
                 f"{'-' if r['repack'] is None else format(r['repack'], ',.0f') + ' (' + str(r.get('repack_moved', 0)) + ')'} | "
                 f"{_ratio(r['three_moves'], r['optimum'])} | {_ratio(r['repack'], r['optimum'])} |")
    both = [r for r in rows if r["three_moves"] is not None and r["repack"] is not None and r["optimum_status"] == "optimal"]
    if both:
        w3 = max(r["three_moves"] / r["optimum"] for r in both)
        wr = max(r["repack"] / r["optimum"] for r in both)
        m3 = sum(r["three_moves"] / r["optimum"] for r in both) / len(both)
        mr = sum(r["repack"] / r["optimum"] for r in both) / len(both)
        only = sum(1 for r in rows if r["three_moves"] is None and r["repack"] is not None)
        L += ["", f"Over the {len(both)} rows where both placed every job and the optimum is proven: three moves / optimum "
                  f"mean {m3:.3f}, worst {w3:.3f}; --repack / optimum mean {mr:.3f}, worst {wr:.3f}. Rows where only --repack "
                  f"placed every arriving job: {only}. Weave reports its online admission within 1.12x of the offline optimum."]
    return "\n".join(L) + "\n"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", default="200:220")
    ap.add_argument("--jobs", type=int, default=9)
    ap.add_argument("--first", type=int, default=5)
    ap.add_argument("--fleets", default="2.0,1.0")
    ap.add_argument("--out", default=str(ROOT / "results" / "placement"))
    a = ap.parse_args(argv)
    lo, hi = (int(x) for x in a.seeds.split(":"))
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for fleet in (float(x) for x in a.fleets.split(",")):
            for seed in range(lo, hi):
                r = one(seed, a.jobs, a.first, fleet, Path(tmp))
                if r is not None:
                    rows.append(r)
                    print(json.dumps(r), flush=True)
    command = "python -m benchmarks.placement.bench_admit_repack " + " ".join(sys.argv[1:] if argv is None else argv)
    machine = (f"{platform.node()} {platform.platform()}, {os.cpu_count()} CPUs, python {platform.python_version()}; "
               f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, load average {os.getloadavg()[0]:.1f}")
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "admit-repack.json").write_text(json.dumps({"command": command, "machine": machine, "rows": rows}, indent=1))
    (out / "admit-repack.md").write_text(report(rows, command, machine))
    print(report(rows, command, machine))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
