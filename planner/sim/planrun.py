"""Simulate a placement plan as it is written: its groups, pools, node pins and round-robin orders.

For every group of a ``PlacementPlan`` body, each member runs on the nodes the plan pins it to:

* its rollouts are simulated request by request on the engines of its pinned rollout nodes
  (:func:`simulator.phasetimes.rollout_run`), its training phases from the same samples on its
  pinned training nodes, with the weight sync between them; the random draws come from seeds of
  their own (:data:`simulator.phasetimes.CHECK_SEED_BASE` on), never the planner's;
* the group's meta-iterations are then run event by event (:class:`simulator.groups.GroupRun`):
  per-node rings in the plan's order, a warm switch whenever a node changes member, each
  iteration drawing one of the member's simulated rollouts and training phases.

Reported per group: the plan's cycle time against the simulated one (the mean gap between
iteration ends after a warm-up; with ``replications`` > 1 the mean over independent replications,
each with fresh draws, and its standard error) and the error ``simulated / planned - 1``; per job: the planned
and simulated cycle, its SLO, the share of iterations within it (attainment) and the margin of
its slowest and of its mean iteration to the SLO.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from functools import lru_cache
from typing import Optional

import numpy as np

from planner.errors import Problem, UserError
from simulator.defaults import PLAN_MAX_DRAWS as MAX_DRAWS
from simulator.defaults import PLAN_SAMPLES as SAMPLES
from simulator.defaults import PLAN_SKIP as SKIP


@dataclass
class JobResult:
    job: str
    group: str
    planned_cycle_s: float
    simulated_cycle_s: float
    slo_s: float  # the SLO attainment and margin are measured against (the scenario's, where given)
    slo_attainment: float
    iterations: int
    worst_iteration_s: float
    mean_iteration_s: float
    plan_slo_s: float = math.nan  # the SLO the plan records for the job (its claim; may be another scenario's)

    @property
    def slo_differs(self) -> bool:
        """Whether the plan records another SLO than the one the job was scored against."""
        return math.isfinite(self.plan_slo_s) and abs(self.plan_slo_s - self.slo_s) > 1e-6 * max(1.0, abs(self.slo_s))

    @property
    def margin_s(self) -> float:
        """SLO minus the slowest simulated iteration (negative: it was missed)."""
        return self.slo_s - self.worst_iteration_s


@dataclass
class GroupResult:
    id: str
    rollout_pool: str
    train_pool: str
    members: list
    planned_cycle_s: float
    simulated_cycle_s: float
    switch_s: float = 0.0  # warm-switch seconds per meta-iteration on the busier ring (0 for a lone member)
    simulated_se_s: float = math.nan  # standard error of simulated_cycle_s (replications' batch means; NaN with one)
    replications: int = 1
    draws_per_member: int = 0  # simulated iterations (request-level rollouts) per member, over all replications

    @property
    def error(self) -> float:
        return self.simulated_cycle_s / self.planned_cycle_s - 1.0 if self.planned_cycle_s > 0 else math.nan


@dataclass
class PlanSimulation:
    scenario: str
    groups: list = field(default_factory=list)
    jobs: list = field(default_factory=list)
    seed: int = 0
    iterations: int = 0
    samples: int = 0

    def to_dict(self) -> dict:
        """Plain data for JSON: a figure that is not known (a standard error from one replication,
        the attainment of no jobs) is null, never NaN (which strict JSON readers refuse)."""
        return finite({
            "scenario": self.scenario, "seed": self.seed, "iterations": self.iterations, "samples_per_member": self.samples,
            "groups": [{**asdict(g), "error": g.error} for g in self.groups],
            "jobs": [{**asdict(j), "margin_s": j.margin_s, "slo_differs_from_plan": j.slo_differs} for j in self.jobs],
            "max_abs_error": max((abs(g.error) for g in self.groups), default=0.0),
            "slo_attainment_mean": float(np.mean([j.slo_attainment for j in self.jobs])) if self.jobs else math.nan,
        })


def finite(v):
    """``v`` as plain JSON data: every non-finite float replaced by None, numpy scalars by Python
    numbers (recursively through dicts, lists and tuples)."""
    if isinstance(v, (bool, np.bool_)):
        return bool(v)
    if isinstance(v, (int, np.integer)):
        return int(v)
    if isinstance(v, (float, np.floating)):
        return float(v) if math.isfinite(v) else None
    if isinstance(v, dict):
        return {k: finite(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [finite(x) for x in v]
    return v


def _job_specs(sc) -> dict:
    return {j.name: (i, j) for i, j in enumerate(sc.jobs)}


def member_setup(sc, view, job_name: str, rollout_type: str, rollout_nodes: int, train_type: str, train_nodes: int,
                 seed: int = 0):
    """The simulator's set-up of one plan member on its pinned node counts."""
    from planner.instances.common import job_profile
    from simulator.phasetimes import setup_for

    specs = _job_specs(sc)
    if job_name not in specs:
        raise UserError(Problem(f"plan member {job_name}", f"job '{job_name}' is not in scenario '{sc.name}'",
                                "simulate the plan with the scenario it was made from (--scenario)"))
    for t in (rollout_type, train_type):
        if t not in view.gpu_types or not view.nodes_of(t):
            raise UserError(Problem(f"plan member {job_name}", f"GPU type '{t}' is not in scenario '{sc.name}'",
                                    "simulate the plan with the scenario it was made from (--scenario)"))
    _, spec = specs[job_name]
    prof = job_profile(spec, seed)
    return setup_for(prof, view.pool(rollout_type, rollout_nodes), view.pool(train_type, train_nodes),
                     view.inter_cluster_bw(rollout_type, train_type))


