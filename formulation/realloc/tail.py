"""The rollout tail, request by request: when each unfinished request and each GRPO group will be done
under a given number of engines, from what a rollout manager knows at the decision instant.

**What is known** (telemetry of the rollout manager, never the lengths the run will draw): for every
unfinished request ``j`` its engine ``e_j``, its GRPO group ``g_j``, the tokens it has generated ``y_j``, its
KV context ``x_j`` and whether it is decoding or queued on its engine; every engine's requests and cached tokens; the
response-length distribution ``D`` the manager estimates from past iterations (a sorted sample ``L``,
capped at ``max_tokens``); the engine's step time ``s(N, K) = a + b N + c K`` ms for ``N`` running
sequences holding ``K`` cached tokens, its slot count (running cap, KV capacity over the context).

**Residual draws.** Request ``j``'s remaining tokens are drawn from ``D`` given ``> y_j`` tokens:
``l_j = L[i_j + floor(u_j (|L| - i_j))] - y_j`` with ``i_j`` the count of ``L`` at or below ``y_j`` and ``u_j``
stratified over ``D`` draws (request ``j`` takes stratum ``(d + s_j) mod D`` in draw ``d``, ``s_j`` and the offset
inside the stratum fixed by a seed of the planner's own): the predictions average over the draws.

**One engine in step space.** Every running sequence advances one token per decode step, so in steps the
engine is ``S`` slots (FIFO list scheduling): running requests start at step 0, queued ones (first come)
take the first slot that frees; request ``j`` ends at step ``start_j + l_j``. Between consecutive events
the engine runs ``N`` sequences with ``K(k) = C + N k`` cached tokens (``C = sum(x_j - start_j)`` over the
running set), so a segment ``[k_0, k_1)`` takes ``(k_1 - k_0)(a + b N + c C) + c N (k_0 + k_1 - 1)(k_1 - k_0) / 2``
ms; the time of an event is the cumulative sum of its engine's segments (vectorised over all engines
at once: each request adds ``+1`` and ``-1`` to ``N`` and ``+-(x_j - start_j)`` to ``C``, so global running sums
reset by themselves at engine boundaries).

**Fewer engines** (a Workload migration): the emptiest engines (fewest requests, then fewest cached tokens) are drained; their
requests, a whole group at a time, join the queue of the kept engine holding the fewest requests (as the
router does: siblings follow their group), and each kept engine first re-prefills what it received.

A group is done when its last unfinished request is (:func:`group_arrivals_many`); the pipeline behind it
(log-prob inference, the gated trainer) is :mod:`formulation.realloc.completion`.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass
from typing import Callable, Optional

import numpy as np


@dataclass(frozen=True)
class TailRequests:
    engine: np.ndarray  # int: index of the request's engine (0 .. engines - 1)
    group: np.ndarray  # int: GRPO group
    generated: np.ndarray  # tokens generated so far
    context: np.ndarray  # KV context tokens now (prompt + generated)
    running: np.ndarray  # bool: decoding now (else queued on its engine)
    drain_key: np.ndarray  # per engine: drain order, smallest first (requests held, then cached tokens): the kept are the largest
    lengths: np.ndarray  # sorted sample of the response-length distribution (the manager's estimate)
    prompt_tokens: np.ndarray  # per request
    slots: int  # sequences an engine runs at once (running cap, KV capacity over the context)
    gate: int = 1  # samples of a group the trainer takes together (GRPO group gating; 1: per sample)
    prefill_ms: Optional[Callable[[float, float], float]] = None  # (sequences, tokens each) -> ms
    draws: int = 4
    seed: int = 0
    # the per-prompt difficulty model (optional): lengths are ``min(cap, b * exp(spread * z))`` with ``b`` from the
    # base distribution (sorted sample ``base_lengths``) and ``z ~ N(0, 1)`` shared by a group's samples; the
    # finished samples of the unfinished groups (``done_group``, ``done_length``) are evidence of ``z``
    base_lengths: Optional[np.ndarray] = None
    spread: float = 0.0
    max_tokens: float = 0.0
    done_group: Optional[np.ndarray] = None
    done_length: Optional[np.ndarray] = None
    # response lengths of the finished samples of complete groups not yet at the trainer (log-prob inference, the
    # gate): their update work (:mod:`formulation.realloc.completion`); ``None``: taken at the mean
    pend_length: Optional[np.ndarray] = None

    @property
    def engines(self) -> int:
        return int(self.drain_key.size)


Z_POINTS = 24  # quantile grid of the difficulty z


def _z_grid() -> np.ndarray:
    from statistics import NormalDist

    return np.array([NormalDist().inv_cdf((i + 0.5) / Z_POINTS) for i in range(Z_POINTS)])


def group_difficulty_posterior(tail: TailRequests) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(groups, z grid, posterior weights groups x grid): each group's difficulty given that its unfinished samples
    have outlived their generated tokens (``P(b > y / phi)``) and its finished samples' lengths (density of
    ``l / phi`` under the base distribution, over ``phi``), on a quantile grid of the N(0, 1) prior."""
    B = np.asarray(tail.base_lengths, dtype=float)
    n = B.size
    z = _z_grid()
    phi = np.exp(tail.spread * z)
    groups, inv = np.unique(tail.group, return_inverse=True)
    y = np.asarray(tail.generated, dtype=float)
    surv = 1.0 - np.searchsorted(B, y[:, None] / phi[None, :], side="right") / n
    logw = np.zeros((groups.size, z.size))
    np.add.at(logw, inv, np.log(np.maximum(surv, 0.5 / n)))
    if tail.done_group is not None and tail.done_length is not None and len(tail.done_group):
        pos = np.searchsorted(groups, tail.done_group)
        ok = (pos < groups.size) & (groups[np.minimum(pos, groups.size - 1)] == tail.done_group)
        ln = np.asarray(tail.done_length, dtype=float)[ok]
        h = 0.15  # log-width of the density's finite difference
        x = ln[:, None] / phi[None, :]
        dens = (np.searchsorted(B, x * np.exp(h), side="right") - np.searchsorted(B, x * np.exp(-h), side="left")) / n / (2 * h)
        capped = ln[:, None] >= tail.max_tokens - 0.5 if tail.max_tokens > 0 else np.zeros_like(x, dtype=bool)
        like = np.where(capped, 1.0 - np.searchsorted(B, x, side="left") / n, dens)
        np.add.at(logw, pos[ok], np.log(np.maximum(like, 0.5 / n)))
    w = np.exp(logw - logw.max(axis=1, keepdims=True))
    return groups, z, w / w.sum(axis=1, keepdims=True)


