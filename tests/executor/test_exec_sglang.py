"""The SGLang adapter against a stand-in server (real HTTP on loopback, real gloo broadcast).

The stand-in (``sglang_standin.py``) follows SGLang's documented rules that the adapter must live
with; each test names the rule it exercises."""

from __future__ import annotations

import threading
import time

import pytest
import torch

from executor.adapters.sglang import SGLangEngine, SGLangError, hand_off, resumed_sampling
from tests.executor.sglang_standin import StandIn, reference


@pytest.fixture
def two():
    with StandIn() as a, StandIn() as b:
        yield a, b


@pytest.fixture
def engines():
    made = []

    def make(url, **kw):
        e = SGLangEngine(url, **kw)
        made.append(e)
        return e

    yield make
    for e in made:
        e.close()


def _wait_for(pred, what: str, deadline_s: float = 120.0) -> None:
    """Wait for an event; the deadline is reached only on failure (generous: the machine may be loaded)."""
    end = time.time() + deadline_s
    while not pred():
        if time.time() > end:
            raise AssertionError(f"waited {deadline_s:g} s for {what}")
        time.sleep(0.01)


def test_abort_of_unknown_id_answers_200_so_the_adapter_keeps_its_own_record(two, engines):
    a, _ = two
    e = engines(a.url)
    e.abort("never-submitted")  # no error, and the engine told us nothing
    e.submit("r1", [1, 2, 3], 5)
    e.wait()
    assert e.requests["r1"].state == "done" and e.requests["r1"].output == reference([1, 2, 3], 5)
    assert "never-submitted" not in e.requests


def test_flush_refuses_while_busy_and_succeeds_once_idle(two, engines):
    a, _ = two
    e = engines(a.url)
    e.submit("long", [5], 400)
    _wait_for(lambda: a.stats()["in_batch"] == 1, "the request to run")
    with pytest.raises(SGLangError, match="never idle"):
        e.flush_cache(deadline_s=0.2)
    e.drain()  # pause with abort: idle now
    e.flush_cache(deadline_s=60)  # a deadline (idle at once): only reached on failure
    assert e.requests["long"].state == "aborted" and 0 < len(e.requests["long"].output) < 400


# Stop tokens, a minimum length, logprobs: everything SGLang's sampling_params carry must survive a move.
STOPS = list(range(0, 32000, 37))  # about one token in 37 ends a request (once the minimum is out)


def _sampling(i: int) -> dict:
    return {"max_new_tokens": 20 + (i % 5) * 30, "min_new_tokens": 10 + (i % 3) * 15, "temperature": 0.0,
            "stop_token_ids": STOPS}


def test_workload_handoff_carries_sampling_parameters_and_logprobs(two, engines):
    """Each request ends exactly once, with exactly its uninterrupted tokens, finish reason and
    output logprobs, though it moved mid-generation (prompt + partial output resumed elsewhere)."""
    a, b = two
    finished: dict[str, list] = {}
    lock = threading.Lock()

    def done(rid, out):
        with lock:
            assert rid not in finished, f"{rid} finished twice"
            finished[rid] = out

    src, dst = engines(a.url, on_finish=done), engines(b.url, on_finish=done)
    prompts = {f"q{i}": [i, i + 1, i + 2] for i in range(24)}
    a.hold(12)  # the source stops each request after 12 tokens: the move finds them mid-generation, however slow
    for rid, p in prompts.items():
        src.submit(rid, p, _sampling(int(rid[1:])))
    _wait_for(lambda: a.stats()["decoded"] > 0, "requests to start decoding")
    moved = hand_off(src, dst)
    a.hold(None)
    assert moved, "nothing was in flight: the test would prove nothing"
    assert any(0 < len(src.requests[r].output) for r in moved)  # partial output travelled
    dst.wait(timeout_s=300)
    assert set(finished) == set(prompts)
    stopped_early = 0
    for rid, p in prompts.items():
        sp = _sampling(int(rid[1:]))
        want, want_lp, want_finish = reference(p, sp, with_logprobs=True)
        t = (dst if rid in moved else src).requests[rid]
        assert finished[rid] == want, rid
        assert t.logprobs == pytest.approx(want_lp, abs=0), rid  # every token's logprob, across the move
        assert t.finish.get("type") == want_finish["type"], rid
        stopped_early += want_finish["type"] == "stop"
    # the stop tokens and the minimum length mattered (else the test would not show they were carried)
    assert 0 < stopped_early


