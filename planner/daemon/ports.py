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
    """A co-execution group: its pools (GPU type and node names), members in round-robin order, cost
    and predicted cycle. ``member_rollout`` (aligned with ``members``) gives each member the rollout
    nodes of its own when the group is pinned (Weave's pinning: every member on rollout nodes of its
    own, the training pool shared); empty, every member is on the whole rollout pool."""

    id: str
    rollout_type: str
    rollout_nodes: tuple[str, ...]
    train_type: str
    train_nodes: tuple[str, ...]
    members: tuple[str, ...]
    cost_per_hour: float
    cycle_s: float = 0.0  # predicted cycle time of the round-robin at the planner's estimates
    member_rollout: tuple[tuple[str, ...], ...] = ()

    def __post_init__(self) -> None:
        if self.member_rollout:
            if len(self.member_rollout) != len(self.members):
                raise ValueError(f"group {self.id}: member_rollout_nodes has {len(self.member_rollout)} entries for "
                                 f"{len(self.members)} members; give one list of rollout nodes per member")
            pool = set(self.rollout_nodes)
            for m, nodes in zip(self.members, self.member_rollout):
                if not nodes or not set(nodes) <= pool:
                    raise ValueError(f"group {self.id}: member {m}'s rollout nodes {list(nodes)} are not a non-empty subset of the "
                                     f"group's rollout pool {list(self.rollout_nodes)}")

    @property
    def pinned(self) -> bool:
        return bool(self.member_rollout)

    def rollout_of(self, member: str) -> tuple[str, ...]:
        """The rollout nodes ``member`` runs on: its own (pinned), or the whole rollout pool."""
        if self.member_rollout:
            return self.member_rollout[self.members.index(member)]
        return self.rollout_nodes

    def nodes_of(self, member: str) -> set[str]:
        """The nodes ``member`` may use: its rollout nodes and the training pool."""
        return set(self.rollout_of(member)) | set(self.train_nodes)

    def as_dict(self) -> dict:
        d = {"id": self.id, "rollout_type": self.rollout_type, "rollout_nodes": list(self.rollout_nodes),
             "train_type": self.train_type, "train_nodes": list(self.train_nodes), "members": list(self.members),
             "cost_per_hour": self.cost_per_hour, "cycle_s": self.cycle_s}
        if self.member_rollout:
            d["member_rollout_nodes"] = [list(x) for x in self.member_rollout]
        return d

    @classmethod
    def from_dict(cls, d: dict) -> "Group":
        return cls(str(d["id"]), d["rollout_type"], tuple(d["rollout_nodes"]), d["train_type"], tuple(d["train_nodes"]),
                   tuple(d["members"]), float(d["cost_per_hour"]), float(d.get("cycle_s", 0.0)),
                   tuple(tuple(str(n) for n in x) for x in d.get("member_rollout_nodes") or ()))

    def pins(self, member: str) -> tuple[frozenset, frozenset]:
        """The nodes ``member`` is pinned to: (rollout, training)."""
        return frozenset(self.rollout_of(member)), frozenset(self.train_nodes)

    def without(self, drop: set[str]) -> Optional["Group"]:
        """The group without these members (None when none stays); a pinned group releases the
        leavers' own rollout nodes, a whole-pool group keeps its pools."""
        keep = [i for i, m in enumerate(self.members) if m not in drop]
        if not keep:
            return None
        if len(keep) == len(self.members):
            return self
        members = tuple(self.members[i] for i in keep)
        if not self.member_rollout:
            return replace(self, members=members)
        mine = tuple(self.member_rollout[i] for i in keep)
        held = {n for x in mine for n in x}
        return replace(self, members=members, member_rollout=mine, rollout_nodes=tuple(n for n in self.rollout_nodes if n in held))


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
        """Drop these jobs; a group left empty releases its nodes (its pools stay otherwise, but a
        pinned group releases the leavers' own rollout nodes)."""
        drop = set(names)
        out = []
        for g in self.groups:
            kept = g.without(drop)
            if kept is not None:
                out.append(kept)
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
        (ra, ta), (rb, tb) = ga.pins(job), gb.pins(job)
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
    unavailable: frozenset[str] = frozenset()  # nodes the executor reports dead: no placement may use them

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

    def reoptimise(self, ctx: PlanningContext, current: Placement, time_limit_s: float,
                   keep_groups: frozenset[str] = frozenset()) -> Reoptimisation:
        """Every job of ``current`` placed again, warm-started from it. ``keep_groups``: ids of current
        groups taken over exactly as they are (id, pools, nodes, members); the other jobs are placed on
        the nodes those groups leave, and the placement returned holds the kept groups too (no other
        group takes a kept group's id or nodes)."""
        ...

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
    dead_nodes: dict[str, str] = field(default_factory=dict)  # node -> why the executor reports it dead (never placed on)


@dataclass
class ApplyResult:
    ok: bool
    steps_done: int
    steps_total: int
    message: str
    interrupted: bool = False  # stopped between steps (SIGTERM); the journal resumes it
    running: frozenset = frozenset()  # jobs the backend runs after the apply


@dataclass(frozen=True)
class ReallocSettlement:
    """How the next leader ended a reallocation apply that a crash or a lost lease left unfinished
    (:meth:`planner.daemon.adapters.executor.ExecutorApplier.settle_realloc`)."""

    job: str
    apply_id: int  # the executor's journal
    decision_id: Optional[int]  # the realloc decision it applied (None: journaled before applies named their decision)
    # rolled-back | applied (nothing was left to undo or do) | failed (rolling forward failed) | interrupted (fenced) |
    # unsettled (the journal could not be taken: left unfinished, its decision stays applying)
    outcome: str
    message: str  # what the executor did, and which units stand


class Executor(Protocol):
    name: str

    def observe(self, now: float) -> Observation: ...

    def apply(self, target: Placement, *, plan_id: int, now: float, should_stop: Callable[[], bool]) -> ApplyResult: ...

    def resume(self, plan_id: int, target: Placement, *, now: float, should_stop: Callable[[], bool]) -> ApplyResult:
        """Finish (or roll back) a journaled apply a crash interrupted; never repeats a done step."""
        ...

    def apply_realloc(self, job: str, body: dict, *, now: float, decision_id: Optional[int] = None) -> ApplyResult:
        """Apply a committed reallocation (journaled under ``decision_id``, so that a restart can settle it)."""
        ...

    def close(self) -> None: ...
