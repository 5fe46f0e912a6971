"""The HTTP API over real HTTP on loopback: a daemon process serving, requests through httpx."""

from __future__ import annotations

import json
import time

import pytest
from daemonproc import healthy, job, query, serve, wait_for

from formulation.realloc.telemetry import TelemetrySnapshot


@pytest.fixture(scope="module")
def daemon(tmp_path_factory):
    yield from serve(tmp_path_factory, "api", "--period-s", "0.2")


@pytest.fixture
def http(daemon):
    with daemon.client() as c:
        yield c


def snapshot(name: str, **over) -> dict:
    snap = {"job": name, "time_s": 12.5, "iteration": 3,
            "components": [{"name": "rollout", "kind": "rollout", "progress": 0.8},
                           {"name": "actor", "kind": "trainer", "progress": 0.0, "interruptible": False}],
            "workers": [{"worker_id": "r0", "component": "rollout", "node": "h20-0", "gpu_type": "H20", "kv_used_tokens": 100,
                         "kv_capacity_tokens": 1000, "tokens_per_s": 300.0},
                        {"worker_id": "t0", "component": "actor", "node": "h800-0", "gpu_type": "H800"}]}
    snap.update(over)
    return snap


def fields(resp) -> list[str]:
    return [p["field"] for p in resp.json()["problems"]]


def test_submit_runs_and_cancel_removes(http, daemon):
    r = http.post("/v1/jobs", json=job("api-a", duration_s=None))
    assert r.status_code == 201, r.text
    body = r.json()
    assert body["state"] == "pending" and body["slo_s"] > 0 and body["spec"]["components"] == ["rollout", "reference", "reward", "trainer"]
    wait_for(lambda: http.get("/v1/jobs/api-a").json()["state"] == "running", what="api-a running")
    detail = http.get("/v1/jobs/api-a").json()
    assert [e["to_state"] for e in detail["events"]] == ["pending", "admitted", "running"]
    assert detail["group"]["members"] == ["api-a"] and detail["group"]["rollout_type"] == "H20"
    plan = http.get("/v1/plan").json()
    assert plan["status"] == "applied" and any("api-a" in g["members"] for g in plan["placement"]["groups"])
    assert plan["document"]["kind"] and plan["document"]["solver"]["status"]
    r = http.post("/v1/telemetry", json=snapshot("api-a"))
    assert r.status_code == 202 and r.json()["job"] == "api-a"
    assert query(daemon.state, "SELECT COUNT(*) AS n FROM telemetry WHERE job='api-a'")[0]["n"] >= 1 or \
        http.get("/metrics").text.count("planner_telemetry_received_total 1.0") == 1
    r = http.delete("/v1/jobs/api-a")
    assert r.status_code == 202 and r.json()["cancel_requested"] is True
    wait_for(lambda: http.get("/v1/jobs/api-a").json()["state"] == "cancelled", what="api-a cancelled")
    assert http.delete("/v1/jobs/api-a").status_code == 409
    r = http.post("/v1/telemetry", json=snapshot("api-a"))
    assert r.status_code == 409 and fields(r) == ["job"] and "cancelled" in r.json()["problems"][0]["message"]
    dec = http.get("/v1/decisions", params={"limit": 1000}).json()["decisions"]
    kinds = {(d["kind"], d["outcome"]) for d in dec if "api-a" in d["jobs"]}
    assert ("admit", "applied") in kinds and ("departure", "applied") in kinds
    assert all(d["reasons"] for d in dec)


