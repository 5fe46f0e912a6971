"""Reallocation judged on the iteration's completion time: the model, the candidate search and its checker.

**State** (what telemetry and the job's model give at time ``now`` of an iteration): ``G`` GPUs; the
allocation ``(r, f, t)`` of rollout, log-prob inference and trainer (units: engine TP ``u_r``,
trainer TP x PP ``u_t``, 1); the rollout's ``n`` unfinished requests, their expected remaining tokens
``E`` (sum) and ``L`` (the largest; from the length distribution's residuals given what each request has
generated, never the sampled lengths), their mean context ``x``; the engine's step time
``s(B, K) = a + b B + c K`` ms and its batch cap ``B_cap`` (running cap, KV capacity ``C``); the
log-prob stage's queued work ``Q_f`` and per-sample work ``w_f``; the trainer's queued work ``Q_t``,
samples not yet at it ``m_t`` and per-sample work ``w_t``; per-GPU rates ``rho_f``, ``rho_t``; group size
``g``; the optimizer step ``opt(t)`` and the weight sync ``sync(r, t)``; the delay ``d_c`` before GPUs a
component gains start working (engine wake, inference rank start, trainer resharding).

**Predicted time to the end of the iteration** of an allocation ``A = (r', f', t')`` (every GPU owned:
``r' + f' + t' = G``), from now:

* rollout: ``e = r'/u_r`` engines, per-engine batch ``B = min(n/e, B_cap, C / x)``;
  ``R = max(E s(B, B x) / (B e), L s(B_l, B_l x_l)) / 1000 + d_r`` (all remaining tokens at that batch; the
  longest request's ``L`` tokens one step each on the engine that holds it, the busiest one, whose batch
  ``B_l = min(max(b_max, n/e), B_cap)`` and context ``x_l`` telemetry reports: a hard prompt's siblings
  share an engine, so the longest request sits among many long ones);
* log-prob inference: ``F = max(d_f + (Q_f + n w_f) / (f' rho_f), R + g w_f / (f' rho_f))`` (all its work;
  the last group after the rollout);
* trainer: ``T_tr = max(d_t + (Q_t + m_t w_t) / (t' rho_t), F + g w_t / (t' rho_t),
  max(d_t, R/2) + (Q_t + h g w_t) / (t' rho_t))`` with ``h`` the GRPO groups that still have an unfinished
  request: under group gating none of a group's ``g`` samples reaches the trainer before its last one is done,
  so their work is back-loaded; it is taken to arrive in the second half of the rollout's remaining time
  (an assumption; ``h = 1`` for per-sample intake);
* ``C(A) = T_tr + opt(t') + sync(r', t')``.

The **decision** is the allocation of least ``C`` over every ``(r', t')`` on the units (``f' = G - r' - t'
>= 1``), committed when ``C(best) < (1 - margin) C(current)``; the record carries ``C`` of both and the
min-over-stages throughput proxy ``1 / max(R, F, T_tr)`` (each stage's own remaining time) of both.
Since ``f'`` takes what rollout and trainer leave, no candidate leaves a GPU unowned.

:func:`check` (solver-free) re-evaluates the chosen allocation, its units and the GPU sum, and that no
enumerated allocation has a lower ``C`` (the enumeration is exhaustive on the units, so it is exact).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Callable, Optional

import numpy as np

from formulation.realloc.tail import TailRequests, end_times_many, group_arrivals_many, reassign, residual_draws


@dataclass(frozen=True)
class CompletionState:
    gpus: int
    current: tuple  # (rollout, reference, trainer) GPUs
    unit_r: int
    unit_t: int
    n_left: float  # unfinished rollout requests
    rem_tokens: float  # their expected remaining tokens (sum)
    rem_max: float  # the largest expected remaining tokens of one request
    ctx_tokens: float  # mean context per running request (KV tokens)
    busiest_batch: float  # running requests of the busiest engine (a hard prompt's siblings share one: it holds the longest)
    busiest_ctx: float  # its mean context per request
    a_ms: float
    b_ms: float
    c_ms: float
    batch_cap: float
    kv_tokens: float
    ref_queued: float  # FLOPs
    ref_per_sample: float
    ref_rate: float  # FLOP/s per GPU
    tr_queued: float
    tr_to_come: float  # samples not yet in the trainer's queue
    tr_per_sample: float
    tr_rate: float
    group: int
    groups_left: float = 0.0  # groups with an unfinished request: under group gating their samples reach the trainer last
    grow_s: dict = field(default_factory=dict)  # component -> delay before added GPUs work
    opt_s: Optional[Callable[[np.ndarray], np.ndarray]] = None
    sync_s: Optional[Callable[[np.ndarray, np.ndarray], np.ndarray]] = None
    tail: Optional[TailRequests] = None  # the unfinished requests one by one: the request-level model (below)
    sample_work: Optional[Callable[[np.ndarray], tuple]] = None  # sample tokens -> (log-prob FLOPs, update FLOPs)
    # update FLOPs of the samples not yet at the trainer once every response is finished (their lengths known);
    # ``None``: ``tr_to_come`` samples at the mean
    to_come_work: Optional[float] = None


def predict(st: CompletionState, r, f, t) -> dict:
    """Predicted seconds to the end of the iteration's training (and the stage times) for allocations
    ``(r, f, t)`` (arrays of the same shape): the request-level model when the state carries the requests
    (``tail``), else the aggregate formulas of the module docstring."""
    r = np.asarray(r, dtype=float)
    f = np.asarray(f, dtype=float)
    t = np.asarray(t, dtype=float)
    if st.tail is not None and st.sample_work is not None and st.tail.engine.size:
        return _predict_requests(st, r, f, t)
    cur_r, cur_f, cur_t = st.current
    d_r = np.where(r > cur_r, st.grow_s.get("rollout", 0.0), 0.0)
    d_f = np.where(f > cur_f, st.grow_s.get("reference", 0.0), 0.0)
    d_t = np.where(t > cur_t, st.grow_s.get("trainer", 0.0), 0.0)
    if st.n_left > 0:
        e = np.maximum(1.0, r / st.unit_r)
        per = st.n_left / e
        x = max(1.0, st.ctx_tokens)
        B = np.maximum(1.0, np.minimum(np.minimum(per, st.batch_cap), st.kv_tokens / x))
        step_full = st.a_ms + st.b_ms * B + st.c_ms * B * x
        bulk = st.rem_tokens * step_full / (B * e)
        Bl = np.maximum(1.0, np.minimum(np.maximum(per, st.busiest_batch), st.batch_cap))
        xl = max(1.0, st.busiest_ctx)
        crit = st.rem_max * (st.a_ms + st.b_ms * Bl + st.c_ms * Bl * xl)
        R = np.maximum(bulk, crit) / 1e3 + d_r
    else:
        R = np.zeros_like(r)
    fr = np.maximum(f, 1e-9) * st.ref_rate
    F = np.maximum(d_f + (st.ref_queued + st.n_left * st.ref_per_sample) / fr, R + st.group * st.ref_per_sample / fr)
    if st.n_left <= 0 and st.ref_queued <= 0:
        F = np.zeros_like(f)
    tr = np.maximum(t, 1e-9) * st.tr_rate
    gated = min(st.groups_left * st.group, st.tr_to_come)
    to_come = st.to_come_work if st.to_come_work is not None and st.n_left <= 0 else st.tr_to_come * st.tr_per_sample
    T = np.maximum(np.maximum(d_t + (st.tr_queued + to_come) / tr,
                              F + min(st.group, st.tr_to_come) * st.tr_per_sample / tr),
                   np.maximum(d_t, R / 2.0) + (st.tr_queued + gated * st.tr_per_sample) / tr)
    opt = st.opt_s(t) if st.opt_s is not None else 0.0
    sync = st.sync_s(r, t) if st.sync_s is not None else 0.0
    return {"completion_s": T + opt + sync, "rollout_s": R, "reference_s": F, "trainer_s": T,
            "proxy": 1.0 / np.maximum(np.maximum(R, F), np.maximum(T, 1e-9))}


LOGPROB_ORDER = "sample"  # or "group": the order log-prob inference takes the responses in (see _predict_requests)


def _fluid_after(arrive: np.ndarray, work: np.ndarray, rate: np.ndarray, ready: np.ndarray) -> np.ndarray:
    """Finish time of every arrival of a FIFO fluid server of ``rate`` (one per candidate, shape ``(m,)``)
    that starts serving at ``ready``: arrivals ``arrive`` (increasing, ``(m, k)`` or ``(k,)``) bring ``work``
    (``(k,)``). ``c_k = P_k / rate + max_{i <= k}(max(a_i, ready) - P_{i-1} / rate)`` with ``P`` the prefix sums."""
    P = np.cumsum(work)
    Pm = np.concatenate([[0.0], P[:-1]])
    a = np.maximum(np.broadcast_to(arrive, (rate.size, work.size)), ready[:, None])
    return P[None, :] / rate[:, None] + np.maximum.accumulate(a - Pm[None, :] / rate[:, None], axis=1)


def _fluid_at(arrive: np.ndarray, work: np.ndarray, at: np.ndarray, rate: np.ndarray, ready: np.ndarray) -> np.ndarray:
    """:func:`_fluid_after`'s finish times at the arrivals ``at`` (increasing indices, the last one ``k - 1``) only,
    ``(m, len(at))``, with the running maximum taken over the first and the last arrival between consecutive ``at``
    (``2 len(at)`` terms instead of ``k``): exact where those segments hold at most two arrivals, never later than
    exact, and earlier by less than a segment's span of arrivals or of work. A group's log-probs are done with its
    last response's; the segments are the responses that finish between two groups' last ones."""
    P = np.cumsum(work)
    Pm = P - work
    firsts = np.concatenate([[0], at[:-1] + 1])
    sel = np.unique(np.concatenate([firsts[firsts <= at], at]))
    a = np.maximum(arrive[sel][None, :], ready[:, None]) - Pm[sel][None, :] / rate[:, None]
    M = np.maximum.accumulate(a, axis=1)
    return P[at][None, :] / rate[:, None] + M[:, np.searchsorted(sel, at)]


_DRAWS: list = []  # (tail, draws) of the last state: the keep and the candidates of one decision share them


def _draws(tail: TailRequests) -> np.ndarray:
    if _DRAWS and _DRAWS[0][0] is tail:
        return _DRAWS[0][1]
    D = residual_draws(tail)
    _DRAWS[:] = [(tail, D)]
    return D


def _predict_requests(st: CompletionState, r: np.ndarray, f: np.ndarray, t: np.ndarray) -> dict:
    """The request-level model (:mod:`formulation.realloc.tail` for the rollout): per residual draw, each GRPO
    group is done when its last request is (under ``r / unit_r`` engines); log-prob inference serves first its
    backlog, then the groups' samples first come first served (:func:`_fluid_after`); the trainer, its queue,
    then the samples of complete groups behind the log-prob backlog, then each group when its log-probs are
    done; the iteration ends after the optimizer step and the weight sync. Means over the draws."""
    tail = st.tail
    assert tail is not None and st.sample_work is not None
    cur_r, cur_f, cur_t = st.current
    D = _draws(tail)
    tokens = np.asarray(tail.prompt_tokens, dtype=float)[None, :] + np.asarray(tail.generated, dtype=float)[None, :] + D
    wf, wt = st.sample_work(tokens)
    wf, wt = np.broadcast_to(wf, D.shape), np.broadcast_to(wt, D.shape)
    g = max(1, int(tail.gate))
    groups = np.unique(tail.group)
    groups_unf = groups.size
    w_t_mean = st.tr_per_sample
    # the finished samples of the unfinished groups wait at the gate: their own lengths when known, else the mean
    gate_w: np.ndarray = np.full(groups_unf, 0.0)
    if tail.done_group is not None and tail.done_length is not None and len(tail.done_group) and g > 1:
        pos = np.searchsorted(groups, tail.done_group)
        ok = (pos < groups_unf) & (groups[np.minimum(pos, groups_unf - 1)] == tail.done_group)
        _, w_done = st.sample_work(np.mean(tail.prompt_tokens) + np.asarray(tail.done_length, dtype=float)[ok])
        gate_w = np.bincount(pos[ok], weights=np.broadcast_to(w_done, (int(ok.sum()),)), minlength=groups_unf)
    else:
        per = np.bincount(np.searchsorted(groups, tail.group), minlength=groups_unf)
        gate_w = np.maximum(0, g - per) * w_t_mean
    pend = max(0.0, st.tr_to_come - groups_unf * g)  # samples of complete groups not yet at the trainer
    # their update work: at their own lengths where the manager reports them (the complete groups are the ones that
    # finished first, short ones: at the mean, a training-bound allocation's end was over-predicted by up to 25%
    # mid-rollout), else at the mean
    pl = tail.pend_length
    if pl is not None and len(pl) and pend > 0:
        _, w_pl = st.sample_work(np.mean(tail.prompt_tokens) + np.asarray(pl, dtype=float))
        w_pend = float(np.mean(np.broadcast_to(w_pl, (len(pl),)))) * pend
    else:
        w_pend = pend * w_t_mean
    out = {k: np.zeros(r.shape) for k in ("rollout_s", "reference_s", "trainer_s", "completion_s")}
    flat = {k: v.reshape(-1) for k, v in out.items()}
    rf, ff, tf = r.reshape(-1), f.reshape(-1), t.reshape(-1)
    d_r = st.grow_s.get("rollout", 0.0)
    sizes = np.unique(rf)
    layouts = [reassign(tail, max(1, int(rv // st.unit_r))) for rv in sizes]
    if LOGPROB_ORDER == "sample":
        ends = end_times_many(tail, D, layouts, st.a_ms, st.b_ms, st.c_ms)  # (sizes, draws, requests)
        inv = np.unique(tail.group, return_inverse=True)[1].reshape(-1)
    else:
        _, done_all, inv = group_arrivals_many(tail, D, layouts, st.a_ms, st.b_ms, st.c_ms)
    for li, rv in enumerate(sizes):
        idx = np.nonzero(rf == rv)[0]
        fr = np.maximum(ff[idx], 1e-9) * st.ref_rate
        tr = np.maximum(tf[idx], 1e-9) * st.tr_rate
        d_f = np.where(ff[idx] > cur_f, st.grow_s.get("reference", 0.0), 0.0)
        d_t = np.where(tf[idx] > cur_t, st.grow_s.get("trainer", 0.0), 0.0)
        acc = {k: np.zeros(idx.size) for k in ("rollout_s", "reference_s", "trainer_s")}
        b0 = d_f + st.ref_queued / fr  # the log-prob backlog is served first
        for d in range(D.shape[0]):
            gt: np.ndarray = np.bincount(inv, weights=wt[d], minlength=groups_unf) + gate_w
            if LOGPROB_ORDER == "sample":
                # log-prob inference takes each response as it finishes (first come first served, no gate): a
                # group's log-probs are done with its last response's, behind every response that finished before
                e = ends[li, d] + (d_r if rv > cur_r else 0.0)
                o = np.argsort(e, kind="stable")
                last = np.full(groups_unf, -1)
                np.maximum.at(last, inv[o], np.arange(o.size))
                og = np.argsort(last)
                a = e[o][last[og]]  # each group's rollout done, in the order its log-probs are
                c = _fluid_at(e[o], wf[d][o], last[og], fr, b0)  # (m, groups): log-probs of each group done
                gt = gt[og]
            else:  # whole groups, in the order they finish (the previous model: early groups' log-probs too early)
                done = done_all[li, d] + (d_r if rv > cur_r else 0.0)
                gf = np.bincount(inv, weights=wf[d], minlength=done.size)
                o = np.argsort(done, kind="stable")
                a, gf, gt = done[o], gf[o], gt[o]
                c = _fluid_after(a, gf, fr, b0)
            F = c[:, -1] if c.shape[1] else b0
            # trainer arrivals: its queue now, the complete groups' samples after the backlog, then each group
            W0 = w_pend
            S = np.cumsum(gt[::-1])[::-1]
            # the trainer: all its work at its rate; the complete groups' samples leave log-prob inference's backlog
            # (first come first served) until b0, the last of them with about one sample's work after it; each open
            # group after its log-probs (c) with the work of the groups behind it. (Charging all of W0 after b0 made a
            # training-bound allocation's end 20% late mid-rollout: the backlog streams to the trainer.)
            T = np.maximum(d_t + (st.tr_queued + W0 + gt.sum()) / tr, np.maximum(b0, d_t) + (W0 / pend if pend > 0 else 0.0) / tr)
            if c.shape[1]:
                T = np.maximum(T, (np.maximum(c, d_t[:, None]) + S[None, :] / tr[:, None]).max(axis=1))
            acc["rollout_s"] += float(a.max()) if a.size else 0.0
            acc["reference_s"] += F
            acc["trainer_s"] += T
        for k in acc:
            flat[k][idx] = acc[k] / D.shape[0]
    opt = st.opt_s(t) if st.opt_s is not None else 0.0
    sync = st.sync_s(r, t) if st.sync_s is not None else 0.0
    out["completion_s"] = out["trainer_s"] + opt + sync
    R, F, T = out["rollout_s"], out["reference_s"], out["trainer_s"]
    out["proxy"] = 1.0 / np.maximum(np.maximum(R, F), np.maximum(T, 1e-9))
    return out


GRID_FULL = 16  # rollout sizes searched one by one up to this many; beyond, :func:`rollout_grid`


def rollout_grid(sizes: np.ndarray, current: int) -> np.ndarray:
    """A subset of the rollout sizes ``sizes`` (ascending): the current one, the smallest eight, and sixteen more
    spread evenly over the rest (the completion time is smooth in the engine count away from a few engines)."""
    pick = set(sizes[:8].tolist()) | {int(current)} if int(current) in set(sizes.tolist()) else set(sizes[:8].tolist())
    idx = np.unique(np.round(np.linspace(0, sizes.size - 1, GRID_FULL)).astype(int))
    pick |= set(sizes[idx].tolist())
    return np.array(sorted(pick), dtype=sizes.dtype)


def candidates(st: CompletionState, max_rollout: Optional[int] = None,
               max_trainer: Optional[int] = None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Every allocation on the units with every GPU owned (``f = G - r - t >= 1``); with ``max_rollout``,
    the rollout keeps at most that many (a donor: it gives, the other components receive). With the
    request-level model the rollout's sizes are :func:`rollout_grid` (each size costs a drain simulation)."""
    G = st.gpus
    rs = np.arange(st.unit_r, (G if max_rollout is None else min(G, max_rollout + 1)), st.unit_r)
    if st.tail is not None and rs.size > GRID_FULL:
        rs = rollout_grid(rs, st.current[0])
    ts = np.arange(st.unit_t, G if max_trainer is None else min(G, max_trainer + 1), st.unit_t)
    R, T = np.meshgrid(rs, ts, indexing="ij")
    F = G - R - T
    ok = F >= 1
    return R[ok], F[ok], T[ok]


