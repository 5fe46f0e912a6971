"""A small decoder-only transformer, built in code (no downloads), for the real model workers.

Architecture (pre-norm, as in Llama): token embedding; per layer RMSNorm -> multi-head attention
with rotary positions -> residual, RMSNorm -> GELU (tanh) MLP -> residual; final RMSNorm; LM head.
Dimensions come from the component's ``model`` block (``hidden``, ``ffn``, ``layers``,
``vocab``, ``seed``); there are :data:`SHARDS` = 4 attention heads (``head_dim = hidden / 4``).

**Tensor parallelism, layout-invariant.** Every TP-split weight is cut into :data:`SHARDS`
fixed *blocks* (Megatron's column/row split at the finest TP degree): ``wqkv`` [3H, H] and
``w_up`` [F, H] and ``lm_head`` [V, H] are column-parallel (blocks along dim 0: block ``j`` of
``wqkv`` is head ``j``'s q, k and v rows), ``wo`` [H, H] and ``w_down`` [H, F] row-parallel
(blocks along dim 1). A rank of TP degree ``t`` holds blocks ``[i*4/t, (i+1)*4/t)`` and computes
one GEMM per block. Where Megatron all-reduces partial sums, this code all-gathers the per-block
partials and adds them in block order, ``((p0 + p1) + p2) + p3``, on every rank; the backward of
the column-parallel input does the same with the per-block input gradients. Every floating
point operation therefore has the same operands in the same order whatever the TP degree, so a
model trained at TP=1, TP=2 or TP=4 is **bit-identical** (tested) — which is what lets the
migration tests demand bit-identical weights after moving to another layout and training on.
Data parallelism does the same with a fixed number of micro-batches (:data:`MICROBATCHES`):
per-micro-batch gradients are all-gathered and summed in micro-batch order.

Collectives go through a :class:`Comm` (a gloo ``ProcessGroup`` and this rank's position);
``None`` means a group of one.
"""

from __future__ import annotations

import contextlib
import math
import threading
from dataclasses import dataclass
from typing import Iterator, Optional

import torch
import torch.nn.functional as F

SHARDS = 4  # blocks per TP-split weight = attention heads = the largest TP degree
MICROBATCHES = 4  # per training step = the largest DP degree
KINDS = ("param", "exp_avg", "exp_avg_sq")  # trainer state per parameter block (AdamW's moments)


@dataclass(frozen=True)
class LMSpec:
    hidden: int = 32
    ffn: int = 64
    layers: int = 2
    vocab: int = 64
    seed: int = 0

    @property
    def head_dim(self) -> int:
        return self.hidden // SHARDS


@dataclass(frozen=True)
class PSpec:
    name: str
    shape: tuple[int, ...]  # global shape
    split: Optional[int]  # TP split dimension (blocks along it), None when replicated


def spec_of(model: dict | None) -> LMSpec:
    return LMSpec(**{k: v for k, v in (model or {}).items() if k in LMSpec.__dataclass_fields__})


def param_specs(s: LMSpec) -> list[PSpec]:
    H, Fd, V = s.hidden, s.ffn, s.vocab
    out = [PSpec("embed", (V, H), None)]
    for li in range(s.layers):
        out += [PSpec(f"l{li}.attn_norm", (H,), None), PSpec(f"l{li}.wqkv", (3 * H, H), 0), PSpec(f"l{li}.wo", (H, H), 1),
                PSpec(f"l{li}.mlp_norm", (H,), None), PSpec(f"l{li}.w_up", (Fd, H), 0), PSpec(f"l{li}.w_down", (H, Fd), 1)]
    out += [PSpec("norm", (H,), None), PSpec("lm_head", (V, H), 0)]
    return out


