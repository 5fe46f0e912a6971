"""Ray for the executor tests: one local multi-node cluster per test module that asks for it."""

from __future__ import annotations

import contextlib
import os
from typing import Iterator

import pytest

# Every deadline here is reached only on failure (a wait on an event: a worker placed and ready, a call
# answered, a copy done, an actor gone), so each is generous: with both cores busy the coordinator actor took
# over 30 s to start, and a 3 s call deadline failed calls to live workers. Only a test that must *detect* a
# frozen process narrows the call deadlines, and only while the process is frozen (``short_deadlines``).
RAY_DEADLINES = dict(start_s=180.0, call_s=120.0, reshard_s=120.0, stop_s=60.0)
# The frozen-node window: a call to a SIGSTOPped worker never returns, so the call deadline is what declares
# it dead; long enough for a live worker on a loaded machine to answer (its calls take milliseconds idle).
FROZEN_DEADLINES = dict(call_s=10.0, reshard_s=10.0, stop_s=10.0)


@contextlib.contextmanager
def short_deadlines(backend, **deadlines: float) -> Iterator[None]:
    """Narrow some of ``backend.deadlines`` for a block; restored afterwards, also on failure."""
    saved = {k: getattr(backend.deadlines, k) for k in deadlines}
    for k, v in deadlines.items():
        setattr(backend.deadlines, k, v)
    try:
        yield
    finally:
        for k, v in saved.items():
            setattr(backend.deadlines, k, v)


@pytest.fixture(scope="module")
def ray_backend():
    """A local Ray cluster: a head plus one Ray node per test node (GPU types as resources),
    80 MB object stores, no dashboard. Shut down at the end of the module, also when a test or
    the last reset fails."""
    pytest.importorskip("ray")
    from executor.backends.base import Deadlines
    from executor.backends.ray import RayBackend
    from executor.faultlib import NODES

    os.environ.setdefault("RAY_DEDUP_LOGS", "0")
    b = RayBackend(local_nodes=NODES, deadlines=Deadlines(**RAY_DEADLINES))
    try:
        yield b
        b.reset()
    finally:
        b.close()
