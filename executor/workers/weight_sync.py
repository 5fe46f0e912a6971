"""Weight sync from a trainer to SGLang engines: a broadcast group with a lifecycle, or shared
tensors for colocated engines.

**Distributed** (SGLang's ``/init_weights_update_group`` + ``/update_weights_from_distributed``):
the sender is rank 0 of a process group whose other ranks are the engines' TP ranks (engine
``i`` with ``tp_i`` ranks joins at ``rank_offset = 1 + sum(tp_j, j < i)``; ``world = 1 + sum
tp``). A group names its members, so it is only valid for one membership: :class:`WeightSyncGroup`
keys it by ``(members, generation)`` and, whenever the key changes (an engine moved, was created
or stopped; the owner bumps the generation after every move), destroys the old group on every
engine still there (``/destroy_weights_update_group``) and on the sender, then creates a new one
under a new name. Each update broadcasts every tensor from rank 0 in the order of the
``names / dtypes / shapes`` it posts to each engine (concurrently: the engines block in the
broadcast until the sender sends). ``backend``: ``nccl`` on GPUs (SGLang's default), ``gloo``
on CPU (the tests).

**Colocated** (``/update_weights_from_tensor``): an engine on the trainer's GPUs takes the named
tensors serialised once per TP rank; SGLang's ``MultiprocessingSerializer`` passes CUDA IPC
handles, not bytes. When SGLang is not importable (CPU tests) the tensors are written as base64
of ``torch.save`` (what the stand-in reads).

The sender can be any process holding the weights: a framework's trainer rank 0 (what verl and
slime do) or, as in :mod:`executor.workers.sglang_worker`, the rollout worker itself with the
trainer states the executor hands it.
"""

from __future__ import annotations

import base64
import datetime
import io
import threading
import uuid
from typing import Any, Optional

import torch

from executor.adapters.sglang import SGLangEngine, SGLangError
from executor.workers import shardstate


def params_of(states: list[dict]) -> dict[str, torch.Tensor]:
    """Full parameters (name -> tensor) from the sharded states of a trainer's ranks (``param/``
    chunks of :mod:`executor.workers.shardstate`, any TP / PP layout)."""
    if not states or any("chunks" not in s for s in states):
        raise ValueError("weight sync needs the trainer ranks' sharded states (a 'chunks' entry each; "
                         "executor.workers.shardstate): send every rank's state()")
    def is_param(m: dict) -> bool:  # tinylm: fqn "param/<name>"; megatron: kind "param", fqn the Megatron key
        return m.get("kind", m["fqn"].split("/", 1)[0]) == "param"

    full = shardstate.assemble([{**s, "chunks": {k: m for k, m in s["chunks"].items() if is_param(m)}} for s in states])
    out = {}
    for fqn, t in full.items():
        if torch.isnan(t).any():
            raise ValueError(f"weight sync lacks part of {fqn}: send every TP / PP rank's state")
        out[fqn.removeprefix("param/")] = t
    return out


def serialize_named(named: dict[str, torch.Tensor]) -> str:
    """One TP rank's payload for ``/update_weights_from_tensor``."""
    items = list(named.items())
    try:  # SGLang's own (CUDA IPC handles for GPU tensors), where SGLang is installed
        from sglang.srt.utils import MultiprocessingSerializer  # type: ignore[import-not-found]
    except ImportError:
        buf = io.BytesIO()
        torch.save({k: v.detach().cpu().contiguous() for k, v in items}, buf)
        return base64.b64encode(buf.getvalue()).decode()
    return MultiprocessingSerializer.serialize(items, output_str=True)


class WeightSyncGroup:
    """The sender's side of one broadcast group with a set of engines (re-created on every change)."""

    def __init__(self, backend: str = "nccl", host: str = "127.0.0.1", timeout_s: float = 120.0, prefix: str = "rlp") -> None:
        self.backend, self.host, self.timeout_s, self.prefix = backend, host, timeout_s, prefix
        self.key: Optional[tuple] = None
        self.name = ""
        self.engines: list[tuple[SGLangEngine, int]] = []
        self.created = 0  # groups made so far (tests and logs)
        self._pg: Any = None
        self._store: Any = None

    def ensure(self, engines: list[tuple[SGLangEngine, int]], generation: int) -> bool:
        """The group for these engines (``(engine, its TP size)``) at this generation; True if it was (re-)created."""
        key = (tuple((e.url, tp) for e, tp in engines), generation)
        if key == self.key and self._pg is not None:
            return False
        self.close()
        self._open(engines)
        self.key = key
        return True

    def _open(self, engines: list[tuple[SGLangEngine, int]]) -> None:
        import torch.distributed as dist

        from executor.migrations import gloo

        world = 1 + sum(tp for _, tp in engines)
        name = f"{self.prefix}-{uuid.uuid4().hex[:12]}"
        store, port = gloo.host_store(self.host, world, self.timeout_s)
        errors: list[str] = []

        def join(e: SGLangEngine, offset: int) -> None:
            try:
                e.init_weights_group(self.host, port, offset, world, name, backend=self.backend)
            except SGLangError as exc:
                errors.append(str(exc))

        threads, offset = [], 1
        for e, tp in engines:
            threads.append(threading.Thread(target=join, args=(e, offset), daemon=True))
            offset += tp
        for t in threads:
            t.start()
        td = datetime.timedelta(seconds=self.timeout_s)
        pg: Any = None
        try:
            if self.backend == "gloo":
                pg = dist.ProcessGroupGloo(dist.PrefixStore(name, store), 0, world, td)
            else:
                pg = dist.ProcessGroupNCCL(dist.PrefixStore(name, store), 0, world)  # type: ignore[attr-defined,call-arg]
        finally:
            for t in threads:
                t.join(self.timeout_s + 10)
        if errors or any(t.is_alive() for t in threads):
            raise SGLangError(f"weight-sync group {name} not formed: {errors[0] if errors else 'an engine did not join in time'}")
        self._pg, self._store, self.name, self.engines = pg, store, name, list(engines)
        self.created += 1

    def broadcast(self, named: dict[str, torch.Tensor], version: str) -> None:
        if self._pg is None:
            raise SGLangError("no weight-sync group: call ensure() first")
        names = list(named)
        tensors = [named[n].detach().contiguous() for n in names]
        if self.backend == "nccl":
            tensors = [t.cuda() for t in tensors]
        dtypes = [str(t.dtype).removeprefix("torch.") for t in tensors]
        shapes = [list(t.shape) for t in tensors]
        errors: list[str] = []
        for e, _ in self.engines:  # an engine that refuses the update refuses it before anything is sent (the
            e.check_update(True)  # broadcast would otherwise wait for its ranks until the group's timeout)

        def post(e: SGLangEngine) -> None:
            try:
                e.update_weights_from_distributed(names, dtypes, shapes, self.name, version)
            except SGLangError as exc:
                errors.append(str(exc))

        threads = [threading.Thread(target=post, args=(e,), daemon=True) for e, _ in self.engines]
        for th in threads:
            th.start()
        for t in tensors:
            self._pg.broadcast(t, 0).wait()
        for th in threads:
            th.join(self.timeout_s + 10)
        if errors or any(th.is_alive() for th in threads):
            raise SGLangError(f"weight update over {self.name} failed: {errors[0] if errors else 'an engine did not answer in time'}")

    def close(self) -> None:
        """Destroy the group on every engine still there and on this side."""
        for e, _ in self.engines:
            try:
                e.destroy_weights_group(self.name)
            except SGLangError:
                pass  # a stopped or moved engine took its end of the group with it
        self._pg, self._store, self.engines, self.key = None, None, [], None
