"""The daemon's four seams, and the plain values that cross them.

The loop needs four things done and knows nothing of how:

* **place one job** against the current groups, and **re-optimise** everything warm-started from
  the current placement: :class:`PlacementPlanner` (adapter: :mod:`planner.daemon.adapters.placement`);
* **decide a reallocation** inside one job's iteration from its telemetry: :class:`Reallocator`
  (adapter: :mod:`planner.daemon.adapters.realloc`);
* **observe and apply a target** on a backend with a journal: :class:`Executor` (adapters:
  :mod:`planner.daemon.adapters.executor`).

What crosses them is data: a :class:`Placement` (groups with pool types, node names, members,
cost and predicted cycle time), a :class:`PlanningContext` (the cluster, the jobs, what telemetry
taught the estimators), an :class:`Observation` of the backend. Every outcome carries its reason.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any, Callable, Optional, Protocol

from planner.schema.scenario import JobSpec, Scenario


# --------------------------------------------------------------------------------- placement
@dataclass(frozen=True)
class Group:
    id: str
    rollout_type: str
    rollout_nodes: tuple[str, ...]
    train_type: str
    train_nodes: tuple[str, ...]
    members: tuple[str, ...]
    cost_per_hour: float
    cycle_s: float = 0.0  # predicted cycle time of the round-robin at the planner's estimates

    def as_dict(self) -> dict:
        return {"id": self.id, "rollout_type": self.rollout_type, "rollout_nodes": list(self.rollout_nodes),
                "train_type": self.train_type, "train_nodes": list(self.train_nodes), "members": list(self.members),
                "cost_per_hour": self.cost_per_hour, "cycle_s": self.cycle_s}

    @classmethod
    def from_dict(cls, d: dict) -> "Group":
        return cls(str(d["id"]), d["rollout_type"], tuple(d["rollout_nodes"]), d["train_type"], tuple(d["train_nodes"]),
                   tuple(d["members"]), float(d["cost_per_hour"]), float(d.get("cycle_s", 0.0)))

    def pins(self) -> tuple[frozenset, frozenset]:
        return frozenset(self.rollout_nodes), frozenset(self.train_nodes)


@dataclass(frozen=True)
class Placement:
    """Groups in force; a job not in any group holds no nodes."""

    groups: tuple[Group, ...] = ()

    @property
    def cost_per_hour(self) -> float:
        return float(sum(g.cost_per_hour for g in self.groups))

    def job_groups(self) -> dict[str, Group]:
        return {m: g for g in self.groups for m in g.members}

    def jobs(self) -> list[str]:
        return [m for g in self.groups for m in g.members]

    def without(self, names: set[str] | list[str]) -> "Placement":
        """Drop these jobs; a group left empty releases its nodes (its pools stay otherwise)."""
        drop = set(names)
        out = []
        for g in self.groups:
            members = tuple(m for m in g.members if m not in drop)
            if members:
                out.append(replace(g, members=members) if members != g.members else g)
        return Placement(tuple(out))

    def nodes_in_use(self) -> dict[str, str]:
        """node -> group id."""
        return {n: g.id for g in self.groups for n in (*g.rollout_nodes, *g.train_nodes)}

    def as_dict(self) -> dict:
        return {"groups": [g.as_dict() for g in self.groups], "cost_per_hour": self.cost_per_hour}

    @classmethod
    def from_dict(cls, d: dict | None) -> "Placement":
        return cls(tuple(Group.from_dict(g) for g in (d or {}).get("groups", [])))


def moved_jobs(before: Placement, after: Placement) -> dict[str, str]:
    """Jobs placed in both whose node pins changed, with how: ``moved`` (some node it held is gone:
    its state must be started elsewhere) or ``extended`` (it keeps its nodes and gains more)."""
    a, b = before.job_groups(), after.job_groups()
    out: dict[str, str] = {}
    for job, ga in a.items():
        gb = b.get(job)
        if gb is None:
            continue
        (ra, ta), (rb, tb) = ga.pins(), gb.pins()
        if (ra, ta) == (rb, tb):
            continue
        out[job] = "extended" if (ra <= rb and ta <= tb) else "moved"
    return out


@dataclass(frozen=True)
class PhaseFactors:
    """What telemetry taught: measured / predicted phase time (1.0: the estimators were right)."""

    rollout: float = 1.0
    train: float = 1.0

    def as_dict(self) -> dict:
        return {"rollout": self.rollout, "train": self.train}


@dataclass
class PlanningContext:
    """Everything a placement decision needs, as of one snapshot."""

    cluster: Scenario  # the fleet, prices and solver options (its own job list is ignored)
    jobs: dict[str, JobSpec]  # every job the decision may place, by name
    factors: dict[str, PhaseFactors] = field(default_factory=dict)
    now: float = 0.0
    move_price_per_job: Optional[float] = None  # $/h a re-optimisation charges per moved job (None: the scenario's)

    def factor(self, job: str) -> PhaseFactors:
        return self.factors.get(job, PhaseFactors())


@dataclass
class Admission:
    job: str
    placement: Optional[Placement]  # the current placement with the job added, None: not placed
    move: Optional[str]  # fill-bubble | extend-rollout-pool | new-group | None
    marginal_cost_per_hour: float
    reason: str
    permanent: bool = False  # no placement can ever meet its SLO (reject now, do not wait)


@dataclass
class Reoptimisation:
    placement: Placement
    solver: dict  # the solver record (backend, status, objective, best_bound, gap, wall_time_s, warm_start)
    reason: str


@dataclass(frozen=True)
class Violation:
    rule: str  # slo | dram | capacity | unplaced
    where: str  # group id or job name
    message: str


class PlacementPlanner(Protocol):
    name: str

    def admit(self, ctx: PlanningContext, current: Placement, job: str) -> Admission: ...

    def reoptimise(self, ctx: PlanningContext, current: Placement, time_limit_s: float) -> Reoptimisation: ...

    def evaluate(self, ctx: PlanningContext, placement: Placement) -> tuple[Placement, list[Violation]]:
        """The placement with cycle times recomputed at the context's estimates, and what it violates."""
        ...

    def predict(self, ctx: PlanningContext, placement: Placement) -> dict[str, tuple[float, float]]:
        """Per placed job, the estimators' (rollout s, training + sync s) on its pools, before any factor."""
        ...

    def plan_document(self, ctx: PlanningContext, placement: Placement, solver: dict) -> dict:
        """The plan document (``planner.plandoc``) of a placement, as data."""
        ...


