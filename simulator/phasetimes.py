"""The one phase-time model: what the planners assume is what the simulator runs.

Every phase time a planner reads (the placement and capacity instances, the what-if planner, the
admission and the daemon's estimates) and every phase time the phase-level simulator draws
(:mod:`simulator.profiles`, :mod:`simulator.groups`, a plan simulated by
:mod:`planner.sim.planrun`) comes from the functions of this module, which run the request-level
model itself:

* **rollout**: the requests of one iteration (:func:`simulator.workload.make_requests`: GRPO
  groups, per-prompt difficulty, turns and tool calls) on the pool's engines
  (:class:`simulator.rollout.RolloutStage`): verl's contiguous dispatch (a prompt's siblings on one
  engine), continuous batching under the KV capacity and the running cap, prefill of every
  admitted context, preemption, prefix caching, and the per-step engine overhead of
  :func:`estimators.rollout.engine_step_model`; the phase time is the makespan;
* **training**: log-prob passes and the update(s) of every sample (its own FLOPs,
  :func:`simulator.job.sample_work_flops`) over the whole training pool at the inference and
  training MFUs, plus the optimizer step (:func:`simulator.job.optimizer_step_s`);
* **weight sync**: :func:`simulator.job.weight_sync_time_s` between the two pools;
* **switch** (a node that changes group member): a warm switch, the member's per-GPU state from
  host DRAM (:func:`estimators.comm.warm_switch_s`), or a cold start
  (:func:`estimators.comm.cold_start_s`).

Estimates (``MODES``), one model:

* ``sampled`` (the expected phase time): the mean over independent iterations (response lengths,
  and tool latencies, drawn from the job's distributions): ``PLAN_SEEDS`` of them, more (up to
  ``PLAN_SEEDS_MAX``) while the standard error of the mean exceeds ``PLAN_REL_SE`` of it (a
  heavy-tailed tool latency or length spreads one iteration's makespan by 5-10%);
* ``p90`` / ``p99`` (a response-length quantile of the phase time): that quantile of
  ``QUANTILE_SEEDS`` independent iterations' phase times (linear interpolation between draws:
  with 16 draws p99 lies between the two longest);
* ``conservative`` = ``max`` (Weave's SLO bound): the same engines with every response at
  ``max_response_tokens`` and every tool call at the 99th percentile of its latency.

An explicit ``margin`` (a fraction) is added on top of either: ``t x (1 + margin)``.

Random streams: the planner's iterations use seeds ``job.seed + k`` for ``k < PLAN_SEEDS``; a
simulation that checks a plan draws from :data:`CHECK_SEED_BASE` on, so it never sees the
planner's own samples.

Results are memoised per (job, pool, mode, seed): a placement instance asks for the same job on
the same pool many times.
"""

from __future__ import annotations

import math
from dataclasses import replace
from functools import lru_cache
from typing import Callable, Optional

import numpy as np

from simulator.core import PastDeadline, watching  # PastDeadline: what rollout_s and train_s raise past a caller's deadline

PLAN_SEEDS = 4  # fewest iterations the planner's expected phase time averages
PLAN_SEEDS_MAX = 12  # most: more only while the standard error of the mean is above PLAN_REL_SE
PLAN_REL_SE = 0.015
CHECK_SEED_BASE = 10_000  # first seed of a simulation that checks a plan (disjoint from the planner's)
QUANTILE_SEEDS = 16  # iterations a quantile estimate (p90, p99) is taken over
QUANTILES = {"p90": 0.9, "p99": 0.99}
MODES = ("conservative", "sampled", "p90", "p99", "max")  # max: the conservative bound under its quantile name


def is_bound(mode: str) -> bool:
    """The conservative bound (every response at its limit): ``conservative`` or ``max``."""
    return mode in ("conservative", "max")


# ------------------------------------------------------------------------------------- set-ups
def setup_for(job, rollout_pool, train_pool=None, inter_cluster_gb_per_s: Optional[float] = None, *,
              conservative: bool = False, slo_s: float = math.inf):
    """The simulator's :class:`simulator.job.JobSetup` of an :class:`estimators.phases.JobProfile` on
    two :class:`estimators.phases.PoolShape` (the training pool defaults to the rollout pool);
    ``conservative``: every response at its maximum and tool calls at their 99th percentile."""
    from estimators.lengths import LengthDistribution
    from simulator.job import setup_from_profile

    train_pool = train_pool if train_pool is not None else rollout_pool
    if train_pool.gpus_per_node != rollout_pool.gpus_per_node:  # the simulator's nodes have one size; only sync and
        train_pool = replace(train_pool, gpus_per_node=rollout_pool.gpus_per_node,  # training GPUs matter here
                             nodes=max(1, round(train_pool.gpus / rollout_pool.gpus_per_node)))
    s = setup_from_profile(job, rollout_pool, train_pool, inter_cluster_gb_per_s=inter_cluster_gb_per_s, slo_s=slo_s)
    s = replace(s, name="job", price_rollout_per_gpu_h=0.0, price_train_per_gpu_h=0.0)  # one memo entry per job shape
    if conservative:
        wl = s.workload
        tool = _tool_p99(job) if wl.turns > 1 else wl.tool_latency_fixed_s
        # prompt_spread 0: the per-prompt difficulty factor would scale half the prompts' responses below the limit
        s = replace(s, workload=replace(wl, lengths=LengthDistribution("fixed", median_tokens=float(wl.max_response_tokens)),
                                        tool_latency_fixed_s=tool, prompt_spread=0.0))
    return s


