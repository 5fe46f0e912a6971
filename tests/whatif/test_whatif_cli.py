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
