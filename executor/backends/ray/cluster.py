"""Ray clusters for the executor: by address, or a local multi-node cluster started here.

A Ray node that the executor may place workers on advertises, with Ray's own GPU semantics:

* its GPUs as Ray's ``GPU`` resource (``num_gpus``; Ray detects them on a GPU node) and their
  type as Ray's accelerator resource ``accelerator_type:<type>`` (Ray sets it itself from the
  detected GPUs, e.g. ``accelerator_type:H100``). A worker asks for ``num_gpus=g,
  accelerator_type=<type>``: Ray gives it ``g`` GPUs of its own on a node of that type, sets
  ``CUDA_VISIBLE_DEVICES`` to them and answers ``ray.get_gpu_ids()`` with them, so a worker
  never sees (or defaults to ``cuda:0`` of) another worker's GPUs;
* its name as a custom resource ``{"rlp-node-<name>": 1}`` (a worker asks for a sliver of it to
  be pinned there; placement-group bundles carry the same sliver) and as a node label
  ``rlp-node=<name>``;
* its host DRAM in GB: ``{"rlp-dram-gb": 2048}`` (a worker asks for the DRAM it pins).

On a real cluster start each node with, for example,
``ray start --address=HEAD --num-gpus=8 --resources='{"rlp-node-h100-0": 1, "rlp-dram-gb": 2048}'
--labels='rlp-node=h100-0'`` (Ray adds ``accelerator_type:H100`` itself; on a node where it does
not, add it to ``--resources``). Nodes started the older way, with the GPU type as a custom
resource (``{"H100": 8}``), are still read, but their workers then get no GPUs of their own.
On machines without GPUs (tests, CI) :func:`start_local` starts one Ray node per planner node
with *fake* GPUs (``num_gpus`` on a CPU machine): Ray still assigns them, sets
``CUDA_VISIBLE_DEVICES`` and keeps them disjoint, so the GPU semantics are tested for real.
"""

from __future__ import annotations

import re
from typing import Optional

from executor.state import Node

NODE_PREFIX = "rlp-node-"
DRAM = "rlp-dram-gb"
NAMESPACE = "rl-planner"
ACCEL = "accelerator_type:"  # Ray's accelerator resource prefix (ray.util.accelerators)
NODE_LABEL = "rlp-node"
KNOWN_GPU_TYPES = ("H100", "H800", "H20", "H200", "A100", "L40S", "B200")
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")
#: Ray keeps resource quantities in units of 1e-4 and checks an actor's request against its placement
#: group bundle as floats: a worker asking 3.087428608 GB of DRAM did not fit the bundle of 3.0874 it
#: was reserved (the daemon's every job with resident state failed to start under --backend ray)
QUANTUM_DIGITS = 4


def quantity(x: float) -> float:
    """A resource quantity as Ray holds it (4 decimals, at least one unit): what a worker asks for and
    what its reservation's bundle sums, so the two compare equal."""
    return max(round(float(x), QUANTUM_DIGITS), 10.0 ** -QUANTUM_DIGITS)


def node_resources(n: Node) -> dict[str, float]:
    """The custom resources of a node (its GPUs are ``num_gpus``, not listed here)."""
    return {f"{ACCEL}{n.gpu_type}": 1.0, f"{NODE_PREFIX}{n.name}": 1.0, DRAM: float(n.dram_gb)}


def start_local(nodes: list[Node], object_store_mb: int = 80, cpus_per_node: int = 4, temp_dir: Optional[str] = None):
    """A local multi-node Ray cluster (``ray.cluster_utils.Cluster``): a head without GPU
    resources (coordinator) and one Ray node per planner node, with ``n.gpus`` fake GPUs of type
    ``n.gpu_type`` (Ray's accelerator resource) and the node label. Returns the Cluster."""
    import ray
    from ray.cluster_utils import Cluster

    for n in nodes:
        if not _NAME.match(n.name):
            raise ValueError(f"node name {n.name!r}: use letters, digits, '.', '_' and '-'")
    store = object_store_mb * 1024 * 1024
    head = {"num_cpus": 1, "object_store_memory": store, "include_dashboard": False, "resources": {"rlp-head": 1}}
    if temp_dir:
        head["temp_dir"] = temp_dir
    cluster = Cluster(initialize_head=True, head_node_args=head)
    for n in nodes:
        cluster.add_node(num_cpus=cpus_per_node, num_gpus=n.gpus, object_store_memory=store, resources=node_resources(n),
                         labels={NODE_LABEL: n.name})
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
        except ValueError:
            raise ConnectionError(f"{address!r} is not HOST:PORT (the port a number)") from None
        except OSError as exc:
            raise ConnectionError(f"nothing answers at {address} ({exc})") from None
    try:
        ray.init(address=address or "auto", namespace=NAMESPACE, log_to_driver=False)
    except ValueError as exc:  # e.g. a ray:// address without the Ray Client package: one line, not an internal error
        raise ConnectionError(f"Ray refused the address: {exc}") from None


def ray_nodes() -> dict[str, Node]:
    """Planner nodes as the Ray cluster reports them (dead Ray nodes are kept, marked dead).

    Ray reports a dead node with no resources at all: its name then comes from its ``rlp-node``
    label (which it keeps), so a node that died is *dead* here, not unknown; without that, ranks on
    it were not seen to sit on a dead node and a P2P copy from them was planned (and failed)
    instead of refused. Its GPUs and DRAM are unknown once it is dead (0)."""
    import ray

    out: dict[str, Node] = {}
    for rn in ray.nodes():
        res = rn.get("Resources") or {}
        alive = bool(rn.get("Alive"))
        names = [k[len(NODE_PREFIX):] for k in res if k.startswith(NODE_PREFIX)]
        if not names and not alive and (rn.get("Labels") or {}).get(NODE_LABEL):
            names = [str(rn["Labels"][NODE_LABEL])]
        if not names:
            continue
        gpu_type, gpus = gpu_type_of(res) if res else ("", 0)
        name = names[0]
        if name in out and out[name].alive and not alive:
            continue  # a restarted node: keep the live one
        out[name] = Node(name, gpu_type, gpus, float(res.get(DRAM, 0.0)), alive)
    return out


def gpu_type_of(res: dict) -> tuple[str, int]:
    """(GPU type, GPU count) of a Ray node's resources: Ray's ``GPU`` and ``accelerator_type:<type>``,
    else (older nodes) a custom resource named for the type."""
    accel = sorted(k[len(ACCEL):] for k in res if k.startswith(ACCEL))
    if accel:
        return accel[0], int(res.get("GPU", 0))
    legacy = [k for k in res if k in KNOWN_GPU_TYPES] or [k for k in res if k.isupper() and k.startswith(("H", "A", "B", "L"))]
    if legacy:
        return legacy[0], int(res[legacy[0]])
    return "GPU", int(res.get("GPU", 0))


def uses_ray_gpus(res: dict) -> bool:
    """Whether a node's GPUs are Ray GPUs (workers then ask for ``num_gpus``) or a legacy custom resource."""
    return any(k.startswith(ACCEL) for k in res) or (res.get("GPU", 0) > 0 and not any(k in KNOWN_GPU_TYPES for k in res))
