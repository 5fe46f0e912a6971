"""The Ray backend: workers as detached Ray actors pinned to nodes by custom resources.

* :mod:`.cluster`: connect to a running cluster by address, or start a local multi-node one;
  how nodes advertise their GPU type (``H100``, ``H20``, ... as Ray resources) and their name.
* :mod:`.actors`: the actor that hosts a worker (engine, trainer rank, service) and the
  coordinator actor.
* :mod:`.backend`: :class:`RayBackend`, the executor's interface on top of both.
"""

from executor.backends.ray.backend import RayBackend

__all__ = ["RayBackend"]
