"""The Ray backend: workers as detached Ray actors pinned to nodes by custom resources.

* :mod:`.cluster`: connect to a running cluster by address, or start a local multi-node one;
  how nodes advertise their GPU type (``H100``, ``H20``, ... as Ray resources) and their name.
* :mod:`.actors`: the actor that hosts a worker (engine, trainer rank, service) and the
  coordinator actor.
* :mod:`.backend`: :class:`RayBackend`, the executor's interface on top of both.

``RayBackend`` is imported on first use, not with the package: every worker process Ray starts
imports :mod:`.actors` (and so this package), and the backend's imports (torch, for the P2P
reshard plan) would cost each rollout engine and service about a second of start-up that only
trainer ranks need (their workers import torch themselves).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from executor.backends.ray.backend import RayBackend

__all__ = ["RayBackend"]


def __getattr__(name: str) -> Any:
    if name == "RayBackend":
        from executor.backends.ray.backend import RayBackend

        return RayBackend
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