def test_bad_jobs_get_422_naming_the_field_and_never_reach_the_state(http, daemon):
    before = query(daemon.state, "SELECT COUNT(*) AS n FROM jobs")[0]["n"]
    cases = [
        (job("bad-1", rollout={"max_response_tokens": -5}), "rollout.max_response_tokens"),
        (job("bad-2", rollout={"max_respons_tokens": 5}), "rollout.max_respons_tokens"),
        (job("bad-3", rollout={"tp": 3}), "rollout.tp"),
        (job("bad-4", model="llama-9000"), "model"),
        (job("bad 5"), "name"),
        ({**job("bad-6"), "slo": {"iteration_s": 0.5}}, "slo.iteration_s"),
        (job("bad-7", rollout={"gpu_types": ["H100"]}), "rollout.gpu_types[0]"),
        (job("bad-8", trainer={"nodes": 9}), "trainer.nodes"),
        ({k: v for k, v in job("bad-9").items() if k != "rollout"}, "rollout"),
        # tool calls past fixed_latency_s's bound (86,400 s): the job's SLO came out near 2e9 s
        (job("bad-10", rollout={"turns": 2, "tools": {"latency": {"source": "quantiles", "quantiles": {"0": 1, "1": 1e9}}}}),
         "rollout.tools.latency"),
    ]
    for spec, field in cases:
        r = http.post("/v1/jobs", json=spec)
        assert r.status_code == 422, (field, r.text)
        assert field in fields(r), (field, r.json())
        assert all(p["message"] for p in r.json()["problems"])
    for raw, what in ((b"{not json", "not valid JSON"), (b"[1, 2]", ""), (b"", "")):
        r = http.post("/v1/jobs", content=raw, headers={"content-type": "application/json"})
        assert r.status_code == 422 and what in r.text
    assert query(daemon.state, "SELECT COUNT(*) AS n FROM jobs")[0]["n"] == before


def test_a_submitted_jobs_prompt_tokens_default_to_its_prompt_lengths_mean(http, daemon):
    """As in a scenario file (resolve_workloads): before, a job posted with prompt_lengths kept 512-token
    prompts, so the daemon accepted (and estimated at 512 tokens) a job `planner validate` refuses, and
    its loop then spent minutes estimating it."""
    r = http.post("/v1/jobs", json=job("prompts-table", rollout={"prompt_lengths": {"source": "quantiles",
                                                                                     "quantiles": {"0": 1000, "1": 3000}}}))
    assert r.status_code == 201, r.text
    assert r.json()["spec"]["rollout"]["prompt_tokens"] == 2000
    given = job("prompts-given", rollout={"prompt_tokens": 700, "prompt_lengths": {"source": "quantiles", "quantiles": {"0": 1000, "1": 3000}}})
    r = http.post("/v1/jobs", json=given)
    assert r.status_code == 201 and r.json()["spec"]["rollout"]["prompt_tokens"] == 700, r.text
    before = query(daemon.state, "SELECT COUNT(*) AS n FROM jobs")[0]["n"]
    huge = {"source": "quantiles", "quantiles": {"0": 1, "1": 8_000_000}}  # a 4M-token mean: the model fits no GPU
    r = http.post("/v1/jobs", json=job("prompts-huge", rollout={"prompt_lengths": huge}))
    assert r.status_code == 422 and fields(r) == ["model"] and "4002048-token" in r.text, r.text
    past = {"source": "quantiles", "quantiles": {"0": 1, "1": 10_000_000}}  # a mean past the most a prompt may have
    r = http.post("/v1/jobs", json=job("prompts-past", rollout={"prompt_lengths": past}))
    assert r.status_code == 422 and fields(r) == ["rollout.prompt_lengths"] and "at most 4,194,304" in r.text, r.text
    assert query(daemon.state, "SELECT COUNT(*) AS n FROM jobs")[0]["n"] == before
    for name in ("prompts-table", "prompts-given"):  # (their nodes back for the tests after this one)
        assert http.delete(f"/v1/jobs/{name}").status_code == 202
        wait_for(lambda n=name: http.get(f"/v1/jobs/{n}").json()["state"] == "cancelled", what=f"{name} cancelled")


