"""The ``ReallocPlan`` body: what a reallocation decision says, explicit enough to execute.

* ``donors``: every judged component with its evidence (engines low and for how long, U_low and
  where it came from);
* ``stages``: every component's candidates with their predicted stage throughput and migration
  (kind, seconds, bytes, cost), the chosen one marked;
* ``current_throughput``, ``predicted_throughput`` (of the chosen allocation), ``objective``
  (predicted minus migration cost), ``committed`` and ``reason`` (committed only when the objective
  beats the current throughput by ``margin``);
* ``allocation``: per component whose allocation changes, from-workers and to-workers (worker id,
  node, GPU type, GPUs; new workers are marked ``new``) and the migration kind;
* ``steps``: the migration steps in order, each with component, kind, node, GPU type, GPUs before
  and after, workers removed and added, predicted duration, bytes moved and cause.

The executor applies ``allocation`` and ``steps`` only when ``committed`` is true.
"""

from __future__ import annotations

from typing import Any, Optional

from pydantic import BaseModel, ConfigDict, Field


class _Body(BaseModel):
    model_config = ConfigDict(extra="forbid")


class DonorOut(_Body):
    component: str
    donor: bool
    engines: int
    engines_low: int
    engines_low_held: int
    fraction_held: float
    u_low: float
    u_low_source: str
    mean_kv_utilization: float
    low_since_s: Optional[float] = None
    cause: str


class CandidateOut(_Body):
    name: str
    gpus: dict[str, int] = Field(description="node -> GPUs")
    gpus_by_type: dict[str, int]
    predicted_throughput: float
    migration_kind: str
    migration_s: float
    migration_bytes: float
    migration_cost: float
    chosen: bool
    cause: str = ""


class StageOut(_Body):
    name: str
    kind: str
    dynamic: bool
    interruptible: bool
    donor: bool
    pipeline: bool = Field(True, description="counts in the bottleneck (false: its work this iteration is done)")
    unit_gpus: int
    curve_source: str = ""
    candidates: list[CandidateOut]


class WorkerRef(_Body):
    worker_id: str
    node: str
    gpu_type: str
    gpus: int
    new: bool = False


class ComponentAllocation(_Body):
    component: str
    kind: str
    migration_kind: str
    from_workers: list[WorkerRef]
    to_workers: list[WorkerRef]
    predicted_throughput_before: float
    predicted_throughput_after: float


class StepOut(_Body):
    order: int
    component: str
    kind: str = Field(description="workload | p2p | reboot")
    node: str
    gpu_type: str
    gpus_from: int
    gpus_to: int
    workers_removed: list[str] = Field(default_factory=list)
    workers_added: list[str] = Field(default_factory=list)
    duration_s: float
    bytes_moved: float
    cause: str


class ReallocPlan(_Body):
    job: str
    time_s: float
    iteration: int
    backend: str
    margin: float
    horizon_s: float
    throughput_unit: str = Field("tokens/s", description="tokens/s, or 1/s: fraction of the remaining work per second "
                                                         "(1 / throughput = seconds to finish)")
    donors: list[DonorOut]
    stages: list[StageOut]
    current_throughput: float
    predicted_throughput: float
    objective: float
    improvement: float = Field(description="objective / current throughput")
    committed: bool
    reason: str
    allocation: list[ComponentAllocation]
    steps: list[StepOut]
    timings_ms: dict[str, float] = Field(default_factory=dict)
    notes: list[str] = Field(default_factory=list)


