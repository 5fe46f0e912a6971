"""Solver-free checker of a placement plan against its instance.

Never imports a solver and never uses the optimisers' closed form: cycle times are recomputed
from the plan's pins with Howard's policy iteration (:mod:`formulation.placement.cycle`), phase
times are read from the instance's tables at the number of nodes each member is pinned to.

Each violation names its rule and where it is:

==================  ========================================================================
rule                meaning
==================  ========================================================================
placed-once         every job of the instance is in exactly one group or listed unplaced, once
                    (a job listed twice in one group's members too)
group-id            group ids are unique
unknown-job         a plan member that the instance does not have
pool-nodes          a pool's nodes exist, are of its GPU type, and number its size
node-exclusive      a node serves at most one pool
capacity            nodes used per GPU type within what the fleet has
pins                a member is pinned to a non-empty subset of each of its group's pools (the
                    whole pools, rollout nodes of its own, shared training nodes, any mix: the
                    plan space, "The plan space" in docs/placement.md), and the group's order
                    lists exactly its members
pinned-max          at most the instance's ``pinned_members_max`` members of a group are pinned to
                    part of its rollout pool (0: every member on the whole pool)
job-pool            the member's tables have the pool type and pinned node count
phase-times         the plan's phase and warm-switch seconds match the instance's tables
slo                 each member's cycle time within its SLO
dram                per node, the resident footprints of the members pinned there fit its DRAM
cycle-time          the plan's reported cycle time matches the recomputed one
critical            a group's ``critical`` lists, in order, the events of a cycle of its
                    schedule's event graph whose ratio is the recomputed cycle time (a critical
                    cycle: any one of several that tie)
cost                the plan's reported $/h match the pools' prices (and its move cost the
                    instance's price per moved job)
pool-gpus           a pool's gpus_per_node is its GPU type's, and gpus = size x gpus_per_node
totals              nodes_used and gpus_used per GPU type are what the groups' pools hold
slo-claim           (``slo_claims``: a plan document) a member's slo_s is its job's SLO, and
                    slack_s = slo_s - cycle_time_s
busy                (``slo_claims``) a group's ``rollout_busy`` / ``train_busy`` are the shares of its
                    cycle its pools are busy on the recomputed schedule (rollout: each member's
                    rollout seconds on its pinned nodes over the pool's node-cycles, or its ring
                    seconds on a whole pool shared by two or more; training: the ring seconds)
moved               ``moved_jobs`` lists, once each, exactly the members whose ``moved`` is true
bound               the lower bound is not above the plan's cost (+ move cost)
solver              (with the solve record) the gap lies in [0, 1] and is |objective -
                    best_bound| / objective, the bound not above the objective
==================  ========================================================================
"""

from __future__ import annotations

from collections import Counter
from typing import Any, Optional

from formulation.common.violation import Violation
from formulation.placement.cycle import Member, cycle_times, event_graph
from formulation.placement.instance import PlacementInstance
from formulation.placement.plan import PlacementPlan

TOL = 1e-6


def _close(x: float, y: float) -> bool:
    return abs(x - y) <= TOL * max(1.0, abs(x), abs(y))


def _rollout_busy(g, members: list[Member], period: float) -> float:
    """The share of the cycle the rollout pool's nodes are busy: members pinned to nodes of their own (some member
    not on the whole pool) each busy on its nodes for its rollout seconds; on a whole pool shared by two or more,
    the members' ring seconds (the warm switches in) over the cycle; a lone member its rollout seconds."""
    pool = set(g.rollout_pool.nodes)
    if any(m.rollout_nodes != frozenset(pool) for m in members):
        return sum(m.rollout_s * len(m.rollout_nodes) for m in members) / (period * max(1, len(pool)))
    return sum(m.rollout_ring_s if len(members) > 1 else m.rollout_s for m in members) / period


def _train_busy(members: list[Member], period: float) -> float:
    return sum(m.train_ring_s if len(members) > 1 else m.train_s + m.sync_s for m in members) / period


