"""Phase-time profiles for the phase-level model, measured with the request-level model.

For a job on a (rollout pool, training pool) pair, :func:`phase_profile` runs the one phase-time
model (:mod:`simulator.phasetimes`, which the planners read too): the request-level rollout
(:class:`simulator.rollout.RolloutStage` on every GPU of the rollout pool) for a few seeds and
keeps, for the phases one after the other as a group member runs them:

* ``rollout_s``: rollout makespans (one per seed): the long tail, KV limits and the engine
  overhead included, unlike the estimators' analytic phase times;
* ``train_s``: log-prob passes and the update over the whole training pool for the same samples
  (their FLOPs, :func:`simulator.job.sample_work_flops`, at the pool's rate), plus the optimizer
  step (the training pool runs them back to back for a group member);
* ``sync_s``: the weight sync between the two pools;
* a :class:`simulator.groups.TailProfile` from a second run with long-tail consolidation at
  ``consolidate_at``: the fraction of the rollout before consolidation, the GPUs the packed tail
  keeps, and how much packing stretches the tail.

Profiles are cached per job shape and pools (a trace has few distinct shapes).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Optional

import numpy as np

from simulator.groups import TailProfile
from simulator.job import JobSetup
from simulator.phasetimes import rollout_run, sync_time_s, train_time_s


@dataclass(frozen=True)
class PhaseProfile:
    rollout_s: tuple
    train_s: tuple
    sync_s: float
    tail: Optional[TailProfile]
    tokens_per_iteration: float
    requests_per_iteration: int

    @property
    def mean_iteration_s(self) -> float:
        return float(np.mean(self.rollout_s) + np.mean(self.train_s) + self.sync_s)


_CACHE: dict = {}


def _key(setup: JobSetup, seeds: int, consolidate_at: Optional[float], first_seed: int = 0) -> tuple:
    return (setup.model, setup.workload, setup.rollout_gpu, setup.train_gpu, setup.gpus_per_node, setup.rollout_nodes,
            setup.train_nodes, setup.rollout_tp, setup.train_unit, setup.forwards, setup.updates, setup.train_mfu,
            setup.weight_sync, setup.inter_cluster_gb_per_s, setup.overhead_ms, seeds, consolidate_at, first_seed)


def _rollout_once(setup: JobSetup, seed: int, consolidate_at: Optional[float]):
    reqs, makespan, stage = rollout_run(setup, seed, consolidate_at)
    kept = None
    if stage is not None and stage.consolidated_at_s is not None:
        t = stage.consolidated_at_s
        kept = sum(e.gpus for eid, e in stage.engines.items() if stage.held[eid][1] is None or stage.held[eid][1] > t + 1e-9)
    return reqs, makespan, (stage.consolidated_at_s if stage is not None else None), kept


def phase_profile(setup: JobSetup, seeds: int = 3, consolidate_at: Optional[float] = 0.8, first_seed: int = 0) -> PhaseProfile:
    """``seeds`` rollouts on seeds ``first_seed, first_seed + 1, ...`` (another ``first_seed``: samples of
    the same job that a planner holding the default ones has never seen)."""
    key = _key(setup, seeds, consolidate_at, first_seed)
    if key in _CACHE:
        return _CACHE[key]
    s = setup
    r_s, t_s, tokens = [], [], []
    body, tail_gpus, stretch = [], [], []
    reqs = []
    for seed in range(first_seed, first_seed + seeds):
        reqs, T, _, _ = _rollout_once(s, seed, None)
        r_s.append(T)
        t_s.append(train_time_s(s, reqs))
        tokens.append(float(sum(r.response_tokens for r in reqs)))
        if consolidate_at is not None:
            _, Tc, at, kept = _rollout_once(s, seed, consolidate_at)
            if at is not None and kept is not None and Tc > 0:
                body.append(at / T)  # of the unconsolidated makespan: body = body_frac x a, then the stretched tail
                tail_gpus.append(kept)
                stretch.append((Tc - at) / (T - at) if T > at else 1.0)
    tail = None
    if body:
        tail = TailProfile(body_frac=float(np.mean(body)), tail_gpus=int(math.ceil(np.mean(tail_gpus))),
                           tail_stretch=float(np.mean(stretch)))
    sync = sync_time_s(s)
    prof = PhaseProfile(tuple(r_s), tuple(t_s), float(sync), tail, float(np.mean(tokens)), len(reqs))
    _CACHE[key] = prof
    return prof
