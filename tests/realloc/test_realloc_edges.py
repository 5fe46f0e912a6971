"""planner realloc at the edges an outside audit found: a snapshot whose every component has finished, a rollout
whose workers give no curve, a scenario that does not run the snapshot's job, a node fuller than any node, numbers
written as strings, the options it shares with ``planner simulate``, and snapshot nodes the scenario lacks or
overfills."""

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


ALL_DONE = dict(_snapshot({"progress": 1.0}, {"progress": 1.0}, [_worker(f"r{i}", "rollout", reqs=1, node="h100-0") for i in range(6)]
                          + [_worker("t0", "actor", gpus=2, node="h100-0")], nodes=False),
                nodes=[{"node": "h100-0", "gpu_type": "H100", "gpus": 8}])  # a node of math-7b-128gpu.yaml (passed with --scenario)


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


def test_a_finished_component_is_shown_done_not_never(tmp_path, capsys):
    """Rollout finished, trainer still working (a stream's last snapshot at an iteration's end): the tables said
    the rollout "finishes in never" beside "slowest component finishes in: now 10.0 s"."""
    snap = _snapshot({"progress": 1.0, "remaining_tokens": 0}, {"progress": 0.4, "remaining_tokens": 1000},
                     [_worker(f"r{i}", "rollout", tps=0.0) for i in range(6)] + [_worker("t0", "actor", gpus=2, reqs=1)],
                     job="j")
    for extra in ([], ["--verbose"]):
        rc, out, err = _run(tmp_path, capsys, snap, "--force", *extra)
        assert rc == 0, err
        assert "never" not in out, out
        rows = [line for line in out.splitlines() if "keep" in line]
        assert any("rollout" in r and "done" in r for r in rows) or "rollout (rollout, dynamic, done" in out, out
        assert "slowest component finishes in: now 10.0 s" in " ".join(out.split())


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


TAIL = ROOT / "scenarios" / "realloc" / "tail-h100-16node.json"  # job math-7b


def test_a_one_job_scenario_of_another_job_is_refused(tmp_path, capsys):
    """It planned with math-32b's model and cluster for math-7b's snapshot; a multi-job scenario was refused already."""
    capsys.readouterr()
    rc = cli_main(["realloc", str(TAIL), "--scenario", str(ROOT / "scenarios/dynarl/math-32b-64gpu.yaml"), "--json"])
    cap = capsys.readouterr()
    assert rc == 2 and cap.out == ""
    assert "error: job: the snapshot's job 'math-7b' is not in the scenario (its jobs: math-32b)" in cap.err, cap.err
    assert "Fix:" in cap.err and "Traceback" not in cap.err


def test_a_node_fuller_than_any_node_is_refused_without_a_nodes_list(tmp_path, capsys):
    snap = _snapshot({"progress": 0.5}, {"progress": 0.1},
                     [_worker(f"r{i}", "rollout", reqs=1) for i in range(100)] + [_worker("t0", "actor", node="n1")], nodes=False)
    out = tmp_path / "plan.json"
    rc, stdout, err = _run(tmp_path, capsys, snap, "--force", "--out", str(out))
    assert rc == 2 and stdout == "" and not out.exists()
    assert "more GPUs on one node than any node has (at most 64): n0 (100)" in err, err
    assert "Fix:" in err and "Traceback" not in err
    snap["workers"] = snap["workers"][:64] + snap["workers"][100:]  # 64 on n0: a full node, accepted
    rc, _, err = _run(tmp_path, capsys, snap, "--force", "--json")
    assert rc == 0, err


@pytest.mark.parametrize("field,value,said", [("gpus", "2", "'2' is a string, not a number"),
                                              ("tokens_per_s", "100", "'100' is a string, not a number"),
                                              ("requests_in_flight", True, "true is a boolean, not a number")])
