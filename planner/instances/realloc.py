"""Telemetry snapshot (+ optional scenario, + optional predictor) → reallocation context (numbers).

The context (:class:`formulation.realloc.context.ReallocContext`) holds, per component, its
throughput curve per GPU type in *pipeline units* (generated response tokens per second), its
allocation unit, model sizes for migration bytes, and the links' bandwidths and fixed migration
costs; :func:`formulation.realloc.decide.decide` turns it and the snapshot into the instance.

**Curves**, per (component, GPU type), first source that has one:

1. the online predictor (:mod:`estimators.predictor`), refined from observed throughput;
2. the scenario's model and the estimators:
   * rollout / tool agent (dynamic): the *tail curve* of the requests still running. With ``R``
     requests left (in flight + queued, from the snapshot), ``E`` engines of TP ``tp`` (at most
     ``R`` of them busy) each run ``b = min(C, R / E)`` of them (``C``: KV-limited concurrency) and decode
     ``b / step(b)`` tokens/s, with the step time from :func:`estimators.rollout.linear_step_model`
     at the requests' current mean cached length (KV used / requests in flight). The curve
     ``E b / step(b)`` is concave and saturates once every request has an engine slot — the thinning
     tail that makes rollout engines donors;
   * reference / reward / critic / trainer (static): linear, tokens/s per GPU from
     :func:`estimators.training.logprob_s` (forward) or :func:`~estimators.training.train_step_s`
     (trainer, critic);
3. the snapshot alone: dynamic components fit the per-engine step model ``b / tokens_per_s =
   a + c b`` over their workers (least squares; ``c = 0`` when the batches do not vary) with ``C``
   from KV capacity over tokens per request; static components take their observed tokens/s per
   GPU. Other GPU types are scaled by HBM bandwidth (decode) or FLOP/s (forward/backward) from the
   catalogue.

**Pipeline units** — the fraction of the iteration's remaining work done per second. Each
curve (in the component's own tokens/s) is divided by the component's remaining work ``W_s``
(tokens), so the minimum over components is ``1 / (time to finish the slowest one)`` and maximising
it minimises the iteration's remaining time: GPUs go from a rollout tail (whose work is a few long
requests that more engines cannot speed up) to the stages with a backlog. ``W_s``:

* the component's own ``remaining_tokens`` when it reports it;
* dynamic components: per running request, its expected remaining tokens — as many as it has
  generated so far (heavy-tailed lengths: the expected residual grows with the age; capped at
  ``max_response_tokens`` with a scenario) — plus a mean response for each queued request;
* static components with a scenario: ``(1 - progress) x requests x (prompt + mean response)``.

When some pipeline component's ``W_s`` is unknown (no scenario, no ``remaining_tokens``) every curve
stays in tokens/s, static ones divided by ``(P + L) / L`` when a scenario gives ``P`` and ``L``.
A component with no work left (progress 1 or ``W_s = 0``) is not part of the bottleneck.

**Links**: :func:`estimators.comm.transfer_s` over 1 GB gives each type's NVLink and NIC
bandwidth; restart, group rebuild and storage figures are :mod:`estimators.comm`'s constants.
**Horizon** (the time over which a migration's lost time is spread): with normalised curves the
model's own prediction of the time left (``1 /`` current pipeline throughput); otherwise
``t (1 - p) / p`` from the least-advanced dynamic component's progress ``p`` at time ``t``
(clamped to [10 s, 1 h]); a caller may pass its own.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import partial
from typing import Callable, Optional

import numpy as np
from pydantic_core import ErrorDetails

from estimators import comm, memory, phases, rollout, training
from estimators import gpus as catalogue
from estimators.curves import fit_concave
from estimators.gpus import GPUSpec
from estimators.lengths import DEFAULT_PROMPT_SPREAD, ResidualTable, hardest_group
from estimators.models import ModelDims
from formulation.realloc.context import ComponentContext, Links, ReallocContext, pools_from_snapshot
from formulation.realloc.graph import STATEFUL_KINDS
from formulation.realloc.instance import Curve
from formulation.realloc.telemetry import DYNAMIC_KINDS, TelemetrySnapshot
from formulation.realloc.telemetry import MAX_GPUS as MAX_NODE_GPUS
from planner.errors import Problem, UserError, did_you_mean

MIN_HORIZON_S = 10.0
TIMED_STATIC_KINDS = frozenset({"reference", "trainer", "critic"})  # FLOP-based remaining time with a scenario
MAX_HORIZON_S = 3600.0
BASE_POINTS = 2000  # quantiles of the base length distribution the per-engine drain draws from
ENGINE_DRAWS = 16  # random draws of a contending engine's survivors (per-engine drain; fixed seeds)
ENGINE_CONTENDERS = 8  # engines drained on random draws: those whose representative drain is longest
PER_ENGINE_DRAIN = True  # False: the pool-level stratified share (kept for multi-turn; the fidelity table's reference row)
ENGINE_SHARE = 40  # an engine's share above this is drained on a representative sample (its longest one by one)


@dataclass
class _JobFacts:
    model: ModelDims
    residual: ResidualTable  # the job's response lengths (grouped marginal, clipped)
    rollout_tp: int = 1
    trainer_unit: int = 1
    prompt_tokens: float = 0.0
    mean_response_tokens: float = 0.0
    max_response_tokens: float = 0.0
    mfu: float = training.DEFAULT_TRAIN_MFU
    infer_mfu: float = training.DEFAULT_INFER_MFU
    rollout_types: Optional[tuple] = None
    trainer_types: Optional[tuple] = None
    n_requests: int = 0
    turns: int = 1
    observation_tokens: float = 0.0
    tool_s: float = 0.0  # mean tool-call latency (multi-turn)
    hardest_group: Optional[np.ndarray] = None  # lengths of the hardest prompt's responses (dispatched together)
    forwards: int = 2  # log-prob passes per sample (old policy, reference, critic values)
    updates: int = 1  # actor (+ critic) updates per sample
    base_quantiles: Optional[np.ndarray] = None  # the base length distribution (before the prompt factor), capped
    group_size: int = 1
    prompt_spread: float = 0.0
    lengths: object = None  # LengthDistribution capped at max_response_tokens (the gated trainer's batch)
    n_prompts: int = 0


def _gpu_specs(snap: TelemetrySnapshot, scenario) -> dict[str, GPUSpec]:
    specs: dict[str, GPUSpec] = {}
    if scenario is not None:
        from planner.instances.common import resolve_gpu_types

        specs.update(resolve_gpu_types(scenario))
    types = {w.gpu_type for w in snap.workers} | {n.gpu_type for n in (snap.nodes or [])}
    for i, w in enumerate(snap.workers):
        t = w.gpu_type
        if t in specs:
            continue
        canon = catalogue.canonical_name(t)
        if canon is None:
            raise UserError(Problem(f"workers[{i}].gpu_type", f"GPU type '{t}' is not in the catalogue"
                                    f"{did_you_mean(t, list(catalogue.CATALOGUE))} and no scenario defines it",
                                    "use one of H100, H800, H20, H200, or pass --scenario with a gpu_types entry for it"))
        from dataclasses import replace

        specs[t] = replace(catalogue.get(canon), name=t)
    for t in types:
        if t not in specs and catalogue.canonical_name(t):
            specs[t] = catalogue.get(t)
    return specs


def _job_facts(snap: TelemetrySnapshot, scenario) -> Optional[_JobFacts]:
    if scenario is None:
        return None
    names = [j.name for j in scenario.jobs]
    job = next((j for j in scenario.jobs if j.name == snap.job), None)
    if job is None:  # (a one-job scenario too: planning with another job's model and cluster is planning wrong)
        raise UserError(Problem("job", f"the snapshot's job '{snap.job}' is not in the scenario (its jobs: {', '.join(names)})."
                                       f"{did_you_mean(snap.job, names)}",
                                f"name one of its jobs ({', '.join(names)}) in the snapshot, or pass the scenario that runs it"))
    from planner.instances.common import job_profile

    prof = job_profile(job)
    residual = ResidualTable.of(prof.lengths, job.rollout.max_response_tokens)
    from dataclasses import replace as _replace

    capped = _replace(prof.lengths, max_tokens=job.rollout.max_response_tokens)
    hard = hardest_group(capped, prof.batch_prompts, prof.group_size)
    base_q = np.sort(np.minimum(capped.quantile((np.arange(BASE_POINTS) + 0.5) / BASE_POINTS), job.rollout.max_response_tokens))
    return _JobFacts(
        model=prof.model, rollout_tp=job.rollout.tp, trainer_unit=job.trainer.tp * job.trainer.pp,
        prompt_tokens=float(job.rollout.prompt_tokens), mean_response_tokens=residual.mean(),
        max_response_tokens=float(job.rollout.max_response_tokens), mfu=job.trainer.mfu,
        rollout_types=tuple(job.rollout.gpu_types) if job.rollout.gpu_types else None,
        trainer_types=tuple(job.trainer.gpu_types) if job.trainer.gpu_types else None,
        n_requests=prof.n_requests, residual=residual, hardest_group=hard, turns=prof.turns, observation_tokens=float(prof.observation_tokens),
        tool_s=phases.tool_latency_s(prof, conservative=False) if prof.turns > 1 else 0.0,
        forwards=1 + int(prof.has_reference) + int(prof.has_critic), updates=1 + int(prof.has_critic),
        base_quantiles=base_q, group_size=int(prof.group_size), prompt_spread=DEFAULT_PROMPT_SPREAD,
        lengths=capped, n_prompts=int(prof.batch_prompts),
    )


def _links(specs: dict[str, GPUSpec], scenario, clusters: set[str]) -> Links:
    nv = {t: 1.0 / comm.transfer_s(g, 1e9, inter_node=False) for t, g in specs.items()}
    nic = {t: 1.0 / comm.transfer_s(g, 1e9, inter_node=True) for t, g in specs.items()}
    inter: Optional[float] = None
    if len(clusters) <= 1:
        inter = min(nic.values()) if nic else None
    elif scenario is not None:
        bws = [c.inter_cluster_bw_gb_per_s for c in scenario.cluster.clusters if c.name in clusters]
        given = [b for b in bws if b is not None]
        inter = min(given) if given else min(nic.values())  # the scenario says: not a bottleneck
    return Links(nv, nic, inter, comm.STORAGE_GB_PER_S, comm.RESTART_S, comm.GROUP_REBUILD_S)


# ----------------------------------------------------------------------------------- curves
def _tail_curve(R: float, conc: float, a_ms: float, c_ms: float, max_engines: int, tp: int) -> Curve:
    """Tokens/s of ``E`` engines sharing ``R`` requests, each at most ``conc``, step ``a + c b`` ms."""
    max_engines = max(1, max_engines)
    knee = int(max(1, math.ceil(R)))  # one request per engine: where the curve turns flat
    engines = sorted({1, 2, 3, 4, 6, 8, knee, max_engines} | {int(v) for v in np.unique(np.geomspace(1, max_engines, 12).round())})
    engines = [e for e in engines if 1 <= e <= max_engines]
    pts: list[tuple[float, float]] = []
    for e in engines:
        busy = min(e, max(1.0, math.ceil(R)))  # engines beyond one per request stay idle
        b = min(max(conc, 1e-9), R / busy)
        step = a_ms + c_ms * b
        pts.append((e * tp, busy * b / (step / 1e3) if step > 0 and b > 0 else 0.0))
    fit = fit_concave(pts)
    return Curve(tuple(float(x) for x in fit.xs), tuple(float(max(0.0, y)) for y in fit.ys))


def _remaining_requests(workers) -> float:
    return float(sum(w.requests_in_flight + w.queue_depth for w in workers))


def _tokens_per_request(workers, facts: Optional[_JobFacts]) -> float:
    running = sum(w.requests_in_flight for w in workers)
    used = sum(w.kv_used_tokens for w in workers)
    if running > 0 and used > 0:
        return used / running
    if facts is not None:
        return facts.prompt_tokens + facts.max_response_tokens / 2.0
    return 1.0


def _generated_per_request(workers, facts: _JobFacts) -> float:
    """Response tokens the running requests have generated, on average (their age), from the cache
    they hold: context minus prompt, and for multi-turn requests minus their tool observations (in
    proportion: a request that has generated a share of its response has done that share of its turns)."""
    running = sum(w.requests_in_flight for w in workers)
    used = sum(w.kv_used_tokens for w in workers)
    if running <= 0 or used <= 0:
        return 0.0
    grown = max(0.0, used / running - facts.prompt_tokens)
    if facts.turns > 1 and facts.observation_tokens > 0:
        mean = max(1.0, facts.mean_response_tokens)
        grown *= mean / (mean + (facts.turns - 1) * facts.observation_tokens)
    return grown


def _rollout_state(comp, workers, facts: _JobFacts):
    """(residuals of the running requests, their cached context, lengths of the queued ones, age, the
    engines' reported KV capacity per GPU type): representative values from the job's length
    distribution conditioned on the age."""
    running = float(sum(w.requests_in_flight for w in workers))
    queued = float(sum(w.queue_depth for w in workers))
    unfinished = (1.0 - comp.progress) * facts.n_requests if facts.n_requests else running + queued
    # multi-turn requests in a tool call are neither running nor queued: they come back
    away = max(0.0, unfinished - running - queued) if facts.turns > 1 else 0.0
    g = _generated_per_request(workers, facts)
    # per engine: its requests' age from its own cache (engines that ran larger batches are behind,
    # and their requests have longer to go); requests away in a tool call at the mean age
    parts = [facts.residual.survivors(_generated_per_request([w], facts), w.requests_in_flight)
             for w in workers if w.requests_in_flight > 0]
    parts.append(facts.residual.survivors(g, int(round(away))))
    res = np.sort(np.concatenate(parts))
    q = facts.residual.survivors(0.0, int(round(queued)))
    ctx = sum(w.kv_used_tokens for w in workers) / running if running > 0 else facts.prompt_tokens
    caps: dict = {}
    for w in workers:
        if w.kv_capacity_tokens > 0:
            caps.setdefault(w.gpu_type, []).append(w.kv_capacity_tokens)
    # the longest request's GRPO siblings, still running on its engine (the engine furthest behind),
    # at most as many as the fullest engine holds
    ages = [_generated_per_request([w], facts) for w in workers if w.requests_in_flight > 0]
    grp = np.zeros(0)
    if facts.hardest_group is not None and res.size:
        g_slow = min(ages) if ages else g
        grp = facts.hardest_group[facts.hardest_group > g_slow] - g_slow
        fullest = max((w.requests_in_flight for w in workers), default=0)
        grp = grp[max(0, grp.size - max(1, fullest)):] if fullest else grp
    per_engine = (_engine_states(workers, facts) if PER_ENGINE_DRAIN and facts.turns <= 1 and facts.base_quantiles is not None
                  else None)
    return res, ctx, q, g, {t: float(np.mean(v)) for t, v in caps.items()}, grp, per_engine


def _engine_states(workers, facts: _JobFacts) -> Optional[list]:
    """Per rollout engine, ``(draws of its running requests' residuals, their context, its queued
    requests' lengths)`` from its own telemetry (requests in flight, cached tokens, queue depth):
    :func:`estimators.rollout.engine_survivor_draws`, the engine having been dispatched an equal,
    contiguous share of the batch (GRPO groups together). None when no engine reports a request."""
    ws = [w for w in workers]
    base_q = facts.base_quantiles
    if base_q is None or not facts.n_requests or not any(w.requests_in_flight > 0 or w.queue_depth > 0 for w in ws):
        return None
    n0 = math.ceil(facts.n_requests / max(1, len(ws)))  # verl's contiguous chunks
    out = []
    for i, w in enumerate(ws):
        n = int(w.requests_in_flight)
        g = _generated_per_request([w], facts) if n > 0 else 0.0
        ctx = w.kv_used_tokens / n if n > 0 else facts.prompt_tokens
        if n > 0 and g > 0:
            args = (base_q, facts.max_response_tokens, g, n, n0, facts.group_size, facts.prompt_spread)
            rep = rollout.engine_survivor_draws(*args, 0, seed=0)[0]
            draw: Optional[Callable[[int], list]] = partial(rollout.engine_survivor_draws, *args, seed=1000 + i, representative=False)
        else:
            rep, draw = facts.residual.survivors(g, n)[::-1], None
        out.append((rep, ctx, facts.residual.survivors(0.0, int(w.queue_depth)), draw))
    return out


def _rollout_remaining_s(facts: _JobFacts, gpu: GPUSpec, state, engines) -> np.ndarray:
    """Predicted seconds until the rollout is done on each engine count of ``engines``
    (:func:`estimators.rollout.rollout_remaining_s` with the calibrated engine model; multi-turn: plus
    the longest request's tool calls still to come, at the mean tool latency)."""
    res, ctx, q, g, reported_kv, grp, per_engine = state
    tp = facts.rollout_tp
    step = rollout.engine_step_model(facts.model, gpu, tp, rollout.ENGINE_FIT_BATCH)
    # the KV capacity the engines report (what they really have), else the estimator's
    kv = reported_kv.get(gpu.name) or memory.kv_capacity_tokens(facts.model, gpu.hbm_gb, tp)
    if per_engine is not None:
        # each engine drained from its own state (single-turn; multi-turn keeps the pool-level share below)
        def conc_of(r, c):
            final = c + (float(np.mean(r)) if r.size else facts.mean_response_tokens)
            return min(rollout.MAX_RUNNING_REQUESTS, max(1.0, kv / max(1.0, final)))

        return rollout.pool_drain_s(step, per_engine, conc_of, engines, queued_context=facts.prompt_tokens,
                                    group_size=facts.group_size, max_share=ENGINE_SHARE,
                                    draws=ENGINE_DRAWS, contenders=ENGINE_CONTENDERS)
    final_ctx = facts.prompt_tokens + g + (float(np.mean(res)) if res.size else facts.mean_response_tokens)
    conc = min(rollout.MAX_RUNNING_REQUESTS, max(1.0, kv / max(1.0, final_ctx)))
    tools = 0.0
    if facts.turns > 1 and res.size:
        r = float(res[-1])
        tools = max(0, round(facts.turns * r / max(1.0, g + r)) - 1) * facts.tool_s
    return np.array([rollout.rollout_remaining_s(step, res, ctx, int(e), conc, queued=q, prompt_tokens=facts.prompt_tokens,
                                                 group=grp) + tools for e in engines])


def _rollout_time_curve(facts: _JobFacts, gpu: GPUSpec, state, max_gpus: int) -> Curve:
    """1 / predicted remaining rollout time (the fraction of its remaining work done per second) against GPUs."""
    tp = facts.rollout_tp
    max_engines = max(1, max_gpus // tp)
    n = state[0].size + state[2].size
    knee = int(max(1, n))  # one request per engine: past it more engines change nothing
    engines = sorted({1, 2, 3, 4, 6, 8, knee, max_engines} | {int(v) for v in np.unique(np.geomspace(1, max_engines, 12).round())})
    engines = [e for e in engines if 1 <= e <= max_engines]
    if n == 0:
        return Curve(tuple(float(e * tp) for e in engines), tuple(0.0 for _ in engines))
    secs = _rollout_remaining_s(facts, gpu, state, engines)
    fit = fit_concave([(e * tp, 1.0 / max(1e-9, t)) for e, t in zip(engines, secs)])
    return Curve(tuple(float(x) for x in fit.xs), tuple(float(max(0.0, y)) for y in fit.ys))


def _remaining_samples(comp, facts: _JobFacts) -> np.ndarray:
    """Tokens (prompt, response, observations) of the samples ``comp`` still has to process this
    iteration: the longest ``1 - progress`` of the job's responses (responses finish, and flow
    downstream, roughly in length order), as many as the batch has left."""
    frac = max(0.0, 1.0 - comp.progress)
    longest = facts.residual.longest(frac)
    if longest.size == 0:
        return longest
    return facts.prompt_tokens + longest + (facts.turns - 1) * facts.observation_tokens


def _static_time_rate(comp, facts: _JobFacts, gpu: GPUSpec) -> float:
    """Per GPU, the fraction of the component's remaining work done per second: its peak x MFU over
    the FLOPs of the samples it has left (log-prob inference: the job's forward passes per sample;
    trainer: 3 x forward per update), the same work per sample the simulator charges."""
    toks = _remaining_samples(comp, facts)
    if toks.size == 0:
        return 0.0
    per = float(np.mean(training.sample_forward_flops(facts.model, toks)))
    flops = per * (1.0 - comp.progress) * facts.n_requests
    if comp.kind in STATEFUL_KINDS:
        flops *= 3.0 * (facts.updates if comp.kind == "trainer" else 1)
        mfu = facts.mfu
    else:
        flops *= facts.forwards if comp.kind == "reference" else 1
        mfu = facts.infer_mfu
    return gpu.bf16_tflops * 1e12 * mfu / flops if flops > 0 else 0.0


def _dynamic_snapshot_fit(workers) -> Optional[tuple[float, float, float]]:
    """(a_ms, c_ms, concurrency) from the workers' (batch, tokens/s); None when nothing was observed."""
    pts = [(w.requests_in_flight, w.requests_in_flight / w.tokens_per_s * 1e3) for w in workers
           if w.tokens_per_s > 0 and w.requests_in_flight > 0]
    if not pts:
        return None
    b = np.array([p[0] for p in pts], dtype=float)
    y = np.array([p[1] for p in pts], dtype=float)  # ms per step
    if len(set(b.tolist())) >= 2:
        c, a = np.polyfit(b, y, 1)
        if a <= 0 or c < 0:
            a, c = float(np.mean(y)), 0.0
    else:
        a, c = float(np.mean(y)), 0.0
    per_req = _tokens_per_request(workers, None)
    conc = min(w.kv_capacity_tokens for w in workers) / max(1.0, per_req)
    return float(a), float(c), max(1.0, conc)


def _static_rate(kind: str, facts: Optional[_JobFacts], gpu: GPUSpec) -> Optional[float]:
    """Tokens/s per GPU of a forward (reference, reward) or forward + backward (trainer, critic) pass."""
    if facts is None:
        return None
    ctx = (facts.prompt_tokens + facts.mean_response_tokens) / 2.0
    if kind in STATEFUL_KINDS:
        return 1.0 / training.train_step_s(facts.model, gpu, 1, 1.0, ctx, facts.mfu)
    return 1.0 / training.logprob_s(facts.model, gpu, 1, 1.0, ctx)


def _scale(kind: str, src: GPUSpec, dst: GPUSpec) -> float:
    if kind in DYNAMIC_KINDS:
        return dst.hbm_bw_tb_per_s / src.hbm_bw_tb_per_s
    return dst.bf16_tflops / src.bf16_tflops


def _component_curves(comp, workers, facts, specs, types, gpus_of_type, predictor) -> tuple[dict, str, set]:
    """Curves per GPU type, their source, and the types whose curves are already in pipeline units
    (1 / the component's predicted remaining time: the scenario's models) rather than tokens/s."""
    curves: dict[str, Curve] = {}
    sources = set()
    timed: set = set()
    state = None
    observed: dict[str, list[float]] = {}
    for w in workers:
        o = observed.setdefault(w.gpu_type, [0.0, 0.0])
        o[0] += w.gpus
        o[1] += w.tokens_per_s
    fit = _dynamic_snapshot_fit(workers) if comp.kind in DYNAMIC_KINDS else None
    for t in types:
        gpu = specs[t]
        if predictor is not None and predictor.has(comp.name, t):
            cv = predictor.curve(comp.name, t)
            curves[t] = Curve(tuple(float(x) for x in cv.xs), tuple(float(y) for y in cv.ys), bool(cv.extrapolate))
            sources.add("predictor")
            continue
        if comp.kind in DYNAMIC_KINDS:
            if facts is not None:
                state = state if state is not None else _rollout_state(comp, workers, facts)
                curves[t] = _rollout_time_curve(facts, gpu, state, gpus_of_type[t])
                timed.add(t)
                sources.add("scenario")
            elif fit is not None:
                a, c, conc = fit
                ref = specs[max(observed, key=lambda k: observed[k][1])]
                unit = min(w.gpus for w in workers)
                k = _scale(comp.kind, ref, gpu)
                curves[t] = _tail_curve(_remaining_requests(workers), conc, a / k, c / k, gpus_of_type[t] // unit, unit)
                sources.add("snapshot")
            continue
        rate = None
        if facts is not None and comp.kind in TIMED_STATIC_KINDS and facts.n_requests:
            rate = _static_time_rate(comp, facts, gpu)
            timed.add(t)
        elif facts is not None:
            rate = _static_rate(comp.kind, facts, gpu)
        if rate is not None:
            sources.add("scenario")
        else:
            seen = {k: v[1] / v[0] for k, v in observed.items() if v[1] > 0}
            if not seen and comp.throughput:
                seen = {workers[0].gpu_type: comp.throughput / sum(w.gpus for w in workers)}
            if seen:
                ref_t = max(seen, key=lambda k: seen[k])
                rate = seen[t] if t in seen else seen[ref_t] * _scale(comp.kind, specs[ref_t], gpu)
                sources.add("snapshot")
        if rate is not None:
            curves[t] = Curve.linear(rate, max(1, gpus_of_type[t]))
    return curves, "+".join(sorted(sources)), timed


def _span(values) -> str:
    lo, hi = min(values), max(values)
    return f"{lo:g}" if lo == hi else f"{lo:g} to {hi:g}"


def _reported(comp, workers) -> str:
    """What the component's workers reported, for the message that no curve can be made from it."""
    tps = _span([w.tokens_per_s for w in workers])
    if comp.kind in DYNAMIC_KINDS:
        return ("no worker reports both tokens_per_s > 0 and requests_in_flight > 0 (its workers report tokens_per_s "
                f"{tps} and requests_in_flight {_span([w.requests_in_flight for w in workers])})")
    return f"its workers report tokens_per_s {tps} and the component no throughput"


def _remaining_work(comp, workers, facts: Optional[_JobFacts], n_requests: int) -> Optional[float]:
    """Tokens of work ``comp`` has left this iteration (see the module docstring); None when unknown."""
    if comp.remaining_tokens is not None:
        return float(comp.remaining_tokens)
    if comp.progress >= 1.0:
        return 0.0
    if comp.kind in DYNAMIC_KINDS:
        if facts is not None:
            res, _, q, _, _, _, _ = _rollout_state(comp, workers, facts)
            return float(res.sum() + q.sum())
        per_req = _tokens_per_request(workers, facts)
        generated = max(1.0, per_req)
        queued = sum(w.queue_depth for w in workers)
        return float(sum(w.requests_in_flight for w in workers) * generated + queued * generated)
    if facts is None:
        return None
    if n_requests:
        toks = _remaining_samples(comp, facts)
        return float(toks.mean() * (1.0 - comp.progress) * n_requests) if toks.size else 0.0
    return (1.0 - comp.progress) * n_requests * (facts.prompt_tokens + facts.mean_response_tokens)


def _parked_start_s(comp, facts: Optional[_JobFacts], specs: dict, workers) -> Optional[float]:
    """Rollout engines whose GPUs are lent are parked (sleep mode, weights in host DRAM), so a new
    one wakes in a warm switch of its weight shard (:func:`estimators.comm.engine_wake_s`, what the
    simulator charges), not a cold start; other components start cold (None)."""
    if comp.kind != "rollout" or facts is None or not workers:
        return None
    gpu = specs[workers[0].gpu_type]
    return float(comm.engine_wake_s(2.0 * facts.model.num_params / facts.rollout_tp, gpu))


def _unit(kind: str, facts: Optional[_JobFacts], workers) -> int:
    want = 1
    if facts is not None:
        want = facts.trainer_unit if kind in STATEFUL_KINDS else facts.rollout_tp if kind in ("rollout", "reference", "tool_agent") else 1
    per_node: dict[str, int] = {}
    for w in workers:
        per_node[w.node] = per_node.get(w.node, 0) + w.gpus
    if all(v % want == 0 for v in per_node.values()):
        return want
    return min(w.gpus for w in workers)


def _check_units(snap: TelemetrySnapshot, comp, facts: Optional[_JobFacts], workers) -> None:
    """With a scenario, an engine (rollout, tool agent: the rollout TP) or a trainer replica (trainer, critic: TP x PP)
    is a whole unit inside one node: a component of those kinds holding another count on a node contradicts the
    scenario, and planning on it would grow or shrink it by parts of a unit. Log-prob inference (reference, reward)
    runs on any count (the simulator and the daemon give it what fragmentation leaves) and is not checked."""
    if facts is None or comp.kind not in STATEFUL_KINDS and comp.kind not in ("rollout", "tool_agent"):
        return
    want = facts.trainer_unit if comp.kind in STATEFUL_KINDS else facts.rollout_tp
    if want <= 1:
        return
    per_node: dict[str, int] = {}
    for w in workers:
        per_node[w.node] = per_node.get(w.node, 0) + w.gpus
    bad = next((n for n, g in per_node.items() if g % want), None)
    if bad is None:
        return
    k, w = next((k, w) for k, w in enumerate(snap.workers) if w.component == comp.name and w.node == bad)
    what = ("a trainer replica is TP x PP = " if comp.kind in STATEFUL_KINDS else "an engine is the rollout TP = ") + f"{want} GPUs"
    raise UserError(Problem(f"workers[{k}] ({w.worker_id})",
                            f"component '{comp.name}' ({comp.kind}) holds {per_node[bad]} GPU(s) on node {bad}, not a whole "
                            f"number of its units: in job '{snap.job}' of the scenario {what} inside one node",
                            "report each worker's GPUs as the job runs them (whole engines / replicas on each node), or pass "
                            "the scenario whose TP and PP the job runs with"))


def _horizon(snap: TelemetrySnapshot) -> float:
    dyn = [c.progress for c in snap.components if c.kind in DYNAMIC_KINDS and c.progress < 1.0]
    if not dyn or snap.time_s <= 0:
        return 60.0
    p = min(dyn)
    if p <= 0:
        return MAX_HORIZON_S
    return float(min(MAX_HORIZON_S, max(MIN_HORIZON_S, snap.time_s * (1.0 - p) / p)))


def _check_request_counts(snap: TelemetrySnapshot, batch_prompts: int, group_size: int) -> None:
    """A rollout (or tool agent) cannot have more requests running or queued than its iteration has
    (the scenario's ``batch_prompts x group_size``): the request-level model draws a length for each
    one, so a count the schema allows (up to 2^30 a worker) would take gigabytes, and is a
    snapshot of another job or a counter gone wrong in any case."""
    n_requests = batch_prompts * group_size
    for i, comp in enumerate(snap.components):
        if comp.kind not in DYNAMIC_KINDS:
            continue
        workers = [(k, w) for k, w in enumerate(snap.workers) if w.component == comp.name]
        total = sum(w.requests_in_flight + w.queue_depth for _, w in workers)
        if total > n_requests:
            k, w = max(workers, key=lambda kw: kw[1].requests_in_flight + kw[1].queue_depth)
            field = "queue_depth" if w.queue_depth >= w.requests_in_flight else "requests_in_flight"
            raise UserError(Problem(f"components[{i}] ({comp.name})",
                                    f"its workers report {total:,} requests running or queued (workers[{k}] ({w.worker_id}) "
                                    f"{w.requests_in_flight:,} in flight, {w.queue_depth:,} queued), more than the {n_requests:,} "
                                    f"an iteration of job '{snap.job}' has (the scenario's batch_prompts x group_size = "
                                    f"{batch_prompts} x {group_size})",
                                    f"report each worker's requests_in_flight and queue_depth for this iteration (workers[{k}].{field}), "
                                    "or pass the scenario the job runs in"))


def build_context(snap: TelemetrySnapshot, scenario=None, predictor=None, *, horizon_s: Optional[float] = None) -> ReallocContext:
    """The numbers a reallocation decision needs for ``snap`` (see the module docstring)."""
    specs = _gpu_specs(snap, scenario)
    facts = _job_facts(snap, scenario)
    n_requests = 0
    if facts is not None:
        job = next(j for j in scenario.jobs if j.name == snap.job)  # (_job_facts refused any other)
        n_requests = job.rollout.batch_prompts * job.rollout.group_size
        _check_request_counts(snap, job.rollout.batch_prompts, job.rollout.group_size)
    gpus_per_node, cluster_of = {}, {}
    if scenario is not None:
        from planner.instances.common import ClusterView

        view = ClusterView(scenario, specs)
        gpus_per_node = {t: view.gpus_per_node(t) for t in view.types()}
        cluster_of = {t: view.cluster_of(t) for t in view.types()}
    pools = pools_from_snapshot(snap, gpus_per_node, cluster_of)
    gpus_of_type: dict[str, int] = {}
    for p in pools:
        gpus_of_type[p.gpu_type] = gpus_of_type.get(p.gpu_type, 0) + p.gpus
    notes = []
    if facts is None:
        notes.append("no scenario: curves from the snapshot's own throughput, model sizes unknown (migration bytes count KV caches only)")
    work = {c.name: _remaining_work(c, snap.workers_of(c.name), facts, n_requests) for c in snap.components}
    normalise = all(w is not None for c, w in zip(snap.components, work.values()) if c.progress < 1.0)
    work_ratio = 1.0
    if normalise:
        notes.append("throughput in fractions of each component's remaining work per second: the minimum is 1 / the time "
                     "the slowest component needs to finish")
    else:
        unknown = [n for n, w in work.items() if w is None]
        notes.append(f"remaining work unknown for {', '.join(unknown)}: throughput in tokens/s (report remaining_tokens or pass "
                     "--scenario to optimise the iteration's remaining time)")
        if facts is not None and facts.mean_response_tokens > 0:
            work_ratio = (facts.prompt_tokens + facts.mean_response_tokens) / facts.mean_response_tokens
    components = {}
    for i, comp in enumerate(snap.components):
        workers = snap.workers_of(comp.name)
        allowed = None
        if facts is not None:
            allowed = facts.trainer_types if comp.kind in STATEFUL_KINDS else facts.rollout_types if comp.kind == "rollout" else None
        types = [t for t in sorted(gpus_of_type) if allowed is None or t in allowed or t in {w.gpu_type for w in workers}]
        curves, source, timed = _component_curves(comp, workers, facts, specs, types, gpus_of_type, predictor)
        missing = sorted({w.gpu_type for w in workers} - set(curves))
        if missing and (comp.progress >= 1.0 or work[comp.name] == 0.0):
            # no work left this iteration: it only holds GPUs (not in the bottleneck), at no throughput
            curves.update({t: Curve((float(max(1, gpus_of_type[t])),), (0.0,)) for t in missing})
            source = "+".join(sorted(set(filter(None, source.split("+"))) | {"done"}))
            missing = []
        if missing:
            raise UserError(Problem(f"components[{i}] ({comp.name})",
                                    f"no throughput for its {', '.join(missing)} workers: {_reported(comp, workers)}, and no "
                                    "scenario or predictor state gives a curve",
                                    "report tokens_per_s (and requests_in_flight) per worker, set the component's throughput, "
                                    "or pass --scenario so the estimators can predict it"))
        if timed and (not normalise or len(timed) < len(curves)):
            # mixed with tokens/s curves (the online predictor's on some type), or no common unit:
            # back to tokens/s, the remaining work over the remaining time
            w_c = work[comp.name] or 0.0
            curves = {t: Curve(cv.gpus, tuple(y * w_c for y in cv.throughput), cv.extrapolate) if t in timed else cv
                      for t, cv in curves.items()}
            timed = set()
        w_comp = work[comp.name]
        if timed:
            divide = 1.0
        else:
            divide = w_comp if normalise and w_comp else (work_ratio if comp.kind not in DYNAMIC_KINDS else 1.0)
        if divide != 1.0:
            curves = {t: Curve(cv.gpus, tuple(y / divide for y in cv.throughput), cv.extrapolate) for t, cv in curves.items()}
        model = facts.model if facts is not None else None
        params = float(model.num_params) if model is not None else 0.0
        _check_units(snap, comp, facts, workers)
        components[comp.name] = ComponentContext(
            curves=curves, unit_gpus=_unit(comp.kind, facts, workers), allowed_types=tuple(types),
            weight_bytes=2.0 * params, sharded_state_bytes=12.0 * params if comp.kind in STATEFUL_KINDS else 0.0,
            kv_bytes_per_token=memory.kv_bytes_per_token(model) if model is not None else 0.0,
            curve_source=source, pipeline=comp.progress < 1.0 and work[comp.name] != 0.0,
            parked_start_s=_parked_start_s(comp, facts, specs, workers),
        )
    clusters = {p.cluster for p in pools}
    h = horizon_s if horizon_s is not None else (None if normalise else _horizon(snap))
    return ReallocContext(pools, components, _links(specs, scenario, clusters), h, notes, "1/s" if normalise else "tokens/s")


def _gated(facts: _JobFacts, intake: Optional[str]) -> bool:
    if intake is None:
        return facts.group_size > 1
    if intake not in ("sample", "group", "minibatch"):
        raise ValueError(f"unknown trainer intake {intake!r}: use sample, group or minibatch")
    return intake != "sample" and facts.group_size > 1


def gated_trainer_s(snap: TelemetrySnapshot, scenario, ctx: ReallocContext, *, intake: Optional[str] = None,
                    gpus: Optional[int] = None) -> Optional[float]:
    """The trainer's predicted remaining time with GRPO group gating (:mod:`estimators.gating`): its
    samples arrive a whole group at a time, after the rollout (at the GPUs it holds: ``1 /`` its
    curve in ``ctx``) and the log-prob pass (at the GPUs it holds); the trainer at ``gpus`` (default:
    the GPUs it holds). ``intake``: ``sample`` | ``group`` | ``minibatch`` (taken as group); None:
    group gating when the job's groups have more than one sample (what the simulator and verl do).
    None when it does not apply (per-sample intake, no scenario, no trainer, or curves not in 1/s).

    This is the *reported* remaining time of the iteration's training. The decision's objective keeps
    the trainer's work over its rate: gated, the trainer's time depends on the rollout's and the
    log-prob pass's GPUs (its arrivals), which a separable objective (each component's time at its
    own GPUs) cannot express; with the gated curve in the objective the planner stopped the moves
    that speed the arrivals up (7B-64: 942 s per iteration against 748 s; 1.5B-64: 303 s against 283 s)."""
    from estimators.gating import gated_arrivals, grouped_batch

    facts = _job_facts(snap, scenario)
    if facts is None or not _gated(facts, intake) or ctx.unit != "1/s" or facts.lengths is None or facts.n_prompts <= 0:
        return None
    specs = _gpu_specs(snap, scenario)
    by_kind = {c.kind: c for c in snap.components}
    tr = by_kind.get("trainer")
    if tr is None:
        return None
    if tr.progress >= 1.0:
        return 0.0
    roll = by_kind.get("rollout")
    t_roll, p_roll = 0.0, 1.0
    if roll is not None and roll.name in ctx.components and roll.progress < 1.0:
        p_roll = roll.progress
        held: dict[str, int] = {}
        for w in snap.workers_of(roll.name):
            held[w.gpu_type] = held.get(w.gpu_type, 0) + w.gpus
        cvs = ctx.components[roll.name].curves
        rate = sum(cvs[t](g) for t, g in held.items() if t in cvs)
        t_roll = 1.0 / rate if rate > 0 else 0.0
    ref = by_kind.get("reference")
    ref_rate, p_ref = math.inf, p_roll
    if ref is not None and ref.progress < 1.0:
        ref_rate = sum(w.gpus * specs[w.gpu_type].bf16_tflops * 1e12 * facts.infer_mfu for w in snap.workers_of(ref.name)
                       if w.gpu_type in specs)
        p_ref = ref.progress
    model = facts.model
    extra = facts.prompt_tokens + (facts.turns - 1) * facts.observation_tokens
    batch = grouped_batch(facts.lengths, facts.n_prompts, facts.group_size, facts.prompt_spread)
    arr = gated_arrivals(batch, lambda L: training.sample_forward_flops(model, extra + L), p_roll=p_roll, p_ref=p_ref,
                         p_tr=tr.progress, t_roll_s=t_roll, ref_flops_per_s=ref_rate, ref_passes=float(facts.forwards),
                         train_passes=3.0 * facts.updates)
    workers = snap.workers_of(tr.name)
    if not workers or workers[0].gpu_type not in specs:
        return None
    g = gpus if gpus is not None else sum(w.gpus for w in workers)
    return arr.remaining_s(g * specs[workers[0].gpu_type].bf16_tflops * 1e12 * facts.mfu)


def node_index(scenario) -> dict:
    """The scenario's nodes by name (``<node group>-<i>``, as
    :meth:`planner.instances.common.ClusterView.node_names` names them): each one's node group."""
    return {f"{g.name}-{i}": g for g in scenario.cluster.node_groups for i in range(g.count)}


@dataclass(frozen=True)
class SimulatorNodes:
    """Nodes of one GPU type as the simulator names them (:func:`simulator.job.job_nodes`)."""

    gpu_type: str
    gpus_per_node: int
    cluster: Optional[str] = None  # the simulator writes no fabric (its snapshots say 'default'): not compared

    @property
    def label(self) -> str:
        return f"the simulator's {self.gpu_type} nodes"


def simulator_node_index(scenario, setup=None) -> dict:
    """The nodes as the simulator names them (``<GPU type, lowercased>-<i>``, numbered per type): with
    ``setup`` (a :class:`simulator.job.JobSetup` of the scenario's job), that job's nodes exactly;
    else every node of the scenario's cluster, numbered per GPU type."""
    if setup is not None:
        from simulator.job import job_nodes

        names = job_nodes(setup)
        of = {t: SimulatorNodes(t, setup.gpus_per_node) for t in names.values()}  # (one per type: _shown groups by identity)
        return {n: of[t] for n, t in names.items()}
    count: dict[str, int] = {}
    spec: dict[str, SimulatorNodes] = {}
    for g in scenario.cluster.node_groups:
        count[g.gpu_type] = count.get(g.gpu_type, 0) + g.count
        spec.setdefault(g.gpu_type, SimulatorNodes(g.gpu_type, g.gpus_per_node))  # as ClusterView.gpus_per_node: the first group's
    return {f"{t.lower()}-{i}": spec[t] for t, n in count.items() for i in range(n)}


def _label(g) -> str:
    return g.label if isinstance(g, SimulatorNodes) else f"node group {g.name}"


def _shown(index: dict) -> str:
    """``h20-0 .. h20-3, h100-0 .. h100-1``: the index's names, runs of one group or type together."""
    runs: list[list] = []
    for name, g in index.items():
        if runs and runs[-1][0] is g:
            runs[-1][2] = name
            runs[-1][3] += 1
        else:
            runs.append([g, name, name, 1])
    parts = [f"{a} .. {b}" if n > 1 else a for _, a, b, n in runs[:8]]
    return ", ".join(parts) + (", ..." if len(runs) > 8 else "")


SCENARIO_FIX = "or pass the scenario of the cluster the job runs on"


def scenario_node_problems(snap: TelemetrySnapshot, scenario, *, prefix: str = "", source: str = "",
                           index: Optional[dict] = None, where: str = "", fix: str = SCENARIO_FIX,
                           sim_index: Optional[dict] = None, clusters: bool = True) -> list[Problem]:
    """With a scenario, the snapshot's nodes must be the scenario's: each node (declared under
    ``nodes``, else each node workers sit on) one the scenario's node groups hold (:func:`node_index`),
    with the group's GPU type, at most its ``gpus_per_node`` GPUs and (declared) the group's
    ``cluster`` (``clusters``: compared where the snapshot's fabrics are read, as the
    reallocation planner's migration costs do). The problems found, fields prefixed by ``prefix``; ``where`` names the cluster in
    messages, ``fix`` ends each fix.

    ``sim_index`` (:func:`simulator_node_index`): the simulator's names for the same nodes are taken
    too, for snapshots it recorded (whose nodes are named after the GPU type whatever the node
    groups' names). A snapshot is checked against one naming, never a mix (its nodes would count
    twice): the one with no problem, else the one that knows more of its nodes (the scenario's on a tie).

    Without the check a snapshot declaring 64 GPUs on an 8-GPU node, or a node the cluster lacks,
    would have GPUs allocated there.
    """
    known = index if index is not None else node_index(scenario)
    where = where or (f"the scenario '{scenario.name}'" if getattr(scenario, "name", "") else "the scenario")
    if snap.nodes is not None:  # (the snapshot itself checks its workers against its declared nodes)
        seen = [(f"nodes[{j}]", n.node, n.gpu_type, n.gpus, "the snapshot declares", n if clusters else None)
                for j, n in enumerate(snap.nodes)]
    else:
        first: dict[str, int] = {}
        held: dict[str, int] = {}
        for i, w in enumerate(snap.workers):
            first.setdefault(w.node, i)
            held[w.node] = held.get(w.node, 0) + w.gpus
        seen = [(f"workers[{i}]", node, snap.workers[i].gpu_type, held[node], "workers hold", None) for node, i in first.items()]
    shown = _shown(known) or "none"
    if sim_index is None or sim_index.keys() == known.keys():  # (node groups named after their GPU types: one naming)
        return _node_problems(seen, known, None, shown, where, f"name nodes as the cluster does (<node group>-<i>), {fix}",
                              fix, prefix, source)
    shown += f"; or as the simulator names them, {_shown(sim_index) or 'none'}"
    names = f"name nodes as the cluster does (<node group>-<i>) or all as the simulator does (<GPU type, lowercased>-<i>), {fix}"
    out = _node_problems(seen, known, (sim_index, SIM_NAMING, SCENARIO_NAMING), shown, where, names, fix, prefix, source)
    if out:
        alt = _node_problems(seen, sim_index, (known, SCENARIO_NAMING, SIM_NAMING), shown, where, names, fix, prefix, source)
        if not alt or sum(s[1] in sim_index for s in seen) > sum(s[1] in known for s in seen):
            return alt
    return out


SCENARIO_NAMING = "as the scenario names nodes (<node group>-<i>)"
SIM_NAMING = "as the simulator names them (<GPU type, lowercased>-<i>)"


def _node_problems(seen: list, known: dict, other: Optional[tuple], shown: str, where: str, names: str, fix: str,
                   prefix: str, source: str) -> list[Problem]:
    """The problems of the nodes ``seen`` against one naming, ``known``; ``other``: (the other naming's
    index, what its names are, what ``known``'s are), to say so of a node named the other way."""
    out: list[Problem] = []
    for at, node, gpu_type, gpus, what, declared in seen:
        g = known.get(node)
        if g is None:
            if other is not None and node in other[0]:
                out.append(Problem(f"{prefix}{at}.node", f"node '{node}' is named {other[1]}, the snapshot's other nodes {other[2]}: "
                                   "a snapshot names every node one way (else a node could count twice)", f"name every node one way ({shown})", source=source))
                continue
            hint = did_you_mean(node, list(known)) if len(out) < 5 else ""  # (difflib over every node: the first few only)
            out.append(Problem(f"{prefix}{at}.node", f"node '{node}' is not among the nodes of {where} (they are {shown})"
                               f"{hint}", names, source=source))
            continue
        if gpu_type != g.gpu_type:
            out.append(Problem(f"{prefix}{at}.gpu_type", f"node '{node}' has GPU type {gpu_type} in the snapshot, {g.gpu_type} in {where} "
                               f"({_label(g)})", f"report {g.gpu_type} for it, {fix}", source=source))
        if gpus > g.gpus_per_node:
            out.append(Problem(f"{prefix}{at}.gpus", f"{what} {gpus} GPUs on node '{node}'; {where} gives it {g.gpus_per_node} "
                               f"({_label(g)}, gpus_per_node)", f"report at most {g.gpus_per_node} GPUs on it, {fix}",
                               source=source))
        if declared is not None and g.cluster is not None and "cluster" in declared.model_fields_set and declared.cluster != g.cluster:
            said = ""  # (a node that states no cluster is taken to be in the scenario's: formulation.realloc.context.pools_from_snapshot)
            out.append(Problem(f"{prefix}{at}.cluster", f"the snapshot puts node '{node}' in cluster '{declared.cluster}'{said}; "
                               f"{where} puts it in '{g.cluster}' ({_label(g)}, cluster)",
                               f"report cluster: {g.cluster} for it (migrations between fabrics are costed by it), {fix}",
                               source=source))
    return out


def check_against_scenario(snaps: list[TelemetrySnapshot], scenario, *, source: str = "", setup=None, clusters: bool = True) -> None:
    """Refuse snapshots whose nodes are not the scenario's (:func:`scenario_node_problems`), naming each; the
    simulator's names for them (:func:`simulator_node_index`, of ``setup``'s job when given) are taken too.
    ``clusters``: compare declared nodes' ``cluster`` with their node groups' (where it is read)."""
    out: list[Problem] = []
    index = node_index(scenario)
    sim = simulator_node_index(scenario, setup)
    for k, s in enumerate(snaps):
        out += scenario_node_problems(s, scenario, prefix=f"snapshots[{k}]." if len(snaps) > 1 else "", source=source, index=index,
                                      sim_index=sim, clusters=clusters)
    if out:
        raise UserError(out)


def load_snapshots(path) -> list[TelemetrySnapshot]:
    """A snapshot file: one snapshot (YAML or JSON), a list of them, ``{snapshots: [...]}``, or JSON lines."""
    from pathlib import Path

    from pydantic import ValidationError

    from planner import safeload

    p = Path(path)
    text = safeload.read_text(p, what="snapshot file", where="SNAPSHOT")
    if p.suffix == ".jsonl":
        doc = safeload.parse(text, str(p), fmt="jsonl")
    else:
        doc = safeload.parse_json_or_yaml(text, str(p))  # flow-style YAML starts with '{' too
    safeload.check_text(doc)  # names (job, component, worker ids) are printed
    data = doc.data
    docs = data.get("snapshots") if isinstance(data, dict) and "snapshots" in data else data
    docs = docs if isinstance(docs, list) else [docs]
    out = []
    for k, d in enumerate(docs):
        prefix = f"snapshots[{k}]." if len(docs) > 1 else ""
        if not isinstance(d, dict):
            raise UserError(Problem(prefix.rstrip(".") or "(top level)", f"expected a mapping, got {type(d).__name__}",
                                    "write a snapshot with job, time_s, components and workers", source=str(p)))
        try:
            out.append(TelemetrySnapshot.model_validate(d))
        except ValidationError as exc:
            probs = []
            for err in exc.errors(include_url=False):
                loc = ".".join(str(x) for x in err["loc"])
                msg = err["msg"].removeprefix("Value error, ")
                bad = "" if err["type"] == "value_error" or "input" not in err else f" (got {err['input']!r})"
                probs.append(Problem(prefix + loc if loc else prefix.rstrip(".") or "(snapshot)", msg + bad,
                                     _fix_for(err), source=str(p)))
            raise UserError(probs) from None
    if not out:
        raise UserError(Problem("", "the file holds no snapshot", "write at least one snapshot", source=str(p)))
    return out


def check_time_order(snaps: list[TelemetrySnapshot], source: str = "") -> None:
    """A stream of one job's snapshots must run in time order (by iteration, then ``time_s``): else a
    :class:`UserError` naming the first snapshot that goes back and the one before it."""
    for k in range(1, len(snaps)):
        a, b = snaps[k - 1], snaps[k]
        if (b.iteration, b.time_s) < (a.iteration, a.time_s):
            field = "iteration" if b.iteration < a.iteration else "time_s"
            raise UserError(Problem(f"snapshots[{k}].{field}",
                                    f"snapshots are not in time order: snapshots[{k}] (iteration {b.iteration}, time_s {b.time_s:g}) "
                                    f"comes after snapshots[{k - 1}] (iteration {a.iteration}, time_s {a.time_s:g})",
                                    "list them by iteration, then time_s", source=source))


def _fix_for(err: ErrorDetails) -> str:
    t = err["type"]
    loc = [str(x) for x in err["loc"]]
    if "kv_used_tokens" in " ".join(err["msg"].split()) or (loc and loc[-1] in ("kv_used_tokens", "kv_capacity_tokens")):
        return "KV utilisation is kv_used_tokens / kv_capacity_tokens and must lie in [0, 1]: report used <= capacity"
    if t == "missing":
        return f"add the field '{loc[-1]}'" if loc else "add the missing field"
    if t == "extra_forbidden":
        return "remove it (see the snapshot format in formulation/realloc/telemetry.py)"
    if "unknown component" in err["msg"]:
        return "name a component listed under components, or add that component"
    if "without workers" in err["msg"]:
        return "list at least one worker for every component (or drop the component)"
    msg = err["msg"]
    if "declares as" in msg or "one GPU type" in msg:
        return "report each worker's GPU type as its node's (declared under nodes)"
    if "duplicate" in msg:
        return "give every worker and component a unique name"
    if "not a number" in msg:
        return "write the number itself: no quotes, not true or false"
    if "than any node has" in msg:
        return f"fix the workers' node names or gpus: a node has at most {MAX_NODE_GPUS} GPUs"
    if "more GPUs than the node has" in msg:
        return "fix the workers' gpus or the node's capacity under nodes"
    if t.startswith("literal_error"):
        return "use one of the allowed values"
    if t in ("less_than_equal", "greater_than_equal", "greater_than"):
        return "use a value in the allowed range"
    return "correct the value"


__all__ = ["SimulatorNodes", "build_context", "check_against_scenario", "load_snapshots", "node_index", "scenario_node_problems",
           "simulator_node_index"]