def layout_problems(s: LMSpec, tp: int, pp: int = 1, dp: int = 1) -> list[str]:
    """Why this model cannot run in this layout (each message names the fix)."""
    probs = []
    for what, n in (("hidden", s.hidden), ("ffn", s.ffn), ("vocab", s.vocab)):
        if n % SHARDS:
            probs.append(f"model.{what}={n} must be a multiple of {SHARDS} (the TP blocks)")
    if s.hidden % SHARDS == 0 and s.head_dim % 2:
        probs.append(f"model.hidden={s.hidden} gives an odd head_dim {s.head_dim}; use a multiple of {2 * SHARDS} (rotary)")
    if tp not in (1, 2, 4):
        probs.append(f"layout.tp={tp}: the tiny LM supports tp 1, 2 or 4 (its {SHARDS} heads)")
    if pp != 1:
        probs.append(f"layout.pp={pp}: the tiny LM trainer does not pipeline; use pp=1 (TP and DP only)")
    if dp not in (1, 2, 4):
        probs.append(f"layout.dp={dp}: the tiny LM trainer supports dp 1, 2 or 4 ({MICROBATCHES} micro-batches)")
    return probs


def local_blocks(tp: int, tp_i: int) -> range:
    n = SHARDS // tp
    return range(tp_i * n, (tp_i + 1) * n)


def block_shape(p: PSpec) -> tuple[int, ...]:
    if p.split is None:
        return p.shape
    sh = list(p.shape)
    sh[p.split] //= SHARDS
    return tuple(sh)


def block_offset(p: PSpec, j: int) -> list[int]:
    off = [0] * len(p.shape)
    if p.split is not None:
        off[p.split] = j * block_shape(p)[p.split]
    return off


def full_init(s: LMSpec, p: PSpec) -> torch.Tensor:
    if p.name.endswith("norm"):
        return torch.ones(p.shape)
    g = torch.Generator().manual_seed(s.seed * 1_000_003 + sum(ord(c) * (i + 1) for i, c in enumerate(p.name)))
    return torch.randn(p.shape, generator=g) * (1.0 / math.sqrt(p.shape[-1]))


def init_blocks(s: LMSpec, p: PSpec, blocks: range | list[int]) -> list[torch.Tensor]:
    full = full_init(s, p)
    if p.split is None:
        return [full.clone()]
    return [full.narrow(p.split, j * block_shape(p)[p.split], block_shape(p)[p.split]).clone() for j in blocks]


def init_blocks_from(full: torch.Tensor, p: PSpec) -> list[torch.Tensor]:
    """All :data:`SHARDS` blocks of a full tensor (one tensor for a replicated parameter)."""
    if p.split is None:
        return [full.clone()]
    n = block_shape(p)[p.split]
    return [full.narrow(p.split, j * n, n).clone() for j in range(SHARDS)]


# ----------------------------------------------------------------------------- collectives
class Comm:
    """A gloo process group and this rank's index in it (``pg=None``: a group of one)."""

    def __init__(self, pg, rank: int, world: int) -> None:
        self.pg, self.rank, self.world = pg, rank, world

    def all_gather(self, local: list[torch.Tensor]) -> list[torch.Tensor]:
        """Every rank's list, concatenated in rank order (every rank contributes as many tensors)."""
        if self.pg is None or self.world == 1:
            return list(local)
        mine = torch.stack([t.contiguous() for t in local])
        outs = [torch.empty_like(mine) for _ in range(self.world)]
        self.pg.allgather([outs], [mine]).wait()
        return [t for o in outs for t in o.unbind(0)]


SOLO = Comm(None, 0, 1)


def fold_sum(ts: list[torch.Tensor]) -> torch.Tensor:
    """``((t0 + t1) + t2) + ...``: one fixed order, whatever the layout."""
    acc = ts[0]
    for t in ts[1:]:
        acc = acc + t
    return acc