def test_a_number_written_as_a_string_is_refused(tmp_path, capsys, field, value, said):
    snap = _snapshot({"progress": 0.5}, {"progress": 0.1}, [_worker("r0", "rollout", reqs=1), _worker("t0", "actor")])
    snap["workers"][0][field] = value
    rc, out, err = _run(tmp_path, capsys, snap, "--force")
    assert rc == 2 and out == ""
    assert f"workers.0.{field}: {said}" in err and "Fix: write the number itself" in err, err


def test_u_low_is_strictly_below_1_as_simulate_says(tmp_path, capsys):
    snap = _snapshot({"progress": 0.5}, {"progress": 0.1}, [_worker("r0", "rollout", reqs=1), _worker("t0", "actor")])
    for cmd in (["realloc", "SNAP"], ["simulate", str(ROOT / "scenarios/dynarl/math-7b-128gpu.yaml"), "--policy", "dynamic"]):
        f = tmp_path / "snap.json"
        f.write_text(json.dumps(snap))
        capsys.readouterr()
        rc = cli_main([c if c != "SNAP" else str(f) for c in cmd] + ["--u-low", "1.0"])
        err = capsys.readouterr().err
        assert rc == 2 and "--u-low" in err and "Traceback" not in err, (cmd, err)


def _chosen(body: dict) -> dict:
    return {st["name"]: next(c for c in st["candidates"] if c["chosen"]) for st in body["stages"]}


@pytest.mark.parametrize("finished_rollout", [False, True])
def test_freed_gpus_reach_the_bottleneck(tmp_path, capsys, finished_rollout):
    """Two receivers (log-prob inference and the trainer) whose grows all filled the same nodes first could only be
    combined small: 12 of 128 GPUs stayed unowned and the bottleneck trainer got 2 more (slowest 260 s), and with
    the rollout done, 86 stayed unowned (slowest 284 s). Balanced grows share what each shrink frees between them."""
    data = json.loads(TAIL.read_text())
    if finished_rollout:
        for s in data["snapshots"]:
            for c in s["components"]:
                if c["kind"] == "rollout":
                    c["progress"] = 1.0
    f = tmp_path / "tail.json"
    f.write_text(json.dumps(data))
    capsys.readouterr()
    rc = cli_main(["realloc", str(f), "--scenario", str(ROOT / "scenarios/dynarl/math-7b-128gpu.yaml"), "--json"])
    cap = capsys.readouterr()
    assert rc == 0, cap.err
    body = json.loads(cap.out)["body"]
    chosen = _chosen(body)
    assert body["committed"]
    assert sum(sum(c["gpus"].values()) for c in chosen.values()) == 128, "every GPU the rollout frees is owned"
    assert 1.0 / body["predicted_throughput"] < 150.0  # the slowest component's predicted finish (was 260 s / 284 s)
    assert "/balanced@" in chosen["actor"]["name"] and "/balanced@" in chosen["ref"]["name"]
    per_node: dict = {}
    for c in chosen.values():
        for p, g in c["gpus"].items():
            per_node[p] = per_node.get(p, 0) + g
    assert set(per_node.values()) == {8}, "the grows share the freed nodes' GPUs, none twice"


HETERO = ROOT / "scenarios" / "realloc" / "hetero-h20-h100.json"  # on scenarios/realloc/hetero.yaml: h20-0..3 and h100-0..1, 8 GPUs each


def _declared(snap: dict, i: int, **over) -> dict:
    snap["nodes"][i].update(over)
    return snap


def _undeclared(snap: dict, on: str, **over) -> dict:
    del snap["nodes"]
    for w in snap["workers"]:
        if w["node"] == on:
            w.update(over)
    return snap


