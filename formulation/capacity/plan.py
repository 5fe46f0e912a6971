"""The capacity plan body (``kind: CapacityPlan``) and how a style's result becomes one.

What a buyer reads: the fleet per GPU type (owned, to buy, total, the availability limit, its
$/h, how busy its GPUs are), the fleet's $/h (owned nodes included) with a certified lower
bound, how the forecast runs on it (a :class:`formulation.placement.plan.PlacementPlan` for the
group styles; one colocated pool per job for the colocated style), the constraints that bind,
the minimum node counts per type with what one node fewer costs in SLO misses, the jobs the
fleet cannot serve and why, and the deployment styles side by side.
"""

from __future__ import annotations

from typing import Optional

from pydantic import BaseModel, ConfigDict, Field

from formulation.capacity.instance import CapacityInstance
from formulation.capacity.solve import StyleResult
from formulation.placement.cycle import Member, cycle_times
from formulation.placement.plan import PlacementPlan, Unplaced, build_plan


class _Body(BaseModel):
    model_config = ConfigDict(extra="forbid")


class FleetLine(_Body):
    gpu_type: str
    gpus_per_node: int
    price_per_gpu_hour: float
    owned: int = Field(description="nodes that exist today (always in the fleet, paid for used or idle)")
    new: int = Field(description="nodes to buy or rent")
    total: int = Field(description="owned + new")
    limit: Optional[int] = Field(description="most nodes of this type the fleet may have (owned + the most that can be "
                                 "bought); null: no availability limit (the scenario sets no max_nodes for the type)")
    used: int = Field(description="nodes that serve jobs")
    cost_per_hour: float = Field(description="$/h of the type's nodes in the fleet")
    busy: float = Field(description="share of the type's GPU-time in the fleet that runs a phase (idle nodes count as 0)")


class ColocatedJob(_Body):
    job: str
    gpu_type: str
    nodes: list[str]
    size: int
    rollout_s: float
    train_s: float
    sync_s: float
    iteration_s: float = Field(description="cycle time (cycle.py) of the job alone on its nodes: rollout + training + reshard")
    slo_s: float
    slack_s: float
    cost_per_hour: float


class Binding(_Body):
    kind: str = Field(description="slo | dram | availability | budget")
    where: str
    message: str


class Miss(_Body):
    job: str
    cycle_time_s: float
    slo_s: float
    over_s: float


class Minimum(_Body):
    gpu_type: str
    min_nodes: int = Field(description="fewest nodes of this type with which every job meets its SLO (other types as stated)")
    min_nodes_any: Optional[int] = Field(None, description="the same with every other type up to its availability limit")
    proven: bool = Field(description="no fleet with fewer serves the forecast (certified bound)")
    fewer_nodes: int = Field(description="the count below the minimum that was examined (min_nodes - 1, or the limit)")
    max_over_s: Optional[float] = Field(None, description="with fewer_nodes: the least possible largest SLO overshoot found")
    misses: list[Miss] = Field(default_factory=list, description="with fewer_nodes: the jobs over their SLO in that placement")
    cannot_run: list[str] = Field(default_factory=list, description="with fewer_nodes: jobs that cannot run at all whatever the SLO")
    message: str


class StyleLine(_Body):
    style: str
    status: str
    cost_per_hour: Optional[float]
    lower_bound_per_hour: Optional[float] = None
    fleet: dict[str, int]
    gpus: int
    busy: Optional[float] = Field(None, description="share of the fleet's GPU-time busy")
    note: str = ""


class CapacityPlan(_Body):
    instance: str
    style: str
    cost_per_hour: float = Field(description="$/h of the whole fleet, owned nodes included")
    owned_cost_per_hour: float
    new_cost_per_hour: float
    lower_bound_per_hour: Optional[float] = Field(None, description="certified lower bound on cost_per_hour")
    budget_per_hour: Optional[float] = None
    fleet: list[FleetLine]
    placement: Optional[PlacementPlan] = None
    colocated: list[ColocatedJob] = Field(default_factory=list)
    unplaced: list[Unplaced] = Field(default_factory=list)
    binding: list[Binding] = Field(default_factory=list)
    minimums: list[Minimum] = Field(default_factory=list)
    styles: list[StyleLine] = Field(default_factory=list)

    def gpus(self) -> int:
        return sum(f.total * f.gpus_per_node for f in self.fleet)


def colocated_member(name: str, times, nodes: list[str]) -> Member:
    """A colocated job as a cycle.py member: both phases on the same nodes."""
    return Member(name, times.rollout_s, times.train_s, times.sync_s, frozenset(nodes), frozenset(nodes))


