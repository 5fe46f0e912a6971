"""With a scenario, an engine or a trainer replica is a whole unit inside one node (docs/realloc.md, Candidates): a
snapshot whose rollout or trainer holds part of a unit on a node contradicts the scenario and is refused, naming the
worker (an outside audit: a TP-8 trainer reported as 4 + 4 GPUs on two nodes was planned on in 4-GPU units, and
`planner realloc --force` committed a 12-GPU trainer, one and a half replicas)."""

from __future__ import annotations

import json

import pytest

from planner.cli import main as cli_main
from tests.conftest import ROOT

SCENARIO = ROOT / "scenarios" / "dynarl" / "math-32b-64gpu.yaml"  # rollout TP 4, trainer TP 8 x PP 1


def _snapshot(actor: list, rollout_gpus: int = 4, ref: list = (("h100-2", 4),), per_node: int = 0) -> dict:
    workers = []

    def add(wid, comp, node, gpus, reqs=0, used=0.0):
        workers.append({"worker_id": wid, "component": comp, "node": node, "gpu_type": "H100", "gpus": gpus,
                        "kv_used_tokens": used, "kv_capacity_tokens": 4e5, "tokens_per_s": 50.0 if reqs else 0.0,
                        "requests_in_flight": reqs, "queue_depth": 0})

    for k in range(2):
        for j in range(per_node or 8 // rollout_gpus):
            add(f"rollout-{k}-{j}", "rollout", f"h100-{k}", rollout_gpus, reqs=1, used=1000.0)
    for j, (node, g) in enumerate(ref):
        add(f"ref-{j}", "ref", node, g)
    for j, (node, g) in enumerate(actor):
        add(f"actor-{j}", "actor", node, g)
    return {"version": 1, "job": "math-32b", "time_s": 300.0, "iteration": 1, "workers": workers,
            "nodes": [{"node": f"h100-{k}", "gpu_type": "H100", "gpus": 8} for k in range(4)],
            "components": [{"name": "rollout", "kind": "rollout", "progress": 0.95},
                           {"name": "ref", "kind": "reference", "progress": 0.5},
                           {"name": "actor", "kind": "trainer", "progress": 0.1}]}


def _run(tmp_path, capsys, snap: dict, *extra) -> tuple[int, str, str]:
    f = tmp_path / "snap.json"
    f.write_text(json.dumps(snap))
    capsys.readouterr()
    rc = cli_main(["realloc", str(f), "--scenario", str(SCENARIO), "--force", "--json", *extra])
    cap = capsys.readouterr()
    return rc, cap.out, cap.err


def test_a_trainer_replica_split_over_two_nodes_is_refused_naming_the_worker(tmp_path, capsys):
    out = tmp_path / "plan.json"
    rc, _, err = _run(tmp_path, capsys, _snapshot([("h100-2", 4), ("h100-3", 4)]), "--out", str(out))
    assert rc == 2 and "Traceback" not in err
    assert "workers[5] (actor-0)" in err and "4 GPU(s) on node h100-2" in err and "TP x PP = 8 GPUs" in err, err
    assert "Fix:" in err and not out.exists()


def test_a_rollout_holding_part_of_an_engine_on_a_node_is_refused(tmp_path, capsys):
    rc, _, err = _run(tmp_path, capsys, _snapshot([("h100-3", 8)], rollout_gpus=2, per_node=3))  # 6 GPUs a node, TP 4
    assert rc == 2 and "workers[0] (rollout-0-0)" in err and "rollout TP = 4 GPUs" in err, err


@pytest.mark.parametrize("ref", [(("h100-2", 3),), (("h100-2", 1), ("h100-2", 2))])
def test_whole_units_with_log_prob_inference_on_any_count_still_plan(tmp_path, capsys, ref):
    """Log-prob inference runs on what fragmentation leaves (the simulator and the daemon give it any count); a unit
    may be reported by several workers (a trainer's ranks, one GPU each)."""
    rc, out, err = _run(tmp_path, capsys, _snapshot([("h100-3", 1)] * 8, ref=ref))
    assert rc == 0, err
    body = json.loads(out)["body"]
    assert {st["name"]: st["unit_gpus"] for st in body["stages"]}["actor"] == 8
