"""Training-pool phase times: policy (and critic) training, log-prob inference.

Training FLOPs per token are 3x the forward FLOPs (forward + backward at twice the forward), the
forward being ``2 x matmul parameters`` plus causal attention (Kaplan et al. 2020; Narayanan et
al., SC'21, Megatron-LM, eq. 3 without recomputation). Time is FLOPs over the pool's peak dense
bf16 FLOP/s times a model FLOPs utilisation (MFU).

``DEFAULT_TRAIN_MFU = 0.35``: Megatron-LM reports 41-52 % MFU for dense GPT training on H100/A100
at scale; RL trainers see variable-length, padded micro-batches and smaller models, so the
default sits below (a scenario sets ``trainer.mfu`` from its own profile). Log-prob inference is a
forward pass at ``DEFAULT_INFER_MFU = 0.4`` (no backward, larger micro-batches).
"""

from __future__ import annotations

from estimators.gpus import GPUSpec
from estimators.models import ModelDims

DEFAULT_TRAIN_MFU = 0.35
DEFAULT_INFER_MFU = 0.40


def forward_flops(model: ModelDims, n_tokens: float, mean_context: float) -> float:
    """Forward FLOPs over ``n_tokens`` tokens whose mean causal context is ``mean_context``."""
    return n_tokens * (model.flops_per_token_forward() + model.attention_flops_per_token(mean_context))


def sample_forward_flops(model: ModelDims, total_tokens) -> float:
    """Forward FLOPs of one sample of ``total_tokens`` tokens (prompt and response, causal: mean
    context half its length); works element-wise on arrays. The simulator charges each finished
    sample this (times its passes); the reallocation planner sums it over the samples left."""
    return forward_flops(model, total_tokens, total_tokens / 2.0)


def train_step_s(model: ModelDims, gpu: GPUSpec, n_gpus: int, n_tokens: float, mean_context: float,
                 mfu: float = DEFAULT_TRAIN_MFU) -> float:
    """One optimiser step over ``n_tokens`` tokens (all mini-batches of the iteration)."""
    flops = 3.0 * forward_flops(model, n_tokens, mean_context)
    return flops / (n_gpus * gpu.bf16_tflops * 1e12 * mfu)


def logprob_s(model: ModelDims, gpu: GPUSpec, n_gpus: int, n_tokens: float, mean_context: float,
              mfu: float = DEFAULT_INFER_MFU) -> float:
    """One forward pass over the iteration's tokens to compute log-probabilities."""
    return forward_flops(model, n_tokens, mean_context) / (n_gpus * gpu.bf16_tflops * 1e12 * mfu)
