"""A committed reallocation applied end to end: telemetry over HTTP -> the daemon's decision -> the
executor (sim backend) -> the new allocation in GET /v1/cluster, every request accounted once,
the journal holding the steps.

One real daemon process on loopback (wall clock, solo placer, the executor's simulated backend
with 64 rollout requests per job). The job's telemetry is written from what GET /v1/cluster says
runs (the executor's component names and worker ids): its rollout tail has thinned (six of eight
engines hold one request each at 3% KV) while log-prob inference and the trainer have their work
ahead, so the planner shrinks the rollout (Workload migration) and grows the trainer onto the
GPUs it frees (P2P, in place: the old replicas stay) and log-prob inference. The test reproduces
the daemon's decision in-process (same snapshots, scenario and solver options: the decision is
deterministic) to know which allocation it committed.
"""

from __future__ import annotations

import sqlite3

import pytest
from daemonproc import DaemonProc, job, query, wait_for, write_cluster

from executor.state import ClusterState, Component, Layout, Node, Worker
from planner.apply.telemetry import job_snapshot, tail_loads
from tests.apply.realloc_case import gpus_by_node

JOB = "tail"
PROGRESS = {"rollout": 0.85, "reference": 0.3, "trainer": 0.1}
TIMES = (100.0, 103.0, 108.0)  # below U_low for 8 s > T = 5 s: the rollout is a donor at the third


def spec() -> dict:
    # 7B GRPO on H800 only (DynaRL's homogeneous set-up): rollout on one node, trainer TP 2 on another,
    # so GPUs the rollout tail gives back can go to the trainer and to log-prob inference
    return job(JOB, model="qwen2.5-7b", rollout={"batch_prompts": 256, "group_size": 8, "max_response_tokens": 8192,
                                                "gpu_types": ["H800"]}, trainer={"tp": 2}, duration_s=None)


def state_of(cluster: dict) -> ClusterState:
    """GET /v1/cluster as the executor's state (what the telemetry is written from)."""
    st = ClusterState(nodes={n["node"]: Node(n["node"], n["gpu_type"], n["gpus"], n["dram_gb"]) for n in cluster["nodes"]})
    for c in cluster["components"]:
        lay = Layout(**c["layout"]) if c["layout"] else Layout()
        st.components[c["name"]] = Component(c["name"], c["job"], c["role"], layout=lay, group=c["group"], reserves=c["reserves"],
                                             workers=[Worker(w["id"], c["name"], w["node"], w["gpus"], 0.0, w["index"])
                                                      for w in c["workers"]])
    return st


def snapshots(st: ClusterState) -> list[dict]:
    engines = [w.id for w in sorted(st.components[f"{JOB}/rollout"].workers, key=lambda w: w.index)]
    loads = tail_loads(engines, PROGRESS["rollout"])
    return [job_snapshot(st, JOB, time_s=t, iteration=3, progress=PROGRESS, loads=loads) for t in TIMES]


def expected_decision(tmp, snaps: list[dict]) -> dict:
    """The daemon's reallocation on these snapshots, computed here the same way."""
    from planner.daemon.adapters.realloc import DynaRLReallocator
    from planner.daemon.ports import PlanningContext
    from planner.schema import load_scenario
    from planner.schema.scenario import JobSpec
    from formulation.realloc.telemetry import TelemetrySnapshot

    cluster = load_scenario(write_cluster(tmp))
    out = DynaRLReallocator(cluster).decide(PlanningContext(cluster, {JOB: JobSpec.model_validate(spec())}), JOB,
                                             [TelemetrySnapshot.model_validate(s) for s in snaps])
    assert out.committed, out.reason
    return out.body


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("realloc")
    d = DaemonProc(tmp, "--scenario", str(write_cluster(tmp)), "--placer", "solo", "--period-s", "0.3", "--sim-requests", "64")
    out = {"tmp": tmp, "daemon": d}
    with d.client() as http:
        assert http.post("/v1/jobs", json=spec()).status_code == 201
        wait_for(lambda: http.get(f"/v1/jobs/{JOB}").json()["state"] == "running", what="the job running")
        before = wait_for(lambda: (r := http.get("/v1/cluster", params={"job": JOB})).status_code == 200
                          and any(c["name"] == f"{JOB}/trainer" for c in r.json()["components"]) and r.json(),
                          what="the executor's state")
        out["before"] = before
        out["snaps"] = snapshots(state_of(before))
        for s in out["snaps"]:
            r = http.post("/v1/telemetry", json=s)
            assert r.status_code == 202, r.text

        def applied():
            ds = http.get("/v1/decisions", params={"kind": "realloc", "limit": 1000}).json()["decisions"]
            return [x for x in ds if x["outcome"] in ("applied", "failed")]

        out["decisions"] = wait_for(applied, what="the reallocation applied")
        out["after"] = wait_for(lambda: (c := http.get("/v1/cluster", params={"job": JOB}).json())["at"] > 0 and
                                c["components"] != before["components"] and c, what="the new allocation recorded")
    assert d.stop() == 0, d.output()
    return out


def test_the_committed_reallocation_is_applied_and_shown(run):
    ds = run["decisions"]
    assert len(ds) == 1 and ds[0]["outcome"] == "applied", ds
    assert ds[0]["triggers"] == ["donor(rollout)"]
    body = expected_decision(run["tmp"], run["snaps"])
    after = {c["name"]: c for c in run["after"]["components"]}
    kinds = {}
    for a in body["allocation"]:
        name = f"{JOB}/{a['component']}"
        got, want = gpus_by_node(after[name]["workers"]), gpus_by_node(a["to_workers"])
        assert got == want, (name, got, want)
        kept = {w["worker_id"] for w in a["to_workers"] if not w["new"]}
        if a["migration_kind"] == "workload":  # the engines the planner kept are the ones that stay
            assert kept <= {w["id"] for w in after[name]["workers"]}
        kinds[a["component"]] = a["migration_kind"]
    # this tail moves engines by Workload migration and grows the trainer by P2P
    assert kinds.get("rollout") == "workload" and kinds.get("trainer") == "p2p", kinds
    assert after[f"{JOB}/trainer"]["layout"]["dp"] > 1
    assert "rollout: workload" in ds[0]["reasons"][-1] and "trainer: p2p" in ds[0]["reasons"][-1], ds[0]["reasons"]


