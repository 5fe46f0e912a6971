"""The executor (:mod:`executor`) behind the daemon's apply seam.

Glue only; every step is the executor's. A target placement becomes the executor's target state
with :func:`planner.apply.placement.from_placement` (each group: a reservation of each of its pool
nodes' GPUs; each member: its running components — rollout engines, trainer ranks, reference and
the rest its algorithm has — inside those reservations, named as its telemetry names them, plus
its resident state in host DRAM: :mod:`planner.apply.layout`), :func:`executor.diff.diff` orders
the capacity-safe steps from what the backend reports (staging moves as park-then-restore when
groups swap nodes), and :class:`executor.controller.Executor` carries them out with its SQLite
journal (intent before each step, outcome after; a failed unit is rolled back).

A committed reallocation (:meth:`apply_realloc`) is the planner's ``ReallocPlan`` body turned into
a target by :func:`executor.adapters.plans.from_realloc` against what runs: engines move by
Workload migration, trainer ranks by P2P (in place when only DP changes), and a P2P whose old and
new ranks cannot both fit falls back to a staged reboot. :meth:`describe` is what runs, per
component, with the request ledger: the loop stores it for ``GET /v1/cluster``.

* The journal key of a daemon plan is ``daemon-plan-<id>``: after a crash, applying the same
  plan again resumes the journaled steps (done ones are skipped), whatever the cluster looks like
  by then.
* The journal key of a reallocation is ``daemon-realloc-<decision id>``. One a crash (or a lost
  lease) left unfinished is not resumed: the iteration it was decided for is gone. The next leader
  settles it before anything else (:meth:`settle_realloc`) the way ``planner apply --rollback``
  does: the unit in flight is rolled back, or forward when it had passed its commit point; units
  done before stand, units after it are not started.
* Every step that completes (done, skipped on a resume, compensated) calls ``on_progress``: the
  daemon counts it as the loop's progress, so a long apply keeps the lease.
* SIGTERM: the step in progress finishes (its outcome is journaled), then the apply stops
  (:class:`StopApply` is raised from the executor's step callback, outside its error handling,
  so nothing is rolled back or marked failed) and is resumed by the next start.
* Node names: the placement planner and the executor's scenario inventory both name nodes
  ``<node group>-<i>`` (:meth:`planner.instances.common.ClusterView.node_names`).
* ``--backend sim``: the executor's in-process simulated backend, saved to its state file after
  every step; the simulated cluster of :mod:`planner.daemon.adapters.simcluster` still says how
  the jobs run (iterations, completions) once the executor has applied their placement.
"""

from __future__ import annotations

import logging
import time
from pathlib import Path
from typing import Callable, Optional

from planner.daemon.ports import ApplyResult, Observation, Placement, ReallocSettlement
from planner.schema.scenario import Scenario


log = logging.getLogger("planner.daemon.executor")

REALLOC_DIGEST = "daemon-realloc-"  # + the decision id: the journal key of a reallocation's apply
REALLOC_NAME = "daemon realloc "  # how every reallocation's apply is named (also those journaled before they had a key of their own)


class StopApply(BaseException):
    """Raised between steps on SIGTERM (a BaseException: the executor's step handling must not catch it)."""


def node_map(cluster: Scenario) -> dict[str, str]:
    """Placement node name -> executor node name: the same ``<node group>-<i>`` on both sides;
    the map checks that the executor's inventory holds every node the planner may name."""
    from planner.apply.placement import scenario_nodes
    from planner.instances.common import ClusterView, resolve_gpu_types

    view = ClusterView(cluster, resolve_gpu_types(cluster))
    ours = [n for t in view.types() for n in view.node_names(t)]
    theirs = {n["name"] for n in scenario_nodes(cluster)}
    missing = [n for n in ours if n not in theirs]
    if missing:
        raise RuntimeError(f"executor inventory lacks planner nodes {missing[:5]}")
    return {n: n for n in ours}


