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


def engine_step_model(model: ModelDims, gpu: GPUSpec, tp: int, max_batch: int,
                      overhead_ms: float = ENGINE_STEP_OVERHEAD_MS) -> LinearStep:
    """:func:`linear_step_model` of the kernels with the engine overhead added to the fixed term."""
    k = linear_step_model(model, gpu, tp, max_batch)
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
    means = np.array([rest[lo:hi].mean() for lo, hi in zip(edges[:-1], edges[1:]) if hi > lo])
    wts = np.array([hi - lo for lo, hi in zip(edges[:-1], edges[1:]) if hi > lo], dtype=float)
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
