"""Process groups over torch.distributed's gloo backend, built without the global default group.

Each group is a ``ProcessGroupGloo`` on its own ``TCPStore`` (hosted by the group's rank 0 on a
free port), so a worker can be in its training group and a separate migration group at the same
time, and a migration group can include new ranks that are in no training group yet. Every
operation has a timeout: a peer that died or froze fails the operation instead of hanging it.
"""

from __future__ import annotations

import datetime
import socket

import torch
import torch.distributed as dist


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def local_ip() -> str:
    """This node's address as the Ray cluster knows it (loopback outside Ray)."""
    try:
        import ray

        if ray.is_initialized():
            return ray.util.get_node_ip_address()
    except Exception:  # noqa: BLE001 - outside a Ray worker
        pass
    return "127.0.0.1"


def host_store(host: str, world: int, timeout_s: float) -> tuple[dist.TCPStore, int]:
    store = dist.TCPStore(host, 0, world, True, timeout=datetime.timedelta(seconds=timeout_s), wait_for_workers=False)
    return store, store.port


def host_stores(keys: list[str], world: int, timeout_s: float, keep: list) -> tuple[str, dict[str, int]]:
    """One store per key on this node for groups of ``world`` ranks: (this node's address, key -> port).

    The stores are appended to ``keep``: a store serves its group only while its host holds it."""
    host, ports = local_ip(), {}
    for k in keys:
        store, ports[k] = host_store(host, world, timeout_s)
        keep.append(store)
    return host, ports


def join(host: str, port: int, rank: int, world: int, prefix: str, timeout_s: float, store=None):
    td = datetime.timedelta(seconds=timeout_s)
    if store is None:
        store = dist.TCPStore(host, port, world, False, timeout=td)
    pg = dist.ProcessGroupGloo(dist.PrefixStore(prefix, store), rank, world, td)
    return pg, store


def exchange(pg, sends: list[tuple[int, torch.Tensor]], recvs: list[tuple[int, torch.Tensor]], tag: int = 0) -> None:
    """Post every send and receive, then wait for all (no ordering deadlock)."""
    works = [pg.recv([buf], src, tag) for src, buf in recvs]
    works += [pg.send([buf], dst, tag) for dst, buf in sends]
    for w in works:
        w.wait()
