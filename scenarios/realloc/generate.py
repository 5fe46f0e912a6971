"""Write the example telemetry streams in this folder (deterministic; re-run to regenerate).

* ``tail-h100-16node.json``: the DynaRL 7B math job (``scenarios/dynarl/math-7b-128gpu.yaml``) on
  16 H100 nodes late in rollout: 88 rollout engines (11 nodes), log-prob inference on one node,
  the trainer (TP 2) on four (the math reward is rule-based, on CPUs). The tail has thinned: most
  engines hold one or two requests and little KV cache, while the trainer has its whole batch
  ahead. Four snapshots 2 s apart: a donor after T = 5 s; the planner moves rollout GPUs to the
  trainer.
* ``hetero-h20-h100.json`` (with ``hetero.yaml``): rollout on H20 nodes, trainer and log-prob
  inference on H100 nodes, one H20 node free, the rollout tail thinning and its last requests near
  their end (with requests a third of the way into their response the rollout itself would bound
  the iteration: its longest request cannot go faster on more engines). The trainer may use
  H100 only: the planner relocates log-prob inference onto H20 (freed by the rollout) so that the
  trainer grows onto the H100s it leaves.

    python scenarios/realloc/generate.py
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent


def _rollout_workers(rng, nodes, gpu_type, kv_cap, tail: bool, per_node=8, context=(5000, 8000)):
    out = []
    for n in nodes:
        for g in range(per_node):
            reqs = int(rng.integers(0, 3)) if tail else int(rng.integers(40, 80))
            used = reqs * float(rng.uniform(*context))
            tps = reqs / (0.011 + 0.0004 * reqs) if reqs else 0.0
            out.append({"worker_id": f"rollout-{n}-{g}", "component": "rollout", "node": n, "gpu_type": gpu_type, "gpus": 1,
                        "kv_used_tokens": round(min(used, kv_cap), 1), "kv_capacity_tokens": kv_cap, "queue_depth": 0,
                        "tokens_per_s": round(tps, 1), "requests_in_flight": reqs})
    return out


def _static_workers(name, nodes, gpu_type, gpus, per_node, tokens_per_gpu):
    return [{"worker_id": f"{name}-{n}-{i}", "component": name, "node": n, "gpu_type": gpu_type, "gpus": gpus,
             "tokens_per_s": tokens_per_gpu * gpus} for n in nodes for i in range(per_node)]


def tail_h100():
    rng = np.random.default_rng(7)
    nodes = [f"h100-{i}" for i in range(16)]
    snaps = []
    for k, t in enumerate([700.0, 702.0, 704.0, 706.0]):
        workers = _rollout_workers(rng, nodes[:11], "H100", 450_000.0, tail=True)
        workers += _static_workers("ref", [nodes[11]], "H100", 1, 8, 0.0)
        workers += _static_workers("actor", nodes[12:], "H100", 2, 4, 0.0)
        snaps.append({"version": 1, "job": "math-7b", "time_s": t, "iteration": 3, "components": [
            {"name": "rollout", "kind": "rollout", "progress": 0.86 + 0.002 * k, "interruptible": True},
            {"name": "ref", "kind": "reference", "progress": 0.8, "interruptible": True},
            {"name": "actor", "kind": "trainer", "progress": 0.05, "interruptible": True}],
            "workers": workers, "nodes": [{"node": n, "gpu_type": "H100", "gpus": 8} for n in nodes]})
    return {"snapshots": snaps}


def hetero():
    rng = np.random.default_rng(11)
    h20 = [f"h20-{i}" for i in range(4)]
    h100 = [f"h100-{i}" for i in range(2)]
    snaps = []
    for _k, t in enumerate([300.0, 303.0, 306.0]):
        # late in the tail: the requests still running are near their end (contexts of 13-16K tokens
        # against 1K of prompt and at most 16K of response), so the trainer, with its whole batch
        # ahead, is the bottleneck
        workers = _rollout_workers(rng, h20[:3], "H20", 600_000.0, tail=True, context=(13000, 16000))
        workers += _static_workers("ref", [h100[0]], "H100", 2, 2, 0.0)
        workers += _static_workers("actor", h100, "H100", 2, 2, 0.0)
        snaps.append({"version": 1, "job": "agent-h20", "time_s": t, "iteration": 1, "components": [
            # 24-30 of 2,048 requests left; log-prob inference keeps pace with the rollout (a few
            # dozen of the longest samples behind it), the trainer has its whole batch ahead
            {"name": "rollout", "kind": "rollout", "progress": 0.985, "interruptible": True},
            {"name": "ref", "kind": "reference", "progress": 0.97, "interruptible": True},
            {"name": "actor", "kind": "trainer", "progress": 0.0, "interruptible": True}],
            "workers": workers,
            "nodes": [{"node": n, "gpu_type": "H20", "gpus": 8} for n in h20] + [{"node": n, "gpu_type": "H100", "gpus": 8} for n in h100]})
    return {"snapshots": snaps}


def main() -> None:
    for name, data in (("tail-h100-16node.json", tail_h100()), ("hetero-h20-h100.json", hetero())):
        (HERE / name).write_text(json.dumps(data, indent=1) + "\n")
        print("wrote", HERE / name)


if __name__ == "__main__":
    main()
