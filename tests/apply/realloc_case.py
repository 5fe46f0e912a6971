"""One reallocation, end to end on any executor backend: a co-execution group on two H100 nodes
running one 7B GRPO job (rollout engines on one node, trainer ranks and the reference engine on
the other), its telemetry written from the executor's state with a thinning rollout tail,
``formulation.realloc.decide`` on it, and the committed plan applied through the executor.

Shared by the sim test (tests/apply) and the Ray test (tests/executor/test_exec_ray.py), whose
local cluster has H100 nodes ``t`` and ``u`` with 4 GPUs each.
"""

from __future__ import annotations

from executor import router
from executor.adapters.plans import from_realloc
from executor.backends.base import observe
from executor.controller import Executor
from executor.diff import diff
from executor.journal import Journal
from executor.target import ExecutorTarget, to_state

JOB, GROUP = "rl", "G"
MODEL = {"hidden": 8, "ffn": 8, "layers": 2, "vocab": 16}
ENGINE = {"max_batch": 8, "cache_blocks": 64, "progress_every": 4, "tokens_per_tick": 1}
PROGRESS = {"rollout": 0.85, "reference": 0.3, "trainer": 0.1}


def placed(nodes: list[dict]) -> ExecutorTarget:
    """The job as placed: the group reserves t and u; 4 engines on t; trainer TP 1 x DP 3 and the
    reference engine on u (what planner.apply.layout builds for such a job)."""
    comps = [{"name": f"{GROUP}/pool-{n}", "role": "service", "gpu_type": "H100", "gpus_per_worker": 4, "placement": {n: 1},
              "reserves": GROUP} for n in ("t", "u")]
    comps += [{"name": f"{JOB}/rollout", "role": "rollout", "gpu_type": "H100", "placement": {"t": 4}, "group": GROUP, "engine": ENGINE},
              {"name": f"{JOB}/trainer", "role": "trainer", "gpu_type": "H100", "layout": {"tp": 1, "dp": 3}, "placement": {"u": 3},
               "group": GROUP, "model": MODEL},
              {"name": f"{JOB}/reference", "role": "rollout", "gpu_type": "H100", "placement": {"u": 1}, "group": GROUP,
               "engine": ENGINE}]
    return ExecutorTarget.model_validate({"nodes": nodes, "components": comps})


def scenario():
    from planner.schema.scenario import Scenario

    return Scenario.model_validate({
        "name": "realloc-case", "gpu_types": {"H100": {"price_per_gpu_hour": 2.0}},
        "cluster": {"node_groups": [{"name": "h100", "gpu_type": "H100", "count": 2, "gpus_per_node": 4}]},
        "jobs": [{"name": JOB, "model": "qwen2.5-7b", "rollout": {"batch_prompts": 256, "group_size": 8, "max_response_tokens": 8192},
                  "trainer": {"tp": 1}}]})


def decide_on(st):
    """The planner's decision on three snapshots of the thinning tail (a donor after 8 s)."""
    from formulation.realloc.decide import ReallocOptions, decide
    from formulation.realloc.donors import DonorDetector
    from formulation.realloc.telemetry import TelemetrySnapshot
    from planner.apply.telemetry import job_snapshot, tail_loads
    from planner.instances.realloc import build_context

    engines = [w.id for w in sorted(st.components[f"{JOB}/rollout"].live_workers(), key=lambda w: w.index)]
    det, sc, d = DonorDetector(), scenario(), None
    for t in (100.0, 103.0, 108.0):
        snap = TelemetrySnapshot.model_validate(job_snapshot(st, JOB, time_s=t, iteration=3, progress=PROGRESS,
                                                             loads=tail_loads(engines, PROGRESS["rollout"], max_batch=8)))
        d = decide(snap, build_context(snap, sc), ReallocOptions(), det)
    return d


def run(b, nodes: list[dict], requests: int = 40) -> dict:
    """Place, load, decide, apply; what the checks need."""
    j = Journal(":memory:")
    res = Executor(b, j).apply(diff(observe(b), to_state(placed(nodes))).steps, "placed")
    assert res.status == "done", res.message
    reqs = router.make_requests(f"{JOB}/rollout", requests, prompts=8, min_len=60, max_len=120, seed=5)
    router.submit(b, f"{JOB}/rollout", reqs)
    assert all(b.train_step(f"{JOB}/trainer", 0))
    before = observe(b)
    digests = {w.id: b.call(w.id, "digest") for w in before.components[f"{JOB}/trainer"].live_workers()}
    d = decide_on(before)
    assert d.committed, d.reason
    body = d.body()
    plan = diff(before, to_state(from_realloc(body, before)), stage=True)
    res = Executor(b, j).apply(plan.steps, "realloc")
    return {"decision": body, "plan": plan, "result": res, "before": before, "after": observe(b), "requests": reqs,
            "digests": digests}


def gpus_by_node(workers) -> dict[str, int]:
    """GPUs per node of workers given as dicts (plan documents, GET /v1/cluster) or as executor Workers."""
    out: dict[str, int] = {}
    for w in workers:
        node, gpus = (w["node"], w["gpus"]) if isinstance(w, dict) else (w.node, w.gpus)
        out[node] = out.get(node, 0) + gpus
    return out