# ------------------------------------------------------------------------------ from a decision
def _allocation(dec, s: int, c: int) -> tuple[ComponentAllocation, list[tuple[Any, StepOut]]]:
    from formulation.realloc.migrations import drain_order

    inst = dec.instance
    st = inst.stages[s]
    cand = st.candidates[c]
    node = dec.graph.nodes[st.name]
    before = [WorkerRef(worker_id=w.worker_id, node=w.node, gpu_type=w.gpu_type, gpus=w.gpus) for w in node.workers]
    removed: dict[str, list[str]] = {}
    added: dict[str, list[WorkerRef]] = {}
    cur = st.current.gpus
    for p in sorted(set(cur) | set(cand.gpus)):
        a, b = cur.get(p, 0), cand.gpus.get(p, 0)
        if b < a:
            freed, ids = 0, []
            for w in drain_order(node.workers, p):
                if freed >= a - b:
                    break
                ids.append(w.worker_id)
                freed += w.gpus
            removed[p] = ids
        elif b > a:
            t = inst.pool(p).gpu_type
            n = (b - a) // st.unit_gpus
            added[p] = [WorkerRef(worker_id=f"{st.name}@{p}#{i}", node=p, gpu_type=t, gpus=st.unit_gpus, new=True) for i in range(n)]
    gone = {i for ids in removed.values() for i in ids}
    after = [w for w in before if w.worker_id not in gone] + [w for refs in added.values() for w in refs]
    alloc = ComponentAllocation(component=st.name, kind=st.kind, migration_kind=cand.migration_kind, from_workers=before,
                                to_workers=after, predicted_throughput_before=inst.stage_throughput(s, 0),
                                predicted_throughput_after=inst.stage_throughput(s, c))
    steps = [(m, StepOut(order=0, component=st.name, kind=m.kind, node=m.pool, gpu_type=inst.pool(m.pool).gpu_type, gpus_from=m.gpus_from,
                     gpus_to=m.gpus_to, workers_removed=removed.get(m.pool, []),
                     workers_added=[w.worker_id for w in added.get(m.pool, [])], duration_s=m.duration_s, bytes_moved=m.bytes_moved,
                     cause=m.cause)) for m in cand.moves]
    return alloc, steps


def decision_body(dec) -> dict:
    inst = dec.instance
    stages = []
    for s, st in enumerate(inst.stages):
        cands = [CandidateOut(name=c.name, gpus={p: int(v) for p, v in sorted(c.gpus.items())}, gpus_by_type=inst.gpus_by_type(c),
                              predicted_throughput=inst.stage_throughput(s, i), migration_kind=c.migration_kind,
                              migration_s=c.migration_s, migration_bytes=c.migration_bytes, migration_cost=c.migration_cost,
                              chosen=i == dec.choice[s], cause=c.cause) for i, c in enumerate(st.candidates)]
        stages.append(StageOut(name=st.name, kind=st.kind, dynamic=st.dynamic, interruptible=st.interruptible, donor=st.donor,
                               pipeline=st.pipeline, unit_gpus=st.unit_gpus, curve_source=st.curve_source, candidates=cands))
    from formulation.realloc.migrations import order_moves

    allocation, pairs = [], []
    for s in dec.changed():
        a, st_steps = _allocation(dec, s, dec.choice[s])
        allocation.append(a)
        pairs += [(inst.stages[s].name, m, out) for m, out in st_steps]
    used: dict[str, int] = {}
    for st in inst.stages:
        for p, g in st.current.gpus.items():
            used[p] = used.get(p, 0) + g
    by_move = {(c, id(m)): out for c, m, out in pairs}
    ordered = order_moves([(c, m) for c, m, _ in pairs], {p.name: p.gpus for p in inst.pools}, used)
    steps = [by_move[(c, id(m))] for c, m in ordered]
    for i, step in enumerate(steps):
        step.order = i + 1
    body = ReallocPlan(
        job=dec.job, time_s=dec.time_s, iteration=dec.iteration, backend=dec.record.backend, margin=inst.margin,
        horizon_s=inst.horizon_s, throughput_unit=inst.unit, donors=[DonorOut(**{k: v for k, v in e.as_dict().items() if k != "time_s"}) for e in dec.donors],
        stages=stages, current_throughput=dec.current_throughput, predicted_throughput=dec.predicted_throughput,
        objective=dec.objective, improvement=(dec.objective / dec.current_throughput) if dec.current_throughput > 0 else 0.0,
        committed=dec.committed, reason=dec.reason, allocation=allocation, steps=steps,
        timings_ms={k: round(v, 3) for k, v in dec.timings_ms.items()}, notes=list(inst.notes),
    )
    return body.model_dump(mode="json")
