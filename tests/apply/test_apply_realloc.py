"""A reallocation the planner commits on a job's telemetry, applied by the executor (sim backend):
Workload migration for the engines, P2P in place for the trainer (see realloc_case.py)."""

from __future__ import annotations

from executor.backends.sim import SimBackend
from executor.state import Node
from executor.workers.engine import expected_output
from tests.apply.realloc_case import JOB, gpus_by_node, run

NODES = [Node("t", "H100", 4, 512.0), Node("u", "H100", 4, 512.0)]


def check(b, out) -> None:
    """What every backend must show after the apply (shared with the Ray test)."""
    assert out["result"].status == "done", out["result"].message
    body, after = out["decision"], out["after"]
    kinds = {}
    for a in body["allocation"]:
        name = f"{JOB}/{a['component']}"
        assert gpus_by_node(after.components[name].live_workers()) == gpus_by_node(a["to_workers"]), name
        kinds[a["component"]] = a["migration_kind"]
        if a["migration_kind"] == "workload":  # the engines the planner kept are the ones that stay
            assert {w["worker_id"] for w in a["to_workers"] if not w["new"]} <= {w.id for w in after.components[name].live_workers()}
    assert kinds["rollout"] == "workload" and kinds["trainer"] == "p2p"
    assert {u.kind for u in out["plan"].units} <= {"workload", "p2p"} and not out["plan"].notes
    # P2P in place: the old replicas kept their ranks' state; every new rank holds a replica's copy
    trainer = sorted(after.components[f"{JOB}/trainer"].live_workers(), key=lambda w: w.index)
    assert set(out["digests"]) <= {w.id for w in trainer}
    replica = next(iter(out["digests"].values()))
    assert all(b.call(w.id, "digest") == replica for w in trainer)  # TP 1: every DP replica identical
    assert after.over_capacity() == []
    # every request: once in the ledger, finished by its owner with its uninterrupted output, or owned by a live engine
    recs = {r["id"]: r for r in b.coord("request_records")}
    assert set(recs) == {r["id"] for r in out["requests"]}
    live = {w.id for w in after.components[f"{JOB}/rollout"].live_workers()}
    for r in recs.values():
        if r["done"]:
            assert r["output"] == expected_output(r)
        else:
            assert r["owner"] in live and r["output"] == expected_output(r)[: len(r["output"])]
    assert sum(r["handoffs"] for r in recs.values()) > 0
    assert b.coord("illegal_transitions") == [] and b.leaks() == []


def test_a_committed_reallocation_applies_on_the_sim_backend():
    b = SimBackend(NODES, ticks_per_call=1)
    check(b, run(b, [vars(n) for n in NODES]))
