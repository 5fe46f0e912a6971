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
    #: why the point is missing or partial (a time limit: "not estimated in the time limit", ...); "" when whole
    note: str = ""


def same_estimate(a: str, b: str) -> bool:
    """Whether estimates ``a`` and ``b`` give the same phase times (``max`` is the conservative bound's quantile name)."""
    return a == b or {a, b} == {"conservative", "max"}


#: of a point's equal share of the time left, what its solve may take (the estimates and the simulation get the rest)
SOLVE_SHARE = 0.25
#: a group's simulation before one was timed (weave-micro's 3 groups, 24 meta-iterations x 6 samples: 0.5-0.75 s in all,
#: 2026-12-07, 2-CPU VM), and the margin on the pace measured
SIM_S_PER_GROUP = 0.5
PACE_MARGIN = 1.5


def curve(sc, estimates=ESTIMATES, time_limit_s: float = 10.0, backend: Optional[str] = None, iterations: int = 24,
          samples: int = 6, deadline: Optional[float] = None, given: Optional[tuple] = None) -> list[CurvePoint]:
    """The curve's points, one per estimate of ``estimates`` (module docstring).

    ``deadline`` (a ``time.perf_counter`` value, the clock of the phase-time estimates): the points
    in turn, each estimate stopping at it (what was estimated is cached: the next run goes on
    from there), each solve getting at most :data:`SOLVE_SHARE` of an equal share of the time left
    (and at most ``time_limit_s``), and a plan simulated only when the time left holds its groups
    at the pace measured so far (:data:`SIM_S_PER_GROUP` before any): a point that cannot finish is
    kept with NaN figures and a ``note`` saying what the limit cut. ``given``: ``(instance,
    plan)`` already planned on the scenario's own estimate (the SLOs' estimate, no margin), reused
    as that estimate's point."""
    import math
    import time

    from formulation.common import SolveOptions
    from formulation.placement.solve import solve
    from planner.instances import cache
    from planner.instances.placement import CompileCut
    from planner.sim.planrun import simulate_plan

    nan = float("nan")
    own = sc.solver.phase_time_estimate

    def missing(e: str, note: str) -> CurvePoint:
        return CurvePoint(estimate=e, cost_per_hour=nan, placed=0, unplaced=0, jobs_meeting_slo=nan, iterations_within_slo=nan,
                          planned_cycle_s=nan, simulated_cycle_s=nan, note=note)

    def share(k: int) -> float:  # point k's equal share of the time left
        return math.inf if deadline is None else max(0.0, deadline - time.perf_counter()) / (len(estimates) - k)

    pace = SIM_S_PER_GROUP  # seconds a group's simulation takes (measured once one ran)

    def estimated_by() -> Optional[float]:  # the estimates' deadline: time kept to simulate the plan (a group a job at most)
        if deadline is None:
            return None
        return deadline - min(0.3 * max(0.0, deadline - time.perf_counter()), PACE_MARGIN * pace * len(sc.jobs))

    done: dict[str, CurvePoint] = {}
    base = given[0] if given is not None else None
    # the point the caller planned first (no estimate, no solve: it needs only its simulation)
    order = sorted(estimates, key=lambda e: not (given is not None and same_estimate(e, own)))
    for k, e in enumerate(order):
        try:
            if base is None:  # the SLOs: the scenario's own estimate's (module docstring)
                base = cache.compiled(sc, own, deadline=estimated_by())
            inst = base if same_estimate(e, own) else cache.compiled(sc, e, deadline=estimated_by())
        except CompileCut as cut:
            done[e] = missing(e, f"not estimated in the time limit ({cut.total - cut.missing} of {cut.total} job(s) "
                                 "estimated, kept in the cache when it is on)")
            continue
        slo = {j.name: j.slo_s for j in base.jobs}
        inst = inst.model_copy(update={"jobs": [j.model_copy(update={"slo_s": slo[j.name]}) for j in inst.jobs]})
        if given is not None and same_estimate(e, own):
            plan = given[1]
        else:
            left = share(k)
            if left <= 0:
                done[e] = missing(e, "not planned in the time limit")
                continue
            limit = min(time_limit_s, max(SOLVE_SHARE * left, 0.05))
            res = solve(inst, SolveOptions(time_limit_s=limit, mip_gap=sc.solver.mip_gap, threads=1, seed=sc.solver.seed),
                        backend or sc.solver.backend)
            plan = res.plan
        placed = sum(len(g.members) for g in plan.groups)
        point = missing(e, "")
        point.cost_per_hour, point.placed, point.unplaced = plan.cost_per_hour, placed, len(plan.unplaced)
        if plan.groups and deadline is not None and time.perf_counter() + PACE_MARGIN * pace * len(plan.groups) > deadline:
            point.note = "not simulated in the time limit"
        elif plan.groups:
            t = time.perf_counter()
            sim = simulate_plan(sc, plan, iterations=iterations, samples=samples)
            pace = (time.perf_counter() - t) / len(plan.groups)
            jobs = sim.jobs
            point.jobs_meeting_slo = (sum(1 for j in jobs if j.slo_attainment >= 1.0 - 1e-9) / len(jobs)) if jobs else nan
            point.iterations_within_slo = (sum(j.slo_attainment for j in jobs) / len(jobs)) if jobs else nan
            point.planned_cycle_s = (sum(g.planned_cycle_s for g in sim.groups) / len(sim.groups)) if sim.groups else nan
            point.simulated_cycle_s = (sum(g.simulated_cycle_s for g in sim.groups) / len(sim.groups)) if sim.groups else nan
        done[e] = point
    return [done[e] for e in estimates]


def table(points: list[CurvePoint]) -> list[str]:
    """The curve as Markdown rows (the CLI prints the same); a figure a point lacks is "-", its note last."""
    import math

    def f(x: float, spec: str, scale: float = 1.0, unit: str = "") -> str:
        return f"{scale * x:{spec}}{unit}" if math.isfinite(x) else "-"

    notes = any(p.note for p in points)
    L = ["| estimate | $/h | jobs placed | jobs meeting SLO (simulated) | iterations within SLO | planned cycle (s) | simulated cycle (s) |"
         + (" note |" if notes else ""),
         "|---|---:|---:|---:|---:|---:|---:|" + ("---|" if notes else "")]
    for p in points:
        placed = f"{p.placed} ({p.unplaced} unplaced)" if math.isfinite(p.cost_per_hour) else "-"
        L.append(f"| {p.estimate} | {f(p.cost_per_hour, ',.1f')} | {placed} | {f(p.jobs_meeting_slo, '.0f', 100, '%')} | "
                 f"{f(p.iterations_within_slo, '.1f', 100, '%')} | {f(p.planned_cycle_s, '.1f')} | {f(p.simulated_cycle_s, '.1f')} |"
                 + (f" {p.note} |" if notes else ""))
    return L


def plot(points: list[CurvePoint], path: str, title: str = "") -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    import math

    points = [p for p in points if math.isfinite(p.cost_per_hour) and math.isfinite(p.jobs_meeting_slo)]
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
    from pathlib import Path

    from planner.safewrite import replacing

    try:  # (a temporary file renamed into place: an unwritable path is exit 2 naming the option, never half a file)
        with replacing(Path(path), where="--slo-curve-plot", suffix=".png") as tmp:
            fig.savefig(tmp, dpi=120, format="png")
    finally:
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
