"""Model memory: weights, gradients, master weights, Adam moments, KV cache, host-DRAM residency.

Accounting follows mixed-precision Adam as in ZeRO (Rajbhandari et al., SC'20, §3.1):
bf16 weights (2 B/param) + bf16 gradients (2 B/param) + fp32 master weights, first and second
moments (4 + 4 + 4 B/param) = 16 B/param; a 7B model needs 112 GB of model state before
activations. Megatron keeps fp32 "main grads" (``grad_bytes=4``: 18 B/param); both are options.
With the distributed optimizer (ZeRO-1) the fp32 state is sharded over data-parallel ranks.

KV cache per token = 2 (K and V) x layers x kv_heads x head_dim x dtype bytes.

Host-DRAM residency (Weave): a co-executed job keeps its state in host memory of the nodes it is
pinned to, so switching to it is a host→GPU copy instead of a cold start. On a rollout node that
is one copy of the bf16 weights (the engines on a node share the host copy); on a training node
it is that node's share of the weights and optimizer state
(gradients are rebuilt every step and are not kept). A fixed per-node runtime overhead
(``RUNTIME_OVERHEAD_GB``: CUDA context, NCCL buffers, framework) sits on top; its 3.5 GB figure is
aiconfigurator's ``misc.other_mem`` for H100 (``h100_sxm.yaml``), counted per GPU.
"""

from __future__ import annotations

from dataclasses import dataclass

from estimators.models import ModelDims

GB = 1e9
RUNTIME_OVERHEAD_GB_PER_GPU = 3.5  # aiconfigurator h100_sxm.yaml misc.other_mem (3.5 GiB ~ 3.76 GB; kept conservative)


@dataclass(frozen=True)
class TrainingMemory:
    """Bytes of model state for training, whole model and per GPU."""

    weights_bytes: float
    grads_bytes: float
    master_bytes: float
    moments_bytes: float

    @property
    def total_bytes(self) -> float:
        return self.weights_bytes + self.grads_bytes + self.master_bytes + self.moments_bytes


def training_state(model: ModelDims, *, weight_bytes: int = 2, grad_bytes: int = 2, master_bytes: int = 4,
                   moment_bytes: int = 4) -> TrainingMemory:
    """Whole-model training state with Adam (two moments)."""
    p = model.num_params
    return TrainingMemory(
        weights_bytes=p * weight_bytes,
        grads_bytes=p * grad_bytes,
        master_bytes=p * master_bytes,
        moments_bytes=2 * p * moment_bytes,
    )


def training_bytes_per_gpu(model: ModelDims, tp: int, pp: int, dp: int, *, distributed_optimizer: bool = True,
                           grad_bytes: int = 2) -> float:
    """Model-state bytes on one trainer GPU (activations excluded)."""
    st = training_state(model, grad_bytes=grad_bytes)
    shard = tp * pp
    fp32_state = st.master_bytes + st.moments_bytes
    fp32_div = shard * (dp if distributed_optimizer else 1)
    return (st.weights_bytes + st.grads_bytes) / shard + fp32_state / fp32_div


def kv_bytes_per_token(model: ModelDims, dtype_bytes: int = 2) -> float:
    return 2.0 * model.num_layers * model.num_kv_heads * model.hd * dtype_bytes


def inference_weight_bytes_per_gpu(model: ModelDims, tp: int, dtype_bytes: int = 2) -> float:
    return model.num_params * dtype_bytes / tp


def kv_capacity_tokens(model: ModelDims, hbm_gb: float, tp: int, *, mem_fraction: float = 0.9,
                       dtype_bytes: int = 2) -> float:
    """KV-cache tokens one engine (``tp`` GPUs) can hold.

    ``mem_fraction`` of HBM is given to the engine (SGLang's ``mem_fraction_static`` defaults to
    about 0.88; vLLM's ``gpu_memory_utilization`` to 0.9), less weights and the runtime overhead.
    KV heads are split over TP ranks (replicated when tp > kv_heads, which wastes memory).
    """
    per_gpu_free = hbm_gb * GB * mem_fraction - inference_weight_bytes_per_gpu(model, tp) - RUNTIME_OVERHEAD_GB_PER_GPU * GB
    if per_gpu_free <= 0:
        return 0.0
    kv_heads_per_gpu = max(1.0, model.num_kv_heads / tp)
    per_token_per_gpu = 2.0 * model.num_layers * kv_heads_per_gpu * model.hd * dtype_bytes
    return per_gpu_free / per_token_per_gpu


def fits_training(model: ModelDims, hbm_gb: float, tp: int, pp: int, dp: int, *, activation_fraction: float = 0.25) -> bool:
    """Whether model state fits a trainer GPU, reserving ``activation_fraction`` of HBM for activations."""
    need = training_bytes_per_gpu(model, tp, pp, dp) + RUNTIME_OVERHEAD_GB_PER_GPU * GB
    return need <= hbm_gb * GB * (1.0 - activation_fraction)


def fits_inference(model: ModelDims, hbm_gb: float, tp: int, *, min_kv_tokens: float = 4096) -> bool:
    return kv_capacity_tokens(model, hbm_gb, tp) >= min_kv_tokens


def host_dram_rollout_node_gb(model: ModelDims) -> float:
    """Host DRAM to keep a job's rollout weights resident on one rollout node (one bf16 copy)."""
    return model.num_params * 2 / GB


def host_dram_train_node_gb(model: ModelDims, train_nodes: int) -> float:
    """Host DRAM per training node to keep weights and optimizer state resident.

    The bf16 weights and the fp32 master weights and moments (2 + 12 B/param) are spread over the
    job's training nodes (each node holds its TP/PP/DP shard).
    """
    st = training_state(model)
    return (st.weights_bytes + st.master_bytes + st.moments_bytes) / max(1, train_nodes) / GB