class _Scatter(torch.autograd.Function):
    """Forward: the same input for each local block. Backward: the blocks' input gradients of
    every TP rank, summed in block order (Megatron's ``f``, made layout-invariant)."""

    @staticmethod
    def forward(ctx, x, n, comm):
        ctx.comm = comm
        return tuple(x.clone() for _ in range(n))

    @staticmethod
    def backward(ctx, *grads):
        return fold_sum(ctx.comm.all_gather(list(grads))), None, None


class _GatherSum(torch.autograd.Function):
    """Forward: every block's partial output (all TP ranks), summed in block order (Megatron's
    ``g``). Backward: each local partial gets the output gradient (identical on every rank)."""

    @staticmethod
    def forward(ctx, comm, *parts):
        ctx.n = len(parts)
        return fold_sum(comm.all_gather(list(parts)))

    @staticmethod
    def backward(ctx, g):
        return (None,) + tuple(g for _ in range(ctx.n))


class _GatherCat(torch.autograd.Function):
    """Forward: the vocab-parallel logits of every rank, concatenated. Backward: this rank's columns."""

    @staticmethod
    def forward(ctx, comm, *parts):
        ctx.comm, ctx.n, ctx.w = comm, len(parts), parts[0].shape[-1]
        return torch.cat(comm.all_gather(list(parts)), dim=-1)

    @staticmethod
    def backward(ctx, g):
        lo = ctx.comm.rank * ctx.n * ctx.w
        return (None,) + tuple(g[..., lo + k * ctx.w: lo + (k + 1) * ctx.w].contiguous() for k in range(ctx.n))


def scatter(x: torch.Tensor, n: int, comm: Comm) -> tuple[torch.Tensor, ...]:
    return _Scatter.apply(x, n, comm)


_threads_lock = threading.Lock()
_threads_depth = [0, 0]  # (active users, the thread count to restore)


@contextlib.contextmanager
def one_thread() -> Iterator[None]:
    """Run torch ops on one intra-op thread while inside (re-entrant, thread-safe). The tiny
    model's ops are far too small to split, and on an oversubscribed machine the pool's threads
    wait for each other on every op: a forward was 20x slower (157 ms vs 7.5 ms on the shared
    2-core VM at load 10), filling 150 MB of shards took 18 s."""
    with _threads_lock:
        if _threads_depth[0] == 0:
            _threads_depth[1] = torch.get_num_threads()
            torch.set_num_threads(1)
        _threads_depth[0] += 1
    try:
        yield
    finally:
        with _threads_lock:
            _threads_depth[0] -= 1
            if _threads_depth[0] == 0:
                torch.set_num_threads(_threads_depth[1])


