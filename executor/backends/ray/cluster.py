"""Ray clusters for the executor: by address, or a local multi-node cluster started here.

A Ray node that the executor may place workers on advertises three custom resources:

* its GPU type, with its GPU count: ``{"H100": 8}`` (a worker asks for ``{"H100": gpus}``, so it
  can only land on a node of its type with that many GPUs free);
* its name: ``{"rlp-node-<name>": 1}`` (a worker asks for a sliver of it to be pinned there);
* its host DRAM in GB: ``{"rlp-dram-gb": 2048}`` (a worker asks for the DRAM it pins).

On a real cluster start each node with, for example,
``ray start --address=HEAD --resources='{"H100": 8, "rlp-node-h100-0": 1, "rlp-dram-gb": 2048}'``.
On machines without GPUs (tests, CI) :func:`start_local` starts one Ray node per planner node,
with CPU workers holding real tensors.
"""

from __future__ import annotations

import re
from typing import Optional

from executor.state import Node

NODE_PREFIX = "rlp-node-"
DRAM = "rlp-dram-gb"
NAMESPACE = "rl-planner"
KNOWN_GPU_TYPES = ("H100", "H800", "H20", "H200", "A100", "L40S", "B200")
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")


def node_resources(n: Node) -> dict[str, float]:
    return {n.gpu_type: float(n.gpus), f"{NODE_PREFIX}{n.name}": 1.0, DRAM: float(n.dram_gb)}


def start_local(nodes: list[Node], object_store_mb: int = 80, cpus_per_node: int = 4):
    """A local multi-node Ray cluster (``ray.cluster_utils.Cluster``): a head without GPU
    resources (coordinator) and one Ray node per planner node. Returns the Cluster."""
    import ray
    from ray.cluster_utils import Cluster

    for n in nodes:
        if not _NAME.match(n.name):
            raise ValueError(f"node name {n.name!r}: use letters, digits, '.', '_' and '-'")
    store = object_store_mb * 1024 * 1024
    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 1, "object_store_memory": store,
                                                           "include_dashboard": False, "resources": {"rlp-head": 1}})
    for n in nodes:
        cluster.add_node(num_cpus=cpus_per_node, object_store_memory=store, resources=node_resources(n))
    cluster.wait_for_nodes()
    if not ray.is_initialized():
        ray.init(address=cluster.address, namespace=NAMESPACE, include_dashboard=False, log_to_driver=False)
    return cluster


def connect(address: Optional[str], timeout_s: float = 5.0) -> None:
    """Join a running cluster. A ``host:port`` that nothing answers on fails within ``timeout_s``
    (``ray.init`` alone keeps retrying for a minute)."""
    import socket

    import ray

    if ray.is_initialized():
        return
    if address and address != "auto" and "://" not in address:
        host, _, port = address.rpartition(":")
        try:
            with socket.create_connection((host or "127.0.0.1", int(port)), timeout=timeout_s):
                pass
        except (OSError, ValueError) as exc:
            raise ConnectionError(f"nothing answers at {address} ({exc})") from None
    ray.init(address=address or "auto", namespace=NAMESPACE, log_to_driver=False)


def ray_nodes() -> dict[str, Node]:
    """Planner nodes as the Ray cluster reports them (dead Ray nodes are kept, marked dead)."""
    import ray

    out: dict[str, Node] = {}
    for rn in ray.nodes():
        res = rn.get("Resources") or {}
        names = [k[len(NODE_PREFIX):] for k in res if k.startswith(NODE_PREFIX)]
        if not names:
            continue
        gpu_types = [k for k in res if k in KNOWN_GPU_TYPES] or [k for k in res if k.isupper() and k.startswith(("H", "A", "B", "L"))]
        gpu_type = gpu_types[0] if gpu_types else "GPU"
        gpus = int(res.get(gpu_type, res.get("GPU", 0)))
        name = names[0]
        alive = bool(rn.get("Alive"))
        if name in out and out[name].alive and not alive:
            continue  # a restarted node: keep the live one
        out[name] = Node(name, gpu_type, gpus, float(res.get(DRAM, 0.0)), alive)
    return out
