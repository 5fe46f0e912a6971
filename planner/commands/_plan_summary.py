"""What `planner plan` and `planner admit` print before anything else: the plan in plain words.

* the cost and how sure it is (the lower bound, the greedy baseline), in words, not solver jargon;
* which phase-time estimate the plan was made on, read from the plan record's
  ``phase_time_estimate`` field (``ESTIMATES`` words each value; an unknown one is named as it is,
  so a new estimate, e.g. a response-length quantile, shows before it has its words here);
* what the simulator expects: with the conservative estimate each group's cycle is recomputed
  (same cycle model, :func:`formulation.placement.cycle.cycle_times`) with every member's expected
  phase times on its own pools (the sampled estimate, :mod:`simulator.phasetimes`), beside the
  planned cycle;
* the SLO margins: the tightest member and its seconds to spare;
* a table of the groups, job names abbreviated uniquely to fit (:func:`abbreviate`);
* where the full plan went.
"""

from __future__ import annotations

from typing import Optional

ESTIMATES = {
    "conservative": ("conservative: every response at its max_response_tokens limit, tool calls at their 99th percentile",
                     "the planned cycles bound the response lengths; the simulator expects shorter ones unless a phase's "
                     "many tool calls meet slower ones than their 99th percentile "
                     "(--mode sampled plans on expected times: fewer GPUs, no headroom for long responses)"),
    "sampled": ("sampled: the mean over simulated iterations with response lengths drawn from the job's distribution",
                "the planned cycles are expected values; an iteration with longer responses can run over"),
    "max": ("max: every response at its max_response_tokens limit (the same as conservative)",
            "the planned cycles bound the response lengths; the simulator expects shorter ones unless a phase's many "
            "tool calls meet slower ones than their 99th percentile"),
    "p90": ("p90: the 90th percentile of simulated iterations with response lengths drawn from the job's distribution",
            "one iteration in ten may run longer than planned"),
    "p99": ("p99: the 99th percentile of simulated iterations with response lengths drawn from the job's distribution",
            "one iteration in a hundred may run longer than planned"),
    None: ("phase times as written in the instance file", ""),
}
TABLE_GROUPS = 20  # groups listed on the terminal (the plan has them all)
NAME_WIDTH = 28    # the members column: names abbreviated to fit, uniquely


def estimate_words(record: dict) -> tuple[str, str]:
    est = record.get("phase_time_estimate")
    words = ESTIMATES.get(est)
    if words is None:
        return f"{est} estimate", ""
    margin = record.get("margin") or 0.0
    if margin:
        return words[0] + f", plus {100 * margin:g}% margin", words[1]
    return words


def expected_over_slo(plan, expected: dict[str, float]) -> list[tuple[str, float, float]]:
    """The members whose expected iteration runs over their SLO, worst first: (job, expected cycle s,
    SLO s). A member's expected iteration is its planned one scaled as its group's cycle is by the
    simulated expectation (``expected``: group id -> expected cycle s)."""
    out = []
    for g in plan.groups:
        if g.id not in expected or not g.cycle_time_s > 0:
            continue
        scale = expected[g.id] / g.cycle_time_s
        for m in g.members:
            cyc = m.cycle_time_s * scale
            if cyc > m.slo_s * (1 + 1e-9):
                out.append((m.job, cyc, m.slo_s))
    return sorted(out, key=lambda t: -(t[1] / t[2]))


