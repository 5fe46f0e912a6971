"""The Ray backend on a local multi-node cluster (CPU workers, GPU types as custom resources).

Default run: placement by GPU type and node, the three migrations end to end with real
requests and real gloo groups, an unplaceable worker that fails at its deadline and leaves
nothing behind, and a frozen node (SIGSTOP) whose trainer ranks are fenced. The same fault
cases as the sim matrix run on Ray with ``RL_PLANNER_RAY_FAULTS=1`` (every fault kind for
every migration) or via ``python -m executor.bench faults --backend ray``.
"""

from __future__ import annotations

import os

import pytest
import ray
import torch

from executor import faultlib, router
from executor.backends.base import observe
from executor.controller import Executor
from executor.diff import diff
from executor.faultlib import NODES, ROLLOUT, TRAINER, full_state, same_state, target
from executor.journal import Journal
from executor.workers.engine import expected_output

pytestmark = pytest.mark.ray


def _node_of_actor(name: str) -> str:
    by_id = {n["NodeID"]: n for n in ray.nodes()}
    for a in ray._private.state.actors().values():
        if a.get("Name") == name and a.get("State") == "ALIVE":
            res = by_id[a["Address"]["NodeID"]]["Resources"]
            return next(k[len("rlp-node-"):] for k in res if k.startswith("rlp-node-"))
    raise AssertionError(f"{name} is not alive")


def test_all_three_migrations_move_real_work(ray_backend):
    b = ray_backend
    b.reset()
    nodes = b.nodes()
    assert {n: (x.gpu_type, x.gpus, x.dram_gb) for n, x in nodes.items()} == {n.name: (n.gpu_type, n.gpus, n.dram_gb) for n in NODES}
    j = Journal(":memory:")
    Executor(b, j).apply(diff(observe(b), target(faultlib.base_body())).steps, "base")
    for r in b.coord("records"):  # GPU-type and node resources put every actor where the plan says
        assert _node_of_actor(r["id"]) == r["node"], r["id"]
    assert {n: observe(b).used(n) for n in nodes} == {"a": (1, 16.0), "b": (2, 32.0), "t": (2, 128.0), "u": (0, 0.0)}
    reqs = router.make_requests(ROLLOUT, 150, prompts=6, min_len=10, max_len=60, seed=3)
    router.submit(b, ROLLOUT, reqs)
    assert all(b.train_step(TRAINER, 0))
    old = [r["id"] for r in b.coord("records") if r["component"] == TRAINER]
    before, step, _ = full_state(b, old)
    body = faultlib.migration_body("p2p")
    body["components"][1]["layout"] = {"tp": 1, "dp": 2}  # the new layout trains with a gloo DP all-reduce
    body["components"][0]["placement"] = {"a": 2}  # and a workload migration of the rollout
    body["components"].append({"name": "job/reward", "role": "service", "gpus_per_worker": 1, "placement": {"b": 1}})
    res = Executor(b, j).apply(diff(observe(b), target(body)).steps, "both")
    assert res.status == "done", res.message
    assert res.outcomes["job/trainer/p2p/reshard"]["checksum_mismatches"] == []
    assert res.outcomes["job/rollout/workload/handoff"]["moved"] > 0
    new = [r["id"] for r in b.coord("records") if r["component"] == TRAINER]
    assert not set(new) & set(old)
    after, step_after, lost = full_state(b, new)
    assert same_state(before, after) == [] and step_after == step and lost == []
    # The new layout trains on over its own training group (gloo all-reduce of the DP replicas'
    # gradients): both replicas take the same Adam step, bit for bit; the old ranks are gone.
    assert all(b.train_step(TRAINER, 1))
    s0, s1 = (b.call(w, "state") for w in sorted(new))
    assert s0["step"] == s1["step"] == step + 1
    for n in s0["shards"]:
        for k in ("param", "exp_avg", "exp_avg_sq"):
            assert torch.equal(s0["shards"][n][k], s1["shards"][n][k]), (n, k)
    assert not torch.equal(s0["shards"]["embed"]["param"], before[("embed", "param")])
    assert all(not b.worker_alive(w) for w in old)
    # Reboot the reward service onto another node, keeping its state.
    b.call("job.reward.g1.w0", "serve", "k", 41)
    body["components"][2]["placement"] = {"a": 1}
    res = Executor(b, j).apply(diff(observe(b), target(body)).steps, "reboot")
    assert res.status == "done", res.message
    assert b.call("job.reward.g2.w0", "state") == {"kv": {"k": 41}, "served": 1}
    import time

    end = time.monotonic() + 300  # a generous deadline: the wait is on an event, not on speed
    while time.monotonic() < end and b.coord("ledger_summary")["done"] < 150:
        time.sleep(0.2)
    assert b.coord("ledger_summary")["done"] >= 150, f"timed out waiting for 150 requests done: {b.coord('ledger_summary')}"
    recs = b.coord("request_records")
    assert all(r["done"] and r["output"] == expected_output(r) for r in recs)
    assert b.coord("illegal_transitions") == []
    assert b.leaks() == []


