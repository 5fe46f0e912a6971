"""The placement plan body (``kind: PlacementPlan``) and how a solution becomes one.

The body is what the executor, simulator, capacity planner and daemon read: groups with their
rollout and training pools (GPU type, node names, size), members in round-robin order with their
node pins (the whole pools, or on a pinned configuration rollout nodes of their own: the ``i``-th
member of the order on the ``i``-th block of ``rollout_nodes`` pool nodes, the training pool
shared), phase seconds, predicted cycle time (:mod:`formulation.placement.cycle`), SLO and slack;
cost per hour; the jobs left unplaced with the reason and the fix; and the moves against the
current plan. Nodes: a group that keeps a current group (``anchor``) keeps its nodes; the others
take free nodes in the instance's node order, so the same solution gives the same plan.
"""

from __future__ import annotations

import math
from typing import Annotated, Optional, Sequence

import numpy as np

from pydantic import AfterValidator, BaseModel, ConfigDict, Field

from formulation.placement.cycle import CycleResult, Member, cycle_times, whole_pool_cycle_times
from formulation.placement.evaluate import Config, Index, Solution
from formulation.placement.instance import MAX_INSTANCE_NODES, MAX_NAME

# Bounds of a plan's numbers (a plan read from a file is a claim: an edited one may say anything).
# The checker (formulation.placement.check) compares what it can recompute against the instance;
# these bounds refuse, when the plan is read, what no instance could give.
MAX_PLAN_GPUS_PER_NODE = 1024  # the scenario schema allows 64; numbers-only instances leave it open
MAX_PLAN_GPUS = MAX_INSTANCE_NODES * MAX_PLAN_GPUS_PER_NODE
MAX_PLAN_SECONDS = 1e9  # a phase time, switch or SLO (instances: at most 1e8 s, twice that with a margin)
MAX_PLAN_CYCLE_S = 1e13  # a cycle: the sum of many members' phases at most
MAX_PLAN_COST = 1e12  # $/h: every node of the largest instance at the highest price, with room


def _share(x: float) -> float:
    if not 0.0 <= x <= 1.0 + 1e-6:  # a share of the cycle (rounding may leave it a hair above 1)
        raise ValueError("must be a share of the cycle, between 0 and 1")
    return x


Share = Annotated[float, AfterValidator(_share)]
# strict: a number, not the text of one or a boolean (cost_per_hour: true was read as 1)
Seconds = Annotated[float, Field(ge=0.0, le=MAX_PLAN_SECONDS, strict=True)]
CycleSeconds = Annotated[float, Field(ge=0.0, le=MAX_PLAN_CYCLE_S, strict=True)]
Cost = Annotated[float, Field(ge=0.0, le=MAX_PLAN_COST, strict=True)]
NodeCount = Annotated[int, Field(ge=0, le=MAX_INSTANCE_NODES, strict=True)]
# names as instances make them (a job's name, a node: its group's or type's name and a number; a
# 100,000-character group id and 100,000-node pools were read and echoed back)
Name = Annotated[str, Field(max_length=MAX_NAME)]
NodeName = Annotated[str, Field(max_length=MAX_NAME + 56)]
Event = Annotated[str, Field(max_length=MAX_NAME + 8)]
Text = Annotated[str, Field(max_length=20_000)]
GpuCount = Annotated[int, Field(ge=0, le=MAX_PLAN_GPUS, strict=True)]  # (strict: size: true or '1' was read as 1)


class _Body(BaseModel):
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)


class Pool(_Body):
    gpu_type: Name
    nodes: list[NodeName] = Field(max_length=MAX_INSTANCE_NODES)
    size: int = Field(ge=1, le=MAX_INSTANCE_NODES, strict=True, description="nodes in the pool")
    gpus_per_node: int = Field(ge=1, le=MAX_PLAN_GPUS_PER_NODE, strict=True, description="GPUs of each node (the GPU type's)")
    gpus: GpuCount = Field(description="size x gpus_per_node")