def _dead_nodes(backend, st) -> dict[str, str]:
    declared = backend.coord("dead_node_list") or {}
    return {n: str(declared.get(n) or "the backend reports it dead") for n, node in sorted(st.nodes.items()) if not node.alive}


def _trainers_running(st) -> set[str]:
    """The jobs whose trainer has a running worker in the executor's observed state ``st``."""
    out = set()
    for name, c in st.components.items():
        job, _, part = name.partition("/")
        if part == "trainer" and any(w.status == "running" for w in c.workers):
            out.add(job)
    return out


class ExecutorApplier:
    def __init__(self, kind: str, cluster: Scenario, journal_path: Path, dram_of: Callable[[str], tuple[float, float]], *,
                 sim_state: Optional[Path] = None, address: Optional[str] = None, world=None, step_delay_s: float = 0.0,
                 spec_of: Optional[Callable] = None, requests_per_job: int = 0, telemetry: bool = False) -> None:
        from executor.backends.base import Deadlines
        from executor.journal import Journal
        from executor.session import open_backend
        from executor.state import Node

        self.name = kind
        self.cluster = cluster
        self.dram_of = dram_of
        self.spec_of = spec_of
        self.world = world
        self.requests_per_job = requests_per_job  # simulated work: requests each job's engines get when it starts
        self.telemetry = telemetry  # the simulated cluster emits each running job's telemetry every cycle
        self.step_delay_s = step_delay_s  # wall seconds before each step (the simulated backend's steps are instant; tests need a window)
        self.nodes = node_map(cluster)
        from planner.apply.placement import scenario_nodes

        inventory = [Node(n["name"], n["gpu_type"], n["gpus"], n["dram_gb"]) for n in scenario_nodes(cluster)]
        if kind == "sim" and sim_state is not None and not Path(sim_state).exists() and Path(journal_path).exists():
            journal = Journal(journal_path)
            try:
                running = journal.unfinished()
            finally:
                journal.close()
            if running is not None:
                from planner.errors import Problem, UserError

                raise UserError(Problem("--state", f"the executor's journal {journal_path} holds the interrupted apply #{running['id']} "
                                        f"({running['plan_name']}), but the simulated cluster it was applied to ({sim_state}) is gone",
                                        "restore that file; starting an empty cluster would drop the interrupted apply and every "
                                        "job that ran"))
        self.backend = open_backend(kind, address=address, sim_state=str(sim_state) if sim_state else None, nodes=inventory,
                                    deadlines=Deadlines())
        # With the simulated backend the cluster is a file written with synchronous=NORMAL: a journal
        # more durable than the cluster it describes buys nothing, and costs two fsyncs a step.
        self.journal = Journal(journal_path, synchronous="NORMAL" if kind == "sim" else "FULL")
        # Set by the daemon: why this process may no longer act (its lease epoch moved on), and its epoch.
        self.fence: Optional[Callable[[], Optional[str]]] = None
        self.fence_epoch: Callable[[], Optional[int]] = lambda: None
        # Set by the daemon: called after every step that completes (the loop's progress: it keeps the lease).
        self.on_progress: Callable[[], None] = lambda: None

    # ------------------------------------------------------------------ helpers
    def _target_state(self, target: Placement):
        from executor.target import to_state

        from planner.apply.placement import from_placement

        m = self.nodes
        groups = []
        for g in target.groups:
            rn, tn = [m[n] for n in g.rollout_nodes], [m[n] for n in g.train_nodes]
            gpn_r = next(x.gpus_per_node for x in self.cluster.cluster.node_groups if x.gpu_type == g.rollout_type)
            gpn_t = next(x.gpus_per_node for x in self.cluster.cluster.node_groups if x.gpu_type == g.train_type)
            groups.append({"id": g.id, "rollout_pool": {"gpu_type": g.rollout_type, "nodes": rn, "gpus_per_node": gpn_r},
                           "train_pool": {"gpu_type": g.train_type, "nodes": tn, "gpus_per_node": gpn_t},
                           "members": [{"job": j, "rollout_nodes": [m[n] for n in g.rollout_of(j)], "train_nodes": tn} for j in g.members]})
        if not groups:  # nothing placed: the executor's target document needs a component, the state does not
            from executor.state import ClusterState

            return ClusterState(nodes=dict(self.backend.nodes()))
        dram = {j: self.dram_of(j) for g in target.groups for j in g.members}
        return to_state(from_placement({"groups": groups}, self.cluster, dram, self.spec_of))

    def _unreadable(self, target: Placement) -> list[str]:
        """The target's members whose files (a trace, a model's config.json) no longer read: job and field, never a value."""
        from planner.daemon.datafiles import unreadable

        out = []
        for job in sorted(target.jobs()):
            spec = self.spec_of(job) if self.spec_of is not None else None
            why = unreadable(spec) if spec is not None else None
            if why is not None:
                out.append(f"job '{job}': {why}")
        return out

    def _save(self) -> None:
        if hasattr(self.backend, "save") and not (self.fence is not None and self.fence()):
            self.backend.save()

    def _on_step(self, should_stop: Optional[Callable[[], bool]] = None) -> Callable:
        def on_step(step, status, data) -> None:  # (the controller has the sim backend save each step before journaling it done)
            if status == "running":
                if self.step_delay_s > 0:
                    time.sleep(self.step_delay_s)
                return
            self.on_progress()  # done, skipped (done before), compensated, failed: the apply moves on
            if status == "done" and should_stop is not None and should_stop():
                raise StopApply()

        return on_step

    def _refresh(self) -> None:
        """Before each apply: the cluster as the file says now (another daemon may have applied since we loaded it)."""
        if hasattr(self.backend, "refresh") and self.backend.refresh():
            log.warning("reloaded the simulated cluster: another daemon changed it since this one loaded it")

    # ------------------------------------------------------------------ the port
    def observe(self, now: float) -> Observation:
        if self.world is not None:
            obs = self.world.observe(now)
            if self.telemetry and obs.running:
                obs.telemetry += self._sim_telemetry(obs, now)
            obs.dead_nodes = self.dead_nodes()
            return obs
        from executor.backends.base import observe

        obs = Observation()
        st = observe(self.backend)
        for job in _trainers_running(st):
            obs.running[job] = ""
        obs.dead_nodes = _dead_nodes(self.backend, st)
        return obs

    def revive_node(self, node: str) -> str:
        """An operator says ``node`` is repaired: the executor's own record of it as dead is cleared
        (plans may use it again); what Ray reports is Ray's (a node it holds dead stays out until it
        reports it alive). Returns what was done, in a sentence for the decision log."""
        why = self.backend.coord("revive_node", node)
        live = self.backend.nodes().get(node)
        still = "" if live is None or live.alive else "; the backend still reports it dead: it stays out of plans until that changes"
        if why is None:
            return f"node {node}: the executor had not declared it dead, nothing to clear{still}"
        return f"node {node}: the executor's record of it as dead ({why}) is cleared; plans may use it again{still}"

    def dead_nodes(self) -> dict[str, str]:
        """node -> why, for the nodes the executor's view holds dead (the backend reports it so, e.g.
        Ray's node table, or the executor declared it: unreachable, frozen). No plan may use them."""
        from executor.backends.base import observe

        return _dead_nodes(self.backend, observe(self.backend))

    def missing(self, target: Placement) -> dict[str, str]:
        """The members of ``target`` (the plan in force) the executor's backend runs no live trainer
        worker of, or that lost workers the executor's diff replaces (a component whose every worker
        died, a trainer rank, rollout engines: processes gone, on live nodes), and why: the daemon
        applies the plan again for them. (Its view, not the simulated world's: a job whose workers are
        gone from the cluster is missing whatever the world says.)"""
        from executor.backends.base import observe
        from executor.diff import dead_workers

        st = observe(self.backend)
        jobs = set(target.jobs())
        live = _trainers_running(st)
        out = {j: "the cluster runs no trainer worker of it" for j in sorted(jobs) if j not in live}
        for c in sorted(st.components.values(), key=lambda c: c.name):
            if c.job not in jobs or c.job in out:
                continue
            ws = c.live_workers()
            dead = dead_workers(c, st.nodes) or ([w for w in ws if w.status == "dead" and st.nodes.get(w.node, None) is not None
                                                  and st.nodes[w.node].alive] if c.role == "rollout" else [])
            if dead:
                out[c.job] = f"{len(dead)} of the {len(ws)} worker(s) of {c.name} are dead ({', '.join(w.id for w in dead)})"
        return out

    def lost(self, target: Placement) -> dict[str, str]:
        """The members of ``target`` whose training state went with their workers, and why: every
        trainer rank dead, steps committed, no checkpoint (:func:`executor.diff.lost_state`). A restore
        cannot bring them back (the executor refuses it): the daemon fails them instead."""
        from executor.backends.base import observe
        from executor.diff import lost_state

        jobs = set(target.jobs())
        return {name.split("/", 1)[0]: why for name, why in sorted(lost_state(observe(self.backend)).items())
                if name.split("/", 1)[0] in jobs}

    def _sim_telemetry(self, obs: Observation, now: float) -> list:
        from executor.backends.base import observe
        from formulation.realloc.telemetry import TelemetrySnapshot

        from planner.daemon.adapters.simwork import snapshot

        st = observe(self.backend)
        out = []
        for job in sorted(obs.running):
            ph = self.world.phase(job, now)
            snap = snapshot(st, job, ph) if ph is not None else None
            if snap is not None:
                out.append(TelemetrySnapshot.model_validate(snap))
        return out

    def describe(self) -> dict:
        """What runs: per node GPUs and DRAM in use; per component its workers; the request ledger."""
        from executor.backends.base import observe

        st = observe(self.backend)
        comps = []
        for c in sorted(st.components.values(), key=lambda c: c.name):
            live = sorted(c.live_workers(), key=lambda w: w.index)
            comps.append({"name": c.name, "job": c.job, "role": c.role, "group": c.group, "reserves": c.reserves,
                          "layout": vars(c.layout) | {} if c.role == "trainer" else None, "generation": c.generation,
                          "placement": c.placement_counts(), "gpus": sum(w.gpus for w in live),
                          "workers": [{"id": w.id, "node": w.node, "gpus": w.gpus, "index": w.index, "status": w.status} for w in live]})
        return {"backend": self.name, "nodes": st.table(), "components": comps, "parked": st.parked,
                "ledger": self.backend.coord("ledger_summary")}

    def apply(self, target: Placement, *, plan_id: int, now: float, should_stop: Callable[[], bool]) -> ApplyResult:
        from executor.backends.base import observe
        from executor.controller import Executor
        from executor.diff import diff
        from planner.errors import UserError

        from executor.journal import Fenced

        if self.fence is not None and self.fence():
            return ApplyResult(False, 0, 0, f"not applied: {self.fence()}", interrupted=True)
        self._refresh()
        digest = f"daemon-plan-{plan_id}"
        steps, units, notes, order_ms = [], 0, [], 0.0
        try:
            cur = self.journal.unfinished()
            if cur is None:  # nothing journaled: settle what the cluster itself shows half migrated
                from executor.recover import settle

                for note in settle(self.backend):
                    log.warning("recovered without a journal: %s", note)
            journaled = cur["steps"] if cur is not None and cur["plan_digest"] == digest else None
            if journaled is not None:
                # this plan's interrupted apply: the journaled steps are carried out (a new diff would be
                # dropped), so the target, whose DRAM estimate reads every member's files, is not built
                units = len({s.unit for s in journaled})
            else:
                t0 = time.perf_counter()
                try:
                    state = self._target_state(target)
                except ValueError as exc:  # (TraceError, HFConfigError) a file a member's spec names may no longer read
                    gone = self._unreadable(target)
                    if gone:
                        return ApplyResult(False, 0, 0, "not applied: a file a job's spec names can no longer be read: " + "; ".join(gone))
                    # a target the executor cannot hold (its schema refuses it): a failed apply, whose jobs wait
                    # and are admitted again, not a raise that leaves the plan applying and every later plan behind it
                    log.error("the executor's target of plan %s is not valid: %s", plan_id, exc)
                    first = str(exc).splitlines()
                    return ApplyResult(False, 0, 0, "not applied: the executor's target is not valid: " + "; ".join(first[:3])[:600])
                plan = diff(observe(self.backend), state, stage=True)
                order_ms = (time.perf_counter() - t0) * 1e3
                steps, units, notes = plan.steps, len(plan.units), plan.notes
        except UserError as exc:
            return ApplyResult(False, 0, 0, f"the executor refuses the target: {exc.render()}")

        ex = Executor(self.backend, self.journal, on_step=self._on_step(should_stop), fence=self.fence)
        total = len(journaled) if journaled is not None else len(steps)
        try:
            res = ex.apply(steps, name=f"daemon plan {plan_id}", digest=digest, fence_epoch=self.fence_epoch())
        except Fenced as exc:  # superseded: nothing more is done or saved; the new holder resumes the apply
            log.error("fenced: %s", exc)
            return ApplyResult(False, 0, total, f"fenced: {exc}", interrupted=True)
        except StopApply:
            self._save()
            return ApplyResult(False, 0, total, "stopped after the step in progress; the executor's journal resumes it", interrupted=True)
        except UserError as exc:  # e.g. an unfinished apply of another plan in the journal
            return ApplyResult(False, 0, total, exc.render())
        self._save()
        if res.status != "done":
            return ApplyResult(False, res.steps_run, total, f"executor apply #{res.apply_id} {res.status}: {res.message}")
        running = frozenset(target.jobs())
        if self.world is not None:
            w = self.world.apply(target, plan_id=plan_id, now=now, should_stop=lambda: False)
            running = w.running
        if self.requests_per_job:
            from planner.daemon.adapters.simwork import submit_requests

            for job in sorted(running):
                submit_requests(self.backend, job, self.requests_per_job)
            self._save()
        said = ("" if journaled is not None else f", ordered in {order_ms:.1f} ms") + (" (resumed)" if res.resumed else "") \
            + "".join(f"; {n}" for n in notes)
        return ApplyResult(True, res.steps_run, total, f"executor apply #{res.apply_id}: {res.steps_run} step(s) in {units} unit(s)" + said,
                           running=running)

    def resume(self, plan_id: int, target: Placement, *, now: float, should_stop: Callable[[], bool]) -> ApplyResult:
        return self.apply(target, plan_id=plan_id, now=now, should_stop=should_stop)

    def apply_realloc(self, job: str, body: dict, *, now: float, decision_id: Optional[int] = None) -> ApplyResult:
        from executor.adapters.plans import from_realloc
        from executor.backends.base import observe
        from executor.controller import Executor
        from executor.diff import diff
        from executor.journal import Fenced
        from executor.target import to_state
        from planner.errors import UserError

        self._refresh()
        try:
            observed = observe(self.backend)
            plan = diff(observed, to_state(from_realloc(body, observed)), stage=True)
            name = f"{REALLOC_NAME}{job} (iteration {body.get('iteration')}" + (f", decision {decision_id})" if decision_id else ")")
            res = Executor(self.backend, self.journal, on_step=self._on_step(), fence=self.fence).apply(
                plan.steps, name=name, digest=f"{REALLOC_DIGEST}{decision_id}" if decision_id else None, fence_epoch=self.fence_epoch())
        except Fenced as exc:
            return ApplyResult(False, 0, 0, f"fenced: {exc}", interrupted=True)
        except UserError as exc:
            return ApplyResult(False, 0, 0, f"the executor refuses the reallocation: {exc.render()}")
        finally:
            self._save()
        kinds = ", ".join(f"{u.component.split('/', 1)[1]}: {u.kind}" for u in plan.units)
        notes = "".join(f"; {n}" for n in plan.notes)
        return ApplyResult(res.status == "done", res.steps_run, len(plan.steps),
                           f"executor apply #{res.apply_id} {res.status}: {len(plan.steps)} step(s) ({kinds}){notes}"
                           + (f"; {res.message}" if res.status != "done" else ""))

    def settle_realloc(self) -> Optional[ReallocSettlement]:
        """End a reallocation's apply that the journal holds unfinished (a crash or a lost lease cut it
        short); None when it holds none. The executor's rollback does it (as ``planner apply
        --rollback``): the unit in flight is undone, or finished when it had passed its commit point."""
        from executor.controller import Executor
        from executor.journal import Fenced
        from planner.errors import UserError

        cur = self.journal.unfinished()
        if cur is None or not (str(cur["plan_digest"]).startswith(REALLOC_DIGEST) or str(cur["plan_name"] or "").startswith(REALLOC_NAME)):
            return None
        did = cur["plan_digest"][len(REALLOC_DIGEST):] if str(cur["plan_digest"]).startswith(REALLOC_DIGEST) else ""
        job = cur["steps"][0].component.split("/", 1)[0] if cur["steps"] else str(cur["plan_name"])[len(REALLOC_NAME):].split(" ", 1)[0]
        settlement = dict(job=job, apply_id=cur["id"], decision_id=int(did) if did.isdigit() else None)
        self._refresh()
        try:
            res = Executor(self.backend, self.journal, on_step=self._on_step(), fence=self.fence).rollback_unfinished(
                fence_epoch=self.fence_epoch())
        except Fenced as exc:
            return ReallocSettlement(**settlement, outcome="interrupted", message=f"fenced: {exc}")
        except UserError as exc:  # e.g. the journal is locked by a live apply of another process: left as it is
            return ReallocSettlement(**settlement, outcome="unsettled", message=f"could not settle it: {exc.render()}")
        self._save()
        if res is None:  # (another process settled it meanwhile)
            return None
        unit_of = {s.seq: s.unit for s in cur["steps"]}
        units: dict[str, list[str]] = {}
        for r in self.journal.step_rows(cur["id"]):
            units.setdefault(unit_of[r["seq"]], []).append(r["status"])
        done = [u for u, sts in units.items() if all(x == "done" for x in sts)]
        undone = [u for u, sts in units.items() if any(x == "compensated" for x in sts)]
        left = [u for u, sts in units.items() if u not in done and u not in undone]
        outcome = "failed" if res.status == "failed" else ("applied" if len(done) == len(units) else "rolled-back")
        stands = (f"; done and standing: {', '.join(done)}" if done else "") + (f"; undone: {', '.join(undone)}" if undone else "") \
            + (f"; not carried out: {', '.join(left)}" if left else "")
        return ReallocSettlement(**settlement, outcome=outcome,
                                 message=f"executor apply #{cur['id']} ({cur['plan_name']}) {res.status}: {res.message}{stands}")

    def realloc_status(self, decision_id: int) -> Optional[str]:
        """How the journal says the reallocation of ``decision_id`` ended: done, rolled_back, failed, running; None: never journaled."""
        row = self.journal.last_of(f"{REALLOC_DIGEST}{decision_id}")
        return row["status"] if row else None

    def close(self, save: bool = True) -> None:
        """``save=False``: a daemon that lost the lease (or never held it) leaves the cluster file as it is."""
        if save:
            self._save()
        self.journal.close()
        if hasattr(self.backend, "save"):
            self.backend.close(save=save and not (self.fence is not None and self.fence()))
        else:
            self.backend.close()
        if self.world is not None:
            self.world.close()


def available() -> Optional[str]:
    """None when the executor can apply here; else why not (the daemon then lets its simulated
    cluster apply by itself: the core install, without torch or ray, still runs the daemon on sim)."""
    from executor.session import missing_modules

    missing = missing_modules("sim")
    if missing:
        return f"the executor's workers need {' and '.join(missing)} (pip install 'rl-planner[executor]')"
    try:
        import executor.adapters.plans  # noqa: F401
        import executor.controller  # noqa: F401
        import planner.apply.placement  # noqa: F401
    except ImportError as exc:
        return f"the executor is not in this build: {exc}"
    return None
