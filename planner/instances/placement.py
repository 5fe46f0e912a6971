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
training state fits, ``tp x pp`` divides the pool's GPUs and the job's components can be laid out
(its trainer replicas beside its reference engine, :func:`planner.apply.layout.layout_problem`); weight sync per (rollout type,
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
#: training nodes past ``trainer.nodes`` tried for a job whose components do not fit its own count
LAYOUT_MORE_NODES = 4


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
    ``tp x pp`` divides the pool's GPUs, the training state fits and ``planner apply`` can lay the
    job's components out (:func:`_laid_out`; where they do not fit ``trainer.nodes``, from the fewest
    nodes they fit, so that a fleet too small shows as a shortage of nodes). Types with none are left out."""
    mp = job.trainer.tp * job.trainer.pp
    out: dict[str, list[int]] = {}
    for t in est.train_types:
        least = job.trainer.nodes
        if job.trainer.dp is None:  # the fewest nodes its trainer and reference fit (a tp-8 trainer and reference: 2 of 8 GPUs)
            least = next((n for n in range(least, least + LAYOUT_MORE_NODES + 1) if _laid_out(job, view, est, t, n)), least)
        most = job.trainer.nodes if job.trainer.dp is not None else view.nodes_of(t)
        sizes = [n for n in _sizes(least, most) if view.pool(t, n).gpus % mp == 0 and fits_training(est.profile, view.pool(t, n))
                 and _laid_out(job, view, est, t, n)]
        if sizes:
            out[t] = sizes
    return out


def _laid_out(job: JobSpec, view: ClusterView, est: JobEstimate, train_type: str, nodes: int) -> bool:
    """Whether the job's components fit ``nodes`` training nodes of ``train_type`` beside rollout nodes
    of every rollout type it may use (:func:`planner.apply.layout.layout_problem`: its trainer
    replicas, critic and reference engine; what ``planner apply`` will lay out)."""
    from planner.apply.layout import layout_problem

    return all(layout_problem(job, r, view.gpus_per_node(r), train_type, view.gpus_per_node(train_type), nodes) is None
               for r in est.rollout_types)


def train_state_gb(job: JobSpec, est: JobEstimate) -> float:
    """The whole training state a job keeps in host DRAM, spread over its training pool's nodes."""
    return est.dram_train_node_gb * job.trainer.nodes


def dram_short_of(job: JobSpec, view: ClusterView, est: JobEstimate) -> DramShort | None:
    """Where the job's host DRAM fits no node it may use (:func:`formulation.placement.dramfit.dram_short`),
    on the tables :func:`compile_job` would build; no phase time is estimated."""
    types = view.types()
    return dram_short(est.dram_rollout_node_gb, train_state_gb(job, est), est.rollout_types, train_pool_sizes(job, view, est),
                      {t: view.dram_gb(t) for t in types}, {t: view.nodes_of(t) for t in types})


