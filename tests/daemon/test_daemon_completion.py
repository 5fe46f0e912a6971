"""The daemon runs the completion decision of ``planner simulate --policy dynamic`` and ``planner realloc --decision
completion``: a job's reallocation context posted over HTTP (POST /v1/jobs/{name}/realloc-context), its telemetry
posted after it, and the daemon's decision record equals the command's on the same snapshots and context.

One real daemon process on loopback (wall clock, solo placer, the executor's simulated backend, ``--realloc-decision
completion``), the job and its snapshots and context taken from a simulation of the 7B job of
``tests/realloc/test_completion_paths.py`` up to the completion decision's first solve. The snapshots name the
simulator's components and workers, not the executor's, so the daemon's apply of the committed body is refused by
the executor: what is compared is the decision. That a completion body is what the executor applies is checked
in-process on the executor's own state (:func:`test_a_completion_body_is_what_the_executor_applies`).
"""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import numpy as np
import pytest
from daemonproc import DaemonProc, query, wait_for

from planner.instances.completion_io import context_to_data
from tests.realloc.test_completion_paths import first_solve_in

JOB = "math-small"
TOKENS = {"admin": "admin-token-0123456789abcdef", "reader": "read-token-0123456789abcdef",
          "poster": "telemetry-token-0123456789abcdef"}
MAX_CONTEXT = 3_000_000  # --max-context-bytes of the daemon below


def _tokens(tmp: Path) -> Path:
    p = tmp / "tokens"
    p.write_text(f"{TOKENS['admin']}\nreader read {TOKENS['reader']}\nposter telemetry {TOKENS['poster']}\n")
    p.chmod(0o600)
    return p


def _bearer(name: str) -> dict:
    return {"Authorization": f"Bearer {TOKENS[name]}"}


def _stored(state: Path) -> list[dict]:
    return query(state, "SELECT job, time_s, iteration, body FROM realloc_ctx")


