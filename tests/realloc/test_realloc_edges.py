"""planner realloc at the edges an outside audit found: a snapshot whose every component has finished, a rollout
whose workers give no curve, a scenario that does not run the snapshot's job, a node fuller than any node, numbers
written as strings, and the options it shares with ``planner simulate``."""

from __future__ import annotations

import json

import pytest

from planner.cli import main as cli_main
from tests.conftest import ROOT


def _worker(wid, comp, gpus=1, tps=100.0, reqs=0, node="n0"):
    return {"worker_id": wid, "component": comp, "node": node, "gpu_type": "H100", "gpus": gpus, "tokens_per_s": tps,
            "requests_in_flight": reqs}


def _snapshot(rollout: dict, trainer: dict, workers: list, job: str = "math-7b", nodes=True) -> dict:
    d = {"version": 1, "job": job, "time_s": 10.0, "iteration": 1,
         "components": [{"name": "rollout", "kind": "rollout", **rollout}, {"name": "actor", "kind": "trainer", **trainer}],
         "workers": workers}
    if nodes:
        d["nodes"] = [{"node": "n0", "gpu_type": "H100", "gpus": 8}]
    return d


def _run(tmp_path, capsys, snap: dict, *args: str) -> tuple[int, str, str]:
    f = tmp_path / "snap.json"
    f.write_text(json.dumps(snap))
    capsys.readouterr()
    rc = cli_main(["realloc", str(f), *args])
    cap = capsys.readouterr()
    return rc, cap.out, cap.err


ALL_DONE = _snapshot({"progress": 1.0}, {"progress": 1.0},
                     [_worker(f"r{i}", "rollout", reqs=1) for i in range(6)] + [_worker("t0", "actor", gpus=2)])


@pytest.mark.parametrize("args", [[], ["--force"], ["--hold-s", "0"],
                                  ["--force", "--scenario", str(ROOT / "scenarios/dynarl/math-7b-128gpu.yaml")]])
def test_every_component_finished_is_nothing_to_reallocate(tmp_path, capsys, args):
    rc, out, err = _run(tmp_path, capsys, ALL_DONE, *args, "--json")
    assert rc == 0, err
    body = json.loads(out)["body"]
    assert not body["committed"] and body["reason"].startswith("nothing to reallocate: every component has finished")
    assert body["allocation"] == [] and body["steps"] == []
    assert not any(st["pipeline"] for st in body["stages"])
    assert [len(st["candidates"]) for st in body["stages"]] == [1, 1]
    rc, out, err = _run(tmp_path, capsys, ALL_DONE, *args)
    assert rc == 0, err
    assert "NOT COMMITTED: nothing to reallocate: every component has finished" in " ".join(out.split())
    assert "internal error" not in err + out and "Traceback" not in err + out


def test_a_finished_rollout_without_a_curve_holds_its_gpus(tmp_path, capsys):
    """A rollout done (no work left, nothing in flight) gives no step model; it is not in the bottleneck, so it
    needs none: every component finished here."""
    snap = _snapshot({"progress": 1.0, "remaining_tokens": 0}, {"progress": 0.4, "remaining_tokens": 0},
                     [_worker("r0", "rollout"), _worker("t0", "actor")], job="j", nodes=False)
    rc, out, err = _run(tmp_path, capsys, snap, "--json")
    assert rc == 0, err
    assert json.loads(out)["body"]["reason"].startswith("nothing to reallocate")


def test_no_curve_message_says_what_the_workers_reported(tmp_path, capsys):
    snap = _snapshot({"progress": 0.5}, {"progress": 0.4, "remaining_tokens": 1000},
                     [_worker("r0", "rollout", tps=0.0, reqs=3), _worker("r1", "rollout", tps=50.0, reqs=0),
                      _worker("t0", "actor")], job="j", nodes=False)
    rc, out, err = _run(tmp_path, capsys, snap)
    assert rc == 2 and out == ""
    assert ("no worker reports both tokens_per_s > 0 and requests_in_flight > 0 (its workers report tokens_per_s 0 to 50 "
            "and requests_in_flight 0 to 3)") in err, err
    assert "Fix:" in err and "Traceback" not in err


def test_decide_on_a_finished_snapshot_keeps_everything():
    """The in-process call (the daemon's and the simulator's) says the same, with a valid ReallocPlan body."""
    from formulation.realloc.decide import FINISHED_REASON, ReallocOptions, decide
    from formulation.realloc.plan import ReallocPlan
    from formulation.realloc.telemetry import TelemetrySnapshot
    from planner.instances.realloc import build_context

    snap = TelemetrySnapshot.model_validate(ALL_DONE)
    dec = decide(snap, build_context(snap), ReallocOptions(require_donor=False))
    assert not dec.committed and dec.reason == FINISHED_REASON and dec.changed() == []
    assert dec.instance is not None and dec.instance.finished
    ReallocPlan.model_validate(dec.body())
