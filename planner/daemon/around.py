"""Re-optimising around stuck jobs: the fallback of a re-optimisation that is not valid.

A re-optimisation (periodic, after departures, or a drift repair) is valid only if the checker
finds its plan holding every job within its SLO. When one job's SLO cannot be met at its drifted
estimates by any plan the solver finds, the whole re-optimised plan fails on that job, and the
savings it found for the others would never be made, every cycle, for as long as the job runs.
So, when it fails:

1. **stuck jobs**: those the re-optimised plan leaves out, and those the checker's violations of
   it name (a violation naming a group names its members). Nothing is tried when a violation names
   neither (a node's DRAM, a pool type's capacity: not one job's miss), or when the stuck jobs'
   current groups are every group (nothing is left to re-optimise).
2. their **current groups are kept as they are** (ids, pools, nodes, members, co-members too); the
   other jobs are re-optimised on the nodes those groups leave (``placer.reoptimise(...,
   keep_groups=...)``), and the two are merged.
3. the merged plan is **valid** when it holds every job of the current plan, the kept groups
   unchanged, and every violation the checker finds in it is one the current plan already has in a
   kept group (the same rule at the same job or group): the stuck job's known miss stays where it
   is, and nothing gets worse.

The caller treats a valid merged plan as it would a valid re-optimisation (the gate judges an
optional one); the decision's reasons start with :meth:`Around.headline`.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Optional

from planner.daemon.ports import Group, Placement, PlacementPlanner, PlanningContext, Reoptimisation, Violation


@dataclass
class Around:
    stuck: list[str]  # the jobs no plan found places within SLO
    kept: list[Group]  # their current groups, kept as they are
    result: Reoptimisation  # the placer's re-optimisation around them (the merged plan)
    placement: Placement  # the merged plan as the checker evaluated it
    known: list[Violation] = field(default_factory=list)  # the kept groups' violations, in the current plan and the merged
    outside: list[Violation] = field(default_factory=list)  # the current plan's violations outside the kept groups
    problems: list[str] = field(default_factory=list)  # why the merged plan is not valid (empty: valid)
    solve_s: float = 0.0

    @property
    def valid(self) -> bool:
        return not self.problems

    def headline(self, verb: str = "re-optimised") -> str:
        one = len(self.stuck) == 1
        groups = ", ".join(f"{g.id}" + (f" (with {', '.join(m for m in g.members if m not in self.stuck)})"
                                        if set(g.members) - set(self.stuck) else "") for g in self.kept)
        return (f"{verb} around {', '.join(self.stuck)} ({'its SLO' if one else 'their SLOs'} cannot be met by any plan "
                f"found; {'its group' if len(self.kept) == 1 else 'their groups'} {groups} kept as "
                f"{'it is' if len(self.kept) == 1 else 'they are'})")

    def stays(self) -> list[str]:
        """What the kept groups still miss, as the current plan does."""
        return [f"the miss stays as it is now: {v.message}" for v in self.known[:5]]


def _shape(g: Group) -> tuple:
    return g.id, g.rollout_type, g.rollout_nodes, g.train_type, g.train_nodes, g.members, g.member_rollout


def stuck_jobs(target: Placement, cand: Placement, bad: list[Violation]) -> Optional[list[str]]:
    """The jobs of ``target`` the re-optimised ``cand`` leaves out or violates the SLO of; None when a
    violation names no job or group of it."""
    out = set(target.jobs()) - set(cand.jobs())
    groups = {g.id: g for g in cand.groups}
    placed = set(target.jobs()) | set(cand.jobs())
    for v in bad:
        if v.where in placed:
            out.add(v.where)
        elif v.where in groups:
            out.update(groups[v.where].members)
        else:
            return None
    return sorted(out)


def attempt(ctx: PlanningContext, placer: PlacementPlanner, target: Placement, cand: Placement, bad: list[Violation],
            time_limit_s: float) -> Optional[Around]:
    """Re-optimise ``target`` around the jobs its re-optimisation ``cand`` (with the checker's ``bad``)
    could not place within SLO; None when there is nothing to try (the module's rule 1)."""
    stuck = stuck_jobs(target, cand, bad)
    if not stuck:
        return None
    kept = [g for g in target.groups if set(g.members) & set(stuck)]
    if len(kept) == len(target.groups):
        return None
    ids = frozenset(g.id for g in kept)
    names = ids | {m for g in kept for m in g.members}
    now_plan, now_bad = placer.evaluate(ctx, target)
    known = {(v.rule, v.where) for v in now_bad if v.where in names}
    before = {g.id: g for g in now_plan.groups}  # as the checker reads them (node order and all)
    t0 = time.perf_counter()
    r = placer.reoptimise(ctx, target, time_limit_s, keep_groups=ids)
    solve_s = time.perf_counter() - t0
    try:
        merged, still = placer.evaluate(ctx, r.placement)
    except ValueError as exc:  # a plan the placer cannot read back is no plan to take (the cycle goes on)
        return Around(stuck, kept, r, target, problems=[f"it cannot be evaluated: {exc}"], solve_s=solve_s)
    problems = []
    miss = sorted(set(target.jobs()) - set(merged.jobs()))
    if miss:
        problems.append(f"it leaves out {', '.join(miss)}")
    if sorted(merged.jobs()) != sorted(target.jobs()) and not miss:
        problems.append("it does not hold exactly the current plan's jobs")
    now = {g.id: g for g in merged.groups}
    changed = [g.id for g in kept if g.id not in now or _shape(now[g.id]) != _shape(before.get(g.id, g))]
    if changed:
        problems.append(f"it changes the kept group(s) {', '.join(changed)}")
    problems += [v.message for v in still if (v.rule, v.where) not in known][:5]
    return Around(stuck, kept, r, merged, [v for v in still if (v.rule, v.where) in known],
                  [v for v in now_bad if v.where not in names], problems, solve_s)