def _grouped_draws(tail: TailRequests) -> np.ndarray:
    B = np.asarray(tail.base_lengths, dtype=float)
    y = np.asarray(tail.generated, dtype=float)
    groups, z, w = group_difficulty_posterior(tail)
    inv = np.searchsorted(groups, tail.group)
    cw = np.cumsum(w, axis=1)
    rng = np.random.default_rng(tail.seed)
    vg, sg = rng.random(groups.size), rng.integers(0, tail.draws, groups.size)
    vr, sr = rng.random(y.size), rng.integers(0, tail.draws, y.size)
    cap = tail.max_tokens if tail.max_tokens > 0 else np.inf
    out = np.empty((tail.draws, y.size))
    for d in range(tail.draws):
        ug = ((d + sg) % tail.draws + vg) / tail.draws  # each group's own stratum in each draw
        k = np.minimum(z.size - 1, (cw < ug[:, None]).sum(axis=1))
        phi = np.exp(tail.spread * z[k])[inv]
        i = np.searchsorted(B, y / phi, side="right")
        u = ((d + sr) % tail.draws + vr) / tail.draws
        j = np.minimum(B.size - 1, i + np.floor(u * np.maximum(0, B.size - i)).astype(int))
        length = np.where(i < B.size, np.minimum(cap, np.round(B[j] * phi)), cap if np.isfinite(cap) else y + 1.0)
        out[d] = length - y
    return np.maximum(1.0, out)


