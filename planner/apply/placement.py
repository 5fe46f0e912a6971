"""A placement (co-execution groups, Weave) as the executor's target state.

Each group reserves every GPU of its pool nodes (one reservation component per node), and each
member runs its components inside them (:mod:`planner.apply.layout`): engines on its rollout
nodes, trainer ranks on its training nodes, the rest as its algorithm has them, plus its
resident state in host DRAM. Members of a group take turns on the reserved GPUs, so the executor
counts each member's GPUs against the reservation on its own (:mod:`executor.capacity`).

The plan body is read as a plain dictionary (``PlacementPlan``, or the daemon's placement in the
same shape); a missing field is reported with its path and the fix. Host DRAM per node comes
from the estimators unless the caller passes it (the daemon applies its drift-corrected view).
"""

from __future__ import annotations

from typing import Any, Callable, Optional

from executor.target import ExecutorTarget

from planner.apply.layout import Pools, job_components, reservations
from planner.errors import Problem, UserError
from planner.schema.scenario import JobSpec, Scenario


def _need(d: dict, key: str, where: str) -> Any:
    if key not in d:
        raise UserError(Problem(f"{where}.{key}", "missing", "pass a plan written by this rl-planner's planner"))
    return d[key]


def scenario_nodes(scenario: Scenario) -> list[dict]:
    """Node inventory named as the placement planner names them (``ClusterView.node_names``):
    ``<node group>-<i>`` for each node group in scenario order."""
    return [{"name": f"{g.name}-{i}", "gpu_type": g.gpu_type, "gpus": g.gpus_per_node, "dram_gb": g.host_dram_gb}
            for g in scenario.cluster.node_groups for i in range(g.count)]


def estimated_dram(scenario: Scenario, jobs: list[JobSpec]) -> dict[str, tuple[float, float]]:
    """job -> (GB per rollout node, GB per training node) of resident state, from the estimators."""
    from planner.instances.common import ClusterView, estimate_job, resolve_gpu_types

    view = ClusterView(scenario, resolve_gpu_types(scenario))
    out = {}
    for job in jobs:
        est = estimate_job(job, view)
        out[job.name] = (est.dram_rollout_node_gb, est.dram_train_node_gb)
    return out


def from_placement(body: dict, scenario: Scenario, dram: Optional[dict[str, tuple[float, float]]] = None,
                   spec_of: Optional[Callable[[str], Optional[JobSpec]]] = None) -> ExecutorTarget:
    """``dram``: job -> (GB per rollout node, GB per training node), default from the estimators;
    ``spec_of``: a job's spec by name, default the scenario's jobs."""
    specs = {j.name: j for j in scenario.jobs}
    spec_of = spec_of or specs.get
    comps: list[dict] = []
    wanted: list[JobSpec] = []
    members: list[tuple[str, dict, JobSpec, Pools]] = []
    for gi, g in enumerate(_need(body, "groups", "body")):
        where = f"body.groups[{gi}]"
        gid = _need(g, "id", where)
        rp, tp = _need(g, "rollout_pool", where), _need(g, "train_pool", where)
        pool_nodes = [(n, rp["gpu_type"], rp["gpus_per_node"]) for n in rp["nodes"]]
        pool_nodes += [(n, tp["gpu_type"], tp["gpus_per_node"]) for n in tp["nodes"] if n not in rp["nodes"]]
        comps += reservations(gid, pool_nodes)
        for mi, m in enumerate(_need(g, "members", where)):
            mw = f"{where}.members[{mi}]"
            job = _need(m, "job", mw)
            spec = spec_of(job)
            if spec is None:
                raise UserError(Problem(f"{mw}.job", f"job {job!r} is not in the scenario",
                                        "pass the scenario the plan was made from (--scenario)"))
            wanted.append(spec)
            members.append((mw, m, spec, Pools(gid, rp["gpu_type"], tuple(_need(m, "rollout_nodes", mw)), rp["gpus_per_node"],
                                         tp["gpu_type"], tuple(_need(m, "train_nodes", mw)), tp["gpus_per_node"])))
    dram = dict(dram or {})
    missing = [j for j in wanted if j.name not in dram]
    if missing:
        dram.update(estimated_dram(scenario, missing))
    for mw, _m, spec, pools in members:  # the spec looked up (and checked) above
        try:
            comps += job_components(spec, pools, dram[spec.name])
        except UserError as exc:
            raise UserError([Problem(mw, p.message, p.fix) for p in exc.problems]) from None
    return ExecutorTarget.model_validate({"nodes": scenario_nodes(scenario), "components": comps})
