"""What re-packing would cost: the offline optimum of the jobs present, against the online groups.

Two tasks of the trace reproduction (:mod:`planner.sim.trace_baselines` renders their tables; its
constants set their sizes):

* ``instant``: at evenly spaced moments of a ``groups`` / ``simulator`` trace, the $/h the online groups
  hold, the offline optimum of the jobs running then (column generation, every job free to move) and
  what those jobs cost on their Solo-D pools and colocated as veRL; the GPUs of each type online and in
  the optimum, so the table says which side the online policy loses on;
* ``online``: windows of consecutive arrivals, all present at once, admitted online (Weave's three moves,
  with and without the re-pack move) against the proven offline optimum of the same jobs.
"""

from __future__ import annotations

import numpy as np

from planner.sim import trace_baselines as tb
from planner.sim.trace_baselines import INSTANT_SAMPLES, ONLINE_JOBS, ONLINE_WINDOWS, admission_options, run_policy, verl_jobs



def online_task(scenario: str, jobs: int = ONLINE_JOBS, windows: int = ONLINE_WINDOWS) -> dict:
    """Online admission (Weave's three moves, in arrival order, no departures; and the same with the
    re-pack move, ``Packer.admit_repack``) against the offline optimum of the same jobs (column
    generation, proven optimal) on windows of consecutive arrivals of the scenario, compiled on the
    planner's own tables."""
    from formulation.common import SolveOptions
    from formulation.placement.evaluate import Index
    from formulation.placement.greedy import Packer, arrival_order, greedy
    from formulation.placement.solve import solve
    from planner.instances.placement import compile_scenario
    from planner.schema import load_scenario

    sc = load_scenario(tb.SC / scenario)
    sc = sc.model_copy(update={"jobs": sorted(sc.jobs, key=lambda j: (j.arrival_s, j.name))[: jobs * windows]})
    full = compile_scenario(sc)
    out = []
    for w in range(windows):
        inst = full.model_copy(update={"jobs": full.jobs[w * jobs:(w + 1) * jobs]})
        if not inst.jobs:
            break
        idx = Index(inst)
        on = greedy(idx, "arrival")
        pk = Packer(idx)
        for j in arrival_order(idx):
            pk.admit_repack(j)
        rp = pk.solution()
        res = solve(inst, SolveOptions(time_limit_s=60, mip_gap=0.0), "colgen")
        out.append({"window": w, "jobs": len(inst.jobs), "online": on.cost(idx), "online_unplaced": len(on.unplaced),
                    "online_repack": rp.cost(idx), "online_repack_unplaced": len(rp.unplaced),
                    "offline": res.plan.cost_per_hour, "offline_unplaced": len(res.plan.unplaced),
                    "offline_status": res.record.status.value, "offline_bound": res.record.best_bound})
    return {"windows": out}




def instant_task(scenario: str, samples: int = INSTANT_SAMPLES, admission: str = "weave") -> dict:
    """How far the online groups (simulator tables) are from re-packing for free at every moment:
    at ``samples`` evenly spaced moments of the ``groups`` / ``simulator`` trace under ``admission``, the
    $/h it has provisioned, the offline optimum of the jobs running then (column generation on the same
    simulator tables and SLOs, every job free to move) and what those jobs cost on their Solo-D pools and
    colocated as veRL (sized as :func:`verl_jobs` under the same SLOs); the GPUs of each type online and
    in the optimum; and the prices they are billed at."""
    from formulation.common import SolveOptions
    from formulation.placement.solve import solve
    from planner.instances import simulate as inst
    from planner.schema import load_scenario

    res = run_policy(scenario, "groups", "simulator", **admission_options(admission))
    sc = load_scenario(tb.SC / scenario)
    jobs = {j.name: j for j in inst.trace_jobs(sc, 0)}
    si = inst.simulated_instance(sc, list(jobs.values()))
    # veRL sized per job under the same (simulator) SLOs, as the `verl` / `simulator` row: its $/h for the same jobs
    verl = {j.name: j.colocated for j in verl_jobs(inst.with_simulated_slos(list(jobs.values()), si), sc)}
    by = {j.name: j for j in si.jobs}
    prices, gpn = inst.prices(sc), inst.gpus_per_node(sc)
    end = res.end_s
    out = []
    for t in np.linspace(0.0, end, samples + 2)[1:-1]:
        present = sorted(n for n, r in res.jobs.items() if r.admitted_s is not None and r.admitted_s <= t < (r.done_s or end))
        if not present:
            continue
        level: dict = {}
        for at, typ, lv in res.provisioned:
            if at <= t:
                level[typ] = lv
        online = sum(prices.get(k, 0.0) * v for k, v in level.items())
        r = solve(si.model_copy(update={"jobs": [by[n] for n in present]}), SolveOptions(time_limit_s=20, mip_gap=0.0), "colgen")
        solo = sum(gpn * (jobs[n].solo.rollout_nodes * prices[jobs[n].solo.rollout_type]
                          + jobs[n].solo.train_nodes * prices[jobs[n].solo.train_type]) for n in present)
        colo = sum(gpn * verl[n].train_nodes * prices[verl[n].train_type] for n in present)
        opt_gpus: dict = {}
        for g in r.plan.groups:
            for pool in (g.rollout_pool, g.train_pool):
                opt_gpus[pool.gpu_type] = opt_gpus.get(pool.gpu_type, 0) + pool.gpus
        out.append({"t": float(t), "jobs": len(present), "online": online, "offline": r.plan.cost_per_hour,
                    "offline_status": r.record.status.value, "offline_unplaced": len(r.plan.unplaced), "solo_d": solo,
                    "verl": colo, "online_gpus": {k: int(v) for k, v in level.items()}, "offline_gpus": opt_gpus})
    return {"samples": out, "prices": prices}
