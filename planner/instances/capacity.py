"""Scenario → :class:`formulation.capacity.instance.CapacityInstance` (capacity planning).

The fleet: for each GPU type with a node group, the nodes that group(s) have today (``count``,
*owned*) and the most that can be bought or rented on top (``gpu_types.<T>.max_nodes``; a type
without ``max_nodes`` can be bought without limit, which this compiler bounds by what the
forecast could ever use: ``UNLIMITED_NODES_PER_JOB`` nodes per job). New nodes take the shape
(GPUs per node, host DRAM, cluster) of the type's first node group and are named
``<group>-new-<i>``.

The forecast's placement tables are compiled by :mod:`planner.instances.placement` on the
largest fleet allowed (so pool sizes go up to the availability). The colocated tables (rollout
and training on the same ``n`` nodes of one type, one after the other) reuse the same estimator
figures on that pool — rollout seconds and training seconds at ``n`` nodes — plus the in-place
weight reshard: :func:`estimators.comm.weight_sync_s` with no cluster boundary to cross (an
all-gather across the pool's nodes and an NVLink broadcast inside each node). Neither style
counts job switches (warm switches between co-execution members, offload and reload between a
colocated job's phases): the comparison is on the same footing.

A type may be colocated for a job only where both its rollout and its trainer allow it.
"""

from __future__ import annotations

import math

from estimators import comm
from formulation.capacity.instance import CapacityInstance, ColocatedTimes
from planner.errors import Problem, UserError
from planner.instances.common import ClusterView, job_profile, resolve_gpu_types
from planner.instances.placement import compile_scenario
from planner.schema.scenario import MAX_NODES, NodeGroupSpec, Scenario

UNLIMITED_NODES_PER_JOB = 16  # a job never uses more than a rollout pool and a training pool of 8 nodes each


def fleet_limits(sc: Scenario) -> dict[str, tuple[int, int]]:
    """(owned, availability) per GPU type of the cluster; raises a UserError for a priced type with no node group."""
    owned: dict[str, int] = {}
    for g in sc.cluster.node_groups:
        owned[g.gpu_type] = owned.get(g.gpu_type, 0) + g.count
    problems = []
    for t, spec in sc.gpu_types.items():
        if spec.max_nodes is not None and t not in owned:
            problems.append(Problem(f"gpu_types.{t}.max_nodes",
                                    f"{t} can be bought (max_nodes: {spec.max_nodes}) but no node group says what its nodes are like",
                                    f"add a node group with gpu_type: {t} and count: 0 (its gpus_per_node, host_dram_gb and cluster)"))
    if problems:
        raise UserError(problems, title=f"{sc.name}: cannot plan the fleet")
    out = {}
    for t, n in owned.items():
        known = sc.gpu_types.get(t)
        # without a limit: what the jobs could use, at most the schema's largest node group (MAX_NODES)
        extra = (known.max_nodes if known is not None and known.max_nodes is not None
                 else min(MAX_NODES, UNLIMITED_NODES_PER_JOB * max(1, len(sc.jobs))))
        out[t] = (n, n + extra)
    return out


def unlimited_types(sc: Scenario) -> set[str]:
    """The fleet's GPU types with no ``max_nodes``: bought without limit (their availability in the
    compiled instance is only :func:`fleet_limits`' bound on what the forecast could use, no limit to report)."""
    return {t for t in fleet_limits(sc) if sc.gpu_types.get(t) is None or sc.gpu_types[t].max_nodes is None}


def largest_fleet(sc: Scenario) -> Scenario:
    """The scenario with every type at its availability: a ``<group>-new`` node group per type."""
    limits = fleet_limits(sc)
    groups = list(sc.cluster.node_groups)
    names = {g.name for g in groups}
    for t, (owned, limit) in sorted(limits.items()):
        if limit <= owned:
            continue
        first = next(g for g in groups if g.gpu_type == t)
        name = f"{first.name}-new"
        while name in names:
            name += "x"
        names.add(name)
        groups.append(NodeGroupSpec(name=name, gpu_type=t, count=limit - owned, gpus_per_node=first.gpus_per_node,
                                    host_dram_gb=first.host_dram_gb, cluster=first.cluster))
    cluster = sc.cluster.model_copy(update={"node_groups": groups})
    return sc.model_copy(update={"cluster": cluster})


def compile_capacity(sc: Scenario, mode: str | None = None) -> CapacityInstance:
    limits = fleet_limits(sc)
    big = largest_fleet(sc)
    placement = compile_scenario(big, mode, parallel=True)
    view = ClusterView(big, resolve_gpu_types(big))
    colocated: dict[str, dict[str, dict[int, ColocatedTimes]]] = {}
    for spec, job in zip(big.jobs, placement.jobs):
        prof = job_profile(spec)
        weight_bytes = prof.model.num_params * 2.0
        rows = {}
        for t in sorted(set(job.rollout_s) & set(job.train_s)):
            row = {}
            for n in sorted(set(job.rollout_s[t]) & set(job.train_s[t])):
                pool = view.pool(t, n)
                links = comm.SyncLinks(math.inf, math.inf, None)
                reshard = comm.weight_sync_s(weight_bytes, max(1, pool.gpus // spec.rollout.tp), n, pool.gpu, links, "scatter_broadcast")
                row[n] = ColocatedTimes(rollout_s=job.rollout_s[t][n], train_s=job.train_s[t][n], sync_s=reshard)
            if row:
                rows[t] = row
        if rows:
            colocated[job.name] = rows
    owned = {t: o for t, (o, _) in limits.items() if o}
    return CapacityInstance(name=sc.name, placement=placement, owned=owned, budget_per_hour=sc.budget_per_hour, colocated=colocated,
                            unlimited=sorted(unlimited_types(sc)))