def abbreviate(names: list[str], width: int) -> dict[str, str]:
    """Each name shortened to at most ``width`` characters (head...tail), unique among ``names``:
    a name whose abbreviation would collide keeps more of its tail (then, at worst, itself)."""
    out: dict[str, str] = {}
    taken: set[str] = set()
    for n in names:
        if len(n) <= width:
            out[n] = n
            taken.add(n)
    for n in names:
        if n in out:
            continue
        short = n
        for tail in range(max(3, width // 3), width - 3):
            cand = n[: width - 1 - tail] + "~" + n[-tail:]
            if cand not in taken:
                short = cand
                break
        out[n] = short
        taken.add(short)
    return out


def expected_cycles(sc, plan, deadline: Optional[float] = None, clock=None) -> dict[str, float]:
    """Each shown group's cycle (the first :data:`TABLE_GROUPS`) with its members' expected
    (sampled) phase times on their own pools, drawn on the simulator's check seeds
    (:data:`simulator.phasetimes.CHECK_SEED_BASE` on, disjoint from the planner's: planned on
    ``--mode sampled`` the expectation was the planner's own first draws, so a mean its draws got
    wrong could not show); groups not done by ``deadline`` (a
    ``clock()`` value, ``time.perf_counter`` by default: the command's time limit; checked before each
    simulated iteration) are left out (``-`` in the table)."""
    import time
    from dataclasses import replace

    from formulation.placement.cycle import cycle_times
    from formulation.placement.plan import members_of
    from planner.instances.common import ClusterView, job_profile, resolve_gpu_types
    from simulator.phasetimes import CHECK_SEED_BASE, PLAN_SEEDS, PastDeadline, rollout_s, train_s

    view = ClusterView(sc, resolve_gpu_types(sc))
    jobs = {j.name: j for j in sc.jobs}
    out: dict[str, float] = {}
    now = clock or time.perf_counter
    stop = None if deadline is None else (lambda: now() > deadline)
    for g in plan.groups[:TABLE_GROUPS]:
        pins = {m.job: m for m in g.members}
        members = []
        for m in members_of(g):
            job = jobs.get(m.name)
            if job is None:
                return {}
            prof = job_profile(job, seed=CHECK_SEED_BASE)
            r_pool = view.pool(g.rollout_pool.gpu_type, max(1, len(pins[m.name].rollout_nodes)))
            t_pool = view.pool(g.train_pool.gpu_type, max(1, len(pins[m.name].train_nodes)))
            try:
                members.append(replace(m, rollout_s=rollout_s(prof, r_pool, "sampled", seeds=PLAN_SEEDS, stop=stop),
                                       train_s=train_s(prof, t_pool, "sampled", seeds=PLAN_SEEDS, stop=stop)))
            except PastDeadline:
                return out
        out[g.id] = cycle_times(members).period
    return out


def _sure(plan, record: dict) -> str:
    bound, gap = record.get("best_bound"), record.get("gap")
    parts = []
    if bound is not None and gap is not None:
        # gap = (objective - bound) / objective (the solvers' convention); above the bound that is gap / (1 - gap)
        above = f"at most {100 * gap / (1 - gap):.1f}% above" if gap < 1 else "above"
        # (both over the group shapes the optimisers build: docs/placement.md, "The model"; a valid plan of
        # another shape, e.g. a pinned member on 3 rollout nodes of its own, may cost less)
        parts.append("proven cheapest of the modelled group shapes" if gap <= 1e-6 else
                     f"{above} the cheapest plan of the modelled group shapes (certified lower bound {bound:.2f} $/h; gap {100 * gap:.1f}%)")
    if plan.greedy_cost_per_hour is not None:
        parts.append(f"Weave's greedy admission would pay {plan.greedy_cost_per_hour:.2f} $/h")
    return "; ".join(parts)


def _pct(ratio: float) -> str:
    """A percentage with two significant digits below 10% ("0.21", not "0": a 900,000-token limit's
    plan against its expectation read "cycles 0-0% of the planned ones")."""
    v = 100 * ratio
    return f"{v:.0f}" if v >= 9.5 else f"{v:.2g}"


def summary(plan, record: dict, name: str, where: str, expected: Optional[dict[str, float]] = None) -> str:
    placed = sum(len(g.members) for g in plan.groups)
    lines = [f"{name}: {placed} job(s) in {len(plan.groups)} group(s), {plan.cost_per_hour:.2f} $/h"
             + (f" + {plan.move_cost_per_hour:.2f} $/h for moving {len(plan.moved_jobs)} job(s)" if plan.moved_jobs else "")
             + (f", {len(plan.unplaced)} job(s) not placed" if plan.unplaced else "")]
    sure = _sure(plan, record)
    if sure:
        lines.append(f"  {sure} (solver {record['backend']}, {record['wall_time_s']:.2f} s)")
    msg = record.get("message") or ""
    if "cut short" in msg:  # the time limit stopped the solver: say so, not only in the file
        load = msg[msg.index("loading the input took"):].split(";")[0] if "loading the input took" in msg else ""
        lines.append("  cut short by the time limit: the plan is the best found so far (the file's solver.message says where)"
                     + (f"; {load}" if load else ""))
    est, meaning = estimate_words(record)
    lines.append(f"  phase times: {est}")
    if meaning:
        lines.append(f"  {meaning}")
    if expected:
        ratios = [expected[g.id] / g.cycle_time_s for g in plan.groups if g.id in expected and g.cycle_time_s > 0]
        if ratios:
            shown = min(len(plan.groups), TABLE_GROUPS)
            lo, hi = _pct(min(ratios)), _pct(max(ratios))
            lines.append(f"  simulated expectation: cycles {lo if lo == hi else f'{lo}-{hi}'}% of the planned ones "
                         "(each member's expected phase times on its pools"
                         + (f"; {len(ratios)} of the {shown} groups shown, within the time limit" if len(ratios) < shown else "") + ")")
    members = [m for g in plan.groups for m in g.members]
    if members:
        tight = min(members, key=lambda m: m.slack_s)
        lines.append(f"  SLO margin: every job meets its SLO by at least {tight.slack_s:.1f} s on the planned cycle "
                     f"(tightest: {tight.job}, cycle {tight.cycle_time_s:.1f} s, SLO {tight.slo_s:.1f} s)")
    over = expected_over_slo(plan, expected or {})
    if over:
        job, cyc, slo = over[0]
        lines.append(f"  warning: on the simulated expectation {len(over)} job(s) run over their SLO (worst: {job}, "
                     f"{cyc:.1f} s against {slo:.1f} s); plan with --mode p99 or a --margin to cover them")
    if plan.groups:
        short = abbreviate([m.job for m in members], NAME_WIDTH)
        exp_col = bool(expected)
        head = f"  {'group':<6} {'rollout + training':<22} {'$/h':>8} {'cycle s':>8}" + (f" {'expected':>8}" if exp_col else "") \
            + f" {'margin s':>8} {'busy r/t':>9}  members"
        lines.append(head)
        for g in plan.groups[:TABLE_GROUPS]:
            pools = f"{g.rollout_pool.size}x{g.rollout_pool.gpu_type} + {g.train_pool.size}x{g.train_pool.gpu_type}"
            margin = min(m.slack_s for m in g.members)
            exp = f" {expected[g.id]:>8.1f}" if exp_col and expected and g.id in expected else (f" {'-':>8}" if exp_col else "")
            lines.append(f"  {g.id:<6} {pools:<22} {g.cost_per_hour:>8.2f} {g.cycle_time_s:>8.1f}{exp} {margin:>8.1f} "
                         f"{f'{100 * g.rollout_busy:.0f}%/{100 * g.train_busy:.0f}%':>9}  " + ", ".join(short[n] for n in g.order))
        if len(plan.groups) > TABLE_GROUPS:
            lines.append(f"  ... and {len(plan.groups) - TABLE_GROUPS} more group(s) in the plan")
        if any(short[n] != n for n in short):
            lines.append("  (long job names shortened with ~; the plan has them in full)")
    for u in plan.unplaced[:10]:
        lines.append(f"  not placed: {u.job} ({u.reason}): {u.message}")
    if where == "-":
        lines.append("the plan follows on stdout")
    elif where:
        lines.append(f"plan written to {where} (groups, pools, node pins, per-member times); `planner validate-plan` checks it")
    return "\n".join(lines)
