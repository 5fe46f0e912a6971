"""The lease check a worker makes before it changes state it owns (see :mod:`executor.workers.protocol`:
every side effect goes through the coordinator under the worker's lease epoch)."""

from __future__ import annotations

from typing import Any, Callable


def require_lease(coord: Callable[..., Any], worker_id: str, epoch: int, action: str) -> None:
    """Raise unless the coordinator still holds ``worker_id``'s lease at ``epoch`` (a worker whose
    lease was revoked or superseded refuses to ``action``)."""
    lease = coord("lease", worker_id)
    if lease != epoch:
        raise RuntimeError(f"{worker_id}: lease epoch {lease} is not mine ({epoch}); refusing to {action}")
