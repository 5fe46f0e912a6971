"""Closed loop: the daemon replays a Pollux job-arrival trace on the simulated cluster.

The trace is the first jobs of ``pollux-workloads/workloads/workload-2.csv`` mapped to RL jobs by
``scenarios/generate_traces.py`` (its ``TEMPLATES`` and ``jobs_from``), on a fleet small enough that
jobs wait for room. The simulated cluster runs each job 0.9-1.25x slower or faster than estimated
(a hidden factor per job) with +-2% noise per iteration, so the daemon must measure, update its
estimates and repair. Three real daemon processes on a virtual clock:

* the daemon as deployed (admission, repair, periodic and departure re-optimisation, gate);
* greedy admission alone (``--no-reoptimise``): the cost baseline;
* the first again, killed with SIGKILL midway and restarted on the same files.

Asserts: every job was admitted and ended with its last measured iteration within its SLO; the
daemon's cost (plans in force integrated over time, plus migration costs) is no worse than greedy
admission's; the interrupted run's final state equals the uninterrupted run's.
"""

from __future__ import annotations

import csv
import json
import os
import random
import signal

import pytest
import yaml
from daemonproc import DaemonProc, kv, query, wait_for

from tests.conftest import shared_data

# The default run replays the first 6 jobs of the trace (22 CPU s for the module, idle; 8 jobs took 30 s; 12 jobs
# more and exercise nothing more: admission, departures, repair, drift and periodic re-optimisation, two of them
# applied, all happen with 6, and the daemon's cost is 16% below greedy admission's, 2026-12-07; 1% below, 158.06 against
# 159.61 $, since the simulated truth is the daemon's own estimate times each job's factor, 2026-12-07 evening);
# RL_PLANNER_SLOW=1 replays 30 (184 CPU s). RL_PLANNER_LOOP_JOBS=N picks another count.
N_JOBS = 30 if os.environ.get("RL_PLANNER_SLOW") == "1" else int(os.environ.get("RL_PLANNER_LOOP_JOBS", "6"))
PERIOD_S = 300
# --placer auto: the co-execution planner (formulation.placement) in a build that has it, else every job alone
# --reoptimise-time-limit-s: far above what a re-optimisation takes idle (see above)
COMMON = ["--clock", "virtual", "--period-s", str(PERIOD_S), "--until-idle", "--reoptimise-every-s", "1800", "--reoptimise-time-limit-s", "60",
          "--sim-slowdown", "0.9:1.25", "--sim-noise", "0.02", "--sim-seed", "7", "--lease-ttl-s", "30", "--placer", "auto"]


def trace_scenario(tmp):
    from scenarios.generate_traces import HEADER, jobs_from

    rows = list(csv.DictReader(open(shared_data("pollux-workloads", "workloads", "workload-2.csv"))))[:N_JOBS]
    jobs = jobs_from(rows, random.Random(8), 1.0, 2.0)  # arrivals as in the trace, durations: 2 h median
    header = json.loads(json.dumps(HEADER))
    for g in header["cluster"]["node_groups"]:
        g["count"] = 12
    # wall-clock limits far above what the solves take idle, so that a loaded machine cuts none short
    # (a cut solve would make the replay depend on the machine's speed)
    doc = {"name": "pollux-w2-40", **header, "jobs": jobs, "solver": {"time_limit_s": 30}}
    p = tmp / "trace.yaml"
    p.write_text(yaml.safe_dump(doc, sort_keys=False))
    return p


def final_state(state) -> dict:
    """Everything a run decided, minus wall-clock artefacts (solve times, lease epochs, apply notes)."""
    return {
        "jobs": query(state, "SELECT name, state, submitted_at, arrives_at, admitted_at, started_at, ended_at, slo_s, reason, "
                             "iterations, last_iteration_s, slo_misses FROM jobs ORDER BY name"),
        "events": query(state, "SELECT job, at, from_state, to_state, reason FROM job_events ORDER BY job, id"),
        "plans": query(state, "SELECT cycle, status, cost_per_hour, placement FROM plans ORDER BY id"),
        "decisions": query(state, "SELECT cycle, at, kind, outcome, jobs, cost_before, cost_after, gain_usd, migration_usd "
                                  "FROM decisions ORDER BY id"),
        "cost_usd": kv(state, "cost_usd"), "migration_usd": kv(state, "migration_usd", 0.0), "cycle": kv(state, "cycle"),
        "estimates": kv(state, "estimates")["factor"],
    }