def check(inst: PlacementInstance, plan: PlacementPlan, record: Optional[Any] = None, slo_claims: bool = False) -> list[Violation]:
    """Every violated rule of ``plan`` on ``inst``. ``record``: the plan document's solve record
    (anything with ``objective``, ``best_bound`` and ``gap``), checked too when given.
    ``slo_claims``: hold each member's slo_s and slack_s to the instance's SLO (a plan document
    read from a file: validate-plan, apply, simulate --plan); off, plans built on other SLOs than
    the instance's (capacity's least-overshoot placements, on relaxed SLOs) are judged on their
    cycle times alone."""
    out: list[Violation] = []
    add = lambda rule, where, msg: out.append(Violation(rule, where, msg))  # noqa: E731
    jobs = {j.name: j for j in inst.jobs}
    node_type = {n: t for t in inst.pool_types for n in inst.node_names(t)}
    seen: dict[str, int] = {}
    places: dict[str, Counter] = {}  # job -> where it is listed ("members of group g0", "unplaced") -> times
    for g in plan.groups:
        for m in g.members:
            seen[m.job] = seen.get(m.job, 0) + 1
            places.setdefault(m.job, Counter())[f"members of group {g.id}"] += 1
    for u in plan.unplaced:
        seen[u.job] = seen.get(u.job, 0) + 1
        places.setdefault(u.job, Counter())["unplaced"] += 1
    for name in jobs:
        if seen.get(name, 0) == 0:
            add("placed-once", f"job={name}", "the job is neither in a group nor listed unplaced")
        elif seen[name] > 1:
            at = ", ".join(f"{k} times in {p}" if k > 1 else p for p, k in places[name].items())
            add("placed-once", f"job={name}", f"the job appears {seen[name]} times ({at}): keep it once, in one group's "
                                              "members (and order) or the unplaced list, or re-plan")
    for name in seen:
        if name not in jobs:
            add("unknown-job", f"job={name}", "the instance has no such job")
    for gid, k in Counter(g.id for g in plan.groups).items():
        if k > 1:
            add("group-id", f"group={gid}", f"{k} groups have this id: give each group its own id, or re-plan")

    owner: dict[str, str] = {}
    used: dict[str, int] = {}
    total_cost = 0.0
    for g in plan.groups:
        gcost = 0.0
        for side, pool in (("rollout", g.rollout_pool), ("train", g.train_pool)):
            where = f"group={g.id},{side}_pool"
            pt = inst.pool_types.get(pool.gpu_type)
            if pt is None:
                add("pool-nodes", where, f"GPU type '{pool.gpu_type}' is not in the instance")
                continue
            if len(pool.nodes) != pool.size or len(set(pool.nodes)) != len(pool.nodes):
                add("pool-nodes", where, f"size {pool.size} but {len(set(pool.nodes))} distinct nodes listed")
            if pool.gpus_per_node != pt.gpus_per_node:
                add("pool-gpus", where, f"gpus_per_node is {pool.gpus_per_node} but a {pool.gpu_type} node has "
                                        f"{pt.gpus_per_node} GPUs (set it to {pt.gpus_per_node}, or re-plan)")
            elif pool.gpus != pool.size * pt.gpus_per_node:
                add("pool-gpus", where, f"gpus is {pool.gpus} but size x gpus_per_node is {pool.size * pt.gpus_per_node} "
                                        f"(set it to {pool.size * pt.gpus_per_node}, or re-plan)")
            for n in pool.nodes:
                if node_type.get(n) != pool.gpu_type:
                    add("pool-nodes", where, f"node '{n}' is not a {pool.gpu_type} node of the instance")
                if n in owner:
                    add("node-exclusive", f"node={n}", f"in the pools of both {owner[n]} and {g.id}/{side}")
                owner[n] = f"{g.id}/{side}"
            used[pool.gpu_type] = used.get(pool.gpu_type, 0) + len(pool.nodes)
            gcost += len(pool.nodes) * pt.gpus_per_node * pt.price_per_gpu_hour
        total_cost += gcost
        if not _close(gcost, g.cost_per_hour):
            add("cost", f"group={g.id}", f"reports {g.cost_per_hour:.4g} $/h but its pools cost {gcost:.4g} $/h")
        for m in g.members if slo_claims else ():
            job = jobs.get(m.job)
            if job is None:
                continue
            where = f"job={m.job},group={g.id}"
            if not _close(m.slo_s, job.slo_s):
                add("slo-claim", where, f"slo_s is {m.slo_s:.6g} but the job's SLO is {job.slo_s:.6g} s "
                                        f"(set it to {job.slo_s:.9g}, or re-plan)")
        if sorted(g.order) != sorted(m.job for m in g.members):
            held, listed = Counter(m.job for m in g.members), Counter(g.order)
            diff = [f"{n} is a member but not in the order" for n in held if n not in listed]
            diff += [f"{n} is in the order but not a member" for n in listed if n not in held]
            diff += [f"{n} is listed {k} times as a member" for n, k in held.items() if k > 1]
            diff += [f"{n} is listed {k} times in the order" for n, k in listed.items() if k > 1]
            add("pins", f"group={g.id}", "the round-robin order does not list exactly the group's members"
                + (f" ({'; '.join(diff[:6])})" if diff else ""))
            continue
        if len(set(g.order)) != len(g.order):  # a member listed twice (placed-once names it): no schedule to recompute
            continue
        members: list[Member] = []
        by = {m.job: m for m in g.members}
        whole = set(g.rollout_pool.nodes)
        part = [m.job for m in g.members if m.rollout_nodes and set(m.rollout_nodes) != whole]
        if len(part) > inst.pinned_members_max:
            add("pinned-max", f"group={g.id}", f"{len(part)} members are pinned to part of the rollout pool "
                f"({', '.join(part[:4])}{' ...' if len(part) > 4 else ''}) but the instance's pinned_members_max is "
                f"{inst.pinned_members_max} (re-plan, or raise pinned_members_max if the fleet runs such groups)")
        ok = True
        for name in g.order:
            m = by[name]
            where = f"job={name},group={g.id}"
            job = jobs.get(name)
            if job is None:
                ok = False
                continue
            if not m.rollout_nodes or not set(m.rollout_nodes) <= set(g.rollout_pool.nodes):
                add("pins", where, f"rollout pins {m.rollout_nodes} are not a non-empty subset of the rollout pool")
            if not m.train_nodes or not set(m.train_nodes) <= set(g.train_pool.nodes):
                add("pins", where, f"training pins {m.train_nodes} are not a non-empty subset of the training pool")
            p, q = g.rollout_pool.gpu_type, g.train_pool.gpu_type
            nr, nt = len(set(m.rollout_nodes)), len(set(m.train_nodes))
            a = job.rollout_s.get(p, {}).get(nr)
            b = job.train_s.get(q, {}).get(nt)
            if a is None:
                add("job-pool", where, f"the job has no rollout time on {nr} {p} node(s)")
            if b is None:
                add("job-pool", where, f"the job has no training time on {nt} {q} node(s)")
            if a is None or b is None:
                ok = False
                continue
            s = job.sync(p, q)
            sr = job.rollout_switch_s.get(p, {}).get(nr, 0.0)
            st = job.train_switch_s.get(q, {}).get(nt, 0.0)
            for label, mine, theirs in (("rollout_s", m.rollout_s, a), ("train_s", m.train_s, b), ("sync_s", m.sync_s, s),
                                        ("rollout_switch_s", m.rollout_switch_s, sr), ("train_switch_s", m.train_switch_s, st)):
                if not _close(mine, theirs):
                    add("phase-times", where, f"{label} is {mine:.6g} but the instance says {theirs:.6g} on these pools")
            # the event graph charges the switches on nodes shared by two or more members only
            members.append(Member(name, a, b, s, frozenset(m.rollout_nodes), frozenset(m.train_nodes), sr, st))
        if not ok or not members:
            continue
        res = cycle_times(members)
        for mm in members:
            lam, slo = res.of(mm.name), jobs[mm.name].slo_s
            where = f"job={mm.name},group={g.id}"
            if lam > slo * (1 + TOL):
                add("slo", where, f"cycle time {lam:.1f} s exceeds the SLO {slo:.1f} s by {lam - slo:.1f} s")
            mp = by[mm.name]
            if not _close(mp.cycle_time_s, lam):
                add("cycle-time", where, f"reports {mp.cycle_time_s:.6g} s but the schedule gives {lam:.6g} s")
            elif slo_claims and _close(mp.slo_s, slo) and not _close(mp.slack_s, slo - lam):  # (a false cycle or SLO is named above)
                add("slo-claim", where, f"slack_s is {mp.slack_s:.6g} but slo_s - cycle_time_s is {slo - lam:.6g} "
                                        f"(set it to {slo - lam:.9g}, or re-plan)")
        if not _close(g.cycle_time_s, res.period):
            add("cycle-time", f"group={g.id}", f"reports {g.cycle_time_s:.6g} s but the schedule gives {res.period:.6g} s")
        bad = None if g.critical == res.critical else _critical_problem(g.critical, members, res.period, res.critical)
        if bad:  # (the checker's own critical cycle needs no second look at the event graph)
            add("critical", f"group={g.id}", bad)
        if slo_claims and res.period > 0:
            for side, have, want in (("rollout_busy", g.rollout_busy, _rollout_busy(g, members, res.period)),
                                     ("train_busy", g.train_busy, _train_busy(members, res.period))):
                if not _close(have, want):
                    add("busy", f"group={g.id}", f"{side} is {have:.6g} but the schedule gives {want:.6g} (re-plan, or set it to {want:.9g})")
        # DRAM per node
        load: dict[str, float] = {}
        for name in g.order:
            m, job = by[name], jobs[name]
            for n in set(m.rollout_nodes):
                load[n] = load.get(n, 0.0) + job.dram_rollout_node_gb
            for n in set(m.train_nodes):
                load[n] = load.get(n, 0.0) + job.train_state_gb / len(set(m.train_nodes))
        for n, gb in sorted(load.items()):
            t = node_type.get(n)
            if t is None:
                continue
            cap = inst.pool_types[t].dram_gb
            if gb > cap * (1 + TOL):
                add("dram", f"node={n}", f"{gb:.1f} GB of resident job state but the node has {cap:.1f} GB of host DRAM "
                                         f"(members: {', '.join(x for x in g.order if n in by[x].rollout_nodes or n in by[x].train_nodes)})")
    for t, count in sorted(used.items()):
        cap = inst.pool_types[t].count if t in inst.pool_types else 0
        if count > cap:
            add("capacity", f"type={t}", f"{count} nodes used but the fleet has {cap}")
    if not _close(total_cost, plan.cost_per_hour):
        add("cost", "plan", f"reports {plan.cost_per_hour:.6g} $/h but the groups cost {total_cost:.6g} $/h")
    move = inst.move_price_per_job * len(plan.moved_jobs)
    if not _close(move, plan.move_cost_per_hour):
        add("cost", "plan", f"move_cost_per_hour is {plan.move_cost_per_hour:.6g} but {len(plan.moved_jobs)} moved job(s) at "
                            f"{inst.move_price_per_job:.6g} $/h each cost {move:.6g} $/h (re-plan)")
    _totals(inst, plan, used, add)
    _moved(plan, add)
    if plan.lower_bound_per_hour is not None and plan.lower_bound_per_hour > (plan.cost_per_hour + plan.move_cost_per_hour) * (1 + TOL) + TOL:
        add("bound", "plan", f"lower_bound_per_hour {plan.lower_bound_per_hour:.6g} is above the plan's own cost "
                             f"{plan.cost_per_hour + plan.move_cost_per_hour:.6g} $/h (a bound never is: re-plan)")
    if record is not None:
        check_record(record, add)
    return out


