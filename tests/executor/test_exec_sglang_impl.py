"""The registered ``sglang`` worker (executor.workers.sglang_worker) against the SGLang stand-in.

Each SGLang semantic the worker lives with is first reproduced on the stand-in directly (so the
test shows the hazard is real), then shown handled by the worker: duplicate rid, prefix abort,
release while busy, the pause gate; plus the launcher (the stand-in started as the server
process on the assigned GPU ids), router membership, weight sync (group re-created after a
move; colocated tensors), the version range and unified sampling settings."""

from __future__ import annotations

import contextlib
import sys
import threading
import time
from pathlib import Path

import httpx
import pytest
import torch

from executor.adapters.sglang import SGLangError, wire_rid
from executor.workers import registry, sampling
from executor.workers.sglang_worker import SGLangWorker, assigned_gpus, supported
from tests.executor.sglang_standin import StandIn, make_app, make_router_app, reference

ROOT = str(Path(__file__).resolve().parents[2])
# the stand-in as the server process, taking sglang.launch_server's arguments
STANDIN_CMD = [sys.executable, "-c", f"import sys; sys.path.insert(0, {ROOT!r}); "
               "from tests.executor.sglang_standin import main; main()"]


class Coord:
    """A coordinator that accepts every effect and records completions."""

    def __init__(self) -> None:
        self.done: dict[str, list[int]] = {}
        self.lock = threading.Lock()

    def __call__(self, method, wid, epoch, *a):
        if method == "complete":
            with self.lock:
                assert a[0] not in self.done, f"{a[0]} completed twice"
                self.done[a[0]] = a[1]
        return True


def _wait_for(pred, what: str, deadline_s: float = 120.0) -> None:
    end = time.time() + deadline_s
    while not pred():
        if time.time() > end:
            raise AssertionError(f"waited {deadline_s:g} s for {what}")
        time.sleep(0.01)


@pytest.fixture
def workers():
    made = []

    def make(url, coord=None, **cfg):
        w = SGLangWorker(cfg.pop("wid", f"job/rollout/{len(made)}"), 1, coord or Coord(), {"url": url, **cfg})
        made.append(w)
        return w

    yield make
    for w in made:
        w.close()


def _post(url, path, body, timeout=30.0):
    return httpx.post(url + path, json=body, timeout=timeout)


def _gen_async(url: str, rid: str, n: int = 5) -> threading.Thread:
    th = threading.Thread(target=lambda: _post(url, "/generate", {"input_ids": [1, 2], "rid": rid,
                                                                  "sampling_params": {"max_new_tokens": n}}, 120), daemon=True)
    th.start()
    return th


def test_registry_lists_sglang_beside_the_others():
    assert {"toy", "tinylm", "sglang"} <= set(registry.names())
    impl = registry.get("sglang")
    assert impl.rollout is not None
    with pytest.raises(ValueError, match="no trainer worker"):
        impl.factory("trainer")


def test_version_range_is_the_one_whose_semantics_the_worker_relies_on():
    assert supported("0.5.6") and supported("0.5.23") and supported("0.5.9.post1")
    assert not supported("0.5.5") and not supported("0.4.10") and not supported("0.6.0") and not supported("")
    with StandIn(make_app(version="0.4.10")) as old:
        with pytest.raises(SGLangError, match=r"0\.4\.10.*sglang>=0\.5\.6,<0\.6"):
            SGLangWorker("w", 1, Coord(), {"url": old.url})
    text = (Path(ROOT) / "pyproject.toml").read_text()
    assert 'sglang = ["sglang>=0.5.6,<0.6"]' in text  # the extra says the same


def test_duplicate_rid_is_refused_and_the_worker_never_sends_one():
    with StandIn() as a:
        a.app.state.st["paused"] = "abort"  # a request now waits at the gate, registered
        th = _gen_async(a.url, "r1")
        _wait_for(lambda: a.stats()["registered"] == ["r1"], "r1 to register at the gate")
        r = _post(a.url, "/generate", {"input_ids": [1], "rid": "r1", "sampling_params": {"max_new_tokens": 2}})
        assert r.status_code == 400 and "Duplicate request ID" in r.text  # the hazard
        a.app.state.st["paused"] = None
        th.join(120)
    # every call of a request carries a new rid: a resubmission is never a duplicate
    assert len({wire_rid("w", "r1", k) for k in range(1, 50)}) == 49