def member_samples(setup, samples: int, seed: int = 0, *, member: int = 0, first: int = 0) -> tuple[tuple, tuple]:
    """(rollout seconds, training seconds) of ``samples`` independent simulated iterations: seeds
    ``CHECK_SEED_BASE + 1000 seed + 100 member + first + k`` (each member of a group draws its own
    iterations, also when two members have the same job shape: two jobs do not share their data)."""
    from simulator.phasetimes import CHECK_SEED_BASE

    if first + samples > MAX_DRAWS:
        raise ValueError(f"at most {MAX_DRAWS} draws per member ({first} + {samples} asked)")
    r, t = [], []
    for k in range(samples):
        a, b = _check_draw(setup, CHECK_SEED_BASE + 1000 * seed + 100 * member + first + k)
        r.append(a)
        t.append(b)
    return tuple(r), tuple(t)


@lru_cache(maxsize=16384)
def _check_draw(setup, seed: int) -> tuple[float, float]:
    from simulator.phasetimes import rollout_run, train_time_s

    reqs, makespan, _ = rollout_run(setup, seed)
    return float(makespan), float(train_time_s(setup, reqs))


def simulate_plan(sc, plan, *, seed: int = 0, iterations: int = 24, skip: int = SKIP, samples: int = SAMPLES,
                  replications: int = 1, max_replications: Optional[int] = None, rel_se: float = 0.01,
                  slo_s: Optional[dict] = None) -> PlanSimulation:
    """Simulate every group of ``plan`` (a :class:`formulation.placement.plan.PlacementPlan`) on the
    cluster of ``sc`` (the scenario it was made from).

    Each group is simulated in independent *replications* (batch means): replication ``r`` draws
    ``samples`` fresh iterations per member (seeds of their own) and runs ``iterations``
    meta-iterations on them; its cycle ``c_r`` is the mean gap after ``skip`` warm-up iterations.
    The group's simulated cycle is ``mean(c_r)`` and its standard error ``std(c_r) / sqrt(R)``;
    replications are added (``replications`` up to ``max_replications``) while that standard error
    exceeds ``rel_se`` of the mean. With one replication the standard error is not known (NaN).

    ``slo_s``: each job's SLO (job name -> seconds) that its attainment and margin are measured
    against: the SLO of the scenario being simulated, compiled as the planner compiles it (``planner
    simulate --plan`` passes the checked instance's). A job it leaves out is held to the plan's own
    ``slo_s``; each result keeps the plan's figure (``plan_slo_s``) beside it."""
    from planner.instances.simulate import cluster_view
    from simulator.groups import GroupSpec, MemberSpec, run_group
    from simulator.phasetimes import switch_times_s, sync_time_s

    rmin = max(1, int(replications))
    rmax = max(rmin, int(max_replications) if max_replications is not None else rmin)
    if rmax * samples > MAX_DRAWS:
        raise ValueError(f"replications x samples must be at most {MAX_DRAWS} ({rmax} x {samples})")
    view = cluster_view(sc)
    out = PlanSimulation(scenario=sc.name, seed=seed, iterations=iterations, samples=samples)
    for g in plan.groups:
        rt, tt = g.rollout_pool.gpu_type, g.train_pool.gpu_type
        by = {m.job: m for m in g.members}
        setups = {name: member_setup(sc, view, name, rt, len(by[name].rollout_nodes), tt, len(by[name].train_nodes))
                  for name in g.order}
        sw_rings = [0.0, 0.0]
        slo_of = {name: float((slo_s or {}).get(name, by[name].slo_s)) for name in g.order}
        for name in g.order:
            sw_r, sw_t = switch_times_s(setups[name])
            sw_rings[0] += sw_r
            sw_rings[1] += sw_t
        cycles: list[float] = []
        gaps_of: dict[str, list] = {name: [] for name in g.order}
        cyc_of: dict[str, list] = {name: [] for name in g.order}
        while len(cycles) < rmax:
            rep = len(cycles)
            specs = []
            for i, name in enumerate(g.order):
                m, setup = by[name], setups[name]
                r, t = member_samples(setup, samples, seed, member=i, first=rep * samples)
                sw_r, sw_t = switch_times_s(setup)
                specs.append(MemberSpec(name=name, rollout_s=r, train_s=t, sync_s=sync_time_s(setup),
                                        rollout_nodes=tuple(m.rollout_nodes), train_nodes=tuple(m.train_nodes),
                                        rollout_switch_s=sw_r, train_switch_s=sw_t, slo_s=slo_of[name]))
            spec = GroupSpec(name=g.id, members=tuple(specs), gpus_per_node=g.rollout_pool.gpus_per_node,
                             rollout_nodes=tuple(g.rollout_pool.nodes), train_nodes=tuple(g.train_pool.nodes))
            run = run_group(spec, iterations=iterations, seed=1000 * seed + rep)
            cyc = run.cycle_times(skip=skip)
            for name in g.order:
                mem = run._all_members()[name]
                gaps_of[name].extend(np.diff([mem.rollout_starts[0]] + list(mem.iter_end))[skip:])
                cyc_of[name].append(cyc.get(name, math.nan))
            cycles.append(max(cyc.values()) if cyc else math.nan)
            if len(cycles) >= rmin and _rel_se(cycles) <= rel_se:
                break
        for name in g.order:
            gaps = np.asarray(gaps_of[name], dtype=float)
            m, slo = by[name], slo_of[name]
            out.jobs.append(JobResult(job=name, group=g.id, planned_cycle_s=float(m.cycle_time_s),
                                      simulated_cycle_s=float(np.mean(cyc_of[name])), slo_s=slo,
                                      slo_attainment=float(np.mean(gaps <= slo * (1 + 1e-9))) if gaps.size else math.nan,
                                      iterations=int(gaps.size), worst_iteration_s=float(gaps.max()) if gaps.size else math.nan,
                                      mean_iteration_s=float(gaps.mean()) if gaps.size else math.nan, plan_slo_s=float(m.slo_s)))
        mean = float(np.mean(cycles))
        se = float(np.std(cycles, ddof=1) / math.sqrt(len(cycles))) if len(cycles) > 1 else math.nan
        out.groups.append(GroupResult(id=g.id, rollout_pool=f"{g.rollout_pool.size}x{rt}", train_pool=f"{g.train_pool.size}x{tt}",
                                      members=list(g.order), planned_cycle_s=float(g.cycle_time_s), simulated_cycle_s=mean,
                                      switch_s=max(sw_rings) if len(g.order) > 1 else 0.0, simulated_se_s=se,
                                      replications=len(cycles), draws_per_member=len(cycles) * samples))
    return out