# Deadlines for waits on events, generous because a loaded 2-core machine runs the replays several
# times slower than an idle one (the test asserts decisions, never speed).
REPLAY_S = 1800.0


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("loop")
    scen = trace_scenario(tmp)
    out = {}
    started = []
    try:
        # The daemon's and greedy admission's replays run side by side (separate processes and state files, a
        # virtual clock each: neither sees the other; the machine's two cores each take one).
        for name, extra in (("daemon", []), ("greedy", ["--no-reoptimise"])):
            d = DaemonProc(tmp, "--scenario", str(scen), *COMMON, *extra, state=tmp / f"{name}.sqlite", name=name)
            started.append(d)
            out[name] = d
        assert out["daemon"].wait(REPLAY_S, what="the daemon replay to finish (--until-idle)") == 0, out["daemon"].output()
        # The same replay, killed midway (SIGKILL: no chance to clean up) and restarted; it starts once the
        # daemon's replay has ended (its cycle count sets the midway point), while greedy admission's may still run.
        cycles = kv(out["daemon"].state, "cycle")
        state = tmp / "killed.sqlite"
        d = DaemonProc(tmp, "--scenario", str(scen), *COMMON, "--pace-s", "0.02", state=state, name="killed")
        started.append(d)
        wait_for(lambda: (kv(state, "cycle", 0) or 0) >= cycles // 2 or not d.running(), timeout=REPLAY_S, every=0.01,
                 what=f"the killed run's replay to reach half the cycles ({cycles // 2} of {cycles})")
        assert d.running(), f"the run to be killed ended before half its cycles:\n{d.output()}"
        d.signal(signal.SIGKILL)
        assert d.wait(what="the SIGKILLed daemon to exit") == -signal.SIGKILL
        out["killed_at"] = kv(state, "cycle")
        again = DaemonProc(tmp, "--scenario", str(scen), *COMMON, state=state, name="restarted")
        started.append(again)
        assert again.wait(REPLAY_S, what="the restarted replay to finish (--until-idle)") == 0, again.output()
        out["restarted"] = again
        assert out["greedy"].wait(REPLAY_S, what="the greedy replay to finish (--until-idle)") == 0, out["greedy"].output()
    finally:
        for d in started:  # ended also when a wait above failed: no orphan daemon
            if d.running():
                d.kill()
    return out


def test_every_admitted_job_ends_within_its_slo(runs):
    jobs = query(runs["daemon"].state, "SELECT * FROM jobs")
    assert len(jobs) == N_JOBS
    assert {j["state"] for j in jobs} == {"completed"}, [(j["name"], j["state"], j["reason"]) for j in jobs if j["state"] != "completed"]
    for j in jobs:
        assert j["iterations"] > 0 and j["last_iteration_s"] is not None, j["name"]
        assert j["last_iteration_s"] <= j["slo_s"] * (1 + 1e-9), (j["name"], j["last_iteration_s"], j["slo_s"])
    # The daemon really replanned: it measured drift, and it re-optimised periodically and on departures.
    kinds = {d["kind"] for d in query(runs["daemon"].state, "SELECT DISTINCT kind FROM decisions")}
    assert {"admit", "departure", "reoptimise", "drift"} <= kinds, kinds
    assert any(abs(f["rollout"] - 1.0) > 0.05 for f in kv(runs["daemon"].state, "estimates")["factor"].values()) or \
        query(runs["daemon"].state, "SELECT COUNT(*) AS n FROM decisions WHERE kind='drift'")[0]["n"] > 0


def test_cost_no_worse_than_greedy_admission_alone(runs):
    daemon = kv(runs["daemon"].state, "cost_usd") + kv(runs["daemon"].state, "migration_usd", 0.0)
    greedy = kv(runs["greedy"].state, "cost_usd") + kv(runs["greedy"].state, "migration_usd", 0.0)
    assert daemon > 0 and greedy > 0
    assert daemon <= greedy * (1 + 1e-9), (daemon, greedy)
    greedy_jobs = query(runs["greedy"].state, "SELECT state, last_iteration_s, slo_s FROM jobs")
    assert {j["state"] for j in greedy_jobs} == {"completed"}


def test_killed_and_restarted_run_ends_in_the_same_state(runs):
    assert 0 < runs["killed_at"] < kv(runs["daemon"].state, "cycle")
    # Same inputs give the same decisions only if no solve was cut short by its wall-clock limit:
    # column generation converged and the integer master finished (a proof of optimality is not
    # needed: with move prices the planner claims none, docs/placement.md).
    solves = query(runs["daemon"].state, "SELECT id, kind, json_extract(solver, '$.status') AS s, json_extract(solver, '$.message') AS m "
                                         "FROM decisions WHERE kind IN ('reoptimise', 'repair') AND solver != '{}'")
    assert solves, "the daemon re-optimised nothing"
    cut = [(d["id"], d["kind"], d["m"]) for d in solves
           if d["s"] != "optimal" and not ("(converged)" in d["m"] and "integer master: Optimal" in d["m"])]
    assert not cut, f"a re-optimisation stopped at its time limit: the replay is not deterministic: {cut}"
    a, b = final_state(runs["daemon"].state), final_state(runs["restarted"].state)
    for key in a:
        assert a[key] == b[key], key
