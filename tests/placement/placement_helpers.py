"""Small random placement instances and an exhaustive oracle, for the placement tests.

The oracle is independent of the optimisers: it decides a group's feasibility with Howard's
cycle times (not the closed form the optimisers use) on the members' node pins, straight from the
instance tables, and finds the optimum by dynamic programming over subsets of jobs and the nodes
left per type. Its plan space is the optimisers' widened one: every member on the whole pools
(``m = 0``), or up to ``m`` members (``m <= pinned_members_max``) each on ``nr`` rollout nodes of
its own sharing the training pool, with host DRAM checked per node on the pins.
"""

from __future__ import annotations

import itertools
from typing import Optional
from functools import lru_cache

import numpy as np

from formulation.placement.cycle import Member, cycle_times
from formulation.placement.instance import PlacementInstance, PlacementJob, PoolType


def small_instance(seed: int, n_jobs: int, capacity=(3, 3), dram_gb=(512.0, 512.0), gpus_per_node=(8, 8),
                   both_types: bool = False, move_price: float = 0.0, switches: bool = False,
                   rollout_heavy: float = 0.0, pinned_members_max: int = 8) -> PlacementInstance:
    """``n_jobs`` random jobs on two GPU types A (cheap) and B; pool sizes 1 and 2; ``switches``:
    random warm-switch tables (0-8 s, sometimes more than the other phase, so the cap binds);
    ``rollout_heavy`` > 0: training seconds are that share of the rollout's (Weave's jobs: rollouts
    3-4x training, where members on rollout nodes of their own sharing a training node pay)."""
    rng = np.random.default_rng(seed)
    pools = {
        "A": PoolType(gpus_per_node=gpus_per_node[0], price_per_gpu_hour=1.0, dram_gb=dram_gb[0], count=capacity[0]),
        "B": PoolType(gpus_per_node=gpus_per_node[1], price_per_gpu_hour=2.0, dram_gb=dram_gb[1], count=capacity[1]),
    }
    jobs = []
    for i in range(n_jobs):
        a1, b1 = float(rng.uniform(10, 100)), float(rng.uniform(10, 100))
        if rollout_heavy:
            b1 = a1 * rollout_heavy * float(rng.uniform(0.8, 1.2)) / 2.0  # on one B node (train_s on B is b1)
        r_types = ["A", "B"] if both_types and rng.random() < 0.5 else ["A"]
        t_types = ["B", "A"] if both_types and rng.random() < 0.5 else ["B"]
        rollout = {t: {1: round(a1 * (1.0 if t == "A" else 0.7), 3), 2: round(a1 * float(rng.uniform(0.55, 0.8)), 3)} for t in r_types}
        train = {t: {1: round(b1 * (1.0 if t == "B" else 2.0), 3), 2: round(b1 * float(rng.uniform(0.5, 0.6)), 3)} for t in t_types}
        s = round(float(rng.uniform(0, 5)), 3) if rng.random() < 0.5 else 0.0
        solo = min(r[1] for r in rollout.values()) + min(t[1] for t in train.values()) + s
        slo = round(solo * float(rng.uniform(1.05, 3.0)), 3)
        sw = {}
        if switches:
            sw = {"rollout_switch_s": {t: {n: round(float(rng.uniform(0, 8)), 3) for n in row} for t, row in rollout.items()},
                  "train_switch_s": {t: {n: round(float(rng.uniform(0, 8)), 3) for n in row} for t, row in train.items()}}
        jobs.append(PlacementJob(
            name=f"j{i}", slo_s=slo, rollout_s=rollout, train_s=train, **sw,
            sync_s={p: {q: s for q in t_types} for p in r_types},
            dram_rollout_node_gb=round(float(rng.uniform(0, 250)), 1), train_state_gb=round(float(rng.uniform(0, 700)), 1),
            arrival_s=float(i)))
    return PlacementInstance(name=f"small-{seed}", pool_types=pools, jobs=jobs, move_price_per_job=move_price,
                             pinned_members_max=pinned_members_max)