def test_prefix_abort_hits_neighbours_but_not_the_workers_rids(workers):
    with StandIn() as a:
        a.app.state.st["paused"] = "abort"
        ths = [_gen_async(a.url, rid) for rid in ("3-1", "3-10", "3-11", "3-2")]
        _wait_for(lambda: len(a.stats()["registered"]) == 4, "four requests at the gate")
        _post(a.url, "/abort_request", {"rid": "3-1"})
        assert a.stats()["aborts"][-1]["aborted"] == ["3-1", "3-10", "3-11"]  # the hazard: 3-10, 3-11 went too
        a.app.state.st["paused"] = None
        for th in ths:
            th.join(120)
        # the worker's rids are fixed-length digests: none is a prefix of another
        rids = [wire_rid("s", f"3-{i}", k) for i in range(40) for k in (1, 2)]
        assert not any(x != y and y.startswith(x) for x in rids for y in rids)
        coord = Coord()
        w = workers(a.url, coord)
        a.hold(3)
        w.admit([{"id": f"3-{i}", "prompt": [i, 7], "target_len": 12} for i in (1, 10, 11)])
        _wait_for(lambda: a.stats()["decoded"] >= 9, "three requests to decode to the hold")
        w.engine.abort("3-1")
        a.hold(None)
        w.engine.wait(timeout_s=120)
        assert w.engine.requests["3-1"].state == "aborted"
        assert coord.done == {f"3-{i}": reference([i, 7], 12) for i in (10, 11)}  # the neighbours ended untouched


def test_a_withdrawn_request_is_aborted_and_confirmed_before_it_is_resubmitted(workers):
    """A request that reached the server after the drain's pause waits at the gate, registered.
    The drain aborts it by rid and waits for the answer; the rolled-back drain (undrain) then
    resubmits it under a new rid: no 'Duplicate request ID', and it ends exactly once, exactly."""
    with StandIn() as a:
        coord = Coord()
        w = workers(a.url, coord, drain_grace_s=0.3)
        a.app.state.st["paused"] = "abort"  # the race's outcome: the pause reached the server first
        w.admit([{"id": "late", "prompt": [4, 5, 6], "target_len": 20}])
        _wait_for(lambda: a.stats()["at_gate"] == 1, "the late request at the gate")
        first = w.engine.requests["late"].wire
        load = w.drain()
        assert load["pending"] == 1 and a.stats()["registered"] == []  # confirmed: the server let it go
        assert a.stats()["aborts"][-1] == {"rid": first, "aborted": [first]}
        w.undrain()
        _wait_for(lambda: "late" in coord.done, "the resubmitted request to finish")
        assert coord.done["late"] == reference([4, 5, 6], 20)
        assert a.stats()["duplicates"] == 0 and w.engine.requests["late"].wire != first


class RefuseFirst(Coord):
    """Refuses the first completion of each request (it arrived after a handoff moved the request
    away, as on a loaded machine), accepts the next."""

    def __init__(self) -> None:
        super().__init__()
        self.refused: list[str] = []

    def __call__(self, method, wid, epoch, *a):
        if method == "complete" and a[0] not in self.refused:
            self.refused.append(a[0])
            return False
        return super().__call__(method, wid, epoch, *a)


