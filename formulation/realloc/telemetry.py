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

from collections import Counter
from typing import Annotated, Literal, Optional

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, model_validator

from estimators.fields import NumInt as Int  # numbers that refuse booleans (true/false) and strings ("2"), shared
from estimators.fields import NumReal as Real

ComponentKind = Literal["rollout", "reference", "critic", "reward", "tool_agent", "trainer"]

# DynaRL: components whose throughput curve is concave in their GPUs ("dynamic": generation
# engines whose batches thin out) versus linear ("static": data-parallel forward/backward).
DYNAMIC_KINDS = frozenset({"rollout", "tool_agent"})



Name = Annotated[str, Field(min_length=1, max_length=200)]

# Bounds that keep any snapshot that validates cheap to plan on (the HTTP API and files alike).
MAX_WORKERS = 4096
MAX_COMPONENTS = 64
MAX_NODES = 4096
MAX_GPUS = 64          # GPUs of one node (and of one worker)
MAX_TOKENS = 1e15      # KV tokens, work left
MAX_RATE = 1e20        # tokens/s, work items/s (the simulator reports FLOP-scale items)
MAX_COUNT = 1 << 30    # requests, queue depth, iterations
MAX_TIME_S = 1e9


class _Strict(BaseModel):
    """Unknown keys are errors, numbers are finite (JSON ``Infinity``/``NaN`` refused) and a
    boolean is not a number."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)


class WorkerTelemetry(_Strict):
    worker_id: Name = Field(description="the worker's id (unique in the snapshot)")
    component: Name = Field(description="the component it belongs to (a name under components)")
    node: Name = Field(description="the node it runs on")
    gpu_type: Name = Field(description="its node's GPU type")
    gpus: Int = Field(1, ge=1, le=MAX_GPUS, description="GPUs it holds")
    kv_used_tokens: Real = Field(0.0, ge=0.0, le=MAX_TOKENS, description="KV-cache tokens in use (rollout engines)")
    kv_capacity_tokens: Real = Field(1.0, gt=0.0, le=MAX_TOKENS, description="KV-cache capacity, tokens")
    queue_depth: Int = Field(0, ge=0, le=MAX_COUNT, description="requests waiting for a slot")
    tokens_per_s: Real = Field(0.0, ge=0.0, le=MAX_RATE, description="decode throughput now")
    requests_in_flight: Int = Field(0, ge=0, le=MAX_COUNT, description="requests being generated")

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
    name: Name = Field(description="the component's name (unique in the snapshot)")
    kind: ComponentKind = Field(description="what it does (rollout and tool_agent are dynamic, the others static)")
    progress: Real = Field(0.0, ge=0.0, le=1.0, description="fraction of this iteration's work done")
    interruptible: bool = Field(True, description="at an interruptible point now (a migration may start)")
    throughput: Optional[Real] = Field(None, ge=0.0, le=MAX_RATE, description="work items per second, when the component reports it")
    remaining_tokens: Optional[Real] = Field(None, ge=0.0, le=MAX_TOKENS,
                                             description="tokens of work it has left this iteration, when it knows")


class NodeTelemetry(_Strict):
    node: Name = Field(description="the node's name")
    gpu_type: Name = Field(description="its GPU type")
    gpus: Int = Field(ge=1, le=MAX_GPUS, description="GPUs the node has (busy or free)")
    cluster: Name = Field("default", description="network fabric the node sits in")


class TelemetrySnapshot(_Strict):
    version: Literal[1] = Field(1, description="snapshot format version")
    job: Name = Field(description="the job reporting")
    time_s: Real = Field(ge=0.0, le=MAX_TIME_S, description="seconds since the iteration started (monotonic per job)")
    iteration: Int = Field(0, ge=0, le=MAX_COUNT, description="the iteration number")
    components: list[ComponentTelemetry] = Field(min_length=1, max_length=MAX_COMPONENTS, description="the job's GPU components")
    workers: list[WorkerTelemetry] = Field(min_length=1, max_length=MAX_WORKERS, description="every worker of those components")
    nodes: Optional[list[NodeTelemetry]] = Field(None, max_length=MAX_NODES,
                                                 description="node capacities; omitted: only the GPUs workers hold are known")
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
        held: dict[str, int] = {}
        for w in self.workers:
            if node_type.setdefault(w.node, w.gpu_type) != w.gpu_type:
                raise ValueError(f"node {w.node} reports GPU types {node_type[w.node]} and {w.gpu_type}; a node has one GPU type")
            held[w.node] = held.get(w.node, 0) + w.gpus
        full = [f"{k} ({v})" for k, v in held.items() if v > MAX_GPUS]
        if full:  # (with nodes declared, each at most MAX_GPUS, the check below says it too)
            raise ValueError(f"workers hold more GPUs on one node than any node has (at most {MAX_GPUS}): {', '.join(full)}")
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