def test_unplaceable_worker_fails_at_its_deadline_and_leaves_nothing(ray_backend):
    """Ray would keep an actor pending forever: the start deadline kills it and rolls back."""
    from executor.backends.ray.actors import WorkerActor

    b = ray_backend
    b.reset()
    hog = WorkerActor.options(name="outside-hog", namespace="elsewhere", resources={"H100": 4.0, "rlp-node-u": 0.001}).remote(
        {"role": "service", "worker": {"id": "hog", "component": "x/y"}}, 0, b.namespace)
    body = {"nodes": faultlib.base_body()["nodes"],
            "components": [{"name": "job/reward", "role": "service", "gpu_type": "H100", "placement": {"u": 1}}]}
    try:
        ray.get(hog.ready.remote(), timeout=30)  # something outside the executor holds u's GPUs
        b.deadlines.start_s = 3.0
        res = Executor(b, Journal(":memory:")).apply(diff(observe(b), target(body)).steps, "reward")
    finally:
        b.deadlines.start_s = 30.0
        ray.kill(hog)
    assert res.status == "rolled_back" and "not placed and ready within 3 s" in res.message
    assert b.coord("records") == []
    assert b.leaks() == []


def test_frozen_node_is_fenced_and_the_old_layout_keeps_its_state(ray_backend):
    out = faultlib.run_case(faultlib.Case("p2p", "freeze_node", "reshard", 0, "before"), _reset(ray_backend), settle_s=30)
    assert out.fired and out.problems == [], out
    assert out.status == "rolled_back" and out.layout == "old"
    assert out.stale_attempts == 2 and out.stale_accepted == 0


def _reset(b):
    def make():
        b.reset()
        return b
    return make


RAY_CASES = faultlib.representative_cases()


@pytest.mark.skipif(os.environ.get("RL_PLANNER_RAY_FAULTS") != "1", reason="set RL_PLANNER_RAY_FAULTS=1 (about 4 min)")
@pytest.mark.parametrize("case", RAY_CASES, ids=[c.id for c in RAY_CASES])
def test_fault_on_ray(ray_backend, case):
    out = faultlib.run_case(case, _reset(ray_backend), settle_s=30)
    assert out.fired and out.problems == [], out


@pytest.mark.skipif(os.environ.get("RL_PLANNER_RAY_FAULTS") != "1", reason="set RL_PLANNER_RAY_FAULTS=1 (about 40 s)")
def test_controller_process_killed_mid_p2p_then_resumed_by_address(ray_backend, tmp_path):
    """The real thing: `planner apply --backend ray --address ADDR` dies (exit 137) right after the
    reshard; the detached actors live on; a second apply of the same plan resumes from the journal."""
    import yaml

    from tests.conftest import run_cli

    b = ray_backend
    b.reset()
    addr = b._cluster.address
    plans = {}
    for name, body in (("base", faultlib.base_body()), ("p2p", faultlib.migration_body("p2p"))):
        plans[name] = tmp_path / f"{name}.yaml"
        plans[name].write_text(yaml.safe_dump({"kind": "ExecutorTarget", "version": 1,
                                               "solver": {"backend": "manual", "status": "feasible"}, "body": body}))
    common = ["--backend", "ray", "--address", addr, "--journal", str(tmp_path / "j.db"), "--call-timeout", "10"]
    r = run_cli("apply", str(plans["base"]), *common, timeout=180)
    assert r.returncode == 0, r.stderr
    old = [x["id"] for x in b.coord("records") if x["component"] == TRAINER]
    before, step, _ = full_state(b, old)
    r = run_cli("apply", str(plans["p2p"]), *common, timeout=180, env={"RL_PLANNER_EXECUTOR_CRASH_AT": "reshard:after"})
    assert r.returncode == 137, r.stderr
    assert {x["generation"] for x in b.coord("records") if x["component"] == TRAINER} == {1, 2}  # both alive, not switched
    r = run_cli("apply", str(plans["p2p"]), *common, timeout=180)
    assert r.returncode == 0 and "(resumed)" in r.stdout, r.stderr
    new = [x["id"] for x in b.coord("records") if x["component"] == TRAINER]
    assert not set(new) & set(old)
    made = [a["Name"] for a in ray._private.state.actors().values() if a.get("Name") in set(new)]
    assert sorted(made) == sorted(new)  # each new rank's actor was created once, across both controllers
    after, step_after, lost = full_state(b, new)
    assert same_state(before, after) == [] and step_after == step and lost == []
    assert b.leaks() == []


@pytest.mark.skipif(os.environ.get("RL_PLANNER_RAY_FAULTS") != "1",
                    reason="set RL_PLANNER_RAY_FAULTS=1 (about 15 s; the same plan runs on the sim backend in tests/apply)")
def test_a_committed_reallocation_applies_on_ray(ray_backend):
    """The reallocation planner's plan on the job's telemetry (tests/apply/realloc_case.py), applied on
    Ray: engines drained and their requests handed over, the trainer grown by P2P in place over gloo."""
    from tests.apply.realloc_case import run
    from tests.apply.test_apply_realloc import check

    b = ray_backend
    b.reset()
    out = run(b, [vars(n) for n in NODES], requests=30)
    check(b, out)
    assert out["result"].outcomes["rl/trainer/p2p/reshard"]["checksum_mismatches"] == []
