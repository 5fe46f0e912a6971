"""Trainer state as Megatron-core sharded checkpoints, resharded on load to another layout.

Megatron-core describes a model's distributed state as *sharded tensors*: a key (its
Megatron name, e.g. ``decoder.layers.3.mlp.linear_fc1.weight``), the global shape, this rank's
global offset along the TP-split axis, and a ``replica_id`` (non-zero on data-parallel replicas,
which do not write). ``dist_checkpointing`` saves them through ``torch.distributed.checkpoint``
and, on load, gives each rank of a *different* TP/PP/DP layout the overlapping parts of the
saved shards.

This module does the same for the executor's trainer ranks:

* :func:`sharded_metadata` — the Megatron sharded-tensor description of a rank's state;
* :func:`save` — each DP-replica-0 rank writes its shards with ``torch.distributed.checkpoint``
  (one checkpoint directory per rank, keys ``<kind>/<megatron key>``) and its metadata;
* :func:`load` — a rank of any new layout reads only the saved tensors that overlap it (partial
  ``torch.distributed.checkpoint.load``) and copies the overlaps by the same reshard plan as P2P;
* :func:`to_megatron` — with ``megatron-core`` installed (the ``megatron`` extra; GPU clusters),
  the same state as ``megatron.core.dist_checkpointing.ShardedTensor`` objects, for
  ``dist_checkpointing.save``/``load`` against a real Megatron model.
"""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import torch

from executor.migrations import reshard
from executor.state import Layout
from executor.workers.model import STATE_KINDS, ModelSpec, owned_params, param_specs, shard_shape, tp_range

KIND_PREFIX = {"param": "model", "grad": "grad_buffer", "exp_avg": "optimizer.state.exp_avg",
               "exp_avg_sq": "optimizer.state.exp_avg_sq"}


def megatron_key(name: str) -> str:
    if name == "embed":
        return "embedding.word_embeddings.weight"
    if name == "norm":
        return "decoder.final_layernorm.weight"
    layer, part = name.split(".", 1)
    return {"w_in": f"decoder.layers.{layer}.mlp.linear_fc1.weight", "b_in": f"decoder.layers.{layer}.mlp.linear_fc1.bias",
            "w_out": f"decoder.layers.{layer}.mlp.linear_fc2.weight", "b_out": f"decoder.layers.{layer}.mlp.linear_fc2.bias"}[part]


def sharded_metadata(spec: ModelSpec, layout: Layout, rank: int) -> list[dict]:
    """Megatron ShardedTensor fields for every parameter a rank holds."""
    pp_i, dp_i, tp_i = layout.coords(rank)
    out = []
    for p in owned_params(spec, layout, rank):
        a, _ = tp_range(p, layout.tp, tp_i)
        offset = [0] * len(p.shape)
        frag = [1] * len(p.shape)
        if p.split_dim is not None:
            offset[p.split_dim] = a
            frag[p.split_dim] = layout.tp
        # Replicated tensors are written by TP rank 0 of DP replica 0 only.
        replica = dp_i if p.split_dim is not None else dp_i * layout.tp + tp_i
        out.append({"key": megatron_key(p.name), "name": p.name, "global_shape": list(p.shape), "global_offset": offset,
                    "axis_fragmentations": frag, "local_shape": list(shard_shape(p, layout)), "replica_id": replica,
                    "pp_stage": pp_i})
    return out


