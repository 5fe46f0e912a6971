"""Cluster state, observed and target: which component runs which workers on which node.

One model serves both sides of :func:`executor.diff.diff`:

* a :class:`Node` has a GPU type, a GPU count and host DRAM (GB);
* a :class:`Component` is one part of one RL job (``qwen7b/rollout``, ``qwen7b/trainer``, ...)
  with a role (inference engines, trainer ranks, or another service), a trainer layout
  (TP/PP/DP), the migration kind to use when it moves, and its workers; a member of a
  co-execution group names the group (``group``), and a group's reservation of a node's GPUs is
  a component of its own (``reserves``);
* a :class:`Worker` is one actor: its node, the GPUs and host DRAM it holds, its rank (trainer) or
  engine index (rollout), the epoch of its lease and its lifecycle status (see
  :mod:`executor.steps`), and the group whose reservation its GPUs count against (``share``).

The *observed* state comes from a backend (the workers that really run). The *target* state is
built from the executor's own input document (:mod:`executor.target`): it has the same shape,
with worker ids left to the diff. Capacity is accounted per node by the rule of
:mod:`executor.capacity` over every worker that is not stopped: DRAM always; GPUs on the node, or
inside a co-execution group's reservation (members share the pool's GPUs in time).
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field, replace
from typing import Iterable, Literal, Optional

from executor import capacity
from executor.capacity import Need

Role = Literal["rollout", "trainer", "service"]
MigrationKind = Literal["workload", "p2p", "reboot"]
ROLES: tuple[str, ...] = ("rollout", "trainer", "service")
MIGRATION_KINDS: tuple[str, ...] = ("workload", "p2p", "reboot")
# The kind a component moves with when the plan does not say: DynaRL's defaults.
DEFAULT_MIGRATION: dict[str, str] = {"rollout": "workload", "trainer": "p2p", "service": "reboot"}
# Which kinds make sense for which role (workload migration moves requests; P2P moves sharded
# training state; any component can be saved and restarted).
ALLOWED_MIGRATIONS: dict[str, tuple[str, ...]] = {
    "rollout": ("workload", "reboot"),
    "trainer": ("p2p", "reboot"),
    "service": ("reboot",),
}


MAX_STANDIN_PARAMS = 1 << 24  # the stand-in trainer model's parameters (executor.target's bound; a saved rank is checked against it)

@dataclass(frozen=True)
class Node:
    name: str
    gpu_type: str
    gpus: int
    dram_gb: float
    alive: bool = True


@dataclass(frozen=True)
class Layout:
    """Trainer parallelism. Rank order: TP innermost, then DP, then PP (Megatron's order)."""

    tp: int = 1
    pp: int = 1
    dp: int = 1

    @property
    def world(self) -> int:
        return self.tp * self.pp * self.dp

    def coords(self, rank: int) -> tuple[int, int, int]:
        """(pp stage, dp index, tp index) of a global rank."""
        tp_i = rank % self.tp
        dp_i = (rank // self.tp) % self.dp
        pp_i = rank // (self.tp * self.dp)
        return pp_i, dp_i, tp_i

    def rank_of(self, pp_i: int, dp_i: int, tp_i: int) -> int:
        return (pp_i * self.dp + dp_i) * self.tp + tp_i

    def __str__(self) -> str:
        return f"tp{self.tp}/pp{self.pp}/dp{self.dp}"


@dataclass(frozen=True)
class Worker:
    id: str
    component: str
    node: str
    gpus: int
    dram_gb: float
    index: int = 0  # trainer rank or engine index
    epoch: int = 0  # lease epoch; every side effect of the worker carries it
    generation: int = 0  # bumped by every migration of its component
    status: str = "running"
    share: str = ""  # runs inside this co-execution group's reservation on its node (executor.capacity)

    @property
    def holds_resources(self) -> bool:
        # A worker holds its GPUs and DRAM until it is stopped: a failed start or a worker
        # declared dead still pins resources until the executor reaps it.
        return self.status != "stopped"


@dataclass
class Component:
    name: str
    job: str
    role: str
    gpu_type: str = ""
    layout: Layout = field(default_factory=Layout)
    gpus_per_worker: int = 1
    dram_gb_per_worker: float = 0.0
    migration: str = ""
    generation: int = 0
    workers: list[Worker] = field(default_factory=list)
    # Target only: workers wanted per node (the diff assigns ids and ranks).
    placement: dict[str, int] = field(default_factory=dict)
    # What the workers run: the trainer's model dimensions, the rollout engine's settings.
    model: dict = field(default_factory=dict)
    engine: dict = field(default_factory=dict)
    group: str = ""  # a member of this co-execution group: inside its reservations, GPUs are time-shared
    reserves: str = ""  # this component is the group's reservation of its nodes' GPUs
    keep: list[str] = field(default_factory=list)  # target only: workers to keep when engines are released
    impl: str = ""  # worker implementation (executor.workers.registry); "" = toy

    def __post_init__(self) -> None:
        if not self.migration:
            self.migration = DEFAULT_MIGRATION.get(self.role, "reboot")

    def live_workers(self) -> list[Worker]:
        return [w for w in self.workers if w.holds_resources]

    def placement_counts(self) -> dict[str, int]:
        """Workers per node: the target's placement, or what the live workers occupy."""
        if self.placement:
            return {n: c for n, c in sorted(self.placement.items()) if c > 0}
        out: dict[str, int] = {}
        for w in self.live_workers():
            out[w.node] = out.get(w.node, 0) + 1
        return dict(sorted(out.items()))

    @property
    def worker_count(self) -> int:
        return sum(self.placement_counts().values())


@dataclass
class ClusterState:
    nodes: dict[str, Node] = field(default_factory=dict)
    components: dict[str, Component] = field(default_factory=dict)
    # Observed only: components a staged reboot stopped and has not restored yet, with their checkpoint
    # ({"checkpoint", "layout", "count", "generation"}): the next diff restores them from it.
    parked: dict[str, dict] = field(default_factory=dict)
    # Observed only: trainer components -> optimizer steps they committed (none: still their initial state).
    trained: dict[str, int] = field(default_factory=dict)

    # ------------------------------------------------------------------ capacity
    def workers(self) -> Iterable[Worker]:
        for c in self.components.values():
            yield from c.workers

    def needs(self) -> list[Need]:
        """What every worker that is not stopped holds (:mod:`executor.capacity`)."""
        out = []
        for c in self.components.values():
            for w in c.live_workers():
                out.append(Need(w.node, w.gpus, w.dram_gb, w.share, c.job, c.reserves))
        return out

    def slots(self, dead_free_zero: bool = False) -> dict:
        return capacity.initial(self.nodes, self.needs(), dead_free_zero)

    def used(self, node: str) -> tuple[int, float]:
        """GPUs held on the node (reservations and workers outside any) and host DRAM pinned there."""
        s = self.slots()
        n = self.nodes[node]
        return n.gpus - s[("gpus", node)], n.dram_gb - s[("dram", node)]

    def free(self, node: str) -> tuple[int, float]:
        s = self.slots()
        return s[("gpus", node)], s[("dram", node)]

    def over_capacity(self) -> list[str]:
        """Over-full nodes and reservations (one message each)."""
        return capacity.violations(self.nodes, self.needs())

    def worker(self, worker_id: str) -> Optional[Worker]:
        for w in self.workers():
            if w.id == worker_id:
                return w
        return None

    # ------------------------------------------------------------------ (de)serialisation
    def to_dict(self) -> dict:
        return {
            "nodes": [asdict(n) for n in sorted(self.nodes.values(), key=lambda n: n.name)],
            "components": [
                {**{k: v for k, v in asdict(c).items() if k not in ("workers", "layout")},
                 "layout": asdict(c.layout),
                 "workers": [asdict(w) for w in sorted(c.workers, key=lambda w: (w.index, w.id))]}
                for c in sorted(self.components.values(), key=lambda c: c.name)
            ],
            **({"parked": {k: dict(v) for k, v in sorted(self.parked.items())}} if self.parked else {}),
            **({"trained": dict(sorted(self.trained.items()))} if self.trained else {}),
        }

    @classmethod
    def from_dict(cls, data: dict) -> "ClusterState":
        st = cls()
        for n in data.get("nodes", []):
            st.nodes[n["name"]] = Node(**n)
        for c in data.get("components", []):
            c = dict(c)
            workers = [Worker(**w) for w in c.pop("workers", [])]
            layout = Layout(**c.pop("layout", {}))
            comp = Component(**c, layout=layout, workers=workers)
            st.components[comp.name] = comp
        st.parked = {k: dict(v) for k, v in data.get("parked", {}).items()}
        st.trained = {k: int(v) for k, v in data.get("trained", {}).items()}
        return st

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), sort_keys=True)

    def copy(self) -> "ClusterState":
        return ClusterState.from_dict(self.to_dict())

    # ------------------------------------------------------------------ display
    def table(self) -> list[dict]:
        """One row per node: GPUs and DRAM in use, and which component's workers sit there."""
        rows = []
        s = self.slots()
        for name, n in sorted(self.nodes.items()):
            g, d = n.gpus - s[("gpus", name)], n.dram_gb - s[("dram", name)]
            here: dict[str, int] = {}
            for c in self.components.values():
                for w in c.live_workers():
                    if w.node == name:
                        here[c.name] = here.get(c.name, 0) + 1
            rows.append({"node": name, "gpu_type": n.gpu_type, "alive": n.alive, "gpus_used": g, "gpus": n.gpus,
                         "dram_used_gb": d, "dram_gb": n.dram_gb,
                         "workers": ", ".join(f"{k}x{v}" for k, v in sorted(here.items()))})
        return rows


def with_status(w: Worker, status: str) -> Worker:
    return replace(w, status=status)
