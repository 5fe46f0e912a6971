"""Plain disaggregation: every job alone in a group of its own, on its cheapest pools within its SLO.

This is the baseline Weave compares co-execution against (each job holds its own rollout and
training pools; nothing fills anyone's bubble), and the placement a daemon runs with
``--placer solo``. Nothing here re-optimises: a job's pools depend on that job only, so there is
never a cheaper plan to move to except after a drift, which the loop handles by re-admitting.

Pool choice for a job: every (rollout type, training type) pair the job may use, at its own node
counts (``rollout.nodes``, ``trainer.nodes``), ordered by $/h and then by name; the first whose
iteration time (rollout + training + weight sync, each times the job's drift factor) meets its SLO
and whose nodes are free. Nodes are taken lowest name first (``<node group>-<i>``).
"""

from __future__ import annotations

from dataclasses import dataclass

from planner.daemon.ports import Admission, Group, PhaseFactors, Placement, PlanningContext, Reoptimisation, Violation
from planner.instances.common import ClusterView, JobEstimate, estimate_job, resolve_gpu_types
from planner.schema.scenario import Scenario


def node_names(cluster: Scenario, gpu_type: str) -> list[str]:
    return [f"{g.name}-{i}" for g in cluster.cluster.node_groups if g.gpu_type == gpu_type for i in range(g.count)]


def price_per_node(cluster: Scenario, view: ClusterView, gpu_type: str) -> float:
    spec = cluster.gpu_types.get(gpu_type)
    price = spec.price_per_gpu_hour if spec and spec.price_per_gpu_hour else (view.gpu_types[gpu_type].price_per_gpu_hour or 0.0)
    return float(price) * view.gpus_per_node(gpu_type)


@dataclass(frozen=True)
class _Option:
    cost: float
    rollout_type: str
    train_type: str
    rollout_s: float
    train_s: float  # training + weight sync

    def iteration_s(self, f: PhaseFactors) -> float:
        return self.rollout_s * f.rollout + self.train_s * f.train


