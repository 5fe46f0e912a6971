"""A trainer rank of the tiny LM (:mod:`executor.workers.tinylm`): real forward and backward,
a GRPO-style loss, ``torch.optim.AdamW``, sharded by TP (column/row-parallel blocks) and DP.

* **TP**: the rank holds its blocks of every split weight (and a copy of the replicated ones);
  activations and input gradients cross the TP group as all-gathers summed in block order.
* **DP**: a step is :data:`~executor.workers.tinylm.MICROBATCHES` micro-batches (GRPO groups);
  DP replica ``d`` computes micro-batches ``[d*M/dp, (d+1)*M/dp)``, their gradients are
  all-gathered over the DP group and summed in micro-batch order, then AdamW steps.
  The result does not depend on the layout, bit for bit (see :mod:`executor.workers.tinylm`).
* Fencing as for every worker: a step is authorised before the gradients are touched and
  committed to the coordinator before the optimizer steps; checkpoints go through the lease.
* State is a plain dict of tensors + JSON metadata (:mod:`executor.workers.shardstate`);
  a P2P migration reshards it with torch.distributed.checkpoint (:meth:`save_shards`,
  :meth:`load_shards`), a reboot through the coordinator's checkpoint store (:meth:`restore_from`).

Collectives: on Ray, gloo groups joined by :meth:`join_training_group`; in one process (the sim
backend, tests), :meth:`train_group` runs the ranks in threads over gloo on a ``HashStore``.
"""

from __future__ import annotations

import datetime
import threading
import zlib
from typing import Any, Callable, Optional

import torch

from executor.state import Layout
from executor.workers.fencing import require_lease
from executor.workers.rankbase import TrainerRankBase
from executor.workers import shardstate
from executor.workers import tinylm as lm


def _grad(t: torch.Tensor) -> torch.Tensor:
    if t.grad is None:
        raise RuntimeError(f"a parameter of shape {tuple(t.shape)} got no gradient: the loss does not use it")
    return t.grad


def _detached(method: str, *args: Any) -> Any:
    raise RuntimeError(f"'{method}' on a trainer rank restored from a saved state that no coordinator was attached to")


def check_size(spec) -> None:
    """Refuse a model bigger than any target may ask for (executor.target.MAX_STANDIN_PARAMS), before allocating it."""
    from executor.safestate import BadState
    from executor.state import MAX_STANDIN_PARAMS

    dims = (spec.hidden, spec.ffn, spec.layers, spec.vocab)
    if not all(type(x) is int and 0 < x <= 1 << 20 for x in dims):
        raise BadState("a trainer rank's model has a malformed size")
    H, F, V = spec.hidden, spec.ffn, spec.vocab
    params = spec.layers * (4 * H * H + 2 * H * F) + 2 * V * H  # as executor.target.ModelIn counts them (norms aside)
    if params > MAX_STANDIN_PARAMS:
        raise BadState(f"a trainer rank's model has {params:,} parameters, more than {MAX_STANDIN_PARAMS:,}")


