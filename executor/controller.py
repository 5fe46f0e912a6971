"""The controller: carries a step plan out on a backend, journaled, with rollback and resume.

For each unit (one component's change), in the diff's order, each step is journaled as
``intent`` before it acts and ``done`` with its outcome after. A step that fails makes its unit
roll back: the unit's steps that took effect are compensated in reverse order (new workers are
discarded, drained engines serve again, a switch is undone, a saved checkpoint is dropped), and
the apply stops with the reason. The old state is left whole: the old trainer ranks never left
their training group; released engines get their requests back.

Each kind of unit has a *commit point* after which failures roll forward, never back: a
workload unit after its handoff, a P2P or add/remove unit after its switch (what is left are
stops, which cannot fail: an unreachable worker is fenced and reaped later). A reboot unit
that fails after its stop restarts the old placement from the saved checkpoint.

A controller that dies leaves the journal behind; the next apply of the same plan resumes it:
done steps are skipped and a step left at ``intent`` is re-run, which is safe because every
step is idempotent (workers are adopted by id, requests moved by ledger ownership).
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from typing import Any, Callable, Optional

from estimators.errors import Problem, UserError
from executor.backends.base import StartFailed, WorkerLost
from executor.context import Ctx
from executor.faults import FaultPlan
from executor.journal import Fenced, Journal
from executor.lifecycle import compensate_create, compensate_switch, run_create, run_stop, run_switch
from executor.migrations import p2p, reboot, workload
from executor.steps import Step

RUN: dict[str, Callable] = {
    "create": run_create, "stop": run_stop, "switch": run_switch, "drain": workload.run_drain,
    "handoff": workload.run_handoff, "reshard": p2p.run_reshard, "save": reboot.run_save,
}
COMPENSATE: dict[str, Optional[Callable]] = {
    "create": compensate_create, "switch": compensate_switch, "drain": workload.compensate_drain,
    "save": reboot.compensate_save, "handoff": None, "reshard": None, "stop": None,
}
# After this step a unit rolls forward. P2P commits at the first stop of an old rank: until then
# the old ranks still hold the whole state, so a new rank that dies after the switch is undone.
# A park commits at its first stop (the state is in its checkpoint from then on: roll forward and
# restore later); a restore that fails is undone and leaves the component parked.
COMMIT_AFTER = {"workload": "handoff", "p2p": "stop", "add": "switch", "remove": "switch", "park": "stop", "replace": "switch"}


@dataclass
class ApplyResult:
    apply_id: int
    status: str  # done | rolled_back | failed
    resumed: bool
    message: str = ""
    steps_run: int = 0
    events: list[dict] = field(default_factory=list)
    outcomes: dict[str, Any] = field(default_factory=dict)


def plan_digest(steps: list[Step]) -> str:
    return hashlib.sha256(json.dumps([s.as_dict() for s in steps], sort_keys=True).encode()).hexdigest()[:16]


def _standing(cur: dict, status: dict, unit: list[Step]) -> str:
    """What a rollback of one unit leaves of the rest of its apply: the units done before it stand (a
    rollback undoes the unit in flight only), so the cluster may run neither plan's placement."""
    units = [u for u in _units(cur["steps"]) if u[0].unit != unit[0].unit]
    done = sum(all(status[s.seq][0] == "done" for s in u) for u in units)
    if not done:
        return ""
    left = sum(all(status[s.seq][0] == "planned" for s in u) for u in units)
    return (f"; the {done} unit(s) of apply #{cur['id']} done before it stand" + (f" and {left} were not started" if left else "")
            + f": apply {cur['plan_name']} again to finish that plan, or apply the previous plan to go back")


def _units(steps: list[Step]) -> list[list[Step]]:
    out: list[list[Step]] = []
    for s in steps:
        if not out or out[-1][0].unit != s.unit:
            out.append([])
        out[-1].append(s)
    return out


