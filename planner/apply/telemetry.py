"""A job's telemetry snapshot written from the executor's state: the same names on both sides.

The snapshot's components are the job's GPU components as the executor runs them
(:mod:`planner.apply.layout`: ``rollout``, ``reference``, ``critic``, ``trainer``), its workers
are the executor's workers (worker id, node, GPU type, GPUs), and it declares the nodes the job
may use: its co-execution group's reserved pool nodes with their GPUs (a reallocation stays inside
them). What the workers report (requests, KV cache, tokens/s, progress) comes from the caller:
the simulated cluster's model of an iteration (:func:`tail_loads`), a test, or a real job's
metrics. The reallocation planner's plan then names components, workers and nodes the executor
knows, and :func:`executor.adapters.plans.from_realloc` turns it into the executor's target.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Iterable, Mapping, Optional

from executor.state import ClusterState

# executor component name (after "<job>/") -> telemetry kind; CPU services (reward, tool sandbox)
# and resident state hold no GPUs and are not reported
KINDS = {"rollout": "rollout", "reference": "reference", "critic": "critic", "trainer": "trainer"}


@dataclass(frozen=True)
class EngineLoad:
    requests_in_flight: int = 0
    kv_used_tokens: float = 0.0
    tokens_per_s: float = 0.0
    queue_depth: int = 0


def job_nodes(st: ClusterState, job: str) -> list[str]:
    """Nodes a job may use: its group's reserved nodes (and any node its workers sit on)."""
    groups = {c.group for n, c in st.components.items() if n.startswith(f"{job}/") and c.group}
    out = {n for c in st.components.values() if c.reserves in groups for n in c.placement_counts()}
    out |= {w.node for n, c in st.components.items() if n.startswith(f"{job}/") for w in c.live_workers()}
    return sorted(out)


def job_snapshot(st: ClusterState, job: str, *, time_s: float, iteration: int, progress: Mapping[str, float],
                 loads: Optional[Mapping[str, EngineLoad]] = None, kv_capacity_tokens: float = 100_000.0,
                 interruptible: Optional[Mapping[str, bool]] = None, nodes: Optional[Iterable[str]] = None) -> dict:
    """The snapshot (as a dict, the API's JSON) of ``job``'s GPU components as ``st`` holds them.

    ``progress``: per component name, the fraction of this iteration's work done; ``loads``: per
    engine worker id, what it reports (idle when absent); ``nodes``: the nodes to declare (default
    :func:`job_nodes`)."""
    loads = loads or {}
    comps, workers = [], []
    for name, c in sorted(st.components.items()):
        prefix, _, part = name.partition("/")
        if prefix != job or part not in KINDS:
            continue
        live = [w for w in c.live_workers() if w.gpus > 0]
        if not live:
            continue
        comps.append({"name": part, "kind": KINDS[part], "progress": float(progress.get(part, 0.0)),
                      "interruptible": bool((interruptible or {}).get(part, True))})
        for w in sorted(live, key=lambda w: w.index):
            d = {"worker_id": w.id, "component": part, "node": w.node, "gpu_type": st.nodes[w.node].gpu_type, "gpus": w.gpus}
            if c.role == "rollout":
                ld = loads.get(w.id, EngineLoad())
                d.update(kv_used_tokens=min(ld.kv_used_tokens, kv_capacity_tokens), kv_capacity_tokens=kv_capacity_tokens,
                         requests_in_flight=ld.requests_in_flight, tokens_per_s=ld.tokens_per_s, queue_depth=ld.queue_depth)
            workers.append(d)
    declared = sorted(set(nodes) if nodes is not None else job_nodes(st, job))
    return {"version": 1, "job": job, "time_s": float(time_s), "iteration": int(iteration), "components": comps,
            "workers": workers, "nodes": [{"node": n, "gpu_type": st.nodes[n].gpu_type, "gpus": st.nodes[n].gpus} for n in declared]}


def tail_loads(engines: list[str], rollout_progress: float, max_batch: int = 16, tokens_per_request: float = 3000.0,
               step_ms: float = 25.0) -> dict[str, EngineLoad]:
    """A rollout at ``rollout_progress`` (0..1) of its requests done: the long tail thins out.

    The busy engines are the first ``ceil(E (1 - p)^2)``, each with ``max_batch (1 - p)`` requests
    (at least 2); the others hold one straggler each (KV nearly empty) — DynaRL's donors, once
    ``p`` is past about 0.5. Each request has ``tokens_per_request`` tokens cached; an engine decodes
    one token per request every ``step_ms``."""
    p = min(max(rollout_progress, 0.0), 1.0)
    busy = max(1, math.ceil(len(engines) * (1.0 - p) ** 2))
    out = {}
    for i, e in enumerate(engines):
        b = max(2, round(max_batch * (1.0 - p))) if i < busy else (1 if p < 1.0 else 0)
        out[e] = EngineLoad(b, b * tokens_per_request, b * 1000.0 / step_ms, 0)
    return out