def test_a_request_that_reaches_the_server_after_the_pause_is_withdrawn_and_resumes_exactly(two, engines):
    """SGLang's pause gate (>= 0.5.6): a ``/generate`` that arrives after ``pause_generation(abort)``
    is registered and waits there, where the pause does not reach it and a cancelled client call
    would not free its rid. A drain must not wait on it until its deadline (the move would roll
    back): it aborts it by rid, waits for the confirmation, hands the request over with the output
    it had, and it ends exactly as if never moved."""
    a, b = two
    src, dst = engines(a.url, drain_grace_s=0.5), engines(b.url)
    src.submit("early", [7, 8, 9], {"max_new_tokens": 30, "temperature": 0.0}, output=reference([7, 8, 9], 5),
               logprobs=reference([7, 8, 9], 5, with_logprobs=True)[1])  # resumed here, 5 tokens already out
    src.wait(["early"], timeout_s=120)
    a.app.state.st["paused"] = "abort"  # the race's outcome: the pause reached the server first
    sp = {"max_new_tokens": 40, "min_new_tokens": 12, "temperature": 0.0, "stop_token_ids": STOPS}
    src.submit("late", [4, 5, 6], sp, output=reference([4, 5, 6], 3), logprobs=reference([4, 5, 6], 3, with_logprobs=True)[1])
    _wait_for(lambda: a.stats()["at_gate"] == 1, "the late request to wait at the pause gate")
    moved = hand_off(src, dst)  # before the fix: "request late still running after the deadline"
    assert moved == ["late"] and src.requests["late"].state == "moved"
    assert a.stats()["at_gate"] == 0 and a.stats()["registered"] == []  # confirmed: the server let it go
    dst.wait(timeout_s=120)
    want, want_lp, want_finish = reference([4, 5, 6], sp, with_logprobs=True)
    assert dst.requests["late"].output == want and dst.requests["late"].logprobs == pytest.approx(want_lp, abs=0)
    assert dst.requests["late"].finish.get("type") == want_finish["type"]
    assert a.stats()["generate_calls"] == 1  # the late call never ran on the paused engine


class DropOnce:
    """Wraps the adapter's HTTP transport: the first ``/generate`` loses its connection without an
    answer, with what httpx raises when a kept-alive connection is closed by the server (at its
    keep-alive timeout) just as the client reuses it (``ReadError('')``, seen against the stand-in's
    uvicorn). ``reached``: the call got to the server first (it registered and runs there)."""

    def __init__(self, inner, server: StandIn, reached: bool) -> None:
        self.inner, self.server, self.reached, self.dropped = inner, server, reached, []

    async def handle_async_request(self, request):
        import asyncio
        import json

        import httpx

        if request.url.path != "/generate" or self.dropped:
            return await self.inner.handle_async_request(request)
        self.dropped.append(json.loads(request.content)["rid"])
        if self.reached:  # sent; the answer is lost with the connection (the server goes on with it)
            call = asyncio.ensure_future(self.inner.handle_async_request(request))
            while self.dropped[0] not in self.server.app.state.st["running"]:
                await asyncio.sleep(0.005)
            call.cancel()
        raise httpx.ReadError("", request=request)

    async def aclose(self) -> None:
        await self.inner.aclose()


@pytest.mark.parametrize("reached", [False, True], ids=["never-reached-the-server", "reached-the-server"])
def test_a_generate_whose_connection_drops_is_sent_again_and_ends_exactly(two, engines, reached):
    """A ``/generate`` that fails without an answer on an engine that is not draining was kept as
    aborted, and nothing resumes an aborted request but a drain: it never ended (the CI flake of the
    workload-migration test: 35 of 36 requests done, none refused, after a handoff admitted requests
    on a kept engine whose idle connections the server was closing). It is sent again with a new wire
    rid, from the output it had, the failed call aborted on the server; it ends once, exactly."""
    a, _ = two
    finished = []
    e = engines(a.url, on_finish=lambda rid, out: finished.append((rid, out)))
    drop = e.http._transport = DropOnce(e.http._transport, a, reached)
    sp = {"max_new_tokens": 40, "min_new_tokens": 12, "temperature": 0.0, "stop_token_ids": STOPS}
    out3, lp3, _ = reference([4, 5, 6], 3, with_logprobs=True)
    e.submit("r", [4, 5, 6], sp, output=out3, logprobs=lp3)  # (resumed here: 3 tokens out already)
    e.wait(["r"], timeout_s=120)
    t = e.requests["r"]
    want, want_lp, want_finish = reference([4, 5, 6], sp, with_logprobs=True)
    assert t.state == "done", t.finish  # before the fix: aborted (the ReadError), never to end
    assert len(drop.dropped) == 1 and t.wire != drop.dropped[0]
    assert finished == [("r", want)] and t.logprobs == pytest.approx(want_lp, abs=0)
    assert t.finish.get("type") == want_finish["type"]
    aborted = [x["rid"] for x in a.stats()["aborts"]]
    assert aborted == ([drop.dropped[0]] if reached else [])  # the lost call does not run on beside the new one
    _wait_for(lambda: a.stats()["registered"] == [], "the server to let the lost call go")
    assert a.stats()["duplicates"] == 0


