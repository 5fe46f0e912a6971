"""What a step handler gets: the backend, deadlines, fault points and an event log with causes."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Callable, Optional

from executor.backends.base import WorkerLost
from executor.faults import FaultPlan


@dataclass
class Ctx:
    backend: Any
    faults: FaultPlan = field(default_factory=FaultPlan)
    events: list[dict] = field(default_factory=list)
    on_event: Optional[Callable[[dict], None]] = None
    step: Any = None
    journal_outcomes: dict = field(default_factory=dict)
    committed: bool = False  # the current unit passed its commit point: roll forward only
    unit: list = field(default_factory=list)  # the current unit's steps (a backend reserves its new workers at once)

    def coord(self, method: str, *args: Any) -> Any:
        return self.backend.coord(method, *args)

    def call(self, worker_id: str, method: str, *args: Any, deadline_s: Optional[float] = None) -> Any:
        return self.backend.call(worker_id, method, *args, deadline_s=deadline_s)

    def fault(self, point: str) -> None:
        if self.step is not None:
            self.faults.fire(self.backend, self.step, point)

    def event(self, what: str, cause: str, **data: Any) -> None:
        e = {"t": time.time(), "step": getattr(self.step, "id", ""), "what": what, "cause": cause, **data}
        self.events.append(e)
        if self.on_event:
            self.on_event(e)

    def declare_dead(self, worker_id: str, why: str) -> None:
        """Fence a worker that died or missed a deadline: its lease is revoked at once, so a
        process that is merely frozen can never act again; its resources are reaped when it stops.

        A missed deadline may mean the whole node froze: the other workers on that node are
        pinged, and if none answers the node is declared dead and every worker on it fenced."""
        rec = self.record(worker_id)
        self._fence(worker_id, why)
        if rec is None or "no answer" not in why:
            return
        others = [r["id"] for r in self.coord("records") if r["node"] == rec["node"] and r["id"] != worker_id
                  and r.get("status") != "dead"]
        silent = []
        for w in others:
            try:
                self.backend.call(w, "ready", deadline_s=1.0)
            except WorkerLost:
                silent.append(w)
        if len(silent) == len(others):
            self.coord("mark_node_dead", rec["node"], why)
            self.event("node declared dead", f"no worker on {rec['node']} answers ({why})", node=rec["node"])
        for w in silent:
            self._fence(w, f"its node {rec['node']} stopped answering")

    def _fence(self, worker_id: str, why: str) -> None:
        self.coord("revoke", worker_id, why)
        self.coord("set_status", worker_id, "dead")
        self.event("declared dead", why, worker=worker_id)

    def try_call(self, worker_id: str, method: str, *args: Any) -> tuple[bool, Any]:
        """Call; on WorkerLost declare the worker dead and return (False, reason)."""
        try:
            return True, self.call(worker_id, method, *args)
        except WorkerLost as exc:
            self.declare_dead(worker_id, exc.why)
            return False, exc.why

    def record(self, worker_id: str) -> Optional[dict]:
        for r in self.coord("records"):
            if r["id"] == worker_id:
                return r
        return None

    def component_records(self, component: str) -> list[dict]:
        return sorted((r for r in self.coord("records") if r["component"] == component), key=lambda r: r["index"])