def test_duplicates_unknowns_and_limits(http, daemon):
    assert http.post("/v1/jobs", json=job("dup", trainer={"nodes": 1})).status_code == 201
    r = http.post("/v1/jobs", json=job("dup"))
    assert r.status_code == 409 and fields(r) == ["name"]
    assert http.get("/v1/jobs/nobody").status_code == 404
    assert http.delete("/v1/jobs/nobody").status_code == 404
    assert http.get("/v1/jobs/bad%20name").status_code == 422
    r = http.post("/v1/jobs", content=b"{" + b" " * (2 << 20) + b"}", headers={"content-type": "application/json"})
    assert r.status_code == 413
    r = http.get("/v1/jobs", params={"state": "sleeping"})
    assert r.status_code == 422 and fields(r) == ["state[0]"]
    r = http.get("/v1/jobs", params={"limit": 0})
    assert r.status_code == 422 and fields(r) == ["limit"]
    listing = http.get("/v1/jobs", params={"state": ["pending", "admitted", "running"], "limit": 1000}).json()
    assert any(j["name"] == "dup" for j in listing["jobs"]) and set(listing["counts"]) >= {"pending", "running", "completed"}


def test_unknown_filter_values_are_refused_not_answered_empty(http, daemon):
    """GET /v1/decisions?kind=bogus was 200 with no decisions and GET /v1/cluster?job=nosuch 200 with no components,
    while GET /v1/jobs/nosuch is 404: a typo read as "nothing happened". Now a kind not among the decision kinds is a
    422 naming the parameter and the kinds, an unknown job a 404; a known value that matches nothing stays 200."""
    r = http.get("/v1/decisions", params={"kind": "bogus"})
    assert r.status_code == 422 and fields(r) == ["kind"], r.text
    msg = r.json()["problems"][0]["message"]
    for k in ("admit", "reject", "wait", "departure", "drift", "repair", "reoptimise", "realloc", "restore"):
        assert f"'{k}'" in msg, msg
    assert "'bogus'" in msg and r.json()["problems"][0]["fix"], r.text
    r = http.get("/v1/decisions", params={"kind": "Realloc"})
    assert r.status_code == 422 and fields(r) == ["kind"], r.text
    assert http.get("/v1/decisions", params={"kind": "departure", "since_id": 2**62}).json()["decisions"] == []  # known: 200
    r = http.get("/v1/cluster", params={"job": "nosuch"})
    assert r.status_code == 404 and fields(r) == ["job"] and "no job named 'nosuch'" in r.text, r.text
    assert http.get("/v1/jobs/nosuch").status_code == 404  # as the job's own resource says
    assert http.post("/v1/jobs", json=job("filtered", trainer={"nodes": 1})).status_code == 201
    wait_for(lambda: http.get("/v1/cluster").status_code == 200, what="the executor's first report")
    r = http.get("/v1/cluster", params={"job": "filtered"})  # known (pending, placed or running): 200
    assert r.status_code == 200 and all(c["job"] == "filtered" for c in r.json()["components"]), r.text


