"""Telemetry snapshots: valid ones load, bad ones are refused with the reason."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from formulation.realloc.telemetry import TelemetrySnapshot


def _snap(**over):
    data = {
        "job": "j",
        "time_s": 10.0,
        "components": [{"name": "rollout", "kind": "rollout", "progress": 0.5}, {"name": "actor", "kind": "trainer"}],
        "workers": [
            {"worker_id": "r0", "component": "rollout", "node": "n0", "gpu_type": "H100", "kv_used_tokens": 10, "kv_capacity_tokens": 100},
            {"worker_id": "t0", "component": "actor", "node": "n1", "gpu_type": "H100", "gpus": 8},
        ],
    }
    data.update(over)
    return data


def test_valid_snapshot():
    s = TelemetrySnapshot.model_validate(_snap())
    assert s.workers_of("rollout")[0].kv_utilization == pytest.approx(0.1)


@pytest.mark.parametrize("mutate,text", [
    (lambda d: d["workers"][0].update(component="rolout"), "unknown component 'rolout'. Did you mean 'rollout'"),
    (lambda d: d["workers"][0].update(kv_used_tokens=200), "utilisation must lie in [0, 1]"),
    (lambda d: d["components"][0].update(progress=1.5), "less than or equal to 1"),
    (lambda d: d["components"][1].update(kind="learner"), "trainer"),
    (lambda d: d.update(workers=[d["workers"][0]]), "without workers: actor"),
    (lambda d: d["workers"].append(dict(d["workers"][0])), "duplicate worker ids: r0"),
])
def test_bad_snapshots(mutate, text):
    d = _snap()
    mutate(d)
    with pytest.raises(ValidationError) as err:
        TelemetrySnapshot.model_validate(d)
    assert text in str(err.value)


def test_declared_nodes_make_free_gpus_visible_and_are_checked():
    from formulation.realloc.context import pools_from_snapshot

    d = _snap(nodes=[{"node": "n0", "gpu_type": "H100", "gpus": 8}, {"node": "n1", "gpu_type": "H100", "gpus": 8}])
    s = TelemetrySnapshot.model_validate(d)
    assert [(p.name, p.gpus) for p in pools_from_snapshot(s)] == [("n0", 8), ("n1", 8)]
    # without nodes: capacity is what the workers hold, or the per-type node size when known
    s2 = TelemetrySnapshot.model_validate(_snap())
    assert [(p.name, p.gpus) for p in pools_from_snapshot(s2)] == [("n0", 1), ("n1", 8)]
    assert [(p.name, p.gpus) for p in pools_from_snapshot(s2, {"H100": 8})] == [("n0", 8), ("n1", 8)]
    for nodes, text in [
        ([{"node": "n0", "gpu_type": "H100", "gpus": 8}], "which nodes does not declare"),
        ([{"node": "n0", "gpu_type": "H20", "gpus": 8}, {"node": "n1", "gpu_type": "H100", "gpus": 8}], "declares as H20"),
        ([{"node": "n0", "gpu_type": "H100", "gpus": 8}, {"node": "n1", "gpu_type": "H100", "gpus": 4}], "more GPUs than the node has"),
    ]:
        with pytest.raises(ValidationError, match=text):
            TelemetrySnapshot.model_validate(_snap(nodes=nodes))


def test_remaining_tokens_must_be_non_negative():
    d = _snap()
    d["components"][0]["remaining_tokens"] = -1
    with pytest.raises(ValidationError, match="greater than or equal to 0"):
        TelemetrySnapshot.model_validate(d)