def save(shards: dict, step: int, spec: ModelSpec, layout: Layout, rank: int, directory: str | Path) -> bool:
    """Write one rank's state; DP replicas other than 0 write nothing (as in Megatron). Returns
    whether this rank wrote."""
    import torch.distributed.checkpoint as dcp

    _, dp_i, _ = layout.coords(rank)
    if dp_i != 0:
        return False
    d = Path(directory) / f"rank{rank}"
    sd = {f"{KIND_PREFIX[k]}/{megatron_key(n)}": t.detach().clone() for n, s in shards.items() for k, t in s.items()}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        dcp.save(sd, checkpoint_id=str(d), no_dist=True)
    meta = {"layout": vars(layout) | {}, "rank": rank, "step": step, "model": vars(spec) | {},
            "sharded_tensors": sharded_metadata(spec, layout, rank)}
    tmp = d / ".metadata.json.tmp"
    tmp.write_text(json.dumps(meta, indent=1))
    tmp.replace(d / "rl_planner_meta.json")
    return True


def saved_layout(directory: str | Path) -> tuple[Layout, int, ModelSpec]:
    metas = sorted(Path(directory).glob("rank*/rl_planner_meta.json"))
    if not metas:
        raise FileNotFoundError(f"{directory}: no sharded checkpoint (no rank*/rl_planner_meta.json)")
    m = json.loads(metas[0].read_text())
    return Layout(**m["layout"]), m["step"], ModelSpec(**m["model"])


def load(directory: str | Path, new_layout: Layout, new_rank: int) -> tuple[dict, int]:
    """The shards of ``new_rank`` in ``new_layout``, resharded from the saved layout, and the step."""
    import torch.distributed.checkpoint as dcp

    old, step, spec = saved_layout(directory)
    pieces = [pc for pc in reshard.plan(spec, old, new_layout) if pc.dst == new_rank]
    # Only DP replica 0 wrote: read every piece from the replica-0 rank of the same stage and TP index.
    src_shards: dict[int, dict] = {}
    for pc in pieces:
        pp_o, _, tp_o = old.coords(pc.src)
        src = old.rank_of(pp_o, 0, tp_o)
        if src not in src_shards:
            src_shards[src] = {}
        src_shards[src].setdefault(pc.name, None)
    for src, names in src_shards.items():
        specs = {p.name: p for p in param_specs(spec)}
        sd = {f"{KIND_PREFIX[k]}/{megatron_key(n)}": torch.empty(shard_shape(specs[n], old)) for n in names for k in STATE_KINDS}
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)
            dcp.load(sd, checkpoint_id=str(Path(directory) / f"rank{src}"), no_dist=True)
        src_shards[src] = {n: {k: sd[f"{KIND_PREFIX[k]}/{megatron_key(n)}"] for k in STATE_KINDS} for n in names}
    out = reshard.empty_shards(spec, new_layout, new_rank)
    remapped = []
    for pc in pieces:
        pp_o, _, tp_o = old.coords(pc.src)
        remapped.append(reshard.Piece(pc.name, old.rank_of(pp_o, 0, tp_o), pc.dst, pc.dim, pc.src_lo, pc.src_hi, pc.dst_lo, pc.dst_hi))
    sums = reshard.apply_local(remapped, src_shards, {new_rank: out})
    bad = [k for k, (a, b) in sums.items() if a != b]
    if bad:
        raise RuntimeError(f"checksum mismatch while resharding {directory} into rank {new_rank}: {bad}")
    return out, step


def to_megatron(shards: dict, spec: ModelSpec, layout: Layout, rank: int) -> dict:
    """The rank's state as Megatron-core ShardedTensors (needs the ``megatron`` extra)."""
    from megatron.core.dist_checkpointing import ShardedTensor  # noqa: PLC0415 - optional extra

    out = {}
    for meta in sharded_metadata(spec, layout, rank):
        axis = next((i for i, f in enumerate(meta["axis_fragmentations"]) if f > 1), None)
        _, _, tp_i = layout.coords(rank)
        for k in STATE_KINDS:
            key = f"{KIND_PREFIX[k]}/{meta['key']}"
            rank_offsets = [(axis, tp_i, layout.tp)] if axis is not None else []
            out[key] = ShardedTensor.from_rank_offsets(key, shards[meta["name"]][k], *rank_offsets,
                                                       replica_id=meta["replica_id"])
    return out
