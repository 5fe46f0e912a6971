"""A small transformer-shaped model, sharded Megatron-style across TP/PP/DP.

Parameters (per layer ``l``): ``l.w_in`` [ffn, hidden] column-parallel (split on dim 0),
``l.b_in`` [ffn] split on dim 0, ``l.w_out`` [hidden, ffn] row-parallel (split on dim 1),
``l.b_out`` [hidden] replicated; plus ``embed`` [vocab, hidden] vocab-parallel (dim 0) on the
first stage and ``norm`` [hidden] replicated on the last. Pipeline stages take contiguous layer
ranges (as even as possible). Data-parallel replicas hold identical shards.

The trainer state of each parameter is four tensors of the parameter's shape: the parameter, the
gradient buffer, and Adam's two moments (``exp_avg``, ``exp_avg_sq``); plus Adam's step count.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import torch

from executor.state import Layout

STATE_KINDS = ("param", "grad", "exp_avg", "exp_avg_sq")


@dataclass(frozen=True)
class ModelSpec:
    hidden: int = 64
    ffn: int = 256
    layers: int = 4
    vocab: int = 512
    seed: int = 0


@dataclass(frozen=True)
class ParamSpec:
    name: str
    shape: tuple[int, ...]
    split_dim: Optional[int]  # TP split dimension, None when replicated
    layer: int  # -1: embedding (first stage); layers: norm (last stage)


def param_specs(spec: ModelSpec) -> list[ParamSpec]:
    out = [ParamSpec("embed", (spec.vocab, spec.hidden), 0, -1)]
    for k in range(spec.layers):
        out += [ParamSpec(f"{k}.w_in", (spec.ffn, spec.hidden), 0, k), ParamSpec(f"{k}.b_in", (spec.ffn,), 0, k),
                ParamSpec(f"{k}.w_out", (spec.hidden, spec.ffn), 1, k), ParamSpec(f"{k}.b_out", (spec.hidden,), None, k)]
    out.append(ParamSpec("norm", (spec.hidden,), None, spec.layers))
    return out


def stage_of(p: ParamSpec, spec: ModelSpec, pp: int) -> int:
    if p.layer < 0:
        return 0
    if p.layer >= spec.layers:
        return pp - 1
    # contiguous ranges, the first (layers % pp) stages one layer longer
    base, extra = divmod(spec.layers, pp)
    bound = 0
    for s in range(pp):
        bound += base + (1 if s < extra else 0)
        if p.layer < bound:
            return s
    return pp - 1


def tp_range(p: ParamSpec, tp: int, tp_i: int) -> tuple[int, int]:
    """[start, stop) along the split dimension held by TP index ``tp_i`` (whole dim if replicated)."""
    if p.split_dim is None:
        return 0, p.shape[0]
    n = p.shape[p.split_dim]
    size = n // tp
    return tp_i * size, (tp_i + 1) * size


def check_layout(spec: ModelSpec, layout: Layout) -> list[str]:
    probs = []
    for p in param_specs(spec):
        if p.split_dim is not None and p.shape[p.split_dim] % layout.tp:
            probs.append(f"{p.name} dim {p.split_dim} ({p.shape[p.split_dim]}) is not divisible by tp={layout.tp}")
    if layout.pp > spec.layers:
        probs.append(f"pp={layout.pp} exceeds the model's {spec.layers} layers")
    return probs


def owned_params(spec: ModelSpec, layout: Layout, rank: int) -> list[ParamSpec]:
    pp_i, _, _ = layout.coords(rank)
    return [p for p in param_specs(spec) if stage_of(p, spec, layout.pp) == pp_i]


def full_init(spec: ModelSpec, p: ParamSpec) -> torch.Tensor:
    g = torch.Generator().manual_seed(spec.seed * 1_000_003 + sum(map(ord, p.name)) * 7919 + len(p.name))
    return torch.randn(p.shape, generator=g) * 0.02


def shard_slice(p: ParamSpec, layout: Layout, rank: int) -> tuple[slice, ...]:
    _, _, tp_i = layout.coords(rank)
    a, b = tp_range(p, layout.tp, tp_i)
    idx = [slice(None)] * len(p.shape)
    if p.split_dim is not None:
        idx[p.split_dim] = slice(a, b)
    return tuple(idx)


def shard_shape(p: ParamSpec, layout: Layout) -> tuple[int, ...]:
    shape = list(p.shape)
    if p.split_dim is not None:
        shape[p.split_dim] //= layout.tp
    return tuple(shape)
