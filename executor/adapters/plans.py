"""From a reallocation plan body to the executor's target state (:mod:`executor.target`).

**ReallocPlan** (in-iteration reallocation, DynaRL): for each component whose allocation
changes, ``to_workers`` gives the workers per node and their GPUs, ``migration_kind`` the
migration. The plan's components are the job's components as the executor runs them
(``<job>/<component>``; telemetry reports ``<component>`` and the executor's worker ids), and
every component the plan does not touch stays as observed. Engines: the plan's kept workers
(``to_workers`` not marked ``new``) are the ones kept, the rest of the component's engines are
released (the planner chose them: emptiest first), and new engines are started where it says.
A trainer's new layout keeps the observed TP and PP and takes DP from the GPU count (one rank per
GPU); a count that TP x PP does not divide is refused. A plan that was not committed is refused:
there is nothing to apply.

Everything the plan names must exist here: every node (``to_workers[].node``) must be a node of
this cluster — the reallocation planner names the nodes its snapshot declares, so a snapshot must
declare the nodes as the executor names them — and every kept worker a running worker of its
component; anything else is refused with the field and the fix.

The body is read as a plain dictionary (the planner's pydantic model lives in its own package);
a missing field is reported with its path and the fix. The adapter for placement plans needs the
scenario and lives in the planner (:mod:`planner.apply.placement`).
"""

from __future__ import annotations

from typing import Any

from estimators.errors import Problem, UserError, did_you_mean

from executor.state import ALLOWED_MIGRATIONS, ClusterState
from executor.target import ExecutorTarget, from_state


def _need(d: dict, key: str, where: str) -> Any:
    if key not in d:
        raise UserError(Problem(f"{where}.{key}", "missing", "pass a plan written by this rl-planner's planner"))
    return d[key]


def _check_workers(name: str, workers: list, observed: ClusterState, where: str) -> list[str]:
    """The kept workers' ids, after checking every node and kept worker the plan names exists here."""
    comp = observed.components[name]
    running = {w.id: w for w in comp.live_workers() if w.status == "running"}
    kept = []
    for k, w in enumerate(workers):
        node = _need(w, "node", f"{where}.to_workers[{k}]")
        if node not in observed.nodes:
            raise UserError(Problem(f"{where}.to_workers[{k}].node", f"node {node!r} is not a node of this cluster."
                                    f"{did_you_mean(node, observed.nodes)} (nodes: {', '.join(sorted(observed.nodes)[:8])}"
                                    f"{', ...' if len(observed.nodes) > 8 else ''})",
                                    "re-plan from a telemetry snapshot that declares the cluster's nodes ('nodes') under the names "
                                    "the executor reports ('planner status', GET /v1/cluster)"))
        if not w.get("new"):
            wid = _need(w, "worker_id", f"{where}.to_workers[{k}]")
            if wid not in running:
                raise UserError(Problem(f"{where}.to_workers[{k}].worker_id", f"worker {wid!r} is not a running worker of {name}."
                                        f"{did_you_mean(wid, running)}",
                                        "re-plan from telemetry that reports the executor's own worker ids ('planner status', "
                                        "GET /v1/cluster), or mark the worker new"))
            at = running[wid].node
            if node != at:  # a kept worker stays where it runs: a plan made on another view of the nodes moves other GPUs
                raise UserError(Problem(f"{where}.to_workers[{k}].node", f"worker {wid!r} of {name} runs on node {at!r}, not "
                                        f"{node!r}: the plan was made from telemetry that puts it on another node",
                                        "re-plan from telemetry that reports each worker on the node the executor runs it on "
                                        "('planner status', GET /v1/cluster)"))
            kept.append(wid)
    return kept


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
        c = comps.get(name)
        if c is None:
            mine = [n.split("/", 1)[1] for n in comps if n.startswith(f"{job}/")]
            raise UserError(Problem(f"{where}.component", f"component {name} does not run on this cluster"
                                    + (f" (job {job} runs: {', '.join(sorted(mine))})" if mine else ""),
                                    "apply the job's placement first, or post telemetry that names the job's components as the "
                                    "executor runs them"))
        workers = _need(a, "to_workers", where)
        kind = _need(a, "migration_kind", where)
        if kind not in ALLOWED_MIGRATIONS.get(c["role"], ()):
            raise UserError(Problem(f"{where}.migration_kind", f"{kind!r} cannot move {name} (a {c['role']} component)",
                                    f"use one of {', '.join(ALLOWED_MIGRATIONS[c['role']])}"))
        kept = _check_workers(name, workers, observed, where)
        placement: dict[str, int] = {}
        sizes = {w["gpus"] for w in workers}
        types = {w["gpu_type"] for w in workers}
        if c["role"] == "trainer":
            per_rank = max(1, int(c.get("gpus_per_worker") or 1))
            for w in workers:
                placement[w["node"]] = placement.get(w["node"], 0) + w["gpus"] // per_rank
            gpw = per_rank
        else:
            if len(sizes) > 1:
                raise UserError(Problem(f"{where}.to_workers", f"workers of {name} have different sizes {sorted(sizes)} GPUs",
                                        "give every worker of a component the same GPU count"))
            for w in workers:
                placement[w["node"]] = placement.get(w["node"], 0) + 1
            gpw = sizes.pop() if sizes else 1
        c = dict(c, placement=placement, gpus_per_worker=gpw, migration=kind)
        if c["role"] != "trainer":
            c["keep"] = kept
        c["gpu_type"] = types.pop() if len(types) == 1 else ""  # engines may span GPU types
        if c["role"] == "trainer":
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
