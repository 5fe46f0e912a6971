"""Ray for the executor tests: one local multi-node cluster per test module that asks for it."""

from __future__ import annotations

import os

import pytest

# start_s is a deadline, not a wait: the coordinator actor (torch, SQLite state) can take over 30 s to start
# when both cores are busy (seen: the whole module errored at setup under two busy loops)
RAY_DEADLINES = dict(start_s=180.0, call_s=3.0, reshard_s=4.0, stop_s=5.0)


@pytest.fixture(scope="module")
def ray_backend():
    """A local Ray cluster: a head plus one Ray node per test node (GPU types as resources),
    80 MB object stores, no dashboard. Shut down at the end of the module."""
    pytest.importorskip("ray")
    from executor.backends.base import Deadlines
    from executor.backends.ray import RayBackend
    from executor.faultlib import NODES

    os.environ.setdefault("RAY_DEDUP_LOGS", "0")
    b = RayBackend(local_nodes=NODES, deadlines=Deadlines(**RAY_DEADLINES))
    yield b
    b.reset()
    b.close()
