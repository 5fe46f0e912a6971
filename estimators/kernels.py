"""Kernel-time models fitted to measured vLLM kernels (see :mod:`estimators.calibrate`).

H100 and H200 use constants fitted on their own measured tables. H800 is an H100 die with
cut-down NVLink, so it uses the H100 fit as is. H20 has no measured table: it uses the H100 fit's
*efficiencies* with its own peak FLOP/s (148 TFLOP/s) and HBM bandwidth (4.0 TB/s), i.e. memory-
bound kernels (decode GEMMs at small batch, decode attention) scale by bandwidth and compute-bound
ones (prefill, training) by FLOP/s, as ``../shared/data/README.md`` prescribes. A user-defined GPU
type does the same from the type it names as ``measured_as``.

All times are milliseconds for one kernel call on one GPU.
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np

from estimators import datadir
from estimators.gpus import GPUSpec


@lru_cache(maxsize=1)
def calibration() -> dict:
    return datadir.read_json("calibration.json")


datadir.on_change(calibration.cache_clear)


def _fit(gpu: GPUSpec, kind: str) -> dict:
    kernels = calibration()["kernels"]
    return kernels.get(gpu.measured_as, kernels["H100"])[kind]


def _peaks(gpu: GPUSpec) -> tuple[float, float]:
    return gpu.bf16_tflops * 1e12, gpu.hbm_bw_tb_per_s * 1e12


def gemm_ms(gpu: GPUSpec, m, n, k):
    """bf16 GEMM (m x k) @ (k x n): a smoothed roofline with fitted efficiencies."""
    f = _fit(gpu, "gemm")
    F, B = _peaks(gpu)
    m, n, k = (np.asarray(x, dtype=float) for x in (m, n, k))
    tc = 2.0 * m * n * k / (F * f["eff_compute"]) * 1e3
    tm = 2.0 * (m * k + k * n + m * n) / (B * f["eff_memory"]) * 1e3
    p = f["p"]
    return f["c0_ms"] + (tc ** p + tm ** p) ** (1.0 / p)


def decode_attention_ms(gpu: GPUSpec, batch, q_heads, kv_heads, head_dim, kv_len):
    """One layer of decode attention for ``batch`` sequences of ``kv_len`` cached tokens."""
    f = _fit(gpu, "decode_attention")
    _, B = _peaks(gpu)
    batch, kv_len = np.asarray(batch, dtype=float), np.asarray(kv_len, dtype=float)
    kv_bytes = batch * kv_len * kv_heads * head_dim * 4.0
    t = f["c0_ms"] + f["kv_coef"] * kv_bytes / B * 1e3 + f["bh_coef"] * batch * q_heads * 1e-3
    return np.where(batch > 0, t, 0.0)


def prefill_attention_ms(gpu: GPUSpec, batch, q_heads, kv_heads, head_dim, isl):
    """One layer of causal prefill attention over ``isl`` new tokens per sequence."""
    f = _fit(gpu, "prefill_attention")
    F, B = _peaks(gpu)
    batch, isl = np.asarray(batch, dtype=float), np.asarray(isl, dtype=float)
    flops = 2.0 * batch * q_heads * head_dim * isl * isl
    qkv_bytes = batch * isl * (q_heads + 2 * kv_heads) * head_dim * 2.0
    return f["c0_ms"] + f["flops_coef"] * flops / F * 1e3 + f["bytes_coef"] * qkv_bytes / B * 1e3


def _net(kind: str, key: str) -> dict:
    return calibration()["network"][kind][key]


def all_reduce_ms(gpu: GPUSpec, nbytes, n_gpus: int):
    """Intra-node NCCL all-reduce of ``nbytes`` over ``n_gpus`` GPUs (vidur H100 DGX fit).

    Bandwidth scales with the GPU's NVLink relative to the H100's (900 GB/s): an H800 (400 GB/s)
    gets 4/9 of the measured bus bandwidth.
    """
    if n_gpus <= 1:
        return np.zeros_like(np.asarray(nbytes, dtype=float))
    keys = sorted(calibration()["network"]["all_reduce_intra_node"], key=int)
    key = min(keys, key=lambda k: abs(int(k) - n_gpus))
    f = _net("all_reduce_intra_node", key)
    bw = f["bandwidth_gb_per_s"] * 1e9 * (gpu.nvlink_gb_per_s / 900.0)
    return f["latency_ms"] + np.asarray(nbytes, dtype=float) / bw * 1e3


def p2p_ms(gpu: GPUSpec, nbytes, *, inter_node: bool):
    """Point-to-point send/recv time (vidur H100 DGX fit).

    Intra-node bandwidth scales with NVLink as in :func:`all_reduce_ms`; inter-node bandwidth
    scales with the type's per-GPU NIC bandwidth relative to 50 GB/s.
    """
    if inter_node:
        f = _net("send_recv", "inter_node")
        bw = f["bandwidth_gb_per_s"] * 1e9 * (gpu.inter_node_bw_gb_per_s / 50.0)
    else:
        f = _net("send_recv", "intra_node")
        bw = f["bandwidth_gb_per_s"] * 1e9 * (gpu.nvlink_gb_per_s / 900.0)
    return f["latency_ms"] + np.asarray(nbytes, dtype=float) / bw * 1e3