def test_bad_telemetry_gets_422_and_is_not_stored(http, daemon):
    assert http.post("/v1/jobs", json=job("tel", trainer={"nodes": 1})).status_code == 201
    wait_for(lambda: http.get("/v1/jobs/tel").json()["state"] in ("admitted", "running"), what="tel placed")
    before = query(daemon.state, "SELECT COUNT(*) AS n FROM telemetry WHERE job='tel'")[0]["n"]
    bad_worker = snapshot("tel")
    bad_worker["workers"][0]["kv_used_tokens"] = 5000  # above capacity: utilisation > 1
    unknown_component = snapshot("tel")
    unknown_component["workers"][1]["component"] = "actr"
    # nodes the daemon's cluster (h20-0..3, h800-0..3, 8 GPUs each) lacks or overfills: the reallocation planner
    # made pools of them and allocated GPUs there
    no_such_node = snapshot("tel")
    no_such_node["workers"][0]["node"] = "h20-9"
    overfull = snapshot("tel")
    overfull["workers"][1]["gpus"] = 16
    declared_64 = snapshot("tel", nodes=[{"node": "h20-0", "gpu_type": "H20", "gpus": 64}, {"node": "h800-0", "gpu_type": "H800", "gpus": 8}])
    cases = [
        (snapshot("tel", time_s=-1), "time_s"),
        (bad_worker, "workers[0]"),
        (snapshot("tel", components=[]), "components"),
        (unknown_component, ""),
        (snapshot("tel", extra=1), "extra"),
        (no_such_node, "workers[0].node"),
        (overfull, "workers[1].gpus"),
        (declared_64, "nodes[0].gpus"),
    ]
    refused0 = rejected(http)
    for snap, field in cases:
        r = http.post("/v1/telemetry", json=snap)
        assert r.status_code == 422, (field, r.text)
        assert any(f == field or f.startswith(field) for f in fields(r)), (field, r.json())
    r = http.post("/v1/telemetry", json=unknown_component)
    assert "Did you mean 'actor'" in r.text
    r = http.post("/v1/telemetry", json=no_such_node)
    assert "node 'h20-9' is not among the nodes of this daemon's cluster (they are h20-0 .. h20-3, h800-0 .. h800-3)" in r.text, r.text
    r = http.post("/v1/telemetry", json=declared_64)
    assert "64 GPUs on node 'h20-0'" in r.text and "gives it 8" in r.text, r.text
    r = http.post("/v1/telemetry", content=b'{"job": "tel", "job": "tel"}', headers={"content-type": "application/json"})
    assert r.status_code == 422, r.text  # refused by the strict JSON reader, before the schema
    r = http.post("/v1/telemetry", json=snapshot("ghost"))
    assert r.status_code == 404 and fields(r) == ["job"]
    r = http.post("/v1/telemetry", content=b"{" + b" " * (2 << 20) + b"}", headers={"content-type": "application/json"})
    assert r.status_code == 413
    # every refusal is counted under a reason docs/daemon.md's metrics list names (422s as invalid)
    refused = rejected(http)
    assert {k: refused.get(k, 0) - refused0.get(k, 0) for k in refused} == \
        {"invalid": len(cases) + 4, "unknown-job": 1, "too-large": 1, "not-placed": 0, "out-of-order": 0}, (refused0, refused)
    assert query(daemon.state, "SELECT COUNT(*) AS n FROM telemetry WHERE job='tel'")[0]["n"] == before
    # Every stored snapshot validates: nothing malformed reached the state.
    for row in query(daemon.state, "SELECT body FROM telemetry"):
        TelemetrySnapshot.model_validate(json.loads(row["body"]))


def test_telemetry_that_goes_back_in_time_is_refused_409_naming_the_job_and_both_instants(http, daemon):
    """A job's snapshots go forward: (iteration, time_s), time_s counting from the iteration's start. Before,
    an older snapshot (a delayed or replayed post) was answered 202 and stored; the loop's donor detector
    then skipped it with a warning in the log, and its phase timer started the older iteration over."""
    assert http.post("/v1/jobs", json=job("tel-order", trainer={"nodes": 1})).status_code == 201
    wait_for(lambda: http.get("/v1/jobs/tel-order").json()["state"] in ("admitted", "running"), what="tel-order placed")
    refused0 = rejected(http)
    assert http.post("/v1/telemetry", json=snapshot("tel-order", iteration=3, time_s=50.0)).status_code == 202
    r = http.post("/v1/telemetry", json=snapshot("tel-order", iteration=3, time_s=10.0))
    assert r.status_code == 409 and fields(r) == ["time_s"], r.text
    msg = r.json()["problems"][0]
    assert "'tel-order'" in msg["message"] and "iteration 3 at time_s 10" in msg["message"] and \
        "(iteration 3 at time_s 50)" in msg["message"] and "time order" in msg["fix"], r.text
    r = http.post("/v1/telemetry", json=snapshot("tel-order", iteration=2, time_s=90.0))  # a later time_s of an earlier iteration
    assert r.status_code == 409 and fields(r) == ["iteration"] and "iteration 2 at time_s 90" in r.text, r.text
    assert http.post("/v1/telemetry", json=snapshot("tel-order", iteration=3, time_s=50.0)).status_code == 202  # a retried post
    assert http.post("/v1/telemetry", json=snapshot("tel-order", iteration=4, time_s=1.0)).status_code == 202  # a new iteration
    r = http.post("/v1/telemetry", json=snapshot("tel-order", iteration=3, time_s=60.0))
    assert r.status_code == 409 and "(iteration 4 at time_s 1)" in r.text, r.text
    rows = query(daemon.state, "SELECT iteration, time_s FROM telemetry WHERE job='tel-order' ORDER BY id")
    assert [(x["iteration"], x["time_s"]) for x in rows] == [(3, 50.0), (3, 50.0), (4, 1.0)], rows  # nothing of the refused ones
    assert query(daemon.state, "SELECT telemetry_iteration AS i, telemetry_time_s AS t FROM jobs WHERE name='tel-order'") == \
        [{"i": 4, "t": 1.0}]
    refused = rejected(http)
    assert refused["out-of-order"] - refused0["out-of-order"] == 3 and refused["invalid"] == refused0["invalid"], (refused0, refused)
    assert http.delete("/v1/jobs/tel-order").status_code == 202
    wait_for(lambda: http.get("/v1/jobs/tel-order").json()["state"] == "cancelled", what="tel-order cancelled")


