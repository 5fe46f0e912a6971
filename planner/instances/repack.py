"""Re-packing a trace's groups toward the offline optimum of the jobs present (Weave-daemon style).

The ``repacking`` admission of :class:`planner.instances.simulate.PlannerPlacer`: online admission as
``lifetime`` (Weave's three moves, timed joins, each move judged by the $ it adds until the members
are done), and at departures (and every ``period_s`` simulated seconds, read at iteration
boundaries) a *re-pack*:

1. **target** (:func:`solve_target`): the placement of the jobs present solved offline
   (:func:`formulation.placement.solve.solve`, a few seconds), every job free to move;
2. **hosts** (:func:`assign_hosts`): each target group is matched to the running group it can grow
   from (same rollout type, training type, training nodes and pin size, sharing members with the
   target group), most shared members first (its other members move out); a target group no running
   group can host is opened by its first member that moves;
3. **pays** (:func:`pays`): the target is taken only when its $/h saving over the jobs' expected
   remaining stay is larger than what the moves cost (each moved member's state loaded on its new
   group's pools: :func:`simulator.trace.move_s` seconds of that group's $/h, an upper bound) by a
   margin; otherwise the groups stay;
4. **move** (the placer's ``at_boundary``): at each of its iteration boundaries a member whose host
   is not its group moves there by a timed join (its first rollout there starts once its state is
   loaded, and only when every member of the joined group keeps its SLO on its sampled iterations,
   :class:`planner.instances.sampled_admission.SampledAcceptance`), or opens its target group alone
   when its slowest sampled iteration plus the load stays within its SLO. A member no move takes
   stays, and tries again at its next boundary (a few times, then it stays for good).

What the trace does with a move (the member leaves at the end of its iteration, its old pools held
until their last member leaves, the wait counted in its iteration) is :class:`simulator.trace.TraceSim`'s.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

import numpy as np

#: a re-pack is taken when (saving $/h x expected remaining hours) > MARGIN x (the moves' $) and the
#: saving is at least MIN_SAVING of the current $/h
MARGIN = 2.0
MIN_SAVING = 0.02
#: boundaries at which a member's move is refused before it stays for good (until the next re-pack)
TRIES = 6


@dataclass
class Target:
    """A re-pack being carried out: per job its target group, per target group its configuration
    (the packer's index) and its host (a packer group position) once it has one."""

    group_of: dict  # job -> target group
    config: list  # target group -> configuration id
    host: dict  # target group -> packer group position
    cost: float  # the target's $/h
    movers: set = field(default_factory=set)  # jobs still to move
    tries: dict = field(default_factory=dict)  # job -> boundaries refused


def family(c, members: int) -> tuple:
    """What a group of ``members`` on configuration ``c`` can change to by joins and departures:
    rollout type, training type and nodes, a pinned member's rollout nodes (0: whole pools; a lone
    member's whole pools are the pinned configuration of one member, as the packer has it)."""
    pinned = c.pinned or members == 1
    return (c.rollout_type, c.train_type, c.train_nodes, c.rollout_nodes if pinned else 0)


def solve_target(idx, inst, present: list, time_limit_s: float, backend: str = "colgen", current: Optional[list] = None,
                 move_price: float = 0.0) -> Optional[tuple[list, float]]:
    """The offline placement of the jobs ``present`` (job indices of ``idx``): ``([(configuration id
    of idx, [job indices])], $/h)``, or None where the solve leaves a job unplaced. ``current``: the
    running groups ``[(configuration id, [job indices])]``, a warm start whose every job placed
    elsewhere costs ``move_price`` $/h in the solve's objective (not in the $/h returned)."""
    from formulation.common import SolveOptions
    from formulation.placement.evaluate import Group, Solution
    from formulation.placement.plan import build_plan
    from formulation.placement.solve import solve

    sub = inst.model_copy(update={"jobs": [inst.jobs[j] for j in present], "move_price_per_job": float(move_price)})
    plan = None
    if current:
        plan = build_plan(idx, Solution([Group(k, tuple(ms), f"c{i}") for i, (k, ms) in enumerate(current)]), [])
    res = solve(sub, SolveOptions(time_limit_s=time_limit_s, mip_gap=0.0), backend, current=plan)
    sol, sidx = res.solution, res.idx
    if sidx is None or sol.unplaced:
        return None
    j_of = {n: i for i, n in enumerate(idx.names)}
    groups = []
    for g in sol.groups:
        c = sidx.configs[g.config]
        k = idx.config_id.get(c)
        if k is None:
            return None
        groups.append((k, [j_of[sidx.names[m]] for m in g.members]))
    return groups, float(sum(idx.cost[k] for k, _ in groups))


def assign_hosts(idx, groups: list, current: list, current_config: list) -> dict:
    """Target group -> the running group (position in ``current``) it grows from: same
    :func:`family`, sharing members with the target group (its other members move out); the most
    shared members first (then the fewest to move out), each running group hosting one target group
    at most."""
    cand = []
    for t, (k, ms) in enumerate(groups):
        fam, mset = family(idx.configs[k], len(ms)), set(ms)
        for g, members in enumerate(current):
            shared = len(mset.intersection(members))
            if shared and family(idx.configs[current_config[g]], len(members)) == fam:
                cand.append((-shared, len(members) - shared, t, g))
    host: dict = {}
    used: set = set()
    for _, _, t, g in sorted(cand):
        if t not in host and g not in used:
            host[t] = g
            used.add(g)
    return host


def movers(groups: list, host: dict, job_group: dict) -> set:
    """The jobs not in their target group's host."""
    out = set()
    for t, (_, ms) in enumerate(groups):
        for j in ms:
            if host.get(t) is None or job_group.get(j) != host[t]:
                out.add(j)
    return out


def pays(now_rate: float, target_rate: float, hours_left: float, move_cost: float, margin: float = MARGIN,
         min_saving: float = MIN_SAVING) -> bool:
    """Whether a re-pack is worth its moves: the $/h it saves over ``hours_left`` against ``margin`` x
    the moves' $, and a saving of at least ``min_saving`` of the current $/h."""
    saving = now_rate - target_rate
    return saving > min_saving * now_rate and saving * hours_left > margin * move_cost


def hours_left(left: dict, slo_s: dict) -> float:
    """The jobs' expected remaining stay (hours): the median of their iterations left x SLO."""
    if not left:
        return 0.0
    return float(np.median([left[j] * slo_s[j] for j in left])) / 3600.0
