"""The real model workers (impl ``tinylm``): a small transformer decoded with a KV cache and
trained with AdamW on a GRPO loss, sharded by TP/DP, moved by the three migrations.

The central claim, checked end to end on the sim backend: with greedy decoding or seeded
sampling, outputs and logprobs after a workload migration mid-generation, and weights and
optimizer state after a P2P reshard (TP 2 -> TP 1 x DP 2, through torch.distributed.checkpoint)
or a reboot (through the checkpoint store), are bit-identical to a run with no migration — and
stay so when training goes on in the new layout. The fault matrix reruns the same checks after a
fault at a step of each migration (every step with ``RL_PLANNER_SLOW=1``).
"""

from __future__ import annotations

import os

import pytest
import torch

from executor import faultlib, router
from executor.backends.base import observe
from executor.backends.sim import SimBackend
from executor.controller import Executor
from executor.diff import diff
from executor.journal import Journal
from executor.workers import registry, shardstate
from executor.workers import tinylm as lm
from executor.workers.lm_engine import LMEngine, reference_output
from executor.workers.lm_trainer import LMTrainerRank
from executor.workers.protocol import missing_methods

SLOW = os.environ.get("RL_PLANNER_SLOW") == "1"
MODEL = faultlib.MODEL
ACCEPT = lambda m, *a: None if m == "get_checkpoint" else True  # noqa: E731 - a coordinator that grants everything


def _ranks(layout: dict) -> list[LMTrainerRank]:
    from executor.state import Layout

    return [LMTrainerRank(f"r{i}", 1, "job/trainer", layout, i, MODEL, ACCEPT) for i in range(Layout(**layout).world)]


def _trained(layout: dict, steps: int) -> tuple[list[LMTrainerRank], dict]:
    rs = _ranks(layout)
    for s in range(steps):
        assert all(LMTrainerRank.train_group(rs, s))
    return rs, shardstate.assemble([r.state() for r in rs])


_REF: dict = {}


def reference_state(steps: int) -> dict:
    """The trainer's state after ``steps`` steps of a run that never migrates (TP 2, as the base plan)."""
    if steps not in _REF:
        _REF[steps] = _trained({"tp": 2}, steps)[1]
    return _REF[steps]


# ----------------------------------------------------------------------------- the model
def test_kv_cache_decoding_matches_a_full_forward():
    s = lm.spec_of(MODEL)
    req = {"id": "a", "prompt": list(range(3, 40, 3)), "seed": 1, "target_len": 10}
    out, lps = reference_output(MODEL, req)
    toks = torch.tensor([[t % s.vocab for t in req["prompt"]] + out])
    with torch.no_grad():
        full = torch.log_softmax(lm.forward(s, lm.full_params(s), toks)[0], dim=-1)
    p0 = len(req["prompt"])
    assert [int(full[p0 - 1 + i].argmax()) for i in range(len(out))] == out  # greedy = argmax of the full forward
    assert lps == pytest.approx([float(full[p0 - 1 + i, out[i]]) for i in range(len(out))], abs=1e-4)
    e = LMEngine("e", 1, ACCEPT, {}, model=MODEL)
    e.admit([{**req, "target_len": 50}])
    for _ in range(5):
        e.step()
    assert e.load()["kv_cache_tokens"] == p0 + 5  # the cache holds the prompt and every decoded token


def test_training_is_bit_identical_in_every_tp_dp_layout_and_changes_the_weights():
    ref = reference_state(2)
    for layout in ({"tp": 1}, {"tp": 4}, {"tp": 2, "dp": 2}):
        got = _trained(layout, 2)[1]
        assert faultlib.same_state(ref, got) == [], layout
    init = shardstate.assemble([r.state() for r in _ranks({"tp": 1})])
    moved = [k for k in ref if k.startswith("param/") and not torch.equal(ref[k], init[k])]
    assert len(moved) == len([k for k in ref if k.startswith("param/")])  # AdamW changed every parameter
    assert all(float(ref[k].abs().max()) > 0 for k in ref if k.startswith("exp_avg_sq/"))


def test_dcp_reshards_weights_and_optimizer_state_between_layouts(tmp_path):
    old, ref = _trained({"tp": 2, "dp": 2}, 1)
    dirs = []
    for r in old:
        if r.layout.coords(r.rank)[1] == 0:  # DP replica 0 writes, as in Megatron
            dirs.append(str(tmp_path / f"rank{r.rank}"))
            assert r.save_shards(dirs[-1]) > 0
    for layout in ({"tp": 4}, {"tp": 1, "dp": 2}):
        new = [LMTrainerRank(f"n{i}", 1, "job/trainer", layout, i, MODEL, ACCEPT, init="empty") for i in range(len(_ranks(layout)))]
        for r in new:
            r.load_shards(dirs)
        assert faultlib.same_state(ref, shardstate.assemble([r.state() for r in new])) == [], layout
        assert {r.step_no for r in new} == {1}
    lone = LMTrainerRank("x", 1, "job/trainer", {"tp": 1}, 0, MODEL, ACCEPT, init="empty")
    with pytest.raises(RuntimeError, match="unfilled"):
        lone.load_shards(dirs[:1])  # TP index 1's half is missing: refused, not half-loaded


