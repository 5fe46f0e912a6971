"""From the planners' plan bodies (ReallocPlan, PlacementPlan) to executor targets and steps.

The bodies below follow the models in formulation/realloc/plan.py and
formulation/placement/plan.py (issues 4 and 3) field for field."""

from __future__ import annotations

import pytest

from executor.adapters.plans import from_placement, from_realloc
from executor.backends.base import observe
from executor.backends.sim import SimBackend
from executor.controller import Executor
from executor.diff import diff
from executor.journal import Journal
from executor.state import Node
from executor.target import ExecutorTarget, to_state
from planner.errors import UserError
from tests.conftest import SCENARIOS

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


def _w(i, node, gpus=1, new=False):
    return {"worker_id": f"w{i}", "node": node, "gpu_type": "H100", "gpus": gpus, "new": new}


def _realloc(committed=True):
    alloc = [
        {"component": "rollout", "kind": "rollout", "migration_kind": "workload",
         "from_workers": [_w(i, "h100-0") for i in range(6)], "to_workers": [_w(i, "h100-0") for i in range(2)],
         "predicted_throughput_before": 1.0, "predicted_throughput_after": 1.0},
        {"component": "actor", "kind": "trainer", "migration_kind": "p2p",
         "from_workers": [_w(9, "h100-1", 2)], "to_workers": [_w(9, "h100-1", 2), _w(10, "h100-0", 2, True)],
         "predicted_throughput_before": 1.0, "predicted_throughput_after": 1.8}]
    return {"job": "math", "time_s": 800.0, "iteration": 3, "backend": "highs", "margin": 0.05, "horizon_s": 60.0,
            "donors": [], "stages": [], "current_throughput": 1.0, "predicted_throughput": 1.8, "objective": 1.7,
            "improvement": 1.7, "committed": committed, "reason": "better by 70%", "allocation": alloc, "steps": []}



def _placement_body() -> dict:
    """A PlacementPlan body of two members sharing one H20 and one H800 node."""
    pool = lambda t, nodes: {"gpu_type": t, "nodes": nodes, "size": len(nodes), "gpus_per_node": 8, "gpus": 8 * len(nodes)}
    member = lambda j, r, t: {"job": j, "rollout_nodes": r, "train_nodes": t, "rollout_s": 1, "train_s": 1, "sync_s": 0.1,
                              "cycle_time_s": 3, "slo_s": 5, "slack_s": 2}
    return {"instance": "tiny", "cost_per_hour": 1.0, "nodes_used": {}, "gpus_used": {},
            "groups": [{"id": "g0", "rollout_pool": pool("H20", ["h20-0"]), "train_pool": pool("H800", ["h800-0"]),
                        "order": ["small-a", "small-b"], "members": [member("small-a", ["h20-0"], ["h800-0"]),
                                                                     member("small-b", ["h20-0"], ["h800-0"])],
                        "cycle_time_s": 3, "critical": [], "rollout_busy": 0.5, "train_busy": 0.5, "cost_per_hour": 1.0}]}


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
    assert observe(b).components["math/actor"].placement_counts() == {"h100-0": 2, "h100-1": 2}


def test_uncommitted_or_inconsistent_realloc_plans_are_refused():
    b = _running()
    with pytest.raises(UserError, match="not committed"):
        from_realloc(_realloc(committed=False), observe(b))
    bad = _realloc()
    bad["allocation"][1]["to_workers"] = [_w(9, "h100-1", 3)]
    with pytest.raises(UserError, match="not a multiple of tp\\*pp = 2"):
        from_realloc(bad, observe(b))
    bad = _realloc()
    bad["job"] = "other"
    with pytest.raises(UserError, match="does not run on this cluster"):
        from_realloc(bad, observe(b))


def test_placement_plan_pins_resident_state_and_reserves_pools():
    from planner.schema import load_scenario

    sc = load_scenario(SCENARIOS / "ci" / "tiny-2jobs.yaml")
    body = _placement_body()
    tgt = to_state(from_placement(body, sc, dram={"small-a": (20.0, 60.0), "small-b": (40.0, 120.0)}))
    assert set(tgt.nodes) == {"h20-0", "h20-1", "h800-0", "h800-1"}
    assert tgt.components["g0/rollout-pool"].placement == {"h20-0": 1} and tgt.components["g0/rollout-pool"].gpus_per_worker == 8
    assert tgt.components["small-b/trainer"].dram_gb_per_worker == 120.0
    obs = observe(SimBackend([Node(n.name, n.gpu_type, n.gpus, n.dram_gb) for n in tgt.nodes.values()]))
    plan = diff(obs, tgt)
    assert {u.kind for u in plan.units} == {"add"} and len(plan.units) == 6
    # over-full DRAM on the pinned node is refused, naming the node
    with pytest.raises(UserError, match="node h800-0"):
        diff(obs, to_state(from_placement(body, sc, dram={"small-a": (20.0, 300.0), "small-b": (40.0, 300.0)})))


def test_apply_reads_each_plan_kind_from_its_document(tmp_path):
    import yaml

    from executor.session import read_target

    b = _running()
    doc = {"kind": "ReallocPlan", "version": 1, "solver": {"backend": "highs", "status": "optimal"}, "body": _realloc()}
    (tmp_path / "r.yaml").write_text(yaml.safe_dump(doc))
    tgt, name, digest = read_target(str(tmp_path / "r.yaml"), lambda: observe(b))
    assert name == "r.yaml" and len(digest) == 16 and tgt.components["math/actor"].layout.dp == 2
    doc["kind"] = "PlacementPlan"
    doc["body"] = _placement_body()
    (tmp_path / "p.yaml").write_text(yaml.safe_dump(doc))
    with pytest.raises(UserError, match="--scenario"):
        read_target(str(tmp_path / "p.yaml"), lambda: observe(b))
    doc["kind"] = "CapacityPlan"
    (tmp_path / "c.yaml").write_text(yaml.safe_dump(doc))
    with pytest.raises(UserError, match="cannot apply a CapacityPlan"):
        read_target(str(tmp_path / "c.yaml"), lambda: observe(b))
