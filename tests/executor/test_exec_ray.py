"""The Ray backend on a local multi-node cluster (CPU workers; Ray's fake GPUs: ``num_gpus`` and
the ``accelerator_type:<type>`` resource on a CPU machine, which Ray assigns as on real GPUs).

Default run: placement by GPU type and node, each worker seeing only its own GPUs, each unit's
new workers reserved by one placement group before any is created (so before anything old
stops), the three migrations end to end with real requests and real gloo groups, a starved
reservation that times out and leaves nothing behind, and a frozen node (SIGSTOP) whose
trainer ranks are fenced. The same fault
cases as the sim matrix run on Ray with ``RL_PLANNER_RAY_FAULTS=1`` (every fault kind for
every migration) or via ``python -m executor.bench faults --backend ray``.
"""

from __future__ import annotations

import contextlib
import os
import time

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
from tests.executor.conftest import FROZEN_DEADLINES, short_deadlines
from tests.executor.helpers import write_target

pytestmark = pytest.mark.ray
# The sglang worker test's server command (the SGLang stand-in), for the local cluster's workers
# (set before the module's cluster starts; nothing else reads it).
os.environ.setdefault("RL_PLANNER_SGLANG_CMD", __import__("json").dumps(
    __import__("tests.executor.test_exec_sglang_impl", fromlist=["STANDIN_CMD"]).STANDIN_CMD))


def _node_names() -> dict[str, str]:
    return {n["NodeID"]: next(k[len("rlp-node-"):] for k in n["Resources"] if k.startswith("rlp-node-"))
            for n in ray.nodes() if n.get("Alive") and any(k.startswith("rlp-node-") for k in n["Resources"])}


def _gpus_are_own_and_disjoint(b) -> dict:
    """Each worker's process sees exactly as many GPUs as it was given, and no two workers on a
    node see the same one (Ray's GPU ids are per node)."""
    names = _node_names()
    seen: dict[tuple[str, str], str] = {}
    out = {}
    for r in b.coord("records"):
        g = b.worker_gpus(r["id"])
        assert names[g["node_id"]] == r["node"], (r["id"], g)  # on the node the plan says
        assert len(g["gpu_ids"]) == r["gpus"], (r["id"], g)
        assert (g["cuda_visible_devices"] or "") == ",".join(g["gpu_ids"]), (r["id"], g)
        for gid in g["gpu_ids"]:
            assert (r["node"], gid) not in seen, f"{r['id']} and {seen[(r['node'], gid)]} both see GPU {gid} of {r['node']}"
            seen[(r["node"], gid)] = r["id"]
        out[r["id"]] = g
    return out


class _Reservations:
    """Records, when each unit's first new worker is created, whether one placement group already
    held a slot for every new worker of that unit (reserved at once, before the first create)."""

    def __init__(self, b):
        self.b, self.checked, self.bad = b, set(), []

    def __call__(self, step, status, data):
        if status != "done" or step.kind != "create" or step.unit in self.checked:
            return
        self.checked.add(step.unit)
        unit_new = {s.args["worker"]["id"] for s in self.units[step.unit] if s.kind == "create"}
        groups = self.b.coord("placement_groups")
        holding = [n for n, g in groups.items() if unit_new <= set(g["workers"])]
        granted = {pg.get("name") for pg in ray.util.placement_group_table().values() if pg.get("state") == "CREATED"}
        if not holding or holding[0] not in granted:  # (a name may also appear as REMOVED, from an earlier test)
            self.bad.append(f"{step.unit}: no granted placement group holds all of {sorted(unit_new)} ({groups})")

    def watch(self, steps):
        self.units = {}
        for s in steps:
            self.units.setdefault(s.unit, []).append(s)
        return steps


# Requests of the rollout in this test: enough that node b's two engines (batch 8) hold running and queued ones
# when they are drained (10 per prompt, as in the fault cases). Each one is a stream of coordinator calls
# (progress, completion) until the last wait, so more requests only make a loaded machine's wait longer.
REQUESTS = 60


