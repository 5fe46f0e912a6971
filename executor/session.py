"""What the ``apply`` and ``status`` commands share: opening a backend, reading a plan as a target."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Optional

from planner.errors import Problem, UserError

from executor.backends.base import Deadlines
from executor.state import ClusterState, Node

DEFAULT_DIR = Path(".rl-planner")


def journal_path(arg: Optional[str]) -> Path:
    return Path(arg) if arg else DEFAULT_DIR / "journal.db"


def sim_state_path(arg: Optional[str]) -> Path:
    return Path(arg) if arg else DEFAULT_DIR / "sim-state.pkl"


def open_backend(kind: str, *, address: Optional[str] = None, sim_state: Optional[str] = None,
                 nodes: Optional[list[Node]] = None, deadlines: Optional[Deadlines] = None):
    if kind == "sim":
        from executor.backends.sim import SimBackend

        path = sim_state_path(sim_state)
        path.parent.mkdir(parents=True, exist_ok=True)
        if not path.exists() and not nodes:
            raise UserError(Problem("--sim-state", f"no simulated cluster at {path} and the plan names no nodes",
                                    "apply a plan with a 'nodes' list first, or pass --sim-state of an existing one"))
        b = SimBackend(nodes or [], state_path=path, deadlines=deadlines, ticks_per_call=1)
        if nodes:
            known = b.nodes()
            for n in nodes:
                known[n.name] = n
            b._nodes = known
        return b
    if kind == "ray":
        from executor.backends.ray import RayBackend

        if address == "local":
            if not nodes:
                raise UserError(Problem("--address", "'local' starts a Ray cluster from the plan's nodes, and the plan has none",
                                        "add a 'nodes' list to the plan, or pass the address of a running cluster"))
            return RayBackend(local_nodes=nodes, deadlines=deadlines)
        try:
            return RayBackend(address=address, deadlines=deadlines)
        except ConnectionError as exc:
            raise UserError(Problem("--address", f"cannot connect to a Ray cluster at {address or 'auto'}: {exc}",
                                    "start one with 'ray start --head' or pass --address HOST:PORT")) from None
    raise UserError(Problem("--backend", f"unknown backend {kind!r}", "use ray or sim"))


def plan_digest(doc) -> str:
    """What identifies a plan in the journal: the digest of its canonical bytes."""
    import hashlib

    from planner import plandoc

    return hashlib.sha256(plandoc.dumps(doc).encode()).hexdigest()[:16]


def read_target(path: str, observed_or_none, scenario: Optional[str] = None) -> tuple[ClusterState, str, str]:
    """(target state, plan name, digest) from any plan document the executor understands."""
    from planner import plandoc

    import executor.target as tgt  # registers the ExecutorTarget body model
    from executor.adapters import plans

    kind = plandoc.peek_kind(path)
    if kind is not None and kind not in (tgt.KIND, "ReallocPlan", "PlacementPlan"):
        raise UserError(Problem("kind", f"the executor cannot apply a {kind}",
                                "pass an ExecutorTarget, a PlacementPlan (with --scenario) or a ReallocPlan"))
    doc = plandoc.read(path)
    digest = plan_digest(doc)
    name = Path(path).name
    if doc.kind == tgt.KIND:
        return tgt.to_state(tgt.ExecutorTarget.model_validate(doc.body)), name, digest
    if doc.kind == "ReallocPlan":
        observed = observed_or_none()
        return tgt.to_state(plans.from_realloc(doc.body, observed)), name, digest
    if doc.kind == "PlacementPlan":
        if not scenario:
            raise UserError(Problem("--scenario", "a PlacementPlan needs the scenario it was made from (jobs' DRAM, node names)",
                                    "pass --scenario SCENARIO.yaml"))
        from planner.schema import load_scenario

        return tgt.to_state(plans.from_placement(doc.body, load_scenario(scenario))), name, digest
    raise UserError(Problem("kind", f"the executor cannot apply a {doc.kind}",
                            "pass an ExecutorTarget, a PlacementPlan (with --scenario) or a ReallocPlan"))


def crash_hook_from_env():
    """``RL_PLANNER_EXECUTOR_CRASH_AT=<step kind>:<point>[:<nth>]`` makes the process die there
    (``os._exit(137)``, as on SIGKILL): the fault tests kill a real controller with it."""
    spec = os.environ.get("RL_PLANNER_EXECUTOR_CRASH_AT")
    if not spec:
        return None
    from executor.faults import Fault, FaultPlan

    parts = spec.split(":")
    kind, point, nth = parts[0], parts[1], int(parts[2]) if len(parts) > 2 else 0
    return FaultPlan([Fault(kind, point, lambda backend, step: os._exit(137), nth=nth)])
