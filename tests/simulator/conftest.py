"""Helpers for simulator tests: small engines and workloads."""

from __future__ import annotations

from simulator.engine import EngineModel


def tiny_engine_model(kv=100_000.0, max_running=64, a=5.0, b=0.01, c=1e-4, prefill_per_token_ms=0.0):
    return EngineModel(a_ms=a, b_ms=b, c_ms=c, kv_capacity_tokens=kv, max_running=max_running,
                       prefill=lambda n, L: prefill_per_token_ms * n * L, watermark=0.0)
