"""planner whatif end to end: the answer, sweeps (local processes), infeasible forecasts, bad input."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest
import yaml

from planner import plandoc
from tests.conftest import run_cli

TINY = {
    "name": "tiny-forecast",
    "gpu_types": {"H20": {"price_per_gpu_hour": 1.0, "max_nodes": 8}, "H800": {"price_per_gpu_hour": 2.0, "max_nodes": 8},
                  "H100": {"price_per_gpu_hour": 2.5, "max_nodes": 8}},
    "cluster": {"node_groups": [{"name": "h20", "gpu_type": "H20", "count": 0}, {"name": "h800", "gpu_type": "H800", "count": 0},
                                {"name": "h100", "gpu_type": "H100", "count": 0}]},
    "jobs": [
        {"name": "math-7b", "model": "qwen2.5-7b", "slo": {"ratio_to_solo": 1.3},
         "rollout": {"batch_prompts": 64, "group_size": 8, "max_response_tokens": 4096, "gpu_types": ["H20"]},
         "trainer": {"tp": 2, "gpu_types": ["H800", "H100"]}},
        {"name": "code-7b", "model": "qwen2.5-7b", "slo": {"ratio_to_solo": 1.3},
         "rollout": {"batch_prompts": 64, "group_size": 8, "max_response_tokens": 8192, "gpu_types": ["H20"]},
         "trainer": {"tp": 2, "gpu_types": ["H800", "H100"]}},
        {"name": "chat-14b", "model": "qwen2.5-14b", "slo": {"ratio_to_solo": 1.3},
         "rollout": {"batch_prompts": 64, "group_size": 8, "max_response_tokens": 4096, "tp": 2, "gpu_types": ["H20"]},
         "trainer": {"tp": 4, "gpu_types": ["H800", "H100"]}},
    ],
    "solver": {"time_limit_s": 10},
}


def scenario(tmp_path: Path, name: str = "tiny.yaml", **changes) -> Path:
    doc = yaml.safe_load(yaml.safe_dump(TINY))
    for key, value in changes.items():
        if key == "max_nodes":
            for t, n in value.items():
                doc["gpu_types"][t]["max_nodes"] = n
        else:
            doc[key] = value
    p = tmp_path / name
    p.write_text(yaml.safe_dump(doc))
    return p


def test_answer_names_the_fleet_and_writes_a_valid_plan(tmp_path):
    out = tmp_path / "out"
    r = run_cli("whatif", str(scenario(tmp_path)), "--styles", "--out", str(out))
    assert r.returncode == 0, r.stderr
    assert "buy or rent: 2 H20 + 2 H800" in r.stdout
    assert "proven optimal" in r.stdout
    # minimums: each type's count is needed beside the fleet's other nodes, one fewer misses SLOs
    assert "meeting every SLO needs at least 2 H800 node(s); with 1, job" in r.stdout
    assert "solo disaggregated" in r.stdout and "colocated" in r.stdout
    doc = plandoc.read(out / "capacity-plan.yaml", expect_kind="CapacityPlan")
    assert doc.body["cost_per_hour"] == 48
    assert {s["style"] for s in doc.body["styles"]} == {"co-execution", "solo-disaggregated", "colocated"}
    for name in ("answer.md", "fleet.png", "styles.csv"):
        assert (out / name).stat().st_size > 0
    assert "Command: `planner whatif" in (out / "answer.md").read_text()


def test_price_sweep_moves_the_mix_the_way_prices_push_it(tmp_path):
    out = tmp_path / "sweep"
    r = run_cli("whatif", str(scenario(tmp_path)), "--sweep", "price.H800=1.5:3.5:5", "--workers", "2", "--out", str(out))
    assert r.returncode == 0, r.stderr
    rows = list(csv.DictReader(open(out / "sweep.csv")))
    rows.sort(key=lambda row: float(row["price.H800"]))
    assert len(rows) == 5 and all(row["status"] == "optimal" for row in rows)
    h800 = [int(row["nodes_H800"]) for row in rows]
    h100 = [int(row["nodes_H100"]) for row in rows]
    cost = [float(row["cost_per_hour"]) for row in rows]
    # dearer H800 never buys more H800 (exact optima), the mix really moves to H100, costs never fall
    assert all(a >= b for a, b in zip(h800, h800[1:])) and h800[0] > h800[-1]
    assert all(a <= b for a, b in zip(h100, h100[1:])) and h100[-1] > h100[0]
    assert all(a <= b + 1e-9 for a, b in zip(cost, cost[1:]))
    # the cost is the fleet at that point's prices: H20 at 8 $/h a node, H800 at 8 x price, H100 at 20 $/h
    for row in rows:
        p = float(row["price.H800"])
        assert float(row["cost_per_hour"]) == pytest.approx(8 * int(row["nodes_H20"]) + 8 * p * int(row["nodes_H800"]) + 20 * int(row["nodes_H100"]))
    for name in ("sweep.md", "cost.png", "fleet.png", "points/point-000.yaml"):
        assert (out / name).stat().st_size > 0
    assert "Command: `planner whatif" in (out / "sweep.md").read_text()


def test_infeasible_availability_is_explained_with_exit_2(tmp_path):
    out = tmp_path / "never"
    r = run_cli("whatif", str(scenario(tmp_path, max_nodes={"H800": 1, "H100": 0})), "--out", str(out))
    assert r.returncode == 2
    assert "Traceback" not in r.stderr
    assert "gpu_types.H800.max_nodes" in r.stderr
    assert "meeting every SLO needs at least 2 H800 node(s), but at most 1 can be had; with 1, job" in r.stderr
    assert "misses its SLO by" in r.stderr and "Fix: raise gpu_types.H800.max_nodes to at least 2" in r.stderr
    assert not out.exists()


def test_availability_and_budget_both_blocking_name_both(tmp_path):
    """With the availability short and the budget too low for any fleet that meets every SLO, the
    message named only max_nodes: its fix (2 H800) still left no fleet within the 40 $/h budget."""
    r = run_cli("whatif", str(scenario(tmp_path, max_nodes={"H800": 1, "H100": 0}, budget_per_hour=40.0)))
    assert r.returncode == 2 and "Traceback" not in r.stderr
    assert "meeting every SLO needs at least 2 H800 node(s), but at most 1 can be had" in r.stderr
    assert "and the cheapest fleet that does (2 H20 + 2 H800) costs 48.00 $/h, over the budget of 40.00 $/h" in r.stderr
    assert ("Fix: raise gpu_types.H800.max_nodes to at least 2 and budget_per_hour to at least 48.00 "
            "(max_nodes 2 and budget_per_hour 48.00 buy that fleet)") in r.stderr


def test_infeasible_budget_is_explained_with_exit_2(tmp_path):
    r = run_cli("whatif", str(scenario(tmp_path, budget_per_hour=40.0)))
    assert r.returncode == 2 and "Traceback" not in r.stderr
    assert "the cheapest fleet that meets every SLO costs 48.00 $/h, 8.00 $/h over the budget of 40.00 $/h" in r.stderr
    assert "within the budget 2 of 3 jobs fit" in r.stderr


@pytest.mark.parametrize("spec, expect", [
    ("prize.H800=1:2:3", "unknown sweep key 'prize.H800'. Did you mean 'price.H800'? Valid keys: price.H100, price.H20, price.H800, "
                         "max_nodes.H100, max_nodes.H20, max_nodes.H800, budget, slo, jobs, response"),
    ("price.A100=1:2:3", "unknown sweep key 'price.A100'"),
    ("price.H800=1:2", "needs START:STOP:STEPS"),
])
def test_bad_sweep_specs_exit_2_and_write_nothing(tmp_path, spec, expect):
    out = tmp_path / "never"
    r = run_cli("whatif", str(scenario(tmp_path)), "--sweep", spec, "--out", str(out))
    assert r.returncode == 2
    assert expect in r.stderr and "Traceback" not in r.stderr
    assert not out.exists()


def test_an_unreachable_ray_address_fails_fast_with_exit_2(tmp_path):
    import socket

    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    r = run_cli("whatif", str(scenario(tmp_path)), "--sweep", "price.H800=1.5:3.5:2", "--ray-address", f"127.0.0.1:{port}",
                "--out", str(tmp_path / "o"), timeout=60)
    assert r.returncode == 2 and "--ray-address" in r.stderr and "nothing answers" in r.stderr and "Traceback" not in r.stderr, r.stderr
    assert not (tmp_path / "o" / "sweep.csv").exists()


GREEN_FIELD = {  # no type sets max_nodes: every type can be bought without limit, nothing is owned
    "name": "green-field",
    "gpu_types": {"H20": {"price_per_gpu_hour": 1.0}, "H800": {"price_per_gpu_hour": 2.0}},
    "cluster": {"node_groups": [{"name": "h20", "gpu_type": "H20", "count": 0, "gpus_per_node": 8, "host_dram_gb": 1024},
                                {"name": "h800", "gpu_type": "H800", "count": 0, "gpus_per_node": 8, "host_dram_gb": 1024}]},
    "jobs": [{"name": "a", "model": "qwen2.5-7b", "slo": {"ratio_to_solo": 1.0}, "trainer": {"tp": 2},
              "rollout": {"batch_prompts": 64, "group_size": 8, "max_response_tokens": 4096}}],
    "solver": {"time_limit_s": 5},
}


def test_a_green_field_question_with_no_max_nodes_buys_without_limit(tmp_path):
    """docs/capacity.md: a type without max_nodes can be bought without limit. With no type setting
    it (and nothing owned), whatif was refused by the scenario check ("the most of any allowed type
    is 0 ... add nodes to the cluster"); plan and validate still refuse a fleet of zero nodes."""
    p = tmp_path / "green.yaml"
    p.write_text(yaml.safe_dump(GREEN_FIELD))
    out = tmp_path / "out"
    r = run_cli("whatif", str(p), "--no-minimums", "--out", str(out))
    assert r.returncode == 0, r.stderr
    assert "buy or rent: 2 H20 + 1 H800 (32.00 $/h)" in r.stdout and "proven optimal" in r.stdout
    doc = plandoc.read(out / "capacity-plan.yaml", expect_kind="CapacityPlan")
    assert doc.body["cost_per_hour"] == 32 and doc.body["owned_cost_per_hour"] == 0
    # no availability limit to report (the compiled instance holds only fleet_limits' bound, 16 a job)
    assert {f["gpu_type"]: f["limit"] for f in doc.body["fleet"]} == {"H20": None, "H800": None}
    assert "no limit" in r.stdout and "limit 16" not in r.stdout
    for command in ("plan", "validate"):
        r = run_cli(command, str(p))
        assert r.returncode == 2 and "Traceback" not in r.stderr, (command, r.stderr)
        assert "jobs[0].rollout.nodes: needs 1 nodes but the most of any allowed type is 0" in r.stderr
        assert "run planner whatif on this scenario" in r.stderr


OWNED_OVER_BUDGET = {  # 3 owned H20 nodes at 8 $/h each: 24 $/h, over a budget of 10 $/h
    "name": "owned-over-budget", "budget_per_hour": 10.0,
    "gpu_types": {"H20": {"price_per_gpu_hour": 1.0, "max_nodes": 4}, "H800": {"price_per_gpu_hour": 2.0, "max_nodes": 4}},
    "cluster": {"node_groups": [{"name": "h20", "gpu_type": "H20", "count": 3, "gpus_per_node": 8, "host_dram_gb": 1024},
                                {"name": "h800", "gpu_type": "H800", "count": 0, "gpus_per_node": 8, "host_dram_gb": 1024}]},
    "jobs": [], "solver": {"time_limit_s": 5},
}


@pytest.mark.parametrize("jobs", [0, 1])
def test_owned_nodes_alone_over_the_budget_exit_2_with_or_without_jobs(tmp_path, jobs):
    """The budget caps the whole fleet, owned nodes included (docs/capacity.md). With no jobs the
    answer was exit 0, "(proven optimal)", a budget "-14.00 $/h left"; with one job exit 2."""
    doc = dict(OWNED_OVER_BUDGET, jobs=GREEN_FIELD["jobs"][:jobs])
    p = tmp_path / "owned.yaml"
    p.write_text(yaml.safe_dump(doc))
    out = tmp_path / "never"
    for extra in ([], ["--styles"], ["--json"]):
        r = run_cli("whatif", str(p), "--no-minimums", "--out", str(out), *extra)
        assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr
        assert r.stdout == ""
        assert ("budget_per_hour: the owned nodes alone (3 H20) cost 24.00 $/h, 14.00 $/h over the budget of 10.00 $/h"
                in r.stderr), r.stderr
        assert f"raise budget_per_hour to at least {24 if jobs == 0 else 40}.00" in r.stderr
        assert not out.exists()


def test_a_sweep_point_whose_owned_nodes_exceed_the_budget_serves_nothing(tmp_path):
    p = tmp_path / "owned.yaml"
    p.write_text(yaml.safe_dump(OWNED_OVER_BUDGET))
    out = tmp_path / "sweep"
    r = run_cli("whatif", str(p), "--sweep", "budget=10:30:2", "--workers", "1", "--styles", "--out", str(out))
    assert r.returncode == 0, r.stderr
    rows = {(float(row["budget"]), row["style"]): row for row in csv.DictReader(open(out / "sweep.csv"))}
    for style in ("co-execution", "solo-disaggregated", "colocated"):
        over, within = rows[(10.0, style)], rows[(30.0, style)]
        assert over["status"] == "infeasible" and over["cost_per_hour"] == "", over
        assert "the owned nodes alone cost 24.00 $/h, over the budget of 10.00 $/h" in over["note"]
        assert within["status"] == "optimal" and float(within["cost_per_hour"]) == 24.0
    over = plandoc.read(out / "points" / "point-000.yaml", expect_kind="CapacityPlan")  # as any point no fleet serves
    assert over.solver.status == "infeasible" and "the owned nodes alone cost 24.00 $/h" in (over.solver.message or "")


def test_a_jobs_sweep_reports_no_limit_for_types_bought_without_one(tmp_path):
    """A ``jobs`` sweep compiles the types without max_nodes with a bound for the largest mix
    (:func:`planner.whatif.sweep.compile_limits`); the points' plans report no limit for them, and a
    type whose max_nodes is swept reports the point's limit."""
    p = tmp_path / "green.yaml"
    p.write_text(yaml.safe_dump(GREEN_FIELD))
    out = tmp_path / "sweep"
    r = run_cli("whatif", str(p), "--sweep", "jobs=1:2:2", "--workers", "1", "--out", str(out))
    assert r.returncode == 0, r.stderr
    for point in sorted((out / "points").glob("point-*.yaml")):
        doc = plandoc.read(point, expect_kind="CapacityPlan")
        assert doc.body["fleet"] and all(f["limit"] is None for f in doc.body["fleet"]), (point, doc.body["fleet"])
    out2 = tmp_path / "sweep2"
    r = run_cli("whatif", str(p), "--sweep", "max_nodes.H800=2:3:2", "--workers", "1", "--out", str(out2))
    assert r.returncode == 0, r.stderr
    limits = [{f["gpu_type"]: f["limit"] for f in plandoc.read(q, expect_kind="CapacityPlan").body["fleet"]}
              for q in sorted((out2 / "points").glob("point-*.yaml"))]
    assert [x.get("H800") for x in limits] == [2, 3] and all(x.get("H20") is None for x in limits), limits
