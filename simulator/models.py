"""Estimator numbers → the simulator's plain engine and stage constants.

This is the only simulator module that calls the estimators for per-step numbers:

* engine step time: :func:`estimators.rollout.engine_step_model` (kernel fit plus the calibrated
  per-step engine overhead :data:`estimators.rollout.ENGINE_STEP_OVERHEAD_MS`);
* prefill: :func:`estimators.rollout.prefill_ms`, memoised on rounded arguments (one batch of
  ``n`` sequences of the mean new length);
* KV capacity: :func:`estimators.memory.kv_capacity_tokens`; running cap
  :data:`estimators.rollout.MAX_RUNNING_REQUESTS`.
"""

from __future__ import annotations

from functools import lru_cache

from estimators import memory, rollout
from estimators.gpus import GPUSpec
from estimators.models import ModelDims
from simulator.engine import EngineModel


def engine_model(model: ModelDims, gpu: GPUSpec, tp: int, *, overhead_ms: float | None = None,
                 max_running: int = rollout.MAX_RUNNING_REQUESTS, fit_batch: int = rollout.ENGINE_FIT_BATCH) -> EngineModel:
    ov = rollout.ENGINE_STEP_OVERHEAD_MS if overhead_ms is None else overhead_ms
    step = rollout.engine_step_model(model, gpu, tp, fit_batch, overhead_ms=ov)
    kv = memory.kv_capacity_tokens(model, gpu.hbm_gb, tp)

    @lru_cache(maxsize=4096)
    def _prefill(n: int, L: int) -> float:
        return float(rollout.prefill_ms(model, gpu, tp, n, L))

    def prefill(n_seqs: float, mean_len: float) -> float:
        n = max(1, int(round(n_seqs)))
        L = max(1, int(round(mean_len / 64.0)) * 64)  # 64-token buckets for the memo
        return _prefill(n, L)

    return EngineModel(a_ms=step.a_ms, b_ms=step.b_ms, c_ms=step.c_ms, kv_capacity_tokens=kv,
                       max_running=max_running, prefill=prefill)