@pytest.mark.parametrize("mutate,field,said", [
    (lambda s: _declared(s, 0, gpus=64), "nodes[0].gpus", "the snapshot declares 64 GPUs on node 'h20-0'; the scenario 'realloc-hetero' gives it 8"),
    (lambda s: dict(s, nodes=s["nodes"] + [{"node": "ghost-0", "gpu_type": "H20", "gpus": 8}]), "nodes[6].node",
     "node 'ghost-0' is not among the nodes of the scenario 'realloc-hetero' (they are h20-0 .. h20-3, h100-0 .. h100-1)"),
    (lambda s: _undeclared(s, "h100-0", node="h20-3"), "workers[24].gpu_type", "node 'h20-3' has GPU type H100 in the snapshot, H20"),
    (lambda s: _undeclared(s, "h100-1", node="h100-7"), "workers[28].node", "node 'h100-7' is not among the nodes of the scenario"),
    (lambda s: _undeclared(s, "h100-1", gpus=5), "workers[28].gpus", "workers hold 10 GPUs on node 'h100-1'; the scenario 'realloc-hetero' gives it 8"),
], ids=["declared-64-gpus", "declared-unknown-node", "worker-node-of-another-type", "worker-unknown-node", "workers-overfill-a-node"])
def test_a_snapshot_node_the_scenario_lacks_or_overfills_is_refused(tmp_path, capsys, mutate, field, said):
    """With --scenario the snapshot's nodes were trusted over the scenario: 64 GPUs declared on an 8-GPU node, or a
    node the cluster lacks, became pools the planner allocated GPUs on. Now exit 2 naming the snapshot's field."""
    snap = mutate(json.loads(HETERO.read_text())["snapshots"][-1])
    out = tmp_path / "plan.json"
    rc, stdout, err = _run(tmp_path, capsys, snap, "--scenario", str(ROOT / "scenarios" / "realloc" / "hetero.yaml"), "--force",
                           "--out", str(out))
    assert rc == 2 and stdout == "" and not out.exists(), err
    assert f"{field}: {said}" in err, err
    assert "Fix:" in err and "Traceback" not in err


def test_snapshots_on_the_scenarios_nodes_are_planned(tmp_path, capsys):
    snap = json.loads(HETERO.read_text())["snapshots"][-1]
    del snap["nodes"]  # the nodes its workers sit on, each within the scenario's 8 GPUs
    rc, _, err = _run(tmp_path, capsys, snap, "--scenario", str(ROOT / "scenarios" / "realloc" / "hetero.yaml"), "--force", "--json")
    assert rc == 0, err


def _hetero_scenario(tmp_path, *, groups=("h20", "h100"), fabrics=None) -> str:
    """hetero.yaml with its node groups renamed, and in fabrics ``fabrics`` (h20's, h100's) when given."""
    text = (ROOT / "scenarios" / "realloc" / "hetero.yaml").read_text()
    text = text.replace("{name: h20,", f"{{name: {groups[0]},").replace("{name: h100,", f"{{name: {groups[1]},")
    if fabrics is not None:
        text = text.replace("  node_groups:", f"  clusters: [{{name: {fabrics[0]}}}, {{name: {fabrics[1]}, inter_cluster_bw_gb_per_s: 25}}]\n"
                                              "  node_groups:")
        text = text.replace("gpu_type: H20,", f"gpu_type: H20, cluster: {fabrics[0]},")
        text = text.replace("gpu_type: H100,", f"gpu_type: H100, cluster: {fabrics[1]},")
    f = tmp_path / "scenario.yaml"
    f.write_text(text)
    return str(f)


def _renamed_nodes(snap: dict, names: dict) -> dict:
    for n in snap.get("nodes") or []:
        n["node"] = names.get(n["node"], n["node"])
    for w in snap["workers"]:
        w["node"] = names.get(w["node"], w["node"])
    return snap