def configs_of(inst: PlacementInstance):
    """Every (rollout type, nodes per member, training type, nodes, m, own) the jobs' tables name and
    the fleet can hold: m = 0 whole pools, m >= 1 up to m members on rollout nodes of their own;
    own: a rollout pool of ``nodes`` nodes whose members each hold their own count (:func:`own_count`)."""
    cap = {t: p.count for t, p in inst.pool_types.items()}
    r = sorted({(t, n) for j in inst.jobs for t, row in j.rollout_s.items() for n in row if n <= cap[t]})
    tr = sorted({(t, n) for j in inst.jobs for t, row in j.train_s.items() for n in row if n <= cap[t]})
    from formulation.placement.evaluate import (OWN_MAX_ROLLOUT_NODES, OWN_MAX_TRAIN_NODES, PINNED_MAX_ROLLOUT_NODES,
                                                PINNED_MAX_TRAIN_NODES, pinned_member_counts)

    out = []
    for (p, nr), (q, nt) in itertools.product(r, tr):
        pinned = pinned_member_counts(inst.pinned_members_max) if nr <= PINNED_MAX_ROLLOUT_NODES and nt <= PINNED_MAX_TRAIN_NODES else ()
        for m in (0, *pinned):
            pool = nr * max(1, m)
            if (p == q and pool + nt > cap[p]) or pool > cap[p]:
                continue
            out.append((p, nr, q, nt, m, False))
    if inst.pinned_members_max >= 1:
        for p in sorted({t for t, n in r if n <= OWN_MAX_ROLLOUT_NODES}):
            for (q, nt) in tr:
                if nt > OWN_MAX_TRAIN_NODES:
                    continue
                for pool in range(1, min(inst.pinned_members_max, OWN_MAX_ROLLOUT_NODES) + 1):
                    if pool <= PINNED_MAX_ROLLOUT_NODES and nt <= PINNED_MAX_TRAIN_NODES:
                        continue
                    if (p == q and pool + nt > cap[p]) or pool > cap[p] or nt > cap[q]:
                        continue
                    out.append((p, pool, q, nt, pool, True))
    return out


def _six(c) -> tuple:
    return tuple(c) if len(c) == 6 else (*c, False)


def own_count(inst: PlacementInstance, i: int, c) -> Optional[int]:
    """Job ``i``'s own rollout nodes on an own-sized configuration ``c``: the fewest of its table's
    counts (up to evaluate.OWN_MAX_ROLLOUT_NODES) on which its solo iteration meets its SLO."""
    from formulation.placement.evaluate import OWN_MAX_ROLLOUT_NODES

    p, _pool, q, nt, _m, _own = _six(c)
    j = inst.jobs[i]
    b = j.train_s.get(q, {}).get(nt)
    if b is None:
        return None
    for n in sorted(j.rollout_s.get(p, {})):
        if n <= OWN_MAX_ROLLOUT_NODES and j.rollout_s[p][n] + b + j.sync(p, q) <= j.slo_s * (1 + 1e-9) + 1e-12:
            return n
    return None


def config_cost(inst: PlacementInstance, c) -> float:
    p, nr, q, nt, m, own = _six(c)
    pr, pt = inst.pool_types[p], inst.pool_types[q]
    return (nr if own else nr * max(1, m)) * pr.gpus_per_node * pr.price_per_gpu_hour + nt * pt.gpus_per_node * pt.price_per_gpu_hour


def pins(c, k: int, start: Optional[int] = None, count: Optional[int] = None) -> tuple[frozenset, frozenset]:
    """Node pins of the ``k``-th member on configuration ``c`` (own-sized: ``count`` nodes from ``start``)."""
    p, nr, q, nt, m, own = _six(c)
    mine = range(start, start + count) if own and start is not None and count is not None else \
        range(k * nr, (k + 1) * nr) if m else range(nr)
    return frozenset(f"r{i}" for i in mine), frozenset(f"t{i}" for i in range(nt))


def group_feasible(inst: PlacementInstance, members: tuple, c) -> bool:
    p, nr, q, nt, m, own = _six(c)
    if m and len(members) > m:
        return False
    mem = []
    start = 0
    for k, i in enumerate(members):
        j = inst.jobs[i]
        count = own_count(inst, i, c) if own else nr
        if count is None:
            return False
        a = j.rollout_s.get(p, {}).get(count)
        b = j.train_s.get(q, {}).get(nt)
        if a is None or b is None:
            return False
        sr, st = j.rollout_switch_s.get(p, {}).get(count, 0.0), j.train_switch_s.get(q, {}).get(nt, 0.0)
        mem.append(Member(j.name, a, b, j.sync(p, q), *pins(c, k, start, count), sr, st))
        start += count
    if own and start > nr:  # the members' own counts overflow the pool
        return False
    res = cycle_times(mem)
    if any(res.of(inst.jobs[i].name) > inst.jobs[i].slo_s * (1 + 1e-9) for i in members):
        return False
    load: dict[str, float] = {}  # host DRAM per node on the pins
    for mm, i in zip(mem, members):
        for n in mm.rollout_nodes:
            load[n] = load.get(n, 0.0) + inst.jobs[i].dram_rollout_node_gb
        for n in mm.train_nodes:
            load[n] = load.get(n, 0.0) + inst.jobs[i].train_state_gb / nt
    return all(gb <= inst.pool_types[p if n[0] == "r" else q].dram_gb * (1 + 1e-9) for n, gb in load.items())


