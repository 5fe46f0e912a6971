"""Scenario → :class:`formulation.placement.instance.PlacementInstance`, and instance files.

Phase times come from the one phase-time model, :mod:`simulator.phasetimes` (the simulator's
request-level engines, training work and weight sync), in the scenario's ``phase_time_estimate``
mode. Beside them, the warm switch a node of a shared group pays before every phase (the
member's state from host DRAM, :func:`simulator.phasetimes.switch_s`, 1.5-2 s for 1.5B-32B
models): ``rollout_switch_s`` per rollout pool and ``train_switch_s`` per training pool, which the
placement model charges on the rings of groups of two or more (a lone member pays none, so a job
whose SLO is its solo time, ``ratio_to_solo: 1``, stays placeable alone;
:mod:`formulation.placement.cycle`).

For every job the model gives rollout seconds on each allowed rollout GPU type at every pool
size of ``POOL_SIZES`` from the job's own ``rollout.nodes`` up to the nodes of that type (a
group's rollout pool may be larger than what the job needs, and every member's rollout runs on
the whole pool); training seconds at every size from ``trainer.nodes`` up (data parallelism
fills the pool; a job that fixes ``trainer.dp`` trains on exactly ``trainer.nodes``), where the
training state fits and ``tp x pp`` divides the pool's GPUs; weight sync per (rollout type,
training type) at the job's own node counts (the same figure as its solo iteration time, which a
ratio SLO is relative to; across pool sizes it varies by well under a second); host DRAM per rollout node and
the whole training state (spread over the training pool's nodes). The SLO is the scenario's
``iteration_s`` or ``ratio_to_solo`` times the solo iteration time at the job's own node counts.
Node names come from :meth:`planner.instances.common.ClusterView.node_names`.
"""

from __future__ import annotations

from typing import Any

from estimators.phases import fits_training
from formulation.placement.dramfit import DramShort, dram_short
from formulation.placement.instance import MAX_SECONDS, PlacementInstance, PlacementJob, PoolType
from planner.instances.common import ClusterView, JobEstimate, estimate_job, resolve_gpu_types
from planner.schema.scenario import JobSpec, Scenario
from simulator.phasetimes import rollout_s, switch_s, sync_s, train_s  # the one phase-time model (the simulator's)

POOL_SIZES = (1, 2, 3, 4, 6, 8)


def _sizes(least: int, most: int) -> list[int]:
    """Pool sizes from the job's own node count up to the fleet's; the job's own count is always
    there (a fleet too small for it then shows up as a capacity shortage, with the number)."""
    return [n for n in sorted(set(POOL_SIZES) | {least}) if least <= n <= max(most, least)]


def _bounded(job: JobSpec, what: str, v: float) -> None:
    """A phase-time figure the placement model holds (finite, at most MAX_SECONDS), else the job's error:
    a scenario within every field's limits (a huge batch of long responses, GPU figures or a calibration
    at their floor) could estimate phases of centuries, and failed deep in the model as an internal error."""
    import math

    if not (math.isfinite(v) and v <= MAX_SECONDS):
        from planner.errors import Problem, UserError

        raise UserError(Problem(f"jobs.{job.name}", f"its {what} estimate is {v:.3g} s, beyond the supported {MAX_SECONDS:.0e} s",
                                "lower rollout.max_response_tokens, batch_prompts or group_size, or check the GPU figures "
                                "(gpu_types) and the calibration the scenario uses"))


def train_pool_sizes(job: JobSpec, view: ClusterView, est: JobEstimate) -> dict[str, list[int]]:
    """By training type, the pool sizes the placement model offers the job: from ``trainer.nodes``
    up to the type's nodes (exactly ``trainer.nodes`` when it fixes ``trainer.dp``), where
    ``tp x pp`` divides the pool's GPUs and the training state fits. Types with none are left out."""
    mp = job.trainer.tp * job.trainer.pp
    out: dict[str, list[int]] = {}
    for t in est.train_types:
        most = job.trainer.nodes if job.trainer.dp is not None else view.nodes_of(t)
        sizes = [n for n in _sizes(job.trainer.nodes, most) if view.pool(t, n).gpus % mp == 0 and fits_training(est.profile, view.pool(t, n))]
        if sizes:
            out[t] = sizes
    return out


def train_state_gb(job: JobSpec, est: JobEstimate) -> float:
    """The whole training state a job keeps in host DRAM, spread over its training pool's nodes."""
    return est.dram_train_node_gb * job.trainer.nodes


def dram_short_of(job: JobSpec, view: ClusterView, est: JobEstimate) -> DramShort | None:
    """Where the job's host DRAM fits no node it may use (:func:`formulation.placement.dramfit.dram_short`),
    on the tables :func:`compile_job` would build; no phase time is estimated."""
    types = view.types()
    return dram_short(est.dram_rollout_node_gb, train_state_gb(job, est), est.rollout_types, train_pool_sizes(job, view, est),
                      {t: view.dram_gb(t) for t in types}, {t: view.nodes_of(t) for t in types})


