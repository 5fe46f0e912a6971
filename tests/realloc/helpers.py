"""Builders for reallocation tests: random instances, snapshots, contexts."""

from __future__ import annotations

import numpy as np

from formulation.realloc.context import ComponentContext, Links, ReallocContext, pools_from_snapshot
from formulation.realloc.instance import Candidate, Curve, Move, Pool, ReallocInstance, Stage
from formulation.realloc.telemetry import TelemetrySnapshot

# one 7B GRPO job on 4 nodes of 8 H100 (3 rollout, 1 training): small enough to simulate whole in seconds
SMALL_MATH_SCENARIO = """name: paths
gpu_types:
  H100: {price_per_gpu_hour: 2.5}
cluster:
  node_groups:
    - {name: h100, gpu_type: H100, count: 4, gpus_per_node: 8, host_dram_gb: 2048}
jobs:
  - name: math-small
    model: deepseek-r1-distill-qwen-7b
    algorithm: grpo
    rollout: {batch_prompts: 48, group_size: 8, prompt_tokens: 512, max_response_tokens: 8192,
              response_lengths: {source: servegen, client: "66", scale: 0.3}, tp: 1, nodes: 3}
    trainer: {tp: 1, pp: 1, nodes: 1}
    slo: {ratio_to_solo: 1.0}
"""


def concave_curve(rng, max_gpus: int) -> Curve:
    """A random concave non-decreasing curve with 1-4 breakpoints."""
    k = int(rng.integers(1, 5))
    xs = np.unique(np.sort(rng.integers(1, max_gpus + 1, size=k))).astype(float)
    slopes = np.sort(rng.uniform(0.0, 10.0, size=len(xs)))[::-1]
    ys = np.cumsum(slopes * np.diff(np.concatenate([[0.0], xs])))
    return Curve(tuple(xs), tuple(ys), extrapolate=bool(rng.integers(0, 2)))


def random_instance(rng, *, n_pools: int = 1, types: tuple = ("H100",), n_stages: int = 3, n_cands: int = 4,
                    gpus_per_pool: int = 8, cost_scale: float = 5.0, interruptible_p: float = 1.0) -> ReallocInstance:
    pools = [Pool(f"n{i}", types[i % len(types)], gpus_per_pool) for i in range(n_pools)]
    left = {p.name: p.gpus for p in pools}
    stages = []
    for s in range(n_stages):
        curves = {t: concave_curve(rng, gpus_per_pool * n_pools) for t in types}
        # current allocation fits what is left
        cur = {}
        for p in pools:
            g = int(rng.integers(0, min(left[p.name], 3) + 1))
            if g:
                cur[p.name] = g
                left[p.name] -= g
        if not cur:
            p = max(pools, key=lambda q: left[q.name])
            if left[p.name] == 0:
                cur = {}
            else:
                cur = {p.name: 1}
                left[p.name] -= 1
        interruptible = bool(rng.random() < interruptible_p)
        cands = [Candidate("keep", cur)]
        if interruptible:
            for c in range(n_cands - 1):
                alloc = {}
                for p in pools:
                    g = int(rng.integers(0, gpus_per_pool // 2 + 1))
                    if g:
                        alloc[p.name] = g
                changed = sorted(p for p in set(cur) | set(alloc) if cur.get(p, 0) != alloc.get(p, 0))
                moves = tuple(Move("workload", p, cur.get(p, 0), alloc.get(p, 0), 1.0, 0.0, "test") for p in changed)
                cands.append(Candidate(f"c{c}", alloc, migration_cost=float(rng.uniform(0, cost_scale)) if moves else 0.0,
                                       moves=moves))
        stages.append(Stage(f"s{s}", "rollout", True, interruptible, curves, cands))
    return ReallocInstance(pools, stages, margin=0.0)


def worker(wid, comp, node, gpu="H100", gpus=1, used=0.0, cap=1000.0, tps=0.0, reqs=0, queue=0):
    return {"worker_id": wid, "component": comp, "node": node, "gpu_type": gpu, "gpus": gpus, "kv_used_tokens": used,
            "kv_capacity_tokens": cap, "tokens_per_s": tps, "requests_in_flight": reqs, "queue_depth": queue}


def rollout_snapshot(t: float, utils: list[float], *, iteration: int = 0, job: str = "j", extra_workers=None,
                     components=None, nodes=None) -> TelemetrySnapshot:
    """A rollout component whose engine i has KV utilisation utils[i]."""
    workers = [worker(f"r{i}", "rollout", f"n{i // 8}", used=u * 1000.0, reqs=1 if u > 0 else 0, tps=50.0 if u > 0 else 0.0)
               for i, u in enumerate(utils)]
    workers += extra_workers or []
    comps = components or [{"name": "rollout", "kind": "rollout", "progress": 0.5}]
    data = {"job": job, "time_s": t, "iteration": iteration, "components": comps, "workers": workers}
    if nodes is not None:
        data["nodes"] = nodes
    return TelemetrySnapshot.model_validate(data)


def three_stage_snapshot(t: float = 10.0, util: float = 0.05, interruptible_trainer: bool = True) -> TelemetrySnapshot:
    """8 rollout engines on n0 (tail), reference (2 x 2 GPUs) and trainer (2 x 2 GPUs) on n1."""
    workers = [worker(f"r{i}", "rollout", "n0", used=util * 1000.0, reqs=1, tps=50.0) for i in range(8)]
    workers += [worker(f"ref{i}", "ref", "n1", gpus=2) for i in range(2)]
    workers += [worker(f"t{i}", "actor", "n1", gpus=2) for i in range(2)]
    return TelemetrySnapshot.model_validate({
        "job": "j", "time_s": t, "components": [
            {"name": "rollout", "kind": "rollout", "progress": 0.9},
            {"name": "ref", "kind": "reference"},
            {"name": "actor", "kind": "trainer", "interruptible": interruptible_trainer}],
        "workers": workers, "nodes": [{"node": "n0", "gpu_type": "H100", "gpus": 8}, {"node": "n1", "gpu_type": "H100", "gpus": 8}]})


def three_stage_context(snap: TelemetrySnapshot, horizon_s: float = 100.0) -> ReallocContext:
    """Hand-made curves: rollout saturates at 620/s; reference 100/s per GPU; trainer 90/s per GPU."""
    return ReallocContext(pools_from_snapshot(snap), {
        "rollout": ComponentContext({"H100": Curve((1, 2, 4, 8), (300, 500, 600, 620))}, 1, weight_bytes=3e9, kv_bytes_per_token=1e5),
        "ref": ComponentContext({"H100": Curve.linear(100)}, 2, weight_bytes=3e9),
        "actor": ComponentContext({"H100": Curve.linear(90)}, 2, weight_bytes=3e9, sharded_state_bytes=36e9)},
        Links({"H100": 450.0}, {"H100": 50.0}, restart_s=20.0, group_rebuild_s=2.0, handoff_s=0.5), horizon_s=horizon_s)
