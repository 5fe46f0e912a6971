"""Policies of the request-level job model, and the interface of a dynamic decision function.

A :class:`Policy` says how one job's GPUs are used:

* ``static``: a fixed partition (verl / RLinf disaggregated): ``rollout_gpus`` run the engines,
  ``reference_gpus`` the log-prob passes, ``trainer_gpus`` the update; finished responses stream
  to the downstream stages (``streaming``), the update ends the iteration;
* ``colocated`` (veRL time sharing): every GPU runs the rollout, then the log-prob passes, then the
  update, with an offload/onload switch between (host-DRAM resident state: a warm switch);
* ``dynamic``: the static partition to start with, then a *decision function* fed with a
  :class:`~formulation.realloc.telemetry.TelemetrySnapshot` every ``telemetry_interval_s`` (and at
  every iteration boundary) may move GPUs between components; the simulator carries the moves
  out with their migration costs (Workload migration of rollout requests, P2P resharding of the
  trainer, Reboot of inference workers);

each with a trainer intake (``intake``): ``group`` (GRPO: a prompt's samples go to training only
when the whole group is rewarded, since its advantages are computed over the group; the default
for GRPO jobs), ``minibatch`` (whole groups, ``minibatch_groups`` at a time: the update consumes
mini-batches), or ``sample`` (every sample on its own: PPO, or the idealised streaming baseline);
each with a request queue order (``fifo`` or ``priority``: tool calls done, cached prefix, with an
age bound) and optional long-tail consolidation at ``consolidate_at`` (fraction of requests done).

The decision-function interface is plain data in and out, so the reallocation planner
(``formulation.realloc``) plugs in unchanged: it receives the snapshot a running system would post
and a :class:`ReallocContext` (per component: kind, GPUs, GPU granularity, minimum, measured
work rate, backlog), and returns a :class:`Reallocation` (target GPUs per component and the
migration kind of each) or ``None``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Optional, Protocol

from formulation.realloc.telemetry import TelemetrySnapshot

POLICIES = ("static", "colocated", "dynamic")
MIGRATION_KINDS = ("workload", "p2p", "reboot")
INTAKES = ("sample", "group", "minibatch")


@dataclass(frozen=True)
class ComponentInfo:
    name: str
    kind: str  # rollout | reference | trainer (telemetry ComponentKind)
    gpus: int
    unit_gpus: int  # GPU granularity (engine TP, trainer TP x PP)
    min_gpus: int  # fewest GPUs the component can run on (0: may be emptied)
    work_rate_per_gpu: float  # measured work per second per GPU (tokens/s for rollout, FLOP/s otherwise)
    backlog_s: float  # queued work at the current rate (0 when idle)
    pending: int  # requests / samples not yet through this component this iteration
    interruptible: bool = True
    grow_s: float = 0.0  # seconds before GPUs added now start working (migration: boot, resharding)
    # filled only for decision functions that ask (``wants_remaining_tokens``): the rollout's expected remaining
    # tokens (sum and largest per request, from the length distribution's residuals) and mean context per request;
    # the work queued (FLOPs) and the samples queued at a downstream stage
    remaining_tokens: float = 0.0
    remaining_max: float = 0.0
    context_tokens: float = 0.0
    groups_left: int = 0  # GRPO groups with an unfinished request (their samples reach a gated trainer at the end)
    queued_work: float = 0.0
    queued: int = 0
    # the rollout's unfinished requests one by one (single-turn; same ``wants_remaining_tokens``): arrays ``engine``
    # (index into the alive engines), ``group``, ``generated``, ``context``, ``running``, ``prompt``, and per engine
    # ``drain_key`` (its load, then cached tokens: the order a Workload migration drains them in)
    requests: Optional[dict] = None


@dataclass(frozen=True)
class ReallocContext:
    time_s: float  # since the job started
    iteration: int
    total_gpus: int
    free_gpus: int
    components: dict  # name -> ComponentInfo
    initial: dict  # name -> GPUs of the starting partition
    at_boundary: bool = False  # an iteration boundary (the rollout is about to start)
    intake: str = "sample"  # the trainer's intake this run uses (sample | group | minibatch; see Policy.intake)
    # at a boundary: every response length (tokens, all turns) of the iteration just ended and its number of GRPO
    # groups, as the rollout manager saw them finish (the planner refits the declared lengths from them)
    last_lengths: Optional[Any] = None
    last_groups: int = 0


@dataclass(frozen=True)
class Reallocation:
    target: dict  # component -> GPUs
    kinds: dict = field(default_factory=dict)  # component -> workload | p2p | reboot
    reason: str = ""
    predicted_gain: float = 0.0
    # no GPU left unowned: what a unit-bound receiver cannot take (node fragmentation) goes to log-prob inference
    fill: bool = False


class DecisionFn(Protocol):
    def __call__(self, snapshot: TelemetrySnapshot, ctx: ReallocContext) -> Optional[Reallocation]: ...


@dataclass(frozen=True)
class Policy:
    name: str = "static"
    rollout_gpus: Optional[int] = None  # None: the scenario's rollout nodes
    reference_gpus: Optional[int] = None  # None: split the training nodes by work (see job.partition)
    trainer_gpus: Optional[int] = None
    streaming: bool = True
    queue: str = "fifo"
    max_wait_s: float = 30.0
    consolidate_at: Optional[float] = None
    pack_slack: float = 0.25
    decision: Optional[Callable] = None
    telemetry_interval_s: float = 1.0
    record_snapshots: bool = False
    intake: Optional[str] = None  # sample | group | minibatch; None: group for GRPO (group_size > 1), else sample
    minibatch_groups: int = 16  # groups per mini-batch under intake "minibatch"

    def __post_init__(self):
        if self.intake not in (None,) + INTAKES:
            raise ValueError(f"unknown trainer intake {self.intake!r}: use one of {', '.join(INTAKES)}")
        if self.minibatch_groups < 1:
            raise ValueError(f"minibatch_groups must be >= 1, got {self.minibatch_groups}")
        if self.name not in POLICIES:
            raise ValueError(f"unknown policy {self.name!r}: use one of {', '.join(POLICIES)}")
        if self.queue not in ("fifo", "priority"):
            raise ValueError(f"unknown queue order {self.queue!r}: use fifo or priority")
        if self.consolidate_at is not None and not 0.0 < self.consolidate_at < 1.0:
            raise ValueError(f"consolidate_at must lie in (0, 1), got {self.consolidate_at}")
        if self.name == "dynamic" and self.decision is None:
            raise ValueError("the dynamic policy needs a decision function")
