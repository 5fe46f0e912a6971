"""Plan fidelity: each group's planned cycle against an independent simulation of the plan.

    python -m planner.sim.fidelity [--out results/fidelity] [--mode sampled] [--scenario PATH ...] [--quick]
    python -m planner.sim.fidelity --predictor-only   # the reallocation predictor's table alone

For every shipped scenario that has jobs and nodes (``scenarios/*.yaml``, ``scenarios/ci``,
``scenarios/dynarl``) and for held-out heavy-tailed length distributions that are not shipped
(log-normal with sigma 1.2 and 1.5, the ServeGen production mixture stretched 3x: p99/p50 about
30), the placement planner plans (:func:`planner.instances.placement.compile_scenario` at the
given phase-time mode, then the solver), and :func:`planner.sim.planrun.simulate_plan` simulates
each group of that plan request by request with seeds the planner never saw. Written: one table
per scenario (planned cycle, simulated cycle, error, target 5%), the reallocation predictor's
remaining-time error against the simulator (median and max, keep and after a move;
:mod:`planner.sim.predictor_fidelity`), the command and the machine.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import yaml

ROOT = Path(__file__).resolve().parents[2]
TARGET = 0.05

# held-out length distributions (not shipped): (label, response_lengths, max_response_tokens or None)
HELD_OUT = (
    ("lognormal-s1.2", {"source": "lognormal", "median_tokens": 900, "sigma": 1.2}),
    ("lognormal-s1.5", {"source": "lognormal", "median_tokens": 700, "sigma": 1.5}),
    ("servegen-mix-x3", {"source": "servegen", "scale": 3.0}),
)
HELD_OUT_BASES = ("scenarios/ci/tiny-mixed.yaml", "scenarios/weave-micro.yaml")


def shipped_scenarios() -> list[Path]:
    from planner.schema import load_scenario

    out = []
    for pat in ("scenarios/*.yaml", "scenarios/ci/*.yaml", "scenarios/dynarl/*.yaml"):
        for p in sorted(ROOT.glob(pat)):
            try:
                sc = load_scenario(p)
            except Exception:  # noqa: BLE001 - an include-only fragment or a capacity-only scenario
                continue
            if sc.jobs and sum(g.count for g in sc.cluster.node_groups) > 0:
                out.append(p)
    return out


def held_out_scenario(base: Path, label: str, lengths: dict, tmpdir: Path) -> Path:
    """``base`` with every job's response lengths replaced (written to ``tmpdir``)."""
    data = yaml.safe_load(base.read_text())
    data["name"] = f"{data['name']}+{label}"
    for j in data.get("jobs", []):
        j.setdefault("rollout", {})["response_lengths"] = dict(lengths)
    p = tmpdir / f"{base.stem}+{label}.yaml"
    p.write_text(yaml.safe_dump(data, sort_keys=False))
    return p


# the check's sampling: each group's simulated cycle is the mean of REPLICATIONS..MAX_REPLICATIONS
# independent replications (SAMPLES fresh request-level iterations per member each), added until its
# standard error is within CHECK_REL_SE of it
SAMPLES, REPLICATIONS, MAX_REPLICATIONS, CHECK_REL_SE = 6, 3, 8, 0.01


def plan_and_simulate(path: Path, mode: str, *, time_limit_s: float = 20.0, iterations: int = 24, samples: int = SAMPLES,
                      seed: int = 0, replications: int = REPLICATIONS, max_replications: int = MAX_REPLICATIONS,
                      rel_se: float = CHECK_REL_SE) -> dict:
    from formulation.common import SolveOptions
    from formulation.placement.solve import solve
    from planner.instances.placement import compile_scenario
    from planner.schema import load_scenario
    from planner.sim.planrun import simulate_plan

    sc = load_scenario(path)
    t0 = time.perf_counter()
    inst = compile_scenario(sc, mode)
    t1 = time.perf_counter()
    plan = solve(inst, SolveOptions(time_limit_s=time_limit_s)).plan
    t2 = time.perf_counter()
    res = simulate_plan(sc, plan, seed=seed, iterations=iterations, samples=samples, replications=replications,
                        max_replications=max_replications, rel_se=rel_se)
    t3 = time.perf_counter()
    d = res.to_dict()
    d.update(scenario=sc.name, path=str(path.relative_to(ROOT)) if path.is_relative_to(ROOT) else path.name, mode=mode,
             compile_s=t1 - t0, solve_s=t2 - t1, simulate_s=t3 - t2, unplaced=[u.job for u in plan.unplaced])
    return d


def _machine() -> dict:
    return {"uname": " ".join(platform.uname()), "cpus": os.cpu_count(), "python": sys.version.split()[0],
            "loadavg": os.getloadavg()}


PREDICTOR_HEADING = "## Reallocation predictor: remaining time against the simulator"