def test_a_dropped_generate_is_handed_over_not_sent_again_while_the_engine_drains(two, engines):
    """During a drain (``pause_generation(abort)`` answered) the failed call is not sent again: the
    request is kept as aborted, with its output, and the drain hands it over."""
    a, _ = two
    e = engines(a.url)
    e.paused = "abort"  # (the drain's pause was answered)
    drop = e.http._transport = DropOnce(e.http._transport, a, False)
    e.submit("r", [4, 5, 6], 20)
    e.wait(["r"], timeout_s=120)
    assert len(drop.dropped) == 1 and e.requests["r"].state == "aborted"
    assert [x["id"] for x in e.export()] == ["r"] and a.stats()["generate_calls"] == 0


def test_resuming_without_the_reduced_minimum_would_differ():
    """The oracle is sharp: resuming with the original min_new_tokens (not reduced by what was
    generated) gives another output for some request, so the handoff test can fail."""
    differs = 0
    for i in range(24):
        p, sp = [i, i + 1, i + 2], _sampling(i)
        want = reference(p, sp)
        k = min(len(want) - 1, 5)
        if k <= 0:
            continue
        wrong = want[:k] + reference(p + want[:k], dict(sp, max_new_tokens=sp["max_new_tokens"] - k))
        differs += wrong != want
        right = want[:k] + reference(p + want[:k], resumed_sampling(sp, k))
        assert right == want
    assert differs > 0


def test_in_place_pause_keeps_the_kv_cache_and_retract_recomputes_it(two, engines):
    """SGLang's pause modes: in_place leaves requests and their KV in the running batch (no
    re-prefill, flush refused); retract sends them back to the waiting queue (flush allowed, one
    re-prefill on continue). Neither re-submits a request, and outputs stay exact."""
    a, _ = two
    e = engines(a.url)
    prompts = {f"p{i}": [i, 2 * i, 3] for i in range(6)}
    for rid, p in prompts.items():
        e.submit(rid, p, 300)
    _wait_for(lambda: a.stats()["in_batch"] == 6, "all six requests in the batch")
    s0 = a.stats()
    e.pause("in_place")
    with pytest.raises(SGLangError, match="never idle"):
        e.flush_cache(deadline_s=0.1)  # their KV cache is still in the running batch
    e.resume()
    _wait_for(lambda: a.stats()["in_batch"] == 6, "requests to run again")
    s1 = a.stats()
    assert s1["prefill_tokens"] == s0["prefill_tokens"] and s1["generate_calls"] == s0["generate_calls"]
    e.pause("retract")
    e.flush_cache(deadline_s=60)  # retracted requests do not hold the batch (a deadline, reached only on failure)
    e.resume()
    e.wait(timeout_s=300)
    s2 = a.stats()
    assert s2["generate_calls"] == s0["generate_calls"]  # nothing was re-submitted
    assert s2["prefill_tokens"] > s1["prefill_tokens"]  # but the retracted KV was recomputed
    for rid, p in prompts.items():
        assert e.requests[rid].state == "done" and e.requests[rid].output == reference(p, 300), rid


def test_release_while_busy_takes_the_server_down(two, engines):
    """SGLang's scheduler asserts it is idle before releasing memory; the failed assertion kills the
    scheduler: the call fails, the request in flight fails, and the server stops answering."""
    a, _ = two
    e = engines(a.url)
    e.submit("busy", [1], 500)
    _wait_for(lambda: a.stats()["in_batch"] == 1, "the request to run")
    with pytest.raises(SGLangError, match="500.*only when server is idle"):
        e._post("/release_memory_occupation", {"tags": ["kv_cache"]})  # bypassing the adapter's check
    e.wait(timeout_s=120)
    assert e.requests["busy"].state == "aborted"
    assert not e.healthy() and a.stats()["dead"]


