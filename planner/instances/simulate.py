"""Scenario → simulator inputs: a :class:`simulator.job.JobSetup` per job, and the trace's jobs.

The rollout and training GPU types of a job are its best pair by the estimators (conservative
phase times: the pair the planner would pick for it solo); its pools are its own ``rollout.nodes``
and ``trainer.nodes``; its SLO is ``slo.iteration_s`` or ``slo.ratio_to_solo`` x its solo iteration
time under the scenario's ``solver.phase_time_estimate``.
"""

from __future__ import annotations

from planner.errors import Problem, UserError, did_you_mean
from planner.instances.common import ClusterView, estimate_job, job_profile, resolve_gpu_types


def cluster_view(sc) -> ClusterView:
    return ClusterView(sc, resolve_gpu_types(sc))


def pick_job(sc, name: str | None):
    names = [j.name for j in sc.jobs]
    if name is None:
        if len(sc.jobs) != 1:
            raise UserError(Problem("--job", f"the scenario has {len(sc.jobs)} jobs; the request-level model simulates one",
                                    f"pick one with --job (one of: {', '.join(names[:8])}{', ...' if len(names) > 8 else ''}), "
                                    "or use a multi-job policy (groups, solo-d, colocated-jobs)"))
        return 0, sc.jobs[0]
    if name not in names:
        raise UserError(Problem("--job", f"no job '{name}' in the scenario.{did_you_mean(name, names)}",
                                f"use one of: {', '.join(names[:8])}"))
    i = names.index(name)
    return i, sc.jobs[i]


def job_setup(sc, index: int, job, view: ClusterView | None = None, seed: int = 0):
    from simulator.job import setup_from_profile

    view = view or cluster_view(sc)
    est = estimate_job(job, view, "conservative", seed)
    where = f"jobs[{index}] ({job.name})"
    if est.best is None:
        raise UserError(Problem(where, "fits no rollout/training GPU type pair of the cluster",
                                "run `planner estimate` on the scenario to see why, and allow a larger type or more TP"))
    rt, tt = est.best
    slo = est.slo_s
    if job.slo.iteration_s is None and sc.solver.phase_time_estimate == "sampled":
        slo = estimate_job(job, view, "sampled", seed).slo_s
    prof = job_profile(job, seed)
    return setup_from_profile(prof, view.pool(rt, job.rollout.nodes), view.pool(tt, job.trainer.nodes),
                              inter_cluster_gb_per_s=view.inter_cluster_bw(rt, tt), slo_s=slo)