def test_a_request_resumed_elsewhere_ends_bit_identical(tmp_path):
    for sampling in ({}, {"temperature": 0.8}):
        req = {"id": "q", "prompt": [7, 300, 12, 9] * 4, "seed": 42, "target_len": 12, "sampling": sampling}
        out, lps = reference_output(MODEL, req)
        done = {}
        e = LMEngine("e2", 1, lambda m, *a, done=done: done.setdefault(m, a) or True, {}, model=MODEL)
        e.admit([{**req, "output": out[:5]}])  # handed over after 5 tokens: re-prefill, then continue
        while e.pending or e.running:
            e.step()
        assert done["complete"][3] == out and done["complete"][4]["logprobs"] == lps
        assert e.prefill_tokens == len(req["prompt"]) + 5


def test_weight_sync_from_any_tp_layout():
    ranks, full = _trained({"tp": 2}, 1)
    e = LMEngine("e", 1, ACCEPT, {}, model=MODEL)
    assert e.update_weights([r.state() for r in ranks], 7) == 7
    for p in lm.param_specs(lm.spec_of(MODEL)):
        got = torch.cat(e.P[p.name], dim=p.split) if p.split is not None else e.P[p.name][0]
        assert torch.equal(got, full[f"param/{p.name}"])
    with pytest.raises(ValueError, match="lacks parameter"):
        e.update_weights([ranks[0].state()], 8)


# ----------------------------------------------------------------------------- protocol and registry
def test_registry_builtins_follow_the_protocol_and_frameworks_can_register(monkeypatch):
    assert {"toy", "tinylm"} <= set(registry.names())
    args = {"worker": {"id": "w", "component": "j/t", "index": 0}, "role": "trainer", "layout": {"tp": 1, "pp": 1, "dp": 1},
            "model": MODEL, "impl": "tinylm"}
    from executor.workers.factory import make_worker

    for impl in ("tinylm", "toy"):
        assert missing_methods(make_worker({**args, "impl": impl}, 1, ACCEPT), "trainer") == [], impl
        assert missing_methods(make_worker({**args, "impl": impl, "role": "rollout"}, 1, ACCEPT), "rollout") == [], impl
        assert missing_methods(make_worker({**args, "impl": impl, "role": "service"}, 1, ACCEPT), "service") == [], impl
    assert missing_methods(object(), "rollout")  # the check can fail
    made = []
    impl = registry.Impl("mine", rollout=lambda a, e, c, f: made.append(a["worker"]["id"]) or "engine")
    registry.register(impl)
    try:
        assert make_worker({**args, "role": "rollout", "impl": "mine"}, 1, ACCEPT) == "engine" and made == ["w"]
        with pytest.raises(ValueError, match="has no trainer worker"):
            make_worker({**args, "impl": "mine"}, 1, ACCEPT)
        with pytest.raises(ValueError, match="registered already"):
            registry.register(registry.Impl("mine"))
    finally:
        registry.unregister("mine")

    class EP:  # an installed package's entry point in group rl_planner.workers
        name, value = "fromep", "pkg:IMPL"

        def load(self):
            return lambda: registry.Impl("ignored-name", service=lambda *a: "svc")

    monkeypatch.setattr(registry, "_loaded_entry_points", False)
    monkeypatch.setattr("importlib.metadata.entry_points", lambda group: [EP()] if group == registry.GROUP else [])
    try:
        assert registry.get("fromep").factory("service")(args, 1, ACCEPT, False) == "svc"
    finally:
        registry.unregister("fromep")
    body = faultlib.base_body("nosuch")
    with pytest.raises(Exception, match="not a registered worker implementation"):
        faultlib.target(body)


# ----------------------------------------------------------------------------- migrations, no fault
def _settle(b, n: int) -> None:
    for _ in range(400):
        s = b.coord("ledger_summary")
        if s["done"] == s["requests"] == n:
            return
        b.tick(10)
    raise AssertionError(f"requests did not finish: {b.coord('ledger_summary')}")


