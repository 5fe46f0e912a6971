"""Would sharing rollout nodes lift the trace ceiling? A packing estimate (a command, never part of the test run).

    python -m benchmarks.placement.rollout_sharing [--moments 30] [--out results/placement/rollout-sharing.md]

Pinned groups give each member rollout nodes of its own and share the training pool; Weave's
targets on the Weave-like trace (1.6x cheaper than Solo-D, 1.2x than veRL) are above what re-packing
the jobs present for free at every moment reaches on that plan space (``trace-baselines.md``,
1.62x). The plan space could also let members with loose SLOs share a rollout node (a *slot*: its
ring holds their rollouts one after the other). This estimates what that adds: at evenly spaced
moments of each trace (the jobs present by their arrival and Solo-D duration), the same
first-fit-decreasing packing is run twice on each job's Solo-D pool sizes,

* ``own``: every member on rollout nodes of its own, members sharing training pools;
* ``shared``: as ``own``, but a member may also join another member's rollout slot (up to three
  per slot), both loading their state there by warm switches;

every group judged by Howard's cycle time on its pins (:func:`formulation.placement.cycle.cycle_times`,
the checker's method, switches included) against every member's SLO, phase times the jobs'
simulated p90 (the ``simulator`` tables' SLOs) or mean. It is a packing, not an optimum: the
ratio of the two columns is the evidence, each column a lower bound on what its plan space reaches.
"""

from __future__ import annotations

import sys

import numpy as np

TRACES = ("weave-like-60.yaml", "weave-like-200-2w.yaml", "weave-trace-60.yaml")
SLOT_MAX = 3


def _jobs(scenario: str, stat: str) -> dict:
    from planner.instances import simulate as inst
    from planner.schema import load_scenario
    from planner.sim.trace_baselines import SC

    sc = load_scenario(SC / scenario)
    jobs = inst.trace_jobs(sc, 0)
    si = inst.simulated_instance(sc, jobs)
    by = {j.name: j for j in si.jobs}
    spec = {j.name: j for j in sc.jobs}
    prices, gpn = inst.prices(sc), inst.gpus_per_node(sc)
    out = {}
    for j in jobs:
        p = j.profile(j.solo)
        f = (lambda x: float(np.quantile(x, 0.9))) if stat == "p90" else (lambda x: float(np.mean(x)))
        pj = by[j.name]
        sr, st = pj.switches(j.solo.rollout_type, j.solo.rollout_nodes, j.solo.train_type, j.solo.train_nodes)
        out[j.name] = dict(a=f(p.rollout_s), b=f(p.train_s), s=p.sync_s, sr=sr, st=st, slo=pj.slo_s,
                           pool=(j.solo.rollout_type, j.solo.rollout_nodes, j.solo.train_type, j.solo.train_nodes),
                           arr=float(spec[j.name].arrival_s or 0.0), dur=float(spec[j.name].duration_s or 0.0),
                           cost_r=j.solo.rollout_nodes * gpn * prices[j.solo.rollout_type],
                           cost_t=j.solo.train_nodes * gpn * prices[j.solo.train_type])
    return out


def _feasible(J: dict, slots: list[list[str]]) -> bool:
    from formulation.placement.cycle import Member, cycle_times

    ms = []
    for i, slot in enumerate(slots):
        for n in slot:
            x = J[n]
            ms.append(Member(n, x["a"], x["b"], x["s"], frozenset({f"r{i}"}), frozenset({"t"}), x["sr"], x["st"]))
    res = cycle_times(ms)
    return all(res.of(m.name) <= J[m.name]["slo"] * (1 + 1e-9) for m in ms)


def pack(J: dict, present: list[str], share_rollout: bool) -> float:
    """$/h of a first-fit-decreasing packing of ``present`` (module docstring)."""
    cost = 0.0
    for pool in sorted({J[n]["pool"] for n in present}):
        ids = sorted((n for n in present if J[n]["pool"] == pool), key=lambda n: (-J[n]["b"], n))
        groups: list[list[list[str]]] = []  # group -> slots -> members
        for n in ids:
            placed = False
            for g in groups:
                options = ([[*s, n] if k == i else s for k, s in enumerate(g)] for i in range(len(g)) if share_rollout and len(g[i]) < SLOT_MAX)
                for cand in [*options, [*g, [n]]]:
                    if _feasible(J, cand):
                        g[:] = cand
                        placed = True
                        break
                if placed:
                    break
            if not placed:
                groups.append([[n]])
        cost += sum(len(g) * J[g[0][0]]["cost_r"] + J[g[0][0]]["cost_t"] for g in groups)
    return cost


def measure(scenario: str, stat: str, moments: int) -> dict:
    J = _jobs(scenario, stat)
    end = max(v["arr"] + v["dur"] for v in J.values())
    rows = []
    for t in np.linspace(0.0, end, moments + 2)[1:-1]:
        present = sorted(n for n, v in J.items() if v["arr"] <= t < v["arr"] + v["dur"])
        present = [n for n in present if _feasible(J, [[n]])]  # a job that misses its SLO alone is left out of both
        if present:
            solo = sum(J[n]["cost_r"] + J[n]["cost_t"] for n in present)
            rows.append((len(present), solo, pack(J, present, False), pack(J, present, True)))
    R = np.array(rows)
    return {"moments": len(R), "jobs": float(R[:, 0].mean()), "solo": float(R[:, 1].sum()), "own": float(R[:, 2].sum()),
            "shared": float(R[:, 3].sum())}


def main(argv=None) -> int:
    from benchmarks.placement import moment_report

    args = moment_report.parse(__doc__ or "", "results/placement/rollout-sharing.md", argv)
    lines = moment_report.head("Rollout-node sharing: what it adds to the trace ceiling (a packing estimate)",
                               "benchmarks.placement.rollout_sharing", args.moments, __doc__ or "",
                               ["trace", "phase times", "moments", "mean jobs", "Solo-D / own", "Solo-D / shared", "shared / own"],
                               ["---", "---", "---:", "---:", "---:", "---:", "---:"])
    for sc in TRACES:
        for stat in ("p90", "mean"):
            r = measure(sc, stat, args.moments)
            lines.append(f"| {sc} | {stat} | {r['moments']} | {r['jobs']:.1f} | {r['solo'] / r['own']:.3f}x | "
                         f"{r['solo'] / r['shared']:.3f}x | {r['own'] / r['shared']:.3f}x |")
            print(lines[-1], flush=True)
    moment_report.write(args.out, lines)
    return 0


if __name__ == "__main__":
    sys.exit(main())