# ---------------------------------------------------------------------------- reallocation
@dataclass
class ReallocOutcome:
    job: str
    committed: bool
    reason: str
    donors: list[str]
    current_throughput: float
    predicted_throughput: float
    body: dict  # the ReallocPlan body (what the executor applies)
    solver: dict
    solve_ms: float


class Reallocator(Protocol):
    def decide(self, ctx: PlanningContext, job: str, snapshots: list) -> ReallocOutcome:
        """Feed a job's new snapshots (in order) and decide at the last one."""
        ...

    def forget(self, job: str) -> None: ...

    def predictor_error(self) -> Optional[float]: ...


# --------------------------------------------------------------------------------- executor
@dataclass(frozen=True)
class IterationSample:
    """One measured iteration of a running job (from the backend or derived from telemetry)."""

    job: str
    iteration: int
    rollout_s: float
    train_s: float
    iteration_s: float
    predicted_rollout_s: float = 0.0
    predicted_train_s: float = 0.0


@dataclass
class Observation:
    running: dict[str, str] = field(default_factory=dict)  # job -> group id the backend runs it in
    finished: dict[str, str] = field(default_factory=dict)  # job -> why (completed)
    failed: dict[str, str] = field(default_factory=dict)  # job -> why
    samples: list[IterationSample] = field(default_factory=list)  # the last few measured iterations per job (may repeat)
    iterations: dict[str, int] = field(default_factory=dict)  # job -> iterations completed so far, when the backend counts them
    telemetry: list[Any] = field(default_factory=list)  # TelemetrySnapshot the backend itself emitted


@dataclass
class ApplyResult:
    ok: bool
    steps_done: int
    steps_total: int
    message: str
    interrupted: bool = False  # stopped between steps (SIGTERM); the journal resumes it
    running: frozenset = frozenset()  # jobs the backend runs after the apply


class Executor(Protocol):
    name: str

    def observe(self, now: float) -> Observation: ...

    def apply(self, target: Placement, *, plan_id: int, now: float, should_stop: Callable[[], bool]) -> ApplyResult: ...

    def resume(self, plan_id: int, target: Placement, *, now: float, should_stop: Callable[[], bool]) -> ApplyResult:
        """Finish (or roll back) a journaled apply a crash interrupted; never repeats a done step."""
        ...

    def apply_realloc(self, job: str, body: dict, *, now: float) -> ApplyResult: ...

    def close(self) -> None: ...
