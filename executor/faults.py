"""Fault injection: run an action at a named point of a named step.

Points, in the order the controller passes them for each step: ``before`` (intent journaled,
nothing done yet), ``mid`` (inside the step, after its first effect: e.g. requests moved in the
ledger but not yet admitted, new ranks created but not loaded), ``after`` (the step's effect
is complete, its outcome not yet journaled). A ``create`` also passes ``started`` (its worker is
up but not yet marked running), between ``mid`` and ``after``.

Actions: ``crash`` (the controller dies: :class:`ControllerCrash` propagates through every
handler, nothing is cleaned up), or a callable ``(backend, step) -> None`` that kills, freezes or
breaks workers through the backend's fault hooks.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Optional, Union

POINTS = ("before", "mid", "after")


class ControllerCrash(BaseException):
    """The controller process died here (BaseException: no ``except Exception`` swallows it)."""


Action = Union[str, Callable[[Any, Any], None]]


@dataclass
class Fault:
    step_kind: str
    point: str
    action: Action
    unit_kind: Optional[str] = None  # only in this kind of unit (workload, p2p, reboot, ...)
    nth: int = 0  # the nth matching step (0: the first)
    fired: bool = False


@dataclass
class FaultPlan:
    faults: list[Fault] = field(default_factory=list)
    seen: dict[tuple, int] = field(default_factory=dict)

    def fire(self, backend: Any, step: Any, point: str) -> None:
        unit_kind = step.unit.rsplit("/", 1)[-1]
        for f in self.faults:
            if f.fired or f.step_kind != step.kind or f.point != point:
                continue
            if f.unit_kind and f.unit_kind != unit_kind:
                continue
            key = (id(f), step.id)
            if key not in self.seen:
                self.seen[key] = len([k for k in self.seen if k[0] == id(f)])
            if self.seen[key] != f.nth:
                continue
            f.fired = True
            if f.action == "crash":
                raise ControllerCrash(f"controller killed at {point} of {step.id}")
            assert callable(f.action), f.action  # any other string was refused when the fault was made
            f.action(backend, step)


NO_FAULTS = FaultPlan()
