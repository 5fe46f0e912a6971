"""Probe 49: the daemon over time, from outside (a standby on a virtual clock)."""

from __future__ import annotations

import pytest
from daemonproc import DaemonProc, job, kv, wait_for, write_cluster


def test_a_virtual_clock_standby_stamps_submissions_and_health_with_the_applier_time(tmp_path):
    """A standby's virtual clock does not tick while it waits for the lease. A job submitted through it
    arrived at the time the standby started (in the applier's past: with --admission-timeout-s such a
    job was rejected at its first cycle for having 'waited' that long), and its /v1/health said that
    time beside the applier's cycle number."""
    trace = write_cluster(tmp_path, jobs=[job("hog")])
    common = ("--clock", "virtual", "--period-s", "60", "--pace-s", "0.05", "--placer", "solo", "--lease-ttl-s", "3")
    leader = DaemonProc(tmp_path, "--scenario", str(trace), *common, name="leader")
    standby = DaemonProc(tmp_path, *common, "--standby", name="standby")
    try:
        wait_for(lambda: (kv(leader.state, "clock_s") or 0.0) >= 1200.0, what="the leader's clock past 1200 s")
        with standby.client() as c:
            before = kv(leader.state, "clock_s")
            health = c.get("/v1/health").json()
            assert health["role"] == "standby"
            assert health["clock_s"] >= before, (health["clock_s"], before)
            before = kv(leader.state, "clock_s")
            r = c.post("/v1/jobs", json=job("late"))
            assert r.status_code == 201, r.text
            assert r.json()["arrives_at"] >= before and r.json()["submitted_at"] >= before, (r.json(), before)
    finally:
        assert standby.stop() == 0, standby.output()
        assert leader.stop() == 0, leader.output()
    assert "Traceback" not in leader.output() + standby.output()


EXTEND_CLUSTER = """\
name: extend-cluster
gpu_types:
  H20: {price_per_gpu_hour: 1.2}
  H800: {price_per_gpu_hour: 2.5}
cluster:
  clusters: [{name: a, inter_cluster_bw_gb_per_s: 100}, {name: b, inter_cluster_bw_gb_per_s: 100}]
  node_groups:
    - {name: h20, gpu_type: H20, count: 4, gpus_per_node: 8, host_dram_gb: 1024, cluster: a}
    - {name: h800, gpu_type: H800, count: 4, gpus_per_node: 8, host_dram_gb: 1024, cluster: b}
solver: {time_limit_s: 10}
"""


def test_an_admission_that_extends_a_running_members_rollout_pool_logs_the_migration_it_is_charged(tmp_path):
    """The apply charges the migration of every job whose nodes change (kv ``migration_usd``, the metric
    ``planner_migration_cost_usd_total``). An admission by ``extend-rollout-pool`` grows a running member's
    rollout nodes: it was charged, but its decision logged no migration, so the decision log did not add
    up to the counter (docs: a mandatory change's migration cost is still computed and logged)."""
    pytest.importorskip("formulation.placement")
    from planner.daemon.adapters.placement import WeavePlacer
    from planner.daemon.adapters.simcluster import SimCluster, Truth
    from planner.daemon.clock import ManualClock
    from planner.daemon.config import DaemonConfig
    from planner.daemon.cycle import Loop
    from planner.daemon.lease import Lease
    from planner.daemon.metrics import DaemonMetrics
    from planner.daemon.service import check_job
    from planner.daemon.store import Store
    from planner.schema import load_scenario
    from planner.schema.scenario import JobSpec

    cluster = load_scenario(write_cluster(tmp_path, EXTEND_CLUSTER))
    store = Store(tmp_path / "s.sqlite")
    clock = ManualClock(0.0)
    lease = Lease(store, 60.0)
    assert lease.try_acquire()[0]

    def spec(name):
        return JobSpec.model_validate(store.get_job(name).spec)

    loop = Loop(store, cluster, WeavePlacer(cluster), SimCluster(tmp_path / "s.sim", cluster, spec, Truth()), clock,
                DaemonConfig(period_s=60.0, clock="virtual"), lease, DaemonMetrics())
    jobs = [("llama", 0.0, job("llama", "llama3.1-8b", rollout={"batch_prompts": 128, "group_size": 4, "max_response_tokens": 4096},
                               trainer={"tp": 2}, slo={"ratio_to_solo": 1.3})),
            ("q14", 60.0, job("q14", "qwen2.5-14b", rollout={"batch_prompts": 64, "group_size": 8, "max_response_tokens": 4096, "tp": 2},
                              trainer={"tp": 4}, slo={"ratio_to_solo": 2.5}))]
    for name, at, body in jobs:
        s = JobSpec.model_validate(body)
        store.submit_job(name, s.model_dump(mode="json"), 0.0, at, check_job(cluster, s))
    for t in (0.0, 60.0):
        clock.set(t)
        loop.run_cycle()
    admits = {d["jobs"][0]: d for d in store.decisions(0, 1000, "admit")}
    assert admits["q14"]["outcome"] == "applied" and "extend-rollout-pool" in admits["q14"]["reasons"][0], admits["q14"]
    charged = store.get_kv("migration_usd")
    assert charged > 0
    logged = sum(d["migration_usd"] or 0.0 for d in store.decisions(0, 1000) if d["outcome"] == "applied")
    assert logged == pytest.approx(charged), (logged, charged, admits["q14"])
    assert any("llama (extended)" in r for r in admits["q14"]["reasons"]), admits["q14"]["reasons"]