def predictor_markdown(pred: dict) -> list[str]:
    lines = [PREDICTOR_HEADING, "", f"Command: `{pred['command']}`", "", pred["description"], "",
             "| case | predictions | median abs error | max abs error |", "|---|---:|---:|---:|"]
    for k, v in pred["cases"].items():
        lines.append(f"| {k} | {v['n']} | {100 * v['median']:.1f}% | {100 * v['max']:.1f}% |")
    if pred.get("call_ms"):
        c = pred["call_ms"]
        lines += ["", f"Predictor call (`build_context` per probe snapshot): median {c['median']:.1f} ms, max {c['max']:.1f} ms "
                  f"over {c['n']} calls" + (f"; {c['note']}" if c.get("note") else "") + "."]
    lines.append("")
    return lines


def _replace_predictor(out: Path, name: str, pred: dict) -> None:
    """Put ``pred`` in place of the predictor's section of an existing ``name``.md/.json (the rest as generated)."""
    md, js = out / f"{name}.md", out / f"{name}.json"
    if md.exists():
        text = md.read_text()
        i = text.find(PREDICTOR_HEADING)
        if i >= 0:
            j = text.find("\n## ", i + len(PREDICTOR_HEADING))
            rest = text[j + 1:] if j >= 0 else ""
            md.write_text(text[:i] + "\n".join(predictor_markdown(pred)) + "\n" + rest)
    if js.exists():
        data = json.loads(js.read_text())
        data["predictor"] = pred
        js.write_text(json.dumps(data, indent=2, default=float) + "\n")


def _se(g: dict) -> str:
    se = g.get("simulated_se_s")
    return f"{se:.2f}" if se is not None and np.isfinite(se) else "-"