def config_use(inst: PlacementInstance, c) -> tuple:
    p, nr, q, nt, m, own = _six(c)
    types = sorted(inst.pool_types)
    use = [0] * len(types)
    use[types.index(p)] += nr if own else nr * max(1, m)
    use[types.index(q)] += nt
    return tuple(use)


def penalty(inst: PlacementInstance) -> float:
    """$/h the solvers charge per unplaced job: 10 x the most expensive configuration + 1."""
    return 10.0 * max(config_cost(inst, c) for c in configs_of(inst)) + 1.0


#: :func:`feasible_groups` by instance (its JSON), in this process: the brute force (Howard's cycle times on
#: every subset of jobs on every configuration) is what the oracles cost, and several tests of a module ask
#: it of one instance (a pure function of the instance: nothing here patches what it calls)
_FEASIBLE: dict[str, list] = {}


def feasible_groups(inst: PlacementInstance):
    """Every feasible group by brute force: (members, configuration, $/h, nodes per sorted type); a list
    of the caller's own (computed once per instance, :data:`_FEASIBLE`)."""
    key = inst.model_dump_json()
    if key not in _FEASIBLE:
        _FEASIBLE[key] = _feasible_groups(inst)
    return list(_FEASIBLE[key])


def _feasible_groups(inst: PlacementInstance) -> list:
    n = len(inst.jobs)
    out = []
    for size in range(1, n + 1):
        for members in itertools.combinations(range(n), size):
            for c in configs_of(inst):
                if group_feasible(inst, members, c):
                    out.append((members, c, config_cost(inst, c), config_use(inst, c)))
    return out


def oracle(inst: PlacementInstance) -> tuple[float, int]:
    """(optimal cost + penalty x unplaced, unplaced) by DP over subsets and the nodes left per type."""
    n = len(inst.jobs)
    types = sorted(inst.pool_types)
    P = penalty(inst)
    groups: dict[int, list[tuple[int, float, tuple]]] = {i: [] for i in range(n)}  # lowest member -> (mask, cost, nodes)
    for members, _c, cost, use in feasible_groups(inst):
        groups[members[0]].append((sum(1 << i for i in members), cost, use))

    return _subset_dp(n, {i: undominated(g) for i, g in groups.items()}, P, tuple(inst.pool_types[t].count for t in types))


def distinct_oracle(inst: PlacementInstance) -> tuple[float, int]:
    """(optimal cost + penalty x unplaced, unplaced) for instances of distinct jobs with tight SLOs.

    Independent of the optimisers: groups are grown member by member (a group that breaks a
    necessary condition -- the members' rollout seconds, or their training + sync seconds, add up
    to more than the smallest SLO: each pool's ring alone takes that long -- or the DRAM, cannot
    become feasible by adding members), and every candidate is decided by Howard's cycle times on
    the whole pools (:func:`group_feasible`). The optimum is a DP over the jobs left and the nodes
    left per type, like :func:`oracle`.
    """
    n = len(inst.jobs)
    types = sorted(inst.pool_types)
    P = penalty(inst)
    confs = configs_of(inst)
    jobs = inst.jobs

    def necessary(members, c) -> bool:
        p, nr, q, nt, m, own = _six(c)
        lim = min(jobs[i].slo_s for i in members) * (1 + 1e-9)
        if own:  # the members' own counts: each a rollout of its own, the training ring shared
            counts = [own_count(inst, i, c) for i in members]
            if any(x is None for x in counts) or sum(counts) > nr:  # type: ignore[misc]
                return False
            ra = [jobs[i].rollout_s.get(p, {}).get(x) for i, x in zip(members, counts)]
        else:
            ra = [jobs[i].rollout_s.get(p, {}).get(nr) for i in members]
        tb = [jobs[i].train_s.get(q, {}).get(nt) for i in members]
        if any(x is None for x in ra + tb) or (m and len(members) > m):
            return False
        if (not m and sum(ra) > lim) or sum(b + jobs[i].sync(p, q) for b, i in zip(tb, members)) > lim:  # type: ignore[operator]
            return False
        if sum(jobs[i].dram_rollout_node_gb for i in members) > inst.pool_types[p].dram_gb * (1 + 1e-9) * (max(1, len(members)) if m else 1):
            return False
        return sum(jobs[i].train_state_gb for i in members) / nt <= inst.pool_types[q].dram_gb * (1 + 1e-9)

    groups: dict[int, list[tuple[int, float, tuple]]] = {i: [] for i in range(n)}
    stack = [((i,), [c for c in confs if necessary((i,), c)]) for i in range(n)]
    while stack:
        members, cands = stack.pop()
        if not cands:
            continue
        for c in cands:
            if group_feasible(inst, members, c):
                groups[members[0]].append((sum(1 << i for i in members), config_cost(inst, c), config_use(inst, c)))
        for nxt in range(members[-1] + 1, n):
            more = members + (nxt,)
            keep = [c for c in cands if necessary(more, c)]
            if keep:
                stack.append((more, keep))

    return _subset_dp(n, {i: undominated(g) for i, g in groups.items()}, P, tuple(inst.pool_types[t].count for t in types))


