"""The executor (:mod:`executor`) behind the daemon's apply seam.

Glue only; every step is the executor's. A target placement becomes the executor's target state
with :func:`executor.adapters.plans.from_placement` (each group: a rollout-pool and a train-pool
component holding the pools' GPUs; each member: resident-state components pinned to its nodes
with its host DRAM), :func:`executor.diff.diff` orders the capacity-safe steps from what the
backend reports, and :class:`executor.controller.Executor` carries them out with its SQLite
journal (intent before each step, outcome after; a failed unit is rolled back).

* The journal key of a daemon plan is ``daemon-plan-<id>``: after a crash, applying the same
  plan again resumes the journaled steps (done ones are skipped), whatever the cluster looks like
  by then.
* SIGTERM: the step in progress finishes (its outcome is journaled), then the apply stops
  (:class:`StopApply` is raised from the executor's step callback, outside its error handling,
  so nothing is rolled back or marked failed) and is resumed by the next start.
* Node names: the placement planner names nodes ``<node group>-<i>``, the executor's scenario
  inventory ``<gpu type>-<i>`` per type; the adapter maps one to the other by type and position.
* ``--backend sim``: the executor's in-process simulated backend, saved to its state file after
  every step; the simulated cluster of :mod:`planner.daemon.adapters.simcluster` still says how
  the jobs run (iterations, completions) once the executor has applied their placement.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Callable, Optional

from planner.daemon.ports import ApplyResult, Observation, Placement
from planner.schema.scenario import Scenario


class StopApply(BaseException):
    """Raised between steps on SIGTERM (a BaseException: the executor's step handling must not catch it)."""


def node_map(cluster: Scenario) -> dict[str, str]:
    """Placement node name (``<group>-<i>``) -> executor node name (``<type lowercased>-<k>``)."""
    from executor.adapters.plans import scenario_nodes

    ours = [f"{g.name}-{i}" for g in cluster.cluster.node_groups for i in range(g.count)]
    theirs = [n["name"] for n in scenario_nodes(cluster)]
    return dict(zip(ours, theirs))


class ExecutorApplier:
    def __init__(self, kind: str, cluster: Scenario, journal_path: Path, dram_of: Callable[[str], tuple[float, float]], *,
                 sim_state: Optional[Path] = None, address: Optional[str] = None, world=None, step_delay_s: float = 0.0) -> None:
        from executor.backends.base import Deadlines
        from executor.journal import Journal
        from executor.session import open_backend
        from executor.state import Node

        self.name = kind
        self.cluster = cluster
        self.dram_of = dram_of
        self.world = world
        self.step_delay_s = step_delay_s  # wall seconds before each step (the simulated backend's steps are instant; tests need a window)
        self.nodes = node_map(cluster)
        from executor.adapters.plans import scenario_nodes

        inventory = [Node(n["name"], n["gpu_type"], n["gpus"], n["dram_gb"]) for n in scenario_nodes(cluster)]
        self.backend = open_backend(kind, address=address, sim_state=str(sim_state) if sim_state else None, nodes=inventory,
                                    deadlines=Deadlines())
        self.journal = Journal(journal_path)

    # ------------------------------------------------------------------ helpers
    def _target_state(self, target: Placement):
        from executor.adapters.plans import from_placement
        from executor.target import to_state

        m = self.nodes
        groups = []
        for g in target.groups:
            rn, tn = [m[n] for n in g.rollout_nodes], [m[n] for n in g.train_nodes]
            gpn_r = next(x.gpus_per_node for x in self.cluster.cluster.node_groups if x.gpu_type == g.rollout_type)
            gpn_t = next(x.gpus_per_node for x in self.cluster.cluster.node_groups if x.gpu_type == g.train_type)
            groups.append({"id": g.id, "rollout_pool": {"gpu_type": g.rollout_type, "nodes": rn, "gpus_per_node": gpn_r},
                           "train_pool": {"gpu_type": g.train_type, "nodes": tn, "gpus_per_node": gpn_t},
                           "members": [{"job": j, "rollout_nodes": rn, "train_nodes": tn} for j in g.members]})
        if not groups:  # nothing placed: the executor's target document needs a component, the state does not
            from executor.state import ClusterState

            return ClusterState(nodes=dict(self.backend.nodes()))
        dram = {j: self.dram_of(j) for g in target.groups for j in g.members}
        return to_state(from_placement({"groups": groups}, self.cluster, dram))

    def _save(self) -> None:
        if hasattr(self.backend, "save"):
            self.backend.save()

    # ------------------------------------------------------------------ the port
    def observe(self, now: float) -> Observation:
        if self.world is not None:
            return self.world.observe(now)
        from executor.backends.base import observe

        st = observe(self.backend)
        obs = Observation()
        for name, c in st.components.items():
            job, _, part = name.partition("/")
            if part == "trainer" and any(w.status == "running" for w in c.workers):
                obs.running[job] = ""
        return obs

    def apply(self, target: Placement, *, plan_id: int, now: float, should_stop: Callable[[], bool]) -> ApplyResult:
        from executor.backends.base import observe
        from executor.controller import Executor
        from executor.diff import diff
        from planner.errors import UserError

        try:
            plan = diff(observe(self.backend), self._target_state(target))
        except UserError as exc:
            return ApplyResult(False, 0, 0, f"the executor refuses the target: {exc.render()}")

        def on_step(step, status, data) -> None:
            if status in ("running", "done"):
                self._save()
            if status == "running" and self.step_delay_s > 0:
                time.sleep(self.step_delay_s)
            if status == "done" and should_stop():
                raise StopApply()

        ex = Executor(self.backend, self.journal, on_step=on_step)
        total = len(plan.steps)
        try:
            res = ex.apply(plan.steps, name=f"daemon plan {plan_id}", digest=f"daemon-plan-{plan_id}")
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
        return ApplyResult(True, res.steps_run, total, f"executor apply #{res.apply_id}: {res.steps_run} step(s)"
                           + (" (resumed)" if res.resumed else ""), running=running)

    def resume(self, plan_id: int, target: Placement, *, now: float, should_stop: Callable[[], bool]) -> ApplyResult:
        return self.apply(target, plan_id=plan_id, now=now, should_stop=should_stop)

    def apply_realloc(self, job: str, body: dict, *, now: float) -> ApplyResult:
        from executor.adapters.plans import from_realloc
        from executor.backends.base import observe
        from executor.controller import Executor
        from executor.diff import diff
        from executor.target import to_state
        from planner.errors import UserError

        try:
            observed = observe(self.backend)
            plan = diff(observed, to_state(from_realloc(body, observed)))
            res = Executor(self.backend, self.journal).apply(plan.steps, name=f"daemon realloc {job}")
        except UserError as exc:
            return ApplyResult(False, 0, 0, exc.render())
        finally:
            self._save()
        return ApplyResult(res.status == "done", res.steps_run, res.steps_run, f"executor apply #{res.apply_id} {res.status}: {res.message}")

    def close(self) -> None:
        self._save()
        self.journal.close()
        self.backend.close()
        if self.world is not None:
            self.world.close()


def available() -> Optional[str]:
    try:
        import executor.adapters.plans  # noqa: F401
        import executor.controller  # noqa: F401
    except ImportError as exc:
        return f"the executor is not in this build: {exc}"
    return None