def test_memory_is_released_only_when_idle(two, engines):
    """The adapter refuses to release memory while busy (with the fix), before SGLang's assertion
    would take the server down; after a retract pause or when idle it works."""
    a, _ = two
    e = engines(a.url)
    e.submit("busy", [1], 500)
    _wait_for(lambda: a.stats()["in_batch"] == 1, "the request to run")
    with pytest.raises(SGLangError, match="in flight.*Fix: drain"):
        e.release_memory()
    assert e.healthy()  # the server was never asked
    e.pause("in_place")
    with pytest.raises(SGLangError, match="in flight"):
        e.release_memory()  # in place, the KV cache is still held
    e.pause("retract")
    e.release_memory(("kv_cache",))  # retracted requests may wait while the memory is away
    e.resume_memory(("kv_cache",))
    e.resume()
    e.wait(timeout_s=300)
    assert e.requests["busy"].output == reference([1], 500)
    e.release_memory()  # idle
    e.submit("x", [1], 3)
    e.wait()
    assert e.requests["x"].state == "aborted"  # the engine refuses to generate without its memory
    e.resume_memory()
    e.submit("y", [1], 3)
    e.wait()
    assert e.requests["y"].output == reference([1], 3)


def _named_payload() -> list[str]:
    from executor.workers.weight_sync import serialize_named

    return [serialize_named({"w": torch.arange(4.0)})]


def test_a_weight_update_that_must_flush_while_requests_are_held_in_place_takes_the_server_down(two, engines):
    """SGLang (``scheduler_update_weights_mixin``) flushes the cache after a weight update and asserts
    the flush worked; paused, the update does not wait for the requests, so ones held in place fail
    it and the scheduler dies. The stand-in let the update through, hiding that the adapter sent it."""
    a, _ = two
    e = engines(a.url)
    e.submit("held", [1], 500)
    _wait_for(lambda: a.stats()["in_batch"] == 1, "the request to run")
    e.pause("in_place")
    with pytest.raises(SGLangError, match="500.*Cache flush failed after updating weights"):
        e._post("/update_weights_from_tensor", {"serialized_named_tensors": _named_payload(), "flush_cache": True})
    assert not e.healthy() and a.stats()["dead"]


def test_the_adapter_refuses_a_flushing_weight_update_while_requests_are_held_in_place(two, engines):
    """The adapter refuses it first, with the way out; without the flush, after a retract pause, or
    with nothing held, the update goes through and the held request ends exactly."""
    a, _ = two
    e = engines(a.url)
    e.submit("held", [1], 500)
    _wait_for(lambda: a.stats()["in_batch"] == 1, "the request to run")
    e.pause("in_place")
    for call in (lambda: e.update_weights_from_tensor(_named_payload(), "v1"),
                 lambda: e.update_weights_from_distributed(["w"], ["float32"], [[4]], "nogroup", "v1")):
        with pytest.raises(SGLangError, match="held by a pause with mode=in_place.*Fix: pass flush_cache=False"):
            call()
    assert e.healthy()  # the server was never asked
    e.update_weights_from_tensor(_named_payload(), "v2", flush_cache=False)
    e.pause("retract")
    e.update_weights_from_tensor(_named_payload(), "v3")
    e.resume()
    e.wait(timeout_s=300)
    assert e.requests["held"].output == reference([1], 500) and e.healthy()
    e.update_weights_from_tensor(_named_payload(), "v4")  # idle
    assert a.stats()["dead"] is False


def test_generate_timeout_aborts_on_the_server_and_keeps_the_request_resumable(two, engines):
    a, _ = two
    e = engines(a.url, generate_timeout_s=0.3)
    e.submit("slow", [9], 100_000)
    e.wait(timeout_s=120)
    t = e.requests["slow"]
    assert t.state == "aborted" and "no answer within 0.3 s" in t.finish["message"]
    _wait_for(lambda: a.stats()["running"] == 0, "the server to drop the aborted request")
    assert [x["id"] for x in e.export()] == ["slow"]