def test_all_three_migrations_move_real_work(ray_backend):
    b = ray_backend
    b.reset()
    nodes = b.nodes()
    assert {n: (x.gpu_type, x.gpus, x.dram_gb) for n, x in nodes.items()} == {n.name: (n.gpu_type, n.gpus, n.dram_gb) for n in NODES}
    j = Journal(":memory:")
    res = _Reservations(b)
    Executor(b, j, on_step=res).apply(res.watch(diff(observe(b), target(faultlib.base_body())).steps), "base")
    gpus = _gpus_are_own_and_disjoint(b)  # and on the node the plan says
    assert all(g["placement_group"] for g in gpus.values())  # scheduled into their reservation's bundles
    assert {n: observe(b).used(n) for n in nodes} == {"a": (1, 16.0), "b": (2, 32.0), "t": (2, 128.0), "u": (0, 0.0)}
    reqs = router.make_requests(ROLLOUT, REQUESTS, prompts=6, min_len=10, max_len=60, seed=3)
    router.submit(b, ROLLOUT, reqs)
    # Once some requests are part-way, node b's engines (the ones the workload migration moves) stop decoding
    # (their own drain; the migration's drain finds them drained): the move then finds requests in flight
    # however slow the machine is (with both cores busy, all of them had finished during the P2P copy).
    end = time.monotonic() + 300  # a deadline on an event, reached only on failure
    while not any(r["output"] and not r["done"] for r in b.coord("request_records")):
        assert time.monotonic() < end, f"no request reported partial output within 300 s: {b.coord('ledger_summary')}"
        time.sleep(0.02)
    held = [r["id"] for r in b.coord("records") if r["component"] == ROLLOUT and r["node"] == "b"]
    for w in held:
        b.call(w, "drain")
    assert len(held) == 2 and sum(len(b.call(w, "export")) for w in held) > 0, "nothing in flight on node b's engines"
    assert all(b.train_step(TRAINER, 0))
    old = [r["id"] for r in b.coord("records") if r["component"] == TRAINER]
    before, step, _ = full_state(b, old)
    body = faultlib.migration_body("p2p")
    body["components"][1]["layout"] = {"tp": 1, "dp": 2}  # the new layout trains with a gloo DP all-reduce
    body["components"][0]["placement"] = {"a": 2}  # and a workload migration of the rollout
    body["components"].append({"name": "job/reward", "role": "service", "gpus_per_worker": 1, "placement": {"b": 1}})
    r2 = Executor(b, j, on_step=res).apply(res.watch(diff(observe(b), target(body)).steps), "both")
    assert r2.status == "done", r2.message
    assert len(res.checked) >= 4 and res.bad == [], res.bad  # base: 2 units; here p2p, workload, add
    _gpus_are_own_and_disjoint(b)
    res = r2
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
    end = time.monotonic() + 300  # a generous deadline: the wait is on an event, not on speed
    while time.monotonic() < end and b.coord("ledger_summary")["done"] < REQUESTS:
        time.sleep(0.2)
    summ = b.coord("ledger_summary")
    assert summ["done"] >= REQUESTS, f"timed out after 300 s waiting for all {REQUESTS} requests to finish: {summ}"
    recs = b.coord("request_records")
    assert len(recs) == REQUESTS, f"the ledger holds {len(recs)} requests, {REQUESTS} were submitted"
    assert all(r["done"] and r["output"] == expected_output(r) for r in recs)
    assert b.coord("illegal_transitions") == []
    assert b.leaks() == []
    assert {g for g in b.coord("placement_groups")}  # the live workers' reservations remain, nothing else


def test_starved_reservation_times_out_and_rolls_back_cleanly(ray_backend):
    """Another job holds 3 of node u's 4 GPUs: the new layout (2 services of 1 GPU on u, 1 on t)
    cannot be reserved whole. Its placement group is not granted by the start deadline: it is
    removed, the unit rolls back, nothing was created, and the running layout is untouched."""
    b = ray_backend
    b.reset()
    nodes = faultlib.base_body()["nodes"]
    keep = {"nodes": nodes, "components": [{"name": "job/ref", "role": "service", "gpu_type": "H100", "placement": {"t": 1}}]}
    assert Executor(b, Journal(":memory:")).apply(diff(observe(b), target(keep)).steps, "keep").status == "done"
    hog = _Hog.options(name="outside-hog", namespace="elsewhere", num_gpus=3, resources={"rlp-node-u": 0.001}).remote()
    body = {"nodes": nodes, "components": keep["components"] + [
        {"name": "job/reward", "role": "service", "gpu_type": "H100", "placement": {"u": 2, "t": 1}}]}
    try:
        ray.get(hog.ready.remote(), timeout=120)  # something outside the executor holds 3 of u's GPUs (a deadline)
        with short_deadlines(b, start_s=3.0):  # the reservation can never be granted: any deadline shows it
            res = Executor(b, Journal(":memory:")).apply(diff(observe(b), target(body)).steps, "reward")
    finally:
        ray.kill(hog)
    assert res.status == "rolled_back", res.message
    assert "reservation (placement group" in res.message and "not granted within 3 s" in res.message, res.message
    assert "node u: GPU=2" in res.message and "node t: GPU=1" in res.message, res.message
    assert sorted(r["id"] for r in b.coord("records")) == ["job.ref.g1.w0"]  # no worker of the new layout was created
    assert b.creates.keys() == {"job.ref.g1.w0"}
    assert b.worker_alive("job.ref.g1.w0")
    assert b.leaks() == []  # the starved group was removed; only job/ref's own remains
    assert len(b.coord("placement_groups")) == 1


