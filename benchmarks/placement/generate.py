"""The benchmark instance generator (documented, seeded): realistic job mixes at any size.

``generate(n_jobs, seed, templates)`` draws ``n_jobs`` jobs uniformly from *templates*: the
distinct job profiles (phase-time tables on H20 rollout / H800 training pools, host DRAM) of the
shipped trace ``scenarios/weave-trace-60.yaml`` as the estimators compile it (its numbers-only
form is ``scenarios/instances/weave-trace-60.yaml``: six Qwen2.5 1.5B-32B GRPO templates x
4k/8k/16k maximum response lengths, agentic variants included). Each job gets an SLO tier of
1.3, 1.5, 1.7 or 2.0 x its solo iteration time at its own node counts (platform teams sell a
handful of SLO classes), and an arrival time from a Poisson process (one job per 120 s on
average). The fleet has ``n`` nodes of each type (8 GPUs, 2 TB host DRAM, H20 at
1.0 and H800 at 2.0 $/GPU-h): enough that capacity does not decide feasibility, as in Weave's
setting of a cluster sized for its jobs.

Identical template and tier give identical jobs: at 2,000 jobs there are at most
``templates x 4`` job classes, which is what the pattern model exploits.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

from formulation.placement.instance import PlacementInstance, PlacementJob, PoolType

SLO_TIERS = (1.3, 1.5, 1.7, 2.0)
MEAN_INTERARRIVAL_S = 120.0


def templates_from(inst: PlacementInstance) -> list[PlacementJob]:
    """Distinct job profiles of an instance (SLO and name ignored)."""
    seen, out = set(), []
    for j in inst.jobs:
        key = (repr(j.rollout_s), repr(j.train_s), repr(j.sync_s), j.dram_rollout_node_gb, j.train_state_gb)
        if key not in seen:
            seen.add(key)
            out.append(j)
    return out


def _solo(job: PlacementJob) -> float:
    # at the smallest pools the job allows (its own node counts)
    p = sorted(job.rollout_s)[0]
    q = sorted(job.train_s)[0]
    a = job.rollout_s[p][min(job.rollout_s[p])]
    b = job.train_s[q][min(job.train_s[q])]
    return a + b + job.sync(p, q)


def generate(n_jobs: int, seed: int, templates: Sequence[PlacementJob], pool_types: dict[str, PoolType] | None = None) -> PlacementInstance:
    rng = np.random.default_rng(seed)
    count = max(2, n_jobs)
    if pool_types is None:
        pool_types = {"H20": PoolType(gpus_per_node=8, price_per_gpu_hour=1.0, dram_gb=2048, count=count),
                      "H800": PoolType(gpus_per_node=8, price_per_gpu_hour=2.0, dram_gb=2048, count=count)}
    jobs = []
    t = 0.0
    for i in range(n_jobs):
        tpl = templates[int(rng.integers(len(templates)))]
        tier = float(SLO_TIERS[int(rng.integers(len(SLO_TIERS)))])
        t += float(rng.exponential(MEAN_INTERARRIVAL_S))
        cap = {tt: p.count for tt, p in pool_types.items()}
        jobs.append(PlacementJob(
            name=f"job-{i:05d}", slo_s=round(tier * _solo(tpl), 6),
            rollout_s={tt: {n: v for n, v in row.items() if n <= cap.get(tt, 0)} for tt, row in tpl.rollout_s.items() if tt in cap},
            train_s={tt: {n: v for n, v in row.items() if n <= cap.get(tt, 0)} for tt, row in tpl.train_s.items() if tt in cap},
            sync_s=tpl.sync_s, dram_rollout_node_gb=tpl.dram_rollout_node_gb, train_state_gb=tpl.train_state_gb,
            arrival_s=round(t, 1)))
    return PlacementInstance(name=f"generated-{n_jobs}-seed{seed}", pool_types=pool_types, jobs=jobs)


# ----------------------------------------------------------------------------------- distinct jobs
#: GPU types of the distinct-job fleet: (GPUs per node, $/GPU-h, host DRAM GB per node, rollout
#: speed, training speed) -- speeds relative to H20 rollout / H800 training (larger is faster).
DISTINCT_TYPES = {
    "H20": (8, 1.0, 2048.0, 1.0, 0.4),
    "H800": (8, 2.0, 2048.0, 1.6, 1.0),
    "A100": (8, 1.5, 1024.0, 1.25, 0.7),
    "L40S": (8, 0.75, 512.0, 0.8, 0.25),
}
DISTINCT_POOL_SIZES = (1, 2, 3, 4, 6, 8)


def generate_distinct(n_jobs: int, seed: int, fleet_per_job: float = 1.5, unplaceable: float = 0.02,
                      slo_ratio: tuple[float, float] = (1.05, 2.2), types: dict | None = None,
                      counts: dict[str, int] | None = None) -> PlacementInstance:
    """``n_jobs`` jobs that are all different, as on a real fleet (seeded).

    Per job: a heavy-tailed (lognormal, sigma 0.8) rollout and training time on one node of the
    reference type, an own scaling exponent per phase (0.55-0.95: ``t(n) = t(n0) (n0/n)^e``), an
    own smallest pool (1-2 rollout nodes, 1-4 training nodes: jobs need different training-pool
    sizes), a random subset of the GPU types it may use for each phase with a +-15% jitter on
    the type's speed, a weight sync of 0-5 s per type pair, uneven host DRAM (rollout lognormal
    around 150 GB, training state around 600 GB, both sigma 0.9) and a tight SLO: a uniform
    ``slo_ratio`` times its solo iteration on its smallest pools of its fastest types. A share
    ``unplaceable`` of the jobs fits nowhere (half: SLO below its fastest solo time on any pool;
    half: more rollout DRAM than any node has). The fleet: ``fleet_per_job x n_jobs`` nodes of
    each of four types with different prices and DRAM (``DISTINCT_TYPES``) unless ``counts``.
    """
    rng = np.random.default_rng(seed)
    types = types or DISTINCT_TYPES
    if counts is None:
        counts = {t: max(2, int(round(fleet_per_job * n_jobs))) for t in types}
    pool_types = {t: PoolType(gpus_per_node=g, price_per_gpu_hour=p, dram_gb=d, count=counts[t]) for t, (g, p, d, _, _) in types.items()}
    names = list(types)
    max_dram = max(d for _, _, d, _, _ in types.values())
    jobs = []
    t_arr = 0.0
    n_bad = int(round(unplaceable * n_jobs))
    bad = set(rng.choice(n_jobs, size=n_bad, replace=False).tolist()) if n_bad else set()
    for i in range(n_jobs):
        a1 = float(rng.lognormal(np.log(200.0), 0.8))
        b1 = float(rng.lognormal(np.log(150.0), 0.8))
        ea, eb = float(rng.uniform(0.55, 0.95)), float(rng.uniform(0.55, 0.95))
        r0 = int(rng.choice([1, 1, 2]))
        t0 = int(rng.choice([1, 1, 2, 4]))
        r_types = [t for t in names if rng.random() < 0.6] or [names[int(rng.integers(len(names)))]]
        t_types = [t for t in names if rng.random() < 0.5] or [names[int(rng.integers(len(names)))]]
        rollout, train, sync = {}, {}, {}
        for t in r_types:
            speed = types[t][3] * float(rng.uniform(0.85, 1.15))
            rollout[t] = {n: round(a1 / speed * (r0 / n) ** ea, 3) for n in DISTINCT_POOL_SIZES if r0 <= n <= counts[t]}
        for t in t_types:
            speed = types[t][4] * float(rng.uniform(0.85, 1.15))
            train[t] = {n: round(b1 / speed * (t0 / n) ** eb, 3) for n in DISTINCT_POOL_SIZES if t0 <= n <= counts[t]}
        rollout = {t: row for t, row in rollout.items() if row} or {r_types[0]: {r0: round(a1, 3)}}
        train = {t: row for t, row in train.items() if row} or {t_types[0]: {t0: round(b1, 3)}}
        for p in rollout:
            sync[p] = {q: round(float(rng.uniform(0, 5)), 3) for q in train}
        dram_r = round(float(rng.lognormal(np.log(150.0), 0.9)), 1)
        state = round(float(rng.lognormal(np.log(600.0), 0.9)), 1)
        solo = min(rollout[p][min(rollout[p])] + train[q][min(train[q])] + sync[p][q] for p in rollout for q in train)
        fastest = min(min(rollout[p].values()) + min(train[q].values()) + sync[p][q] for p in rollout for q in train)
        slo = solo * float(rng.uniform(*slo_ratio))
        if i in bad:
            if rng.random() < 0.5:
                slo = fastest * 0.8
            else:
                dram_r = round(max_dram * float(rng.uniform(1.1, 1.5)), 1)
        t_arr += float(rng.exponential(MEAN_INTERARRIVAL_S))
        jobs.append(PlacementJob(name=f"job-{i:05d}", slo_s=round(slo, 3), rollout_s=rollout, train_s=train, sync_s=sync,
                                 dram_rollout_node_gb=dram_r, train_state_gb=state, arrival_s=round(t_arr, 1)))
    return PlacementInstance(name=f"distinct-{n_jobs}-seed{seed}", pool_types=pool_types, jobs=jobs)
