"""Tensors as raw bytes (the sim backend's saves, written by the code-free :mod:`executor.safestate`).

Saving a torch tensor through ``torch.save`` costs about 50 us a tensor, which a simulated cluster
of hundreds of trainer ranks (and the checkpoints of parked ones) pays on every save; and tensors
that share one storage come back as separate ones. :class:`Raw` holds a tensor's shape, dtype and
bytes: lossless, and as cheap to save as the bytes themselves (never pickled: safestate writes
the bytes raw and rebuilds them with ``numpy.frombuffer``).
Nothing here imports torch unless a tensor is actually encoded or decoded.
"""

from __future__ import annotations

import sys
from typing import Any


class Raw:
    __slots__ = ("shape", "dtype", "data")

    def __init__(self, shape: tuple, dtype: str, data: bytes) -> None:
        self.shape, self.dtype, self.data = shape, dtype, data

    def __getstate__(self) -> tuple:
        return self.shape, self.dtype, self.data

    def __setstate__(self, st: tuple) -> None:
        self.shape, self.dtype, self.data = st

    @classmethod
    def of(cls, t: Any) -> "Raw":
        a = t.detach().contiguous().numpy()
        return cls(tuple(a.shape), a.dtype.str, a.tobytes())

    def tensor(self) -> Any:
        """A new, writable tensor with the same bytes."""
        import numpy as np
        import torch

        return torch.from_numpy(np.frombuffer(self.data, dtype=np.dtype(self.dtype)).reshape(self.shape).copy())


def _is_tensor(x: Any) -> bool:
    torch = sys.modules.get("torch")
    return torch is not None and isinstance(x, torch.Tensor)


def encode(obj: Any) -> Any:
    """``obj`` with every tensor inside dicts, lists and tuples replaced by its :class:`Raw`."""
    if _is_tensor(obj):
        return Raw.of(obj)
    if isinstance(obj, dict):
        return {k: encode(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return type(obj)(encode(v) for v in obj)
    return obj


def decode(obj: Any) -> Any:
    """The inverse of :func:`encode`."""
    if isinstance(obj, Raw):
        return obj.tensor()
    if isinstance(obj, dict):
        return {k: decode(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return type(obj)(decode(v) for v in obj)
    return obj
