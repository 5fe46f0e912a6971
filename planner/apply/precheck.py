"""The check every plan passes before the executor acts on it (``planner apply``, the daemon's apply).

A plan document is only a claim: whoever wrote it may have edited it, or made it for another
input. Before a single step runs, ``apply`` checks what ``planner validate-plan`` checks:

* **PlacementPlan**: it records the digest of the scenario it was made for, and that digest is
  the one of ``--scenario`` (a missing or different digest is refused: the plan says nothing
  about this scenario); group ids are unique; then the solver-free checker
  (:func:`formulation.placement.check.check`) recomputes everything the plan claims (every job
  placed exactly once, pools, capacity, pins, phase times, cycle times within the SLOs, host
  DRAM, costs). Any violation refuses the plan, listed by rule.
* **ExecutorTarget** (and any target): one that runs nothing, or that keeps none of the
  components the cluster runs now, would stop every worker; it is refused unless the caller
  says so explicitly (``--allow-stop-all``).

Every refusal is a :class:`~planner.errors.UserError` (exit 2) naming the field and the fix,
raised before the backend is opened for writing.
"""

from __future__ import annotations

from collections import Counter
from typing import Optional

from planner.errors import Problem, UserError

SHOWN = 20  # violations listed in a refusal (the count says how many more)
STOP_ALL_FLAG = "--allow-stop-all"


def check_placement_doc(doc, plan_path: str, scenario_path: str, mode: Optional[str] = None) -> None:
    """Refuse a PlacementPlan that is not valid for the scenario at ``scenario_path``."""
    from formulation.placement.check import check
    from formulation.placement.plan import PlacementPlan
    from planner.commands._placement import digest_problem, load_input, recorded_estimate, same_input

    mode, margin = recorded_estimate(doc, mode)  # (the plan's own estimate and margin unless --mode)
    inst, _name, digest, _sc = load_input(scenario_path, mode, command="apply", recorded_margin=margin)
    recorded = doc.scenario_digest or ""
    bad = digest_problem(recorded, plan_path, scenario_path,
                         "re-plan with `planner plan SCENARIO --out PLAN` (a plan records the digest of its input)")
    if bad is not None:
        raise UserError(bad)
    if not same_input(recorded, digest, inst):
        raise UserError(Problem("scenario_digest", f"{plan_path} was made for {doc.scenario or 'another input'} (digest "
                                                   f"{recorded}), not for {scenario_path} (digest {digest})",
                                "pass the scenario the plan was made from (--scenario), or re-plan this one"))
    plan = doc.body_as(PlacementPlan)
    assert isinstance(plan, PlacementPlan)
    dup = sorted(g for g, k in Counter(g.id for g in plan.groups).items() if k > 1)
    if dup:
        raise UserError(Problem("body.groups", f"group id(s) listed more than once: {', '.join(dup)}",
                                "give each group its own id (re-plan with `planner plan`)"))
    violations = check(inst, plan, doc.solver, slo_claims=True)
    if violations:
        raise refusal("PLAN", violations, plan_path, scenario_path, "re-plan with `planner plan`")


def refusal(where: str, violations: list, plan_path, scenario_path, fix: str) -> UserError:
    """The error for a plan that fails the solver-free check: the first :data:`SHOWN` violations,
    how many more, and ``fix`` after the pointer to ``validate-plan``."""
    shown = "; ".join(str(v) for v in violations[:SHOWN])
    more = f" (and {len(violations) - SHOWN} more)" if len(violations) > SHOWN else ""
    return UserError(Problem(where, f"{plan_path} fails the plan check against {scenario_path}: {len(violations)} violated "
                                    f"constraint(s): {shown}{more}",
                             f"run `planner validate-plan {scenario_path} {plan_path}` for the list; {fix} so that each rule holds"))


def check_not_empty(target_components: int) -> None:
    """Refuse a target that runs nothing (applying it stops every worker) before anything is opened."""
    if target_components == 0:
        raise UserError(Problem("body.components", "the target runs no component: applying it would stop every worker",
                                f"list the components to run, or pass {STOP_ALL_FLAG} to stop everything on purpose"))


def check_not_all_stopping(observed, target) -> None:
    """Refuse a target that keeps none of the components running now (all of them would stop)."""
    running = {n for n, c in observed.components.items() if not c.reserves and any(c.placement_counts().values())}
    if running and not running & set(target.components):
        names = ", ".join(sorted(running)[:10]) + (" ..." if len(running) > 10 else "")
        raise UserError(Problem("body.components", f"the target keeps none of the {len(running)} running component(s) ({names}): "
                                                   "applying it would stop every worker",
                                f"check that this is the plan you meant, or pass {STOP_ALL_FLAG} to stop them on purpose"))


# The checker's rules that refuse an apply in the daemon (planner.daemon.cycle): the placement is
# not what can run. The claims (phase-times, cycle-time, cost) are recomputed by the daemon's own
# evaluation, and an SLO it cannot keep is reported by the loop, not a reason to leave jobs unplaced.
BLOCKING = frozenset({"placed-once", "group-id", "unknown-job", "pool-nodes", "node-exclusive", "capacity", "pins", "job-pool", "dram"})


def blocking(violations: list) -> list:
    """The violations (anything with a ``rule``) that refuse an apply."""
    return [v for v in violations if v.rule in BLOCKING]