def _tool_p99(job) -> float:
    from estimators.phases import tool_latency_s

    return tool_latency_s(job, conservative=True)


# -------------------------------------------------------------------------- one iteration's run
def rollout_run(setup, seed: int, consolidate_at: Optional[float] = None):
    """One iteration's rollout, request by request: (requests, makespan s, stage)."""
    from simulator.core import EventLoop
    from simulator.models import engine_model
    from simulator.rollout import EngineSlot, RolloutStage
    from simulator.workload import make_requests

    loop = EventLoop(seed)
    em = engine_model(setup.model, setup.rollout_gpu, setup.rollout_tp, overhead_ms=setup.overhead_ms)
    reqs = make_requests(setup.workload, loop.rng)
    tp = setup.rollout_tp
    slots = [EngineSlot(f"n{n}", setup.rollout_gpu.name, tp) for n in range(setup.rollout_nodes)
             for _ in range(setup.gpus_per_node // tp)]
    if not slots:
        return reqs, math.inf, None
    stage = RolloutStage(loop, em, slots, consolidate_at=consolidate_at)
    stage.start(reqs)
    loop.run()
    ends = [r.done_s for r in reqs]
    if any(e is None for e in ends):
        raise RuntimeError(f"{sum(e is None for e in ends)} requests never finished in a rollout run (seed {seed})")
    return reqs, max(float(e) for e in ends if e is not None), stage


def train_time_s(setup, reqs, train_gpus: Optional[int] = None) -> float:
    """Training-pool seconds of one iteration for these samples: log-probs and update(s) at the
    pool's rate (per-sample FLOPs) plus the optimizer step."""
    from simulator.job import sample_work_flops

    w = np.array([sample_work_flops(setup, r) for r in reqs]).sum(axis=0)
    return _train_from_work(setup, float(w[0]), float(w[1]), train_gpus)


def _train_from_work(setup, logprob_flops: float, update_flops: float, train_gpus: Optional[int] = None) -> float:
    from simulator.job import optimizer_step_s

    tr = train_gpus if train_gpus is not None else setup.train_nodes * setup.gpus_per_node
    peak = setup.train_gpu.bf16_tflops * 1e12
    return float(logprob_flops / (tr * peak * setup.infer_mfu) + update_flops / (tr * peak * setup.train_mfu)
                 + optimizer_step_s(setup, setup.train_gpu, tr))


def sync_time_s(setup) -> float:
    from simulator.job import weight_sync_time_s

    return float(weight_sync_time_s(setup, setup.rollout_gpu, setup.train_gpu, setup.rollout_nodes * setup.gpus_per_node,
                                    setup.train_nodes * setup.gpus_per_node, False))


def switch_times_s(setup, colocated: bool = False, cold: bool = False) -> tuple[float, float]:
    """(rollout, training) seconds a node pays when it changes member: warm = the per-GPU state from
    host DRAM (:func:`estimators.comm.warm_switch_s`); cold = :func:`estimators.comm.cold_start_s`
    (process start, framework init, state from storage); ``colocated``: veRL offloads one state
    and loads the other at every phase change."""
    from estimators import comm, memory

    m = setup.model
    t_gpus = setup.train_nodes * setup.gpus_per_node
    train_state = memory.training_bytes_per_gpu(m, setup.train_unit, 1, max(1, t_gpus // setup.train_unit))
    weights = m.num_params * 2.0 / setup.rollout_tp
    if cold:
        node_r = weights * setup.gpus_per_node
        node_t = train_state * setup.gpus_per_node
        return (comm.cold_start_s(node_r, weights, setup.rollout_gpu), comm.cold_start_s(node_t, train_state, setup.train_gpu))
    if colocated:
        return comm.warm_switch_s(train_state, setup.train_gpu), comm.warm_switch_s(train_state, setup.train_gpu)
    return comm.warm_switch_s(weights, setup.rollout_gpu), comm.warm_switch_s(train_state, setup.train_gpu)


# ------------------------------------------------------------------------ memoised samples
@lru_cache(maxsize=65536)
def _rollout_sample(setup, seed: int) -> float:
    return float(rollout_run(setup, seed)[1])


@lru_cache(maxsize=65536)
def _sample_work(workload, model, forwards: int, updates: int, seed: int) -> tuple[float, float]:
    """(log-prob FLOPs, update FLOPs) of one iteration's samples: the same draws as the rollout of
    that seed, independent of the pools (so one draw serves every training pool size)."""
    from simulator.core import EventLoop
    from simulator.job import sample_work_flops
    from simulator.workload import make_requests

    reqs = make_requests(workload, EventLoop(seed).rng)
    probe = _WorkProbe(model, forwards, updates)
    w = np.array([sample_work_flops(probe, r) for r in reqs]).sum(axis=0)
    return float(w[0]), float(w[1])


class _WorkProbe:
    """The fields of a set-up that :func:`simulator.job.sample_work_flops` reads."""

    def __init__(self, model, forwards: int, updates: int) -> None:
        self.model, self.forwards, self.updates = model, forwards, updates


@lru_cache(maxsize=65536)
def _train_sample(setup, seed: int) -> float:
    w0, w1 = _sample_work(setup.workload, setup.model, setup.forwards, setup.updates, seed)
    return _train_from_work(setup, w0, w1)


def _mean(sample, job, mode: str, seeds: Optional[int], stop: Optional[Callable[[], bool]] = None) -> float:
    """Mean of ``sample(seed)`` over the job's seeds: one (conservative), ``seeds`` when given, else
    ``PLAN_SEEDS`` and more until the standard error is within ``PLAN_REL_SE`` (at most ``PLAN_SEEDS_MAX``).
    ``stop()`` is asked before each draw and during its simulation (:func:`simulator.core.watching`):
    true raises :class:`PastDeadline` (the draws done before it stay memoised)."""
    def draw(seed: int) -> float:
        if stop is None:
            return sample(seed)
        if stop():
            raise PastDeadline("the caller's deadline passed")
        with watching(stop):
            return sample(seed)

    base = int(job.seed)
    if mode in QUANTILES:
        return float(np.quantile([draw(base + k) for k in range(QUANTILE_SEEDS)], QUANTILES[mode]))
    if mode != "sampled":
        return float(draw(base))
    n = PLAN_SEEDS if seeds is None else seeds
    xs = [draw(base + k) for k in range(n)]
    while seeds is None and len(xs) < PLAN_SEEDS_MAX:
        m = float(np.mean(xs))
        if not math.isfinite(m) or m <= 0 or float(np.std(xs, ddof=1)) / math.sqrt(len(xs)) <= PLAN_REL_SE * m:
            break
        xs.append(draw(base + len(xs)))
    return float(np.mean(xs))


def _check_mode(mode: str) -> None:
    if mode not in MODES:
        raise ValueError(f"unknown phase-time mode {mode!r} ({' | '.join(MODES)})")


# --------------------------------------------------------------------- the planners' interface
def rollout_s(job, pool, mode: str = "conservative", *, margin: float = 0.0, seeds: Optional[int] = None,
              stop: Optional[Callable[[], bool]] = None) -> float:
    """Rollout seconds of one iteration of ``job`` (:class:`estimators.phases.JobProfile`) on
    ``pool`` (:class:`estimators.phases.PoolShape`): the mean makespan of the request-level rollout.
    ``stop``: asked before and during each simulated iteration, true raises :class:`PastDeadline`."""
    _check_mode(mode)
    setup = setup_for(job, pool, conservative=is_bound(mode))
    t = _mean(lambda s: _rollout_sample(setup, s), job, mode, seeds, stop)
    return t * (1.0 + margin)


def train_s(job, pool, mode: str = "conservative", *, margin: float = 0.0, seeds: Optional[int] = None,
            stop: Optional[Callable[[], bool]] = None) -> float:
    """Training-pool seconds of one iteration on ``pool`` (log-probs, update(s), optimizer step);
    ``stop`` as for :func:`rollout_s`."""
    _check_mode(mode)
    setup = setup_for(job, pool, pool, conservative=is_bound(mode))
    t = _mean(lambda s: _train_sample(setup, s), job, mode, seeds, stop)
    return t * (1.0 + margin)


def sync_s(job, rollout_pool, train_pool, inter_cluster_gb_per_s: Optional[float] = None) -> float:
    """Weight-sync seconds from ``train_pool`` to the engines of ``rollout_pool``."""
    return sync_time_s(setup_for(job, rollout_pool, train_pool, inter_cluster_gb_per_s))


def switch_s(job, rollout_pool, train_pool) -> tuple[float, float]:
    """(rollout, training) warm-switch seconds of ``job`` on these pools."""
    return switch_times_s(setup_for(job, rollout_pool, train_pool))


def cache_clear() -> None:
    _rollout_sample.cache_clear()
    _train_sample.cache_clear()
    _sample_work.cache_clear()
