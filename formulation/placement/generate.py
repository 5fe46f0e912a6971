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