def test_a_request_whose_completion_was_refused_runs_again_when_the_ledger_gives_it_back(workers):
    """A request that ended on an engine just after the ledger moved it away (its completion refused)
    and that the ledger then gives back to the same engine (a handoff rolled back, rehomed by cache
    affinity) must run again: skipping it as 'done here' lost it (seen once in CI)."""
    with StandIn() as a:
        coord = RefuseFirst()
        w = workers(a.url, coord)
        req = {"id": "r", "prompt": [2, 3], "target_len": 6}
        w.admit([req])
        w.engine.wait(timeout_s=120)
        assert coord.refused == ["r"] and coord.done == {} and w.refused == ["r"]
        assert w.admit([req]) == 1  # offered again by the ledger: resumed from its record, not skipped
        w.engine.wait(timeout_s=120)
        assert coord.done == {"r": reference([2, 3], 6)}
        assert w.admit([req]) == 0  # accepted now: offering it again does not run it twice


def test_release_while_busy_is_refused_by_the_worker_before_it_takes_the_server_down(workers):
    with StandIn() as a:
        w = workers(a.url)
        a.hold(2)
        w.admit([{"id": "busy", "prompt": [1], "target_len": 50}])
        _wait_for(lambda: a.stats()["in_batch"] == 1, "the request to run")
        with pytest.raises(SGLangError, match="in flight.*Fix: drain"):
            w.release_memory()
        assert w.ready()
        a.hold(None)
        w.engine.wait(timeout_s=120)
        w.release_memory(("kv_cache",))  # idle now
        w.resume_memory(("kv_cache",))
        assert w.ready()
    with StandIn() as b:  # the hazard the check avoids
        a.hold(None)
        b.hold(2)
        th = _gen_async(b.url, "x", 50)
        _wait_for(lambda: b.stats()["in_batch"] == 1, "the request to run")
        assert _post(b.url, "/release_memory_occupation", {"tags": ["kv_cache"]}).status_code == 500
        th.join(120)
        assert httpx.get(b.url + "/health", timeout=30).status_code == 503


def _chunked_states(named: dict[str, torch.Tensor]) -> list[dict]:
    """Two TP ranks' sharded states (rows split) of ``named``."""
    out = []
    for r in range(2):
        tensors, chunks = {}, {}
        for n, t in named.items():
            h = t.shape[0] // 2
            tensors[n] = t[r * h:(r + 1) * h].clone()
            chunks[n] = {"fqn": f"param/{n}", "offset": [r * h] + [0] * (t.dim() - 1), "global_shape": list(t.shape)}
        tensors["m"], chunks["m"] = torch.zeros(1), {"fqn": "exp_avg/x", "offset": [r], "global_shape": [2]}
        out.append({"rank": r, "step": 0, "tensors": tensors, "chunks": chunks})
    return out


def test_weight_sync_group_is_recreated_after_a_move_and_colocated_engines_take_tensors(workers):
    named = {"embed": torch.randn(8, 4), "w": torch.arange(12, dtype=torch.float32).view(4, 3)}
    states = _chunked_states(named)
    with StandIn() as a, StandIn() as b:
        w = workers(a.url, weight_sync_backend="gloo")
        assert w.update_weights(states, 3) == 3
        got = httpx.get(a.url + "/weights_digest", timeout=30).json()
        assert got["_version"] == "3" and got["embed"] == pytest.approx(float(named["embed"].double().sum()), rel=1e-9)
        assert set(got) == {"embed", "w", "_version"}  # parameters only, no optimizer state
        g1 = a.stats()["groups"]
        w.update_weights(states, 4)  # same membership: the group is kept
        assert a.stats()["groups"] == g1 and w.weight_groups_created() == 1
        w.drain()
        w.undrain()  # a move: the group is destroyed and made anew
        named["w"] += 1
        w.update_weights(_chunked_states(named), 5)
        assert w.weight_groups_created() == 2 and len(a.stats()["groups"]) == 1 and a.stats()["groups"] != g1
        assert httpx.get(a.url + "/weights_digest", timeout=30).json()["w"] == float(named["w"].double().sum())
        c = workers(b.url, colocated=True)
        c.update_weights(states, 9)
        got = httpx.get(b.url + "/weights_digest", timeout=30).json()
        assert got["_version"] == "9" and b.stats()["groups"] == []  # tensors, no broadcast group
        with pytest.raises(ValueError, match="every TP / PP rank"):
            c.update_weights(states[:1], 10)


