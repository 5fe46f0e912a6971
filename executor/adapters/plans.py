"""From the planners' plan bodies to the executor's target state (:mod:`executor.target`).

* **ReallocPlan** (in-iteration reallocation, DynaRL): for each component whose allocation
  changes, ``to_workers`` gives the workers per node and their GPUs, ``migration_kind`` the
  migration. Components keep their names as ``<job>/<component>``; every component the plan
  does not touch stays as observed. A trainer's new layout keeps the observed TP and PP and
  takes DP from the GPU count (one rank per GPU); a count that TP x PP does not divide is
  refused. A plan that was not committed is refused: there is nothing to apply.
* **PlacementPlan** (co-execution groups, Weave): members of a group share its rollout and
  training pools in turn (round-robin), and each member's weights and optimizer state stay
  resident in host DRAM on the nodes it is pinned to. So each group becomes two pool
  components (``<group>/rollout-pool``, ``<group>/train-pool``: one worker per pool node holding
  every GPU of the node) and each member two resident-state components (``<job>/rollout``,
  ``<job>/trainer``: one worker per pinned node, no GPUs, the job's host DRAM per node from the
  scenario's estimates). Moving a member's resident state is a cold start: reboot.

Both bodies are read as plain dictionaries (the planners' pydantic models live in their own
packages); a missing field is reported with its path and the fix.
"""

from __future__ import annotations

from typing import Any, Optional

from planner.errors import Problem, UserError

from executor.state import ClusterState
from executor.target import ExecutorTarget, from_state

ROLE_OF_KIND = {"rollout": "rollout", "trainer": "trainer", "critic": "trainer"}


def _need(d: dict, key: str, where: str) -> Any:
    if key not in d:
        raise UserError(Problem(f"{where}.{key}", "missing", "pass a plan written by this rl-planner's planner"))
    return d[key]


def from_realloc(body: dict, observed: ClusterState) -> ExecutorTarget:
    if not _need(body, "committed", "body"):
        raise UserError(Problem("body.committed", f"the reallocation was not committed ({body.get('reason', 'no reason given')})",
                                "nothing to apply; re-plan when the planner commits a change"))
    job = _need(body, "job", "body")
    cur = from_state(observed)
    comps = {c["name"]: c for c in cur["components"]}
    for i, a in enumerate(_need(body, "allocation", "body")):
        where = f"body.allocation[{i}]"
        name = f"{job}/{_need(a, 'component', where)}"
        kind = _need(a, "kind", where)
        role = ROLE_OF_KIND.get(kind, "service")
        workers = _need(a, "to_workers", where)
        placement: dict[str, int] = {}
        sizes = {w["gpus"] for w in workers}
        types = {w["gpu_type"] for w in workers}
        if role == "trainer":
            for w in workers:
                placement[w["node"]] = placement.get(w["node"], 0) + w["gpus"]
            gpw = 1
        else:
            if len(sizes) > 1:
                raise UserError(Problem(f"{where}.to_workers", f"workers of {name} have different sizes {sorted(sizes)} GPUs",
                                        "give every worker of a component the same GPU count"))
            for w in workers:
                placement[w["node"]] = placement.get(w["node"], 0) + 1
            gpw = sizes.pop() if sizes else 1
        c = comps.get(name)
        if c is None:
            raise UserError(Problem(where, f"component {name} does not run on this cluster",
                                    "apply the job's placement first, or check the plan's job name"))
        c = dict(c, placement=placement, gpus_per_worker=gpw, migration=_need(a, "migration_kind", where))
        if len(types) == 1:
            c["gpu_type"] = types.pop()
        if role == "trainer":
            lay = dict(c["layout"])
            world = sum(placement.values())
            if world % (lay["tp"] * lay["pp"]):
                raise UserError(Problem(f"{where}.to_workers", f"{world} trainer GPUs are not a multiple of tp*pp = {lay['tp'] * lay['pp']}",
                                        "allocate whole TP x PP replicas"))
            lay["dp"] = world // (lay["tp"] * lay["pp"])
            c["layout"] = lay
        comps[name] = c
    cur["components"] = list(comps.values())
    return ExecutorTarget.model_validate(cur)


def scenario_nodes(scenario) -> list[dict]:
    """Node inventory named as the placement planner names them: ``<type>-<i>`` per GPU type."""
    out, seen = [], {}
    for g in scenario.cluster.node_groups:
        for _ in range(g.count):
            i = seen.get(g.gpu_type, 0)
            seen[g.gpu_type] = i + 1
            out.append({"name": f"{g.gpu_type.lower()}-{i}", "gpu_type": g.gpu_type, "gpus": g.gpus_per_node,
                        "dram_gb": g.host_dram_gb})
    return out


def from_placement(body: dict, scenario, dram: Optional[dict[str, tuple[float, float]]] = None) -> ExecutorTarget:
    """``dram``: job -> (GB per rollout node, GB per training node); default from the estimators."""
    if dram is None:
        from planner.instances.common import ClusterView, estimate_job, resolve_gpu_types

        view = ClusterView(scenario, resolve_gpu_types(scenario))
        dram = {}
        for job in scenario.jobs:
            est = estimate_job(job, view)
            dram[job.name] = (est.dram_rollout_node_gb, est.dram_train_node_gb)
    nodes = scenario_nodes(scenario)
    comps = []
    for gi, g in enumerate(_need(body, "groups", "body")):
        where = f"body.groups[{gi}]"
        gid = _need(g, "id", where)
        for pool, key in (("rollout-pool", "rollout_pool"), ("train-pool", "train_pool")):
            p = _need(g, key, where)
            comps.append({"name": f"{gid}/{pool}", "role": "service", "gpu_type": p["gpu_type"], "gpus_per_worker": p["gpus_per_node"],
                          "dram_gb_per_worker": 0.0, "placement": {n: 1 for n in p["nodes"]}, "migration": "reboot"})
        for mi, m in enumerate(_need(g, "members", where)):
            job = _need(m, "job", f"{where}.members[{mi}]")
            if job not in dram:
                raise UserError(Problem(f"{where}.members[{mi}].job", f"job {job!r} is not in the scenario",
                                        "pass the scenario the plan was made from (--scenario)"))
            r_gb, t_gb = dram[job]
            comps.append({"name": f"{job}/rollout", "role": "service", "gpus_per_worker": 0, "dram_gb_per_worker": r_gb,
                          "placement": {n: 1 for n in m["rollout_nodes"]}, "migration": "reboot"})
            comps.append({"name": f"{job}/trainer", "role": "service", "gpus_per_worker": 0, "dram_gb_per_worker": t_gb,
                          "placement": {n: 1 for n in m["train_nodes"]}, "migration": "reboot"})
    return ExecutorTarget.model_validate({"nodes": nodes, "components": comps})
