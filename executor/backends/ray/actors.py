"""The Ray actors: one that hosts any worker object, and the coordinator.

The coordinator keeps its state in a directory (``state_dir/cluster-<head node id>``): Ray
restarts it after a crash (the backend creates it with ``max_restarts=-1``) and the new process
loads every lease, the request ledger and the committed checkpoints from there.

``WorkerActor`` builds the worker (:func:`executor.workers.factory.make_worker`) in its own
process and runs methods on it by name. A rollout engine also gets a decode thread that calls
``step()`` every ``tick_s``, so requests progress in real time. The worker reaches the
coordinator through a detached named actor, every call with a deadline.
"""

from __future__ import annotations

import os
import threading
import time
from typing import Any, Optional

import ray

COORDINATOR = "rl-planner-coordinator"

# Both actors: no CPU reserved, 16 calls at once, never restarted by Ray. As a dict because ray's
# typed overloads of ray.remote list the task options only (no max_concurrency). The classes are
# made remote by a call, not a decorator: type checkers ignore what a class decorator returns.
_ACTOR_OPTIONS: dict[str, Any] = {"num_cpus": 0, "max_concurrency": 16, "max_restarts": 0}


def cluster_state_dir(state_dir: str) -> str:
    """This Ray cluster's part of ``state_dir``: ``cluster-<head node id>``. A coordinator that Ray
    restarts in the same cluster finds its state there; a coordinator of a cluster started anew
    (a new head node) starts empty instead of taking over workers and leases that died with the
    old cluster, whose state stays in its own folder."""
    head = next((n["NodeID"] for n in ray.nodes() if n.get("Alive") and "node:__internal_head__" in (n.get("Resources") or {})),
                "unknown")
    return os.path.join(state_dir, f"cluster-{head[:16]}")


class CoordinatorActor:
    """The coordinator in its own process. Saved state that cannot be read (``DamagedState``) does not
    fail the actor's creation (Ray would report a dead actor and retry the calls made to it): the
    actor lives on and answers every call with that error, reading the state again first, so once
    the folder is restored the next call finds it."""

    def __init__(self, state_dir: Optional[str] = None) -> None:
        self._dir = cluster_state_dir(state_dir) if state_dir else None
        self.c: Any = None
        self._load()

    def _load(self) -> Optional[BaseException]:
        from executor.workers.coordinator import Coordinator
        from executor.workers.coordinator_store import DamagedState

        try:
            self.c = Coordinator(state_dir=self._dir)
        except DamagedState as exc:
            return exc
        return None

    def invoke(self, method: str, *args: Any) -> Any:
        if self.c is None:
            damaged = self._load()
            if damaged is not None:
                raise damaged
        return getattr(self.c, method)(*args)

    def pid(self) -> int:
        return os.getpid()


class WorkerActor:
    def __init__(self, args: dict, epoch: int, namespace: str, fail_start: bool = False, tick_s: float = 0.01,
                 call_timeout_s: float = 30.0, visible_gpus: Optional[str] = None) -> None:
        from executor.workers.factory import make_worker

        if visible_gpus is not None:  # a co-execution member: the GPUs of its group's reservation on the node
            os.environ["CUDA_VISIBLE_DEVICES"] = visible_gpus

        coord = ray.get_actor(COORDINATOR, namespace=namespace)

        def call(method: str, *a: Any) -> Any:
            return ray.get(coord.invoke.remote(method, *a), timeout=call_timeout_s)

        self.obj = make_worker(args, epoch, call, fail_start=fail_start)
        self.role = args["role"]
        self._stop = threading.Event()
        if self.role == "rollout":
            self._thread = threading.Thread(target=self._decode, args=(tick_s,), daemon=True)
            self._thread.start()

    def _decode(self, tick_s: float) -> None:
        while not self._stop.is_set():
            try:
                self.obj.step()
            except Exception:  # noqa: BLE001 - a failed coordinator call: try again next tick
                pass
            time.sleep(tick_s)

    def invoke(self, method: str, *args: Any) -> Any:
        return getattr(self.obj, method)(*args)

    def ready(self) -> bool:
        return True

    def pid(self) -> int:
        return os.getpid()

    def node_ip(self) -> str:
        return ray.util.get_node_ip_address()

    def gpus(self) -> dict:
        """The GPUs this process may use: Ray assigned them (``num_gpus``) and set
        ``CUDA_VISIBLE_DEVICES`` to them before the worker was built."""
        ctx = ray.get_runtime_context()
        return {"cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES"), "gpu_ids": [str(g) for g in ray.get_gpu_ids()],
                "node_id": ctx.get_node_id(), "placement_group": ctx.get_placement_group_id()}

    def cuda(self) -> dict:
        """What torch in this process makes of the GPUs Ray gave it (a check for GPU machines:
        ``tests/executor/test_exec_ray_gpu.py``). Imports torch; on a CUDA device it also runs a
        small matrix product there and reads the result back."""
        import torch

        ok = torch.cuda.is_available()
        out: dict = {"available": ok, "device_count": torch.cuda.device_count() if ok else 0,
                     "cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES")}
        if ok:
            x = torch.arange(16, dtype=torch.float32, device="cuda").reshape(4, 4)
            out.update(name=torch.cuda.get_device_name(0), uuid=str(getattr(torch.cuda.get_device_properties(0), "uuid", "")),
                       matmul_sum=float((x @ x).sum().item()), device=str(x.device))
        return out


CoordinatorActorClass = ray.remote(**_ACTOR_OPTIONS)(CoordinatorActor)
WorkerActorClass = ray.remote(**_ACTOR_OPTIONS)(WorkerActor)