def markdown(rows: list[dict], pred: dict | None, command: str, machine: dict, mode: str, title: str) -> str:
    lines = [f"# {title}", "", f"Command: `{command}`", "",
             f"Machine: {machine['uname']}; {machine['cpus']} CPUs; load average {', '.join(f'{x:.2f}' for x in machine['loadavg'])}",
             "", f"Phase-time mode of the plans: `{mode}`. Target: every group's simulated cycle within "
             f"{100 * TARGET:.0f}% of its planned cycle. The simulation draws its requests from seeds the planner "
             "never saw (`simulator.phasetimes.CHECK_SEED_BASE`), each member of a group its own. A group's simulated "
             f"cycle is the mean of {REPLICATIONS}-{MAX_REPLICATIONS} independent replications ({SAMPLES} fresh "
             "request-level iterations per member each, 24 meta-iterations, the first 4 dropped), added until its "
             f"standard error (SE, over the replications) is within {100 * CHECK_REL_SE:.0f}% of it.", ""]
    errs = [g["error"] for r in rows for g in r["groups"]]
    within = sum(abs(e) <= TARGET for e in errs)
    lines += [f"**{within} of {len(errs)} groups within {100 * TARGET:.0f}%**; max |error| "
              f"{100 * max((abs(e) for e in errs), default=0):.1f}%, median |error| {100 * float(np.median(np.abs(errs))) if errs else 0:.1f}%.", ""]
    ses = [g["simulated_se_s"] / g["simulated_cycle_s"] for r in rows for g in r["groups"]
           if g.get("simulated_se_s") is not None and np.isfinite(g["simulated_se_s"]) and g["simulated_cycle_s"] > 0]
    if ses:
        draws = [g.get("draws_per_member", 0) for r in rows for g in r["groups"]]
        lines += [f"Standard error of the simulated cycles: median {100 * float(np.median(ses)):.2f}%, max "
                  f"{100 * max(ses):.2f}% of the cycle ({min(draws)}-{max(draws)} request-level iterations per member).", ""]
    shared = [(g["error"], g.get("switch_s", 0.0) / g["planned_cycle_s"]) for r in rows for g in r["groups"] if g.get("switch_s", 0.0) > 0]
    outside = [(e, sw) for r in rows for g in r["groups"] for e, sw in [(g["error"], g.get("switch_s", 0.0) / g["planned_cycle_s"])]
               if abs(e) > TARGET]
    lines += [f"Groups outside {100 * TARGET:.0f}%: {len(outside)} ({sum(1 for _, sw in outside if sw > 0)} of them shared). "
              f"The plans' cycles include the warm switches of shared groups (``formulation.placement.cycle``: ring arcs "
              f"``a + sigma_r`` and ``b + s + sigma_t`` in groups of two or more; a lone member pays none). Over the "
              f"{len(shared)} shared groups the error has median "
              f"{100 * float(np.median([e for e, _ in shared])) if shared else 0:+.1f}%.", ""]
    lines += ["| scenario | groups | within 5% | max abs error | mean SLO attainment | compile s | simulate s |", "|---|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        e = [g["error"] for g in r["groups"]]
        lines.append(f"| {r['scenario']} | {len(e)} | {sum(abs(x) <= TARGET for x in e)} | {100 * max((abs(x) for x in e), default=0):.1f}% | "
                     f"{100 * r['slo_attainment_mean']:.0f}% | {r['compile_s']:.1f} | {r['simulate_s']:.1f} |")
    lines.append("")
    for r in rows:
        lines += [f"## {r['scenario']} (`{r['path']}`)", "",
                  "| group | rollout pool | training pool | members | planned cycle (s) | simulated cycle (s) | SE (s) | error | "
                  "warm switches (in the plan) |",
                  "|---|---|---|---|---:|---:|---:|---:|---:|"]
        for g in r["groups"]:
            flag = "" if abs(g["error"]) <= TARGET else " **!**"
            sw = g.get("switch_s", 0.0)
            lines.append(f"| {g['id']} | {g['rollout_pool']} | {g['train_pool']} | {', '.join(g['members'])} | "
                         f"{g['planned_cycle_s']:.1f} | {g['simulated_cycle_s']:.1f} | {_se(g)} | {100 * g['error']:+.1f}%{flag} | "
                         + (f"{sw:.1f} s ({100 * sw / g['planned_cycle_s']:.1f}%)" if sw > 0 else "-") + " |")
        if r.get("unplaced"):
            lines.append(f"\nUnplaced: {', '.join(r['unplaced'])}")
        tight = sorted(r["jobs"], key=lambda j: j["margin_s"] / j["slo_s"] if j["slo_s"] > 0 else 0)[:3]
        if tight:
            lines += ["", "Tightest jobs: " + "; ".join(
                f"{j['job']} SLO {j['slo_s']:.1f} s, attainment {100 * j['slo_attainment']:.0f}%, slowest iteration "
                f"{j['worst_iteration_s']:.1f} s (margin {j['margin_s']:+.1f} s)" for j in tight)]
        lines.append("")
    if pred:
        lines += predictor_markdown(pred)
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m planner.sim.fidelity", description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default=str(ROOT / "results" / "fidelity"))
    ap.add_argument("--mode", choices=["sampled", "conservative"], default="sampled")
    ap.add_argument("--scenario", action="append", help="only these scenario files (default: every shipped one)")
    ap.add_argument("--no-held-out", action="store_true", help="skip the held-out heavy-tailed distributions")
    ap.add_argument("--no-predictor", action="store_true", help="skip the reallocation predictor's remaining-time error")
    ap.add_argument("--predictor-only", action="store_true",
                    help="only the reallocation predictor: writes predictor.md/.json and replaces the predictor's "
                         "section of an existing <name>.md/.json (the placement tables are left as they are)")
    ap.add_argument("--name", default="fidelity", help="file stem of the tables (default fidelity)")
    ap.add_argument("--time-limit", type=float, default=20.0)
    args = ap.parse_args(argv)
    command = "python -m planner.sim.fidelity " + " ".join(argv if argv is not None else sys.argv[1:])
    machine = _machine()
    if args.predictor_only:
        from planner.sim.predictor_fidelity import measure

        pred = measure()
        pred["command"] = command
        out = Path(args.out)
        out.mkdir(parents=True, exist_ok=True)
        head = ["# Reallocation predictor fidelity", "", f"Machine: {machine['uname']}; {machine['cpus']} CPUs; load average "
                f"{', '.join(f'{x:.2f}' for x in machine['loadavg'])}", ""]
        (out / "predictor.md").write_text("\n".join(head + predictor_markdown(pred)))
        (out / "predictor.json").write_text(json.dumps({"command": command, "machine": machine, "predictor": pred}, indent=2,
                                                        default=float) + "\n")
        _replace_predictor(out, args.name, pred)
        for k, v in pred["cases"].items():
            print(f"{k}: median {100 * v['median']:.1f}%, max {100 * v['max']:.1f}% ({v['n']} predictions)")
        print(f"wrote {out / 'predictor.md'}, {out / 'predictor.json'}")
        return 0
    paths = [Path(p).resolve() for p in args.scenario] if args.scenario else shipped_scenarios()
    rows = []
    with tempfile.TemporaryDirectory(prefix="rlp-fidelity-") as tmp:
        if not args.no_held_out and not args.scenario:
            for base in HELD_OUT_BASES:
                for label, lengths in HELD_OUT:
                    paths.append(held_out_scenario(ROOT / base, label, lengths, Path(tmp)))
        for p in paths:
            t = time.perf_counter()
            r = plan_and_simulate(p, args.mode, time_limit_s=args.time_limit)
            rows.append(r)
            errs = ", ".join(f"{g['id']} {100 * g['error']:+.1f}%" for g in r["groups"])
            print(f"{r['scenario']}: {errs} ({time.perf_counter() - t:.1f} s)", flush=True)
    pred = None  # type: ignore[assignment]
    if not args.no_predictor:
        from planner.sim.predictor_fidelity import measure

        pred = measure()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    title = f"Plan fidelity ({args.mode} phase times)"
    (out / f"{args.name}.md").write_text(markdown(rows, pred, command, machine, args.mode, title))
    (out / f"{args.name}.json").write_text(json.dumps({"command": command, "machine": machine, "mode": args.mode, "target": TARGET,
                                                        "scenarios": rows, "predictor": pred}, indent=2, default=float) + "\n")
    print(f"wrote {out / (args.name + '.md')}, {out / (args.name + '.json')}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
