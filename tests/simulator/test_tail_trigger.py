"""The completion decision's donor signal reads the tail, not the age of the sequences: it never fires in the opening
seconds of any shipped DynaRL or agentic set-up, and it fires once most engines have emptied.

The default run checks the multi-turn set-up (requests in a tool call leave engines empty while the rollout is young);
``RL_PLANNER_SLOW=1`` checks every shipped set-up (about a minute: each scenario's set-up is estimated first)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from formulation.realloc.telemetry import TelemetrySnapshot
from planner.instances.completion import TailDetector
from simulator.job import JobSim
from simulator.policies import Policy

ROOT = Path(__file__).resolve().parents[2]
SHIPPED = sorted(str(p.relative_to(ROOT / "scenarios")) for p in (ROOT / "scenarios" / "dynarl").glob("math-*.yaml")) + [
    "agentic-7b.yaml", "agentic-7b-long.yaml", "agentic-7b-kv.yaml"]
OPENING_S = 12.0
ALL = os.environ.get("RL_PLANNER_SLOW") == "1"


class _Stop(Exception):
    pass


class Probe:
    """Feeds every snapshot to the detector; stops the run after the opening seconds."""

    def __init__(self) -> None:
        self.detector = TailDetector(theta=0.5, u_low=0.2, hold_s=4.0)
        self.fired: list = []

    def __call__(self, snap, ctx):
        if ctx.at_boundary:
            return None
        if snap.time_s > OPENING_S:
            raise _Stop
        if self.detector.observe(snap):
            self.fired.append(snap.time_s)
        return None


@pytest.mark.parametrize("scenario", [pytest.param(s, marks=pytest.mark.skipif(not ALL and s != "agentic-7b.yaml",
                                                                               reason="set RL_PLANNER_SLOW=1")) for s in SHIPPED])
def test_no_trigger_in_a_young_rollout(scenario):
    from planner.sim.repro_jobs import _job_setup

    _, setup = _job_setup(scenario)
    probe = Probe()
    with pytest.raises(_Stop):
        JobSim(setup, Policy("dynamic", decision=probe), seed=0, iterations=1).run()
    assert probe.fired == [], f"{scenario}: the tail trigger fired at {probe.fired[:3]} s of a young rollout"


def _snap(t, loads):
    return TelemetrySnapshot.model_validate({
        "job": "j", "time_s": t, "iteration": 0,
        "components": [{"name": "rollout", "kind": "rollout", "progress": 0.6}],
        "workers": [{"worker_id": f"e{i}", "component": "rollout", "node": "n0", "gpu_type": "H100", "gpus": 1,
                     "kv_used_tokens": 1000.0, "kv_capacity_tokens": 100000.0, "requests_in_flight": n, "queue_depth": 0}
                    for i, n in enumerate(loads)]})


def test_fires_once_most_engines_emptied_for_the_window():
    d = TailDetector(theta=0.5, u_low=0.2, hold_s=4.0)
    assert not d.observe(_snap(0.0, [100, 100, 100, 100]))
    assert not d.observe(_snap(10.0, [10, 5, 100, 100]))  # half low: not more than theta
    assert not d.observe(_snap(11.0, [10, 5, 3, 100]))  # 3 of 4 low, not yet for 4 s
    assert not d.observe(_snap(13.0, [10, 5, 3, 100]))
    assert d.observe(_snap(15.0, [9, 5, 3, 100]))
    assert not d.observe(_snap(16.0, [90, 80, 70, 100]))  # refilled: the clock resets
