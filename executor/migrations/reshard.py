"""The reshard plan: which slice of which old rank fills which part of which new rank.

For every rank of the new layout and every parameter of its pipeline stage, the rank needs the
TP slice ``[a, b)`` of the split dimension (the whole tensor when replicated). The old ranks of
the stage that held that parameter cover it with their own TP slices; the plan is the set of
intersections. Among the old data-parallel replicas (identical copies) the source is picked
round-robin by destination rank so the copy load spreads over them.

A :class:`Piece` moves the same slice of all four state tensors (parameter, gradient buffer,
Adam moments). Pieces between one (source, destination) pair are packed into one flat buffer
for the wire (:func:`pack` / :func:`unpack`) and checksummed at both ends (:func:`checksum`).
"""

from __future__ import annotations

import zlib
from collections import defaultdict
from dataclasses import dataclass

import torch

from executor.state import Layout
from executor.workers.model import STATE_KINDS, ModelSpec, owned_params, param_specs, stage_of, tp_range


@dataclass(frozen=True)
class Piece:
    name: str
    src: int  # old rank
    dst: int  # new rank
    dim: int  # split dimension (0 for replicated tensors: the whole dim 0 moves)
    src_lo: int
    src_hi: int
    dst_lo: int
    dst_hi: int


def plan(spec: ModelSpec, old: Layout, new: Layout) -> list[Piece]:
    pieces: list[Piece] = []
    for r_new in range(new.world):
        _, dp_n, tp_n = new.coords(r_new)
        for p in owned_params(spec, new, r_new):
            a, b = tp_range(p, new.tp, tp_n)
            s_old = stage_of(p, spec, old.pp)
            dp_src = r_new % old.dp
            # a replicated tensor comes whole from one old TP index (spread by destination rank)
            sources = range(old.tp) if p.split_dim is not None else [r_new % old.tp]
            for tp_o in sources:
                lo, hi = tp_range(p, old.tp, tp_o)
                x, y = max(a, lo), min(b, hi)
                if x >= y:
                    continue
                src = old.rank_of(s_old, dp_src, tp_o)
                pieces.append(Piece(p.name, src, r_new, p.split_dim or 0, x - lo, y - lo, x - a, y - a))
    return pieces


def coverage_problems(spec: ModelSpec, new: Layout, pieces: list[Piece]) -> list[str]:
    """Independent check: the pieces of each new rank tile each of its shards exactly once."""
    got: dict[tuple[int, str], list[tuple[int, int]]] = defaultdict(list)
    for pc in pieces:
        got[(pc.dst, pc.name)].append((pc.dst_lo, pc.dst_hi))
    probs = []
    for r in range(new.world):
        _, _, tp_i = new.coords(r)
        for p in owned_params(spec, new, r):
            a, b = tp_range(p, new.tp, tp_i)
            ivs = sorted(got.pop((r, p.name), []))
            pos = 0
            for lo, hi in ivs:
                if lo != pos:
                    probs.append(f"rank {r} {p.name}: gap or overlap at {pos}..{lo}")
                pos = hi
            if pos != b - a:
                probs.append(f"rank {r} {p.name}: covered up to {pos} of {b - a}")
    probs += [f"rank {r} gets {n}, which it does not own" for (r, n) in got]
    return probs


def _sl(t: torch.Tensor, dim: int, lo: int, hi: int) -> torch.Tensor:
    return t.narrow(dim, lo, hi - lo)


def pairs(pieces: list[Piece]) -> dict[tuple[int, int], list[Piece]]:
    out: dict[tuple[int, int], list[Piece]] = defaultdict(list)
    for pc in pieces:
        out[(pc.src, pc.dst)].append(pc)
    return dict(sorted(out.items()))


def _gather(views: list[torch.Tensor]) -> torch.Tensor:
    """Copy strided views into one new flat buffer (one copy per element)."""
    buf = torch.empty(sum(v.numel() for v in views))
    off = 0
    for v in views:
        buf[off: off + v.numel()].view(v.shape).copy_(v)
        off += v.numel()
    return buf


def pack(shards: dict[str, dict[str, torch.Tensor]], pcs: list[Piece]) -> torch.Tensor:
    """One flat buffer with every piece's slice of all four state tensors, in plan order."""
    return _gather([_sl(shards[pc.name][k], pc.dim, pc.src_lo, pc.src_hi) for pc in pcs for k in STATE_KINDS])


def packed_numel(shards_like: dict[str, dict[str, torch.Tensor]], pcs: list[Piece]) -> int:
    n = 0
    for pc in pcs:
        t = shards_like[pc.name]["param"]
        n += (t.numel() // t.shape[pc.dim]) * (pc.dst_hi - pc.dst_lo) * len(STATE_KINDS)
    return n


def unpack(buf: torch.Tensor, shards: dict[str, dict[str, torch.Tensor]], pcs: list[Piece]) -> None:
    off = 0
    for pc in pcs:
        for k in STATE_KINDS:
            dst = _sl(shards[pc.name][k], pc.dim, pc.dst_lo, pc.dst_hi)
            n = dst.numel()
            dst.copy_(buf[off: off + n].view(dst.shape))
            off += n
    if off != buf.numel():
        raise ValueError(f"unpack: buffer has {buf.numel()} elements, pieces take {off}")


def repack_dst(shards: dict[str, dict[str, torch.Tensor]], pcs: list[Piece]) -> torch.Tensor:
    """What the destination now holds for these pieces, packed like the source packed them."""
    return _gather([_sl(shards[pc.name][k], pc.dim, pc.dst_lo, pc.dst_hi) for pc in pcs for k in STATE_KINDS])


def checksum(t: torch.Tensor) -> int:
    return zlib.crc32(t.detach().contiguous().numpy().view("uint8").data)  # reads the buffer in place


def empty_shards(spec: ModelSpec, layout: Layout, rank: int) -> dict[str, dict[str, torch.Tensor]]:
    from executor.workers.model import shard_shape

    return {p.name: {k: torch.zeros(shard_shape(p, layout)) for k in STATE_KINDS} for p in owned_params(spec, layout, rank)}


def apply_local(pieces: list[Piece], old: dict[int, dict], new: dict[int, dict]) -> dict[tuple[int, int], tuple[int, int]]:
    """Carry a plan out in one process (sim backend, restore from a checkpoint): (src crc, dst crc) per pair."""
    sums = {}
    for (s, d), pcs in pairs(pieces).items():
        buf = pack(old[s], pcs)
        unpack(buf, new[d], pcs)
        sums[(s, d)] = (checksum(buf), checksum(repack_dst(new[d], pcs)))
    return sums


def all_param_names(spec: ModelSpec) -> list[str]:
    return [p.name for p in param_specs(spec)]
