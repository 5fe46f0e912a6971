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
