"""The ``megatron`` trainer implementation: ranks whose state is a Megatron-core ``GPTModel``'s, in
Megatron-LM's default ``dist_checkpointing`` layout, resharded for P2P migrations through
``torch.distributed.checkpoint`` (the format under Megatron's ``torch_dist`` backend).

**Layout** (what ``GPTModel(...).sharded_state_dict()`` gives with the local layer spec; the tests
compare it with a real ``GPTModel`` when ``megatron-core`` is installed):

* keys are Megatron's, with the layers *stacked*: ``decoder.layers.self_attention.linear_qkv.weight``
  has global shape ``(layers, (heads + 2 kv_heads) * head_dim, hidden)``, a layer axis first
  (``prepend_axis_num=1``), and a pipeline stage holds layers ``[s L/pp, (s+1) L/pp)``; the
  norms are under the fused Transformer Engine names (``linear_qkv.layer_norm_weight``,
  ``linear_fc1.layer_norm_weight``) with either layer spec, as Megatron maps them;
* column-parallel tensors (``linear_qkv`` weight and bias, ``linear_fc1``, the embedding and the
  output layer) are split over TP along their output axis, row-parallel ones (``linear_proj``,
  ``linear_fc2``) along their input axis, norms are replicated; the gated MLP's ``linear_fc1``
  is two halves (gate, up), each split over TP (``apply_swiglu_sharded_factory``), so TP rank
  ``t`` holds rows ``[t f/tp, (t+1) f/tp)`` and ``[f + t f/tp, f + (t+1) f/tp)``;
* the embedding lives on the first stage, ``decoder.final_layernorm`` and ``output_layer`` on the
  last;
* Adam's moments are in model space, ``optimizer.state.exp_avg.<key>`` and
  ``optimizer.state.exp_avg_sq.<key>`` (Megatron's ``fully_reshardable`` naming, which any TP/PP/DP
  layout can read). Megatron-LM's *default* optimizer format, ``dp_reshardable`` (per-(PP, TP)
  flat DP-sharded buffers), only reshards over DP and is not written here.

**Training.** On CPU a step is a stand-in for ``GPTModel`` forward/backward: each element's
gradient is a seeded function of (step, key, global index), so it does not depend on the layout;
Adam is applied elementwise in float32 (the same bits in every layout), with the usual fencing
(``authorize`` -> gradients -> ``commit_step`` -> optimizer step). With the distributed optimizer
a DP replica would own ``1/dp`` of the moments; here every replica keeps its shard's moments (the
layout's DP replicas hold identical state, as after Megatron's all-gather).

**Model spec** (the component's ``model``): ``hidden``, ``ffn``, ``layers``, ``heads``,
``kv_heads``, ``vocab``, ``qkv_bias``, ``tie`` (default false: a separate ``output_layer``),
``seed``; or ``hf_config``: a local Hugging Face config.json (:mod:`estimators.hfconfig`).
"""

from __future__ import annotations

import json
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Optional

import torch

from executor.state import Layout
from executor.workers import shardstate
from executor.workers.fencing import require_lease
from executor.workers.rankbase import TrainerRankBase

LR, BETAS, EPS = 1e-3, (0.9, 0.999), 1e-8
MOMENTS = ("exp_avg", "exp_avg_sq")
OPT_PREFIX = "optimizer.state."
META_JSON = {"sharded_backend": "torch_dist", "sharded_backend_version": 1, "common_backend": "torch",
             "common_backend_version": 1}


@dataclass(frozen=True)
class Dims:
    hidden: int
    ffn: int
    layers: int
    heads: int
    kv_heads: int
    vocab: int
    head_dim: int
    qkv_bias: bool = True
    tie: bool = False
    seed: int = 0


