"""The SGLang adapter against a stand-in server (real HTTP on loopback, real gloo broadcast)."""

from __future__ import annotations

import threading
import time

import pytest
import torch

from executor.adapters.sglang import SGLangEngine, SGLangError, hand_off
from tests.executor.sglang_standin import StandIn, reference


@pytest.fixture
def two():
    with StandIn() as a, StandIn() as b:
        yield a, b


def test_abort_of_unknown_id_answers_200_so_the_adapter_keeps_its_own_record(two):
    a, _ = two
    e = SGLangEngine(a.url)
    e.abort("never-submitted")  # no error, and the engine told us nothing
    e.submit("r1", [1, 2, 3], 5)
    e.wait()
    assert e.requests["r1"].state == "done" and e.requests["r1"].output == reference([1, 2, 3], 5)
    assert "never-submitted" not in e.requests


def test_flush_refuses_while_busy_and_succeeds_once_idle(two):
    a, _ = two
    e = SGLangEngine(a.url)
    e.submit("long", [5], 400)
    time.sleep(0.05)
    with pytest.raises(SGLangError, match="never idle"):
        e.flush_cache(deadline_s=0.2)
    e.drain()  # pause with abort: idle now
    e.flush_cache(deadline_s=2)
    assert e.requests["long"].state == "aborted" and 0 < len(e.requests["long"].output) < 400


def test_workload_handoff_between_engines_finishes_each_request_once_with_its_output(two):
    a, b = two
    finished: dict[str, list] = {}
    lock = threading.Lock()

    def done(rid, out):
        with lock:
            assert rid not in finished, f"{rid} finished twice"
            finished[rid] = out

    src, dst = SGLangEngine(a.url, on_finish=done), SGLangEngine(b.url, on_finish=done)
    prompts = {f"q{i}": [i, i + 1, i + 2] for i in range(24)}
    for rid, p in prompts.items():
        src.submit(rid, p, 20 + (int(rid[1:]) % 5) * 30)
    time.sleep(0.1)
    moved = hand_off(src, dst)
    assert moved, "nothing was in flight: the test would prove nothing"
    assert any(0 < len(src.requests[r].output) for r in moved)  # partial output travelled
    dst.wait(timeout_s=30)
    assert set(finished) == set(prompts)
    for rid, p in prompts.items():
        assert finished[rid] == reference(p, 20 + (int(rid[1:]) % 5) * 30), rid


def test_weights_broadcast_from_trainer_rank_0_and_memory_release(two):
    from executor.migrations import gloo

    a, _ = two
    e = SGLangEngine(a.url)
    store, port = gloo.host_store("127.0.0.1", 2, 20)
    weights = {"embed": torch.randn(8, 4), "w": torch.arange(6, dtype=torch.float32).view(2, 3)}
    ready = threading.Event()

    def trainer_side():
        pg, _ = gloo.join("127.0.0.1", port, 0, 2, "wsync", 20, store=store)
        ready.set()
        for t in weights.values():
            pg.broadcast(t.clone(), 0).wait()

    th = threading.Thread(target=trainer_side)
    th.start()
    e.init_weights_group("127.0.0.1", port, 1, 2, "wsync")
    ready.wait(10)
    e.update_weights_from_distributed(list(weights), ["float32"] * 2, [list(t.shape) for t in weights.values()], "wsync", "v7")
    th.join(10)
    got = e.http.get(a.url + "/weights_digest").json()
    assert got["_version"] == "v7"
    assert got["embed"] == pytest.approx(float(weights["embed"].double().sum()), rel=1e-9)
    e.release_memory()
    e.submit("x", [1], 3)
    e.wait()
    assert e.requests["x"].state == "aborted"  # the engine refused to generate without weights
    e.resume_memory()
    e.submit("y", [1], 3)
    e.wait()
    assert e.requests["y"].output == reference([1], 3)
