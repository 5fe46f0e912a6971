"""SGLang servers as the executor's rollout workers: a workload migration planned by the diff and
carried out by the controller (sim backend) moves requests between SGLang stand-ins mid-generation;
every request ends exactly once, with its uninterrupted tokens and output logprobs, in the ledger."""

from __future__ import annotations

import contextlib
import time

import pytest

from executor import router
from executor.backends import sim
from executor.backends.base import observe
from executor.controller import Executor
from executor.diff import diff
from executor.faultlib import target
from executor.journal import Journal
from executor.state import Node
from tests.executor.sglang_standin import StandIn, reference

ROLLOUT = "job/rollout"
NODES = [Node("a", "H20", 4, 256.0), Node("b", "H20", 4, 256.0)]
STOPS = list(range(0, 32000, 37))


def _body(placement: dict) -> dict:
    return {"nodes": [{"name": n.name, "gpu_type": n.gpu_type, "gpus": n.gpus, "dram_gb": n.dram_gb} for n in NODES],
            "components": [{"name": ROLLOUT, "role": "rollout", "gpu_type": "H20", "dram_gb_per_worker": 16,
                            "placement": placement}]}


@pytest.fixture
def sglang_sim(monkeypatch):
    """A sim backend whose rollout workers are SGLang rollout workers, each on its own stand-in server."""
    from executor.adapters import sglang_worker

    with contextlib.ExitStack() as stack:
        servers = [stack.enter_context(StandIn()) for _ in range(4)]
        free = list(servers)
        made = {}
        real = sim.make_worker

        def make_worker(args, epoch, coord, fail_start=False):
            if args["role"] != "rollout":
                return real(args, epoch, coord, fail_start=fail_start)
            srv = free.pop(0)
            w = sglang_worker.make(args, epoch, coord, fail_start, config={"url": srv.url})
            made[args["worker"]["id"]] = (w, srv)
            return w

        monkeypatch.setattr(sim, "make_worker", make_worker)
        b = sim.SimBackend(NODES)
        try:
            yield b, made
        finally:
            for w, _ in made.values():
                w.close()


def test_workload_migration_between_sglang_workers_keeps_tokens_and_logprobs(sglang_sim):
    b, made = sglang_sim
    j = Journal(":memory:")
    assert Executor(b, j).apply(diff(observe(b), target(_body({"a": 1, "b": 2}))).steps, "base").status == "done"
    reqs = []
    for i, r in enumerate(router.make_requests(ROLLOUT, 36, prompts=6, prompt_len=8, seed=3)):
        r["sampling_params"] = {"max_new_tokens": 40 + (i % 4) * 40, "min_new_tokens": 10 + (i % 3) * 10,
                                "temperature": 0.0, "stop_token_ids": STOPS}
        reqs.append(r)
    on_b = {r["id"] for r in b.coord("records") if r["node"] == "b"}
    assert len(on_b) == 2
    for wid in on_b:  # node b's servers stop each request after 5 tokens: the move finds them mid-generation
        made[wid][1].hold(5)
    router.submit(b, ROLLOUT, reqs)
    end = time.monotonic() + 120  # a deadline on an event, reached only on failure
    while not any(srv.stats()["decoded"] for wid, (_, srv) in made.items() if wid in on_b):
        assert time.monotonic() < end, "no request started decoding on node b's SGLang servers within 120 s"
        time.sleep(0.01)
    res = Executor(b, j).apply(diff(observe(b), target(_body({"a": 2}))).steps, "workload")
    assert res.status == "done", res.message
    assert res.outcomes[f"{ROLLOUT}/workload/handoff"]["moved"] > 0
    end = time.monotonic() + 300  # a deadline on an event, reached only on failure
    while b.coord("ledger_summary")["done"] < len(reqs):
        assert time.monotonic() < end, f"not all {len(reqs)} requests done within 300 s: {b.coord('ledger_summary')}"
        time.sleep(0.05)
    recs = {r["id"]: r for r in b.coord("request_records")}
    assert all(r["done"] for r in recs.values()), [r["id"] for r in recs.values() if not r["done"]]
    moved_mid = 0
    stopped = 0
    for r in reqs:
        want, want_lp, finish = reference(r["prompt"], r["sampling_params"], with_logprobs=True)
        got = recs[r["id"]]
        assert got["output"] == want, r["id"]
        assert got["logprobs"] == pytest.approx(want_lp, abs=0), r["id"]
        moved_mid += got["handoffs"] > 0 and 0 < len(got.get("logprobs", [])) and got["finished_by"] not in on_b
        stopped += finish["type"] == "stop"
    summ = b.coord("ledger_summary")
    assert summ["done"] == len(reqs) and summ["refused_completions"] == 0
    assert moved_mid > 0 and stopped > 0  # requests really moved, and stop tokens / minimums mattered
    assert b.coord("rejected_effects") == []
