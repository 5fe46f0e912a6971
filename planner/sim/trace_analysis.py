"""Why groups miss strict SLOs on the traces, and how cheap groups could be at all (``trace-baselines`` tasks).

* :func:`misses_task`: every iteration past its SLO in one ``groups`` trace, by what happened in the
  member's group around it: the member's ``first`` iteration in the group; a ``join`` (another
  member's first rollout started inside the iteration); ``after-join`` / ``after-departure`` (a
  member joined / left the group within three of the member's SLOs before the iteration ended: the
  event graph's transient after its rings changed); ``steady`` (none of these: co-members' drawn
  phase times in a fixed membership).
* :func:`ceiling_task`: lower bounds on what any group plan costs for a trace's jobs on their own
  pool sizes, from the jobs' mean measured phase times and iteration counts: ``busy`` (every GPU
  busy whenever provisioned: a pool costs at least its phases' GPU time, any plan), ``own-rollout``
  (members keep rollout nodes of their own for their whole stay, the training side busy only: the
  pinned plans every optimiser builds), against Solo-D's cost on the same means; and how many jobs
  could share a rollout node at all (some other job on the same rollout pool whose p90 rollout fits
  with the job's own within both SLOs, the fixed-order ring's condition).
"""

from __future__ import annotations

import numpy as np

from planner.sim.trace_baselines import MISS_CATEGORIES as CATEGORIES


def misses_task(scenario: str, admission: str = "weave", seed: int = 0) -> dict:
    """Strict misses of the ``groups`` / ``simulator`` trace under ``admission``, by category."""
    from planner.sim.trace_baselines import run_policy

    from planner.sim.trace_baselines import admission_options

    res = run_policy(scenario, "groups", "simulator", seed=seed, join_delay=admission == "join-aware",
                     **admission_options(admission))
    count = {c: 0 for c in CATEGORIES}
    worst = {c: 0.0 for c in CATEGORIES}
    jobs_by: dict[str, set] = {c: set() for c in CATEGORIES}
    missed = 0
    for name, rec in res.jobs.items():
        if not rec.iteration_s or rec.group is None:
            continue
        over = [(i, d / rec.slo_s) for i, d in enumerate(rec.iteration_s) if d > rec.slo_s * (1 + 1e-9)]
        if not over:
            continue
        runs = [r for r in res.groups.values() if name in r.members or name in r.finished]
        ends: list = []
        starts = []  # (time, member) of first rollouts in the member's runs
        lefts = []
        for r in runs:
            mems = {**r.finished, **r.members}
            ends += list(mems[name].iter_end)
            starts += [(m.rollout_starts[0], n) for n, m in mems.items() if m.rollout_starts and n != name]
            lefts += [(m.last_end, n) for n, m in r.finished.items() if m.last_end is not None and n != name]
        ends.sort()
        for i, ratio in over:
            missed += 1
            end = ends[i] if i < len(ends) else ends[-1]
            start = ends[i - 1] if 0 < i <= len(ends) else -np.inf
            window = 3 * rec.slo_s
            if i == 0:
                cat = "first"
            elif any(start - 1e-6 <= t <= end for t, _ in starts):
                cat = "join"
            elif any(end - window <= t < start for t, _ in starts):
                cat = "after-join"
            elif any(end - window <= t <= end for t, _ in lefts):
                cat = "after-departure"
            else:
                cat = "steady"
            count[cat] += 1
            worst[cat] = max(worst[cat], ratio)
            jobs_by[cat].add(name)
    return {"missed_iterations": missed, "jobs_missing": len({n for s in jobs_by.values() for n in s}),
            "count": count, "worst": worst, "jobs": {c: len(v) for c, v in jobs_by.items()}}


def solo_costs(job, prices: dict, gpn: int):
    """A trace job on its Solo-D pools: (its phase profile there, mean rollout s, mean training + sync s,
    $/s of its rollout pool, $/s of its training pool)."""
    p = job.profile(job.solo)
    a, bs = float(np.mean(p.rollout_s)), float(np.mean(p.train_s)) + p.sync_s
    cr = job.solo.rollout_nodes * gpn * prices[job.solo.rollout_type] / 3600.0
    ct = job.solo.train_nodes * gpn * prices[job.solo.train_type] / 3600.0
    return p, a, bs, cr, ct


def ceiling_task(scenario: str) -> dict:
    """Lower bounds on any group plan's cost against Solo-D for the trace's jobs (module docstring)."""
    from planner.instances import simulate as inst
    from planner.schema import load_scenario
    from planner.sim.trace_baselines import SC

    sc = load_scenario(SC / scenario)
    jobs = inst.trace_jobs(sc, 0)
    si = inst.simulated_instance(sc, jobs)
    slo = {j.name: j.slo_s for j in si.jobs}
    prices, gpn = inst.prices(sc), inst.gpus_per_node(sc)
    solo = busy = own = 0.0
    a90 = {}
    ratio_one = 0
    spec = {j.name: j for j in sc.jobs}
    for j in jobs:
        p, a, bs, cr, ct = solo_costs(j, prices, gpn)
        solo += j.iterations * (a + bs) * (cr + ct)
        busy += j.iterations * (a * cr + bs * ct)
        own += j.iterations * ((a + bs) * cr + bs * ct)
        a90[j.name] = (float(np.quantile(p.rollout_s, 0.9)), (j.solo.rollout_type, j.solo.rollout_nodes))
        r = spec[j.name].slo.ratio_to_solo
        ratio_one += int(r is not None and r <= 1.0 + 1e-9)
    share = 0
    for n, (a, pool) in a90.items():
        if any(m != n and q == pool and a + b <= min(slo[n], slo[m]) for m, (b, q) in a90.items()):
            share += 1
    return {"jobs": len(jobs), "solo_d": solo, "busy": busy, "own_rollout": own, "can_share_rollout": share,
            "slo_ratio_one": ratio_one}
