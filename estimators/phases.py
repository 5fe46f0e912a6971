"""Per-job phase times on a pool: rollout, training (with log-prob inference), weight sync.

The input is a :class:`JobProfile` of plain numbers (the planner builds it from a scenario job);
the output is seconds. One RL iteration of a job in a disaggregated set-up is::

    rollout (rollout pool)  →  log-probs + training (training pool)  →  weight sync (train → rollout)

* rollout: :mod:`estimators.rollout` (conservative bound, or sampled lengths); multi-turn jobs
  generate ``max_response_tokens / turns`` per turn with a tool call between turns
  (conservative: the 99th percentile of the measured tool latency; sampled: its mean), and each
  turn re-prefills the tool observation;
* training pool: reference and old-policy log-probs (and the critic's values for PPO) as forward
  passes, then the policy (and critic) update, over every generated and prompt token
  (:mod:`estimators.training`); the conservative bound counts every response at its maximum;
* weight sync: :func:`estimators.comm.weight_sync_s`.

These are fast analytic approximations (the engine's per-step overhead and verl's contiguous
dispatch included, but no prefill, KV preemption or per-sample training FLOPs). The planners and
the simulator do not read them: their one phase-time model is :mod:`simulator.phasetimes`, which
runs the request-level engines (``results/fidelity/before.md``: plans on the earlier analytic times
were 6-180% short of the simulated cycles).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from estimators import comm, memory, rollout, training
from estimators.gpus import GPUSpec
from estimators.lengths import LengthDistribution, sample_grouped, tool_latencies_s
from estimators.models import ModelDims


@dataclass(frozen=True)
class JobProfile:
    name: str
    model: ModelDims
    batch_prompts: int
    group_size: int
    prompt_tokens: int
    max_response_tokens: int
    lengths: LengthDistribution
    turns: int = 1
    tool_latency_fixed_s: float | None = None  # None: RollPacker's measured latencies
    observation_tokens: int = 0
    rollout_tp: int = 1
    trainer_tp: int = 1
    trainer_pp: int = 1
    trainer_dp: int | None = None
    train_mfu: float = training.DEFAULT_TRAIN_MFU
    has_critic: bool = False
    has_reference: bool = True
    weight_sync: str = "scatter_broadcast"
    seed: int = 0
    tool_latency_table: tuple[float, ...] | None = None  # the user's tool latencies (s): inverse CDF grid, estimators.traces
    prompt_table: tuple[float, ...] | None = None  # the user's prompt lengths (tokens), same shape; prompt_tokens is their mean

    @property
    def n_requests(self) -> int:
        return self.batch_prompts * self.group_size


@dataclass(frozen=True)
class PoolShape:
    gpu: GPUSpec
    nodes: int
    gpus_per_node: int

    @property
    def gpus(self) -> int:
        return self.nodes * self.gpus_per_node


def tool_latency_s(job: JobProfile, conservative: bool) -> float:
    if job.tool_latency_fixed_s is not None:
        return job.tool_latency_fixed_s
    vals = np.asarray(job.tool_latency_table) if job.tool_latency_table is not None else tool_latencies_s()
    return float(np.quantile(vals, 0.99)) if conservative else float(np.mean(vals))


def _sampled_lengths(job: JobProfile) -> np.ndarray:
    rng = np.random.default_rng(job.seed)
    dist = LengthDistribution(**{**job.lengths.__dict__, "max_tokens": job.max_response_tokens})
    return sample_grouped(dist, job.batch_prompts, job.group_size, rng)


def rollout_s(job: JobProfile, pool: PoolShape, mode: str = "conservative") -> float:
    """Rollout phase seconds of one iteration on ``pool``."""
    conservative = mode == "conservative"
    turns = max(1, job.turns)
    per_turn_max = job.max_response_tokens / turns
    if conservative:
        gen = 0.0
        for t in range(turns):
            ctx = job.prompt_tokens + t * (per_turn_max + job.observation_tokens)
            gen += rollout.conservative_phase_s(job.model, pool.gpu, job.rollout_tp, pool.gpus, job.n_requests, ctx, per_turn_max,
                                               overhead_ms=rollout.ENGINE_STEP_OVERHEAD_MS)
    else:
        lengths = _sampled_lengths(job) / turns
        gen = 0.0
        for t in range(turns):
            ctx = job.prompt_tokens + t * (float(np.mean(lengths)) + job.observation_tokens)
            gen += rollout.sampled_phase_s(job.model, pool.gpu, job.rollout_tp, pool.gpus, lengths, ctx, per_turn_max,
                                          overhead_ms=rollout.ENGINE_STEP_OVERHEAD_MS, dispatch="contiguous")
    tools = (turns - 1) * tool_latency_s(job, conservative)
    return gen + tools


def mean_response_tokens(job: JobProfile, mode: str) -> float:
    if mode == "conservative":
        return float(job.max_response_tokens)
    return float(np.mean(_sampled_lengths(job)))


def train_s(job: JobProfile, pool: PoolShape, mode: str = "conservative") -> float:
    """Training-pool seconds of one iteration: log-prob passes plus the update(s)."""
    resp = mean_response_tokens(job, mode)
    seq = job.prompt_tokens + resp + (job.turns - 1) * job.observation_tokens
    tokens = job.n_requests * seq
    ctx = seq / 2.0
    forwards = 1 + (1 if job.has_reference else 0) + (1 if job.has_critic else 0)  # old policy, reference, critic values
    t = forwards * training.logprob_s(job.model, pool.gpu, pool.gpus, tokens, ctx)
    updates = 2 if job.has_critic else 1
    t += updates * training.train_step_s(job.model, pool.gpu, pool.gpus, tokens, ctx, job.train_mfu)
    return t


def sync_s(job: JobProfile, rollout_pool: PoolShape, train_pool: PoolShape,
           inter_cluster_gb_per_s: float | None) -> float:
    weight_bytes = job.model.num_params * 2.0
    links = comm.SyncLinks(
        trainer_nic_gb_per_s=train_pool.gpus * train_pool.gpu.inter_node_bw_gb_per_s,
        rollout_nic_gb_per_s=rollout_pool.gpus * rollout_pool.gpu.inter_node_bw_gb_per_s,
        inter_cluster_gb_per_s=inter_cluster_gb_per_s,
    )
    engines = max(1, rollout_pool.gpus // job.rollout_tp)
    return comm.weight_sync_s(weight_bytes, engines, rollout_pool.nodes, rollout_pool.gpu, links, job.weight_sync)


def fits_rollout(job: JobProfile, gpu: GPUSpec) -> bool:
    return memory.kv_capacity_tokens(job.model, gpu.hbm_gb, job.rollout_tp) >= job.prompt_tokens + job.max_response_tokens


def trainer_dp(job: JobProfile, pool: PoolShape) -> int:
    return job.trainer_dp or max(1, pool.gpus // (job.trainer_tp * job.trainer_pp))


def fits_training(job: JobProfile, pool: PoolShape) -> bool:
    return memory.fits_training(job.model, pool.gpu.hbm_gb, job.trainer_tp, job.trainer_pp, trainer_dp(job, pool))


def host_dram_gb(job: JobProfile, train_nodes: int) -> tuple[float, float]:
    """(per rollout node, per training node) host DRAM to keep the job resident."""
    return memory.host_dram_rollout_node_gb(job.model), memory.host_dram_train_node_gb(job.model, train_nodes)


def rollout_throughput_points(job: JobProfile, gpu: GPUSpec, gpus_list: list[int]) -> list[tuple[int, float]]:
    """Profile points (GPUs, decode tokens/s) of a rollout pool at full KV-limited batch."""
    out = []
    ctx = job.prompt_tokens + job.max_response_tokens / 2.0
    conc = rollout.max_concurrency(job.model, gpu, job.rollout_tp, job.prompt_tokens + job.max_response_tokens)
    for g in gpus_list:
        engines = g // job.rollout_tp
        if engines <= 0 or conc <= 0:
            continue
        per_engine = min(conc, math.ceil(job.n_requests / engines))
        out.append((g, engines * rollout.throughput_tokens_per_s(job.model, gpu, job.rollout_tp, per_engine, ctx)))
    return out