def test_the_simulators_node_names_are_taken_under_any_group_name(tmp_path, capsys):
    """The simulator names nodes after the GPU type (h20-0, h100-0: hetero-h20-h100.json's); the scenario after the node
    group. Groups named 'east' and 'west' refused every node of the simulator's snapshot; now it is planned as under
    groups named h20 and h100, and so is one named after the groups. One naming per snapshot: a mix is refused."""
    snap = json.loads(HETERO.read_text())["snapshots"][-1]
    rc, want, err = _run(tmp_path, capsys, snap, "--scenario", _hetero_scenario(tmp_path), "--force", "--json")
    assert rc == 0, err
    scen = _hetero_scenario(tmp_path, groups=("east", "west"))
    rc, out, err = _run(tmp_path, capsys, snap, "--scenario", scen, "--force", "--json")
    assert rc == 0, err
    assert json.loads(out)["body"]["allocation"] == json.loads(want)["body"]["allocation"]
    names = {f"h20-{i}": f"east-{i}" for i in range(4)} | {f"h100-{i}": f"west-{i}" for i in range(2)}
    rc, _, err = _run(tmp_path, capsys, _renamed_nodes(json.loads(json.dumps(snap)), names), "--scenario", scen, "--force", "--json")
    assert rc == 0, err
    rc, out, err = _run(tmp_path, capsys, _renamed_nodes(snap, {"h100-1": "west-1"}), "--scenario", scen, "--force", "--json")
    assert rc == 2 and out == "", err
    assert ("nodes[5].node: node 'west-1' is named as the scenario names nodes (<node group>-<i>), the snapshot's other nodes as "
            "the simulator names them") in " ".join(err.split()), err


def test_a_snapshot_node_in_another_fabric_than_the_scenarios_is_refused(tmp_path, capsys):
    """A node's cluster (network fabric) was taken from the snapshot whatever the scenario said: the planner costed
    moves between the scenario's two fabrics as within one. Now exit 2 naming nodes[i].cluster; matching fabrics plan, and
    a node that states none is in the scenario's fabric (a client that omits the field is not refused)."""
    scen = _hetero_scenario(tmp_path, fabrics=("east", "west"))
    snap = json.loads(HETERO.read_text())["snapshots"][-1]
    for n in snap["nodes"]:
        n["cluster"] = "east" if n["gpu_type"] == "H20" else "west"
    rc, matching, err = _run(tmp_path, capsys, snap, "--scenario", scen, "--force", "--json")
    assert rc == 0, err
    across = json.loads(json.dumps(snap))
    snap["nodes"][4]["cluster"] = "east"
    out = tmp_path / "plan.json"
    rc, stdout, err = _run(tmp_path, capsys, snap, "--scenario", scen, "--force", "--out", str(out))
    assert rc == 2 and stdout == "" and not out.exists(), err
    said = " ".join(err.split())
    assert ("nodes[4].cluster: the snapshot puts node 'h100-0' in cluster 'east'; the scenario 'realloc-hetero' puts it in "
            "'west' (node group h100, cluster)") in said, err
    assert "Fix: report cluster: west for it" in said and "Traceback" not in err
    for n in snap["nodes"]:
        del n["cluster"]  # omitted: each node is in its type's fabric as the scenario says (a client that states none is not refused)
    rc, omitted, err = _run(tmp_path, capsys, snap, "--scenario", scen, "--force", "--json")
    assert rc == 0, err
    assert _costed(omitted) == _costed(matching)
    (tmp_path / "one").mkdir()
    for n in across["nodes"]:
        del n["cluster"]  # what an omitted field was taken to be before: one fabric (as in the scenario without fabrics)
    rc, one_fabric, err = _run(tmp_path, capsys, across, "--scenario", _hetero_scenario(tmp_path / "one"), "--force", "--json")
    assert rc == 0, err
    assert _costed(one_fabric) != _costed(matching)  # (so the equality above says the scenario's fabrics were taken)
    del snap["nodes"]  # no fabric in the snapshot: each node's type's (the scenario's) is taken
    rc, _, err = _run(tmp_path, capsys, snap, "--scenario", scen, "--force", "--json")
    assert rc == 0, err


def _costed(out: str) -> str:
    """A realloc answer without its timings: what the fabrics cost is in its steps and candidates."""
    body = json.loads(out)["body"]
    return json.dumps({k: body.get(k) for k in ("stages", "allocation", "steps", "objective")}, sort_keys=True)