@dataclass
class CompletionDecision:
    current: tuple
    target: tuple
    completion_keep_s: float
    completion_s: float
    proxy_keep: float
    proxy: float
    committed: bool
    reason: str
    stages: dict = field(default_factory=dict)


def decide(st: CompletionState, margin: float = 0.05, migration_s: float = 0.0, max_rollout: Optional[int] = None,
           max_trainer: Optional[int] = None) -> CompletionDecision:
    """The allocation of least predicted completion time (module docstring); ``migration_s`` is added to
    every candidate that moves (the pause of the moved components); ``max_rollout`` / ``max_trainer`` bound
    those components (a donor rollout only gives; a trainer that could not be placed bigger stays)."""
    R, F, T = candidates(st, max_rollout, max_trainer)
    p = predict(st, R, F, T)
    cur = np.array(st.current, dtype=float)
    moved = ~((R == cur[0]) & (F == cur[1]) & (T == cur[2]))
    c = p["completion_s"] + np.where(moved, migration_s, 0.0)
    keep = predict(st, *[np.array([v]) for v in st.current])
    ck = float(keep["completion_s"][0])
    i = int(np.argmin(c))
    best = (int(R[i]), int(F[i]), int(T[i]))
    cb = float(c[i])
    stages = {k: float(p[k][i]) for k in ("rollout_s", "reference_s", "trainer_s")}
    if best != tuple(st.current) and cb < (1.0 - margin) * ck:
        reason = (f"committed: predicted completion {cb:.1f} s against {ck:.1f} s if kept ({ck / cb:.3f}x; margin {margin:.0%}); "
                  f"min-over-stages proxy {float(p['proxy'][i]):.4g} against {float(keep['proxy'][0]):.4g} per s")
        return CompletionDecision(tuple(st.current), best, ck, cb, float(keep["proxy"][0]), float(p["proxy"][i]), True, reason, stages)
    reason = (f"kept: best predicted completion {cb:.1f} s ({best[0]}+{best[1]}+{best[2]}) against {ck:.1f} s if kept "
              f"(margin {margin:.0%})")
    return CompletionDecision(tuple(st.current), tuple(st.current), ck, cb, float(keep["proxy"][0]), float(p["proxy"][i]), False,
                              reason, stages)