@pytest.mark.parametrize("kind", faultlib.MIGRATIONS)
def test_migration_is_bit_identical_to_no_migration(kind):
    b = SimBackend(faultlib.NODES, ticks_per_call=1)
    j = Journal(":memory:")
    assert Executor(b, j).apply(diff(observe(b), faultlib.target(faultlib.base_body("tinylm"))).steps, "base").status == "done"
    reqs = router.make_requests(faultlib.ROLLOUT, 10, prompts=3, prompt_len=12, min_len=8, max_len=16, seed=5)
    for i, r in enumerate(reqs):
        r["sampling"] = {"temperature": 0.0 if i % 2 else 0.7}
    router.submit(b, faultlib.ROLLOUT, reqs)
    for s in range(2):
        assert all(b.train_step(faultlib.TRAINER, s))
    b.tick(3)
    released = [r["id"] for r in b.coord("records") if r["component"] == faultlib.ROLLOUT and r["node"] == "b"]
    mid = {r["id"] for r in b.coord("owned_by", released) if r["output"]}
    res = Executor(b, j).apply(diff(observe(b), faultlib.target(faultlib.migration_body(kind, "tinylm"))).steps, kind)
    assert res.status == "done"
    ids = b.coord("active_set", faultlib.TRAINER)
    state, step, lost = faultlib.full_state(b, ids)
    assert lost == [] and step == 2 and faultlib.same_state(reference_state(2), state) == []
    assert all(b.train_step(faultlib.TRAINER, 2))  # training goes on in the new layout ...
    state, step, _ = faultlib.full_state(b, ids)
    assert step == 3 and faultlib.same_state(reference_state(3), state) == []  # ... exactly as if it never moved
    _settle(b, len(reqs))
    ref = faultlib.expected("tinylm")
    recs = b.coord("request_records")
    assert [r["id"] for r in recs if r["output"] != ref(r)[0] or r["meta"]["logprobs"] != ref(r)[1]] == []
    assert all(r["done"] and not r.get("cancelled") and r["finished_by"] for r in recs)
    finished = [i for w in b.workers.values() if w.args["role"] == "rollout" for i in w.obj.finished]
    assert len(finished) == len(set(finished))  # no engine finished a request twice
    if kind == "workload":
        moved = {r["id"] for r in recs if r["handoffs"]}
        assert mid and mid <= moved  # requests in flight on the released engines moved mid-generation


def test_sim_state_file_keeps_real_workers(tmp_path):
    path = tmp_path / "sim.db"
    b = SimBackend(faultlib.NODES, state_path=path)
    Executor(b, Journal(":memory:")).apply(diff(observe(b), faultlib.target(faultlib.base_body("tinylm"))).steps, "base")
    assert all(b.train_step(faultlib.TRAINER, 0))
    b.close()
    b2 = SimBackend(faultlib.NODES, state_path=path)
    ids = b2.coord("active_set", faultlib.TRAINER)
    assert faultlib.same_state(reference_state(1), faultlib.full_state(b2, ids)[0]) == []
    assert all(b2.train_step(faultlib.TRAINER, 1))
    assert faultlib.same_state(reference_state(2), faultlib.full_state(b2, ids)[0]) == []
    b2.close()


# ----------------------------------------------------------------------------- faults
def _fault_cases():
    if SLOW:  # every fault kind at every step of every migration (rotating point)
        return faultlib.rotating_cases("tinylm")
    picks = {("workload", "kill_controller"), ("p2p", "kill_destination"), ("reboot", "kill_source")}
    return [c for c in faultlib.representative_cases("tinylm") if (c.migration, c.fault) in picks]


@pytest.mark.parametrize("case", _fault_cases(), ids=lambda c: c.id)
def test_fault_with_real_workers(case):
    out = faultlib.run_case(case, lambda: SimBackend(faultlib.NODES, ticks_per_call=1), requests=12, prompt_len=12)
    assert out.fired, f"the fault never fired: {case.id}"
    assert out.problems == [], out
    assert out.requests == 12
    if case.fault == "kill_controller":
        assert out.resumed and out.status == "done"


def test_the_worked_example_in_docs_integration_runs():
    """docs/integration.md's RL loop, executed as written (a framework author can follow it)."""
    import re
    from pathlib import Path

    text = (Path(__file__).resolve().parents[2] / "docs" / "integration.md").read_text()
    blocks = [b for b in re.findall(r"```python\n(.*?)```", text, re.S) if "def target(" in b]
    assert len(blocks) == 1
    ns: dict = {}
    exec(compile(blocks[0], "docs/integration.md", "exec"), ns)
    b = ns["backend"]
    assert [r["layout"] for r in b.coord("records") if r["component"] == "job/trainer"] == [{"tp": 1, "pp": 1, "dp": 2}] * 2
    summ = b.coord("ledger_summary")
    assert summ["done"] == summ["requests"] == 16 and summ["handoffs"] >= 1


@pytest.mark.skipif(os.environ.get("RL_PLANNER_RAY_FAULTS") != "1", reason="set RL_PLANNER_RAY_FAULTS=1 (a local Ray cluster)")
def test_real_workers_on_ray_migrate_bit_identically():
    """The three migrations with the real model workers on a local multi-node Ray cluster (one
    process per worker; TP and DP groups over gloo; the P2P copy through DCP files)."""
    pytest.importorskip("ray")
    from executor.backends.base import Deadlines
    from executor.backends.ray import RayBackend

    b = RayBackend(local_nodes=faultlib.NODES, deadlines=Deadlines(start_s=120, call_s=60, reshard_s=120, stop_s=30))
    try:
        for kind in faultlib.MIGRATIONS:
            b.reset()
            case = faultlib.Case(kind, "kill_controller", "stop", 99, "after", "tinylm")  # a fault that never fires
            out = faultlib.run_case(case, lambda: b, requests=8, prompt_len=12, settle_s=120)
            assert out.problems == [] and out.status == "done", out
            assert out.layout == ("old" if kind == "workload" else "new"), out
    finally:
        b.reset()
        b.close()
