"""The worker protocol: the methods the executor's migrations and backends call on workers.

A framework supplies its own rollout engines and trainer ranks by implementing these
``typing.Protocol`` classes and registering a :class:`~executor.workers.registry.Impl`
(``executor.workers.registry``); a component picks its implementation with ``impl:`` in the
target. Three implementations ship: ``toy`` (the original stand-ins: token function, 4-layer
MLP trainer), ``tinylm`` (a real transformer decoded with a KV cache and trained with AdamW on
CPU; :mod:`executor.workers.lm_engine`, :mod:`executor.workers.lm_trainer`), and the SGLang /
Megatron adapters' building blocks (:mod:`executor.adapters`).

Rules every implementation keeps (the executor relies on them; docs/integration.md explains why):

* **Fencing.** A worker is built with ``(worker_id, epoch, coord)``; every side effect goes
  through ``coord(method, worker_id, epoch, ...)`` and is dropped if refused: ``progress`` /
  ``complete`` (rollout), ``authorize`` then ``commit_step`` (trainer, commit before the
  optimizer steps), ``put_checkpoint`` (reboot). ``set_epoch`` is the only way a new lease
  reaches the worker.
* **Idempotence.** ``admit`` ignores request ids it has already (or has finished); a save
  rewritten with the same content is harmless; a create of an existing worker id is adopted.
* **Plain state.** What a worker saves or exports is a plain dict (tensors + JSON-able
  metadata), so any store can hold it.
* Methods are called from one controller thread; a rollout engine may decode on its own thread
  (it must lock its queues).

Requests are dicts: ``id``, ``prompt`` (token ids), ``seed``, ``target_len``, optional
``sampling`` (``temperature``; carried across every move), ``output`` (the partial output a moved
request resumes from), ``turns_done`` and ``age`` (handoff priority).
"""

from __future__ import annotations

from typing import Any, Protocol, runtime_checkable


@runtime_checkable
class Worker(Protocol):
    """What every worker has."""

    id: str
    epoch: int

    def ready(self) -> bool:
        """Cheap liveness probe (a backend's call deadline applies)."""

    def set_epoch(self, epoch: int) -> None:
        """The lease the worker acts under from now on (after a switch re-grants it)."""


@runtime_checkable
class RolloutWorker(Worker, Protocol):
    """An inference engine. Workload migration: ``drain`` -> ``export`` -> (ledger moves
    ownership) -> ``admit`` on the kept engines -> ``release`` on the drained ones."""

    def admit(self, requests: list[dict]) -> int:
        """Queue requests (new, or handed over with ``output`` to resume from); idempotent by id.
        Returns how many were new."""

    def step(self) -> int:
        """One decode iteration (the sim backend's clock; a real engine decodes on its own)."""

    def drain(self) -> dict:
        """Stop admitting and decoding; in-flight requests stay, frozen where they are. Returns ``load()``."""

    def undrain(self) -> None:
        """Serve again (a rolled-back drain)."""

    def export(self) -> list[dict]:
        """Every unfinished request with its partial ``output`` (the resume point)."""

    def release(self, request_ids: list[str]) -> None:
        """Forget requests that now belong to another engine."""

    def score(self, prompts: list[list[int]]) -> list[int]:
        """Cached prompt prefix (tokens) per prompt: the handoff's cache-affinity signal."""

    def load(self) -> dict:
        """At least ``pending`` and ``running`` counts."""

    def save_state(self) -> dict:
        """Reboot: ``{"requests": export()}``."""

    def update_weights(self, states: list[dict], version: int) -> int:
        """Weight sync: the trainer ranks' states (``param/`` chunks, any TP layout); returns the version."""


@runtime_checkable
class TrainerWorker(Worker, Protocol):
    """A trainer rank of a TP/PP/DP layout. P2P migration: create every new rank empty ->
    reshard (``save_shards`` on the old ranks, ``load_shards`` on the new, or the backend's
    packed copy for ``p2p="wire"`` implementations) -> ``finish_migration`` -> switch (kept
    ranks of an in-place DP resize ``relayout``). Reboot: ``save_state`` -> stop -> create ->
    ``restore_from``."""

    def train_step(self, step: int) -> bool:
        """``authorize`` -> gradients (training group) -> ``commit_step`` -> optimizer step."""

    def join_training_group(self, host: str, ports: dict, timeout_s: float = 30.0) -> None:
        """Join the collectives of the current layout (the backend hosts the stores)."""

    def state(self) -> dict:
        """A copy of the rank's state: ``{"rank", "step", ...}`` plus tensors (plain dict)."""

    def load_state(self, blob: dict) -> None: ...

    def save_state(self, key: str) -> bool:
        """Reboot: ``coord("put_checkpoint", id, epoch, f"{key}/rank{rank}", state())``."""

    def restore_from(self, key: str, old_layout: dict) -> dict:
        """Fill this rank from the checkpoint of ``old_layout``'s ranks (reshard locally); a digest."""

    def finish_migration(self, step: int) -> dict:
        """New rank after the reshard: take the old ranks' step count; a digest of the state."""

    def relayout(self, rank: int, layout: dict) -> None:
        """In-place DP resize: take rank ``rank`` of ``layout`` keeping the shards held."""

    def info(self) -> dict:
        """``{"rank", "step", "loaded", "layout"}``."""


@runtime_checkable
class CheckpointReshard(Protocol):
    """Trainer ranks of a ``p2p="dcp"`` implementation: the P2P copy goes through checkpoint
    files (torch.distributed.checkpoint), written by DP replica 0 of the old layout and read by
    every rank of the new one, instead of the backend's packed gloo copy."""

    def save_shards(self, directory: str) -> int:
        """Old rank (under its lease): write its shards; returns the bytes written."""

    def load_shards(self, directories: list[str]) -> dict:
        """New rank: load the parts it owns from the old ranks' checkpoints; ``{"bytes": n}``."""


@runtime_checkable
class ServiceWorker(Worker, Protocol):
    """Any other component with state to carry over a reboot."""

    def state(self) -> dict: ...

    def save_state(self, key: str) -> bool: ...

    def load_state(self, blob: dict) -> None: ...


def missing_methods(obj: Any, role: str) -> list[str]:
    """The protocol methods ``obj`` lacks for ``role`` (registry checks, tests)."""
    proto = {"rollout": RolloutWorker, "trainer": TrainerWorker, "service": ServiceWorker}[role]
    names = [n for n in dir(proto) if not n.startswith("_") and callable(getattr(proto, n, None))]
    return sorted(n for n in names if not callable(getattr(obj, n, None)))
