"""The component graph of one RL job, built from a telemetry snapshot.

Nodes are the job's components (rollout, reference/log-prob inference, critic, reward, tool
agent, trainer) with their kind — *dynamic* (throughput concave in GPUs: generation engines whose
batches thin out) or *static* (linear: data-parallel forward/backward) — whether they are at an
interruptible point now, their progress and their current workers (GPUs per node and GPU type).

Edges are the dataflow of an iteration: ``rollout → reward``, ``rollout → reference``,
``rollout → critic``, ``{reference, reward, critic} → trainer`` (``rollout → trainer`` when none
of those exists), and ``rollout ⇄ tool_agent`` for multi-turn jobs. Each edge carries the
producer's progress (how much of the iteration's data has flowed) and the *worker affinity* of
the pair: the nodes where both have workers, where a GPU moves between them without leaving the
node (NVLink) and where cached data stays local.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from formulation.realloc.telemetry import DYNAMIC_KINDS, TelemetrySnapshot, WorkerTelemetry

STATEFUL_KINDS = frozenset({"trainer", "critic"})  # optimizer state: moved peer-to-peer
SYNCHRONOUS_KINDS = frozenset({"trainer", "critic"})  # lock-step ranks: one GPU type per allocation

_DOWNSTREAM = {
    "rollout": ("reward", "reference", "critic", "tool_agent"),
    "tool_agent": ("rollout",),
    "reference": ("trainer",),
    "reward": ("trainer",),
    "critic": ("trainer",),
}


@dataclass
class ComponentNode:
    name: str
    kind: str
    dynamic: bool
    interruptible: bool
    progress: float
    workers: list[WorkerTelemetry]
    throughput: float | None = None

    @property
    def stateful(self) -> bool:
        return self.kind in STATEFUL_KINDS

    @property
    def gpus(self) -> int:
        return sum(w.gpus for w in self.workers)

    _by_node: dict | None = field(default=None, init=False, repr=False, compare=False)

    def gpus_by_node(self) -> dict[str, int]:
        """GPUs per cluster node (a new dict each call; counted once: the workers do not change)."""
        if self._by_node is None:
            out: dict[str, int] = {}
            for w in self.workers:
                out[w.node] = out.get(w.node, 0) + w.gpus
            self._by_node = out
        return dict(self._by_node)

    def gpu_types(self) -> list[str]:
        return sorted({w.gpu_type for w in self.workers})

    def observed_tokens_per_s(self) -> float:
        return sum(w.tokens_per_s for w in self.workers)


@dataclass(frozen=True)
class DataflowEdge:
    src: str
    dst: str
    progress: float  # the producer's progress: fraction of this iteration's data that has flowed
    shared_nodes: tuple[str, ...]  # worker affinity: nodes where both have workers

    @property
    def affinity(self) -> bool:
        return bool(self.shared_nodes)


@dataclass
class ComponentGraph:
    job: str
    time_s: float
    iteration: int
    nodes: dict[str, ComponentNode]
    edges: list[DataflowEdge] = field(default_factory=list)
    node_gpu_type: dict[str, str] = field(default_factory=dict)  # cluster node -> GPU type

    def successors(self, name: str) -> list[str]:
        return [e.dst for e in self.edges if e.src == name]

    def predecessors(self, name: str) -> list[str]:
        return [e.src for e in self.edges if e.dst == name]

    def of_kind(self, kind: str) -> list[ComponentNode]:
        return [n for n in self.nodes.values() if n.kind == kind]


def _edges(nodes: dict[str, ComponentNode]) -> list[DataflowEdge]:
    by_kind: dict[str, list[ComponentNode]] = {}
    for n in nodes.values():
        by_kind.setdefault(n.kind, []).append(n)
    pairs: list[tuple[ComponentNode, ComponentNode]] = []
    for kind, dsts in _DOWNSTREAM.items():
        for src in by_kind.get(kind, []):
            for dk in dsts:
                pairs += [(src, d) for d in by_kind.get(dk, [])]
    if not any(k in by_kind for k in ("reference", "reward", "critic")):
        pairs += [(s, d) for s in by_kind.get("rollout", []) for d in by_kind.get("trainer", [])]
    out = []
    for s, d in pairs:
        shared = sorted(set(s.gpus_by_node()) & set(d.gpus_by_node()))
        out.append(DataflowEdge(s.name, d.name, s.progress, tuple(shared)))
    return out


def build_graph(snap: TelemetrySnapshot) -> ComponentGraph:
    nodes = {}
    for c in snap.components:
        nodes[c.name] = ComponentNode(
            name=c.name, kind=c.kind, dynamic=c.kind in DYNAMIC_KINDS, interruptible=c.interruptible,
            progress=c.progress, workers=snap.workers_of(c.name), throughput=c.throughput,
        )
    node_type = {w.node: w.gpu_type for w in snap.workers}
    return ComponentGraph(snap.job, snap.time_s, snap.iteration, nodes, _edges(nodes), node_type)
