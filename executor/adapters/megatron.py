"""Trainer state as Megatron-core sharded checkpoints (``dist_checkpointing``), with the
distributed optimizer's sharded Adam state, resharded on load to another layout.

Megatron-core describes a model's distributed state as *sharded tensors*
(``megatron.core.dist_checkpointing.ShardedTensor``): a key, the global shape, this rank's
global offset along the TP-split axis, the axis fragmentation, and a ``replica_id`` triple
``(PP, TP, DP)``: only the replica whose id is all zeros writes ("main replica"), so a tensor
replicated over DP (every model parameter) or over TP (a layernorm, a row-parallel bias) is
written once. This module follows those conventions:

* **keys** are Megatron's model keys (``embedding.word_embeddings.weight``,
  ``decoder.layers.<l>.mlp.linear_fc1.weight`` / ``.bias``, ``...linear_fc2...``,
  ``decoder.final_layernorm.weight``; layer numbers global across pipeline stages); the optimizer
  state is ``optimizer.state.exp_avg.<model key>`` and ``optimizer.state.exp_avg_sq.<model key>``
  as in ``DistributedOptimizer.sharded_param_state_fs_model_space``. (Megatron also writes
  ``optimizer.state.fp32_param.<key>``, the fp32 master copy: here the parameters are fp32
  already, so it would repeat the model parameter, and is left out.) The executor also moves
  gradient buffers, which Megatron does not checkpoint: they go under ``rl_planner.grad.<key>``;
* **the distributed optimizer** (``--use-distributed-optimizer``, what RL stacks run) shards Adam's
  state over the data-parallel ranks: each (PP, TP) shard's parameters are laid out in one
  contiguous buffer in *reverse* order (``_ParamAndGradBuffer`` adds them so; one bucket, as with
  ``bucket_size=None``), padded at the end to a multiple of the DP size, and DP rank ``d`` owns
  the ``d``-th equal range (``shard_buffer``). A parameter's optimizer state is saved by every DP
  rank for the part of it in that rank's range, as a *flattened* sharded tensor
  (``flattened_range``: the slice of the flattened local shard; replica id ``(PP, TP, 0)``)
  :func:`dist_opt_ranges` computes the ranges; :func:`save` writes them; :func:`load` gathers
  the pieces of every DP rank back;
* the files are ``torch.distributed.checkpoint`` (DCP) checkpoints, one directory per rank (each
  rank writes only what it owns; ``no_dist``: the executor's ranks save without a process
  group), plus ``rl_planner_meta.json`` with the sharded-tensor metadata. ``load`` reads into a
  rank of *any* TP/PP/DP layout only the saved tensors that overlap it (partial DCP loads) and
  copies the overlaps by the same reshard plan as a P2P migration;
* :func:`to_megatron` builds real ``ShardedTensor`` objects (``from_rank_offsets`` and, for the
  distributed optimizer's pieces, ``from_rank_offsets_flat``, or the canonical
  ``fully_reshardable`` form on megatron-core 0.16+) when ``megatron-core`` is installed (the
  ``megatron`` extra; GPU clusters), for ``dist_checkpointing.save`` / ``load`` against a real
  Megatron model. The CPU tests run against this module's own reading of the format
  (megatron-core's checkpoint writer needs CUDA).
"""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import torch

from executor.migrations import reshard
from executor.state import Layout
from executor.workers.model import STATE_KINDS, ModelSpec, owned_params, param_specs, shard_shape, tp_range

KIND_PREFIX = {"param": "", "grad": "rl_planner.grad.", "exp_avg": "optimizer.state.exp_avg.",
               "exp_avg_sq": "optimizer.state.exp_avg_sq."}
OPTIMIZER_KINDS = ("exp_avg", "exp_avg_sq")
_PARTS = {"w_in": "mlp.linear_fc1.weight", "b_in": "mlp.linear_fc1.bias", "w_out": "mlp.linear_fc2.weight",
          "b_out": "mlp.linear_fc2.bias"}


def megatron_key(name: str) -> str:
    """Megatron-core's key of one of the executor model's parameters."""
    if name == "embed":
        return "embedding.word_embeddings.weight"
    if name == "norm":
        return "decoder.final_layernorm.weight"
    layer, part = name.split(".", 1)
    return f"decoder.layers.{layer}.{_PARTS.get(part, part)}"


def key_of(kind: str, name: str) -> str:
    return KIND_PREFIX[kind] + megatron_key(name)