def test_co_execution_members_see_their_group_reservations_gpus(ray_backend):
    """A group's reservation of node u holds 4 GPUs of its own; its two members ask Ray for none
    (they take turns) and run with the reservation's CUDA_VISIBLE_DEVICES; a plain service on t
    gets its own GPU."""
    b = ray_backend
    b.reset()
    body = {"nodes": faultlib.base_body()["nodes"], "components": [
        {"name": "G/pool-u", "role": "service", "gpu_type": "H100", "gpus_per_worker": 4, "placement": {"u": 1},
         "migration": "reboot", "reserves": "G"},
        {"name": "j1/reward", "role": "service", "gpu_type": "H100", "gpus_per_worker": 2, "placement": {"u": 1}, "group": "G"},
        {"name": "j2/reward", "role": "service", "gpu_type": "H100", "gpus_per_worker": 4, "placement": {"u": 1}, "group": "G"},
        {"name": "j3/ref", "role": "service", "gpu_type": "H100", "gpus_per_worker": 1, "placement": {"t": 1}}]}
    res = Executor(b, Journal(":memory:")).apply(diff(observe(b), target(body)).steps, "coexec")
    assert res.status == "done", res.message
    recs = {r["component"]: r["id"] for r in b.coord("records")}
    pool = b.worker_gpus(recs["G/pool-u"])
    assert len(pool["gpu_ids"]) == 4
    for m in ("j1/reward", "j2/reward"):
        g = b.worker_gpus(recs[m])
        assert g["gpu_ids"] == [] and g["cuda_visible_devices"] == pool["cuda_visible_devices"], (m, g, pool)
    assert len(b.worker_gpus(recs["j3/ref"])["gpu_ids"]) == 1
    assert b.leaks() == []


@ray.remote(num_cpus=0)
class _Hog:
    def ready(self) -> bool:
        return True


def test_frozen_node_is_fenced_and_the_old_layout_keeps_its_state(ray_backend, monkeypatch):
    out = _run_case(ray_backend, faultlib.Case("p2p", "freeze_node", "reshard", 0, "before"), monkeypatch)
    assert out.fired and out.problems == [], out
    assert out.status == "rolled_back" and out.layout == "old"
    assert out.stale_attempts == 2 and out.stale_accepted == 0


def _reset(b):
    def make():
        b.reset()
        return b
    return make


def _run_case(b, case, monkeypatch):
    """``faultlib.run_case`` with the module's long deadlines, narrowed to ``FROZEN_DEADLINES`` from the
    moment a node freezes until it thaws: a call to a frozen process never returns, so only its deadline
    declares the process dead; every other wait (a live worker on a loaded machine) keeps the long one."""
    window = contextlib.ExitStack()
    freeze, thaw = b.freeze, b.thaw

    def freeze_fast(worker_id):
        if not window._exit_callbacks:
            window.enter_context(short_deadlines(b, **FROZEN_DEADLINES))
        freeze(worker_id)

    def thaw_slow(worker_id):
        window.close()
        thaw(worker_id)

    monkeypatch.setattr(b, "freeze", freeze_fast)
    monkeypatch.setattr(b, "thaw", thaw_slow)
    try:
        return faultlib.run_case(case, _reset(b), settle_s=120)
    finally:
        window.close()
        monkeypatch.undo()


RAY_CASES = faultlib.representative_cases()


@pytest.mark.skipif(os.environ.get("RL_PLANNER_RAY_FAULTS") != "1", reason="set RL_PLANNER_RAY_FAULTS=1 (about 4 min)")
@pytest.mark.parametrize("case", RAY_CASES, ids=[c.id for c in RAY_CASES])
def test_fault_on_ray(ray_backend, case, monkeypatch):
    # Only a frozen node needs short call deadlines (they are what declares the frozen workers dead), and only
    # while it is frozen (_run_case); every other fault acts at once (a killed actor fails its calls immediately).
    out = _run_case(ray_backend, case, monkeypatch)
    assert out.fired and out.problems == [], out


COORD_CASES = faultlib.coordinator_cases()