def rejected(http) -> dict:
    """planner_telemetry_rejected_total by reason, as /metrics says."""
    out = {"invalid": 0.0, "unknown-job": 0.0, "too-large": 0.0, "not-placed": 0.0, "out-of-order": 0.0}
    for line in http.get("/metrics").text.splitlines():
        if line.startswith("planner_telemetry_rejected_total{"):
            out[line.split('reason="', 1)[1].split('"', 1)[0]] = float(line.rsplit(" ", 1)[1])
    return out


def test_health_metrics_and_openapi(http, daemon):
    h = http.get("/v1/health").json()
    assert healthy(h) and h["role"] == "applier" and h["cycle"] > 0 and "pid" in h["lease_holder"], h
    assert http.get("/healthz").json() == {"status": "ok"} and http.get("/readyz").status_code == 200
    m = http.get("/metrics")
    assert m.status_code == 200 and m.headers["content-type"].startswith("text/plain")
    for name in ("planner_decisions_total", "planner_solve_seconds_bucket", "planner_migrations_total", "planner_slo_attainment_ratio",
                 "planner_predictor_error", "planner_cycles_total", "planner_jobs", "planner_lease_held 1.0"):
        assert name in m.text, name
    spec = http.get("/openapi.json").json()
    assert set(spec["paths"]) >= {"/v1/jobs", "/v1/jobs/{name}", "/v1/telemetry", "/v1/plan", "/v1/decisions", "/v1/health", "/metrics"}
    assert "422" in spec["paths"]["/v1/jobs"]["post"]["responses"] and "409" in spec["paths"]["/v1/jobs"]["post"]["responses"]


def tail_snapshot(job: str, t: float, iteration: int = 3) -> dict:
    """A rollout tail: 6 of 8 engines hold one request each at 0.5% KV (DynaRL's donors), 2 still busy."""
    workers = [{"worker_id": f"r{k}", "component": "rollout", "node": "h20-0", "gpu_type": "H20", "kv_used_tokens": 500 if k < 6 else 60000,
                "kv_capacity_tokens": 100000, "tokens_per_s": 40.0 if k < 6 else 300.0, "requests_in_flight": 1 if k < 6 else 6}
               for k in range(8)]
    workers += [{"worker_id": "ref0", "component": "ref", "node": "h800-0", "gpu_type": "H800", "gpus": 4, "tokens_per_s": 20000.0},
                {"worker_id": "t0", "component": "actor", "node": "h800-0", "gpu_type": "H800", "gpus": 4, "tokens_per_s": 8000.0}]
    return {"job": job, "time_s": t, "iteration": iteration, "workers": workers,
            "components": [{"name": "rollout", "kind": "rollout", "progress": 0.85}, {"name": "ref", "kind": "reference", "progress": 0.3},
                           {"name": "actor", "kind": "trainer", "progress": 0.0, "interruptible": False}]}