class MemberPlan(_Body):
    job: Name
    rollout_nodes: list[NodeName] = Field(max_length=MAX_INSTANCE_NODES, description="nodes its rollout engines and resident weights are pinned to")
    train_nodes: list[NodeName] = Field(max_length=MAX_INSTANCE_NODES, description="nodes its training ranks and resident optimizer state are pinned to")
    rollout_s: Seconds
    train_s: Seconds
    sync_s: Seconds
    rollout_switch_s: Seconds = Field(0.0, description="warm switch a rollout node pays to load this member (charged only in "
                                                       "groups of two or more, capped at its training + sync)")
    train_switch_s: Seconds = Field(0.0, description="warm switch a training node pays to load this member (groups of two or "
                                                     "more, capped at its rollout)")
    cycle_time_s: CycleSeconds = Field(description="predicted seconds per iteration in this group (max cycle ratio, warm switches in)")
    slo_s: float = Field(gt=0.0, le=MAX_PLAN_SECONDS, strict=True, description="the job's SLO (the instance's)")
    slack_s: float = Field(ge=-MAX_PLAN_CYCLE_S, le=MAX_PLAN_SECONDS, strict=True, description="slo_s - cycle_time_s")
    moved: bool = Field(False, strict=True, description="it was placed in another group (or on other nodes) in the current plan")


class GroupPlan(_Body):
    id: Name
    rollout_pool: Pool
    train_pool: Pool
    order: list[Name] = Field(description="round-robin order of the meta-iteration")
    members: list[MemberPlan]
    cycle_time_s: CycleSeconds
    critical: list[Event] = Field(description="events of the critical cycle (R:job = rollout start, T:job = training start)")
    rollout_busy: Share = Field(description="share of the cycle the rollout pool is busy")
    train_busy: Share = Field(description="share of the cycle the training pool is busy (training + weight sync)")
    cost_per_hour: Cost


class Unplaced(_Body):
    job: Name
    reason: Name = Field(description="no-pool | slo | dram | capacity | pending (admit: not admitted yet)")
    message: Text
    fix: Text


class PlacementPlan(_Body):
    instance: Name
    cost_per_hour: Cost
    move_cost_per_hour: Cost = 0.0
    lower_bound_per_hour: Optional[Cost] = Field(None, description="certified lower bound on cost_per_hour + move cost")
    greedy_cost_per_hour: Optional[Cost] = Field(None, description="cost of the greedy (Weave) plan on the same input")
    nodes_used: dict[Name, NodeCount]
    gpus_used: dict[Name, GpuCount]
    groups: list[GroupPlan]
    unplaced: list[Unplaced] = Field(default_factory=list)
    moved_jobs: list[Name] = Field(default_factory=list)


def members_of(group: GroupPlan) -> list[Member]:
    """The cycle-time members of a plan group (the checker and the simulator read these)."""
    by = {m.job: m for m in group.members}
    return [Member(n, by[n].rollout_s, by[n].train_s, by[n].sync_s, frozenset(by[n].rollout_nodes), frozenset(by[n].train_nodes),
                   by[n].rollout_switch_s, by[n].train_switch_s)
            for n in group.order]


