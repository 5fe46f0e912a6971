"""A trainer rank: real shards of a small model with real Adam state and gradient buffers.

Each rank holds, for the parameters of its pipeline stage, its TP slice of the parameter, the
gradient buffer and Adam's moments, updated in place by :func:`adam_update` (torch.optim.Adam's
arithmetic, tested bit for bit against it). A training step computes real autograd gradients of a synthetic
per-element loss whose inputs derive from the *global* coordinates of each element (so a TP
shard's gradient needs no TP communication), averages them over the data-parallel replicas with
a gloo all-reduce in the **training group**, takes an Adam step and commits the step to the
coordinator under the rank's lease. Migration traffic never uses the training group: P2P
resharding runs over a separate **migration group** (:meth:`TrainerRank.migrate`).
"""

from __future__ import annotations

import time
from typing import Any, Callable, Optional

import torch

from executor.migrations import gloo, reshard
from executor.state import Layout
from executor.workers.fencing import require_lease
from executor.workers import rawtensor
from executor.workers.model import ModelSpec, full_init, owned_params, shard_shape, shard_slice


def adam_update(param: torch.Tensor, grad: torch.Tensor, exp_avg: torch.Tensor, exp_avg_sq: torch.Tensor, step: int,
                lr: float, betas: tuple[float, float], eps: float) -> None:
    """One Adam step in place, with the arithmetic of ``torch.optim.Adam``'s single-tensor path
    (tested bit for bit against it). Written out so a rank does not pay for importing
    ``torch._dynamo`` (about 2 s per process), which ``torch.optim`` pulls in."""
    b1, b2 = betas
    exp_avg.lerp_(grad, 1 - b1)
    exp_avg_sq.mul_(b2).addcmul_(grad, grad, value=1 - b2)
    bias1 = 1 - b1 ** step
    bias2_sqrt = (1 - b2 ** step) ** 0.5
    denom = (exp_avg_sq.sqrt() / bias2_sqrt).add_(eps)
    param.addcdiv_(exp_avg, denom, value=-(lr / bias1))


def synthetic_target(spec: ModelSpec, name: str, shape, step: int, dp_i: int) -> torch.Tensor:
    g = torch.Generator().manual_seed((spec.seed + 1) * 7_777_777 + step * 65_537 + dp_i * 131 + sum(map(ord, name)))
    return torch.randn(shape, generator=g)


