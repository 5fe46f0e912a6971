"""The co-execution placement planner (:mod:`formulation.placement`, after Weave) behind the daemon's seam.

Glue only; every decision is the planner's:

* the instance: :func:`planner.instances.placement.compile_job` per job (cached per job spec),
  with each job's phase tables multiplied by the drift factors telemetry taught the daemon
  (rollout times by the rollout factor, training and weight sync by the training factor);
* **place one job**: the planner's greedy :class:`~formulation.placement.greedy.Packer` loaded
  with the current groups (anchored to their ids), one ``best_move`` (fill a bubble, extend the
  rollout pool, open a group); a job no move places is explained by
  :func:`~formulation.placement.explain.explain`, and rejected for good only when no pool
  configuration can ever serve it (``job_configs`` empty: SLO, DRAM or no pool type);
* **re-optimise**: :func:`formulation.placement.solve.solve` with the current plan as warm start
  (groups still feasible are kept on their nodes; ``move_price_per_job`` charged per moved job),
  under the daemon's wall-clock limit; ``keep_groups`` names current groups taken over exactly as
  they are: the solve sees neither their members nor their nodes (the pools shrink by those
  nodes), and its groups are merged with them, any that took the id of a kept group renamed;
* **evaluate**: the plan body :func:`~formulation.placement.plan.build_plan` makes of the
  placement at the current estimates, judged by the solver-free checker
  :func:`formulation.placement.check.check`.
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING, Optional

from planner.daemon.ports import Admission, Group, Placement, PlanningContext, Reoptimisation, Violation
from planner.instances.common import ClusterView, resolve_gpu_types
from planner.schema.scenario import Scenario

if TYPE_CHECKING:
    from formulation.placement.instance import PlacementJob


class WeavePlacer:
    name = "weave"

    def __init__(self, cluster: Scenario, backend: str = "auto") -> None:
        from formulation.placement.instance import PoolType

        self.cluster = cluster
        self.backend = backend
        self.view = ClusterView(cluster, resolve_gpu_types(cluster))
        self.mode = cluster.solver.phase_time_estimate
        self.pools = {}
        for t in self.view.types():
            spec = cluster.gpu_types.get(t)
            price = spec.price_per_gpu_hour if spec and spec.price_per_gpu_hour else self.view.gpu_types[t].price_per_gpu_hour
            self.pools[t] = PoolType(gpus_per_node=self.view.gpus_per_node(t), price_per_gpu_hour=price, dram_gb=self.view.dram_gb(t),
                                     count=self.view.nodes_of(t), node_names=self.view.node_names(t))
        self._compiled: dict[tuple[str, str], PlacementJob] = {}

    # ------------------------------------------------------------------ instance
    def _job(self, ctx: PlanningContext, name: str, scaled: bool = True) -> PlacementJob:
        from planner.instances.placement import compile_job

        spec = ctx.jobs[name]
        key = (name, spec.model_dump_json())
        if key not in self._compiled:
            self._compiled[key] = compile_job(spec, self.view, self.mode)
        base = self._compiled[key]
        f = ctx.factor(name)
        if not scaled or (f.rollout == 1.0 and f.train == 1.0):
            return base
        return base.model_copy(update={
            "rollout_s": {t: {n: v * f.rollout for n, v in row.items()} for t, row in base.rollout_s.items()},
            "train_s": {t: {n: v * f.train for n, v in row.items()} for t, row in base.train_s.items()},
            "sync_s": {a: {b: v * f.train for b, v in row.items()} for a, row in base.sync_s.items()},
        })

    def _instance(self, ctx: PlanningContext, names: list[str], scaled: bool = True, reserved: frozenset[str] = frozenset()):
        """The placement instance of these jobs; ``reserved`` nodes, and the nodes the executor reports
        dead (``ctx.unavailable``), are left out of the pools."""
        from formulation.placement.instance import PlacementInstance, pool_node_names

        price = self.cluster.solver.move_price_per_job if ctx.move_price_per_job is None else ctx.move_price_per_job
        pools = self.pools
        reserved = reserved | ctx.unavailable
        if reserved:
            pools = {}
            for t, p in self.pools.items():
                left = [n for n in pool_node_names(t, p) if n not in reserved]
                pools[t] = p.model_copy(update={"count": len(left), "node_names": left})
        # members pinned to rollout nodes of their own (the instance's default member counts), as `planner plan` places them
        return PlacementInstance(name=self.cluster.name, pool_types=pools, jobs=[self._job(ctx, n, scaled) for n in names],
                                 move_price_per_job=price)

    @staticmethod
    def _index(inst, *held: Placement):
        """The instance's index, with the own-sized configurations of the pinned groups in ``held``
        carried into it (an instance past ``OWN_MAX_JOBS`` jobs leaves own-sized ones out: the groups
        own-sized when fewer jobs ran must stay representable as more arrive)."""
        from formulation.placement.evaluate import Index
        from formulation.placement.plan import own_config

        carry = [own_config(g.rollout_type, len(g.rollout_nodes), g.train_type, len(g.train_nodes))
                 for p in held for g in p.groups if g.pinned]
        return Index(inst, carry=carry)

    def _groups(self, idx, placement: Placement):
        """The placement as the planner's anchored groups, and their nodes."""
        from formulation.placement.evaluate import Config, Group as PGroup
        from formulation.placement.plan import own_config

        pos = {n: i for i, n in enumerate(idx.names)}
        groups, nodes = [], {}
        for g in placement.groups:
            if g.pinned:  # members on rollout nodes of their own: (p, r, q, n_T, m) with m = pool nodes / r
                r = len(g.member_rollout[0])
                c = Config(g.rollout_type, r, g.train_type, len(g.train_nodes), len(g.rollout_nodes) // r)
                if len({n for x in g.member_rollout for n in x}) != sum(len(x) for x in g.member_rollout) \
                        or not all(g.member_rollout):
                    raise ValueError(f"group {g.id}: its members' own rollout nodes {[list(x) for x in g.member_rollout]} are not "
                                     "disjoint; re-plan the group")
                if any(len(x) != r for x in g.member_rollout) or len(g.rollout_nodes) % r or idx.config_id.get(c) is None:
                    c = own_config(g.rollout_type, len(g.rollout_nodes), g.train_type, len(g.train_nodes))  # counts of their own
            else:
                c = Config(g.rollout_type, len(g.rollout_nodes), g.train_type, len(g.train_nodes))
            k = idx.config_id.get(c)
            if k is None:
                raise ValueError(f"group {g.id}: {c.label()} is not a pool configuration of the placement instance")
            groups.append(PGroup(k, tuple(pos[m] for m in g.members), g.id))
            nodes[g.id] = {"rollout": list(g.rollout_nodes), "train": list(g.train_nodes),
                           "members": {m: list(g.rollout_of(m)) for m in g.members}}
        return groups, nodes

    def _body(self, idx, placement: Placement):
        from formulation.placement.evaluate import Solution
        from formulation.placement.plan import build_plan

        groups, nodes = self._groups(idx, placement)
        return build_plan(idx, Solution(groups), [], nodes, as_is=True)

    @staticmethod
    def _placement(body) -> Placement:
        from formulation.placement.plan import config_of

        def own(g) -> tuple:  # each member's own rollout nodes, in the group's order (pinned groups only)
            by = {m.job: tuple(m.rollout_nodes) for m in g.members}
            return tuple(by[j] for j in g.order) if config_of(g).pinned else ()

        return Placement(tuple(Group(g.id, g.rollout_pool.gpu_type, tuple(g.rollout_pool.nodes), g.train_pool.gpu_type,
                                     tuple(g.train_pool.nodes), tuple(g.order), float(g.cost_per_hour), float(g.cycle_time_s), own(g))
                               for g in body.groups))

    # ------------------------------------------------------------------ the port
    def admit(self, ctx: PlanningContext, current: Placement, job: str) -> Admission:
        from formulation.placement.evaluate import Solution
        from formulation.placement.explain import explain
        from formulation.placement.greedy import Packer
        from formulation.placement.plan import build_plan

        idx = self._index(self._instance(ctx, current.jobs() + [job]), current)
        groups, nodes = self._groups(idx, current)
        pk = Packer.from_groups(idx, groups, own_joins=True)
        j = idx.n - 1
        adm = pk.best_move(j)
        if adm.move is None:
            u = explain(idx, j, dict(pk.free))
            permanent = len(idx.job_configs[j]) == 0
            return Admission(job, None, None, 0.0, f"{u.reason}: {u.message} ({u.fix})", permanent=permanent)
        assert adm.config is not None  # every move the packer proposes names its configuration
        pk.apply(adm)
        sol = pk.solution()
        body = build_plan(idx, Solution(sol.groups), [], nodes, as_is=True)  # the groups it does not join as they stand
        return Admission(job, self._placement(body), adm.move, float(adm.marginal_cost),
                         f"{idx.configs[adm.config].label()}, +{adm.marginal_cost:.2f} $/h")

    def reoptimise(self, ctx: PlanningContext, current: Placement, time_limit_s: float,
                   keep_groups: frozenset[str] = frozenset()) -> Reoptimisation:
        from formulation.common import SolveOptions
        from formulation.placement.solve import solve

        kept = tuple(g for g in current.groups if g.id in keep_groups)
        rest = Placement(tuple(g for g in current.groups if g.id not in keep_groups))
        reserved = frozenset(n for g in kept for n in (*g.rollout_nodes, *g.train_nodes))
        inst = self._instance(ctx, rest.jobs(), reserved=reserved)
        idx = self._index(inst, rest)
        if kept:
            # only the configurations the whole plan's instance has, so that the merged plan is one of its plans:
            # fewer jobs can bring configurations more jobs leave out (own-sized ones, up to evaluate.OWN_MAX_JOBS jobs)
            whole = self._index(self._instance(ctx, current.jobs()), current).config_id
            own_out = any(c.own and c not in whole for c in idx.configs)
            idx = idx.restrict_configs([k for k, c in enumerate(idx.configs) if c in whole])
            if own_out:  # what the bound's claim says of the plan space
                idx.own_left_out = idx.n
        body = self._body(idx, rest)
        sc = self.cluster.solver
        res = solve(inst, SolveOptions(time_limit_s=time_limit_s, mip_gap=sc.mip_gap, threads=1, seed=sc.seed,
                                       warm_start_name="previous-plan"), self.backend, current=body, idx=idx)
        rec = res.record.as_dict()
        around = (f" around the kept group(s) {', '.join(g.id for g in kept)} (the other jobs on the "
                  f"{sum(p.count for p in inst.pool_types.values())} node(s) those leave)") if kept else ""
        why = (f"re-optimised ({rec['backend']}, {rec['status']}, gap {rec['gap'] if rec['gap'] is not None else 'n/a'}) warm-started "
               f"from the current plan{around}: {res.plan.cost_per_hour:.2f} $/h"
               + (f", bound {res.plan.lower_bound_per_hour:.2f}" if res.plan.lower_bound_per_hour is not None else ""))
        if res.plan.unplaced:
            why += "; left out: " + ", ".join(f"{u.job} ({u.reason})" for u in res.plan.unplaced)
        placed = self._placement(res.plan)
        if kept:
            placed = merge_kept(kept, placed)
            rec["kept_groups"] = [g.id for g in kept]
            why += f"; with the kept group(s): {placed.cost_per_hour:.2f} $/h"
        return Reoptimisation(placed, rec, why)

    def evaluate(self, ctx: PlanningContext, placement: Placement) -> tuple[Placement, list[Violation]]:
        from formulation.placement.check import check

        inst = self._instance(ctx, placement.jobs())
        body = self._body(self._index(inst, placement), placement)
        out = []
        for v in check(inst, body):
            parts = dict(p.split("=", 1) for p in v.where.split(",") if "=" in p)
            out.append(Violation(v.rule, parts.get("job") or parts.get("group") or v.where, f"{v.rule} [{v.where}]: {v.message}"))
        return self._placement(body), out

    def predict(self, ctx: PlanningContext, placement: Placement) -> dict[str, tuple[float, float]]:
        out: dict[str, tuple[float, float]] = {}
        for g in placement.groups:
            for m in g.members:
                if m not in ctx.jobs:
                    continue
                pj = self._job(ctx, m, scaled=False)
                a = pj.rollout_s.get(g.rollout_type, {}).get(len(g.rollout_of(m)))
                b = pj.train_s.get(g.train_type, {}).get(len(g.train_nodes))
                if a is not None and b is not None:
                    out[m] = (float(a), float(b + pj.sync(g.rollout_type, g.train_type)))
        return out

    def plan_document(self, ctx: PlanningContext, placement: Placement, solver: dict) -> dict:
        from planner.plandoc import PlanDocument, SolverRecord, scenario_digest, to_data

        body = self._body(self._index(self._instance(ctx, placement.jobs()), placement), placement)
        fields = {k: solver.get(k) for k in ("backend", "status", "objective", "best_bound", "gap", "time_limit_s", "warm_start")
                  if solver.get(k) is not None}
        rec = SolverRecord(**{"backend": "greedy-admit", "status": "feasible", **fields}, wall_time_s=float(solver.get("wall_time_s") or 0.0),
                           message=str(solver.get("message") or ""))
        doc = PlanDocument(kind="PlacementPlan", scenario=self.cluster.name, scenario_digest=scenario_digest(self.cluster), solver=rec,
                           body=body.model_dump(mode="json"))
        return to_data(doc)


def merge_kept(kept: tuple[Group, ...], placed: Placement) -> Placement:
    """The kept groups as they are, with the groups of a solve that never saw them: a solved group
    whose id is a kept group's gets the first free ``g<i>`` (a solve names its new groups so)."""
    kept_ids = {g.id for g in kept}
    used = kept_ids | {g.id for g in placed.groups}
    out = list(kept)
    i = 0
    for g in placed.groups:
        if g.id in kept_ids:
            while f"g{i}" in used:
                i += 1
            used.add(f"g{i}")
            g = replace(g, id=f"g{i}")
        out.append(g)
    return Placement(tuple(sorted(out, key=lambda g: (len(g.id), g.id))))


def available() -> Optional[str]:
    """None when the placement planner is installed, else why not."""
    try:
        import formulation.placement.solve  # noqa: F401
        import planner.instances.placement  # noqa: F401
    except ImportError as exc:
        return f"the placement planner (formulation.placement) is not in this build: {exc}"
    return None