def dist_opt_ranges(spec: ModelSpec, layout: Layout, rank: int) -> dict[str, tuple[int, int]]:
    """The part of each of its local parameter shards whose optimizer state DP rank ``rank`` owns
    under Megatron's distributed optimizer, as ``[start, end)`` of the flattened local shard
    (parameters it owns none of are absent).

    Math: the stage's parameters ``p_1..p_m`` (in reverse model order) occupy ``[o_i, o_i + n_i)`` of
    a buffer of ``N = sum n_i`` elements, padded to ``N' = dp * ceil(N / dp)``; DP index ``d`` owns
    ``[d N'/dp, (d+1) N'/dp)``; its range of ``p_i`` is the intersection, shifted by ``-o_i``."""
    _, dp_i, _ = layout.coords(rank)
    ps = list(reversed(owned_params(spec, layout, rank)))
    sizes = [torch.Size(shard_shape(p, layout)).numel() for p in ps]
    total = sum(sizes)
    per = -(-total // layout.dp)
    lo, hi = dp_i * per, (dp_i + 1) * per
    out, off = {}, 0
    for p, n in zip(ps, sizes):
        a, b = max(lo, off), min(hi, off + n)
        if a < b:
            out[p.name] = (a - off, b - off)
        off += n
    return out


def sharded_metadata(spec: ModelSpec, layout: Layout, rank: int, distributed_optimizer: bool = True) -> list[dict]:
    """Megatron ShardedTensor fields for every tensor a rank writes (and, with ``replica_id`` not
    all zero, the model tensors it holds but leaves to another replica)."""
    pp_i, dp_i, tp_i = layout.coords(rank)
    ranges = dist_opt_ranges(spec, layout, rank) if distributed_optimizer else {}
    out = []
    for p in owned_params(spec, layout, rank):
        a, _ = tp_range(p, layout.tp, tp_i)
        offset = [0] * len(p.shape)
        frag = [1] * len(p.shape)
        if p.split_dim is not None:
            offset[p.split_dim] = a
            frag[p.split_dim] = layout.tp
        tp_rep = 0 if p.split_dim is not None else tp_i  # a TP-replicated tensor is written by TP rank 0
        common = {"name": p.name, "global_shape": list(p.shape), "global_offset": offset, "axis_fragmentations": frag,
                  "local_shape": list(shard_shape(p, layout)), "pp_stage": pp_i}
        for kind in STATE_KINDS:
            if kind in OPTIMIZER_KINDS and distributed_optimizer:
                if p.name not in ranges:
                    continue
                s, e = ranges[p.name]
                out.append({**common, "key": key_of(kind, p.name), "kind": kind, "replica_id": [0, tp_rep, 0],
                            "flattened_range": [s, e]})
            else:
                out.append({**common, "key": key_of(kind, p.name), "kind": kind, "replica_id": [0, tp_rep, dp_i]})
    return out


def save(shards: dict, step: int, spec: ModelSpec, layout: Layout, rank: int, directory: str | Path,
         distributed_optimizer: bool = True) -> bool:
    """Write what one rank owns: the model (and grad buffer) tensors of which it is the main replica,
    and, with the distributed optimizer, its DP range of every parameter's Adam moments (else the
    moments go with the model tensors, from DP replica 0). ``shards`` holds the rank's full local
    shards (the executor's trainer keeps Adam state replicated; the range is cut here). Returns
    whether this rank wrote anything."""
    import torch.distributed.checkpoint as dcp

    metas = [m for m in sharded_metadata(spec, layout, rank, distributed_optimizer) if not any(m["replica_id"])]
    if not metas:
        return False
    sd = {}
    for m in metas:
        t = shards[m["name"]][m["kind"]].detach()
        if "flattened_range" in m:
            s, e = m["flattened_range"]
            t = t.reshape(-1)[s:e]
        sd[m["key"]] = t.clone()
    d = Path(directory) / f"rank{rank}"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        dcp.save(sd, checkpoint_id=str(d), no_dist=True)
    meta = {"layout": vars(layout) | {}, "rank": rank, "step": step, "model": vars(spec) | {},
            "distributed_optimizer": distributed_optimizer, "sharded_tensors": metas}
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


def _read(directory: Path, rank: int, metas: list[dict]) -> dict[str, torch.Tensor]:
    """A partial DCP load of the tensors ``metas`` from one rank's directory."""
    import torch.distributed.checkpoint as dcp

    sd = {}
    for m in metas:
        if "flattened_range" in m:
            s, e = m["flattened_range"]
            sd[m["key"]] = torch.empty(e - s)
        else:
            sd[m["key"]] = torch.empty(m["local_shape"])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        dcp.load(sd, checkpoint_id=str(directory / f"rank{rank}"), no_dist=True)
    return sd


def load(directory: str | Path, new_layout: Layout, new_rank: int) -> tuple[dict, int]:
    """The shards of ``new_rank`` in ``new_layout`` (full local shards of every state kind),
    resharded from the saved layout, and the step. The distributed optimizer's moments are
    gathered from every DP rank's range of the stage and TP index they come from."""
    directory = Path(directory)
    old, step, spec = saved_layout(directory)
    metas = {}
    for f in directory.glob("rank*/rl_planner_meta.json"):
        m = json.loads(f.read_text())
        metas[m["rank"]] = m["sharded_tensors"]
    pieces = [pc for pc in reshard.plan(spec, old, new_layout) if pc.dst == new_rank]
    specs = {p.name: p for p in param_specs(spec)}
    # Every old (stage, TP index) a piece comes from: assemble its local shards from the ranks that wrote them.
    wanted: dict[int, set] = {}
    for pc in pieces:
        pp_o, _, tp_o = old.coords(pc.src)
        wanted.setdefault(old.rank_of(pp_o, 0, tp_o), set()).add(pc.name)
    src_shards: dict[int, dict] = {}
    for src, names in wanted.items():
        pp_o, _, tp_o = old.coords(src)
        # the DP ranks of this stage and TP index wrote its TP-split tensors; a TP-replicated one was
        # written by TP index 0 (its replica id is zero there only)
        split = {n for n in names if specs[n].split_dim is not None}
        group = {old.rank_of(pp_o, d, tp_o): split for d in range(old.dp)}
        for d in range(old.dp):
            group.setdefault(old.rank_of(pp_o, d, 0), set())
            group[old.rank_of(pp_o, d, 0)] = group[old.rank_of(pp_o, d, 0)] | (set(names) - split)
        full = {n: {k: torch.full(shard_shape(specs[n], old), float("nan")) for k in STATE_KINDS} for n in names}
        for r, rnames in sorted(group.items()):
            if r not in metas:
                continue
            mine = [m for m in metas[r] if m["name"] in rnames]
            if not mine:
                continue
            got = _read(directory, r, mine)
            for m in mine:
                dst = full[m["name"]][m["kind"]]
                if "flattened_range" in m:
                    s, e = m["flattened_range"]
                    dst.view(-1)[s:e] = got[m["key"]]
                else:
                    dst.copy_(got[m["key"]])
        missing = [f"{KIND_PREFIX[k]}{megatron_key(n)}" for n in names for k in STATE_KINDS if torch.isnan(full[n][k]).any()]
        if missing:
            raise RuntimeError(f"{directory}: the checkpoint does not cover {missing[:3]} of stage {pp_o}, TP index {tp_o} "
                               f"(a rank's directory is missing?)")
        src_shards[src] = full
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


def own_optimizer_state(shards: dict, spec: ModelSpec, layout: Layout, rank: int) -> dict[str, dict[str, torch.Tensor]]:
    """What a distributed-optimizer rank keeps of its full local moments: its flattened ranges."""
    out = {}
    for name, (s, e) in dist_opt_ranges(spec, layout, rank).items():
        out[name] = {k: shards[name][k].reshape(-1)[s:e].clone() for k in OPTIMIZER_KINDS}
    return out


def to_megatron(shards: dict, spec: ModelSpec, layout: Layout, rank: int, distributed_optimizer: bool = True) -> dict:
    """The rank's state as Megatron-core ShardedTensors (needs the ``megatron`` extra), for
    ``dist_checkpointing.save`` / ``load``.

    The distributed optimizer's moments are flattened pieces (``from_rank_offsets_flat``) where the
    installed megatron-core still has them; megatron-core 0.16 dropped ``flattened_range``
    ("ShardedTensor.flattened_range is not supported"; its ``fully_sharded_model_space`` format is
    deprecated) and saves the distributed optimizer ``fully_reshardable``: each moment in the
    canonical shape of its parameter, written from DP rank 0. There the moments are given in that
    canonical form (the executor's ranks hold them whole)."""
    from megatron.core.dist_checkpointing import ShardedTensor  # noqa: PLC0415 - optional extra

    if distributed_optimizer and not hasattr(ShardedTensor, "from_rank_offsets_flat"):
        distributed_optimizer = False  # fully_reshardable: canonical shapes, DP rank 0 writes
    _, _, tp_i = layout.coords(rank)
    out = {}
    for m in sharded_metadata(spec, layout, rank, distributed_optimizer):
        axis = next((i for i, f in enumerate(m["axis_fragmentations"]) if f > 1), None)
        rank_offsets = [(axis, tp_i, layout.tp)] if axis is not None else []
        t = shards[m["name"]][m["kind"]]
        if "flattened_range" in m:
            s, e = m["flattened_range"]
            out[m["key"]] = ShardedTensor.from_rank_offsets_flat(m["key"], t.reshape(-1)[s:e], tuple(m["local_shape"]),
                                                                 *rank_offsets, replica_id=tuple(m["replica_id"]),
                                                                 flattened_range=slice(s, e))
        else:
            out[m["key"]] = ShardedTensor.from_rank_offsets(m["key"], t, *rank_offsets, replica_id=tuple(m["replica_id"]))
    return out