def _totals(inst: PlacementInstance, plan: PlacementPlan, used: dict[str, int], add) -> None:
    """The plan's nodes_used and gpus_used per GPU type against its groups' pools (zero entries may be left out)."""
    for field, claims, per in (("nodes_used", plan.nodes_used, lambda t: 1),
                               ("gpus_used", plan.gpus_used, lambda t: inst.pool_types[t].gpus_per_node)):
        for t in sorted(set(claims) | set(used)):
            want = used.get(t, 0) * (per(t) if t in inst.pool_types else 0)
            have = claims.get(t, 0)
            if have != want:
                add("totals", f"type={t}", f"{field}.{t} is {have} but the groups' pools hold {want} "
                                           f"({f'set it to {want}' if want else 'remove it'}, or re-plan)")


def _critical_problem(critical: list[str], members: list[Member], period: float, found: list[str]) -> Optional[str]:
    """What is wrong with a group's ``critical`` (None: nothing): it must list, in order, the events
    of a cycle of the group's event graph (``R:job``, ``T:job``; the last one leads back to the
    first) whose ratio, weight over delay with the arcs that make it largest, is the recomputed
    cycle time ``period``. Any critical cycle passes (the plan's writer breaks ties its own way);
    ``found`` is the checker's own, suggested in the fix."""
    index = {f"{side}:{m.name}": 2 * i + k for i, m in enumerate(members) for k, side in enumerate(("R", "T"))}
    fix = f"set it to {found} (a critical cycle of the recomputed schedule), or re-plan"
    if not critical:
        return f"is empty, but the group's cycle time {period:.6g} s is set by a cycle of its events ({fix})"
    unknown = [e for e in critical if e not in index]
    if unknown:
        return f"names {unknown[0]!r}, not an event of the group (R:job or T:job of one of its members) ({fix})"
    if len(set(critical)) != len(critical):
        twice = next(e for e in critical if critical.count(e) > 1)
        return f"lists {twice} twice, but a critical cycle passes each event once ({fix})"
    arcs: dict[tuple[int, int], list] = {}
    for a in event_graph(members):
        arcs.setdefault((a.src, a.dst), []).append(a)
    ev = [index[e] for e in critical]
    weight, delay = 0.0, 0
    for k, (u, v) in enumerate(zip(ev, ev[1:] + ev[:1])):
        options = arcs.get((u, v))
        if not options:
            return (f"{critical[k]} -> {critical[(k + 1) % len(critical)]} is no step of the group's schedule, so "
                    f"{critical} is not a cycle of its events ({fix})")
        best = max(options, key=lambda a: a.weight - period * a.delay)
        weight, delay = weight + best.weight, delay + best.delay
    ratio = weight / delay if delay else float("inf")
    if not _close(ratio, period):
        return (f"{critical} is a cycle of {ratio:.6g} s a meta-iteration ({weight:.6g} s over {delay}), not the group's "
                f"cycle time {period:.6g} s: it is not the critical cycle ({fix})")
    return None


