"""Small capacity instances and exhaustive oracles over fleets, for the what-if tests.

The oracles never call a solver: a group's feasibility comes from Howard's cycle times
(``placement_helpers.group_feasible``), every fleet between the owned nodes and the availability
is tried in order of cost, and a fleet serves the forecast when a depth-first search can split
the jobs into feasible groups that fit it.
"""

from __future__ import annotations

import itertools
from functools import lru_cache

import numpy as np

from formulation.capacity.instance import CapacityInstance, ColocatedTimes
from formulation.placement.cycle import Member, cycle_times
from tests.placement.placement_helpers import config_use, configs_of, group_feasible, small_instance


def capacity_instance(seed: int, n_jobs: int, limits=(4, 4), owned=(0, 0), budget=None, both_types: bool = False,
                      dram=(2048.0, 2048.0)) -> CapacityInstance:
    """``n_jobs`` random jobs on types A ($1/GPU-h) and B ($2/GPU-h), 8 GPUs a node, pool sizes 1-2;
    colocated tables on both types at 1 and 2 nodes."""
    pinst = small_instance(seed, n_jobs, capacity=limits, dram_gb=dram, both_types=both_types)
    rng = np.random.default_rng(1000 + seed)
    colocated = {}
    for job in pinst.jobs:
        rows = {}
        for t in ("A", "B"):
            a1 = min(min(r.values()) for r in job.rollout_s.values()) * float(rng.uniform(0.7, 1.5))
            b1 = min(min(r.values()) for r in job.train_s.values()) * float(rng.uniform(0.7, 1.5))
            slow = 2.0 if t == "A" else 1.0  # A (the cheap rollout type) trains slowly
            rows[t] = {n: ColocatedTimes(rollout_s=round(a1 / n ** 0.8, 3), train_s=round(slow * b1 / n ** 0.9, 3), sync_s=0.5)
                       for n in (1, 2)}
        colocated[job.name] = rows
    own = {t: n for t, n in zip(("A", "B"), owned) if n}
    return CapacityInstance(name=f"cap-{seed}", placement=pinst, owned=own, budget_per_hour=budget, colocated=colocated)


#: :func:`feasible_groups` by (instance JSON, solo), in this process: the brute force is what the oracles
#: cost, and several tests (and oracle calls within a test) ask it of one instance
_FEASIBLE: dict[tuple[str, bool], list] = {}


def feasible_groups(inst: CapacityInstance, solo: bool = False):
    """(mask, nodes per type) of every feasible group on the largest fleet; a list of the caller's own
    (computed once per instance, :data:`_FEASIBLE`)."""
    key = (inst.model_dump_json(), solo)
    if key not in _FEASIBLE:
        _FEASIBLE[key] = _feasible_groups(inst, solo)
    return list(_FEASIBLE[key])


def _feasible_groups(inst: CapacityInstance, solo: bool) -> list:
    p = inst.placement
    types = inst.types
    out = []
    n = len(p.jobs)
    for size in (1,) if solo else range(1, n + 1):
        for members in itertools.combinations(range(n), size):
            for c in configs_of(p):
                if group_feasible(p, members, c):  # a pinned configuration's rollout pool is m blocks of its own
                    use = config_use(p, c)
                    assert len(use) == len(types)
                    out.append((sum(1 << i for i in members), tuple(use)))
    return out


def serves(groups, n_jobs: int, fleet: tuple) -> bool:
    """Can the jobs be split into feasible groups that fit ``fleet``?"""
    by_low: dict[int, list] = {}
    for mask, use in groups:
        by_low.setdefault((mask & -mask).bit_length() - 1, []).append((mask, use))

    @lru_cache(maxsize=None)
    def ok(remaining: int, left: tuple) -> bool:
        if remaining == 0:
            return True
        low = (remaining & -remaining).bit_length() - 1
        for mask, use in by_low.get(low, []):
            if mask & ~remaining or any(u > lim for u, lim in zip(use, left)):
                continue
            if ok(remaining & ~mask, tuple(lim - u for lim, u in zip(left, use))):
                return True
        return False

    return ok((1 << n_jobs) - 1, tuple(fleet))


def fleets(inst: CapacityInstance, limits: dict | None = None):
    """Every fleet between the owned nodes and the limits, cheapest first: (cost, fleet tuple)."""
    types = inst.types
    ranges = [range(inst.owned_nodes(t), (limits or {}).get(t, inst.limit(t)) + 1) for t in types]
    out = []
    for f in itertools.product(*ranges):
        out.append((inst.fleet_cost(dict(zip(types, f))), f))
    out.sort()
    return out


def cheapest_fleet(inst: CapacityInstance, solo: bool = False):
    """(cost, fleet) of the cheapest fleet within the limits and the budget that serves every job, or None."""
    groups = feasible_groups(inst, solo)
    for cost, f in fleets(inst):
        if inst.budget_per_hour is not None and cost > inst.budget_per_hour + 1e-9:
            break
        if serves(groups, len(inst.placement.jobs), f):
            return cost, dict(zip(inst.types, f))
    return None


def fewest_nodes(inst: CapacityInstance, t: str, limits: dict | None = None):
    """The fewest nodes of ``t`` in any fleet within the limits that serves every job (no budget), or None."""
    groups = feasible_groups(inst)
    types = inst.types
    best = None
    for _, f in fleets(inst.model_copy(update={"owned": {}}), limits):
        if (best is None or f[types.index(t)] < best) and serves(groups, len(inst.placement.jobs), f):
            best = f[types.index(t)]
    return best


def cheapest_colocated(inst: CapacityInstance):
    """(cost, type) by trying every choice of pool size for every job on every type."""
    best = None
    jobs = inst.placement.jobs
    for t in inst.types:
        options = []
        for job in jobs:
            row = inst.colocated.get(job.name, {}).get(t, {})
            options.append([n for n, tm in row.items()
                            if cycle_times([Member(job.name, tm.rollout_s, tm.train_s, tm.sync_s, frozenset(["x"]), frozenset(["x"]))]).period
                            <= job.slo_s * (1 + 1e-9)])
        for choice in itertools.product(*options):
            total = sum(choice)
            if total > inst.limit(t):
                continue
            cost = inst.fleet_cost({t: total})
            if inst.budget_per_hour is not None and cost > inst.budget_per_hour + 1e-9:
                continue
            if best is None or cost < best[0] - 1e-9:
                best = (cost, t)
    return best