class Executor:
    def __init__(self, backend: Any, journal: Journal, *, faults: Optional[FaultPlan] = None,
                 on_step: Optional[Callable[[Step, str, Any], None]] = None,
                 on_event: Optional[Callable[[dict], None]] = None, fence: Optional[Callable[[], Optional[str]]] = None) -> None:
        """``fence``: called before every step acts and before its effect is saved; a reason (str)
        means this controller was superseded (the daemon's lease epoch moved on): :class:`Fenced`
        is raised and nothing more is done."""
        self.backend, self.journal, self.faults, self.on_step = backend, journal, faults, on_step
        self.fence = fence
        self.ctx = Ctx(backend, faults or FaultPlan(), on_event=on_event)
        self._writer = ""  # this apply's mark on the cluster (_claim)

    def _notify(self, step: Step, status: str, data: Any = None) -> None:
        if self.on_step:
            self.on_step(step, status, data)

    def _fenced(self) -> None:
        why = self.fence() if self.fence is not None else None
        if why:
            raise Fenced(why)
        self.journal.check_held()

    def _sync(self) -> None:
        """A backend whose cluster is a file (the sim with a state file) writes what the step did
        before the journal says it is done: the file never lags the journal."""
        self._fenced()  # a superseded controller never writes its view over the cluster
        sync = getattr(self.backend, "sync", None)
        if sync is not None:
            sync()

    # ------------------------------------------------------------------ apply
    def apply(self, steps: list[Step], name: str = "plan", digest: Optional[str] = None, fence_epoch: Optional[int] = None) -> ApplyResult:
        """``fence_epoch``: the caller's lease epoch; a controller with a higher one may take the journal over."""
        digest = digest or plan_digest(steps)
        self._fenced()
        self.journal.acquire(f"apply {name}", fence_epoch)
        try:
            self._unchanged_since_read()
            ensure_saved = getattr(self.backend, "ensure_saved", None)
            if ensure_saved is not None:  # the cluster's file exists before the journal names an apply on it
                self._fenced()
                ensure_saved()
            aid, steps, resumed = self.journal.open_apply(digest, name, self.backend.name, steps)
            self._claim(aid, resumed)
            return self._run(aid, steps, resumed)
        finally:
            self.journal.release()

    def _unchanged_since_read(self) -> None:
        """Right after the lock is taken: the cluster is still the one this controller read (and planned
        its steps, or read the journal's unfinished apply, against). Another apply that held the lock
        meanwhile and saved the simulated cluster makes them stale: applying them would write the old
        view over what that apply did. Refused before anything is done; applying again plans anew."""
        refresh = getattr(self.backend, "refresh", None)
        if refresh is not None and refresh():
            raise UserError(Problem("cluster", "the simulated cluster changed after this apply read it (another apply changed it "
                                               "meanwhile): the steps were planned against a cluster that is no longer there; "
                                               "nothing was done",
                                    "check 'planner status', then run the command again (it plans against the cluster as it is now)"))

    def _claim(self, aid: int, resumed: bool) -> None:
        """Mark the cluster as this apply's; an interrupted apply whose cluster another apply has changed
        since (its mark is another's: e.g. the plan was applied with another --journal) is stale: its
        steps and their compensations no longer fit, and are refused before anything is done (they
        stopped the other apply's new workers, by name, as if they were its own)."""
        tag = self.journal.writer_tag(aid)
        if resumed:
            last = self.backend.coord("last_writer")
            acted = any(st in ("done", "compensated") for st, _ in self.journal.status_of(aid).values())
            if not last and acted:  # (a step marks the cluster before it acts, and the mark is saved before it is done)
                raise UserError(Problem("--journal", f"apply #{aid} in {self.journal.path} was interrupted after some of its steps "
                                        "were done, but this cluster bears no mark of any apply: it is not the cluster those "
                                        "steps changed (a Ray cluster started anew, or --address local, which starts a new one "
                                        "on every run); resuming would skip work that is not there",
                                        f"check 'planner status'; then move this journal aside (mv {self.journal.path} "
                                        f"{self.journal.path}.stale) and apply the plan again"))
            if last and last != tag and not self.journal.earlier_own(last, aid):  # (its first step may not have been saved)
                raise UserError(Problem("--journal", f"apply #{aid} in {self.journal.path} was interrupted, and another apply "
                                        f"({last}) has changed the cluster since: its journaled steps no longer fit it",
                                        f"check 'planner status'; then move this journal aside (mv {self.journal.path} "
                                        f"{self.journal.path}.stale) and apply the plan again"))
        self._writer = tag

    def rollback_unfinished(self, fence_epoch: Optional[int] = None) -> Optional[ApplyResult]:
        """Undo the unfinished unit of an interrupted apply and close it as rolled back.
        ``fence_epoch``: as for :meth:`apply` (a daemon taking over from a superseded one)."""
        cur = self.journal.unfinished()
        if cur is None:
            return None
        self._fenced()
        self.journal.acquire("rollback", fence_epoch)
        try:
            self._unchanged_since_read()
            self._claim(cur["id"], True)
            self.backend.coord("claim_writer", self._writer)
            status = self.journal.status_of(cur["id"])
            for unit in _units(cur["steps"]):
                sts = [status[s.seq][0] for s in unit]
                if all(x == "done" for x in sts) or all(x == "planned" for x in sts):
                    continue
                commit = COMMIT_AFTER.get(unit[0].unit.rsplit("/", 1)[-1])
                if commit and any(s.kind == commit and status[s.seq][0] == "done" for s in unit):
                    # past its commit point the unit cannot be undone (an old rank stopped, a park's
                    # engines stopped into their checkpoint): it rolls forward, as a failed step there does
                    ok, msg = self._roll_forward(cur["id"], unit, status, commit)
                    msg += _standing(cur, status, unit)
                    self.journal.finish(cur["id"], "rolled_back" if ok else "failed", msg)
                    return ApplyResult(cur["id"], "rolled_back" if ok else "failed", True, msg, events=self.ctx.events)
                msg = self._rollback(cur["id"], unit, status, "rolled back on request") + _standing(cur, status, unit)
                self.journal.finish(cur["id"], "rolled_back", msg)
                return ApplyResult(cur["id"], "rolled_back", True, msg, events=self.ctx.events)
            self.journal.finish(cur["id"], "rolled_back", "nothing was in flight")
            return ApplyResult(cur["id"], "rolled_back", True, "nothing was in flight", events=self.ctx.events)
        finally:
            self.journal.release()

    def _roll_forward(self, aid: int, unit: list[Step], status: dict, commit: str) -> tuple[bool, str]:
        """A rollback's unit that passed its commit point: its remaining steps run, as a resume would
        run them; (whether they all ran, what happened). The units after it are not started."""
        self.ctx.unit = unit
        self.ctx.journal_outcomes = {s.id: status[s.seq][1] for s in unit if status[s.seq][0] == "done"}
        self.ctx.committed = True
        name = unit[0].unit
        for s in unit:
            if status[s.seq][0] == "done":
                continue
            try:
                out = self._step(aid, s)
            except Exception as exc:  # noqa: BLE001 - as in _run past a commit point
                why = self._step_failed(aid, s, exc)
                self._sweep(unit[0].component)
                return False, (f"unit {name} had passed its commit point ({commit}) and cannot be undone; rolling it forward, "
                               f"step {s.id} failed ({why}); the new placement stands. Fix: check 'planner status' and apply "
                               "the plan again")
            status[s.seq] = ("done", out)
            self.ctx.journal_outcomes[s.id] = out
        self._sweep(unit[0].component)
        return True, (f"unit {name} had passed its commit point ({commit}) and cannot be undone (the old placement's state is "
                      "gone): rolled forward to its new placement; the units after it were not started")

    def _run(self, aid: int, steps: list[Step], resumed: bool) -> ApplyResult:
        status = self.journal.status_of(aid)
        res = ApplyResult(aid, "done", resumed, events=self.ctx.events)
        self.ctx.journal_outcomes = {}
        for unit in _units(steps):
            self.ctx.unit = unit
            self.ctx.journal_outcomes = {s.id: status[s.seq][1] for s in unit if status[s.seq][0] == "done"}
            sts = [status[s.seq][0] for s in unit]
            if any(x in ("failed", "compensated") for x in sts):
                msg = self._rollback(aid, unit, status, "an earlier attempt failed in this unit")
                self.journal.finish(aid, "rolled_back", msg)
                res.status, res.message = "rolled_back", msg
                return res
            commit = COMMIT_AFTER.get(unit[0].unit.rsplit("/", 1)[-1])
            committed = any(s.kind == commit and status[s.seq][0] == "done" for s in unit)
            for s in unit:
                self.ctx.committed = committed
                if status[s.seq][0] == "done":
                    self._notify(s, "skipped (done before)")
                    continue
                try:
                    out = self._step(aid, s)
                except Exception as exc:  # noqa: BLE001 - every failure of a step is handled the same way
                    why = self._step_failed(aid, s, exc)
                    status = self.journal.status_of(aid)
                    if committed:
                        msg = (f"step {s.id} failed after unit {s.unit} passed its commit point ({why}); the new placement "
                               f"stands, the step was not retried. Fix: check 'planner status' and apply the plan again")
                        self._sweep(unit[0].component)
                        self.journal.finish(aid, "failed", msg)
                        res.status, res.message = "failed", msg
                        return res
                    msg = self._rollback(aid, unit, status, why)
                    self.journal.finish(aid, "rolled_back", msg)
                    res.status, res.message = "rolled_back", msg
                    return res
                status[s.seq] = ("done", out)
                self.ctx.journal_outcomes[s.id] = out
                res.outcomes[s.id] = out
                res.steps_run += 1
                if s.kind == commit:
                    committed = True
            self._sweep(unit[0].component)
        self.journal.finish(aid, "done", f"{len(steps)} step(s)")
        return res

    def _step_failed(self, aid: int, s: Step, exc: Exception) -> str:
        """A step raised: a lost worker is declared dead, the failure journaled and told; what failed."""
        why = f"{type(exc).__name__}: {exc}"
        if isinstance(exc, WorkerLost):
            self.ctx.declare_dead(exc.worker_id, exc.why)
        self.journal.failed(aid, s, why)
        self._notify(s, "failed", why)
        return why

    def _step(self, aid: int, s: Step) -> Any:
        self._fenced()
        self.journal.intent(aid, s)
        if self._writer:
            self.backend.coord("claim_writer", self._writer)
        self._notify(s, "running")
        self._fenced()  # checked again right before acting: the caller may have been frozen in between
        self.ctx.step = s
        self.ctx.fault("before")
        out = RUN[s.kind](self.ctx, s)
        if s.kind == "switch" and s.unit.endswith(("/reboot", "/restore")) and s.args.get("active"):
            rec = self.ctx.record(s.args["active"][0])
            if rec and rec["role"] == "rollout":
                out["rehomed"] = reboot.after_switch(self.ctx, s)
        self.ctx.fault("after")
        self._sync()
        self.journal.done(aid, s, out)
        self._notify(s, "done", out)
        self.ctx.step = None
        return out

    def _sweep(self, component: str) -> None:
        """After a unit: fence workers of the component whose process is gone, and give any
        request left with a dead owner to a live engine."""
        recs = self.ctx.component_records(component)
        for r in recs:
            if r.get("status") == "running" and not self.backend.worker_alive(r["id"]):
                self.ctx.declare_dead(r["id"], "its process is gone (found after the unit)")
        if any(r["role"] == "rollout" for r in recs):
            try:
                workload.rehome(self.ctx, component)
            except WorkerLost as exc:
                self.ctx.event("requests waiting", str(exc), component=component)

    # ------------------------------------------------------------------ rollback
    def _rollback(self, aid: int, unit: list[Step], status: dict, why: str) -> str:
        kind = unit[0].unit.rsplit("/", 1)[-1]
        notes = []
        stopped = [s for s in unit if s.kind == "stop" and status[s.seq][0] in ("done", "intent", "failed")]
        if kind == "reboot" and stopped:
            notes.append(self._restore_in_place(unit, status))
        for s in reversed(unit):
            st = status[s.seq][0]
            if st not in ("done", "intent", "failed"):
                continue
            comp = COMPENSATE.get(s.kind)
            self._fenced()
            if kind == "reboot" and s.kind in ("create",) and stopped:
                comp = compensate_create
            self.ctx.step = s
            note = "nothing to undo"
            if comp is not None:
                try:
                    note = comp(self.ctx, s, status[s.seq][1])
                except WorkerLost as exc:
                    self.ctx.declare_dead(exc.worker_id, exc.why)
                    note = f"compensation could not reach {exc.worker_id}; fenced"
            self._sync()
            if st == "intent":
                self.journal.failed(aid, s, "interrupted; rolled back")
            self.journal.compensated(aid, s, note)
            self._notify(s, "compensated", note)
            notes.append(f"{s.id}: {note}")
        self.ctx.step = None
        release = getattr(self.backend, "release_reservation", None)
        if release is not None:  # what the unit reserved for its new workers (Ray: its placement group)
            freed = release([s.args["worker"]["id"] for s in unit if s.kind == "create"])
            if freed:
                notes.append(f"reservation released for {freed}")
        comp_name = unit[0].component
        if any(r["role"] == "rollout" for r in self.ctx.component_records(comp_name)):
            try:
                workload.rehome(self.ctx, comp_name)
            except WorkerLost as exc:
                notes.append(f"requests of {comp_name} wait for an engine: {exc}")
        msg = f"unit {unit[0].unit} rolled back because {why}"
        if kind == "restore":
            ckpt = next((s.args.get("restore") for s in unit if s.kind == "create"), "")
            msg += f"; {comp_name} stays parked in checkpoint {ckpt} (its state is saved): apply the plan again to restore it"
        self.ctx.event("rolled back", why, unit=unit[0].unit, notes=notes)
        return msg

    def _restore_in_place(self, unit: list[Step], status: dict) -> str:
        """A reboot that stopped the old workers but cannot finish: restart the old placement
        from the saved checkpoint (new worker ids; the old ones are gone)."""
        save = next(s for s in unit if s.kind == "save")
        ckpt = save.args["checkpoint"]
        made = []
        for s in unit:
            if s.kind != "stop":
                continue
            a = json.loads(json.dumps(s.args))
            a["worker"]["id"] = a["worker"]["id"] + ".restored"
            a.update(restore=ckpt, init="empty", restore_layout=a["layout"],
                     restore_count=len([x for x in unit if x.kind == "stop"]))
            if self.backend.worker_alive(s.args["worker"]["id"]):
                continue  # never stopped: still serving
            tmp = Step(0, f"{s.unit}/restore:{a['worker']['id']}", "create", s.component, s.unit, "restore in place", a)
            self.ctx.step = tmp
            try:
                run_create(self.ctx, tmp)
                made.append(a["worker"]["id"])
            except (StartFailed, WorkerLost) as exc:
                return f"restore in place failed ({exc}); {s.component} is down, its state is in checkpoint {ckpt}"
        if made:
            gen = save.args["generation"]
            self.ctx.coord("switch", unit[0].component, made, [], gen)
            rec = self.ctx.record(made[0])
            if rec and rec["role"] == "rollout":
                workload.rehome(self.ctx, unit[0].component)
        return f"restarted the old placement from {ckpt}: {made}"


def reap(backend: Any) -> list[str]:
    """Kill the processes of workers declared dead (fenced already); keep their records marked
    dead so the next plan knows the component lost them. Returns what was reaped."""
    out = []
    for r in backend.coord("records"):
        if r.get("status") == "dead" and backend.worker_alive(r["id"]):
            try:
                note = backend.stop_worker(r["id"])
            except WorkerLost as exc:
                note = f"unreachable ({exc.why})"
            out.append(f"{r['id']}: {note}")
    return out