def _padded(data: dict, times: int) -> dict:
    """The context with the rollout's request list repeated ``times`` times (a larger body, still valid)."""
    d = json.loads(json.dumps(data))
    req = d["components"]["rollout"]["requests"]
    for k in ("engine", "group", "generated", "context", "running", "prompt"):
        req[k] = req[k] * times
    return d


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("completion")
    fired = first_solve_in(tmp)
    scen = fired["scenario"]
    ctx = context_to_data(fired["ctx"])
    snaps = [s.model_dump(mode="json") for s in fired["snaps"]]
    out: dict = {"tmp": tmp, "fired": fired, "ctx": ctx, "snaps": snaps, "scenario": scen}
    d = DaemonProc(tmp, "--scenario", str(scen), "--placer", "solo", "--period-s", "0.3", "--realloc-decision", "completion",
                   "--token-file", str(_tokens(tmp)), "--max-context-bytes", str(MAX_CONTEXT), "--rate-limit", "0")
    out["daemon"] = d
    url = f"/v1/jobs/{JOB}/realloc-context"
    with httpx.Client(base_url=d.url, timeout=30.0, headers=_bearer("admin")) as http:
        wait_for(lambda: http.get(f"/v1/jobs/{JOB}").json()["state"] == "running", what="the job running")
        # refusals first: nothing may be stored by them
        out["anonymous"] = http.post(url, json=ctx, headers={"Authorization": ""})
        out["reader"] = http.post(url, json=ctx, headers=_bearer("reader"))
        bad = json.loads(json.dumps(ctx))
        bad["components"]["trainer"]["gpus"] = -2
        out["bad"] = http.post(url, json=bad, headers=_bearer("poster"))
        gone = json.loads(json.dumps(ctx))
        del gone["components"]["reference"]["pending"]
        out["missing"] = http.post(url, json=gone, headers=_bearer("poster"))
        huge_int = json.dumps(ctx).replace('"total_gpus": 32', '"total_gpus": ' + "9" * 400).encode()
        assert b"9" * 400 in huge_int
        out["overflow"] = http.post(url, content=huge_int, headers={**_bearer("poster"), "content-type": "application/json"})
        out["unknown_job"] = http.post("/v1/jobs/no-such-job/realloc-context", json=ctx, headers=_bearer("poster"))
        out["stored_after_refusals"] = _stored(d.state)
        # over the 1 MiB of every other body, under --max-context-bytes: accepted; over it: 413
        one, per = len(json.dumps(ctx)), len(json.dumps(_padded(ctx, 2))) - len(json.dumps(ctx))  # bytes per copy of the requests
        big = json.dumps(_padded(ctx, max(2, ((1 << 20) - one) // per + 2))).encode()
        out["big_size"] = len(big)
        out["big"] = http.post(url, content=big, headers={**_bearer("poster"), "content-type": "application/json"})
        huge = json.dumps(_padded(ctx, (MAX_CONTEXT - one) // per + 2)).encode()
        assert len(huge) > MAX_CONTEXT
        out["huge"] = http.post(url, content=huge, headers={**_bearer("poster"), "content-type": "application/json"})
        # the context of the last snapshot, then the snapshots (a cycle may take them in several batches: the
        # decision decides only at the batch that reaches the context's time)
        out["good"] = http.post(url, json=ctx, headers=_bearer("poster"))
        out["stored"] = _stored(d.state)
        for s in snaps:
            r = http.post("/v1/telemetry", json=s, headers=_bearer("poster"))
            assert r.status_code == 202, r.text

        def decided():
            ds = http.get("/v1/decisions", params={"kind": "realloc", "limit": 1000}).json()["decisions"]
            return [x for x in ds if x["solver"].get("record") and x["outcome"] not in ("applying",)]

        out["decisions"] = wait_for(decided, what="the completion decision recorded")
        out["audit"] = http.get("/v1/audit", params={"limit": 1000}).json()["entries"]
    assert d.stop() == 0, d.output()
    return out


def test_the_daemon_makes_the_same_decision_as_planner_realloc(run, tmp_path, capsys):
    from planner.cli import main as cli_main

    snaps = tmp_path / "snaps.jsonl"
    snaps.write_text("".join(json.dumps(s) + "\n" for s in run["snaps"]))
    ctx = tmp_path / "ctx.json"
    ctx.write_text(json.dumps(run["ctx"]))
    rc = cli_main(["realloc", str(snaps), "--decision", "completion", "--scenario", str(run["scenario"]), "--context", str(ctx),
                   "--hold-s", "4", "--json"])  # the decision's own T (CompletionPlannerDecision's window_s), as the daemon runs it
    assert rc == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["fired"]
    ds = run["decisions"]
    assert len(ds) == 1, ds
    solver = ds[0]["solver"]
    assert solver["decision"] == "completion" and solver["context"] == {"iteration": run["ctx"]["iteration"], "time_s": run["ctx"]["time_s"]}
    rec, cli = solver["record"], doc["record"]
    assert rec["current"] == cli["current"] and rec["target"] == cli["target"]
    assert rec["committed"] == cli["committed"]
    assert rec["completion_keep_s"] == pytest.approx(cli["completion_keep_s"], rel=1e-9)
    assert rec["completion_s"] == pytest.approx(cli["completion_s"], rel=1e-9)
    assert rec["proxy"] == pytest.approx(cli["proxy"], rel=1e-9) and rec["proxy_keep"] == pytest.approx(cli["proxy_keep"], rel=1e-9)
    if doc["committed"]:
        assert solver["target"] == doc["target"]
        # the reason says it is the completion decision, with both completion times and the proxy
        reason = ds[0]["reasons"][0]
        assert reason.startswith("completion decision, committed")
        assert f"{cli['completion_keep_s']:.1f} s if kept" in reason and f"{cli['completion_s']:.1f} s chosen" in reason
        assert "min-over-stages proxy" in reason
        # the snapshots name the simulator's workers, which the executor does not run: the apply is refused, said
        assert ds[0]["outcome"] == "failed", ds[0]
        assert "does not run" in ds[0]["reasons"][-1] or "worker" in ds[0]["reasons"][-1], ds[0]["reasons"]


def test_refused_contexts_are_named_and_never_stored(run):
    assert run["anonymous"].status_code == 401, run["anonymous"].text
    assert run["reader"].status_code == 403 and "telemetry" in run["reader"].text, run["reader"].text
    for key, field in (("bad", "components.trainer.gpus"), ("missing", "components.reference.pending")):
        r = run[key]
        assert r.status_code == 422, r.text
        assert [p["field"] for p in r.json()["problems"]] == [field], r.text
    assert run["overflow"].status_code == 422, run["overflow"].text  # a number no array holds: refused, not a server error
    assert run["unknown_job"].status_code == 404, run["unknown_job"].text
    assert run["stored_after_refusals"] == []
    assert run["huge"].status_code == 413, run["huge"].text[:300]
    # every post, refused or not, is in the audit log with its status
    posts = [(e["identity"], e["status"]) for e in run["audit"] if e["path"].endswith("/realloc-context")]
    assert ("-", 401) in posts and ("reader", 403) in posts and ("poster", 422) in posts and ("poster", 202) in posts


def test_an_accepted_context_is_kept_as_json_latest_per_job(run):
    assert run["big_size"] > 1 << 20 and run["big"].status_code == 202, run["big"].text[:300]
    assert run["good"].status_code == 202, run["good"].text
    got = run["good"].json()
    ctx = run["ctx"]
    assert got == {"job": JOB, "iteration": ctx["iteration"], "time_s": ctx["time_s"],
                   "requests": len(ctx["components"]["rollout"]["requests"]["engine"])}
    rows = run["stored"]
    assert len(rows) == 1 and rows[0]["job"] == JOB and rows[0]["iteration"] == ctx["iteration"]
    stored = json.loads(rows[0]["body"])  # JSON text, the context as context_to_data writes it
    assert stored == json.loads(json.dumps(ctx))


def _placed():
    """tests/apply/realloc_case.py's job placed on the simulated backend: (backend, journal, observed state)."""
    from executor.backends.base import observe
    from executor.backends.sim import SimBackend
    from executor.controller import Executor
    from executor.diff import diff
    from executor.journal import Journal
    from executor.state import Node
    from executor.target import to_state
    from tests.apply import realloc_case as case

    nodes = [Node("t", "H100", 4, 512.0), Node("u", "H100", 4, 512.0)]
    b = SimBackend(nodes, ticks_per_call=1)
    j = Journal(":memory:")
    res = Executor(b, j).apply(diff(observe(b), to_state(case.placed([vars(n) for n in nodes]))).steps, "placed")
    assert res.status == "done", res.message
    return b, j, observe(b)


def test_a_completion_body_is_what_the_executor_applies():
    """A completion target on the executor's own state (tests/apply/realloc_case.py: four engines on node t, trainer
    TP 1 x DP 3 and the reference engine on u) becomes a ReallocPlan body that validates, that the executor's
    from_realloc accepts, and that the simulated backend applies."""
    from executor.adapters.plans import from_realloc
    from executor.backends.base import observe
    from executor.controller import Executor
    from executor.diff import diff
    from executor.target import to_state
    from formulation.realloc.plan import ReallocPlan
    from formulation.realloc.telemetry import TelemetrySnapshot
    from planner.apply.telemetry import job_snapshot, tail_loads
    from planner.daemon.adapters.completion import plan_body
    from tests.apply import realloc_case as case

    b, j, before = _placed()
    try:
        engines = [w.id for w in sorted(before.components[f"{case.JOB}/rollout"].live_workers(), key=lambda w: w.index)]
        snap = TelemetrySnapshot.model_validate(job_snapshot(before, case.JOB, time_s=100.0, iteration=3, progress=case.PROGRESS,
                                                             loads=tail_loads(engines, case.PROGRESS["rollout"], max_batch=8)))
        target = {"rollout": 2, "reference": 1, "trainer": 5}  # two engines go, the trainer takes their GPUs
        body, placed, how = plan_body(snap, case.scenario(), target, reason="completion decision, committed: test",
                                      notes=["completion decision: test"])
        assert body is not None, how
        assert placed == target and how == "the target exactly"
        ReallocPlan.model_validate(body)
        assert body["committed"] and body["reason"].startswith("completion decision")
        assert {a["component"]: a["migration_kind"] for a in body["allocation"]} == {"rollout": "workload", "trainer": "p2p"}
        tgt = to_state(from_realloc(body, before))
        assert sum(tgt.components[f"{case.JOB}/rollout"].placement.values()) == 2
        res = Executor(b, j).apply(diff(before, tgt, stage=True).steps, "completion")
        assert res.status == "done", res.message
        after = observe(b)
        assert sum(w.gpus for w in after.components[f"{case.JOB}/trainer"].live_workers()) == 5
        assert len(after.components[f"{case.JOB}/rollout"].live_workers()) == 2
    finally:
        b.close()


def test_without_a_fresh_context_auto_falls_back_to_the_planner_and_says_why():
    """``--realloc-decision auto``: no context (or one of another iteration) -> the min-over-stages planner decides,
    and its reason says the completion decision did not and why."""
    from formulation.realloc.telemetry import TelemetrySnapshot
    from planner.apply.telemetry import job_snapshot, tail_loads
    from planner.daemon.adapters.completion import CompletionReallocator
    from planner.daemon.ports import PlanningContext
    from tests.apply import realloc_case as case

    b, _, st = _placed()
    b.close()
    engines = [w.id for w in sorted(st.components[f"{case.JOB}/rollout"].live_workers(), key=lambda w: w.index)]
    snaps = [TelemetrySnapshot.model_validate(job_snapshot(st, case.JOB, time_s=t, iteration=3, progress=case.PROGRESS,
                                                           loads=tail_loads(engines, case.PROGRESS["rollout"], max_batch=8)))
             for t in (100.0, 103.0, 108.0)]
    sc = case.scenario()
    cluster = sc.model_copy(update={"jobs": []})
    pctx = PlanningContext(cluster, {case.JOB: sc.jobs[0]})
    stored: dict = {}
    r = CompletionReallocator(cluster, stored.get, mode="auto")
    out = r.decide(pctx, case.JOB, snaps)
    assert out.reason.startswith("min-over-stages planner (not the completion decision: no reallocation context posted")
    assert out.solver["decision"] == "planner" and out.committed  # the planner commits on this tail (realloc_case)
    stored[case.JOB] = {"time_s": 50.0, "iteration": 2, "received_wall": 0.0, "data": {}}
    r = CompletionReallocator(cluster, stored.get, mode="auto")
    out = r.decide(pctx, case.JOB, snaps)
    assert "the posted context is of iteration 2, the telemetry of iteration 3" in out.reason
    r = CompletionReallocator(cluster, stored.get, mode="completion")
    out = r.decide(pctx, case.JOB, snaps)
    assert not out.committed and not out.donors and out.reason.startswith("completion decision: no decision")
    assert np.isfinite(out.current_throughput)


def test_the_option_picks_the_reallocator_and_is_checked():
    from planner.daemon.adapters.completion import CompletionReallocator
    from planner.daemon.adapters.completion import make_reallocator
    from planner.daemon.adapters.realloc import DynaRLReallocator
    from planner.daemon.config import DaemonConfig
    from planner.errors import UserError
    from tests.apply import realloc_case as case

    cluster = case.scenario().model_copy(update={"jobs": []})
    assert type(make_reallocator(cluster, "planner", lambda job: None)) is DynaRLReallocator
    for mode in ("auto", "completion"):
        r = make_reallocator(cluster, mode, lambda job: None, max_age_s=5.0)
        assert isinstance(r, CompletionReallocator) and r.mode == mode and r.max_age_s == 5.0
    assert DaemonConfig().realloc_decision == "auto"
    with pytest.raises(UserError, match="--realloc-decision"):
        DaemonConfig(realloc_decision="fastest")


def test_a_posted_context_that_does_not_fit_the_jobs_set_up_is_not_decided_on(run):
    """The daemon checks a stored context against the job's set-up as ``planner realloc`` does: rollout GPUs in
    whole engines. (A context of the same GPU total but split in another TP was decided on before.)"""
    from types import SimpleNamespace

    from planner.daemon.adapters.completion import CompletionReallocator

    ctx = run["ctx"]
    last = SimpleNamespace(iteration=ctx["iteration"], time_s=ctx["time_s"])
    stored = {"time_s": ctx["time_s"], "iteration": ctx["iteration"], "received_wall": 0.0, "data": ctx}
    r = CompletionReallocator(None, {}.get, mode="completion")
    rollout = ctx["components"]["rollout"]["gpus"]
    fits = SimpleNamespace(total_gpus=ctx["total_gpus"], rollout_tp=1, train_unit=1)
    assert r._fresh(stored, last, ctx["total_gpus"], fits)[0] is not None
    odd = SimpleNamespace(total_gpus=ctx["total_gpus"], rollout_tp=rollout + 1, train_unit=1)
    cctx, why = r._fresh(stored, last, ctx["total_gpus"], odd)
    assert cctx is None and "does not fit the job's set-up" in why and "components.rollout.gpus" in why, why
