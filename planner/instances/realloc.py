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
from typing import Optional

import numpy as np

from estimators import comm, memory, rollout, training
from estimators import gpus as catalogue
from estimators.curves import fit_concave
from estimators.gpus import GPUSpec
from formulation.realloc.context import ComponentContext, Links, ReallocContext, pools_from_snapshot
from formulation.realloc.graph import STATEFUL_KINDS
from formulation.realloc.instance import Curve
from formulation.realloc.telemetry import DYNAMIC_KINDS, TelemetrySnapshot
from planner.errors import Problem, UserError, did_you_mean

MIN_HORIZON_S = 10.0
MAX_HORIZON_S = 3600.0


@dataclass
class _JobFacts:
    model: object = None  # ModelDims
    rollout_tp: int = 1
    trainer_unit: int = 1
    prompt_tokens: float = 0.0
    mean_response_tokens: float = 0.0
    max_response_tokens: float = 0.0
    mfu: float = training.DEFAULT_TRAIN_MFU
    rollout_types: Optional[tuple] = None
    trainer_types: Optional[tuple] = None


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
    if job is None and len(scenario.jobs) == 1:
        job = scenario.jobs[0]
    if job is None:
        raise UserError(Problem("job", f"the snapshot's job '{snap.job}' is not in the scenario{did_you_mean(snap.job, names)}",
                                f"name one of its jobs ({', '.join(names)}) in the snapshot, or pass the scenario that runs it"))
    from planner.instances.common import job_profile

    prof = job_profile(job)
    return _JobFacts(
        model=prof.model, rollout_tp=job.rollout.tp, trainer_unit=job.trainer.tp * job.trainer.pp,
        prompt_tokens=float(job.rollout.prompt_tokens), mean_response_tokens=min(prof.lengths.mean(), job.rollout.max_response_tokens),
        max_response_tokens=float(job.rollout.max_response_tokens), mfu=job.trainer.mfu,
        rollout_types=tuple(job.rollout.gpu_types) if job.rollout.gpu_types else None,
        trainer_types=tuple(job.trainer.gpu_types) if job.trainer.gpu_types else None,
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
    pts = []
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


def _dynamic_scenario_curve(facts: _JobFacts, gpu: GPUSpec, workers, max_gpus: int) -> Curve:
    tp = facts.rollout_tp
    ctx_tokens = _tokens_per_request(workers, facts)
    conc = rollout.max_concurrency(facts.model, gpu, tp, facts.prompt_tokens + facts.max_response_tokens)
    step = rollout.linear_step_model(facts.model, gpu, tp, max(2, conc))
    a = step.a_ms
    c = step.b_ms + step.c_ms * ctx_tokens
    return _tail_curve(_remaining_requests(workers), max(1, conc), a, c, max_gpus // tp, tp)


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


def _component_curves(comp, workers, facts, specs, types, gpus_of_type, predictor) -> tuple[dict, str]:
    curves: dict[str, Curve] = {}
    sources = set()
    observed = {}
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
                curves[t] = _dynamic_scenario_curve(facts, gpu, workers, gpus_of_type[t])
                sources.add("scenario")
            elif fit is not None:
                a, c, conc = fit
                ref = specs[max(observed, key=lambda k: observed[k][1])]
                unit = min(w.gpus for w in workers)
                k = _scale(comp.kind, ref, gpu)
                curves[t] = _tail_curve(_remaining_requests(workers), conc, a / k, c / k, gpus_of_type[t] // unit, unit)
                sources.add("snapshot")
            continue
        rate = _static_rate(comp.kind, facts, gpu)
        if rate is not None:
            sources.add("scenario")
        else:
            seen = {k: v[1] / v[0] for k, v in observed.items() if v[1] > 0}
            if not seen and comp.throughput:
                seen = {workers[0].gpu_type: comp.throughput / sum(w.gpus for w in workers)}
            if seen:
                ref_t = max(seen, key=seen.get)
                rate = seen[t] if t in seen else seen[ref_t] * _scale(comp.kind, specs[ref_t], gpu)
                sources.add("snapshot")
        if rate is not None:
            curves[t] = Curve.linear(rate, max(1, gpus_of_type[t]))
    return curves, "+".join(sorted(sources))


def _remaining_work(comp, workers, facts: Optional[_JobFacts], n_requests: int) -> Optional[float]:
    """Tokens of work ``comp`` has left this iteration (see the module docstring); None when unknown."""
    if comp.remaining_tokens is not None:
        return float(comp.remaining_tokens)
    if comp.progress >= 1.0:
        return 0.0
    if comp.kind in DYNAMIC_KINDS:
        per_req = _tokens_per_request(workers, facts)
        prompt = facts.prompt_tokens if facts is not None else 0.0
        generated = max(1.0, per_req - prompt)
        residual = generated if facts is None else max(1.0, min(generated, facts.max_response_tokens - generated))
        queued = sum(w.queue_depth for w in workers)
        mean_new = facts.mean_response_tokens if facts is not None else generated
        return float(sum(w.requests_in_flight for w in workers) * residual + queued * mean_new)
    if facts is None:
        return None
    return (1.0 - comp.progress) * n_requests * (facts.prompt_tokens + facts.mean_response_tokens)


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


def _horizon(snap: TelemetrySnapshot) -> float:
    dyn = [c.progress for c in snap.components if c.kind in DYNAMIC_KINDS and c.progress < 1.0]
    if not dyn or snap.time_s <= 0:
        return 60.0
    p = min(dyn)
    if p <= 0:
        return MAX_HORIZON_S
    return float(min(MAX_HORIZON_S, max(MIN_HORIZON_S, snap.time_s * (1.0 - p) / p)))


def build_context(snap: TelemetrySnapshot, scenario=None, predictor=None, *, horizon_s: Optional[float] = None) -> ReallocContext:
    """The numbers a reallocation decision needs for ``snap`` (see the module docstring)."""
    specs = _gpu_specs(snap, scenario)
    facts = _job_facts(snap, scenario)
    n_requests = 0
    if facts is not None:
        job = next((j for j in scenario.jobs if j.name == snap.job), scenario.jobs[0])
        n_requests = job.rollout.batch_prompts * job.rollout.group_size
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
        curves, source = _component_curves(comp, workers, facts, specs, types, gpus_of_type, predictor)
        missing = sorted({w.gpu_type for w in workers} - set(curves))
        if missing:
            raise UserError(Problem(f"components[{i}] ({comp.name})",
                                    f"no throughput for its {', '.join(missing)} workers: they report tokens_per_s 0"
                                    + (" and requests_in_flight 0" if comp.kind in DYNAMIC_KINDS else "")
                                    + ", and no scenario or predictor state gives a curve",
                                    "report tokens_per_s (and requests_in_flight) per worker, set the component's throughput, "
                                    "or pass --scenario so the estimators can predict it"))
        divide = work[comp.name] if normalise and work[comp.name] else (work_ratio if comp.kind not in DYNAMIC_KINDS else 1.0)
        if divide != 1.0:
            curves = {t: Curve(cv.gpus, tuple(y / divide for y in cv.throughput), cv.extrapolate) for t, cv in curves.items()}
        model = facts.model if facts is not None else None
        params = float(model.num_params) if model is not None else 0.0
        components[comp.name] = ComponentContext(
            curves=curves, unit_gpus=_unit(comp.kind, facts, workers), allowed_types=tuple(types),
            weight_bytes=2.0 * params, sharded_state_bytes=12.0 * params if comp.kind in STATEFUL_KINDS else 0.0,
            kv_bytes_per_token=memory.kv_bytes_per_token(model) if model is not None else 0.0,
            curve_source=source, pipeline=comp.progress < 1.0 and work[comp.name] != 0.0,
        )
    clusters = {p.cluster for p in pools}
    h = horizon_s if horizon_s is not None else (None if normalise else _horizon(snap))
    return ReallocContext(pools, components, _links(specs, scenario, clusters), h, notes, "1/s" if normalise else "tokens/s")


def load_snapshots(path) -> list[TelemetrySnapshot]:
    """A snapshot file: one snapshot (YAML or JSON), a list of them, ``{snapshots: [...]}``, or JSON lines."""
    import json
    from pathlib import Path

    import yaml
    from pydantic import ValidationError

    p = Path(path)
    if not p.exists():
        raise UserError(Problem("SNAPSHOT", f"file not found: {p}", "check the path"))
    text = p.read_text()
    try:
        if p.suffix == ".jsonl":
            docs = [json.loads(line) for line in text.splitlines() if line.strip()]
        else:
            data = json.loads(text) if text.lstrip().startswith(("{", "[")) else yaml.safe_load(text)
            docs = data.get("snapshots") if isinstance(data, dict) and "snapshots" in data else data
            docs = docs if isinstance(docs, list) else [docs]
    except (yaml.YAMLError, json.JSONDecodeError) as exc:
        raise UserError(Problem("", f"cannot parse the snapshot file: {exc}".replace("\n", " "),
                                "write one snapshot as YAML or JSON, a list of them, or JSON lines", source=str(p))) from None
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


def _fix_for(err: dict) -> str:
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
    if "more GPUs than the node has" in msg:
        return "fix the workers' gpus or the node's capacity under nodes"
    if t.startswith("literal_error"):
        return "use one of the allowed values"
    if t in ("less_than_equal", "greater_than_equal", "greater_than"):
        return "use a value in the allowed range"
    return "correct the value"


__all__ = ["build_context", "load_snapshots"]