# ----------------------------------------------------------------------------- forward
def rms_norm(x: torch.Tensor, w: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w


def rope(x: torch.Tensor, pos: torch.Tensor) -> torch.Tensor:
    """Rotary position embedding of ``x`` [..., T, d] at positions ``pos`` [T]."""
    half = x.shape[-1] // 2
    freqs = 1.0 / (10000.0 ** (torch.arange(half, dtype=torch.float32) / half))
    ang = pos.to(torch.float32)[:, None] * freqs[None, :]
    cos, sin = ang.cos(), ang.sin()
    x1, x2 = x[..., :half], x[..., half:]
    return torch.cat([x1 * cos - x2 * sin, x1 * sin + x2 * cos], dim=-1)


def forward(s: LMSpec, P: dict[str, list[torch.Tensor]], tokens: torch.Tensor, comm: Comm = SOLO,
            kv: Optional[dict] = None, pos0: int = 0) -> torch.Tensor:
    """Logits [B, T, V] of ``tokens`` [B, T] at positions ``pos0..``; ``P[name]`` holds this
    rank's blocks of each parameter (one tensor for a replicated one). With ``kv`` (a dict, empty
    at first) the keys and values of every layer and head are kept there and reused: a decode
    step passes one token and the cache of the ones before."""
    T = tokens.shape[1]
    pos = torch.arange(pos0, pos0 + T)
    hd = s.head_dim
    x = F.embedding(tokens, P["embed"][0])
    for li in range(s.layers):
        n = len(P[f"l{li}.wqkv"])
        hs = scatter(rms_norm(x, P[f"l{li}.attn_norm"][0]), n, comm)
        parts = []
        for k in range(n):
            qkv = hs[k] @ P[f"l{li}.wqkv"][k].t()
            q, kk, v = rope(qkv[..., :hd], pos), rope(qkv[..., hd: 2 * hd], pos), qkv[..., 2 * hd:]
            if kv is not None:
                key = (li, k)
                if key in kv:
                    kk, v = torch.cat([kv[key][0], kk], dim=1), torch.cat([kv[key][1], v], dim=1)
                kv[key] = (kk.detach(), v.detach())
            scores = (q @ kk.transpose(-1, -2)) * (1.0 / math.sqrt(hd))
            L = kk.shape[1]
            if T > 1:
                mask = torch.arange(L)[None, :] > (torch.arange(T)[:, None] + (L - T))
                scores = scores.masked_fill(mask, float("-inf"))
            parts.append((torch.softmax(scores, dim=-1) @ v) @ P[f"l{li}.wo"][k].t())
        x = x + _GatherSum.apply(comm, *parts)
        n = len(P[f"l{li}.w_up"])
        hs = scatter(rms_norm(x, P[f"l{li}.mlp_norm"][0]), n, comm)
        parts = [F.gelu(hs[k] @ P[f"l{li}.w_up"][k].t(), approximate="tanh") @ P[f"l{li}.w_down"][k].t() for k in range(n)]
        x = x + _GatherSum.apply(comm, *parts)
    n = len(P["lm_head"])
    hs = scatter(rms_norm(x, P["norm"][0]), n, comm)
    return _GatherCat.apply(comm, *[hs[k] @ P["lm_head"][k].t() for k in range(n)])


def full_params(s: LMSpec) -> dict[str, list[torch.Tensor]]:
    """All blocks of every parameter (a TP=1 copy), freshly initialised."""
    return {p.name: init_blocks(s, p, range(SHARDS)) for p in param_specs(s)}


# ----------------------------------------------------------------------------- training data
def grpo_batch(s: LMSpec, step: int, micro: int, group: int = 4, prompt_len: int = 4, resp_len: int = 6) -> dict:
    """A synthetic GRPO group for micro-batch ``micro`` of ``step``: ``group`` responses to one
    prompt, a scalar reward each, advantages normalised within the group."""
    g = torch.Generator().manual_seed((s.seed + 11) * 1_000_003 + step * 7_919 + micro)
    prompt = torch.randint(0, s.vocab, (1, prompt_len), generator=g).expand(group, prompt_len)
    resp = torch.randint(0, s.vocab, (group, resp_len), generator=g)
    reward = torch.rand(group, generator=g)
    adv = (reward - reward.mean()) / (reward.std() + 1e-6)
    return {"tokens": torch.cat([prompt, resp], dim=1), "prompt_len": prompt_len, "adv": adv}


def grpo_loss(s: LMSpec, P: dict, batch: dict, comm: Comm, clip: float = 0.2) -> torch.Tensor:
    """The clipped GRPO surrogate on the response tokens: ``-mean(min(r A, clip(r, 1±eps) A))``
    with ``r = exp(logp - logp_old)`` (``logp_old``: the same policy, detached: one update per batch)."""
    toks = batch["tokens"]
    logits = forward(s, P, toks[:, :-1], comm)
    logp = torch.log_softmax(logits, dim=-1).gather(-1, toks[:, 1:, None])[..., 0]
    logp = logp[:, batch["prompt_len"] - 1:]
    ratio = torch.exp(logp - logp.detach())
    a = batch["adv"][:, None]
    return -torch.minimum(ratio * a, ratio.clamp(1 - clip, 1 + clip) * a).mean()
