"""Any plan document the executor applies, read as its target state; and a plan's digest."""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Callable, Optional

from executor.state import ClusterState

from planner import plandoc
from planner.errors import Problem, UserError


def plan_digest(doc) -> str:
    """What identifies a plan in the journal: the digest of its canonical bytes."""
    return hashlib.sha256(plandoc.dumps(doc).encode()).hexdigest()[:16]


APPLIES = ("ExecutorTarget", "ReallocPlan", "PlacementPlan")


def check_kind(path: str) -> None:
    """Refuse a plan kind the executor cannot apply before its body is validated (a CapacityPlan's
    missing fields are beside the point)."""
    from planner.dockind import KINDS, detect, describe

    kind = detect(path)
    if kind is not None and kind not in APPLIES:
        takes = KINDS.get(kind, ("", ""))[1]
        raise UserError(Problem("kind", f"{path} is {describe(kind)}: the executor cannot apply a {kind}",
                                "pass an ExecutorTarget, a PlacementPlan (with --scenario) or a ReallocPlan"
                                + (f" ({takes})" if takes else "")))


def read_target(path: str, observed: Callable[[], ClusterState], scenario: Optional[str] = None) -> tuple[ClusterState, str, str]:
    """(target state, plan name, digest) from an ``ExecutorTarget``, a ``ReallocPlan`` (against what
    ``observed()`` reports) or a ``PlacementPlan`` (with the scenario it was made from)."""
    import executor.target as tgt
    from executor.adapters.plans import from_realloc

    check_kind(path)
    doc = plandoc.read(path)
    digest = plan_digest(doc)
    name = Path(path).name
    if doc.kind == tgt.KIND:
        return tgt.to_state(tgt.ExecutorTarget.model_validate(doc.body)), name, digest
    if doc.kind == "ReallocPlan":
        return tgt.to_state(from_realloc(doc.body, observed())), name, digest
    if doc.kind == "PlacementPlan":
        if not scenario:
            raise UserError(Problem("--scenario", "a PlacementPlan needs the scenario it was made from (jobs' layouts and DRAM, "
                                                  "node names)", "pass --scenario SCENARIO.yaml"))
        from planner.apply.placement import from_placement
        from planner.schema import load_scenario

        return tgt.to_state(from_placement(doc.body, load_scenario(scenario))), name, digest
    raise UserError(Problem("kind", f"the executor cannot apply a {doc.kind}",
                            "pass an ExecutorTarget, a PlacementPlan (with --scenario) or a ReallocPlan"))