def undominated(groups: list[tuple[int, float, tuple]]) -> list[tuple[int, float, tuple]]:
    """``groups`` without those another group of the same members makes redundant (no dearer, no more
    nodes of any type): an optimum using a dropped one uses the other instead at no higher cost."""
    out: list[tuple[int, float, tuple]] = []
    for mask, c, use in sorted(set(groups), key=lambda g: (g[0], g[1], g[2])):
        if not any(m == mask and oc <= c and all(a <= b for a, b in zip(ou, use)) for m, oc, ou in out):
            out.append((mask, c, use))
    return out


def _subset_dp(n: int, groups: dict, P: float, fleet: tuple) -> tuple[float, int]:
    """The DP of :func:`distinct_oracle`: the cheapest cover of the jobs by ``groups`` (lowest member ->
    ``(mask, $/h, nodes per type)``) within ``fleet``, a job left out costing ``P``; each state's candidate
    groups are filtered as arrays (members still to place, nodes still left), then recursed into one by one."""
    arrs = {}
    for low, gs in groups.items():
        arrs[low] = (np.array([g[0] for g in gs], dtype=object), np.array([g[1] for g in gs], dtype=float),
                     np.array([g[2] for g in gs], dtype=np.int64).reshape(len(gs), len(fleet)))

    @lru_cache(maxsize=None)
    def best(remaining: int, left: tuple) -> tuple[float, int]:
        if remaining == 0:
            return (0.0, 0)
        low = (remaining & -remaining).bit_length() - 1
        cost, unpl = best(remaining & ~(1 << low), left)
        out = (cost + P, unpl + 1)
        masks, costs, uses = arrs[low]
        if not len(costs):
            return out
        fits = (uses <= np.array(left)).all(axis=1)
        for i in np.flatnonzero(fits).tolist():
            mask = masks[i]
            if mask & ~remaining:
                continue
            sub = best(remaining & ~mask, tuple(lim - int(u) for lim, u in zip(left, uses[i])))
            if sub[0] + costs[i] < out[0] - 1e-9:
                out = (sub[0] + float(costs[i]), sub[1])
        return out

    return best((1 << n) - 1, fleet)


def placeable_sub(inst: PlacementInstance):
    """The instance without the jobs no group of their own fits, and its index (the flat packings' tests)."""
    from formulation.placement.evaluate import Index
    from formulation.placement.explain import placeable_alone

    idx = Index(inst)
    keep = np.flatnonzero(placeable_alone(idx))
    sub_inst = inst.model_copy(update={"jobs": [inst.jobs[j] for j in keep]})
    return sub_inst, idx.restrict(sub_inst, keep)


def assert_same_packing_and_valid(sub_inst: PlacementInstance, sub, flat, per_pair, tag=None) -> None:
    """A flat packing is the per-pair one (the same groups, listed in another order: by opening there, by pair
    here), places every job once, each group Howard-feasible and the plan valid under the solver-free checker."""
    from formulation.placement.check import check
    from formulation.placement.explain import explain
    from formulation.placement.plan import build_plan

    assert sorted(j for g in flat.groups for j in g.members) + flat.unplaced == sorted(range(sub.n))
    assert sorted((g.config, g.members) for g in flat.groups) == sorted((g.config, g.members) for g in per_pair.groups)
    for g in flat.groups:
        assert not sub.configs[g.config].pinned
        assert group_feasible(sub_inst, g.members, sub.configs[g.config]), (tag, g)
    assert check(sub_inst, build_plan(sub, flat, [explain(sub, j) for j in flat.unplaced])) == []
