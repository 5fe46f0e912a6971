"""The ``sweep`` reproduction: the U_low and T sensitivity of the dynamic policy.

Registered in :mod:`planner.sim.reproduce` (the driver); never imports it back.
"""

from __future__ import annotations

from planner.sim.parallel import Task
from planner.sim.repro_common import header as _header
from planner.sim.repro_jobs import baseline_tasks, baselines


SWEEP_SCENARIO = "dynarl/math-7b-64gpu.yaml"
SWEEP_CELLS = [(u, 4.0) for u in (0.05, 0.1, 0.2, 0.3, 0.5)] + [(0.2, w) for w in (1.0, 2.0, 8.0, 16.0)]


def sweep_tasks(args) -> list[Task]:
    base = {"scenario": SWEEP_SCENARIO, "seeds": args.seeds, "iterations": 1}
    return baseline_tasks(SWEEP_SCENARIO, args.seeds, 1) + [
        Task("job", {**base, "policy": {"name": "dynamic", "decision": args.decision, "u_low": u, "window_s": w}})
        for u, w in SWEEP_CELLS]


def sweep(args, cmd, R):
    base = {"scenario": SWEEP_SCENARIO, "seeds": args.seeds, "iterations": 1}
    L = _header("Sensitivity of the dynamic policy to U_low and T", cmd,
                "DynaRL reports a plateau: throughput within a few percent for U_low in 0.1-0.3 and T in 2-8 s, "
                "worse outside.")
    L += [f"Set-up: `scenarios/{SWEEP_SCENARIO}`, decision function `{args.decision}`, theta 0.5, telemetry every second; "
          f"1 iteration x {args.seeds} seed(s) per cell. One factor at a time: U_low at T = 4 s, then T at U_low = 0.2. "
          "Throughput relative to the best cell; the static partition's beside.", ""]
    b = baselines(R, SWEEP_SCENARIO, args.seeds, 1)
    static = b["static"]
    rows = []
    for u, w in SWEEP_CELLS:
        m = R("job", **base, policy={"name": "dynamic", "decision": args.decision, "u_low": u, "window_s": w})
        rows.append({"u_low": u, "window_s": w, "iteration_s": m["iter_s"], "reallocations": m["realloc"], "static_s": static,
                     "best_static_s": b["best_static"], "best_split": b["best_split"], "threshold_s": b["threshold"]})
    best = min(r["iteration_s"] for r in rows)
    L += [f"Baselines on the same nodes: the scenario's split {b['split']} {static:.0f} s, the best static split "
          f"{b['best_split']} {b['best_static']:.0f} s (every node split simulated), the threshold baseline {b['threshold']:.0f} s.", "",
          "| U_low | T (s) | iteration (s) | reallocations | relative throughput | vs static | **vs best static** | vs threshold |",
          "|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        L.append(f"| {r['u_low']:g} | {r['window_s']:g} | {r['iteration_s']:.0f} | {r['reallocations']:.0f} | "
                 f"{best / r['iteration_s']:.3f} | {static / r['iteration_s']:.2f}x | **{b['best_static'] / r['iteration_s']:.2f}x** | "
                 f"{b['threshold'] / r['iteration_s']:.2f}x |")
    L += sweep_notes(rows)
    return L, rows


def sweep_notes(rows) -> list[str]:
    best = min(r["iteration_s"] for r in rows)
    static = rows[0]["static_s"]
    inside = [best / r["iteration_s"] for r in rows if 0.1 <= r["u_low"] <= 0.3 and 2.0 <= r["window_s"] <= 8.0]
    outside = [best / r["iteration_s"] for r in rows if not (0.1 <= r["u_low"] <= 0.3 and 2.0 <= r["window_s"] <= 8.0)]
    vs = [static / r["iteration_s"] for r in rows]
    vb = [r["best_static_s"] / r["iteration_s"] for r in rows]
    beats = "Every cell beats it" if min(vs) > 1.0 else f"{sum(v > 1.0 for v in vs)} of {len(vs)} cells beat it"
    beats += (f"; against the best static split {rows[0]['best_split']} ({rows[0]['best_static_s']:.0f} s) the cells give "
              f"{min(vb):.2f}-{max(vb):.2f}x" + ("" if min(vb) >= 1.0 else
              f" ({sum(v < 1.0 for v in vb)} of {len(vb)} below it: the scenario's split starves training and each "
              "iteration starts from it, so the moves recover most of the split's gap but not all of it, see `dynarl-math.md`)"))
    plateau = "a plateau inside that range (within 3%)" if min(inside) >= 0.97 else "no plateau inside that range"
    return ["", f"Static partition: {static:.0f} s. {beats} ({min(vs):.2f}-{max(vs):.2f}x). Inside the published plateau "
            f"(U_low 0.1-0.3, T 2-8 s) relative throughput spans {min(inside):.3f}-{max(inside):.3f}, outside it "
            f"{min(outside):.3f}-{max(outside):.3f}: {plateau}.", "",
            "Why the thresholds matter little here: this job's split starves training, so moving rollout GPUs early is "
            "right, and a 7B engine's KV cache is large against the requests it starts with, so at most thresholds more "
            "than half of the engines count as donors soon after the start. What differs between cells is the sequence of "
            "moves that follows (when each trigger lands against the coarse candidate sizes), not the thresholds themselves.",
            ""]