def test_a_rollout_tail_in_telemetry_triggers_a_reallocation_decision(http, daemon):
    assert http.post("/v1/jobs", json=job("rl", trainer={"nodes": 1})).status_code == 201
    wait_for(lambda: http.get("/v1/jobs/rl").json()["state"] == "running", what="rl running")
    for t in (100.0, 103.0, 108.0):  # below U_low for 8 s > T = 5 s
        assert http.post("/v1/telemetry", json=tail_snapshot("rl", t)).status_code == 202

    def realloc():
        ds = http.get("/v1/decisions", params={"kind": "realloc", "limit": 1000}).json()["decisions"]
        return [d for d in ds if d["jobs"] == ["rl"]]

    ds = wait_for(realloc, what="a reallocation decision")
    d = ds[0]
    assert d["triggers"] == ["donor(rollout)"] and d["reasons"] and d["outcome"] in ("applied", "not-committed")
    assert d["solver"]["status"] in ("optimal", "feasible")
    m = http.get("/metrics").text
    assert 'planner_solve_seconds_count{kind="realloc"}' in m


def test_hostile_bodies_get_bounded_escaped_422s(http, daemon):
    """What an outside audit sent: each refusal is a 422 naming the field, its texts escaped and cut as
    docs/inputs.md promises (50 problems, messages of 2,000 characters), and nothing is stored."""
    before = query(daemon.state, "SELECT COUNT(*) AS n FROM jobs")[0]["n"]
    assert http.post("/v1/jobs", json=job("hostile", trainer={"nodes": 1})).status_code == 201

    def post(url: str, body: dict, **kw):
        return http.post(url, content=json.dumps(body).encode(), headers={"content-type": "application/json"}, **kw)

    # a lone surrogate in a key of a reallocation context: was a 500 (the key echoed could not be encoded)
    r = post("/v1/jobs/hostile/realloc-context", {"version": 1, "\ud800": 1})
    assert r.status_code == 422, r.text
    assert "\\ud800" in r.text
    # a boolean is not the context version (True == 1 in Python)
    r = post("/v1/jobs/hostile/realloc-context", {"version": True})
    assert r.status_code == 422 and "version" in fields(r), r.text
    # a 500,000-character unknown key, and 20,000 unknown keys: bounded answers
    r = post("/v1/jobs", {**job("hostile-2"), "k" * 500_000: 1})
    assert r.status_code == 422 and len(r.content) < 10_000, len(r.content)
    r = post("/v1/jobs", {**job("hostile-3"), **{f"x{i}": 1 for i in range(20_000)}})
    assert r.status_code == 422 and len(r.json()["problems"]) == 51 and "19950 more" in r.json()["problems"][-1]["message"]
    # control characters in a model's name and in a worker id (the CLI refuses both)
    spec = job("hostile-4")
    spec["model"] = {"name": "evil\u001b[2J", "hidden_size": 64, "num_layers": 1, "num_heads": 1, "num_kv_heads": 1,
                     "intermediate_size": 64, "vocab_size": 100}
    r = post("/v1/jobs", spec)
    assert r.status_code == 422 and fields(r) == ["model.name"], r.text
    snap = snapshot("hostile")
    snap["workers"][0]["worker_id"] = "evil\u001b[31mRED\n2026 FAKE LOG LINE"
    r = post("/v1/telemetry", snap)
    assert r.status_code == 422 and fields(r) == ["workers[0].worker_id"], r.text
    # quantile keys that are one number would merge silently
    spec = job("hostile-5", rollout={"response_lengths": {"source": "quantiles", "quantiles": {"0": 100, "0.0": 3000, "1": 4000}}})
    r = post("/v1/jobs", spec)
    assert r.status_code == 422 and fields(r) == ["rollout.response_lengths.quantiles"], r.text
    # a union's branch markers are not fields; a body sent as text says so; a query error has a fix
    r = post("/v1/jobs", {**job("hostile-6"), "model": {}})
    assert r.status_code == 422 and all("constrained" not in f for f in fields(r)), r.text
    r = http.post("/v1/jobs", content=json.dumps(job("hostile-7")).encode(), headers={"content-type": "text/plain"})
    assert r.status_code == 422 and "Content-Type: application/json" in r.json()["problems"][0]["fix"], r.text
    r = http.post("/v1/jobs", content=json.dumps(job("hostile-8")).encode())  # no Content-Type at all ("a valid dictionary")
    assert "content-type" not in {k.lower() for k in r.request.headers}
    assert r.status_code == 422 and "without a Content-Type" in r.json()["problems"][0]["message"], r.text
    assert "Content-Type: application/json" in r.json()["problems"][0]["fix"], r.text
    r = http.get("/v1/jobs", params={"limit": 0})
    assert r.status_code == 422 and r.json()["problems"][0]["fix"], r.text
    assert query(daemon.state, "SELECT COUNT(*) AS n FROM jobs")[0]["n"] == before + 1