def config_of(group: GroupPlan) -> Config:
    """The configuration a plan group is on, read from its pins: every member on the whole pools
    (``members = 0``), or members on disjoint rollout nodes of equal count ``r`` of their own
    (pinned: ``members = pool nodes / r``). Other pin patterns (valid plans, which the checker and
    the simulator accept) are on no configuration the optimisers build: ``members = -1``. Disjoint
    pins of unequal counts are on the own-sized configuration of the pool (:func:`own_config`);
    whether each count is the member's own is the index's to say."""
    rp, tp = group.rollout_pool, group.train_pool
    whole = Config(rp.gpu_type, rp.size, tp.gpu_type, tp.size)
    pool_r, pool_t = set(rp.nodes), set(tp.nodes)
    if any(set(m.train_nodes) != pool_t for m in group.members):
        return whole._replace(members=-1)
    if all(set(m.rollout_nodes) == pool_r for m in group.members):
        return whole
    pins = [frozenset(m.rollout_nodes) for m in group.members]
    r = len(pins[0]) if pins else 0
    if any(len(p) == 0 for p in pins) or len(frozenset().union(*pins)) != sum(len(p) for p in pins) \
            or not frozenset().union(*pins) <= pool_r:
        return whole._replace(members=-1)
    if any(len(p) != r for p in pins) or rp.size % r:
        return own_config(rp.gpu_type, rp.size, tp.gpu_type, tp.size)
    return Config(rp.gpu_type, r, tp.gpu_type, tp.size, rp.size // r)


def own_config(rollout_type: str, pool: int, train_type: str, train_nodes: int) -> Config:
    """The own-sized configuration of a rollout pool of ``pool`` nodes (members on counts of their own)."""
    return Config(rollout_type, pool, train_type, train_nodes, pool, True)


def same_config(a: Config, b: Config) -> bool:
    """The same plan space point: equal, one member's pools as a whole-pool and a pinned configuration,
    or the same pools with members on nodes of their own, one of them own-sized (whether each
    member holds its own count is checked member by member)."""
    return a == b or (a.whole() == b.whole() and {a.members, b.members} == {0, 1}) \
        or ((a.own or b.own) and a.pinned and b.pinned and a.rollout_pool_nodes == b.rollout_pool_nodes
            and (a.rollout_type, a.train_type, a.train_nodes) == (b.rollout_type, b.train_type, b.train_nodes))


def _as_is_sizes(held: Sequence[int], own: Sequence[float], pool: int) -> list[int]:
    """Rollout node counts of an own-sized group's members judged as it stands (``build_plan(as_is=True)``):
    the counts they hold (``held``; 0: none yet) when those fill the pool (the group unchanged); else each
    member's own count at the instance's estimates (``own``) when every one is finite and they fill it (a
    group a solver re-sized, e.g. for a member that joins); else a member keeps what it holds and one
    without takes its own count, or an even share of the nodes the others leave when no count serves it,
    within the pool. A member whose SLO no count meets (a stuck job) has an infinite own count: re-sizing
    it raised 'OverflowError' where the members' nodes left pool nodes free (the weave-trace-60 replay with
    --sim-slowdown 1.3:1.6, at its 24th cycle, after an admission grew such a group's pool)."""
    if all(h > 0 for h in held) and sum(held) == pool:
        return [int(h) for h in held]
    if all(math.isfinite(o) for o in own) and sum(int(o) for o in own) == pool:
        return [int(o) for o in own]
    sizes = [int(h) if h > 0 else 0 for h in held]
    left = max(0, pool - sum(sizes))
    new = [i for i, h in enumerate(held) if h <= 0]
    for i in new:  # members with an own count first, at most what is left
        if math.isfinite(own[i]):
            sizes[i] = min(int(own[i]), left)
            left -= sizes[i]
    lost = [i for i in new if not math.isfinite(own[i])]
    for n, i in enumerate(lost):
        sizes[i] = left // len(lost) + (1 if n < left % len(lost) else 0)
    if any(sizes[i] < 1 for i in new) or sum(sizes) > pool:
        raise ValueError(f"an own-sized group of {pool} rollout node(s) cannot hold its members as they stand "
                         f"(held {list(held)}): re-plan the group")
    return sizes


def member_pins(c: Config, r_nodes: list[str], n_members: int, names: Optional[Sequence[str]] = None,
                stored: Optional[dict[str, list[str]]] = None, sizes: Optional[Sequence[int]] = None) -> list[list[str]]:
    """Rollout nodes of each member in order: the whole pool, or (pinned) ``c.rollout_nodes`` of its
    own, or (own-sized) ``sizes[i]`` of its own.

    ``stored`` (job name -> the rollout nodes it holds now, ``names`` the members' names in order)
    keeps a running member on its own nodes where they are still in ``r_nodes`` (an admission
    that extends a group, or a departure that shrinks it, moves nobody else); the other members
    take the pool's remaining nodes in order."""
    if not c.pinned:
        return [r_nodes] * n_members
    if c.own:
        if sizes is None or len(sizes) < n_members:
            raise ValueError("an own-sized configuration's members need their node counts")
        want = [int(x) for x in sizes[:n_members]]
    else:
        want = [c.rollout_nodes] * n_members
    if not stored or names is None:
        starts = [sum(want[:i]) for i in range(n_members)]
        return [r_nodes[s:s + r] for s, r in zip(starts, want)]
    pool = set(r_nodes)
    out: list[Optional[list[str]]] = [None] * n_members
    used: set[str] = set()
    for i, name in enumerate(names[:n_members]):
        mine = list(stored.get(name) or [])
        if len(mine) == want[i] and set(mine) <= pool and not (set(mine) & used):
            out[i] = mine
            used.update(mine)
    rest = iter([n for n in r_nodes if n not in used])
    return [mine if mine is not None else [next(rest) for _ in range(r)] for mine, r in zip(out, want)]


def _schedule(c: Config, mems: Sequence[Member]) -> tuple[CycleResult, tuple[float, float]]:
    """The cycle times of a group's members on ``c`` (pinned members: Howard on the pins, their
    rollout nodes rings of one, no switch there; else the closed form) and its pools' busy shares."""
    res = cycle_times(mems) if c.pinned else whole_pool_cycle_times(mems)
    period = res.period
    if not period:
        return res, (0.0, 0.0)
    r_busy = (sum(m.rollout_s * len(m.rollout_nodes) for m in mems) / (period * c.rollout_pool_nodes) if c.pinned
              else sum(m.rollout_ring_s if len(mems) > 1 else m.rollout_s for m in mems) / period)
    t_busy = sum(m.train_ring_s if len(mems) > 1 else m.train_s + m.sync_s for m in mems) / period
    return res, (float(r_busy), float(t_busy))


def _same_schedule(group: GroupPlan, c: Config, rel: float) -> bool:
    """Whether the cycle times, slacks, critical cycle and busy shares ``group`` records are what
    :func:`build_plan` computes from its members' (checked) phase times: an admission took a
    current group over as it was, so a hand-edited cycle_time_s (or slack, or critical) went into
    the new plan, written with exit 0, that `validate-plan` refuses (an outside audit)."""
    res, busy = _schedule(c, members_of(group))

    def near(x: float, y: float, scale: float = 1.0) -> bool:
        return abs(x - y) <= rel * max(1.0, scale, abs(x), abs(y))

    return (near(group.cycle_time_s, res.period) and group.critical == res.critical
            and near(group.rollout_busy, busy[0]) and near(group.train_busy, busy[1])
            and all(near(m.cycle_time_s, res.of(m.job)) and near(m.slack_s, m.slo_s - m.cycle_time_s, m.slo_s)
                    for m in group.members))


def reusable(idx: Index, group: GroupPlan, config: int, members: tuple[int, ...], node_names: dict[str, set[str]],
             rel: float = 1e-8) -> bool:
    """Whether a current plan's ``group`` is what :func:`build_plan` would write for ``members`` on
    ``config`` now: the same pools (on nodes the instance has; ``node_names`` by type), prices and
    member order, every member pinned as the configuration pins it (the whole pools, or rollout
    nodes of its own) and not marked as moved, every member's phase seconds, warm switches and
    SLO those of the instance (to the 9 digits a plan keeps), and the cycle times, slacks, critical
    cycle and busy shares those they give."""
    return reusable_groups(idx, [(group, config, members)], node_names, rel)[0]


def reusable_groups(idx: Index, cands: Sequence[tuple[GroupPlan, int, Sequence[int]]], node_names: dict[str, set[str]],
                    rel: float = 1e-8, configs: Optional[Sequence[Optional[Config]]] = None) -> list[bool]:
    """:func:`reusable` of every ``(group, configuration, members)``, the members' numbers compared
    in one vectorised pass (against the index's per-(type, size) rows: the instance's own tables).
    ``configs``: :func:`config_of` of each group when known already."""
    out: list[bool] = []
    ks: list[int] = []
    js: list[int] = []
    have: list[tuple[float, ...]] = []
    owner: list[int] = []
    pools = idx.inst.pool_types
    jobs = idx.inst.jobs
    for i, (group, config, members) in enumerate(cands):
        c = idx.configs[config]
        known = configs[i] if configs is not None else None
        cg = known if known is not None else config_of(group)
        ok = (same_config(cg, c) and len(group.members) == len(members) and len(group.rollout_pool.nodes) == c.rollout_pool_nodes
              and len(group.train_pool.nodes) == c.train_nodes
              and set(group.rollout_pool.nodes) <= node_names[c.rollout_type] and set(group.train_pool.nodes) <= node_names[c.train_type]
              and abs(group.cost_per_hour - float(idx.cost[config])) <= rel * max(1.0, group.cost_per_hour)
              and group.rollout_pool.gpus_per_node == pools[c.rollout_type].gpus_per_node
              and group.train_pool.gpus_per_node == pools[c.train_type].gpus_per_node
              and group.order == [m.job for m in group.members])
        if ok:
            r_nodes, t_nodes = group.rollout_pool.nodes, group.train_pool.nodes
            for m, j in zip(group.members, members):
                if m.job != jobs[j].name or m.moved or m.train_nodes != t_nodes or (not c.pinned and m.rollout_nodes != r_nodes) \
                        or (c.own and len(m.rollout_nodes) != idx.own_nodes(config, j)):
                    ok = False
                    break
        out.append(ok)
        if ok:
            for m, j in zip(group.members, members):
                ks.append(config)
                js.append(j)
                have.append((m.rollout_s, m.train_s, m.sync_s, m.rollout_switch_s, m.train_switch_s, m.slo_s))
                owner.append(i)
    if ks:
        kk, jj = np.array(ks), np.array(js)
        r, t = idx.rollout_row(kk, jj), idx.k_t[kk]
        want = np.stack([idx.R[r, jj], idx.T[t, jj], idx.S[idx.k_pair[kk], jj], idx.SR[r, jj], idx.ST[t, jj], idx.slo[jj]], axis=1)
        bad = (np.abs(want - np.array(have, dtype=float)) > rel * np.maximum(1.0, np.abs(want))).any(axis=1)
        for i in np.unique(np.array(owner)[bad]).tolist():
            out[i] = False
    for i, (group, config, _members) in enumerate(cands):
        if out[i] and not _same_schedule(group, idx.configs[config], rel):
            out[i] = False
    return out


def build_plan(idx: Index, sol: Solution, unplaced: list[Unplaced], current_nodes: Optional[dict[str, dict]] = None,
               greedy_cost: Optional[float] = None, lower_bound: Optional[float] = None,
               moved: Optional[list[int]] = None, keep: Optional[dict[int, GroupPlan]] = None, as_is: bool = False) -> PlacementPlan:
    """The plan of ``sol``. ``keep``: solution group position -> a group of the current plan that
    is taken over as it is (same pools, nodes and members: an admission rebuilds only the groups
    it changes; :func:`reusable` says which may be kept). ``as_is``: the members of an anchored
    own-sized group keep the rollout node counts ``current_nodes`` gives them, a plan judged as it
    stands (:func:`_as_is_sizes` says how a group that changed is sized)."""
    inst = idx.inst
    current_nodes = current_nodes or {}
    kept = keep or {}
    free = {t: list(inst.node_names(t)) for t in idx.types}
    pos = {t: {n: i for i, n in enumerate(names)} for t, names in free.items()}
    taken: set[str] = {n for gp in kept.values() for n in (*gp.rollout_pool.nodes, *gp.train_pool.nodes)}
    # anchored groups keep their nodes first
    order = sorted((g for g in range(len(sol.groups)) if g not in kept),
                   key=lambda g: (sol.groups[g].anchor is None, idx.configs[sol.groups[g].config].label(), sol.groups[g].members))
    pools: dict[int, tuple[list[str], list[str]]] = {}
    for g in order:
        grp = sol.groups[g]
        c = idx.configs[grp.config]
        own = current_nodes.get(grp.anchor or "", {})
        held = own.get("rollout", [])
        if c.pinned and own.get("members"):  # the staying members' own nodes first (a departure releases the leaver's)
            mine = [n for j in grp.members for n in own["members"].get(inst.jobs[j].name, [])]
            held = mine + [n for n in held if n not in set(mine)]
        r_nodes = [n for n in held if n in pos[c.rollout_type] and n not in taken][: c.rollout_pool_nodes]
        taken.update(r_nodes)
        t_nodes = [n for n in own.get("train", []) if n in pos[c.train_type] and n not in taken][: c.train_nodes]
        taken.update(t_nodes)
        pools[g] = (r_nodes, t_nodes)
    cursor = {t: 0 for t in idx.types}  # free nodes are handed out in the instance's order
    for g in order:
        grp = sol.groups[g]
        c = idx.configs[grp.config]
        r_nodes, t_nodes = pools[g]
        for lst, t, need in ((r_nodes, c.rollout_type, c.rollout_pool_nodes), (t_nodes, c.train_type, c.train_nodes)):
            names, i = free[t], cursor[t]
            while len(lst) < need and i < len(names):
                if names[i] not in taken:
                    lst.append(names[i])
                    taken.add(names[i])
                i += 1
            cursor[t] = i
            if len(lst) < need:
                raise ValueError(f"not enough {t} nodes for the plan's groups (a solver broke the capacity constraint)")
    used_ids = {grp.anchor for grp in sol.groups if grp.anchor} | {gp.id for gp in kept.values()}
    next_id = 0
    moved_set = set(moved or [])
    groups: list[GroupPlan] = list(kept.values())
    for g in order:
        grp = sol.groups[g]
        c = idx.configs[grp.config]
        k = grp.config
        if grp.anchor:
            gid = grp.anchor
        else:
            while f"g{next_id}" in used_ids:
                next_id += 1
            gid = f"g{next_id}"
            used_ids.add(gid)
        r_nodes, t_nodes = pools[g]
        r_pos, t_pos = pos[c.rollout_type], pos[c.train_type]
        r_nodes, t_nodes = sorted(r_nodes, key=lambda n: r_pos[n]), sorted(t_nodes, key=lambda n: t_pos[n])
        mems = []
        stored = current_nodes.get(grp.anchor or "", {}).get("members") if grp.anchor else None
        sizes = None
        if c.own and as_is:
            held = [len((stored or {}).get(inst.jobs[j].name) or ()) for j in grp.members]
            own_counts = [float(idx.WO[idx.k_own[k], j]) for j in grp.members]  # (infinite where no count serves: own_nodes raises)
            sizes = _as_is_sizes(held, own_counts, c.rollout_pool_nodes)
        elif c.own:
            sizes = [idx.own_nodes(k, j) for j in grp.members]
        pins = member_pins(c, r_nodes, len(grp.members), [inst.jobs[j].name for j in grp.members], stored, sizes)
        for j, mine in zip(grp.members, pins):
            job = inst.jobs[j]
            nr = len(mine) if c.pinned else c.rollout_nodes
            a = job.rollout_s[c.rollout_type][nr]
            b = job.train_s[c.train_type][c.train_nodes]
            s = job.sync(c.rollout_type, c.train_type)
            sw_r, sw_t = job.switches(c.rollout_type, nr, c.train_type, c.train_nodes)
            mems.append(Member(job.name, a, b, s, frozenset(mine), frozenset(t_nodes), sw_r, sw_t))
        # pinned members: Howard on the pins (their rollout nodes are rings of one, no switch there)
        res, busy = _schedule(c, mems)
        pr, pt = inst.pool_types[c.rollout_type], inst.pool_types[c.train_type]
        period = res.period
        # built from checked numbers without validating each part again (37,000 validations at
        # 10,000 jobs: 0.2 s); the types are the fields' own (floats as float, names as str)
        groups.append(GroupPlan.model_construct(
            id=gid,
            rollout_pool=Pool.model_construct(gpu_type=c.rollout_type, nodes=r_nodes, size=int(c.rollout_pool_nodes),
                                              gpus_per_node=int(pr.gpus_per_node), gpus=int(c.rollout_pool_nodes * pr.gpus_per_node)),
            train_pool=Pool.model_construct(gpu_type=c.train_type, nodes=t_nodes, size=int(c.train_nodes),
                                            gpus_per_node=int(pt.gpus_per_node), gpus=int(c.train_nodes * pt.gpus_per_node)),
            order=[m.name for m in mems],
            members=[MemberPlan.model_construct(
                job=m.name, rollout_nodes=mine, train_nodes=t_nodes, rollout_s=float(m.rollout_s), train_s=float(m.train_s),
                sync_s=float(m.sync_s), rollout_switch_s=float(m.rollout_switch_s), train_switch_s=float(m.train_switch_s),
                cycle_time_s=float(res.of(m.name)), slo_s=float(inst.jobs[j].slo_s),
                slack_s=float(inst.jobs[j].slo_s - res.of(m.name)), moved=j in moved_set)
                for m, j, mine in zip(mems, grp.members, pins)],
            cycle_time_s=float(period),
            critical=list(res.critical),
            rollout_busy=busy[0],
            train_busy=busy[1],
            cost_per_hour=float(idx.cost[k]),
        ))
    groups.sort(key=lambda gp: (len(gp.id), gp.id))
    used = idx.nodes_used(sol.groups)
    cost = idx.groups_cost(sol.groups)
    return PlacementPlan(
        instance=inst.name, cost_per_hour=cost, move_cost_per_hour=inst.move_price_per_job * len(moved_set),
        lower_bound_per_hour=lower_bound, greedy_cost_per_hour=greedy_cost,
        nodes_used={t: n for t, n in used.items() if n}, gpus_used={t: n * inst.pool_types[t].gpus_per_node for t, n in used.items() if n},
        groups=groups, unplaced=unplaced, moved_jobs=sorted(inst.jobs[j].name for j in moved_set),
    )
