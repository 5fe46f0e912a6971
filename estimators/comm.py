"""Data movement: weight synchronisation, migration cost, warm and cold job switches.

Link figures come from :mod:`estimators.kernels` (vidur's measured H100 DGX send/recv and
all-reduce, scaled by each type's NVLink and NIC bandwidth) and the GPU catalogue.

Weight sync after each training step (trainer pool → rollout pool, ``W`` bytes of bf16 weights,
``E`` rollout engines on ``R`` rollout nodes):

* ``flat``: every rollout engine pulls the full weights from the trainer across the cluster
  boundary, ``E x W`` bytes over the narrowest of the trainer's NICs, the rollout nodes' NICs and
  the inter-cluster link;
* ``scatter_broadcast`` (Weave): the weights cross the boundary once, scattered as ``R`` shards
  (``W`` bytes over the same narrowest link), then an all-gather inside the rollout cluster (each
  node receives ``W (R-1)/R`` over its NICs) and an NVLink broadcast inside each node.

Migration of a component: bytes over the link used (NVLink inside a node, NIC across nodes) plus
a restart and a process-group rebuild (``RESTART_S``, ``GROUP_REBUILD_S``, assumptions stated
below).

``RESTART_S`` (20 s) is a cold start: a new inference engine or trainer rank process, its CUDA
context, the weights mapped and, for an engine, its CUDA graphs captured. Measured figures for vLLM
bracket it from below: engine initialisation 14 s for Llama-3-8B (10 s of it graph capture; 39 s with
torch.compile), vLLM PR #11005; 34 s of initialisation and 59 s to the first response for a small
model with a warm compile cache, vLLM issue #20264; "30-100+ seconds" to reload a model, vLLM's
sleep-mode post (blog.vllm.ai, 2025-10-26). An engine that is *parked* instead (vLLM sleep mode
level 1, SGLang's released memory occupation: the process, its graphs and its weights in host DRAM
stay) wakes in 0.1-0.4 s plus the weight copy (the same post): :func:`engine_wake_s`, a warm
switch of its weight shard. The simulator parks the rollout engines whose GPUs it lends and
wakes them to grow the rollout; log-prob inference and trainer ranks that are added start cold.

Job switches (Weave): a *warm* switch copies the job's state from host DRAM to the GPUs over PCIe
(64 GB/s per GPU, aiconfigurator ``pcie_bw``), plus ``WARM_FIXED_S``; a *cold* start also starts the
processes, initialises the framework and reads the state from storage. Weave reports cold starts
of up to 135 s and warm switches up to 71.5x faster; ``COLD_INIT_S`` and ``STORAGE_GB_PER_S``
are chosen so that a 32B job on two 8-GPU training nodes comes to about 135 s cold and
``WARM_FIXED_S`` so that its warm switch is about 71.5x faster (1.9 s).
"""

from __future__ import annotations

from dataclasses import dataclass

from estimators import kernels
from estimators.gpus import GPUSpec

RESTART_S = 20.0  # cold start of an engine or rank: process, CUDA context, weights, graph capture (see below)
GROUP_REBUILD_S = 2.0  # NCCL communicator rebuild (assumption; DynaRL reports seconds)
WARM_FIXED_S = 1.4  # switch bookkeeping, stream sync, allocator warm-up (assumption, see docstring)
COLD_INIT_S = 60.0  # process launch + framework init (assumption, see module docstring)
STORAGE_GB_PER_S = 3.0  # per node, checkpoint read from shared storage (assumption, see docstring)


def transfer_s(gpu: GPUSpec, nbytes: float, *, inter_node: bool, streams: int = 1) -> float:
    """Time to move ``nbytes`` split over ``streams`` parallel GPU-to-GPU links."""
    if nbytes <= 0:
        return 0.0
    return float(kernels.p2p_ms(gpu, nbytes / max(1, streams), inter_node=inter_node)) / 1e3


@dataclass(frozen=True)
class SyncLinks:
    trainer_nic_gb_per_s: float  # aggregate NIC bandwidth of the trainer nodes
    rollout_nic_gb_per_s: float  # aggregate NIC bandwidth of the rollout nodes
    inter_cluster_gb_per_s: float | None  # None: same cluster, no extra bottleneck


def _boundary_gb_per_s(links: SyncLinks) -> float:
    bw = min(links.trainer_nic_gb_per_s, links.rollout_nic_gb_per_s)
    if links.inter_cluster_gb_per_s is not None:
        bw = min(bw, links.inter_cluster_gb_per_s)
    return bw


def weight_sync_s(weight_bytes: float, n_engines: int, rollout_nodes: int, rollout_gpu: GPUSpec,
                  links: SyncLinks, scheme: str = "scatter_broadcast") -> float:
    """Seconds to deliver fresh weights to every rollout engine."""
    boundary = _boundary_gb_per_s(links) * 1e9
    if scheme == "flat":
        return n_engines * weight_bytes / boundary
    if scheme != "scatter_broadcast":
        raise ValueError(f"unknown weight-sync scheme {scheme!r}")
    cross = weight_bytes / boundary
    r = max(1, rollout_nodes)
    per_node_nic = rollout_gpu.inter_node_bw_gb_per_s * 1e9 * 8  # 8 NICs per node
    gather = weight_bytes * (r - 1) / r / per_node_nic if r > 1 else 0.0
    bcast = float(kernels.p2p_ms(rollout_gpu, weight_bytes, inter_node=False)) / 1e3
    return cross + gather + bcast


def migration_s(gpu: GPUSpec, nbytes: float, *, inter_node: bool, streams: int = 1, restart: bool = True,
                rebuild_group: bool = True) -> float:
    """Predicted duration of moving a component's state and bringing it back up."""
    t = transfer_s(gpu, nbytes, inter_node=inter_node, streams=streams)
    if restart:
        t += RESTART_S
    if rebuild_group:
        t += GROUP_REBUILD_S
    return t


def warm_switch_s(state_bytes_per_gpu: float, gpu: GPUSpec) -> float:
    return WARM_FIXED_S + state_bytes_per_gpu / (gpu.pcie_gb_per_s * 1e9)


def cold_start_s(state_bytes_per_node: float, state_bytes_per_gpu: float, gpu: GPUSpec) -> float:
    return COLD_INIT_S + state_bytes_per_node / (STORAGE_GB_PER_S * 1e9) + state_bytes_per_gpu / (gpu.pcie_gb_per_s * 1e9)


def engine_wake_s(weight_bytes_per_gpu: float, gpu: GPUSpec) -> float:
    """Wake a parked engine (sleep mode: process alive, weights in host DRAM): a warm switch of its
    weight shard. What the simulator charges to grow the rollout back, and what the reallocation
    planner prices a rollout engine start at."""
    return warm_switch_s(weight_bytes_per_gpu, gpu)