class TrainerRank:
    def __init__(self, worker_id: str, epoch: int, component: str, layout: dict, rank: int, spec: dict,
                 coord: Callable[..., Any], init: str = "fresh", fail_start: bool = False, lr: float = 1e-3) -> None:
        if fail_start:
            raise MemoryError(f"{worker_id}: CUDA out of memory allocating the optimizer state (injected)")
        self.id, self.epoch, self.component, self.rank = worker_id, epoch, component, rank
        self.layout, self.spec = Layout(**layout), ModelSpec(**spec)
        self._coord = coord
        self.step_no = 0
        self.loaded = init == "fresh"
        self.params: dict[str, torch.Tensor] = {}
        self.shards: dict[str, dict[str, torch.Tensor]] = {}
        for p in owned_params(self.spec, self.layout, rank):
            if init == "fresh":
                t = full_init(self.spec, p)[shard_slice(p, self.layout, rank)].clone()
            else:  # filled by a reshard or a restore
                t = torch.zeros(shard_shape(p, self.layout))
            t.requires_grad_(True)
            self.params[p.name] = t
        self.lr, self.betas, self.eps = lr, (0.9, 0.999), 1e-8
        for name, t in self.params.items():
            self.shards[name] = {"param": t.data, "grad": torch.zeros_like(t), "exp_avg": torch.zeros_like(t),
                                 "exp_avg_sq": torch.zeros_like(t)}
        self.train_pgs: Optional[dict] = None
        self._stores: list = []

    # ------------------------------------------------------------------ training
    def compute_grads(self, step: int) -> None:
        _, dp_i, _ = self.layout.coords(self.rank)
        specs = {p.name: p for p in owned_params(self.spec, self.layout, self.rank)}
        for name, t in self.params.items():
            p = specs[name]
            target = synthetic_target(self.spec, name, p.shape, step, dp_i)[shard_slice(p, self.layout, self.rank)]
            t.grad = None
            loss = (torch.sin(t) * target).sum() + 0.5 * (t * t).sum() * 1e-2
            loss.backward()
            assert t.grad is not None  # backward() of a loss of the leaf t filled it
            self.shards[name]["grad"].add_(t.grad)
            t.grad = None

    def grads(self) -> dict[str, torch.Tensor]:
        return {n: s["grad"].clone() for n, s in self.shards.items()}

    def set_grads(self, grads: dict[str, torch.Tensor]) -> None:
        for n, g in grads.items():
            self.shards[n]["grad"].copy_(g)

    def reduce_grads(self) -> None:
        """Average the gradient buffers over the data-parallel replicas (training group)."""
        if self.layout.dp == 1 or not self.train_pgs:
            return
        pg = self.train_pgs["dp"]
        flat = torch.cat([self.shards[n]["grad"].reshape(-1) for n in sorted(self.shards)])
        pg.allreduce([flat]).wait()
        flat /= self.layout.dp
        off = 0
        for n in sorted(self.shards):
            g = self.shards[n]["grad"]
            g.copy_(flat[off: off + g.numel()].view(g.shape))
            off += g.numel()

    def apply_step(self, step: int) -> bool:
        """Commit the step under the lease, then take the Adam step with the reduced gradients.

        The commit comes first: a rank whose lease was revoked (declared dead, retired by a
        switch) is refused and leaves its state untouched."""
        if not self._coord("commit_step", self.id, self.epoch, self.component, step):
            return False
        self.step_no += 1
        with torch.no_grad():
            for s in self.shards.values():
                adam_update(s["param"], s["grad"], s["exp_avg"], s["exp_avg_sq"], self.step_no, self.lr, self.betas, self.eps)
                s["grad"].zero_()
        return True

    def train_step(self, step: int) -> bool:
        if not self._coord("authorize", self.id, self.epoch, f"train step {step} of {self.component}"):
            return False  # fenced before touching the gradient buffers
        self.compute_grads(step)
        self.reduce_grads()
        return self.apply_step(step)

    def join_training_group(self, host: str, ports: dict, timeout_s: float = 30.0) -> None:
        """DP group of this rank (ranks sharing its PP stage and TP index); ``ports[key]`` per group."""
        pp_i, dp_i, tp_i = self.layout.coords(self.rank)
        if self.layout.dp == 1:
            self.train_pgs = {}
            return
        key = f"pp{pp_i}tp{tp_i}"
        pg, store = gloo.join(host, ports[key], dp_i, self.layout.dp, f"train-{self.component}-{key}", timeout_s)
        self._stores.append(store)
        self.train_pgs = {"dp": pg}

    # ------------------------------------------------------------------ state
    def state(self) -> dict:
        return {"rank": self.rank, "step": self.step_no,
                "shards": {n: {k: t.detach().clone() for k, t in s.items()} for n, s in self.shards.items()}}

    def digest(self) -> dict[str, int]:
        return {f"{n}.{k}": reshard.checksum(t.detach()) for n, s in sorted(self.shards.items()) for k, t in s.items()}

    def load_state(self, blob: dict) -> None:
        with torch.no_grad():
            for n, s in blob["shards"].items():
                for k, t in s.items():
                    self.shards[n][k].copy_(t)
        self._set_step(blob["step"])
        self.loaded = True

    def _set_step(self, step: int) -> None:
        self.step_no = step

    def save_state(self, key: str) -> bool:
        """Reboot: write this rank's shards to the checkpoint store under the lease."""
        return bool(self._coord("put_checkpoint", self.id, self.epoch, f"{key}/rank{self.rank}", self.state()))

    def restore_from(self, key: str, old_layout: dict) -> dict:
        """Fill this rank from a checkpoint written by ``old_layout`` ranks (resharding locally)."""
        old = Layout(**old_layout)
        pieces = [pc for pc in reshard.plan(self.spec, old, self.layout) if pc.dst == self.rank]
        blobs, step = {}, None
        for src in sorted({pc.src for pc in pieces}):
            blob = self._coord("get_checkpoint", f"{key}/rank{src}")
            if blob is None:
                raise RuntimeError(f"{self.id}: checkpoint {key}/rank{src} is missing")
            blobs[src] = blob["shards"]
            step = blob["step"]
        with torch.no_grad():
            reshard.apply_local(pieces, blobs, {self.rank: self.shards})
        self._set_step(step or 0)
        self.loaded = True
        return self.digest()

    # ------------------------------------------------------------------ P2P migration
    def host_migration_store(self, world: int, timeout_s: float) -> tuple[str, int]:
        host = gloo.local_ip()
        store, port = gloo.host_store(host, world, timeout_s)
        self._stores.append(store)
        return host, port

    def host_training_stores(self, keys: list[str], world: int, timeout_s: float) -> tuple[str, dict[str, int]]:
        return gloo.host_stores(keys, world, timeout_s, self._stores)

    def migrate(self, host: str, port: int, mig_rank: int, mig_world: int, prefix: str, role: str,
                pieces: list[tuple], rank_map: dict, timeout_s: float) -> dict:
        """Send (old rank) or receive (new rank) this rank's pieces over a fresh migration group.

        ``rank_map`` maps ("old"|"new", layout rank) to the migration-group rank. Returns the
        checksum of every packed buffer sent or received (received: recomputed from the
        destination shards after unpacking, so a bad unpack is caught too).
        """
        t0 = time.time()
        require_lease(self._coord, self.id, self.epoch, "migrate")
        pcs = [reshard.Piece(*p) for p in pieces]
        pg, store = gloo.join(host, port, mig_rank, mig_world, prefix, timeout_s)
        sums, sends, recvs, unpacks = {}, [], [], []
        for (s, d), group in reshard.pairs(pcs).items():
            if role == "old" and s == self.rank:
                buf = reshard.pack(self.shards, group)
                sums[f"{s}->{d}"] = reshard.checksum(buf)
                sends.append((rank_map[("new", d)], buf))
            elif role == "new" and d == self.rank:
                buf = torch.empty(reshard.packed_numel(self.shards, group))
                recvs.append((rank_map[("old", s)], buf))
                unpacks.append((s, d, buf, group))
        gloo.exchange(pg, sends, recvs)
        with torch.no_grad():
            for s, d, buf, group in unpacks:
                reshard.unpack(buf, self.shards, group)
                sums[f"{s}->{d}"] = reshard.checksum(reshard.repack_dst(self.shards, group))
        moved = sum(b.numel() * 4 for _, b in sends) + sum(b.numel() * 4 for _, b in recvs)
        del pg
        return {"checksums": sums, "bytes": moved, "seconds": time.time() - t0}

    def finish_migration(self, step: int) -> dict:
        """New rank: the reshard is complete; take the old layout's step count; report the digest."""
        require_lease(self._coord, self.id, self.epoch, "load")
        self._set_step(step)
        self.loaded = True
        return self.digest()

    def relayout(self, rank: int, layout: dict) -> None:
        """An in-place P2P resize: this rank keeps its shards (its TP slice and PP stage do not
        change) and takes its rank in the new layout; it joins the new training group next."""
        new = Layout(**layout)
        if (new.tp, new.pp) != (self.layout.tp, self.layout.pp) or new.coords(rank)[::2] != self.layout.coords(self.rank)[::2]:
            raise RuntimeError(f"{self.id}: rank {self.rank} of {self.layout} cannot become rank {rank} of {new} in place")
        self.rank, self.layout, self.train_pgs = rank, new, None

    def info(self) -> dict:
        return {"rank": self.rank, "step": self.step_no, "loaded": self.loaded, "layout": vars(self.layout)}

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def ready(self) -> bool:
        return True

    def __getstate__(self) -> dict:
        """For the sim backend's saves: tensors as raw bytes (:mod:`executor.workers.rawtensor`);
        torch's own pickling is slow and would split ``params[n]`` and ``shards[n]["param"]``
        into two storages, so a loaded rank's autograd leaf and the tensor Adam updates would no
        longer be one."""
        d = dict(self.__dict__)
        d["_coord"], d["_stores"], d["train_pgs"] = None, [], None
        d["params"] = sorted(self.params)
        d["shards"] = rawtensor.encode(self.shards)
        return d

    def __setstate__(self, d: dict) -> None:
        self.__dict__.update(d)
        self.shards = rawtensor.decode(d["shards"])
        self.params = {}
        for n in d["params"]:  # the autograd leaf shares its storage with the shard Adam updates, as in __init__
            p = self.shards[n]["param"].requires_grad_(True)
            self.params[n] = p
            self.shards[n]["param"] = p.data


def average_over_dp(ranks: list[TrainerRank]) -> None:
    """In-process stand-in for the training group's all-reduce: average the gradient buffers of
    the ranks that share a pipeline stage and TP index (the sim backend, tests, benchmarks)."""
    groups: dict[tuple[int, int], list[TrainerRank]] = {}
    for t in ranks:
        pp, _, tp = t.layout.coords(t.rank)
        groups.setdefault((pp, tp), []).append(t)
    for g in groups.values():
        gs = [t.grads() for t in g]
        mean = {n: sum((x[n] for x in gs), torch.zeros_like(gs[0][n])) / len(gs) for n in gs[0]}
        for t in g:
            t.set_grads(mean)


def train_in_process(ranks: list[TrainerRank], steps: range) -> None:
    """Train a whole layout held in one process for ``steps`` (tests and benchmarks)."""
    for step in steps:
        for t in ranks:
            t.compute_grads(step)
        average_over_dp(ranks)
        for t in ranks:
            if not t.apply_step(step):
                raise RuntimeError(f"{t.id}: step {step} was refused")