def dims_of(model: dict) -> Dims:
    """The model spec (see the module docstring) as :class:`Dims`."""
    m = dict(model or {})
    if m.get("hf_config"):
        from estimators import hfconfig

        d = hfconfig.load(m["hf_config"])
        return Dims(d.hidden_size, d.intermediate_size, d.num_layers, d.num_heads, d.num_kv_heads, d.vocab_size, d.hd,
                    d.qkv_bias, d.tie_embeddings, int(m.get("seed", 0)))
    hidden, heads = int(m.get("hidden", 32)), int(m.get("heads", 4))
    return Dims(hidden, int(m.get("ffn", 64)), int(m.get("layers", 2)), heads, int(m.get("kv_heads", 2)), int(m.get("vocab", 64)),
                int(m.get("head_dim") or hidden // heads), bool(m.get("qkv_bias", True)), bool(m.get("tie", False)),
                int(m.get("seed", 0)))


@dataclass(frozen=True)
class GPTParam:
    key: str
    shape: tuple[int, ...]  # global (stacked: the layer axis first)
    tp_axis: Optional[int]  # axis of the global shape split over TP (None: replicated)
    stacked: bool = False
    glu: bool = False  # two halves along tp_axis, each split over TP
    stage: str = "all"  # first | last | all


def gpt_params(d: Dims) -> list[GPTParam]:
    """GPTModel's parameters (local layer spec, RMSNorm, gated MLP, rotary positions)."""
    q, kv, h, L = d.heads * d.head_dim, d.kv_heads * d.head_dim, d.hidden, d.layers
    out = [GPTParam("embedding.word_embeddings.weight", (d.vocab, h), 0, stage="first")]
    lay = "decoder.layers."
    # the local spec's norms are checkpointed under the fused (Transformer Engine) names
    # (TransformerLayer's sharded_state_dict_keys_map), so either spec reads the checkpoint
    out += [GPTParam(lay + "self_attention.linear_qkv.layer_norm_weight", (L, h), None, True),
            GPTParam(lay + "self_attention.linear_qkv.weight", (L, q + 2 * kv, h), 1, True)]
    if d.qkv_bias:
        out.append(GPTParam(lay + "self_attention.linear_qkv.bias", (L, q + 2 * kv), 1, True))
    out += [GPTParam(lay + "self_attention.linear_proj.weight", (L, h, q), 2, True),
            GPTParam(lay + "mlp.linear_fc1.layer_norm_weight", (L, h), None, True),
            GPTParam(lay + "mlp.linear_fc1.weight", (L, 2 * d.ffn, h), 1, True, glu=True),
            GPTParam(lay + "mlp.linear_fc2.weight", (L, h, d.ffn), 2, True),
            GPTParam("decoder.final_layernorm.weight", (h,), None, stage="last")]
    if not d.tie:
        out.append(GPTParam("output_layer.weight", (d.vocab, h), 0, stage="last"))
    return out


def layout_problems(d: Dims, lay: Layout) -> list[str]:
    probs = []
    if d.layers % lay.pp:
        probs.append(f"{d.layers} layers do not split into {lay.pp} pipeline stages")
    for what, n in (("kv_heads (query groups)", d.kv_heads), ("ffn", d.ffn), ("vocab", d.vocab), ("heads", d.heads)):
        if n % lay.tp:
            probs.append(f"{what} {n} is not divisible by tp {lay.tp}")
    if d.tie and lay.pp > 1:
        probs.append("tied embeddings across pipeline stages are not modelled; set tie: false")
    return probs


def local_chunks(p: GPTParam, lay: Layout, rank: int) -> list[tuple[list[int], list[int]]]:
    """(global offset, shape) of each chunk of ``p`` that ``rank`` holds (none if another stage's)."""
    pp_i, _, tp_i = lay.coords(rank)
    if (p.stage == "first" and pp_i != 0) or (p.stage == "last" and pp_i != lay.pp - 1):
        return []
    off, shape = [0] * len(p.shape), list(p.shape)
    if p.stacked:
        n = p.shape[0] // lay.pp
        off[0], shape[0] = pp_i * n, n
    if p.tp_axis is None:
        return [(off, shape)]
    a = p.tp_axis
    halves = 2 if p.glu else 1
    part = p.shape[a] // halves
    n = part // lay.tp
    out = []
    for h in range(halves):
        o, s = list(off), list(shape)
        o[a], s[a] = h * part + tp_i * n, n
        out.append((o, s))
    return out


def _full(key: str, shape: tuple[int, ...], seed: int, scale: float) -> torch.Tensor:
    g = torch.Generator().manual_seed(zlib.crc32(key.encode()) ^ seed)
    return torch.randn(shape, generator=g) * scale


def _piece(t: torch.Tensor, off: list[int], shape: list[int]) -> torch.Tensor:
    return t[tuple(slice(o, o + n) for o, n in zip(off, shape))].clone()


class MegatronRank(TrainerRankBase):
    """One rank of a TP x PP x DP layout (``impl: megatron``; ``p2p="dcp"``)."""

    def __init__(self, worker_id: str, epoch: int, component: str, layout: dict, rank: int, model: dict,
                 coord: Callable[..., Any], init: str = "fresh", fail_start: bool = False) -> None:
        if fail_start:
            raise MemoryError(f"{worker_id}: out of memory allocating the distributed optimizer's buffers (injected)")
        self.id, self.epoch, self.component, self.rank = worker_id, epoch, component, rank
        self.layout, self.model = Layout(**layout), dict(model or {})
        self.dims = dims_of(self.model)
        probs = layout_problems(self.dims, self.layout)
        if probs:
            raise ValueError(f"{worker_id}: layout {self.layout}: " + "; ".join(probs))
        self._coord = coord
        self.loaded = init == "fresh"
        self.step_no = 0
        self._build(fresh=init == "fresh")

    # ------------------------------------------------------------------ state
    def _build(self, fresh: bool) -> None:
        self.params = [p for p in gpt_params(self.dims) if local_chunks(p, self.layout, self.rank)]
        self.tensors: dict[str, torch.Tensor] = {}
        self.chunks: dict[str, dict] = {}
        for p in self.params:
            full = _full(p.key, p.shape, self.dims.seed, 0.02) if fresh else None
            for off, shape in local_chunks(p, self.layout, self.rank):
                tag = "_".join(map(str, off))
                for kind in ("param",) + MOMENTS:
                    key = f"{kind}/{p.key}/{tag}"
                    if kind == "param" and full is not None:
                        self.tensors[key] = _piece(full, off, shape)
                    else:
                        self.tensors[key] = torch.zeros(shape)
                    fqn = p.key if kind == "param" else f"{OPT_PREFIX}{kind}.{p.key}"
                    self.chunks[key] = {"fqn": fqn, "kind": kind, "offset": off, "global_shape": list(p.shape)}

    def _live_state(self) -> dict:
        return {"format": shardstate.FORMAT, "rank": self.rank, "step": self.step_no, "layout": vars(self.layout) | {},
                "model": dict(self.model), "tensors": self.tensors, "chunks": self.chunks}

    def state(self) -> dict:
        st = self._live_state()
        st["tensors"] = {k: t.clone() for k, t in self.tensors.items()}
        st["chunks"] = {k: dict(m) for k, m in self.chunks.items()}
        return st

    def digest(self) -> dict[str, int]:
        return {k: zlib.crc32(t.contiguous().numpy().tobytes()) for k, t in sorted(self.tensors.items())}

    def load_state(self, blob: dict) -> None:
        shardstate.copy_matching(self._live_state(), [blob])
        self.step_no = int(blob["step"])
        self.loaded = True

    # ------------------------------------------------------------------ training
    def _grad(self, step: int, key: str) -> torch.Tensor:
        meta = self.chunks[key]
        full = _full(f"grad/{meta['fqn']}", tuple(meta["global_shape"]), self.dims.seed * 1_000_003 + step, 1.0)
        return _piece(full, meta["offset"], list(self.tensors[key].shape))

    def compute_grads(self, step: int) -> None:
        self._grads = {k: self._grad(step, k) for k, m in self.chunks.items() if m["kind"] == "param"}

    def apply_step(self, step: int) -> bool:
        """Commit under the lease, then Adam (elementwise, float32)."""
        grads, self._grads = getattr(self, "_grads", {}), {}
        if not self._coord("commit_step", self.id, self.epoch, self.component, step):
            return False
        t = self.step_no + 1
        b1, b2 = BETAS
        for key, g in grads.items():
            base = key.split("/", 1)[1]
            m, v, p = self.tensors[f"exp_avg/{base}"], self.tensors[f"exp_avg_sq/{base}"], self.tensors[key]
            m.mul_(b1).add_(g, alpha=1 - b1)
            v.mul_(b2).addcmul_(g, g, value=1 - b2)
            p.sub_(LR * (m / (1 - b1 ** t)) / ((v / (1 - b2 ** t)).sqrt() + EPS))
        self.step_no = t
        return True

    def train_step(self, step: int) -> bool:
        if not self._coord("authorize", self.id, self.epoch, f"train step {step} of {self.component}"):
            return False
        self.compute_grads(step)
        return self.apply_step(step)

    @staticmethod
    def train_group(ranks: list["MegatronRank"], step: int) -> list[bool]:
        """A whole layout in one process (sim backend): every rank authorised, or none steps."""
        if not all([r._coord("authorize", r.id, r.epoch, f"train step {step} of {r.component}") for r in ranks]):
            return [False] * len(ranks)
        for r in ranks:
            r.compute_grads(step)
        return [r.apply_step(step) for r in ranks]

    def join_training_group(self, host: str, ports: dict, timeout_s: float = 30.0) -> None:
        """No collectives in the CPU step (every replica computes the same gradients)."""

    # ------------------------------------------------------------------ reboot
    def save_state(self, key: str) -> bool:
        return bool(self._coord("put_checkpoint", self.id, self.epoch, f"{key}/rank{self.rank}", self.state()))

    def restore_from(self, key: str, old_layout: dict) -> dict:
        old = Layout(**old_layout)
        blobs = []
        for r in range(old.world):
            if old.coords(r)[1] != 0:
                continue
            blob = self._coord("get_checkpoint", f"{key}/rank{r}")
            if blob is None:
                raise RuntimeError(f"{self.id}: checkpoint {key}/rank{r} is missing")
            blobs.append(blob)
        _fill_from(self._live_state(), blobs)
        self.step_no = int(blobs[0]["step"])
        self.loaded = True
        return self.digest()

    # ------------------------------------------------------------------ P2P migration (DCP, Megatron keys)
    def save_shards(self, directory: str) -> int:
        if not self._coord("authorize", self.id, self.epoch, f"write shards to {directory}"):
            raise RuntimeError(f"{self.id}: lease revoked; refusing to write shards")
        n = write_checkpoint([self._live_state()], directory)
        (Path(directory) / "rl_planner_step.json").write_text(json.dumps({"step": self.step_no, "rank": self.rank}))
        return n

    def load_shards(self, directories: list[str]) -> dict:
        require_lease(self._coord, self.id, self.epoch, "load")
        shardstate.dcp_load(self._live_state(), directories)
        steps = {json.loads((Path(d) / "rl_planner_step.json").read_text())["step"] for d in directories
                 if (Path(d) / "rl_planner_step.json").exists()}
        if len(steps) > 1:
            raise RuntimeError(f"{self.id}: the old ranks' checkpoints are of different steps {sorted(steps)}")
        if steps:
            self.step_no = steps.pop()
        return {"bytes": sum(t.numel() * t.element_size() for t in self.tensors.values())}

    def load_model_checkpoint(self, directory: str) -> None:
        """Fill the parameters from a Megatron-LM ``torch_dist`` checkpoint of the model (any TP/PP
        layout; e.g. one ``dist_checkpointing.save`` wrote); Adam's moments start at zero."""
        params = {k: m for k, m in self.chunks.items() if m["kind"] == "param"}
        shardstate.dcp_load({"tensors": {k: self.tensors[k] for k in params}, "chunks": params}, [directory])
        for k, m in self.chunks.items():
            if m["kind"] != "param":
                self.tensors[k].zero_()
        self.loaded = True

    def finish_migration(self, step: int) -> dict:
        require_lease(self._coord, self.id, self.epoch, "load")
        self.step_no = int(step)
        self.loaded = True
        return self.digest()

    def relayout(self, rank: int, layout: dict) -> None:
        new = Layout(**layout)
        old_pp, _, old_tp = self.layout.coords(self.rank)
        new_pp, _, new_tp = new.coords(rank)
        if (new.tp, new.pp, new_tp, new_pp) != (self.layout.tp, self.layout.pp, old_tp, old_pp):
            raise RuntimeError(f"{self.id}: rank {self.rank} of {self.layout} cannot become rank {rank} of {new} in place")
        self.rank, self.layout = rank, new

    def __setstate__(self, d: dict) -> None:
        self.id, self.epoch, self.component, self.rank = d["id"], d["epoch"], d["component"], d["rank"]
        self.layout, self.model = Layout(**d["layout"]), d["model"]
        self.dims = dims_of(self.model)
        self._coord = _detached
        self.step_no = 0
        self._build(fresh=False)
        self.load_state(d["state"])
        self.loaded = d["loaded"]


def _detached(method: str, *args: Any) -> Any:
    raise RuntimeError(f"'{method}' on a trainer rank restored from a saved state that no coordinator was attached to")


def _fill_from(dst: dict, sources: list[dict]) -> None:
    """Fill ``dst``'s chunks from in-memory states of any layout (overlaps of the global tensors)."""
    full = shardstate.assemble(sources)
    with torch.no_grad():
        for key, meta in dst["chunks"].items():
            src = full.get(meta["fqn"])
            t = dst["tensors"][key]
            if src is None:
                raise RuntimeError(f"no saved state for {meta['fqn']}: the checkpoint does not cover this rank")
            piece = _piece(src, meta["offset"], list(t.shape))
            if torch.isnan(piece).any():
                raise RuntimeError(f"the checkpoint does not cover {meta['fqn']} at {meta['offset']}: save every TP and PP "
                                   f"index of DP replica 0")
            t.copy_(piece)


def write_checkpoint(states: list[dict], directory: str, main_params: bool = False) -> int:
    """Write ranks' states as one ``torch_dist`` checkpoint directory Megatron's
    ``dist_checkpointing.load`` reads (``metadata.json``, ``common.pt``, DCP files).

    ``main_params``: also write each parameter as the distributed optimizer's main (fp32) copy,
    ``optimizer.state.param.<key>``, which Megatron's ``DistributedOptimizer`` asks for when it
    loads its ``fully_reshardable`` state (the parameters are fp32 here, so the copy is the
    parameter); a P2P migration between the executor's own ranks leaves it out."""
    merged: dict = {"tensors": {}, "chunks": {}}
    seen = set()
    for i, st in enumerate(states):
        entries = list(st["chunks"].items())
        if main_params:
            entries += [(f"main/{k}", {**m, "fqn": f"{OPT_PREFIX}param.{m['fqn']}", "kind": "main_param"})
                        for k, m in st["chunks"].items() if m["kind"] == "param"]
        for k, m in entries:
            where = (m["fqn"], tuple(m["offset"]))
            if where in seen:  # a replica (TP-replicated norms, DP replicas): written once
                continue
            seen.add(where)
            merged["tensors"][f"{i}/{k}"] = st["tensors"][k.removeprefix("main/")]
            merged["chunks"][f"{i}/{k}"] = m
    n = shardstate.dcp_save(merged, directory)
    d = Path(directory)
    (d / "metadata.json").write_text(json.dumps(META_JSON))
    torch.save({}, d / "common.pt")
    return n


def make(args: dict, epoch: int, coord: Callable[..., Any], fail_start: bool = False) -> MegatronRank:
    w = args["worker"]
    return MegatronRank(w["id"], epoch, w["component"], args["layout"], w["index"], args.get("model") or {}, coord,
                        init=args.get("init", "fresh"), fail_start=fail_start)
