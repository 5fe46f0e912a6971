"""The telemetry snapshot: what a running RL job (or the simulator) reports about itself.

One snapshot is the state of one job's components at one instant::

    version: 1
    job: math-1.5b
    time_s: 812.5                 # seconds since the iteration started (monotonic per job)
    iteration: 42
    components:
      - {name: rollout, kind: rollout, progress: 0.81, interruptible: true}
      - {name: ref, kind: reference, progress: 0.10, interruptible: true}
      - {name: actor, kind: trainer, progress: 0.0, interruptible: false}
    workers:
      - {worker_id: r0, component: rollout, node: h100-0, gpu_type: H100, gpus: 1,
         kv_used_tokens: 5120, kv_capacity_tokens: 400000, queue_depth: 0,
         tokens_per_s: 310.0, requests_in_flight: 2}
    nodes:                        # optional: every node's capacity, so free GPUs are visible
      - {node: h100-0, gpu_type: H100, gpus: 8, cluster: default}

The HTTP API accepts it as JSON, ``planner realloc`` reads it from YAML or JSON, and the simulator
emits it. Validation rejects what a controller must never act on: a worker of an unknown
component, utilisation outside [0, 1], a component without workers, a node whose workers report
two GPU types, and (when ``nodes`` is given) a worker on an undeclared node or a node holding
more GPUs than it has.
"""

from __future__ import annotations

from typing import Literal, Optional

from collections import Counter

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, model_validator

ComponentKind = Literal["rollout", "reference", "critic", "reward", "tool_agent", "trainer"]

# DynaRL: components whose throughput curve is concave in their GPUs ("dynamic": generation
# engines whose batches thin out) versus linear ("static": data-parallel forward/backward).
DYNAMIC_KINDS = frozenset({"rollout", "tool_agent"})


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class WorkerTelemetry(_Strict):
    worker_id: str = Field(min_length=1)
    component: str = Field(min_length=1)
    node: str = Field(min_length=1)
    gpu_type: str = Field(min_length=1)
    gpus: int = Field(1, ge=1)
    kv_used_tokens: float = Field(0.0, ge=0.0)
    kv_capacity_tokens: float = Field(1.0, gt=0.0)
    queue_depth: int = Field(0, ge=0)
    tokens_per_s: float = Field(0.0, ge=0.0)
    requests_in_flight: int = Field(0, ge=0)

    @property
    def kv_utilization(self) -> float:
        return self.kv_used_tokens / self.kv_capacity_tokens

    @model_validator(mode="after")
    def _utilisation(self):
        if self.kv_used_tokens > self.kv_capacity_tokens * (1 + 1e-9):
            raise ValueError(f"kv_used_tokens ({self.kv_used_tokens:g}) exceeds kv_capacity_tokens ({self.kv_capacity_tokens:g}): "
                             "KV utilisation must lie in [0, 1]")
        return self


class ComponentTelemetry(_Strict):
    name: str = Field(min_length=1)
    kind: ComponentKind
    progress: float = Field(0.0, ge=0.0, le=1.0, description="fraction of this iteration's work done")
    interruptible: bool = Field(True, description="at an interruptible point now (a migration may start)")
    throughput: Optional[float] = Field(None, ge=0.0, description="work items per second, when the component reports it")
    remaining_tokens: Optional[float] = Field(None, ge=0.0, description="tokens of work it has left this iteration, when it knows")


class NodeTelemetry(_Strict):
    node: str = Field(min_length=1)
    gpu_type: str = Field(min_length=1)
    gpus: int = Field(ge=1, description="GPUs the node has (busy or free)")
    cluster: str = Field("default", min_length=1, description="network fabric the node sits in")


class TelemetrySnapshot(_Strict):
    version: Literal[1] = 1
    job: str = Field(min_length=1)
    time_s: float = Field(ge=0.0)
    iteration: int = Field(0, ge=0)
    components: list[ComponentTelemetry] = Field(min_length=1)
    workers: list[WorkerTelemetry] = Field(min_length=1)
    nodes: Optional[list[NodeTelemetry]] = Field(None, description="node capacities; omitted: only the GPUs workers hold are known")
    _by_component: Optional[tuple] = PrivateAttr(default=None)  # (the workers list it was built from, groups)

    @model_validator(mode="after")
    def _consistent(self):
        names = [c.name for c in self.components]
        dup = {n for n, k in Counter(names).items() if k > 1}
        if dup:
            raise ValueError(f"duplicate component names: {', '.join(sorted(dup))}")
        dup = {i for i, k in Counter(w.worker_id for w in self.workers).items() if k > 1}
        if dup:
            raise ValueError(f"duplicate worker ids: {', '.join(sorted(dup))}")
        known = set(names)
        for i, w in enumerate(self.workers):
            if w.component not in known:
                import difflib

                close = difflib.get_close_matches(w.component, names, n=1)
                hint = f" Did you mean '{close[0]}'?" if close else ""
                raise ValueError(f"workers[{i}] ({w.worker_id}) belongs to unknown component '{w.component}'.{hint} "
                                 f"Known components: {', '.join(names)}")
        with_workers = {w.component for w in self.workers}
        missing = [n for n in names if n not in with_workers]
        if missing:
            raise ValueError(f"component(s) without workers: {', '.join(missing)}; every component needs at least one worker")
        node_type: dict[str, str] = {}
        for w in self.workers:
            if node_type.setdefault(w.node, w.gpu_type) != w.gpu_type:
                raise ValueError(f"node {w.node} reports GPU types {node_type[w.node]} and {w.gpu_type}; a node has one GPU type")
        if self.nodes is not None:
            declared = {n.node: n for n in self.nodes}
            if len(declared) != len(self.nodes):
                raise ValueError("duplicate node names in nodes")
            used: dict[str, int] = {}
            for i, w in enumerate(self.workers):
                n = declared.get(w.node)
                if n is None:
                    raise ValueError(f"workers[{i}] ({w.worker_id}) runs on node '{w.node}', which nodes does not declare; "
                                     "add it to nodes or drop nodes")
                if n.gpu_type != w.gpu_type:
                    raise ValueError(f"workers[{i}] ({w.worker_id}) reports GPU type {w.gpu_type} on node {w.node}, "
                                     f"which nodes declares as {n.gpu_type}")
                used[w.node] = used.get(w.node, 0) + w.gpus
            over = [f"{k} ({v} > {declared[k].gpus})" for k, v in used.items() if v > declared[k].gpus]
            if over:
                raise ValueError(f"workers hold more GPUs than the node has: {', '.join(over)}")
        return self

    def workers_of(self, component: str) -> list[WorkerTelemetry]:
        """The component's workers, in snapshot order (a new list each call; grouped once)."""
        if self._by_component is None or self._by_component[0] is not self.workers:  # (a copy may carry another list)
            groups: dict[str, list] = {}
            for w in self.workers:
                groups.setdefault(w.component, []).append(w)
            self._by_component = (self.workers, groups)
        return list(self._by_component[1].get(component, ()))
