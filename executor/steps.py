"""Step kinds, the step record, and the tables of legal state transitions.

A plan is carried out as ordered :class:`Step` s, grouped in *units* (one per component that
changes). Every step says why it exists (``cause``). Each kind's effect on per-node capacity is
explicit (:data:`STEP_KINDS`): only ``create`` takes GPUs and DRAM, only ``stop`` gives them back.

Worker lifecycle, after the instance manager of Ray's autoscaler v2 (every instance moves
through an explicit table of legal transitions and an illegal one is a bug, not a silent
overwrite)::

    requested ─▶ starting ─▶ running ─▶ draining ─▶ stopping ─▶ stopped
        │            │          │  ▲         │           ▲
        ▼            ▼          ▼  └─saving──┘ (a rolled-back drain or switch returns to running)
      failed ─────────────────▶ stopped      dead ─▶ stopped (declared dead, fenced, then reaped)

Step lifecycle: ``planned ─▶ intent ─▶ done | failed``; a done or failed step of a unit that is
rolled back becomes ``compensated`` once its compensation has run.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

WORKER_TRANSITIONS: dict[str, frozenset[str]] = {
    "requested": frozenset({"starting", "failed"}),
    "starting": frozenset({"running", "failed", "dead"}),
    "running": frozenset({"draining", "saving", "stopping", "dead"}),
    "saving": frozenset({"running", "stopping", "dead"}),
    "draining": frozenset({"running", "stopping", "dead"}),
    "stopping": frozenset({"stopped", "dead", "running"}),  # running: a switch that is rolled back
    "failed": frozenset({"stopped"}),
    "dead": frozenset({"stopped"}),
    "stopped": frozenset(),
}

STEP_TRANSITIONS: dict[str, frozenset[str]] = {
    "planned": frozenset({"intent"}),
    "intent": frozenset({"done", "failed", "intent"}),  # intent -> intent: resumed after a crash
    "done": frozenset({"compensated"}),
    "failed": frozenset({"compensated"}),
    "compensated": frozenset(),
}


class IllegalTransition(RuntimeError):
    pass


def check_transition(table: dict[str, frozenset[str]], what: str, old: str, new: str) -> None:
    if new not in table.get(old, frozenset()):
        raise IllegalTransition(f"{what}: illegal transition {old} -> {new} (allowed: {sorted(table.get(old, ()))})")


@dataclass(frozen=True)
class KindInfo:
    takes_resources: bool
    releases_resources: bool
    description: str


STEP_KINDS: dict[str, KindInfo] = {
    "create": KindInfo(True, False, "start a worker on a node (optionally restoring saved state) and wait until it is ready"),
    "drain": KindInfo(False, False, "stop routing new requests to rollout engines being released"),
    "handoff": KindInfo(False, False, "move pending and in-flight requests (with partial output) to kept engines by cache affinity"),
    "reshard": KindInfo(False, False, "copy parameters, optimizer state and gradient buffers to the new layout over a migration group; verify checksums"),
    "switch": KindInfo(False, False, "make the new workers the serving/training set: new leases, old leases revoked"),
    "save": KindInfo(False, False, "save the component's state so it can be restarted elsewhere"),
    "stop": KindInfo(False, True, "stop a worker and give its GPUs and DRAM back"),
}


@dataclass
class Step:
    seq: int
    id: str  # deterministic: "<component>/<unit kind>/<kind>[:<worker>]"
    kind: str
    component: str
    unit: str  # the unit (component migration) this step belongs to
    cause: str
    args: dict[str, Any] = field(default_factory=dict)

    def as_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> "Step":
        return cls(**d)

    def describe(self) -> str:
        return f"{self.seq:>3}. {self.kind:<8} {self.id}\n       because {self.cause}"


@dataclass
class Unit:
    """One component's change: a migration (workload/p2p/reboot), an addition or a removal."""

    id: str
    component: str
    kind: str  # workload | p2p | reboot | add | remove | park | restore | replace
    cause: str
    steps: list[Step] = field(default_factory=list)
    after: list[str] = field(default_factory=list)  # units that must be done first (a restore after its park)
