"""Rollout (generation) timing: decode step time, prefill, engine throughput, phase duration.

A decode step of one engine (``tp`` GPUs, ``batch`` running sequences, mean cached length
``kv_len``) runs, per layer, the four projection GEMMs (QKV, O, gate+up, down, each split over TP),
decode attention over the cached tokens, and two TP all-reduces of the hidden states; then the LM
head GEMM. Kernel times come from :mod:`estimators.kernels` (fitted to vLLM 0.24 measurements).
The sum is the step time: CPU-side scheduling and sampling are hidden by CUDA graphs and
overlapped scheduling in SGLang and vLLM v1 and are not added.

A rollout *phase* is the makespan of ``n_requests`` generations spread round-robin over the pool's
engines, each engine batching continuously up to its KV-cache capacity. Two estimates:

* ``conservative`` (Weave's SLO bound): every response runs to ``max_response_tokens``;
* ``sampled``: response lengths drawn from a distribution (:mod:`estimators.lengths`), the
  engines' makespans computed event by event (a completion frees a slot for the next request).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from estimators import kernels
from estimators.gpus import GPUSpec
from estimators.memory import kv_capacity_tokens
from estimators.models import ModelDims

MAX_RUNNING_REQUESTS = 1024  # engine-side cap on concurrent sequences (SGLang/vLLM default order of magnitude)
ENGINE_FIT_BATCH = 256  # batch range of the linear step fit an engine model uses (simulator and reallocation planner)


@dataclass(frozen=True)
class StepBreakdown:
    gemm_ms: float
    attention_ms: float
    comm_ms: float
    lm_head_ms: float

    @property
    def total_ms(self) -> float:
        return self.gemm_ms + self.attention_ms + self.comm_ms + self.lm_head_ms


def decode_step(model: ModelDims, gpu: GPUSpec, tp: int, batch: float, kv_len: float) -> StepBreakdown:
    """Kernel-time breakdown of one decode step (milliseconds)."""
    h, hd = model.hidden_size, model.hd
    q_heads = model.num_heads / tp
    kv_heads = max(1.0, model.num_kv_heads / tp)
    b = max(1.0, float(batch))
    per_layer_gemm = (
        kernels.gemm_ms(gpu, b, (model.q_dim + 2 * model.kv_dim) / tp, h)
        + kernels.gemm_ms(gpu, b, h, model.q_dim / tp)
        + kernels.gemm_ms(gpu, b, 2 * model.intermediate_size / tp, h)
        + kernels.gemm_ms(gpu, b, h, model.intermediate_size / tp)
    )
    attn = kernels.decode_attention_ms(gpu, b, q_heads, kv_heads, hd, kv_len)
    comm = 2 * kernels.all_reduce_ms(gpu, b * h * 2, tp) if tp > 1 else 0.0
    lm_head = kernels.gemm_ms(gpu, b, model.vocab_size / tp, h)
    return StepBreakdown(
        gemm_ms=float(model.num_layers * per_layer_gemm),
        attention_ms=float(model.num_layers * attn),
        comm_ms=float(model.num_layers * comm),
        lm_head_ms=float(lm_head),
    )


def decode_step_ms(model: ModelDims, gpu: GPUSpec, tp: int, batch: float, kv_len: float) -> float:
    return decode_step(model, gpu, tp, batch, kv_len).total_ms


@dataclass(frozen=True)
class LinearStep:
    """Decode step time as ``a + b * batch + c * total_kv_tokens`` (ms), fitted per engine.

    The kernel model is close to linear in batch (GEMMs at small m are weight-bandwidth bound) and
    exactly linear in the total cached tokens (attention reads each cached token once), so the
    simulator and the phase estimate can integrate it in closed form.
    """

    a_ms: float
    b_ms: float
    c_ms: float

    def __call__(self, batch, total_kv):
        return self.a_ms + self.b_ms * np.asarray(batch) + self.c_ms * np.asarray(total_kv)


def linear_step_model(model: ModelDims, gpu: GPUSpec, tp: int, max_batch: int) -> LinearStep:
    """Least-squares fit of :func:`decode_step_ms` over batch 1..max_batch and kv 1K..32K."""
    batches = np.unique(np.linspace(1, max(2, max_batch), 8).round())
    kvs = np.array([512.0, 2048.0, 8192.0, 32768.0])
    rows, ys = [], []
    for b in batches:
        for kv in kvs:
            rows.append([1.0, b, b * kv])
            ys.append(decode_step_ms(model, gpu, tp, b, kv))
    X, y = np.array(rows), np.array(ys)
    w = 1.0 / y  # relative error
    coef, *_ = np.linalg.lstsq(X * w[:, None], y * w, rcond=None)
    a, b, c = (max(0.0, float(v)) for v in coef)
    return LinearStep(a, b, c)


def prefill_ms(model: ModelDims, gpu: GPUSpec, tp: int, n_seqs: float, seq_len: float) -> float:
    """Prefill of ``n_seqs`` prompts of ``seq_len`` tokens in one batch (ms)."""
    tokens = max(1.0, n_seqs * seq_len)
    h = model.hidden_size
    gemm = (
        kernels.gemm_ms(gpu, tokens, (model.q_dim + 2 * model.kv_dim) / tp, h)
        + kernels.gemm_ms(gpu, tokens, h, model.q_dim / tp)
        + kernels.gemm_ms(gpu, tokens, 2 * model.intermediate_size / tp, h)
        + kernels.gemm_ms(gpu, tokens, h, model.intermediate_size / tp)
    )
    attn = kernels.prefill_attention_ms(gpu, n_seqs, model.num_heads / tp, max(1.0, model.num_kv_heads / tp), model.hd, seq_len)
    comm = 2 * kernels.all_reduce_ms(gpu, tokens * h * 2, tp) if tp > 1 else 0.0
    lm_head = kernels.gemm_ms(gpu, n_seqs, model.vocab_size / tp, h)  # logits of the last position only
    return float(model.num_layers * (gemm + attn + comm) + lm_head)


def max_concurrency(model: ModelDims, gpu: GPUSpec, tp: int, tokens_per_seq: float,
                    cap: int = MAX_RUNNING_REQUESTS) -> int:
    """Sequences one engine can run at once when each may grow to ``tokens_per_seq`` tokens."""
    kv = kv_capacity_tokens(model, gpu.hbm_gb, tp)
    return int(max(0, min(cap, math.floor(kv / max(1.0, tokens_per_seq)))))


def throughput_tokens_per_s(model: ModelDims, gpu: GPUSpec, tp: int, batch: float, kv_len: float) -> float:
    """Decode tokens per second of one engine at a given batch."""
    return float(batch) / (decode_step_ms(model, gpu, tp, batch, kv_len) / 1e3)


def conservative_phase_s(model: ModelDims, gpu: GPUSpec, tp: int, n_gpus: int, n_requests: int,
                         prompt_tokens: float, max_response_tokens: float, overhead_ms: float = 0.0) -> float:
    """Rollout makespan when every response runs to ``max_response_tokens`` (Weave's bound).

    Each engine serves ``ceil(R / E)`` requests in waves of its KV-limited concurrency ``C``; a wave
    is ``L`` decode steps whose cached length grows linearly, so its time is ``L`` steps at the
    mean cached length ``P + L/2`` (attention time is linear in the cached length). Prefill of
    each wave is added.
    """
    engines = max(1, n_gpus // tp)
    per_engine = math.ceil(n_requests / engines)
    conc = max_concurrency(model, gpu, tp, prompt_tokens + max_response_tokens)
    if conc <= 0:
        return math.inf

    def wave_ms(b: int) -> float:
        return (max_response_tokens * (decode_step_ms(model, gpu, tp, b, prompt_tokens + max_response_tokens / 2.0) + overhead_ms)
                + prefill_ms(model, gpu, tp, b, prompt_tokens))

    full, rest = divmod(per_engine, conc)  # full waves are alike: counted, not looped (a huge batch stays cheap)
    return (full * wave_ms(conc) + (wave_ms(rest) if rest else 0.0)) / 1e3


def engine_makespan_s(lengths: np.ndarray, prompt_tokens: float, concurrency: int, step: LinearStep) -> float:
    """Makespan of one engine serving ``lengths`` (tokens each, in queue order) with continuous batching.

    Event driven: between two completions the running set is fixed, so the steps of that stretch
    are integrated exactly under the linear step model (the total cached length grows by ``batch``
    tokens per step).
    """
    lengths = np.asarray(lengths, dtype=float)
    if lengths.size == 0:
        return 0.0
    conc = max(1, int(concurrency))
    queue = list(lengths[conc:])
    running = list(lengths[:conc])  # remaining tokens of each running sequence
    done_tokens = [0.0] * len(running)
    t_ms = 0.0
    qi = 0
    while running:
        k = min(running)
        b = len(running)
        kv0 = sum(prompt_tokens + d for d in done_tokens)
        # sum over steps s=0..k-1 of a + b_ms*b + c*(kv0 + b*s)
        t_ms += k * (step.a_ms + step.b_ms * b + step.c_ms * kv0) + step.c_ms * b * k * (k - 1) / 2.0
        nr, nd = [], []
        for r, d in zip(running, done_tokens):
            if r - k > 1e-9:
                nr.append(r - k)
                nd.append(d + k)
            elif qi < len(queue):
                nr.append(queue[qi])
                nd.append(0.0)
                qi += 1
        running, done_tokens = nr, nd
    return t_ms / 1e3


def sampled_phase_s(model: ModelDims, gpu: GPUSpec, tp: int, n_gpus: int, lengths: np.ndarray,
                    prompt_tokens: float, max_response_tokens: float, overhead_ms: float = 0.0,
                    dispatch: str = "round-robin") -> float:
    """Rollout makespan for sampled response lengths spread over the engines: ``round-robin``, or
    ``contiguous`` (verl's equal chunks in batch order, so a GRPO group's siblings share an engine,
    as the simulator dispatches). ``overhead_ms``: the engine's per-step overhead
    (:data:`ENGINE_STEP_OVERHEAD_MS`; 0 = kernels only).

    A fast analytic approximation (no prefill, no KV preemption): the planners and the simulator
    read the request-level model, :mod:`simulator.phasetimes`."""
    engines = max(1, n_gpus // tp)
    lengths = np.minimum(np.asarray(lengths, dtype=float), max_response_tokens)
    mean_len = float(np.mean(lengths)) if lengths.size else 0.0
    conc = max_concurrency(model, gpu, tp, prompt_tokens + mean_len)
    if conc <= 0:
        return math.inf
    k = linear_step_model(model, gpu, tp, conc)
    step = LinearStep(k.a_ms + overhead_ms, k.b_ms, k.c_ms)
    if dispatch == "contiguous":
        per = math.ceil(lengths.size / engines)
        shares = [lengths[e * per:(e + 1) * per] for e in range(engines)]
    else:
        shares = [lengths[e::engines] for e in range(engines)]
    return max(engine_makespan_s(x, prompt_tokens, conc, step) for x in shares)


# ------------------------------------------------------------------------------------------------
# Engine-level step time: kernels plus the per-step overhead of a real serving engine.
#
# ``decode_step_ms`` above is kernel time only (fitted to measured vLLM kernels). A real engine
# adds, every decode step, CPU-side work that is not hidden at the small batches of a rollout's
# long tail: scheduling and block-table updates, sampling (top-p / top-k over the vocabulary),
# detokenisation and stop checks, and the host<->device round trip of the sampled ids. It is
# modelled as a constant ``ENGINE_STEP_OVERHEAD_MS`` per step.
#
# Value and source: calibrated (``python -m simulator.calibrate``, table in
# ``results/simulator/calibration.md``) against DynaRL's published 1.5B math-RL rollout
# (DeepSeek-R1-Distill-Qwen-1.5B, 512 prompts x 16 responses, max 28,672 tokens, 64 single-H100
# engines): the longest decode takes about 260 s while about 95% of the queries finish within
# 150 s, and (Seer) the last 10% of the requests take about half of the rollout. With kernels only
# the longest 28,672-token response would take about 55 s (1.8-2 ms per step at batch 1-2), so a
# tail step spends most of its time outside the kernels. The fit gives 3.0 ms per step, the order
# of the per-step CPU time of vLLM without asynchronous scheduling at small batches.
#
# The response lengths of that set-up are not the ServeGen production mixture (p50 502 tokens,
# p95/p90 = 3: too heavy a tail for math reasoning, whose lengths bunch up below the cap): they
# are ServeGen client 66, the reasoning-heavy client (p50 7.1K, p90 16.5K, p99 23K tokens),
# scaled by ``MATH_RL_LENGTH_SCALE`` = 0.75, with the default within-group spread of
# :func:`estimators.lengths.sample_grouped`; ``scenarios/dynarl/*.yaml`` use exactly these.
ENGINE_STEP_OVERHEAD_MS = 3.0
MATH_RL_SERVEGEN_CLIENT = "66"
MATH_RL_LENGTH_SCALE = 0.75


def engine_step_ms(model: ModelDims, gpu: GPUSpec, tp: int, batch: float, kv_len: float,
                   overhead_ms: float = ENGINE_STEP_OVERHEAD_MS) -> float:
    """One decode step of a serving engine: :func:`decode_step_ms` plus the per-step overhead."""
    return decode_step_ms(model, gpu, tp, batch, kv_len) + overhead_ms


@lru_cache(maxsize=256)
def _cached_linear_step_model(model: ModelDims, gpu: GPUSpec, tp: int, max_batch: int) -> LinearStep:
    return linear_step_model(model, gpu, tp, max_batch)


def engine_step_model(model: ModelDims, gpu: GPUSpec, tp: int, max_batch: int,
                      overhead_ms: float = ENGINE_STEP_OVERHEAD_MS) -> LinearStep:
    """:func:`linear_step_model` of the kernels with the engine overhead added to the fixed term
    (the fit is cached per model, GPU, TP and batch range: the predictor reads it every call)."""
    k = _cached_linear_step_model(model, gpu, int(tp), int(max_batch))
    return LinearStep(k.a_ms + overhead_ms, k.b_ms, k.c_ms)


# ------------------------------------------------------------------------------------------------
# Remaining time of a running rollout.
#
# A rollout's remaining time is not its remaining tokens over its current token rate: the batch
# thins as requests finish, each step costs at least the fixed term ``a`` (kernels at batch 0
# plus the engine overhead), and the last requests run almost alone. ``engine_drain_s`` integrates
# one engine's continuous batching from a given state to empty, exactly under the linear step model
# (the same arithmetic as the simulator's engine between two events); ``rollout_remaining_s`` applies
# it to a pool of engines.

def engine_drain_s(step: LinearStep, residual, context, concurrency: float, *, queued=(), queued_context: float = 0.0,
                   weight=None, queued_weight=None) -> float:
    """Seconds until one engine has finished every request it holds.

    ``residual`` / ``context``: tokens each running request still generates and the tokens it has
    cached now; ``queued``: lengths of waiting requests (context ``queued_context`` when admitted),
    admitted first come first served while fewer than ``concurrency`` run. Each entry may stand for
    ``weight`` requests (a representative sample of a large share): the batch and the cache count
    the weights. Prefill of admitted requests is not counted (a prompt is a few steps' time).
    """
    import heapq

    res = np.asarray(residual, dtype=float)
    ctx = np.broadcast_to(np.asarray(context, dtype=float), res.shape)
    w = np.ones_like(res) if weight is None else np.broadcast_to(np.asarray(weight, dtype=float), res.shape)
    q = np.asarray(queued, dtype=float)
    qw = np.ones_like(q) if queued_weight is None else np.broadcast_to(np.asarray(queued_weight, dtype=float), q.shape)
    cap = max(1.0, float(concurrency))
    # requests beyond the concurrency wait (as preempted ones do), longest-running first
    waiting = []
    heap: list = []
    n_run = 0.0
    A = 0.0  # sum over running of weight x (context at admission - admission step)
    for r, c, wt in zip(res.tolist(), ctx.tolist(), w.tolist()):
        if n_run + wt <= cap + 1e-9 or not heap:
            heapq.heappush(heap, (r, wt, c))
            n_run += wt
            A += wt * c
        else:
            waiting.append((r, c, wt))
    waiting += [(float(x), float(queued_context), float(wt)) for x, wt in zip(q.tolist(), qw.tolist())]
    wi = 0
    S = 0.0
    t_ms = 0.0
    a, bm, cm = step.a_ms, step.b_ms, step.c_ms
    while heap:
        s_next = heap[0][0]
        k = s_next - S
        if k > 0:
            kv0 = A + n_run * S
            t_ms += k * (a + bm * n_run + cm * kv0) + cm * n_run * k * (k - 1.0) / 2.0
            S = s_next
        while heap and heap[0][0] <= S + 1e-9:
            fin, wt, c0 = heapq.heappop(heap)
            n_run -= wt
            A -= wt * c0
        while wi < len(waiting) and (n_run + waiting[wi][2] <= cap + 1e-9 or not heap):
            r, c, wt = waiting[wi]
            wi += 1
            # admitted at step S: its cache grows from c, so store c - S as its context at "step 0"
            heapq.heappush(heap, (S + r, wt, c - S))
            n_run += wt
            A += wt * (c - S)
    return t_ms / 1e3


def _representative(values: np.ndarray, keep_top: int, bins: int) -> tuple[np.ndarray, np.ndarray]:
    """(values, weights): the ``keep_top`` largest one by one, the rest in ``bins`` equal-count bins (their means)."""
    v = np.sort(np.asarray(values, dtype=float))
    if v.size <= keep_top + bins:
        return v, np.ones_like(v)
    top, rest = v[v.size - keep_top:], v[: v.size - keep_top]
    edges = np.linspace(0, rest.size, bins + 1).round().astype(int)
    lo = edges[:-1][edges[1:] > edges[:-1]]
    wts = np.diff(np.append(lo, rest.size)).astype(float)
    means = np.add.reduceat(rest, lo) / wts
    return np.concatenate([means, top]), np.concatenate([wts, np.ones_like(top)])


def rollout_remaining_s(step: LinearStep, residuals, context: float, engines: int, concurrency: float, *,
                        queued=(), prompt_tokens: float = 0.0, group=(), max_share: int = 160) -> float:
    """Seconds until a pool of ``engines`` engines has finished the rollout's remaining requests.

    ``residuals``: representative remaining lengths of the running requests (e.g.
    :meth:`estimators.lengths.ResidualTable.survivors`), each with ``context`` tokens cached;
    ``queued``: lengths of requests not started. Requests are spread evenly: the slowest engine is
    the one that holds the longest request, and with it every ``engines``-th request below it in
    length (a stratified share), which is what the pool's makespan is computed on; ``group``: the
    remaining lengths of the requests that share that engine with the longest one because they
    were dispatched with it (its GRPO siblings: correlated, long), which take the place of the
    longest ones of the stratified share. More engines
    shorten the body (smaller batches), never the longest request: with one request per engine the
    time is that request's length at batch one. Shares larger than ``max_share`` are integrated on
    a representative sample (the longest requests one by one, the rest in equal-count bins).
    """
    e = max(1, int(engines))
    res = np.sort(np.asarray(residuals, dtype=float))[::-1]
    q = np.sort(np.asarray(queued, dtype=float))[::-1]
    grp = np.sort(np.asarray(group, dtype=float))[::-1][: res.size]
    share_r = np.concatenate([grp, res[grp.size:][::e]]) if grp.size else res[::e]
    share_q = q[::e]
    keep = max(8, max_share // 4)
    if share_r.size + share_q.size > max_share:
        vr, wr = _representative(share_r, keep, max_share // 2) if share_r.size else (share_r, share_r)
        vq, wq = _representative(share_q, 0, max_share // 4) if share_q.size else (share_q, share_q)
        # running ones: longest first (they were admitted first and hold their slots)
        o = np.argsort(-vr)
        return engine_drain_s(step, vr[o], context, concurrency, weight=wr[o], queued=vq, queued_context=prompt_tokens,
                              queued_weight=wq)
    return engine_drain_s(step, share_r, context, concurrency, queued=share_q, queued_context=prompt_tokens)


# ------------------------------------------------------------------------------------------------
# Per-engine remaining time from each engine's own telemetry.
#
# The pool-level share above under-predicts (8-16% on the DynaRL set-ups): GRPO siblings are
# dispatched together (contiguous chunks), so an engine that still holds many requests holds hard
# prompts, whose survivors are longer than the pool's; and the slowest of many engines is slower
# than the typical one. Each engine reports its running requests ``n``, its cached tokens (so the
# requests' age ``g``) and its queue. It was dispatched ``N0 = ceil(n_requests / engines)``
# requests in ``G = N0 / group_size`` GRPO groups with difficulty factors ``f_k = exp(sigma z_k)``,
# ``z_k ~ N(0, 1)`` (``sigma``: the job's prompt spread; a length is ``f_k B``, ``B`` from the base
# distribution, capped), as :func:`estimators.lengths.sample_grouped` draws them. Given ``n``, the
# factors' posterior is the prior weighted by the likelihood of ``n`` alive at ``g`` (the groups'
# binomial counts ``N0/G * P(f_k B > g)``, summed, normal approximation); a draw takes factors from it,
# shares the ``n`` survivors among the groups in proportion to their survival and draws their
# lengths above ``g``; residual = length - ``g``. The representative share (factors at the normal's
# quantiles shifted by the ``mu`` that matches the count, nearest 0 within its noise; lengths at
# conditional quantiles) ranks the engines and stands for the non-contenders. The pool's remaining
# time is the mean over draws of the slowest engine's :func:`engine_drain_s` (the expected maximum).

_MU_GRID = np.linspace(-4.0, 4.0, 81)  # difficulty shifts, in units of the spread
_PRIOR_DRAWS = 512  # prior draws of an engine's group factors, weighted by the count alive


def _engine_mu(base_q: np.ndarray, max_tokens: float, g: float, s: float, z: np.ndarray, spread: float, n0: float) -> float:
    """The difficulty shift ``mu`` for which groups with factors ``exp(mu + spread z_k)`` keep a share ``s``
    of ``n0`` requests alive at age ``g``: of the shifts whose survival is within the count's binomial
    noise of ``s``, the one nearest 0 (the prior: an engine's prompts are typical until shown otherwise;
    early in the rollout every shift keeps nearly all alive)."""
    M = base_q.size
    mus = _MU_GRID * max(spread, 1e-3)
    f = np.exp(mus[:, None] + spread * z[None, :])
    surv = np.maximum(0.0, 1.0 - np.searchsorted(base_q, g / f) / M)
    surv = np.where(f * base_q[-1] >= max_tokens, np.maximum(surv, 1.0 / M), surv).mean(axis=1)  # the cap is reached
    tol = math.sqrt(max(s * (1.0 - s), 0.0) / max(1.0, n0)) + 1.0 / max(1.0, n0)  # noise, and one request
    ok = np.abs(surv - s) <= tol
    if ok.any():
        return float(mus[ok][np.argmin(np.abs(mus[ok]))])
    return float(mus[np.argmin(np.abs(surv - s))])


@lru_cache(maxsize=64)
def _normal_quantiles(G: int) -> np.ndarray:
    from statistics import NormalDist

    return np.array([NormalDist().inv_cdf((k + 0.5) / G) for k in range(G)])


def engine_survivor_draws(base_q: np.ndarray, max_tokens: float, generated: float, n: int, n0: float, group_size: int,
                          spread: float, reps: int, seed: int, representative: bool = True) -> list:
    """Residual lengths (descending) of an engine's ``n`` running requests of age ``generated`` (see
    the section comment): first the representative one (the groups' factors at the normal's
    quantiles, each group's survivors at its conditional quantiles), then ``reps`` random draws
    (factors and lengths drawn; seed ``seed``); without the representative one when not
    ``representative``. ``base_q``: sorted quantiles of the base lengths."""
    n = int(n)
    if n <= 0:
        return [np.zeros(0)] * (reps + int(representative))
    M = base_q.size
    grid_u = (np.arange(M) + 0.5) / M
    g = max(1.0, float(generated))
    G = max(1, int(round(n0 / max(1, group_size))))
    s = min(1.0, n / max(1.0, n0))

    def survivors(z, rng):
        fk = np.exp(_engine_mu(base_q, max_tokens, g, s, z, spread, n0) + spread * z)
        sk = np.maximum(0.0, 1.0 - np.searchsorted(base_q, g / fk) / M)
        if sk.sum() <= 0:
            sk = np.ones(G)
        if rng is None:  # counts in proportion (largest remainder), lengths at the conditional quantiles
            cnt = sk / sk.sum() * n
            k = np.floor(cnt).astype(int)
            k[np.argsort(-(cnt - k))[: n - int(k.sum())]] += 1
            grp = np.repeat(np.arange(G), k)
            u = 1.0 - sk[grp] * (1.0 - (np.concatenate([np.arange(c) for c in k]) + 0.5) / np.repeat(np.maximum(k, 1), k))
        else:
            grp = rng.choice(G, size=n, p=sk / sk.sum())
            u = 1.0 - sk[grp] * rng.random(n)
        L = np.minimum(fk[grp] * np.interp(u, grid_u, base_q), max_tokens)
        return np.sort(np.maximum(1.0, L - g))[::-1]

    out = [survivors(_normal_quantiles(G), None)] if representative else []
    if reps <= 0:
        return out
    rng = np.random.default_rng(seed)
    # the groups' factors given the count alive: prior draws weighted by the count's likelihood
    # (normal approximation of the sum of the groups' binomial counts), resampled
    Z = rng.standard_normal((_PRIOR_DRAWS, G))
    F = np.exp(spread * Z)
    S = np.maximum(0.0, 1.0 - np.searchsorted(base_q, g / F) / M)
    S = np.where(F * base_q[-1] >= max_tokens, np.maximum(S, 1.0 / M), S)
    per = n0 / G
    mean = per * S.sum(axis=1)
    var = per * (S * (1.0 - S)).sum(axis=1) + 0.25
    logw = -((n - mean) ** 2) / (2.0 * var) - 0.5 * np.log(var)
    w = np.exp(logw - logw.max())
    pick = rng.choice(_PRIOR_DRAWS, size=reps, p=w / w.sum())
    for k in pick.tolist():
        fk = F[k]
        sk = S[k] if S[k].sum() > 0 else np.ones(G)
        grp = rng.choice(G, size=n, p=sk / sk.sum())
        u = 1.0 - sk[grp] * rng.random(n)
        L = np.minimum(fk[grp] * np.interp(u, grid_u, base_q), max_tokens)
        out.append(np.sort(np.maximum(1.0, L - g))[::-1])
    return out


def _drain_share(step: LinearStep, residual: np.ndarray, context, concurrency: float, queued: np.ndarray,
                 queued_context: float, max_share: int) -> float:
    """:func:`engine_drain_s` of one engine's share, on a representative sample when it is large."""
    if residual.size + queued.size == 0:
        return 0.0
    if residual.size + queued.size > max_share:
        keep = max(8, max_share // 4)
        vr, wr = _representative(residual, keep, max_share // 2) if residual.size else (residual, residual)
        vq, wq = _representative(queued, 0, max_share // 4) if queued.size else (queued, queued)
        o = np.argsort(-vr)
        return engine_drain_s(step, vr[o], context, concurrency, weight=wr[o], queued=vq, queued_context=queued_context,
                              queued_weight=wq)
    o = np.argsort(-residual)
    return engine_drain_s(step, residual[o], context, concurrency, queued=queued, queued_context=queued_context)


def pool_drain_s(step: LinearStep, engines: list, concurrency, n_engines, *, queued_context: float = 0.0,
                 group_size: int = 1, max_share: int = 160, draws: int = 16, contenders: int = 8) -> np.ndarray:
    """Seconds until a pool has finished, engine by engine, for each engine count of ``n_engines``.

    ``engines``: per engine now, ``(residual, context, queued, draw)``: the representative residuals
    of its running requests (descending), their cached context, the residuals of its queued
    requests, and ``draw(k)`` -> ``k`` random draws of the running residuals
    (:func:`engine_survivor_draws`); ``concurrency(residual, context)`` gives an engine's
    concurrency. The pool's time is the expected slowest engine: the ``contenders`` engines whose
    representative drain is longest are drained on ``draws`` random draws each, the others on their
    representative share; the mean over draws of the slowest.

    A count ``>= len(engines)``: new engines take no running request (as the simulator grows a
    pool), the time is the current engines'. Fewer: the Workload migration drains the emptiest
    engines (fewest requests, then least cached) and hands their requests, a GRPO group
    (``group_size``, alike lengths) at a time, each to the least-loaded kept engine, which
    re-prefills them (they wait in its queue with their context); a receiving engine is drained on
    its representative share. An engine's drain is computed once; a count recomputes the receivers
    (when more than ``2 contenders`` receive, only those that can be slowest: the ``contenders``
    slowest before the hand-off and the ``contenders`` most loaded after it).
    """
    import heapq

    counts = np.atleast_1d(np.asarray(n_engines, dtype=int))
    E = len(engines)
    if E == 0:
        return np.zeros(counts.size)

    def drain(res, ctx, q, qctx):
        if res.size + q.size == 0:
            return 0.0
        return _drain_share(step, res, ctx, concurrency(res, ctx), q, qctx, max_share)

    det = np.array([drain(r, c, q, queued_context) for r, c, q, _ in engines])
    D = np.repeat(det[:, None], max(1, draws), axis=1)  # engine x draw
    if draws > 0:
        for i in np.argsort(-det)[: max(0, contenders)].tolist():
            r0, c, q, draw = engines[i]
            if r0.size == 0 or draw is None:
                continue
            D[i] = [drain(x, c, q, queued_context) for x in draw(draws)]
    load = [r.size + q.size for r, _, q, _ in engines]
    order = sorted(range(E), key=lambda i: (load[i], engines[i][1] * load[i]))
    out = np.empty(counts.size)
    for ci, n_e in enumerate(counts.tolist()):
        drop_n = max(0, E - max(1, int(n_e)))
        if drop_n == 0:
            out[ci] = float(D.max(axis=0).mean())
            continue
        drop, kept = order[:drop_n], order[drop_n:]
        extra: dict = {}
        heap = [(load[i], i) for i in kept]
        heapq.heapify(heap)
        gs = max(1, int(group_size))
        for i in drop:  # GRPO groups one by one
            for lo in range(0, load[i], gs):
                hi = min(load[i], lo + gs)
                ld, j = heapq.heappop(heap)
                extra.setdefault(j, []).append((i, lo, hi))
                heapq.heappush(heap, (ld + hi - lo, j))
        untouched = [i for i in kept if i not in extra]
        worst = D[untouched].max(axis=0) if untouched else np.zeros(D.shape[1])
        if len(extra) > 2 * contenders:  # the receivers that can be slowest: the slowest before, the most loaded after
            got = {j: sum(hi - lo for _, lo, hi in v) for j, v in extra.items()}
            pick = set(sorted(extra, key=lambda j: -det[j])[:contenders]) | set(sorted(extra, key=lambda j: -(load[j] + got[j]))[:contenders])
            extra = {j: extra[j] for j in pick}
        for j, srcs in extra.items():
            r, c, q, _ = engines[j]
            moved = [np.concatenate([engines[k][0], engines[k][2]])[lo:hi] for k, lo, hi in srcs]
            worst = np.maximum(worst, drain(r, c, np.concatenate([q] + moved), c))
        out[ci] = float(worst.mean())
    return out