def compile_job(job: JobSpec, view: ClusterView, mode: str, margin: float = 0.0) -> PlacementJob:
    """``margin``: an explicit fraction added on top of every rollout and training time (the SLO
    stays on the unmargined solo time), for planning with headroom on the same model."""
    est = estimate_job(job, view, mode)
    prof = est.profile
    r_tab: dict[str, dict[int, float]] = {}
    for t in est.rollout_types:
        r_tab[t] = {n: rollout_s(prof, view.pool(t, n), mode, margin=margin) for n in _sizes(job.rollout.nodes, view.nodes_of(t))}
    t_tab = {t: {n: train_s(prof, view.pool(t, n), mode, margin=margin) for n in sizes}
             for t, sizes in train_pool_sizes(job, view, est).items()}
    s_tab: dict[str, dict[str, float]] = {}
    for a in r_tab:
        for b in t_tab:
            s_tab.setdefault(a, {})[b] = sync_s(prof, view.pool(a, job.rollout.nodes), view.pool(b, job.trainer.nodes),
                                                view.inter_cluster_bw(a, b))
    # warm switches: the rollout one depends on the rollout pool only (weights per engine GPU), the
    # training one on the training pool (state per GPU); the other pool is the job's own
    sr_tab: dict[str, dict[int, float]] = {}
    st_tab: dict[str, dict[int, float]] = {}
    if r_tab and t_tab:
        q0, p0 = next(iter(t_tab)), next(iter(r_tab))
        for t, row in r_tab.items():
            sr_tab[t] = {n: switch_s(prof, view.pool(t, n), view.pool(q0, job.trainer.nodes))[0] for n in row}
        for t, row in t_tab.items():
            st_tab[t] = {n: switch_s(prof, view.pool(p0, job.rollout.nodes), view.pool(t, n))[1] for n in row}
    state_gb = train_state_gb(job, est)
    _bounded(job, "SLO", est.slo_s if est.slo_s != float("inf") else 0.0)
    tables: tuple[tuple[str, dict[str, dict[Any, float]]], ...] = (("rollout phase", r_tab), ("training phase", t_tab),
                                                                   ("weight sync", s_tab))
    for what, tab in tables:
        for row in tab.values():
            for v in row.values():
                _bounded(job, what, v)
    return PlacementJob(name=job.name, slo_s=est.slo_s if est.slo_s != float("inf") else 1e12, rollout_s=r_tab, train_s=t_tab,
                        sync_s=s_tab, rollout_switch_s=sr_tab, train_switch_s=st_tab, dram_rollout_node_gb=est.dram_rollout_node_gb,
                        train_state_gb=state_gb, arrival_s=job.arrival_s)


def compile_scenario(sc: Scenario, mode: str | None = None, margin: float = 0.0, on_job=None,
                     parallel: bool = False) -> PlacementInstance:
    """``on_job(k, n, name)``: called before each job's phase times are estimated (status lines);
    ``parallel``: the jobs estimated side by side in forked processes where that is safe
    (:mod:`planner.instances.fanout`; the same numbers), ``on_job`` then called as each is in."""
    view = ClusterView(sc, resolve_gpu_types(sc))
    mode = mode or sc.solver.phase_time_estimate
    pools = {}
    for t in view.types():
        spec = sc.gpu_types.get(t)
        price = spec.price_per_gpu_hour if spec and spec.price_per_gpu_hour else view.gpu_types[t].price_per_gpu_hour
        pools[t] = PoolType(gpus_per_node=view.gpus_per_node(t), price_per_gpu_hour=price, dram_gb=view.dram_gb(t),
                            count=view.nodes_of(t), node_names=view.node_names(t))
    if parallel:
        from planner.instances.fanout import map_jobs

        done = None if on_job is None else (lambda k, d: on_job(d - 1, len(sc.jobs), sc.jobs[k].name))
        jobs = map_jobs(lambda j: compile_job(j, view, mode, margin), sc.jobs, on_done=done)
    else:
        jobs = []
        for k, j in enumerate(sc.jobs):
            if on_job is not None:
                on_job(k, len(sc.jobs), j.name)
            jobs.append(compile_job(j, view, mode, margin))
    return PlacementInstance(name=sc.name, pool_types=pools, jobs=jobs, move_price_per_job=sc.solver.move_price_per_job)


# instance files live in planner.instances.placement_files (no estimator imports); re-exported here
from planner.instances.placement_files import dump_instance, is_instance_file, load_instance, read_data  # noqa: E402,F401
