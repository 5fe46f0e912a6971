"""From a reallocation plan body to executor targets and steps (the placement adapter, which needs
the scenario, is the planner's: tests/apply).

The bodies below follow the model in formulation/realloc/plan.py field for field."""

from __future__ import annotations

import pytest

from executor.adapters.plans import from_realloc
from executor.backends.base import observe
from executor.backends.sim import SimBackend
from executor.controller import Executor
from executor.diff import diff
from executor.journal import Journal
from executor.state import Node
from executor.target import ExecutorTarget, to_state
from estimators.errors import UserError

NODES = [Node("h100-0", "H100", 8, 1024.0), Node("h100-1", "H100", 8, 1024.0)]


def _running():
    b = SimBackend(NODES)
    body = {"nodes": [{"name": n.name, "gpu_type": n.gpu_type, "gpus": n.gpus, "dram_gb": n.dram_gb} for n in NODES],
            "components": [
                {"name": "math/rollout", "role": "rollout", "gpu_type": "H100", "placement": {"h100-0": 6}},
                {"name": "math/actor", "role": "trainer", "gpu_type": "H100", "layout": {"tp": 2}, "placement": {"h100-1": 2},
                 "model": {"hidden": 16, "ffn": 32, "layers": 2, "vocab": 32}}]}
    Executor(b, Journal(":memory:")).apply(diff(observe(b), to_state(ExecutorTarget.model_validate(body))).steps)
    return b


def _w(wid, node, gpus=1, new=False):
    return {"worker_id": wid, "node": node, "gpu_type": "H100", "gpus": gpus, "new": new}


ENGINES = [f"math.rollout.g1.e{i}" for i in range(6)]  # the executor's own worker ids (what its telemetry reports)


def _realloc(committed=True, keep=(4, 5)):
    alloc = [
        {"component": "rollout", "kind": "rollout", "migration_kind": "workload",
         "from_workers": [_w(e, "h100-0") for e in ENGINES], "to_workers": [_w(ENGINES[i], "h100-0") for i in keep],
         "predicted_throughput_before": 1.0, "predicted_throughput_after": 1.0},
        {"component": "actor", "kind": "trainer", "migration_kind": "p2p",
         "from_workers": [_w("math.actor.g1.r0", "h100-1", 2)],
         "to_workers": [_w("math.actor.g1.r0", "h100-1", 2), _w("actor@h100-0#0", "h100-0", 2, True)],
         "predicted_throughput_before": 1.0, "predicted_throughput_after": 1.8}]
    return {"job": "math", "time_s": 800.0, "iteration": 3, "backend": "highs", "margin": 0.05, "horizon_s": 60.0,
            "donors": [], "stages": [], "current_throughput": 1.0, "predicted_throughput": 1.8, "objective": 1.7,
            "improvement": 1.7, "committed": committed, "reason": "better by 70%", "allocation": alloc, "steps": []}



def test_realloc_plan_becomes_workload_and_p2p_migrations():
    b = _running()
    tgt = to_state(from_realloc(_realloc(), observe(b)))
    assert tgt.components["math/rollout"].placement == {"h100-0": 2}
    lay = tgt.components["math/actor"].layout
    assert (lay.tp, lay.pp, lay.dp) == (2, 1, 2)  # 4 GPUs, TP kept: DP 2
    plan = diff(observe(b), tgt)
    assert [u.kind for u in plan.units] == ["workload", "p2p"]  # the rollout frees GPUs first
    res = Executor(b, Journal(":memory:")).apply(plan.steps)
    assert res.status == "done"
    after = observe(b)
    assert after.components["math/actor"].placement_counts() == {"h100-0": 2, "h100-1": 2}
    # the engines the plan kept are the ones that stay (not the executor's own choice)
    assert sorted(w.id for w in after.components["math/rollout"].live_workers()) == ENGINES[4:]


def test_uncommitted_or_inconsistent_realloc_plans_are_refused():
    b = _running()
    with pytest.raises(UserError, match="not committed"):
        from_realloc(_realloc(committed=False), observe(b))
    bad = _realloc()
    bad["allocation"][1]["to_workers"] = [_w("math.actor.g1.r0", "h100-1", 3)]
    with pytest.raises(UserError, match="not a multiple of tp\\*pp = 2"):
        from_realloc(bad, observe(b))
    bad = _realloc()
    bad["job"] = "other"
    with pytest.raises(UserError, match="does not run on this cluster"):
        from_realloc(bad, observe(b))


def test_realloc_plans_naming_unknown_nodes_or_workers_are_refused_with_the_field_and_the_fix():
    b = _running()
    bad = _realloc()
    bad["allocation"][1]["to_workers"][1]["node"] = "H100"  # a pool named after its GPU type, not a node
    with pytest.raises(UserError) as e:
        from_realloc(bad, observe(b))
    p = e.value.problems[0]
    assert p.where == "body.allocation[1].to_workers[1].node" and "'H100' is not a node of this cluster" in p.message
    assert "declares the cluster's nodes" in p.fix
    bad = _realloc()
    bad["allocation"][0]["to_workers"][0]["worker_id"] = "rollout-7"
    with pytest.raises(UserError) as e:
        from_realloc(bad, observe(b))
    assert e.value.problems[0].where == "body.allocation[0].to_workers[0].worker_id" and "worker ids" in e.value.problems[0].fix


def test_a_realloc_plan_that_puts_a_kept_worker_on_another_node_is_refused():
    """Found driving the daemon on Ray by hand (2026-12-07): telemetry that named the executor's workers but put the
    rollout engines on the trainer's node (and the trainer on the engines') was planned on that view and applied: the
    executor kept the worker ids, moved 6 of 8 trainer ranks across nodes and parked the reference, nothing like the
    decision it carried out. A kept worker (not ``new``) must be on the node the executor runs it on."""
    b = _running()
    bad = _realloc()
    bad["allocation"][0]["to_workers"][1]["node"] = "h100-1"  # ENGINES[5] runs on h100-0
    with pytest.raises(UserError) as e:
        from_realloc(bad, observe(b))
    p = e.value.problems[0]
    assert p.where == "body.allocation[0].to_workers[1].node", p
    assert "'math.rollout.g1.e5' of math/rollout runs on node 'h100-0', not 'h100-1'" in p.message and "GET /v1/cluster" in p.fix
    bad = _realloc()
    bad["allocation"][1]["to_workers"][0]["node"] = "h100-0"  # the kept trainer rank runs on h100-1
    with pytest.raises(UserError, match="'math.actor.g1.r0' of math/actor runs on node 'h100-1', not 'h100-0'"):
        from_realloc(bad, observe(b))
    from_realloc(_realloc(), observe(b))  # (the body as the planner writes it still applies)