def test_sampling_and_sampling_params_are_read_alike(workers):
    assert sampling.sglang_params({"id": "a", "target_len": 9, "sampling": {"temperature": 0.7}}) == \
        {"temperature": 0.7, "max_new_tokens": 9}
    assert sampling.merged({"sampling_params": {"temperature": 0.5}}) == {"temperature": 0.5}
    with pytest.raises(sampling.SamplingConflict, match=r"sampling.temperature = 0.7 but sampling_params.temperature = 0"):
        sampling.merged({"id": "a", "sampling": {"temperature": 0.7}, "sampling_params": {"temperature": 0}})
    from executor.workers.engine import RolloutEngine

    e = RolloutEngine("e", 1, lambda *a: True, {})
    e.admit([{"id": "x", "prompt": [1], "seed": 1, "target_len": 4, "sampling_params": {"temperature": 0.9}}])
    assert e.pending[0].sampling == {"temperature": 0.9}  # tinylm's temperature from SGLang's name
    with StandIn() as a:
        coord = Coord()
        w = workers(a.url, coord)
        w.admit([{"id": "s", "prompt": [3], "target_len": 30, "sampling": {"max_new_tokens": 7}}])
        _wait_for(lambda: "s" in coord.done, "the request to finish")
        assert coord.done["s"] == reference([3], 7)  # the `sampling` setting reached SGLang


def test_launcher_starts_one_server_per_engine_on_its_gpus_and_keeps_the_router_current(tmp_path):
    with assigned_gpus_error():
        assigned_gpus({"gpu_ids": [0]}, {"id": "w", "gpus": 2})
    with StandIn(make_router_app()) as router, contextlib.ExitStack() as stack:
        made = []
        for i, gpus in enumerate((["2", "3"], ["5", "6"])):
            cfg = {"router_url": router.url, "launch": {"model_path": "/models/Qwen2.5-3B-Instruct", "gpu_ids": gpus,
                                                        "cmd": STANDIN_CMD, "deterministic": True, "log_dir": str(tmp_path),
                                                        "startup_timeout_s": 300}}
            w = SGLangWorker(f"job/rollout/{i}", 1, Coord(), cfg, worker={"id": f"job/rollout/{i}", "gpus": 2})
            stack.callback(w.close)
            made.append(w)
        urls = [w.url() for w in made]
        assert len(set(urls)) == 2
        for w, gpus in zip(made, (["2", "3"], ["5", "6"])):
            info = w.engine.server_info()
            assert info["cuda_visible_devices"] == ",".join(gpus) and info["tp_size"] == 2
            assert info["model_path"] == "/models/Qwen2.5-3B-Instruct"
            assert "--enable-deterministic-inference" in info["extra_args"]
        assert router.app.state.urls == urls
        made[0].drain()
        assert router.app.state.urls == urls[1:]  # a draining engine gets no new requests
        made[0].undrain()
        assert sorted(router.app.state.urls) == sorted(urls)
        procs = [w.server.proc for w in made]
        made[0].close()
        assert procs[0].poll() is not None and router.app.state.urls == urls[1:]
    assert all(p.poll() is not None for p in procs)  # no server outlives its worker
    assert router.app.state.urls == []


@contextlib.contextmanager
def assigned_gpus_error():
    with pytest.raises(ValueError, match="exactly the worker's GPUs"):
        yield


def test_a_server_that_dies_at_start_up_is_reported_with_its_log(tmp_path):
    cfg = {"launch": {"model_path": "m", "cmd": [sys.executable, "-c", "import sys; print('no CUDA'); sys.exit(3)"],
                      "log_dir": str(tmp_path), "gpu_ids": []}}
    with pytest.raises(SGLangError, match="exited with status 3.*no CUDA"):
        SGLangWorker("w", 1, Coord(), cfg)