def test_health_is_degraded_while_each_cycle_overruns_the_period_and_readyz_stays_200(tmp_path):
    """/v1/health said ok while every cycle took longer than the period (short of the stall limit): decisions came
    later than --period-s says and nothing told. Now three cycles in a row over the period make it degraded with a
    problem naming the period and the lag; /readyz stays 200 (the loop makes progress); one cycle within the period
    clears it. In process, the cycles' wall times given (no test waits on the machine's speed)."""
    import warnings

    from daemonproc import write_cluster

    from planner.daemon.api import asgi_app
    from planner.daemon.clock import WallClock
    from planner.daemon.config import DaemonConfig
    from planner.daemon.lease import Lease
    from planner.daemon.metrics import DaemonMetrics
    from planner.daemon.service import Options, Service, load_cluster
    from planner.daemon.store import Store

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from fastapi.testclient import TestClient

    store = Store(tmp_path / "s.sqlite")
    try:
        cluster, _ = load_cluster(store, write_cluster(tmp_path))
        lease = Lease(store, 3600.0)
        assert lease.try_acquire()[0]
        svc = Service(Options(state=tmp_path / "s.sqlite", cfg=DaemonConfig(period_s=2.0)), store, cluster, WallClock(), DaemonMetrics(),
                      lease)
        svc.role = "applier"
        with TestClient(asgi_app(svc), raise_server_exceptions=False) as c:
            def health() -> dict:
                r = c.get("/v1/health")
                assert r.status_code == 200, r.text
                return r.json()

            assert health()["status"] == "ok" and health()["ready"] is True
            for w in (0.5, 9.0, 2.5):  # one cycle within the period among them: not behind
                svc.note_cycle(w)
            assert health()["status"] == "ok" and health()["problems"] == []
            for w in (2.5, 3.0, 3.25):  # SLOW_CYCLES in a row
                svc.note_cycle(w)
            svc.last_cycle_wall = time.time() - 3.5
            h = health()
            assert h["status"] == "degraded" and h["ready"] is True and len(h["problems"]) == 1, h
            said = h["problems"][0]
            assert said.startswith("the loop falls behind its period: each of its last 3 cycles took longer than the period of 2 s "
                                   "(2.50, 3.00, 3.25 s), the last 1.25 s over; loop lag 3."), said
            assert "raise --period-s" in said
            r = c.get("/readyz")
            assert r.status_code == 200 and r.json() == {"status": "ok"}, r.text
            svc.note_cycle(0.1)
            h = health()
            assert h["status"] == "ok" and h["problems"] == [] and c.get("/readyz").status_code == 200, h
            for w in (5.0, 5.0, 5.0):
                svc.note_cycle(w)
            svc.last_error = "cycle 9 failed: RuntimeError: boom"  # another problem: not ready, as before
            r = c.get("/readyz")
            assert r.status_code == 503 and "boom" in r.text and "falls behind" in r.text, r.text
            assert health()["ready"] is False
            svc.last_error = None
            import dataclasses

            svc.cfg = dataclasses.replace(svc.cfg, period_s=0.001)  # cycles of milliseconds: figures that show them over it
            for w in (0.0042, 0.0061, 0.0035):
                svc.note_cycle(w)
            said = health()["problems"][0]
            assert "the period of 0.001 s (0.0042, 0.0061, 0.0035 s), the last 0.0025 s over" in said, said
    finally:
        store.close()


