"""The ``repacking`` admission against ``lifetime`` / ``draining``, Solo-D and veRL on a trace (issue 22).

    python -m benchmarks.placement.repack_admission SCENARIO [--seed 0] [--variants JSON] [--baselines]
        [--out FILE.json]

A measured experiment, never part of the test run. Each row is one :func:`planner.sim.trace_baselines.run_policy`
run on the ``simulator`` tables and SLOs (the ``lifetime`` / ``draining`` rows of
``results/reproductions/trace-baselines.md``); ``--seed 1`` runs the held-out trace seed with phase times
drawn from rollouts the planner never saw (``unseen``), as that reproduction's held-out rows.
``--variants``: a JSON list of ``run_policy`` keyword sets for the ``repacking`` admission (default: the
measured default, ``{"repack_move_price": 4, "repack_open": false}``). ``--baselines``: also Solo-D, veRL
(``simulator`` SLOs; seed 0 only: veRL has no unseen-samples run), ``lifetime`` and ``draining``.
Prints one JSON object per row (cost, Solo-D / this, veRL / this, jobs meeting every iteration's SLO,
members moved, re-packs taken, solve seconds).
"""

from __future__ import annotations

import argparse
import json
import time


def row(scenario: str, policy: str, tables: str, admission: str, seed: int, extra: dict) -> dict:
    from planner.sim.trace_baselines import admission_options, run_policy

    opts = admission_options(admission) if policy == "groups" else {}
    opts.update(extra)
    t0 = time.perf_counter()
    unseen = seed != 0 and policy in ("groups", "solo-d")
    res = run_policy(scenario, policy, tables, seed=seed, unseen=unseen, **opts)
    s = res.summary()
    solve = list(getattr(res, "repack_solve_s", []) or [])
    reps = list(getattr(res, "repacks", []) or [])
    return {"scenario": scenario, "seed": seed, "policy": policy, "tables": tables, "admission": admission, "options": extra,
            "cost": s["cost"], "jobs_meeting_slo": s["jobs_meeting_slo"], "jobs_done": s["jobs_done"],
            "jobs_not_admitted": s["jobs_not_admitted"], "moved": res.migrations, "moves": res.moves,
            "mean_wait_s": s["mean_wait_s"], "max_wait_s": s["max_wait_s"], "repacks": len(reps),
            "repacks_taken": sum(1 for r in reps if r[4]),
            "mean_rate_at_repacks": sum(r[1] for r in reps) / len(reps) if reps else None,  # $/h held at the re-packs
            "mean_target_at_repacks": sum(r[2] for r in reps) / len(reps) if reps else None,  # the solve's $/h there
            "repack_stats": dict(getattr(res, "repack_stats", {}) or {}),
            "solve_s_mean": sum(solve) / len(solve) if solve else 0.0, "solve_s_max": max(solve, default=0.0),
            "wall_s": time.perf_counter() - t0}


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("scenario")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--variants", default='[{"repack_move_price": 4, "repack_open": false}]')
    ap.add_argument("--baselines", action="store_true")
    ap.add_argument("--out")
    a = ap.parse_args(argv)
    rows = []
    if a.baselines:
        rows.append(row(a.scenario, "solo-d", "simulator", "weave", a.seed, {}))
        if a.seed == 0:
            rows.append(row(a.scenario, "verl", "simulator", "weave", a.seed, {}))
        for adm in ("lifetime", "draining"):
            rows.append(row(a.scenario, "groups", "simulator", adm, a.seed, {}))
    for v in json.loads(a.variants):
        rows.append(row(a.scenario, "groups", "simulator", "repacking", a.seed, v))
    solo = next((r["cost"] for r in rows if r["policy"] == "solo-d"), None)
    verl = next((r["cost"] for r in rows if r["policy"] == "verl"), None)
    for r in rows:
        r["solo_d_over_this"] = solo / r["cost"] if solo else None
        r["verl_over_this"] = verl / r["cost"] if verl else None
        print(json.dumps(r), flush=True)
    if a.out:
        with open(a.out, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