class SoloPlacer:
    name = "solo"

    def __init__(self, cluster: Scenario) -> None:
        self.cluster = cluster
        self.view = ClusterView(cluster, resolve_gpu_types(cluster))
        self.mode = cluster.solver.phase_time_estimate
        self._est: dict[tuple[str, str], JobEstimate] = {}

    def _estimate(self, ctx: PlanningContext, job: str) -> JobEstimate:
        spec = ctx.jobs[job]
        key = (job, spec.model_dump_json())
        if key not in self._est:
            self._est[key] = estimate_job(spec, self.view, self.mode)
        return self._est[key]

    def _options(self, ctx: PlanningContext, job: str) -> list[_Option]:
        est = self._estimate(ctx, job)
        out = []
        for (a, b), s in est.sync_s.items():
            cost = est.rollout_nodes * price_per_node(self.cluster, self.view, a) + est.train_nodes * price_per_node(self.cluster, self.view, b)
            out.append(_Option(cost, a, b, float(est.rollout_s[a]), float(est.train_s[b] + s)))
        return sorted(out, key=lambda o: (o.cost, o.rollout_type, o.train_type))

    # ------------------------------------------------------------------ the port
    def admit(self, ctx: PlanningContext, current: Placement, job: str) -> Admission:
        est = self._estimate(ctx, job)
        f = ctx.factor(job)
        opts = self._options(ctx, job)
        ok = [o for o in opts if o.iteration_s(f) <= est.slo_s * (1 + 1e-9)]
        if not ok:
            best = min((o.iteration_s(f) for o in opts), default=float("inf"))
            why = (f"no pool pair meets its SLO of {est.slo_s:.1f} s: the fastest alone takes {best:.1f} s per iteration"
                   if opts else "the model fits no pool pair the job may use")
            return Admission(job, None, None, 0.0, why, permanent=True)
        used = {**current.nodes_in_use(), **{n: "dead" for n in ctx.unavailable}}  # (a dead node is never taken)
        short = []
        for o in ok:
            free_r = [n for n in node_names(self.cluster, o.rollout_type) if n not in used]
            r = free_r[:est.rollout_nodes]
            free_t = [n for n in node_names(self.cluster, o.train_type) if n not in used and n not in r]
            t = free_t[:est.train_nodes]
            if len(r) == est.rollout_nodes and len(t) == est.train_nodes:
                g = Group(f"g-{job}", o.rollout_type, tuple(r), o.train_type, tuple(t), (job,), o.cost, o.iteration_s(f))
                return Admission(job, Placement(current.groups + (g,)), "new-group", o.cost,
                                 f"new group on {len(r)}x{o.rollout_type} + {len(t)}x{o.train_type} at {o.cost:.2f} $/h, "
                                 f"iteration {o.iteration_s(f):.1f} s <= SLO {est.slo_s:.1f} s")
            short.append(f"{o.rollout_type}/{o.train_type} needs {est.rollout_nodes}+{est.train_nodes} nodes, "
                         f"{len(free_r)} {o.rollout_type} and {len(free_t)} {o.train_type} free")
        return Admission(job, None, None, 0.0, "waiting for room: " + "; ".join(short[:3]), permanent=False)

    def reoptimise(self, ctx: PlanningContext, current: Placement, time_limit_s: float,
                   keep_groups: frozenset[str] = frozenset()) -> Reoptimisation:
        # every group stays as it is anyway: the kept ones too
        rec = {"backend": "solo", "status": "optimal", "objective": current.cost_per_hour, "best_bound": None, "gap": None,
               "wall_time_s": 0.0, "warm_start": "previous-plan", "message": "plain disaggregation has nothing to re-optimise"}
        return Reoptimisation(current, rec, "solo placement: every job already sits on its own cheapest feasible pools")

    def _job_times(self, ctx: PlanningContext, job: str, g: Group) -> tuple[float, float]:
        est = self._estimate(ctx, job)
        return float(est.rollout_s[g.rollout_type]), float(est.train_s[g.train_type] + est.sync_s[(g.rollout_type, g.train_type)])

    def predict(self, ctx: PlanningContext, placement: Placement) -> dict[str, tuple[float, float]]:
        return {m: self._job_times(ctx, m, g) for g in placement.groups for m in g.members if m in ctx.jobs}

    def evaluate(self, ctx: PlanningContext, placement: Placement) -> tuple[Placement, list[Violation]]:
        groups, bad = [], []
        for g in placement.groups:
            times = [(m, *self._job_times(ctx, m, g)) for m in g.members]
            a = [r * ctx.factor(m).rollout for m, r, _ in times]
            b = [t * ctx.factor(m).train for m, _, t in times]
            cycle = max(sum(a), sum(b), max(x + y for x, y in zip(a, b)))
            groups.append(Group(g.id, g.rollout_type, g.rollout_nodes, g.train_type, g.train_nodes, g.members, g.cost_per_hour, cycle))
            for m in g.members:
                slo = self._estimate(ctx, m).slo_s
                if cycle > slo * (1 + 1e-9):
                    bad.append(Violation("slo", m, f"{m}: predicted iteration {cycle:.1f} s in group {g.id} exceeds its SLO {slo:.1f} s"))
        return Placement(tuple(groups)), bad

    def slo_s(self, ctx: PlanningContext, job: str) -> float:
        return float(self._estimate(ctx, job).slo_s)

    def plan_document(self, ctx: PlanningContext, placement: Placement, solver: dict) -> dict:
        from planner.plandoc import PlanDocument, SolverRecord, to_data, scenario_digest

        rec = SolverRecord(**{k: solver.get(k) for k in ("backend", "status", "objective", "best_bound", "gap", "time_limit_s", "warm_start")
                              if solver.get(k) is not None}, wall_time_s=float(solver.get("wall_time_s") or 0.0),
                           message=str(solver.get("message") or ""))
        doc = PlanDocument(kind="SoloPlacement", scenario=self.cluster.name, scenario_digest=scenario_digest(self.cluster), solver=rec,
                           body=placement.as_dict())
        return to_data(doc)