def residual_draws(tail: TailRequests) -> np.ndarray:
    """(draws x requests) remaining tokens: with the difficulty model, a group's difficulty drawn from its posterior
    (:func:`group_difficulty_posterior`) and each sample's base length given what it generated; without it, each
    request alone from the length distribution given what it generated."""
    if tail.base_lengths is not None and tail.spread > 0:
        return _grouped_draws(tail)
    L = np.asarray(tail.lengths, dtype=float)
    y = np.asarray(tail.generated, dtype=float)
    n = y.size
    if n == 0:
        return np.zeros((tail.draws, 0))
    i = np.searchsorted(L, y, side="right")
    rng = np.random.default_rng(tail.seed)
    v, sh = rng.random(n), rng.integers(0, tail.draws, n)
    out = np.empty((tail.draws, n))
    for d in range(tail.draws):
        u = ((d + sh) % tail.draws + v) / tail.draws  # each request in a stratum of its own per draw
        k = np.minimum(L.size - 1, i + np.floor(u * np.maximum(0, L.size - i)).astype(int))
        out[d] = np.where(i < L.size, L[k] - y, 1.0)
    return np.maximum(1.0, out)


def reassign(tail: TailRequests, keep: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(engine of each request among the kept, moved mask, each kept engine's re-prefill seconds) when only
    ``keep`` engines stay: the emptiest are drained and their requests go, group by group, to the kept engines
    with the fewest requests, filling them to one level (water-filling: what the router's least-loaded choice
    converges to, in one vectorised pass)."""
    E = tail.engines
    eng = np.asarray(tail.engine, dtype=int)
    if keep >= E:
        return eng.copy(), np.zeros(eng.size, dtype=bool), np.zeros(max(1, E))
    order = np.lexsort((-np.arange(E), tail.drain_key))  # the emptiest first
    kept = np.sort(order[E - keep:])
    new_index = np.full(E, -1)
    new_index[kept] = np.arange(keep)
    out = new_index[eng]
    moved = out < 0
    kl = np.bincount(out[~moved], minlength=keep).astype(float)
    groups, sizes = np.unique(tail.group[moved], return_counts=True)
    if groups.size:
        lo = np.sort(kl)
        cum = np.cumsum(lo)
        k = np.arange(1, keep + 1)
        # the level lam with sum(max(0, lam - kl)) = moved requests
        fill = k * lo - cum
        M = float(sizes.sum())
        j = int(np.searchsorted(fill, M, side="left"))
        j = max(1, min(j, keep))
        lam = (M + cum[j - 1]) / j
        by_load = np.argsort(kl, kind="stable")
        quota = np.maximum(0.0, lam - kl[by_load])
        edge = np.cumsum(quota)
        mid = np.cumsum(sizes) - sizes / 2.0
        pick = by_load[np.minimum(keep - 1, np.searchsorted(edge, mid, side="left"))]
        gi = np.searchsorted(groups, tail.group[moved])
        out[moved] = pick[gi]
    delay: np.ndarray = np.zeros(keep)
    if moved.any() and tail.prefill_ms is not None:
        n_in = np.bincount(out[moved], minlength=keep)
        ctx_in = np.bincount(out[moved], weights=np.asarray(tail.context, dtype=float)[moved], minlength=keep)
        per_seq = tail.prefill_ms(1.0, float(ctx_in.sum() / max(1, n_in.sum()))) / 1e3
        delay = n_in * per_seq
    return out, moved, delay


def _starts(eng: np.ndarray, first: np.ndarray, resid: np.ndarray, slots: int, engines: int) -> np.ndarray:
    """Start step of every request: FIFO list scheduling on ``slots`` slots per engine (``first``: the order
    key, running requests first)."""
    start = np.zeros(eng.size)
    counts = np.bincount(eng, minlength=engines)
    busy = np.nonzero(counts > slots)[0]
    if not busy.size:
        return start
    order = np.lexsort((first, eng))
    bounds = np.concatenate([[0], np.cumsum(counts)])
    for e in busy:
        idx = order[bounds[e]:bounds[e + 1]]
        heap = [float(resid[j]) for j in idx[:slots]]
        heapq.heapify(heap)
        for j in idx[slots:]:
            s0 = heapq.heappop(heap)
            start[j] = s0
            heapq.heappush(heap, s0 + float(resid[j]))
    return start


def _drain_ms(eng: np.ndarray, first: np.ndarray, resid: np.ndarray, context: np.ndarray, slots: int,
              a_ms: float, b_ms: float, c_ms: float) -> np.ndarray:
    """Milliseconds until each request is done on its engine ``eng`` (any integer labels: one engine each),
    FIFO in the order of ``first`` (module docstring: step space, segment sums)."""
    n = resid.size
    start = _starts(eng, first, resid, max(1, int(slots)), int(eng.max()) + 1)
    end = start + resid
    c0 = context - start
    ev_eng = np.concatenate([eng, eng])
    ev_step = np.concatenate([start, end])
    ev_dn = np.concatenate([np.ones(n), -np.ones(n)])
    ev_dc = np.concatenate([c0, -c0])
    # at one step, ends before starts (a freed slot is taken in the same step)
    o = np.lexsort((ev_dn, ev_step, ev_eng))
    ev_eng, ev_step, ev_dn, ev_dc = ev_eng[o], ev_step[o], ev_dn[o], ev_dc[o]
    N = np.maximum(np.cumsum(ev_dn), 0.0)
    C = np.cumsum(ev_dc)
    nxt = np.empty_like(ev_step)
    nxt[:-1] = ev_step[1:]
    nxt[-1] = ev_step[-1]
    same = np.zeros(ev_eng.size, dtype=bool)
    same[:-1] = ev_eng[1:] == ev_eng[:-1]
    Lk = np.where(same, nxt - ev_step, 0.0)
    seg = np.where(N > 0.5, Lk * (a_ms + b_ms * N + c_ms * C) + c_ms * N * (ev_step + nxt - 1.0) * Lk / 2.0, 0.0)
    before = np.concatenate([[0.0], np.cumsum(seg)[:-1]])
    # time at each event = its engine's segments before it
    first_ev = np.ones(ev_eng.size, dtype=bool)
    first_ev[1:] = ev_eng[1:] != ev_eng[:-1]
    base = np.maximum.accumulate(np.where(first_ev, np.arange(ev_eng.size), 0))
    t_ev = before - before[base]
    t_end = np.empty(n)
    ends = ev_dn < 0
    t_end[o[ends] - n] = t_ev[ends]  # the request of each end event: positions n.. of the unsorted arrays
    return t_end


def end_times_many(tail: TailRequests, draws: np.ndarray, layouts: list, a_ms: float, b_ms: float, c_ms: float) -> np.ndarray:
    """Seconds from now until each request is done, ``(layouts, draws, requests)``: every draw (rows of ``draws``)
    on every layout (:func:`reassign`'s results), as independent engines of one vectorised drain."""
    D, n = draws.shape
    if n == 0 or not layouts:
        return np.zeros((len(layouts), D, n))
    Emax = max(int(lay[2].size) for lay in layouts)
    run = np.asarray(tail.running, dtype=bool)
    ctx = np.asarray(tail.context, dtype=float)
    veng, first, delay = [], [], []
    for i, (eng, moved, dl) in enumerate(layouts):
        key = np.where(run & ~moved, 0.0, 1.0) + np.arange(n) / (n + 1.0)
        for d in range(D):
            veng.append((i * D + d) * Emax + eng)
            first.append(key)
            delay.append(dl[eng])
    t = _drain_ms(np.concatenate(veng), np.concatenate(first), draws.reshape(-1) if len(layouts) == 1 else np.tile(draws.reshape(-1), len(layouts)),
                  np.tile(ctx, len(layouts) * D), tail.slots, a_ms, b_ms, c_ms) / 1e3
    return (t + np.concatenate(delay)).reshape(len(layouts), D, n)


def end_times(tail: TailRequests, resid: np.ndarray, layout: tuple, a_ms: float, b_ms: float, c_ms: float) -> np.ndarray:
    """Seconds from now until each request is done (one residual draw ``resid``) on the engines of ``layout``
    (:func:`reassign`'s result)."""
    return end_times_many(tail, np.asarray(resid, dtype=float)[None, :], [layout], a_ms, b_ms, c_ms)[0, 0]


def group_arrivals_many(tail: TailRequests, draws: np.ndarray, layouts: list, a_ms: float, b_ms: float, c_ms: float
                        ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(groups, the time each is done ``(layouts, draws, groups)``, each request's group index): every draw on every
    layout (:func:`reassign`'s results)."""
    t = end_times_many(tail, draws, layouts, a_ms, b_ms, c_ms)
    groups, inv = np.unique(tail.group, return_inverse=True)
    L, D, n = t.shape
    done = np.zeros((L * D, groups.size))
    rows = np.repeat(np.arange(L * D), n)
    np.maximum.at(done, (rows, np.tile(inv, L * D)), t.reshape(-1))
    return groups, done.reshape(L, D, groups.size), inv
