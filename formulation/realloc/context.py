"""What a decision needs besides the snapshot, as plain numbers.

The instance compiler (:mod:`planner.instances.realloc`) fills it from a scenario (model sizes,
GPU catalogue, node groups), the online predictor's curves and :mod:`estimators.comm`'s link
figures; a simulator can fill it from its own model. Nothing here calls an estimator.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

from formulation.realloc.instance import Curve, Pool


@dataclass(frozen=True)
class Links:
    """Effective one-direction bandwidth per GPU (GB/s) and the fixed costs of a migration."""

    nvlink_gb_per_s: dict  # gpu type -> inside a node
    nic_gb_per_s: dict  # gpu type -> across nodes in one cluster
    inter_cluster_gb_per_s: Optional[float] = None  # between clusters; None: no direct path (stateful moves reboot)
    storage_gb_per_s: float = 3.0  # per node, checkpoint write/read (Reboot)
    restart_s: float = 20.0  # start an engine or a rank (CUDA context, weights mapped, graphs captured)
    group_rebuild_s: float = 2.0  # NCCL communicator rebuild
    handoff_s: float = 0.5  # Workload migration: abort, re-queue and re-admit the moved requests

    def bandwidth(self, src: Pool, dst: Pool) -> Optional[float]:
        """GB/s per GPU stream from ``src`` to ``dst``; None when no direct path exists."""
        if src.name == dst.name:
            return float(self.nvlink_gb_per_s.get(src.gpu_type, 450.0))
        nic = min(self.nic_gb_per_s.get(src.gpu_type, 50.0), self.nic_gb_per_s.get(dst.gpu_type, 50.0))
        if src.cluster == dst.cluster:
            return float(nic)
        if self.inter_cluster_gb_per_s is None:
            return None
        return float(min(nic, self.inter_cluster_gb_per_s))


@dataclass(frozen=True)
class ComponentContext:
    curves: dict  # gpu type -> Curve in pipeline units per second
    unit_gpus: int = 1  # GPUs per engine (TP) or per trainer replica (TP x PP); kept inside one node
    allowed_types: Optional[tuple] = None  # GPU types it may run on (None: every type with a curve)
    weight_bytes: float = 0.0  # bf16 weights a new engine or replica loads
    sharded_state_bytes: float = 0.0  # fp32 master weights and optimizer moments, sharded over DP (stateful)
    kv_bytes_per_token: float = 0.0  # KV-cache bytes per cached token (Workload migration moves caches)
    p2p: bool = True  # stateful: the framework reshards live (else Reboot)
    curve_source: str = ""  # where the curves came from (predictor, scenario, snapshot)
    pipeline: bool = True  # False: its work this iteration is done; it only holds GPUs (a pure donor)
    parked_start_s: Optional[float] = None  # a new engine wakes one parked on its GPUs (sleep mode, weights in host
    # DRAM) in this many seconds; None: it starts cold (Links.restart_s + weights from a peer engine)

    def types(self) -> list[str]:
        ts = sorted(self.curves)
        return [t for t in ts if self.allowed_types is None or t in self.allowed_types]


@dataclass
class ReallocContext:
    pools: list  # Pool: every node (capacity, type, cluster)
    components: dict  # component name -> ComponentContext
    links: Links
    horizon_s: Optional[float] = None  # seconds left in the iteration (None: 1 / predicted throughput when
    # curves are normalised by remaining work, i.e. the model's own prediction of the time left)
    notes: list = field(default_factory=list)
    unit: str = "tokens/s"  # of the curves: "tokens/s", or "1/s" (fraction of the remaining work per second)


def pools_from_snapshot(snap, gpus_per_node: Optional[dict] = None, clusters: Optional[dict] = None) -> list[Pool]:
    """One pool per node: the snapshot's declared nodes, else the nodes its workers sit on.

    A declared node without a ``cluster`` field is in ``clusters[type]`` where given (the scenario's
    fabric for its GPU type). Without declared nodes a node's capacity is ``gpus_per_node[type]`` when given (free GPUs
    become visible), else the GPUs its workers hold (no free GPUs known).
    """
    if snap.nodes is not None:  # a node that states no cluster is in its GPU type's (``clusters``), else 'default'
        return [Pool(n.node, n.gpu_type, n.gpus, n.cluster if "cluster" in n.model_fields_set else (clusters or {}).get(n.gpu_type, n.cluster))
                for n in sorted(snap.nodes, key=lambda n: n.node)]
    used: dict[str, int] = {}
    types: dict[str, str] = {}
    for w in snap.workers:
        used[w.node] = used.get(w.node, 0) + w.gpus
        types[w.node] = w.gpu_type
    out = []
    for node in sorted(used):
        t = types[node]
        cap = max(used[node], int((gpus_per_node or {}).get(t, 0)))
        out.append(Pool(node, t, cap, (clusters or {}).get(t, "default")))
    return out


__all__ = ["ComponentContext", "Curve", "Links", "Pool", "ReallocContext", "pools_from_snapshot"]