def check(st: CompletionState, dec: CompletionDecision, margin: float = 0.05, migration_s: float = 0.0,
          max_rollout: Optional[int] = None, max_trainer: Optional[int] = None) -> list[str]:
    """Solver-free check of a decision: units, GPU sum, and no candidate better (exhaustive, one by one)."""
    out = []
    r, f, t = dec.target
    if r + f + t != st.gpus:
        out.append(f"target {dec.target} owns {r + f + t} of {st.gpus} GPUs")
    if r % st.unit_r or t % st.unit_t or r < st.unit_r or t < st.unit_t or f < 1:
        out.append(f"target {dec.target} is off the units (rollout {st.unit_r}, trainer {st.unit_t})")
    ck = float(predict(st, *[np.array([v]) for v in st.current])["completion_s"][0])
    if not math.isclose(ck, dec.completion_keep_s, rel_tol=1e-9, abs_tol=1e-9):
        out.append(f"kept completion {dec.completion_keep_s} recomputes to {ck}")
    best = ck
    sizes = np.arange(st.unit_r, st.gpus if max_rollout is None else min(st.gpus, max_rollout + 1), st.unit_r)
    if st.tail is not None and sizes.size > GRID_FULL:
        sizes = rollout_grid(sizes, st.current[0])  # the declared family of the request-level model
    for rr in (int(v) for v in sizes):
        for tt in range(st.unit_t, st.gpus if max_trainer is None else min(st.gpus, max_trainer + 1), st.unit_t):
            ff = st.gpus - rr - tt
            if ff < 1:
                continue
            v = float(predict(st, np.array([rr]), np.array([ff]), np.array([tt]))["completion_s"][0])
            if (rr, ff, tt) != tuple(st.current):
                v += migration_s
            best = min(best, v)
    chosen = ck if not dec.committed else float(predict(st, np.array([r]), np.array([f]), np.array([t]))["completion_s"][0]) + migration_s
    if chosen > best * (1 + 1e-9) + 1e-9 and dec.committed:
        out.append(f"a candidate completes in {best:.3f} s, the chosen one in {chosen:.3f} s")
    if dec.committed and not chosen < (1 - margin) * ck + 1e-9:
        out.append(f"committed {chosen:.3f} s does not beat {ck:.3f} s by the margin")
    return out