@pytest.mark.skipif(os.environ.get("RL_PLANNER_RAY_FAULTS") != "1", reason="set RL_PLANNER_RAY_FAULTS=1 (about 1 min)")
@pytest.mark.parametrize("case", COORD_CASES, ids=[c.id for c in COORD_CASES])
def test_coordinator_death_mid_apply_loses_nothing(ray_backend, case):
    """The coordinator actor's process is SIGKILLed mid-apply; Ray restarts it and it reloads its
    state directory. The apply finishes (no rollback), every request finishes exactly once with its
    output, the trainer state is bit-identical, no stale effect is accepted, nothing leaks."""
    out = faultlib.run_case(case, _reset(ray_backend), settle_s=120)
    assert out.fired and out.problems == [], out
    assert out.status == "done" and out.coordinator_restarts == 1, out


@pytest.mark.skipif(os.environ.get("RL_PLANNER_RAY_FAULTS") != "1", reason="set RL_PLANNER_RAY_FAULTS=1 (about 40 s)")
def test_controller_process_killed_mid_p2p_then_resumed_by_address(ray_backend, tmp_path):
    """The real thing: `planner apply --backend ray --address ADDR` dies (exit 137) right after the
    reshard; the detached actors live on; a second apply of the same plan resumes from the journal."""

    from tests.conftest import run_cli

    b = ray_backend
    b.reset()
    addr = b._cluster.address
    plans = {}
    for name, body in (("base", faultlib.base_body()), ("p2p", faultlib.migration_body("p2p"))):
        plans[name] = write_target(tmp_path / f"{name}.yaml", body)
    common = ["--backend", "ray", "--address", addr, "--journal", str(tmp_path / "j.db"), "--call-timeout", "120", "--start-timeout", "180"]
    r = run_cli("apply", str(plans["base"]), *common, timeout=600)
    assert r.returncode == 0, r.stderr
    old = [x["id"] for x in b.coord("records") if x["component"] == TRAINER]
    before, step, _ = full_state(b, old)
    r = run_cli("apply", str(plans["p2p"]), *common, timeout=600, env={"RL_PLANNER_EXECUTOR_CRASH_AT": "reshard:after"})
    assert r.returncode == 137, r.stderr
    assert {x["generation"] for x in b.coord("records") if x["component"] == TRAINER} == {1, 2}  # both alive, not switched
    r = run_cli("apply", str(plans["p2p"]), *common, timeout=600)
    assert r.returncode == 0 and "(resumed)" in r.stdout, r.stderr
    new = [x["id"] for x in b.coord("records") if x["component"] == TRAINER]
    assert not set(new) & set(old)
    made = [a["name"] for a in ray.util.list_named_actors(all_namespaces=True) if a["name"] in set(new)]
    assert sorted(made) == sorted(new)  # each new rank's actor exists once, across both controllers
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


@pytest.mark.skipif(os.environ.get("RL_PLANNER_RAY_FAULTS") != "1", reason="set RL_PLANNER_RAY_FAULTS=1 (about 30 s)")
def test_sglang_engines_run_on_the_gpus_ray_gave_their_workers(ray_backend, tmp_path):
    """``impl: sglang`` on Ray: each engine's server process (the SGLang stand-in, launched with
    sglang.launch_server's arguments) sees exactly its worker's Ray GPUs, has its own URL, and dies
    with its worker's process when the worker is stopped."""
    import httpx

    b = ray_backend
    b.reset()
    launch = {"model_path": "/models/tiny", "startup_timeout_s": 120, "log_dir": str(tmp_path)}  # RL_PLANNER_SGLANG_CMD: the stand-in
    body = {"nodes": faultlib.base_body()["nodes"], "components": [
        {"name": "job/sgl", "role": "rollout", "impl": "sglang", "gpu_type": "H20", "gpus_per_worker": 2,
         "dram_gb_per_worker": 4, "placement": {"a": 2}, "engine": {"launch": launch}}]}
    j = Journal(":memory:")
    res = Executor(b, j).apply(diff(observe(b), target(body)).steps, "sglang")
    assert res.status == "done", res.message
    urls = []
    for r in b.coord("records"):
        g = b.worker_gpus(r["id"])
        url = b.call(r["id"], "url")
        info = httpx.get(url + "/get_server_info", timeout=60).json()
        assert len(g["gpu_ids"]) == 2 and info["cuda_visible_devices"] == g["cuda_visible_devices"], (r["id"], g, info)
        assert info["tp_size"] == 2
        urls.append(url)
    assert len(set(urls)) == 2
    body["components"] = []
    assert Executor(b, j).apply(diff(observe(b), target(body)).steps, "stop").status == "done"
    end = time.monotonic() + 60
    for url in urls:  # the server went with its worker's process
        while True:
            try:
                httpx.get(url + "/health", timeout=2)
            except httpx.HTTPError:
                break
            assert time.monotonic() < end, f"{url} still serves after its worker was stopped"
            time.sleep(0.2)
