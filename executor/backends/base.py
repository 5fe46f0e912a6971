"""What a backend does for the executor, and the errors it raises.

A backend runs workers (rollout engines, trainer ranks, services) on nodes and a coordinator
(leases, ledger, checkpoints). The executor talks to it only through this interface, so the
same controller, migrations and fault tests run on the in-process sim backend and on Ray.
Every call takes a deadline: nothing waits forever (Ray leaves unplaceable work pending).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional, Protocol

from executor.state import ClusterState, Component, Layout, Node, Worker


class WorkerLost(RuntimeError):
    """A worker died, or did not answer before its deadline (it may still be running)."""

    def __init__(self, worker_id: str, why: str) -> None:
        super().__init__(f"worker {worker_id}: {why}")
        self.worker_id, self.why = worker_id, why


class StartFailed(RuntimeError):
    """A worker could not start: unplaceable before the deadline, or it failed in start-up (OOM)."""

    def __init__(self, worker_id: str, why: str) -> None:
        super().__init__(f"worker {worker_id} did not start: {why}")
        self.worker_id, self.why = worker_id, why


@dataclass
class Deadlines:
    start_s: float = 60.0  # a worker must be placed and ready within this
    call_s: float = 30.0  # any single call to a worker or the coordinator
    reshard_s: float = 120.0  # the whole P2P copy
    stop_s: float = 15.0


class Backend(Protocol):
    name: str
    deadlines: Deadlines

    def nodes(self) -> dict[str, Node]: ...
    def coord(self, method: str, *args: Any) -> Any: ...
    def create_worker(self, args: dict, epoch: int) -> None: ...
    def worker_alive(self, worker_id: str) -> bool: ...
    def call(self, worker_id: str, method: str, *args: Any, deadline_s: Optional[float] = None) -> Any: ...
    def call_many(self, calls: list[tuple[str, str, tuple]], deadline_s: Optional[float] = None) -> list[Any]: ...
    def stop_worker(self, worker_id: str) -> str: ...
    def reshard(self, component: str, old: list[dict], new: list[dict], old_layout: Layout, new_layout: Layout,
                generation: int) -> dict: ...
    def form_training_group(self, component: str, ranks: list[dict], layout: Layout) -> None: ...
    def tick(self, n: int = 1) -> None: ...
    def leaks(self) -> list[str]: ...
    def close(self) -> None: ...


def observe(backend: Backend) -> ClusterState:
    """The observed state: the backend's nodes and the coordinator's registry of live workers."""
    st = ClusterState(nodes=dict(backend.nodes()))
    for name in backend.coord("dead_node_list"):  # declared dead by the executor (frozen, unreachable)
        if name in st.nodes:
            n = st.nodes[name]
            st.nodes[name] = Node(n.name, n.gpu_type, n.gpus, n.dram_gb, alive=False)
    gens = backend.coord("generations")
    for rec in backend.coord("records"):
        c = st.components.get(rec["component"])
        if c is None:
            c = Component(name=rec["component"], job=rec.get("job", ""), role=rec["role"], gpu_type=rec.get("gpu_type", ""),
                          layout=Layout(**rec.get("layout", {})), gpus_per_worker=rec["gpus"],
                          dram_gb_per_worker=rec["dram_gb"], migration=rec.get("migration", ""),
                          model=rec.get("model") or {}, engine=rec.get("engine") or {},
                          generation=gens.get(rec["component"], 0), group=rec.get("group", ""), reserves=rec.get("reserves", ""),
                          impl=rec.get("impl", ""))
            st.components[c.name] = c
        status = rec.get("status", "running")
        node = st.nodes.get(rec["node"])
        if status == "running" and (not backend.worker_alive(rec["id"]) or (node is not None and not node.alive)):
            status = "dead"  # (its process is gone, or its node: what it held went with the node)
        c.workers.append(Worker(id=rec["id"], component=rec["component"], node=rec["node"], gpus=rec["gpus"],
                                dram_gb=rec["dram_gb"], index=rec["index"], epoch=rec.get("epoch", 0),
                                generation=rec.get("generation", 0), status=status, share=rec.get("share", "")))
    st.parked = backend.coord("parked_components")
    st.trained = backend.coord("committed_steps")
    for c in st.components.values():
        c.generation = max([c.generation] + [w.generation for w in c.workers])
        if c.role == "trainer":
            active = [w for w in c.workers if w.generation == c.generation]
            if active:
                c.gpus_per_worker = active[0].gpus
    return st
