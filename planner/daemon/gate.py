"""Keep a change only if its gain beats its migration cost.

An *optional* change (a periodic or departure-triggered re-optimisation) saves
``Δ = cost_before - cost_after`` dollars per hour. It is worth ``gain = Δ x amortise_s / 3600``
dollars over the horizon the daemon is willing to count on (the plan will be revised again within
it anyway), against a one-off **migration cost**: for every job whose node pins change,

* ``moved`` (some node it held is gone): a cold start elsewhere, ``estimators.comm.cold_start_s``
  of its training state (process launch, state read from storage, host→GPU copy);
* ``extended`` (it keeps its nodes and gains rollout nodes): the new nodes load its bf16 weights,
  ``estimators.comm.cold_start_s`` of the weights alone on the rollout GPU type,

priced as the job's share of its new group's $/h (the group cost over its members) for that
downtime, plus the scenario's ``solver.move_price_per_job`` (a $/h charge per moved job, counted
over the same horizon). The change is kept when ``gain > (1 + gain_margin) x migration``, and the
moves fit the rate limit. Mandatory changes (admissions, departures, SLO repairs) are not gated:
their migration cost is recorded all the same.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import lru_cache

from estimators import comm, memory
from planner.daemon.ports import Placement, PlanningContext, moved_jobs
from planner.instances.common import resolve_gpu_types, resolve_model


@dataclass
class Verdict:
    keep: bool
    gain_usd: float
    migration_usd: float
    moves: dict[str, str]
    reasons: list[str] = field(default_factory=list)


@lru_cache(maxsize=64)
def _gpu_types(cluster_json: str):
    from planner.schema.scenario import Scenario

    return resolve_gpu_types(Scenario.model_validate_json(cluster_json))


def downtime_s(ctx: PlanningContext, job: str, kind: str, train_type: str, rollout_type: str) -> float:
    spec = ctx.jobs[job]
    gpus = _gpu_types(ctx.cluster.model_dump_json())
    model = resolve_model(spec)
    if kind == "extended":
        w = memory.training_state(model).weights_bytes
        gpu = gpus[rollout_type]
        return comm.cold_start_s(w, w / max(1, spec.rollout.tp), gpu)
    st = memory.training_state(model).total_bytes
    gpu = gpus[train_type]
    n = max(1, spec.trainer.nodes)
    per_gpu = st / (n * max(1, _gpus_per_node(ctx, train_type)))
    return comm.cold_start_s(st / n, per_gpu, gpu)


def _gpus_per_node(ctx: PlanningContext, gpu_type: str) -> int:
    for g in ctx.cluster.cluster.node_groups:
        if g.gpu_type == gpu_type:
            return g.gpus_per_node
    return 8


def migration_usd(ctx: PlanningContext, before: Placement, after: Placement) -> tuple[float, dict[str, str], dict[str, float]]:
    """Dollars the moves from ``before`` to ``after`` cost, the moves, and the cost per job."""
    moves = moved_jobs(before, after)
    groups = after.job_groups()
    per_job: dict[str, float] = {}
    for job, kind in moves.items():
        g = groups[job]
        rate = g.cost_per_hour / max(1, len(g.members))
        per_job[job] = downtime_s(ctx, job, kind, g.train_type, g.rollout_type) / 3600.0 * rate
    return float(sum(per_job.values())), moves, per_job


def move_price_per_hour(ctx: PlanningContext, placement: Placement, *, amortise_s: float, margin: float) -> float:
    """The $/h per moved job that makes a re-optimisation weigh moves as this gate will.

    A move pays when its share of the saving, counted over ``amortise_s``, beats ``(1 + margin)``
    times its migration cost: so each moved job is charged its mean migration cost (over the jobs
    placed now) times ``(1 + margin)``, spread over the horizon in hours. Never below the
    scenario's own ``solver.move_price_per_job``.
    """
    costs = []
    for g in placement.groups:
        rate = g.cost_per_hour / max(1, len(g.members))
        for m in g.members:
            if m in ctx.jobs:
                costs.append(downtime_s(ctx, m, "moved", g.train_type, g.rollout_type) / 3600.0 * rate)
    mean = sum(costs) / len(costs) if costs else 0.0
    return max(ctx.cluster.solver.move_price_per_job, (1.0 + margin) * mean / (amortise_s / 3600.0))


def judge(ctx: PlanningContext, before: Placement, after: Placement, *, amortise_s: float, margin: float) -> Verdict:
    """Whether an optional change pays for its moves, with the figures that say so."""
    delta = before.cost_per_hour - after.cost_per_hour
    gain = delta * amortise_s / 3600.0
    mig, moves, per_job = migration_usd(ctx, before, after)
    price = ctx.cluster.solver.move_price_per_job * sum(1 for k in moves.values() if k == "moved") * amortise_s / 3600.0
    mig += price
    reasons = [f"cost {before.cost_per_hour:.2f} -> {after.cost_per_hour:.2f} $/h: gain {gain:.2f} $ over {amortise_s:.0f} s",
               f"migration {mig:.2f} $ for {len(moves)} job(s) whose nodes change"
               + (f" ({', '.join(f'{j} {k}' for j, k in sorted(moves.items())[:8])}{', ...' if len(moves) > 8 else ''})" if moves else "")]
    if delta <= 1e-9:
        reasons.append("kept the current plan: the re-optimised plan is not cheaper")
        return Verdict(False, gain, mig, moves, reasons)
    if gain > (1.0 + margin) * mig:
        reasons.append(f"changed: gain {gain:.2f} $ > (1 + {margin:g}) x migration {mig:.2f} $")
        return Verdict(True, gain, mig, moves, reasons)
    reasons.append(f"kept the current plan: gain {gain:.2f} $ does not beat (1 + {margin:g}) x migration {mig:.2f} $")
    return Verdict(False, gain, mig, moves, reasons)