class LMTrainerRank(TrainerRankBase):
    lr, betas, eps, weight_decay = 1e-3, (0.9, 0.999), 1e-8, 0.01

    def __init__(self, worker_id: str, epoch: int, component: str, layout: dict, rank: int, spec: dict,
                 coord: Callable[..., Any], init: str = "fresh", fail_start: bool = False) -> None:
        if fail_start:
            raise MemoryError(f"{worker_id}: out of memory allocating the optimizer state (injected)")
        self.id, self.epoch, self.component, self.rank = worker_id, epoch, component, rank
        self.layout, self.model = Layout(**layout), dict(spec or {})
        self.spec = lm.spec_of(self.model)
        probs = lm.layout_problems(self.spec, self.layout.tp, self.layout.pp, self.layout.dp)
        if probs:
            raise ValueError(f"{worker_id}: " + "; ".join(probs))
        self._coord = coord
        self.loaded = init == "fresh"
        self.train_pgs: Optional[dict] = None
        self._stores: list = []
        self._build(fresh=init == "fresh")

    # ------------------------------------------------------------------ parameters and optimizer
    def _blocks(self, p: lm.PSpec) -> list[int]:
        _, _, tp_i = self.layout.coords(self.rank)
        return list(lm.local_blocks(self.layout.tp, tp_i)) if p.split is not None else [0]

    def _build(self, fresh: bool) -> None:
        self.P: dict[str, list[torch.Tensor]] = {}
        for p in lm.param_specs(self.spec):
            ts = lm.init_blocks(self.spec, p, self._blocks(p)) if fresh else [torch.zeros(lm.block_shape(p)) for _ in self._blocks(p)]
            self.P[p.name] = [t.requires_grad_(True) for t in ts]
        self.flat = [t for ts in self.P.values() for t in ts]
        self.opt = torch.optim.AdamW(self.flat, lr=self.lr, betas=self.betas, eps=self.eps, weight_decay=self.weight_decay,
                                     foreach=False)
        for t in self.flat:
            self.opt.state[t] = {"step": torch.tensor(0.0), "exp_avg": torch.zeros_like(t), "exp_avg_sq": torch.zeros_like(t)}
        self.step_no = 0

    def _chunks(self):
        """(chunk key, fqn kind, param spec, global block index, tensor) for every chunk of state."""
        for p in lm.param_specs(self.spec):
            for j, t in zip(self._blocks(p), self.P[p.name]):
                tag = str(j) if p.split is not None else "r"
                for kind in lm.KINDS:
                    tensor = t.data if kind == "param" else self.opt.state[t][kind]
                    yield f"{kind}/{p.name}/{tag}", kind, p, j, tensor

    def _live_state(self) -> dict:
        """The state dict over this rank's live tensors (no copy): what DCP reads and fills."""
        tensors, chunks = {}, {}
        for key, kind, p, j, t in self._chunks():
            tensors[key] = t
            chunks[key] = {"fqn": f"{kind}/{p.name}", "offset": lm.block_offset(p, j), "global_shape": list(p.shape)}
        return {"format": shardstate.FORMAT, "rank": self.rank, "step": self.step_no, "layout": vars(self.layout) | {},
                "model": dict(self.model), "tensors": tensors, "chunks": chunks}

    def _set_step(self, step: int) -> None:
        self.step_no = int(step)
        for t in self.flat:
            self.opt.state[t]["step"] = torch.tensor(float(step))

    # ------------------------------------------------------------------ training
    def _micro(self) -> range:
        _, dp_i, _ = self.layout.coords(self.rank)
        n = lm.MICROBATCHES // self.layout.dp
        return range(dp_i * n, (dp_i + 1) * n)

    def compute_grads(self, step: int, tp: lm.Comm = lm.SOLO, dp: lm.Comm = lm.SOLO) -> None:
        with lm.one_thread():
            self._compute_grads(step, tp, dp)

    def _compute_grads(self, step: int, tp: lm.Comm, dp: lm.Comm) -> None:
        per_mb = []
        for m in self._micro():
            for t in self.flat:
                t.grad = None
            loss = lm.grpo_loss(self.spec, self.P, lm.grpo_batch(self.spec, step, m), tp)
            loss.backward()
            per_mb.append(torch.cat([_grad(t).reshape(-1) for t in self.flat]))
        total = lm.fold_sum(dp.all_gather(per_mb)) / lm.MICROBATCHES
        off = 0
        for t in self.flat:
            t.grad = total[off: off + t.numel()].view(t.shape).clone()
            off += t.numel()

    def apply_step(self, step: int) -> bool:
        """Commit under the lease, then the AdamW step (a refused rank leaves its state untouched)."""
        if not self._coord("commit_step", self.id, self.epoch, self.component, step):
            for t in self.flat:
                t.grad = None
            return False
        with lm.one_thread():
            self.opt.step()
        for t in self.flat:
            t.grad = None
        self.step_no += 1
        return True

    def _comms(self) -> tuple[lm.Comm, lm.Comm]:
        pgs = self.train_pgs or {}
        _, dp_i, tp_i = self.layout.coords(self.rank)
        tp = lm.Comm(pgs["tp"], tp_i, self.layout.tp) if self.layout.tp > 1 else lm.SOLO
        dp = lm.Comm(pgs["dp"], dp_i, self.layout.dp) if self.layout.dp > 1 else lm.SOLO
        return tp, dp

    def train_step(self, step: int) -> bool:
        if not self._coord("authorize", self.id, self.epoch, f"train step {step} of {self.component}"):
            return False
        if (self.layout.tp > 1 or self.layout.dp > 1) and not self.train_pgs:
            raise RuntimeError(f"{self.id}: no training group joined; call join_training_group first")
        tp, dp = self._comms()
        self.compute_grads(step, tp, dp)
        return self.apply_step(step)

    @staticmethod
    def train_group(ranks: list["LMTrainerRank"], step: int, timeout_s: float = 60.0) -> list[bool]:
        """One step of a whole layout held in this process: ranks in threads, gloo on a HashStore."""
        import torch.distributed as dist

        if not ranks:
            return []
        lay = ranks[0].layout
        if not all([r._coord("authorize", r.id, r.epoch, f"train step {step} of {r.component}") for r in ranks]):
            return [False] * len(ranks)  # a fenced rank: the layout cannot step without it
        if lay.tp * lay.dp == 1 or len(ranks) == 1:
            for r in ranks:
                r.compute_grads(step)
        else:
            store, td = dist.HashStore(), datetime.timedelta(seconds=timeout_s)
            errors: list[BaseException] = []

            def run(r: "LMTrainerRank") -> None:
                try:
                    _, dp_i, tp_i = r.layout.coords(r.rank)
                    tp = dp = lm.SOLO
                    if lay.tp > 1:
                        tp = lm.Comm(dist.ProcessGroupGloo(dist.PrefixStore(f"s{step}-tp-dp{dp_i}", store), tp_i, lay.tp, td),
                                     tp_i, lay.tp)
                    if lay.dp > 1:
                        dp = lm.Comm(dist.ProcessGroupGloo(dist.PrefixStore(f"s{step}-dp-tp{tp_i}", store), dp_i, lay.dp, td),
                                     dp_i, lay.dp)
                    r.compute_grads(step, tp, dp)
                except BaseException as exc:  # noqa: BLE001 - re-raised in the caller
                    errors.append(exc)

            threads = [threading.Thread(target=run, args=(r,), daemon=True) for r in ranks]
            for t in threads:
                t.start()
            for t in threads:
                t.join(timeout_s + 5)
            if errors or any(t.is_alive() for t in threads):
                raise RuntimeError(f"in-process training step {step} failed: {errors[:1] or 'a rank did not finish'}")
        return [r.apply_step(step) for r in ranks]

    def join_training_group(self, host: str, ports: dict, timeout_s: float = 30.0) -> None:
        """Join the DP group (``ports['pp0tp<i>']``, as the Ray backend hosts them) and the TP
        group (``ports['pp0dp<d>']``)."""
        from executor.migrations import gloo

        _, dp_i, tp_i = self.layout.coords(self.rank)
        pgs = {}
        for kind, key, me, world in (("dp", f"pp0tp{tp_i}", dp_i, self.layout.dp), ("tp", f"pp0dp{dp_i}", tp_i, self.layout.tp)):
            if world == 1:
                continue
            if key not in ports:
                raise RuntimeError(f"{self.id}: the backend hosted no store for the {kind} group {key}; a tiny-LM trainer with "
                                   f"tp>1 needs one per DP replica (keys pp0dp<d>)")
            pg, store = gloo.join(host, ports[key], me, world, f"train-{self.component}-{kind}-{key}", timeout_s)
            self._stores.append(store)
            pgs[kind] = pg
        self.train_pgs = pgs

    def host_training_stores(self, keys: list[str], world: int, timeout_s: float) -> tuple[str, dict[str, int]]:
        from executor.migrations import gloo

        return gloo.host_stores(keys, world, timeout_s, self._stores)

    # ------------------------------------------------------------------ state
    def state(self) -> dict:
        """A copy of this rank's state: plain dict of tensors + JSON-able metadata."""
        st = self._live_state()
        with lm.one_thread():
            st["tensors"] = {k: t.detach().clone() for k, t in st["tensors"].items()}
        return st

    def digest(self) -> dict[str, int]:
        return {k: zlib.crc32(t.detach().contiguous().numpy().view("uint8")) for k, t in sorted(self._live_state()["tensors"].items())}

    def load_state(self, blob: dict) -> None:
        shardstate.copy_matching(self._live_state(), [blob])
        self._set_step(blob["step"])
        self.loaded = True

    def save_state(self, key: str) -> bool:
        """Reboot: this rank's state into the checkpoint store, under the lease."""
        return bool(self._coord("put_checkpoint", self.id, self.epoch, f"{key}/rank{self.rank}", self.state()))

    def restore_from(self, key: str, old_layout: dict) -> dict:
        """Fill this rank from the checkpoint of ``old_layout``'s ranks (DP replica 0 suffices)."""
        old = Layout(**old_layout)
        blobs = []
        for r in range(old.world):
            if old.coords(r)[1] != 0:
                continue
            blob = self._coord("get_checkpoint", f"{key}/rank{r}")
            if blob is None:
                raise RuntimeError(f"{self.id}: checkpoint {key}/rank{r} is missing")
            blobs.append(blob)
        shardstate.copy_matching(self._live_state(), blobs)
        self._set_step(blobs[0]["step"])
        self.loaded = True
        return self.digest()

    # ------------------------------------------------------------------ P2P migration (DCP)
    def save_shards(self, directory: str) -> int:
        """Old rank: write this rank's state as a DCP checkpoint (under the lease)."""
        import json
        from pathlib import Path

        if not self._coord("authorize", self.id, self.epoch, f"write shards to {directory}"):
            raise RuntimeError(f"{self.id}: lease revoked; refusing to write shards")
        n = shardstate.dcp_save(self._live_state(), directory)
        (Path(directory) / "rl_planner_step.json").write_text(json.dumps({"step": self.step_no, "rank": self.rank}))
        return n

    def load_shards(self, directories: list[str]) -> dict:
        """New rank: load the chunks it owns from the old ranks' DCP checkpoints (any layout)."""
        import json
        from pathlib import Path

        require_lease(self._coord, self.id, self.epoch, "load")
        with torch.no_grad():
            shardstate.dcp_load(self._live_state(), directories)
        steps = {json.loads((Path(d) / "rl_planner_step.json").read_text())["step"] for d in directories}
        if len(steps) != 1:
            raise RuntimeError(f"{self.id}: the old ranks' checkpoints are of different steps {sorted(steps)}")
        self._set_step(steps.pop())
        return {"bytes": sum(t.numel() * t.element_size() for t in self._live_state()["tensors"].values())}

    def finish_migration(self, step: int) -> dict:
        require_lease(self._coord, self.id, self.epoch, "load")
        self._set_step(step)
        self.loaded = True
        return self.digest()

    def relayout(self, rank: int, layout: dict) -> None:
        """In-place DP resize: the TP index (hence the blocks held) must not change."""
        new = Layout(**layout)
        if new.tp != self.layout.tp or new.coords(rank)[2] != self.layout.coords(self.rank)[2]:
            raise RuntimeError(f"{self.id}: rank {self.rank} of {self.layout} cannot become rank {rank} of {new} in place")
        self.rank, self.layout, self.train_pgs = rank, new, None

    # ------------------------------------------------------------------ persistence (sim backend)
    def __setstate__(self, d: dict) -> None:
        self.id, self.epoch, self.component, self.rank = d["id"], d["epoch"], d["component"], d["rank"]
        self.layout, self.model = Layout(**d["layout"]), d["model"]
        self.spec = lm.spec_of(self.model)
        check_size(self.spec)  # before _build allocates it: a saved state names its model's size
        self._coord, self.train_pgs, self._stores = _detached, None, []
        self._build(fresh=False)
        self.load_state(d["state"])
        self.loaded = d["loaded"]