def _moved(plan: PlacementPlan, add) -> None:
    """``moved_jobs`` against the members' ``moved`` flags (the plan writer sets both from one list):
    each moved job listed once, every listed one a member marked moved, every marked one listed."""
    flagged = {m.job: g.id for g in plan.groups for m in g.members if m.moved}
    members = {m.job: g.id for g in plan.groups for m in g.members}
    for name, k in sorted(Counter(plan.moved_jobs).items()):
        if k > 1:
            add("moved", f"job={name}", f"moved_jobs lists it {k} times (list each moved job once, or re-plan)")
    listed = set(plan.moved_jobs)
    for name in sorted(listed - set(flagged)):
        if name in members:
            add("moved", f"job={name},group={members[name]}", "moved_jobs lists it but its member says moved: false "
                                                              "(set moved: true or drop it from moved_jobs, or re-plan)")
        else:
            add("moved", f"job={name}", "moved_jobs lists it but no group has it as a member: only a placed job moves "
                                        "(drop it from moved_jobs, or re-plan)")
    for name in sorted(set(flagged) - listed):
        add("moved", f"job={name},group={flagged[name]}", "its member says moved: true but moved_jobs does not list it "
                                                          "(add it to moved_jobs or set moved: false, or re-plan)")


def check_record(record: Any, add) -> None:
    """The solve record's claims a placement plan can be held to: a relative gap in [0, 1] (a
    plan's cost and its bound are non-negative, the bound not above the cost) that is the one of
    its objective and bound."""
    obj, bound, gap = getattr(record, "objective", None), getattr(record, "best_bound", None), getattr(record, "gap", None)
    if gap is not None and not 0.0 <= gap <= 1.0 + TOL:
        add("solver", "solver.gap", f"is {gap:g}, but a placement plan's relative gap lies in [0, 1] (re-plan)")
    elif gap is not None and obj is not None and bound is not None:
        want = abs(obj - bound) / max(abs(obj), 1e-9)
        if abs(gap - want) > 1e-6:
            add("solver", "solver.gap", f"is {gap:.6g} but |objective - best_bound| / objective is {want:.6g} (re-plan)")
    if obj is not None and bound is not None and bound > obj * (1 + TOL) + TOL:
        add("solver", "solver.best_bound", f"{bound:.6g} is above the objective {obj:.6g} (a bound never is: re-plan)")