def test_every_request_is_accounted_exactly_once(run):
    from executor.backends.sim import SimBackend
    from executor.workers.engine import expected_output

    state = run["daemon"].state
    b = SimBackend([], state_path=state.with_name(state.name + ".executor-sim"))
    reqs = [r for r in b.coordinator.request_records() if r["component"] == f"{JOB}/rollout"]
    assert len(reqs) == 64 and len({r["id"] for r in reqs}) == 64
    live = {r["id"] for r in b.coordinator.records() if r["component"] == f"{JOB}/rollout" and r.get("status") == "running"}
    moved = 0
    for r in reqs:
        moved += r["handoffs"]
        if r["done"]:
            assert r["finished_by"] and r["output"] == expected_output(r), r["id"]
        else:
            assert r["owner"] in live and r["output"] == expected_output(r)[: len(r["output"])], r["id"]
    assert moved > 0, "the released engines' requests were handed over"
    assert not [x for x in b.coordinator.rejected_effects() if "not the owner or already done" in x["what"]]
    assert b.coordinator.illegal_transitions() == [] and b.leaks() == []
    b.close()


def test_the_journal_shows_the_reallocation_steps(run):
    state = run["daemon"].state
    c = sqlite3.connect(f"file:{state.with_name(state.name + '.journal')}?mode=ro", uri=True)
    applies = c.execute("SELECT id, plan_name, status FROM applies ORDER BY id").fetchall()
    realloc = [a for a in applies if a[1].startswith(f"daemon realloc {JOB}")]
    assert len(realloc) == 1 and realloc[0][2] == "done", applies
    steps = c.execute("SELECT unit, kind, status FROM steps WHERE apply_id=? ORDER BY seq", (realloc[0][0],)).fetchall()
    c.close()
    assert steps and all(s[2] == "done" for s in steps)
    units = {s[0] for s in steps}
    assert f"{JOB}/rollout/workload" in units and f"{JOB}/trainer/p2p" in units, units
    rollout = [s[1] for s in steps if s[0] == f"{JOB}/rollout/workload"]
    assert rollout.index("drain") < rollout.index("handoff") < rollout.index("stop")
    trainer = [s[1] for s in steps if s[0] == f"{JOB}/trainer/p2p"]
    assert trainer[-1] == "switch" or "stop" in trainer
    assert trainer.index("reshard") < trainer.index("switch")


def test_sim_telemetry_drives_reallocations_through_the_executor(tmp_path):
    """--sim-telemetry: the simulated cluster reports each running job's telemetry from the
    executor's state as its iteration goes on (a virtual clock, 15 s a cycle, an 826 s iteration):
    the rollout tail thins out, the daemon commits reallocations and the executor applies them,
    with --sim-requests' requests handed over and each finished once."""
    from executor.backends.sim import SimBackend
    from executor.workers.engine import expected_output

    trace = write_cluster(tmp_path, jobs=[spec()])
    d = DaemonProc(tmp_path, "--scenario", str(trace), "--placer", "solo", "--clock", "virtual", "--period-s", "15",
                   "--max-cycles", "30", "--sim-telemetry", "--sim-requests", "32")
    assert d.wait(what="the daemon to exit") == 0, d.output()
    ds = query(d.state, "SELECT cycle, outcome, triggers, reasons FROM decisions WHERE kind='realloc' ORDER BY id")
    applied = [x for x in ds if x["outcome"] == "applied"]
    assert applied and all(x["triggers"] == '["donor(rollout)"]' for x in ds), ds
    assert "rollout: workload" in applied[0]["reasons"], applied[0]["reasons"]
    journal = d.state.with_name(d.state.name + ".journal")
    runs = query(journal, "SELECT plan_name, status FROM applies WHERE plan_name LIKE 'daemon realloc %'")
    assert len(runs) == len(applied) and {r["status"] for r in runs} == {"done"}, runs
    b = SimBackend([], state_path=d.state.with_name(d.state.name + ".executor-sim"))
    reqs = [r for r in b.coordinator.request_records() if r["component"] == f"{JOB}/rollout"]
    assert len(reqs) == 32 and sum(r["handoffs"] for r in reqs) > 0
    assert all(r["output"] == (expected_output(r) if r["done"] else expected_output(r)[: len(r["output"])]) for r in reqs)
    assert b.coordinator.illegal_transitions() == [] and b.leaks() == []
    b.close()


def test_cluster_view_needs_an_executor_and_a_valid_job_name(tmp_path):
    d = DaemonProc(tmp_path, "--scenario", str(write_cluster(tmp_path)), "--period-s", "0.2", "--dry-run")
    try:
        with d.client() as http:
            wait_for(lambda: http.get("/v1/health").json()["cycle"] >= 2, what="two cycles")  # the loop ran, recorded no cluster
            r = http.get("/v1/cluster")
            assert r.status_code == 404 and "reported nothing" in r.text, r.text
            r = http.get("/v1/cluster", params={"job": "no spaces allowed"})
            assert r.status_code == 422 and "job" in r.text, r.text
    finally:
        assert d.stop() == 0, d.output()