def compile_job(job: JobSpec, view: ClusterView, mode: str, margin: float = 0.0, stop=None) -> PlacementJob:
    """``margin``: an explicit fraction added on top of every rollout and training time (the SLO
    stays on the unmargined solo time), for planning with headroom on the same model; ``stop``:
    asked before each simulated iteration, true raises :class:`simulator.phasetimes.PastDeadline`."""
    est = estimate_job(job, view, mode, stop=stop)
    prof = est.profile
    r_tab: dict[str, dict[int, float]] = {}
    for t in est.rollout_types:
        r_tab[t] = {n: rollout_s(prof, view.pool(t, n), mode, margin=margin, stop=stop) for n in _sizes(job.rollout.nodes, view.nodes_of(t))}
    t_tab = {t: {n: train_s(prof, view.pool(t, n), mode, margin=margin, stop=stop) for n in sizes}
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


#: seconds of one simulated request-iteration (a work unit of :func:`work_units`) in one process,
#: measured 2027-01 on the 2-core development machine at load average ~3.4 on the first job of each
#: distinct spec (its samples not yet memoised) of weave-like-60, weave-like-200-2w, weave-trace-60,
#: weave-micro and procurement-50 (72 specs): 13-95 us, median 24 us. FAST_S_PER_UNIT, under the
#: fastest, decides a refusal before any estimate runs (only estimates that could not fit on a faster
#: machine than that are refused unmeasured); TYPICAL_S_PER_UNIT, above the median, names the time
#: such a refusal asks for. Once estimates have run, their own pace is used instead.
FAST_S_PER_UNIT = 8e-6
TYPICAL_S_PER_UNIT = 4e-5


def clock() -> float:
    """The compile's clock (``time.perf_counter``, one clock across the forked workers on Linux);
    tests replace it to check the deadline."""
    import time

    return time.perf_counter()


class CompileCut(Exception):
    """The phase-time estimates did not (or could not) finish by the deadline.

    ``compiled``: the jobs estimated before it (by index into the scenario's jobs, for the cache);
    ``missing``: how many were not; ``rest_s``: about how long the rest would take on this machine
    (from the pace of those estimated, else from :data:`TYPICAL_S_PER_UNIT`); ``measured``: whether
    that pace was measured; ``before``: true when refused before any estimate ran."""

    def __init__(self, compiled: dict[int, PlacementJob], total: int, missing: int, rest_s: float, measured: bool,
                 before: bool, elapsed_s: float):
        super().__init__(f"phase-time estimates cut short: {missing} of {total} job(s) not estimated")
        self.compiled, self.total, self.missing = compiled, total, missing
        self.rest_s, self.measured, self.before, self.elapsed_s = rest_s, measured, before, elapsed_s


def _seeds(mode: str) -> int:
    from simulator.phasetimes import PLAN_SEEDS, QUANTILE_SEEDS, QUANTILES

    return QUANTILE_SEEDS if mode in QUANTILES else PLAN_SEEDS if mode == "sampled" else 1


def _draws(job: JobSpec, view: ClusterView) -> tuple[int, int]:
    """(rollout, training) phase-time calls :func:`compile_job` makes for ``job`` (without simulating)."""
    est = estimate_job(job, view, phase_times=False)
    r = sum(len(_sizes(job.rollout.nodes, view.nodes_of(t))) for t in est.rollout_types)
    t = sum(len(_sizes(job.trainer.nodes, job.trainer.nodes if job.trainer.dp is not None else view.nodes_of(t)))
            for t in est.train_types)
    return r, t


def work_units(job: JobSpec, view: ClusterView, mode: str) -> float:
    """The simulation work of ``job``'s phase tables, in simulated request-iterations: rollout
    pools x iterations the estimate draws x requests of an iteration (prompts x group size x turns).
    A proxy (the seconds per unit vary 3-6x between jobs), for projecting the compile's time."""
    r, _ = _draws(job, view)
    ro = job.rollout
    return float(r * _seeds(mode) * ro.batch_prompts * ro.group_size * max(1, ro.turns))


def _spec_key(job: JobSpec) -> str:
    """Jobs alike but for name, arrival, duration and SLO share every simulated iteration (memoised
    per process): the compile runs them in one process. A scheduling hint only: the tables are each
    job's own."""
    import json

    d = job.model_dump(mode="json")
    for k in ("name", "arrival_s", "duration_s", "slo"):
        d.pop(k, None)
    return json.dumps(d, sort_keys=True)


class _Stop:
    """``stop()`` for the estimates: past ``deadline`` (on :func:`clock`); counts the simulated
    iterations it let start (asked before each, and during one every few thousand events)."""

    def __init__(self, deadline: float) -> None:
        self.deadline, self.draws = deadline, 0

    def __call__(self) -> bool:
        from simulator import core

        if clock() > self.deadline:
            return True
        if core._watch is not self:  # before an iteration, not during one (simulator.core.watching)
            self.draws += 1
        return False


def compile_scenario(sc: Scenario, mode: str | None = None, margin: float = 0.0, on_job=None,
                     parallel: bool = False, deadline: float | None = None,
                     known: dict[int, PlacementJob] | None = None) -> PlacementInstance:
    """``on_job(k, n, name)``: called before each job's phase times are estimated (status lines);
    ``parallel``: the jobs estimated side by side in forked processes where that is safe
    (:mod:`planner.instances.fanout`; the same numbers), jobs of the same spec in one process (they
    share their simulated iterations), ``on_job`` then called as each is in.

    ``deadline`` (a :func:`clock` value): no simulated iteration starts after it; when the estimates
    cannot finish by then, :class:`CompileCut` -- before any estimate when they could not finish in
    time even at :data:`FAST_S_PER_UNIT`, else at the deadline, with the jobs estimated so far.
    ``known``: jobs already compiled (by index into ``sc.jobs``, from the cache), not estimated again."""
    from simulator.phasetimes import PastDeadline

    t0 = clock()
    view = ClusterView(sc, resolve_gpu_types(sc))
    mode = mode or sc.solver.phase_time_estimate
    pools = {}
    for t in view.types():
        spec = sc.gpu_types.get(t)
        price = spec.price_per_gpu_hour if spec and spec.price_per_gpu_hour else view.gpu_types[t].price_per_gpu_hour
        pools[t] = PoolType(gpus_per_node=view.gpus_per_node(t), price_per_gpu_hour=price, dram_gb=view.dram_gb(t),
                            count=view.nodes_of(t), node_names=view.node_names(t))
    known = dict(known or {})
    n = len(sc.jobs)
    by_spec: dict[str, list[int]] = {}
    for k, j in enumerate(sc.jobs):
        if k not in known:
            by_spec.setdefault(_spec_key(j), []).append(k)
    groups = list(by_spec.values())
    from planner.instances.fanout import planned_workers

    workers = planned_workers(len(groups)) if parallel else 1
    weight: list[float] = []
    if deadline is not None:  # the work of each group: its first job's (the others reuse its iterations)
        weight = [work_units(sc.jobs[g[0]], view, mode) for g in groups]
        fast = max(sum(weight) * FAST_S_PER_UNIT / workers, max(weight, default=0.0) * FAST_S_PER_UNIT)
        if groups and clock() + fast > deadline:
            rest = max(sum(weight) / workers, max(weight)) * TYPICAL_S_PER_UNIT
            raise CompileCut({}, n, sum(len(g) for g in groups), rest, False, True, clock() - t0)

    count = [len(known)]  # jobs reported to on_job

    def run_group(g: list[int]) -> tuple[list, float]:
        """The group's jobs compiled (None past the deadline) and the share of its first job's draws made."""
        out: list = []
        share = 1.0
        for k in g:
            stop = _Stop(deadline) if deadline is not None else None
            if on_job is not None and not parallel:
                on_job(count[0], n, sc.jobs[k].name)
                count[0] += 1
            try:
                out.append(compile_job(sc.jobs[k], view, mode, margin, stop=stop))
            except PastDeadline:
                if not out and stop is not None:
                    r, t = _draws(sc.jobs[k], view)
                    share = min(0.9, stop.draws / max(1, (r + t + 2) * _seeds(mode)))
                out.extend([None] * (len(g) - len(out)))
                break
        return out, share

    if parallel:
        from planner.instances.fanout import map_jobs

        def done(i: int, _d: int) -> None:
            for k in groups[i]:
                count[0] += 1
                if on_job is not None:
                    on_job(count[0] - 1, n, sc.jobs[k].name)

        results = map_jobs(run_group, groups, on_done=done)
    else:
        results = [run_group(g) for g in groups]
    jobs: dict[int, PlacementJob] = dict(known)
    for g, (out, _share) in zip(groups, results):
        for k, pj in zip(g, out):
            if pj is not None:
                jobs[k] = pj
    if len(jobs) < n:
        # the pace: the work done (a group's first job, in part where it was cut) in the time taken; the
        # rest: every group with a job not done (what a run that reads the done jobs from the cache does)
        elapsed = clock() - t0
        done_w = sum(w * (1.0 if out[0] is not None else share) for w, (out, share) in zip(weight, results))
        rest_w = [w for w, (out, _share) in zip(weight, results) if None in out]
        measured = done_w > 0 and elapsed > 0
        rest = (sum(rest_w) * elapsed / done_w if measured
                else max(sum(rest_w) / workers, max(rest_w)) * TYPICAL_S_PER_UNIT)
        raise CompileCut({k: j for k, j in jobs.items() if k not in known}, n, n - len(jobs), rest, measured, False, elapsed)
    return PlacementInstance(name=sc.name, pool_types=pools, jobs=[jobs[k] for k in range(n)],
                             move_price_per_job=sc.solver.move_price_per_job)


# instance files live in planner.instances.placement_files (no estimator imports); re-exported here
from planner.instances.placement_files import dump_instance, is_instance_file, load_instance, read_data  # noqa: E402,F401