def test_a_job_reports_its_own_end_and_the_loop_takes_it_out_of_the_plan(http, daemon):
    """``POST /v1/jobs/{name}/end``: the job's own report (the only way a job under ``--backend ray``
    ends other than by a cancel). The next cycle moves it to that state with the job's words in its
    reason, takes it out of the plan (a departure decision) and refuses a second, different report."""
    for name, body, state in (("api-end-a", {"outcome": "completed", "message": "all 300 iterations done"}, "completed"),
                              ("api-end-b", {"outcome": "failed", "message": "loss is NaN at iteration 41"}, "failed"),
                              ("api-end-c", None, "completed")):  # an empty body: completed
        assert http.post("/v1/jobs", json=job(name, duration_s=None)).status_code == 201
        wait_for(lambda name=name: http.get(f"/v1/jobs/{name}").json()["state"] == "running", what=f"{name} running")
        r = http.post(f"/v1/jobs/{name}/end", **({"json": body} if body is not None else {}))
        assert r.status_code == 202, r.text
        assert r.json()["end_reported"]["outcome"] == state and r.json()["state"] == "running"
        again = http.post(f"/v1/jobs/{name}/end", **({"json": body} if body is not None else {}))
        assert again.status_code in (202, 409), again.text  # (the same report again: accepted, or the loop acted already)
        wait_for(lambda name=name, state=state: http.get(f"/v1/jobs/{name}").json()["state"] == state, what=f"{name} {state}")
        detail = http.get(f"/v1/jobs/{name}").json()
        assert "reported by the job" in detail["reason"] and (body is None or body["message"] in detail["reason"]), detail["reason"]
        assert detail["events"][-1]["to_state"] == state
        wait_for(lambda name=name: all(name not in g["members"] for g in http.get("/v1/plan").json()["placement"]["groups"]),
                 what=f"a plan without {name}")
        r = http.post(f"/v1/jobs/{name}/end", json={"outcome": "completed"})
        assert r.status_code == 409 and fields(r) == ["name"] and state in r.json()["problems"][0]["message"]
    dec = http.get("/v1/decisions", params={"limit": 1000}).json()["decisions"]
    assert any(d["kind"] == "departure" and "api-end-b" in d["jobs"] and any("loss is NaN" in x for x in d["reasons"]) for d in dec)


def test_an_end_report_that_cannot_be_taken_is_refused_naming_the_field(http, daemon):
    assert http.post("/v1/jobs/no-such-job/end", json={}).status_code == 404
    # a job that has not arrived yet is pending: it never ran, so it cannot end (a cancel removes it)
    assert http.post("/v1/jobs", json=job("api-end-later", arrival_s=10**7)).status_code == 201
    r = http.post("/v1/jobs/api-end-later/end", json={})
    assert r.status_code == 409 and fields(r) == ["name"] and "DELETE /v1/jobs/api-end-later" in r.json()["problems"][0]["fix"]
    for body, field in (({"outcome": "done"}, "outcome"), ({"message": "two\nlines"}, "message"),
                        ({"message": "x" * 501}, "message"), ({"outcome": "completed", "extra": 1}, "extra")):
        r = http.post("/v1/jobs/api-end-later/end", json=body)
        assert r.status_code == 422 and field in fields(r)[0], (body, r.text)
    assert http.get("/v1/jobs/api-end-later").json()["end_reported"] is None
    assert http.delete("/v1/jobs/api-end-later").status_code == 202