def _rel_se(xs: list) -> float:
    """Standard error of the mean of ``xs`` over the mean (infinite with fewer than two)."""
    if len(xs) < 2:
        return math.inf
    m = float(np.mean(xs))
    return float(np.std(xs, ddof=1) / math.sqrt(len(xs)) / m) if m > 0 else math.inf


def table_rows(res: PlanSimulation) -> tuple[list, list]:
    """(group rows, job rows) of strings for a table."""
    def sim(g) -> str:  # the mean of several replications with its standard error
        se = g.simulated_se_s
        return f"{g.simulated_cycle_s:.1f}" + (f" ± {se:.1f}" if g.replications > 1 and math.isfinite(se) else "")

    grows = [(g.id, g.rollout_pool, g.train_pool, ", ".join(g.members), f"{g.planned_cycle_s:.1f}", sim(g),
              f"{100 * g.error:+.1f}%") for g in res.groups]
    jrows = [(j.job, j.group, f"{j.planned_cycle_s:.1f}", f"{j.simulated_cycle_s:.1f}",
              f"{j.slo_s:.1f}" + (f" (plan {j.plan_slo_s:.1f})" if j.slo_differs else ""),
              f"{100 * j.slo_attainment:.0f}%", f"{j.margin_s:+.1f}") for j in res.jobs]
    return grows, jrows


GROUP_HEADER = ("group", "rollout pool", "training pool", "members (order)", "planned cycle (s)", "simulated cycle (s)", "error")
JOB_HEADER = ("job", "group", "planned cycle (s)", "simulated cycle (s)", "SLO (s)", "SLO attainment", "margin of slowest iteration (s)")
