"""Sharded trainer state as a plain dict, and its resharding with torch.distributed.checkpoint.

A rank's state is ``{"format", "rank", "step", "layout", "model", "tensors", "chunks"}``:
``tensors`` maps a chunk key to a tensor and ``chunks`` maps the same key to JSON-able
metadata ``{"fqn", "offset", "global_shape"}`` (the chunk's place in the global tensor named
``fqn``, e.g. ``exp_avg/l0.wqkv``). Any storage that keeps tensors and JSON can hold it (the
coordinator's checkpoint store, a file, the sim backend's state), and any layout can be
assembled from it (:func:`assemble`).

Resharding between layouts uses ``torch.distributed.checkpoint`` (DCP): each writing rank saves
its chunks with their global offsets (:func:`dcp_save`), and a rank of the new layout loads the
chunks it owns (:func:`dcp_load`); DCP's load planner intersects the saved chunks with the
requested ones and reads only the overlaps. The chunks are presented to DCP through its
``__create_write_items__`` / ``__create_chunk_list__`` / ``__get_tensor_shard__`` protocol (the
one DTensor implements), so no process group is needed: each rank saves and loads on its own
(``no_dist``), which is what a migration between two sets of processes needs.
"""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any, Sequence

import torch

FORMAT = "rl-planner/sharded-v1"


def _carrier(fqn: str, chunks: list[tuple[list[int], torch.Tensor]], global_shape: list[int]) -> torch.Tensor:
    """A tensor DCP treats as the local shards of the global tensor ``fqn`` (like a DTensor)."""
    from torch.distributed.checkpoint.metadata import ChunkStorageMetadata, MetadataIndex, TensorProperties
    from torch.distributed.checkpoint.planner import TensorWriteData, WriteItem, WriteItemType

    by_off = {tuple(off): t for off, t in chunks}
    v: Any = chunks[0][1].view_as(chunks[0][1])  # a Tensor given DCP's duck-typed shard methods below
    gs = torch.Size(global_shape)

    def chunk_list():
        return [ChunkStorageMetadata(offsets=torch.Size(off), sizes=t.size()) for off, t in chunks]

    def write_items(name, _obj):
        return [WriteItem(index=MetadataIndex(name, torch.Size(off)), type=WriteItemType.SHARD,
                          tensor_data=TensorWriteData(chunk=ChunkStorageMetadata(offsets=torch.Size(off), sizes=t.size()),
                                                      properties=TensorProperties.create_from_tensor(t), size=gs))
                for off, t in chunks]

    def get_shard(index):
        return by_off[tuple(index.offset)]

    v.__create_chunk_list__ = chunk_list
    v.__create_write_items__ = write_items
    v.__get_tensor_shard__ = get_shard
    v.size = lambda *a: gs if not a else gs[a[0]]  # DCP compares the global size
    return v


def _dcp_dict(state: dict) -> dict:
    by_fqn: dict[str, list] = {}
    shapes = {}
    for key, meta in state["chunks"].items():
        by_fqn.setdefault(meta["fqn"], []).append((list(meta["offset"]), state["tensors"][key]))
        shapes[meta["fqn"]] = meta["global_shape"]
    return {fqn: _carrier(fqn, ch, shapes[fqn]) for fqn, ch in sorted(by_fqn.items())}


def dcp_save(state: dict, directory: str | Path) -> int:
    """Write a rank's chunks as a DCP checkpoint (``no_dist``); returns the bytes of tensor data."""
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint import FileSystemWriter

    from executor.workers.tinylm import one_thread

    # No fsync: the files live only for one migration, which a crash re-runs from the start.
    with warnings.catch_warnings(), one_thread():
        warnings.simplefilter("ignore")
        dcp.save(_dcp_dict(state), storage_writer=FileSystemWriter(str(directory), sync_files=False), no_dist=True)
    return sum(t.numel() * t.element_size() for t in state["tensors"].values())


def dcp_load(state: dict, directories: Sequence[str | Path]) -> None:
    """Fill ``state``'s chunks (in place) from DCP checkpoints written by ranks of any layout.
    Every element must be covered by some checkpoint: the chunks are filled with NaN first and
    a chunk left with a NaN raises."""
    import torch.distributed.checkpoint as dcp

    from executor.workers.tinylm import one_thread

    with one_thread():
        for t in state["tensors"].values():
            t.fill_(float("nan"))
        sd = _dcp_dict(state)
        for d in directories:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                dcp.load(sd, checkpoint_id=str(d), no_dist=True)
        holes = sorted(k for k, t in state["tensors"].items() if torch.isnan(t).any())
    if holes:
        raise RuntimeError(f"resharding left {len(holes)} chunk(s) unfilled (first: {holes[0]}); the checkpoints in "
                           f"{[str(d) for d in directories]} do not cover the new layout: save every TP index of DP replica 0")


def copy_matching(dst: dict, sources: list[dict]) -> None:
    """Fill ``dst``'s chunks from in-memory states of another layout (same blocks, any owner):
    each destination chunk is copied from the source chunk with the same fqn and offset."""
    have = {}
    for src in sources:
        for key, meta in src["chunks"].items():
            have[(meta["fqn"], tuple(meta["offset"]))] = src["tensors"][key]
    from executor.workers.tinylm import one_thread

    with torch.no_grad(), one_thread():
        for key, meta in dst["chunks"].items():
            t = have.get((meta["fqn"], tuple(meta["offset"])))
            if t is None:
                raise RuntimeError(f"no saved chunk for {meta['fqn']} at {meta['offset']}: the checkpoint does not cover "
                                   f"this rank; save every TP index of DP replica 0")
            dst["tensors"][key].copy_(t)


def assemble(states: list[dict]) -> dict[str, torch.Tensor]:
    """The global tensors (fqn -> tensor) from the states of ranks of one layout; elements no
    rank holds are NaN (so a missing shard shows up when compared)."""
    out: dict[str, torch.Tensor] = {}
    for st in states:
        for key, meta in st["chunks"].items():
            t = st["tensors"][key]
            f = out.setdefault(meta["fqn"], torch.full(meta["global_shape"], float("nan")))
            idx = tuple(slice(o, o + n) for o, n in zip(meta["offset"], t.shape))
            f[idx] = t
    return out
