"""The cost-SLO curve: what each phase-time estimate buys, planned and then simulated.

For each estimate ``e`` of ``ESTIMATES`` (the mean, response-length quantiles, the bound):

1. compile the scenario with phase times of estimate ``e`` (:mod:`simulator.phasetimes`), the
   SLOs as the scenario defines them (its own ``solver.phase_time_estimate``: a ratio SLO is on
   the mean solo iteration for ``sampled`` and the quantiles, on the bound for ``conservative``);
2. plan it (:func:`formulation.placement.solve.solve`, the scenario's backend and a short limit);
3. simulate the plan as written (:func:`planner.sim.planrun.simulate_plan`: its groups, pins and
   orders, request-level rollouts on seeds the planner never saw).

Each point reports the plan's $/h and what the simulator expects of it: the share of jobs whose
every simulated iteration met the SLO, the mean share of iterations within the SLO, and the
planned against the simulated cycle. A user buying GPUs reads the $/h of the least estimate whose
simulated attainment is what they need. ``planner plan SCENARIO --slo-curve`` prints it (and
``--slo-curve-plot PNG`` draws it).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

ESTIMATES = ("sampled", "p90", "p99", "max")


@dataclass
class CurvePoint:
    estimate: str
    cost_per_hour: float
    placed: int
    unplaced: int
    jobs_meeting_slo: float  # share of placed jobs with every simulated iteration within the SLO
    iterations_within_slo: float  # mean over placed jobs of the share of iterations within the SLO
    planned_cycle_s: float  # mean over groups
    simulated_cycle_s: float


def curve(sc, estimates=ESTIMATES, time_limit_s: float = 10.0, backend: Optional[str] = None, iterations: int = 24,
          samples: int = 6) -> list[CurvePoint]:
    from formulation.common import SolveOptions
    from formulation.placement.solve import solve
    from planner.instances.placement import compile_scenario
    from planner.sim.planrun import simulate_plan

    base = compile_scenario(sc, parallel=True)
    slo = {j.name: j.slo_s for j in base.jobs}
    out = []
    for e in estimates:
        inst = base if e == sc.solver.phase_time_estimate else compile_scenario(sc, e, parallel=True)
        inst = inst.model_copy(update={"jobs": [j.model_copy(update={"slo_s": slo[j.name]}) for j in inst.jobs]})
        res = solve(inst, SolveOptions(time_limit_s=time_limit_s, mip_gap=sc.solver.mip_gap, threads=1, seed=sc.solver.seed),
                    backend or sc.solver.backend)
        plan = res.plan
        sim = simulate_plan(sc, plan, iterations=iterations, samples=samples) if plan.groups else None
        jobs = sim.jobs if sim is not None else []
        out.append(CurvePoint(
            estimate=e, cost_per_hour=plan.cost_per_hour, placed=sum(len(g.members) for g in plan.groups), unplaced=len(plan.unplaced),
            jobs_meeting_slo=(sum(1 for j in jobs if j.slo_attainment >= 1.0 - 1e-9) / len(jobs)) if jobs else float("nan"),
            iterations_within_slo=(sum(j.slo_attainment for j in jobs) / len(jobs)) if jobs else float("nan"),
            planned_cycle_s=(sum(g.planned_cycle_s for g in sim.groups) / len(sim.groups)) if sim and sim.groups else float("nan"),
            simulated_cycle_s=(sum(g.simulated_cycle_s for g in sim.groups) / len(sim.groups)) if sim and sim.groups else float("nan")))
    return out


def table(points: list[CurvePoint]) -> list[str]:
    """The curve as Markdown rows (the CLI prints the same)."""
    L = ["| estimate | $/h | jobs placed | jobs meeting SLO (simulated) | iterations within SLO | planned cycle (s) | simulated cycle (s) |",
         "|---|---:|---:|---:|---:|---:|---:|"]
    for p in points:
        L.append(f"| {p.estimate} | {p.cost_per_hour:,.1f} | {p.placed} ({p.unplaced} unplaced) | {100 * p.jobs_meeting_slo:.0f}% | "
                 f"{100 * p.iterations_within_slo:.1f}% | {p.planned_cycle_s:.1f} | {p.simulated_cycle_s:.1f} |")
    return L


def plot(points: list[CurvePoint], path: str, title: str = "") -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 4))
    xs = [p.cost_per_hour for p in points]
    ys = [100 * p.jobs_meeting_slo for p in points]
    ax.plot(xs, ys, marker="o")
    for p, x, y in zip(points, xs, ys):
        ax.annotate(p.estimate, (x, y), textcoords="offset points", xytext=(4, 4))
    ax.set_xlabel("plan cost ($/h)")
    ax.set_ylabel("jobs meeting every iteration's SLO, simulated (%)")
    ax.set_title(title or "cost-SLO curve over phase-time estimates")
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


# ------------------------------------------------------------------------------ the reproduction
# (scenario, its first N jobs or all): the Weave-like jobs are large and all different (16 draws of
# thousands of 16K-32K-token requests per job and pool size for a quantile), so its curve covers its
# first 8 arrivals; the Pollux-derived trace's 60 jobs are 13 shapes (memoised)
CURVE_TRACES = (("weave-trace-60.yaml", None), ("weave-like-60.yaml", 8))
CURVE_LIMIT_S = 20.0


def curve_task(scenario: str, estimate: str, jobs=None) -> dict:
    """One point of the curve of ``scenarios/<scenario>`` (its first ``jobs`` jobs; plain data for
    :mod:`planner.sim.reproduce`)."""
    from dataclasses import asdict

    from planner.schema import load_scenario
    from planner.sim.repro_common import SC

    sc = load_scenario(SC / scenario)
    if jobs is not None:
        sc = sc.model_copy(update={"jobs": sc.jobs[:jobs]})
    (p,) = curve(sc, (estimate,), time_limit_s=CURVE_LIMIT_S, backend="fast")
    return asdict(p)


def tasks(args) -> list:
    from planner.sim.parallel import Task

    return [Task("curve", {"scenario": sc, "estimate": e, "jobs": n}) for sc, n in CURVE_TRACES for e in ESTIMATES]


def report(args, cmd, R):
    from planner.sim.repro_common import header as _header

    L = _header("The cost-SLO curve: plans on each phase-time estimate, simulated", cmd,
                "Weave plans on the conservative bound (every response at its limit) and lists admission on response-length "
                "quantiles (the cost-SLO trade-off) as open work; no published curve.")
    L += [f"Each point: the trace's jobs all at once, planned by the fast path ({CURVE_LIMIT_S:g} s) on that estimate's phase "
          "times with the scenario's own SLOs, then every group simulated as written (`planner.sim.planrun`, request-level "
          "rollouts on seeds the planner never saw). A job meets its SLO when every simulated iteration does.", ""]
    rows = []
    for sc, n in CURVE_TRACES:
        pts = [CurvePoint(**R(_fn="curve", scenario=sc, estimate=e, jobs=n)) for e in ESTIMATES]
        L += [f"### `{sc}`" + (f" (its first {n} jobs)" if n else ""), ""] + table(pts) + [""]
        rows += [{"scenario": sc, **asdict_point(p)} for p in pts]
        full = [p for p in pts if p.jobs_meeting_slo >= 1.0 - 1e-9 and p.unplaced == 0]
        cheapest = min(pts, key=lambda p: p.cost_per_hour)
        L += [f"Cheapest plan: `{cheapest.estimate}` at {cheapest.cost_per_hour:,.1f} $/h with {100 * cheapest.jobs_meeting_slo:.0f}% "
              "of jobs meeting their SLO in simulation; " + (
                  f"the least $/h at which every job meets it: `{min(full, key=lambda p: p.cost_per_hour).estimate}` at "
                  f"{min(p.cost_per_hour for p in full):,.1f} $/h." if full else "no estimate gets every job within its SLO."), ""]
    return L, rows


def asdict_point(p: CurvePoint) -> dict:
    from dataclasses import asdict

    return asdict(p)


def readme_rows(rows) -> list[str]:
    """A row of ``results/reproductions/README.md``'s summary from this reproduction's rows."""
    if not rows:
        return []
    parts = []
    for sc, _ in CURVE_TRACES:
        pts = [r for r in rows if r["scenario"] == sc]
        if pts:
            parts.append(f"{sc.removesuffix('.yaml')}: " + ", ".join(
                f"{r['estimate']} {r['cost_per_hour']:,.0f} $/h {100 * r['jobs_meeting_slo']:.0f}%"
                + (f" ({r['unplaced']} unplaced)" if r["unplaced"] else "") for r in pts))
    return [f"| Cost-SLO curve over phase-time estimates | (open work in Weave) | {'; '.join(parts)} | `slo-curve.md` |"]