def _busy_nodes(inst: CapacityInstance, res: StyleResult, placement: Optional[PlacementPlan], colocated: list[ColocatedJob]):
    busy = {t: 0.0 for t in inst.types}
    if placement is not None:
        for g in placement.groups:
            busy[g.rollout_pool.gpu_type] += g.rollout_busy * g.rollout_pool.size
            busy[g.train_pool.gpu_type] += g.train_busy * g.train_pool.size
    for c in colocated:
        busy[c.gpu_type] += c.size  # rollout and training take turns on the nodes: always busy
    return busy


def fleet_lines(inst: CapacityInstance, fleet: dict[str, int], used: dict[str, int], busy: dict[str, float]) -> list[FleetLine]:
    out = []
    for t in inst.types:
        p = inst.placement.pool_types[t]
        total = int(fleet.get(t, 0))
        if total == 0 and inst.limit(t) == 0:
            continue
        out.append(FleetLine(gpu_type=t, gpus_per_node=p.gpus_per_node, price_per_gpu_hour=p.price_per_gpu_hour,
                             owned=inst.owned_nodes(t), new=total - inst.owned_nodes(t), total=total, limit=inst.reported_limit(t),
                             used=int(used.get(t, 0)), cost_per_hour=total * inst.node_price(t),
                             busy=busy.get(t, 0.0) / total if total else 0.0))
    return out


def style_line(res: StyleResult, inst: CapacityInstance) -> StyleLine:
    served = res.served
    gpus = sum(n * inst.placement.pool_types[t].gpus_per_node for t, n in res.fleet.items())
    busy = None
    if served:
        plan = build_capacity_plan(inst, res)
        total = sum(f.total * f.gpus_per_node for f in plan.fleet)
        busy = sum(f.busy * f.total * f.gpus_per_node for f in plan.fleet) / total if total else 0.0
    return StyleLine(style=res.style, status=res.status.value, cost_per_hour=res.cost_per_hour if served else None,
                     lower_bound_per_hour=res.lower_bound, fleet={t: n for t, n in res.fleet.items() if n}, gpus=gpus, busy=busy,
                     note=res.note)


def build_capacity_plan(inst: CapacityInstance, res: StyleResult, unplaced: Optional[list[Unplaced]] = None) -> CapacityPlan:
    placement = None
    colocated: list[ColocatedJob] = []
    if res.solution is not None and res.style != "colocated":
        placement = build_plan(res.idx, res.solution, [], None)
    if res.colocation:
        taken = {t: 0 for t in inst.types}
        for c in res.colocation:
            job = inst.placement.jobs[c.job]
            tm = inst.colocated[job.name][c.gpu_type][c.nodes]
            names = inst.placement.node_names(c.gpu_type)[taken[c.gpu_type]: taken[c.gpu_type] + c.nodes]
            taken[c.gpu_type] += c.nodes
            lam = cycle_times([colocated_member(job.name, tm, names)]).period
            colocated.append(ColocatedJob(job=job.name, gpu_type=c.gpu_type, nodes=names, size=c.nodes, rollout_s=tm.rollout_s,
                                          train_s=tm.train_s, sync_s=tm.sync_s, iteration_s=lam, slo_s=job.slo_s,
                                          slack_s=job.slo_s - lam, cost_per_hour=c.nodes * inst.node_price(c.gpu_type)))
    if unplaced is None:
        unplaced = default_unplaced(inst, res)
    busy = _busy_nodes(inst, res, placement, colocated)
    owned = inst.owned_cost()
    return CapacityPlan(instance=inst.name, style=res.style, cost_per_hour=res.cost_per_hour, owned_cost_per_hour=owned,
                        new_cost_per_hour=res.cost_per_hour - owned, lower_bound_per_hour=res.lower_bound,
                        budget_per_hour=inst.budget_per_hour, fleet=fleet_lines(inst, res.fleet, res.used, busy), placement=placement,
                        colocated=colocated, unplaced=list(unplaced))


def default_unplaced(inst: CapacityInstance, res: StyleResult) -> list[Unplaced]:
    """Why each job the style leaves out cannot run: the placement explanation against the largest
    fleet (group styles), or the style's note (colocated)."""
    from formulation.placement.explain import explain

    if res.style == "colocated":
        return [Unplaced(job=inst.placement.jobs[j].name, reason="colocated", message=res.note,
                         fix="allow another GPU type, raise the availability, or use another deployment style") for j in res.unplaced]
    free = {t: inst.limit(t) - res.used.get(t, 0) for t in inst.types}
    return [explain(res.idx, j, free) for j in res.unplaced]