def test_megatron_weights_reach_sglang_under_hugging_face_names(workers):
    """A megatron trainer's TP2 states, assembled and renamed: Megatron's fused QKV is per query
    group [its query heads, its key head, its value head]; Hugging Face keeps q, k, v apart."""
    from executor.workers.hf_names import fuse_qkv, split_qkv
    from executor.workers.megatron_trainer import MegatronRank

    heads, kv, hd = 4, 2, 8
    q = torch.arange(heads * hd, dtype=torch.float32).repeat_interleave(3).view(heads * hd, 3)  # row i: value i
    k, v = -1 - torch.arange(kv * hd * 3, dtype=torch.float32).view(kv * hd, 3), 1000 + torch.arange(kv * hd * 3.0).view(kv * hd, 3)
    fused = fuse_qkv(q, k, v, heads, kv, hd)
    group1 = fused[(heads // kv + 2) * hd:]  # query group 1: query heads 2, 3, then key head 1, then value head 1
    assert torch.equal(group1[: 2 * hd], q[2 * hd:]) and torch.equal(group1[2 * hd: 3 * hd], k[hd:]) and torch.equal(group1[3 * hd:], v[hd:])
    assert all(torch.equal(a, b) for a, b in zip(split_qkv(fused, heads, kv, hd), (q, k, v)))
    model = {"hidden": 32, "ffn": 64, "layers": 2, "vocab": 64, "heads": heads, "kv_heads": kv, "seed": 5}
    ranks = [MegatronRank(f"t{r}", 1, "job/trainer", {"tp": 2}, r, model, lambda *a: True) for r in range(2)]
    with StandIn() as a:
        w = workers(a.url, weight_sync_backend="gloo", weight_names="hf")
        w.model = model
        w.update_weights([r.state() for r in ranks], 1)
        got = httpx.get(a.url + "/weights_digest", timeout=30).json()
    want = {"model.embed_tokens.weight", "model.norm.weight", "lm_head.weight"} | {
        f"model.layers.{i}.{n}" for i in range(2) for n in (
            "input_layernorm.weight", "post_attention_layernorm.weight", "self_attn.q_proj.weight", "self_attn.k_proj.weight",
            "self_attn.v_proj.weight", "self_attn.q_proj.bias", "self_attn.k_proj.bias", "self_attn.v_proj.bias",
            "self_attn.o_proj.weight", "mlp.gate_proj.weight", "mlp.up_proj.weight", "mlp.down_proj.weight")}
    assert set(got) - {"_version"} == want


def test_a_worker_the_router_refuses_stops_the_server_it_launched(tmp_path, monkeypatch):
    import executor.workers.sglang_worker as sw

    cfg = {"router_url": "http://127.0.0.1:9", "launch": {"model_path": "m", "gpu_ids": ["1"], "cmd": STANDIN_CMD,
                                                           "log_dir": str(tmp_path), "startup_timeout_s": 300}}
    made = []
    real = sw.launch_server
    monkeypatch.setattr(sw, "launch_server", lambda worker, launch: made.append(real(worker, launch)) or made[-1])
    with pytest.raises(SGLangError, match="router .* refused add_worker"):
        SGLangWorker("w", 1, Coord(), cfg)
    assert made and made[0].proc.poll() is not None  # the server did not outlive the failed start


def test_an_abort_the_server_does_not_confirm_fails_the_drain_and_hands_nothing_over(workers):
    with StandIn() as a:
        coord = Coord()
        w = workers(a.url, coord, drain_grace_s=0.2, abort_confirm_s=0.5)
        a.app.state.st["paused"] = "abort"
        w.admit([{"id": "late", "prompt": [4, 5], "target_len": 6}])
        _wait_for(lambda: a.stats()["at_gate"] == 1, "the late request at the gate")
        a.app.state.st["registered"].clear()  # a server that lost track of it: the abort reaches nothing
        with pytest.raises(SGLangError, match="late .* not confirmed within 0.5 s.*not handed over"):
            w.drain()
        assert w.export() == []  # never offered to another engine while it may still run here
        w.undrain()  # the rolled-back drain: generation continues and the request ends here, once
        _wait_for(lambda: "late" in coord.done, "the request to finish where it was")
        assert coord.done["late"] == reference([4, 5], 6)
