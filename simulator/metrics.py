"""Outputs of a request-level job run: throughput, GPU-seconds busy versus held, cost, SLO, tail shape.

* throughput: response tokens and requests per second of wall time over all iterations;
* per component: GPU-seconds held (the ledger) and busy (decoding or prefilling for engines;
  processing for the data-parallel stages), their ratio, and idle (held, not busy);
* unowned GPU-seconds: the cluster's GPU-seconds no component held (a donor's GPUs given to no one),
  and idle GPU-seconds in all (unowned plus every component's held-but-idle);
* cost: the job's whole cluster for the run (GPUs x time x price: what a static reservation
  pays), and the held GPU-seconds only (what an elastic pool that takes released GPUs back would
  charge);
* SLO attainment: the fraction of iterations no longer than the job's SLO (seconds);
* rollout tail shape of an iteration (:func:`tail_shape`): longest decode, fraction of requests
  done by a time, share of the rollout taken by the last 10% of requests, requests still running
  and engines still holding one at mid-generation.
"""

from __future__ import annotations

import math

import numpy as np

from simulator.job import JobResult


def tail_shape(res: JobResult, iteration: int = 0, by_s: float = 150.0) -> dict:
    it = res.iterations[iteration]
    n = res.setup.workload.n_requests
    lo, hi = iteration * n, (iteration + 1) * n
    reqs = [r for r in res.requests if lo <= r.rid < hi]
    ct = np.sort(np.array([r.done_s - it.start_s for r in reqs if r.done_s is not None]))
    if ct.size == 0:
        return {}
    T = float(ct[-1])
    t90 = float(np.quantile(ct, 0.9))
    mid = T / 2.0
    still = [r for r in reqs if r.done_s - it.start_s > mid]
    engines_holding = len({r.engine for r in still} - {None})  # the engine each sat on last
    engines_at_mid = sum(1 for eid, (a, b) in res.engine_held.items() if a <= it.start_s + mid and (b is None or b > it.start_s + mid))
    return {
        "longest_decode_s": T,
        "done_by_s": by_s,
        "fraction_done_by": float(np.mean(ct <= by_s)),
        "t50_s": float(np.quantile(ct, 0.5)),
        "t90_s": t90,
        "t95_s": float(np.quantile(ct, 0.95)),
        "last10pct_share": (T - t90) / T if T > 0 else 0.0,
        "running_at_mid": len(still) / len(reqs),
        "engines_holding_at_mid": engines_holding,
        "engines_up_at_mid": engines_at_mid,
    }


def job_metrics(res: JobResult) -> dict:
    T = res.end_s
    iters = res.iterations
    tokens = float(sum(i.response_tokens for i in iters))
    reqs = int(sum(i.requests for i in iters))
    comps = {}
    for c in sorted(res.ledger.changes):
        held = res.ledger.held_gpu_s(c, T)
        busy = res.ledger.busy_gpu_s.get(c, 0.0)
        comps[c] = {"held_gpu_s": held, "busy_gpu_s": busy, "busy_fraction": busy / held if held > 0 else 0.0}
    s = res.setup
    price = {s.rollout_gpu.name.lower(): s.price_rollout_per_gpu_h, s.train_gpu.name.lower(): s.price_train_per_gpu_h}
    cluster_gpu_s = sum(g * T for g in res.cluster_gpus.values())
    cluster_cost = sum(g * T / 3600.0 * price.get(t, 0.0) for t, g in res.cluster_gpus.items())
    held_cost = 0.0
    for c, v in comps.items():
        p = s.price_rollout_per_gpu_h if c == "rollout" and res.policy.name != "colocated" else s.price_train_per_gpu_h
        held_cost += v["held_gpu_s"] / 3600.0 * p
    held_total = sum(v["held_gpu_s"] for v in comps.values())
    for v in comps.values():
        v["idle_gpu_s"] = max(0.0, v["held_gpu_s"] - v["busy_gpu_s"])
    durs = [i.duration_s for i in iters]
    slo_ok = [d <= s.slo_s * (1 + 1e-9) for d in durs]
    return {
        "job": s.name,
        "policy": res.policy.name,
        "queue": res.policy.queue,
        "consolidate_at": res.policy.consolidate_at,
        "streaming": res.policy.streaming,
        "seed": res.seed,
        "iterations": len(iters),
        "wall_s": T,
        "iteration_s": durs,
        "mean_iteration_s": float(np.mean(durs)) if durs else math.nan,
        "rollout_s": [i.rollout_end_s - i.start_s for i in iters],
        "tokens_per_s": tokens / T if T > 0 else 0.0,
        "requests_per_s": reqs / T if T > 0 else 0.0,
        "response_tokens": tokens,
        "requests": reqs,
        "components": comps,
        "cluster_gpus": dict(res.cluster_gpus),
        "cluster_gpu_s": cluster_gpu_s,
        "cost_cluster": cluster_cost,
        "cost_held": held_cost,
        "cost_per_mtoken_cluster": cluster_cost / (tokens / 1e6) if tokens else math.nan,
        "slo_s": s.slo_s if math.isfinite(s.slo_s) else None,
        "slo_attainment": float(np.mean(slo_ok)) if slo_ok else math.nan,
        # GPU-seconds of the cluster that no component held (released by a donor and given to no one)
        "unowned_gpu_s": max(0.0, cluster_gpu_s - held_total),
        "unowned_fraction": max(0.0, cluster_gpu_s - held_total) / cluster_gpu_s if cluster_gpu_s > 0 else 0.0,
        "idle_gpu_s": max(0.0, cluster_gpu_s - held_total) + sum(v["idle_gpu_s"] for v in comps.values()),
        "reprefill_tokens": float(sum(i.reprefill_tokens for i in iters)),
        "preemptions": int(sum(i.preemptions for i in iters)),
        "reallocations": len(res.decisions),
        "events": res.events,
        "tail": tail_shape(res, 0),
    }


def timeline(res: JobResult, points: int = 400) -> dict:
    ts, series = res.ledger.series(res.end_s, points)
    return {
        "t_s": [round(float(t), 3) for t in ts],
        "gpus_held": {c: [float(v) for v in vs] for c, vs in series.items()},
        "iterations": [{"index": i.index, "start_s": i.start_s, "rollout_end_s": i.rollout_end_s, "end_s": i.end_s}
                       for i in res.iterations],
        "decisions": [{"t_s": t, "target": tgt, "reason": why} for t, tgt, why in res.decisions],
    }
