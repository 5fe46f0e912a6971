"""Shared test helpers: build observed states, replay steps independently of the diff."""

from __future__ import annotations

from executor.diff import _new_workers
from executor.state import ClusterState, Component, Node
from executor.steps import Step


def observed(nodes: list[Node], comps: list[Component]) -> ClusterState:
    """An observed state with every component's placement running as generation-1 workers."""
    st = ClusterState(nodes={n.name: n for n in nodes})
    for c in comps:
        ws = _new_workers(c, 1)
        c.workers = [w.__class__(**{**w.__dict__, "status": "running"}) for w in ws]
        c.generation, c.placement = 1, {}
        st.components[c.name] = c
    return st


def replay_capacity(obs: ClusterState, steps: list[Step]) -> list[str]:
    """Walk the steps from the observed usage; every node's GPUs and DRAM must fit after each."""
    used = {n: list(obs.used(n)) for n in obs.nodes}
    bad = []
    for s in steps:
        if s.kind not in ("create", "stop"):
            continue
        w = s.args["worker"]
        sign = 1 if s.kind == "create" else -1
        used[w["node"]][0] += sign * w["gpus"]
        used[w["node"]][1] += sign * w["dram_gb"]
        n = obs.nodes[w["node"]]
        if used[w["node"]][0] > n.gpus or used[w["node"]][1] > n.dram_gb + 1e-9:
            bad.append(f"after {s.id}: node {n.name} holds {used[w['node']][0]} GPUs / {used[w['node']][1]} GB")
    return bad


def create_before_destroy(steps: list[Step]) -> list[str]:
    """In every workload and P2P unit, all creates come before the first stop."""
    bad = []
    units: dict[str, list[Step]] = {}
    for s in steps:
        units.setdefault(s.unit, []).append(s)
    for u, ss in units.items():
        if not u.endswith(("/workload", "/p2p")):
            continue
        first_stop = min((i for i, s in enumerate(ss) if s.kind == "stop"), default=len(ss))
        last_create = max((i for i, s in enumerate(ss) if s.kind == "create"), default=-1)
        if last_create > first_stop:
            bad.append(f"{u}: a create comes after a stop")
    return bad


def write_target(path, body: dict):
    """``body`` as an ExecutorTarget document at ``path`` (a hand-made target, as ``planner apply`` reads one)."""
    import yaml

    path.write_text(yaml.safe_dump({"kind": "ExecutorTarget", "version": 1, "solver": {"backend": "manual", "status": "feasible"},
                                    "body": body}))
    return path
