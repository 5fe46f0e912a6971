"""The daemon's completion placement moves nothing while a component it must move is not at an interruptible point
(an outside audit: with the trainer migrating, a 16+8+40 target drained the rollout from 32 to 16 GPUs for the
trainer that could not grow, and the committed plan left 16 of the 64 GPUs owned by no component)."""

from __future__ import annotations

import pytest

from formulation.realloc.telemetry import TelemetrySnapshot
from planner.daemon.adapters.completion import plan_body
from planner.schema import load_scenario
from tests.conftest import ROOT

SCENARIO = ROOT / "scenarios" / "dynarl" / "math-7b-64gpu.yaml"  # 8 nodes of 8 H100, trainer TP 2


def _snapshot(interruptible: dict) -> TelemetrySnapshot:
    workers = []

    def add(wid, comp, node, gpus, reqs=0):
        workers.append({"worker_id": wid, "component": comp, "node": node, "gpu_type": "H100", "gpus": gpus,
                        "kv_used_tokens": 100.0, "kv_capacity_tokens": 4e5, "tokens_per_s": 50.0 if reqs else 0.0,
                        "requests_in_flight": reqs, "queue_depth": 0})

    for k in range(4):
        for j in range(8):
            add(f"r{k}{j}", "rollout", f"h100-{k}", 1, reqs=int(j == 0))
    for j in range(8):
        add(f"f{j}", "ref", "h100-4", 1)
    for k in range(5, 8):
        for j in range(4):
            add(f"t{k}{j}", "actor", f"h100-{k}", 2)
    kinds = {"rollout": "rollout", "ref": "reference", "actor": "trainer"}
    return TelemetrySnapshot.model_validate({
        "version": 1, "job": "math-7b", "time_s": 300.0, "iteration": 1, "workers": workers,
        "nodes": [{"node": f"h100-{k}", "gpu_type": "H100", "gpus": 8} for k in range(8)],
        "components": [{"name": n, "kind": k, "progress": 0.5, "interruptible": interruptible.get(n, True)}
                       for n, k in kinds.items()]})


def _owned(body: dict) -> dict:
    return {st["name"]: sum(next(c for c in st["candidates"] if c["chosen"])["gpus"].values()) for st in body["stages"]}


TARGET = {"rollout": 16, "reference": 8, "trainer": 40}


def test_every_component_interruptible_places_the_target_with_every_gpu_owned():
    body, placed, how = plan_body(_snapshot({}), load_scenario(SCENARIO), TARGET, reason="test")
    assert body is not None and body["committed"] and placed == TARGET, how
    assert sum(_owned(body).values()) == 64


@pytest.mark.parametrize("stuck", ["actor", "rollout"])
def test_a_component_to_move_that_is_not_interruptible_holds_the_whole_move(stuck):
    body, placed, how = plan_body(_snapshot({stuck: False}), load_scenario(SCENARIO), TARGET, reason="test")
    assert body is None, f"committed with {_owned(body)} GPUs owned"
    assert placed == {"rollout": 32, "reference": 8, "trainer": 24}
    assert f"{stuck} is not at an interruptible point" in how and "waits" in how


def test_a_component_that_keeps_its_gpus_may_be_busy():
    body, placed, how = plan_body(_snapshot({"ref": False}), load_scenario(SCENARIO), TARGET, reason="test")
    assert body is not None and placed == TARGET and sum(_owned(body).values()) == 64, how
