"""Every plan the planner makes can be laid out by ``planner apply``: the placement model offers a job
only training pool sizes its trainer replicas, critic and reference engine fit.

Found running the daemon on Ray (2026-12-07): a job with ``trainer.tp`` 8 and ``rollout.tp`` 8 was
placed on one 8-GPU training node; its reference engine then had no GPUs left (beside the trainer's
one replica, nor in its one-engine rollout node), so each apply of the plan was refused and the job
waited, re-admitted into the same plan, until it was cancelled."""

from __future__ import annotations

import pytest

from planner.apply.placement import from_placement
from planner.instances.placement import compile_scenario
from planner.schema.scenario import Scenario


def _scenario(rtp: int, ttp: int, algo: str = "grpo", h800: int = 2, **trainer) -> Scenario:
    return Scenario.model_validate({
        "name": "layout-fits",
        "gpu_types": {"H20": {"price_per_gpu_hour": 1.0}, "H800": {"price_per_gpu_hour": 2.0}},
        "cluster": {"node_groups": [
            {"name": "h20", "gpu_type": "H20", "count": 2, "gpus_per_node": 8, "host_dram_gb": 2048},
            {"name": "h800", "gpu_type": "H800", "count": h800, "gpus_per_node": 8, "host_dram_gb": 2048}]},
        "jobs": [{"name": "big", "model": "qwen2.5-1.5b", "algorithm": algo,
                  "rollout": {"batch_prompts": 32, "group_size": 4, "max_response_tokens": 2048, "tp": rtp,
                              "gpu_types": ["H20"]},
                  "trainer": {"tp": ttp, "gpu_types": ["H800"], **trainer}}]})


def _solve(sc: Scenario):
    from formulation.placement.solve import SolveOptions, solve

    return solve(compile_scenario(sc), SolveOptions(time_limit_s=10, mip_gap=0.0), "auto")


@pytest.mark.parametrize("rtp, ttp, algo, train_nodes", [
    (8, 8, "grpo", 2),   # one tp-8 replica per node and one engine per rollout node: the reference needs a 2nd node
    (8, 4, "ppo", 2),    # trainer + critic take both tp-4 replicas of a node; the tp-8 reference needs a 2nd node
    (4, 4, "ppo", 1),    # the same with a tp-4 rollout: the reference takes one of its node's two engine slots
    (1, 1, "grpo", 1),   # the default job: the reference takes one GPU beside seven ranks
])
def test_the_plan_gives_the_job_the_training_nodes_its_components_need(rtp, ttp, algo, train_nodes):
    sc = _scenario(rtp, ttp, algo)
    res = _solve(sc)
    assert not res.plan.unplaced, res.plan.unplaced
    (g,) = res.plan.groups
    assert len(g.train_pool.nodes) == train_nodes  # the cheapest pools its components fit
    target = from_placement(res.plan.model_dump(), sc)  # raised (no room for the reference) before the fix
    used: dict[str, int] = {}
    for c in target.components:
        if c.reserves:
            continue
        for node, k in c.placement.items():
            used[node] = used.get(node, 0) + k * c.gpus_per_worker
    assert used and all(v <= 8 for v in used.values()), used
    trainer = next(c for c in target.components if c.name == "big/trainer")
    assert trainer.layout.dp >= 1


def test_a_fleet_one_training_node_short_is_refused_as_a_shortage_naming_the_job(cli, tmp_path):
    import yaml

    sc = _scenario(8, 8, h800=1)
    path = tmp_path / "one-h800.yaml"
    path.write_text(yaml.safe_dump(sc.model_dump(mode="json", exclude_none=True)))
    r = cli("plan", str(path), "--out", str(tmp_path / "plan.yaml"))
    assert r.returncode == 2, r.stdout + r.stderr
    out = r.stdout + r.stderr
    assert "job big" in out and "capacity" in out and "short by 1 node(s) of H800" in out, out
    assert "Traceback" not in out and not (tmp_path / "plan.yaml").exists()


def test_a_fixed_data_parallelism_that_leaves_no_room_is_named_as_such():
    """``trainer.dp`` fixes the training nodes: where the replicas and the reference do not fit them, the
    job is unplaceable and the reason names what to change (was: placed, and every apply refused)."""
    from formulation.placement.evaluate import Index
    from formulation.placement.explain import explain

    inst = compile_scenario(_scenario(8, 8, nodes=1, dp=1))
    assert not inst.jobs[0].train_s
    why = explain(Index(inst), 0)
    assert why.reason == "no-pool" and "reference" in why.message and "trainer.nodes" in why.fix
