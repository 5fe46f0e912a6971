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
        from pydantic import ValidationError

        from planner.apply.placement import from_placement
        from planner.schema import load_scenario

        try:
            target = from_placement(doc.body, load_scenario(scenario))
        except ValidationError as exc:  # the plan's pools or pins make a target the executor cannot run
            raise UserError(_target_problems(exc, path, scenario)) from None
        return tgt.to_state(target), name, digest
    raise UserError(Problem("kind", f"the executor cannot apply a {doc.kind}",
                            "pass an ExecutorTarget, a PlacementPlan (with --scenario) or a ReallocPlan"))


def _target_problems(exc, path: str, scenario: str) -> list[Problem]:
    """A PlacementPlan that gives an executor target the executor's schema refuses (the plan check
    passes only plans whose pools are the scenario's, so an edited or foreign plan): each refused
    field of the target, and the fix."""
    out = []
    for err in exc.errors(include_url=False)[:10]:
        loc = ".".join(str(x) for x in err["loc"])
        bad = err.get("input")
        shown = f" (got {bad!r:.60})" if bad is not None and not isinstance(bad, (dict, list)) else ""
        out.append(Problem(f"PLAN (executor target {loc})",
                           f"{path} gives a target the executor refuses: {err['msg'].removeprefix('Value error, ')}{shown}",
                           f"check it with `planner validate-plan {scenario} {path}` (the pools' gpus_per_node and the "
                           "members' pins), or re-plan with `planner plan`"))
    return out