def test_weights_sync_defaults_to_nccl_and_broadcasts_over_gloo_on_cpu(two, engines):
    from executor.migrations import gloo

    a, _ = two
    e = engines(a.url)
    assert e.weight_sync_backend == "nccl"
    if not torch.cuda.is_available():
        with pytest.raises(SGLangError, match="NCCL"):
            e.init_weights_group("127.0.0.1", 1, 1, 2, "nccl-default")
    store, port = gloo.host_store("127.0.0.1", 2, 120)
    weights = {"embed": torch.randn(8, 4), "w": torch.arange(6, dtype=torch.float32).view(2, 3)}
    ready = threading.Event()

    def trainer_side():
        pg, _ = gloo.join("127.0.0.1", port, 0, 2, "wsync", 120, store=store)
        ready.set()
        for t in weights.values():
            pg.broadcast(t.clone(), 0).wait()

    th = threading.Thread(target=trainer_side)
    th.start()
    e.init_weights_group("127.0.0.1", port, 1, 2, "wsync", backend="gloo")
    assert ready.wait(120), "the trainer side did not join the weight-sync group within 120 s"
    e.update_weights_from_distributed(list(weights), ["float32"] * 2, [list(t.shape) for t in weights.values()], "wsync", "v7")
    th.join(120)
    assert not th.is_alive(), "the trainer side's broadcast did not finish within 120 s"
    got = e._sync(e.http.get(a.url + "/weights_digest")).json()
    assert got["_version"] == "v7"
    assert got["embed"] == pytest.approx(float(weights["embed"].double().sum()), rel=1e-9)


def test_unknown_pause_mode_is_refused_with_the_choices(two, engines):
    a, _ = two
    with pytest.raises(SGLangError, match="abort, retract, in_place"):
        engines(a.url).pause("sleep")


def test_a_broadcast_to_an_engine_holding_requests_in_place_is_refused_before_anything_is_sent(two, engines):
    """The trainer-side group checks every engine first: an engine that would refuse the update makes
    the broadcast fail at once (the root would otherwise wait in the broadcast for ranks that never
    receive, until the group's timeout), and the group stays usable once the engine is free."""
    from executor.workers.weight_sync import WeightSyncGroup

    a, _ = two
    e = engines(a.url, weight_sync_backend="gloo")
    g = WeightSyncGroup(backend="gloo", timeout_s=120.0)
    try:
        g.ensure([(e, 1)], 0)
        e.submit("held", [1], 500)
        _wait_for(lambda: a.stats()["in_batch"] == 1, "the request to run")
        e.pause("in_place")
        with pytest.raises(SGLangError, match="held by a pause with mode=in_place"):
            g.broadcast({"w": torch.arange(4.0)}, "v1")
        assert e.healthy()
        e.resume()
        e.wait(timeout_s=300)
        g.broadcast({"w": torch.arange(4.0)}, "v2")  # the same group, nothing left half-sent
        assert e.requests["held"].output == reference([1], 500) and not a.stats()["dead"]
    finally:
        g.close()


def test_resuming_memory_that_is_not_released_takes_the_server_down(two, engines):
    """SGLang's scheduler removes each resumed tag from the released ones (``offload_tags.remove``):
    a tag that is not released raises there and the scheduler dies. The stand-in answered 200."""
    a, _ = two
    e = engines(a.url)
    e._post("/release_memory_occupation", {"tags": ["kv_cache"]})
    e._post("/resume_memory_occupation", {"tags": ["kv_cache"]})
    with pytest.raises(SGLangError, match="500.*KeyError"):
        e._post("/resume_memory_occupation", {"tags": ["kv_cache"]})  # twice (bypassing the adapter's check)
    assert not e.healthy() and a.stats()["dead"]


def test_the_adapter_resumes_only_the_memory_it_released(two, engines):
    """Releasing the KV cache and then resuming with the default tags (weights too) took a real
    server down; the adapter refuses it, naming the tags, and resumes exactly what was released."""
    a, _ = two
    e = engines(a.url)
    e.release_memory(("kv_cache",))
    with pytest.raises(SGLangError, match="cannot resume memory tag.*weights: not released.*Fix: resume only"):
        e.resume_memory()  # the defaults: weights and kv_cache
    assert e.healthy()
    e.resume_memory(("kv_cache",))
    with pytest.raises(SGLangError, match="kv_cache: not released"):
        e.resume_memory(("kv_cache",))  # twice
    e.submit("x", [1], 3)
    e.wait()
    assert e.requests["x"].output == reference([1], 3) and not a.stats()["dead"]
    e.release_memory()
    fresh = engines(a.url)  # a new client (a restarted worker) does not know what an earlier one released: not refused
    fresh.resume_memory()
    assert fresh.healthy() and not a.stats()["dead"]
